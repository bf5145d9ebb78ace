"""The ``router`` baseline: predicts each worker's chance of success on a question and sends
the question to the worker whose chance, less its cost, is best.

In the spirit of RouterDC (a learned question → model router, one of the paper's baselines),
built from a well-kept library instead of a contrastive encoder: scikit-learn's TF-IDF
features and one logistic regression per worker, trained on pilot verdicts (every worker,
several times, on a set of training questions).

Decisions:

- What is learnt is each worker's chance of success, not a best-worker label: one verdict
  per question and worker makes "the best worker" mostly noise (a strong worker misses some
  questions a weak one gets right by luck), while every verdict is a fair sample of the chance.
  The evaluation's own pilot gives `evaluate.router_pilot_repeats` verdicts per question and
  worker; fewer are accepted (a mixture's pilot gives one), the estimate is only noisier.
- Features: TF-IDF word 1-2-grams with sublinear term frequency, fitted on the pilot's
  questions (each once). Model: per worker, a logistic regression (`C` = 1, at most 2000
  solver iterations) on every (question, verdict correct?) pair, repeats as sample
  weights; a flag counts as one verdict, a share of correct repeats as one verdict split
  between the two classes. ``error`` verdicts are not verdicts. The penalty stays at `C` = 1:
  on the embedded pool's samples a weaker one predicted the pilot's own kind of question closer
  to the truth but routed held-out questions worse; the price is chances pulled towards each
  worker's overall rate, which weighs once λ > 0.
- A worker whose verdicts are all of one class predicts its observed rate (0 or 1) as a
  constant, since logistic regression cannot fit one class (so does every worker when the
  questions hold no word to learn from); a worker with no verdict at all is never picked; a
  pilot in which no worker was ever right is refused (nothing to learn).
- The pick maximises the expected reward less the cost penalty, `optimal.value_of`:
  0.5 + 0.5 × predicted success − λ × expected cost of one call, with λ =
  `evaluate.cost_weight` (reward per USD, the weight `oracle-single` and `optimal` use, so
  the bound and the router optimise one objective). A call's expected cost is the worker's
  mean dollars per call in the pilot's records, 0 where there are none. Ties (to rounding)
  go to the cheaper worker by that cost, then by list price, then the lower index.
- Left out: the question's domain or difficulty as features (a router sees only the text,
  as a deployed one would), calibration beyond the logistic model, and any plan but one call.
- Labels are worker *names*, so a saved router still means the same workers; `route`
  returns indices into the `worker_names` it was trained with.
- `save`/`load` pickle our own trained object (pickle runs code on load: load only router
  files you wrote). The file carries a format number; another format is refused.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from conductor_rl.atomic_files import write_atomically
from conductor_rl.evaluation.baselines import Judged, correct_tally, price_key
from conductor_rl.evaluation.optimal import value_of

if TYPE_CHECKING:
    from conductor_rl.config import Price

__all__ = ["Router", "RouterError"]

FORMAT = 2
_TIE = 1e-12
_STATE = (
    "worker_names",
    "vectorizer",
    "classifiers",
    "constants",
    "call_costs",
    "prices",
    "cost_weight",
    "trained_on",
    "left_out",
    "verdicts",
)


class RouterError(ValueError):
    """The router cannot be trained or loaded; the message says what to do."""


def _classifier() -> LogisticRegression:
    return LogisticRegression(C=1.0, max_iter=2000)


Evidence = Sequence[Judged] | Mapping[str, Judged]
# One worker's training rows: the index of each row's question (in the kept questions), label, weight.
_Rows = tuple[list[int], list[int], list[float]]


def _training_rows(
    texts: Sequence[str], evidence_per_question: Sequence[Evidence], names: Sequence[str]
) -> tuple[list[str], dict[str, _Rows]]:
    """The questions with any verdict, and per worker its (question, correct?) rows, repeats as weights."""
    rows: dict[str, _Rows] = {n: ([], [], []) for n in names}
    kept: list[str] = []
    for text, evidence in zip(texts, evidence_per_question):
        if isinstance(evidence, Mapping):  # by worker name; a worker it does not name has no verdict
            evidence = [evidence.get(name) for name in names]
        tallies = [correct_tally(judged) for judged in evidence]
        if all(t is None for t in tallies):
            continue
        kept.append(text)
        for name, tally in zip(names, tallies):
            if tally is None:
                continue
            questions, labels, weights = rows[name]
            for label, weight in ((1, tally[0]), (0, tally[1] - tally[0])):
                if weight > 0:
                    questions.append(len(kept) - 1)
                    labels.append(label)
                    weights.append(float(weight))
    return kept, rows


class Router:
    """Routes a question text to the index of one worker."""

    def __init__(self) -> None:
        self.worker_names: list[str] = []
        self.vectorizer: TfidfVectorizer | None = None
        self.classifiers: dict[str, LogisticRegression] = {}  # workers whose verdicts hold both classes
        self.constants: dict[str, float] = {}  # workers whose verdicts hold one class: their rate
        self.call_costs: list[float] = []  # expected USD of one call, per worker
        self.prices: list[float] = []  # list prices (`baselines.price_key`), for ties
        self.cost_weight = 0.0
        self.trained_on = 0  # questions with a verdict
        self.left_out = 0  # questions without any
        self.verdicts = 0.0  # verdicts in all (a share counts as one)

    @classmethod
    def fit(
        cls,
        texts: Sequence[str],
        verdicts_per_question: Sequence[Evidence],
        worker_names: Sequence[str],
        prices: Sequence[float | Price],
        call_costs: Sequence[float | None] | None = None,
        cost_weight: float = 0.0,
    ) -> Router:
        """A router trained on pilot data: `verdicts_per_question[q]` is each worker's evidence on
        question q (`baselines.Judged`: verdicts over repeats, one verdict, a flag or a share), in
        the order of `worker_names` or by worker name; `prices` one list price per worker (for
        ties); `call_costs` each worker's mean USD per pilot call (None: unknown, counted as 0);
        `cost_weight` the reward per USD the pick pays for it."""
        names = list(worker_names)
        if len(texts) != len(verdicts_per_question):
            raise RouterError(
                f"{len(texts)} texts but verdicts for {len(verdicts_per_question)} questions: "
                "pass one verdict list per question"
            )
        costs = list(call_costs) if call_costs is not None else [None] * len(names)
        if len(prices) != len(names) or len(costs) != len(names):
            raise RouterError(
                f"{len(names)} workers but {len(prices)} prices and {len(costs)} call costs: pass one per worker"
            )
        kept, rows = _training_rows(texts, verdicts_per_question, names)
        router = cls()
        router.worker_names, router.trained_on, router.left_out = names, len(kept), len(texts) - len(kept)
        router.call_costs = [0.0 if c is None else float(c) for c in costs]
        router.prices, router.cost_weight = [price_key(p) for p in prices], float(cost_weight)
        router.verdicts = sum(sum(w) for _, _, w in rows.values())
        if not any(1 in labels for _, labels, _ in rows.values()):
            solved = "has no verdict on" if not kept else "solved"
            raise RouterError(
                f"no worker {solved} any of the {len(texts)} pilot questions, so the router has "
                "nothing to learn: run a larger pilot or one with easier questions"
            )
        router._fit_models(kept, rows)
        return router

    def _fit_models(self, kept: Sequence[str], rows: Mapping[str, _Rows]) -> None:
        """One model per worker with verdicts of both classes, a constant rate for the others."""
        unique = list(dict.fromkeys(kept))
        row_of = {text: i for i, text in enumerate(unique)}
        features = None
        for name, (questions, labels, weights) in rows.items():
            if not labels:
                continue  # no evidence: never picked
            if features is None and len(set(labels)) > 1:
                self.vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, max_features=50_000)
                try:
                    features = self.vectorizer.fit_transform(unique)
                except ValueError:  # no word of two letters or more: the model could learn only the rate
                    self.vectorizer = None
            if len(set(labels)) == 1 or features is None:
                self.constants[name] = sum(w for label, w in zip(labels, weights) if label) / sum(weights)
                continue
            x = features[[row_of[kept[q]] for q in questions]]
            self.classifiers[name] = _classifier().fit(x, labels, sample_weight=weights)

    def predict(self, texts: Sequence[str]) -> list[list[float | None]]:
        """Per question, each worker's predicted chance of success (None: the worker had no verdict)."""
        if not self.constants and not self.classifiers:
            raise RouterError("the router is not trained: make it with Router.fit(...) or Router.load(path)")
        if not texts:
            return []
        columns: list[list[float | None]] = []
        features = self.vectorizer.transform(list(texts)) if self.vectorizer is not None else None
        for name in self.worker_names:
            if name in self.constants:
                columns.append([self.constants[name]] * len(texts))
            elif name in self.classifiers:
                model = self.classifiers[name]
                right = list(model.classes_).index(1)
                columns.append([float(p) for p in model.predict_proba(features)[:, right]])
            else:
                columns.append([None] * len(texts))
        return [list(row) for row in zip(*columns)]

    def route(self, texts: Sequence[str]) -> list[int]:
        """The index (into `worker_names`) of the worker each question goes to."""
        return [self._pick(chances) for chances in self.predict(texts)]

    def _pick(self, chances: Sequence[float | None]) -> int:
        values = {i: value_of(p, self.call_costs[i], self.cost_weight) for i, p in enumerate(chances) if p is not None}
        best = max(values.values())
        tied = [i for i, v in values.items() if v >= best - _TIE]
        return min(tied, key=lambda i: (self.call_costs[i], self.prices[i], i))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        state: dict[str, Any] = {"format": FORMAT, **{name: getattr(self, name) for name in _STATE}}
        write_atomically(path, lambda out: pickle.dump(state, out), binary=True)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Router:
        """A router written by `save` (our own pickle: never load one from elsewhere)."""
        try:
            with open(path, "rb") as file:
                state = pickle.load(file)  # noqa: S301 - our own file, see the module docstring
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as err:
            raise RouterError(f"cannot read the router file {path} ({err}); delete it to train a new one") from err
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise RouterError(f"{path} is not a router file of format {FORMAT}; delete it to train a new one")
        router = cls()
        for name in _STATE:
            setattr(router, name, state[name])
        return router
