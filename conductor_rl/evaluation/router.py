"""The ``router`` baseline: a text classifier that sends each question to one worker.

In the spirit of RouterDC (a learned question → best-model router, one of the
paper's baselines), but built from a well-kept library instead of a contrastive
encoder: scikit-learn's TF-IDF features and a logistic regression in one
`Pipeline`, trained on pilot verdicts (every worker on a set of training
questions).

Decisions:

- A question's label is its best worker (`baselines.best_worker`: most often
  correct, ties to the cheaper worker); the pilot evidence may be verdict
  lists, solved flags or shares of correct repeats, per worker. A question no worker solved teaches
  nothing about whom to ask and is left out (`Router.left_out` counts them).
- Labels are worker *names*, so a saved router still means the same workers;
  `route` returns indices into the `worker_names` it was trained with.
- One class in the training labels (a single worker was best everywhere): the
  router always picks that worker, as logistic regression cannot fit one class.
- Features: word 1-2-grams with sublinear term frequency; `C` = 1 and at most
  2000 solver iterations. A pilot of a few hundred questions fits in a second.
- `save`/`load` pickle our own trained object (pickle runs code on load: load
  only router files you wrote). The file carries a format number and the
  worker names.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline

from conductor_rl.atomic_files import write_atomically
from conductor_rl.evaluation.baselines import Judged, best_worker

if TYPE_CHECKING:
    from conductor_rl.config import Price

__all__ = ["Router", "RouterError"]

FORMAT = 1


class RouterError(ValueError):
    """The router cannot be trained or loaded; the message says what to do."""


def _pipeline() -> Pipeline:
    return Pipeline(
        [
            ("tfidf", TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, max_features=50_000)),
            ("classify", LogisticRegression(C=1.0, max_iter=2000)),
        ]
    )


class Router:
    """Routes a question text to the index of one worker."""

    def __init__(self) -> None:
        self.worker_names: list[str] = []
        self.pipeline: Pipeline | None = None
        self.constant: str | None = None  # the only class, when training saw one
        self.trained_on = 0
        self.left_out = 0

    @classmethod
    def fit(
        cls,
        texts: Sequence[str],
        verdicts_per_question: Sequence[Sequence[Judged] | Mapping[str, Judged]],
        worker_names: Sequence[str],
        prices: Sequence[float | Price],
    ) -> Router:
        """A router trained on pilot data: `verdicts_per_question[q]` is each worker's
        evidence on question q (`baselines.Judged`), in the order of `worker_names` or
        by worker name; `prices` has one price per worker (a number or a `Price`)."""
        if len(texts) != len(verdicts_per_question):
            raise RouterError(
                f"{len(texts)} texts but verdicts for {len(verdicts_per_question)} questions: "
                "pass one verdict list per question"
            )
        names = list(worker_names)
        labels = []
        for verdicts in verdicts_per_question:
            if isinstance(verdicts, Mapping):  # by worker name; a worker it does not name has no verdict
                verdicts = [verdicts.get(name) for name in names]
            labels.append(best_worker(verdicts, prices))
        kept = [(text, names[w]) for text, w in zip(texts, labels) if w is not None]
        if not kept:
            raise RouterError(
                f"no worker solved any of the {len(texts)} pilot questions, so the router has "
                "nothing to learn: run a larger pilot or one with easier questions"
            )
        router = cls()
        router.worker_names, router.trained_on, router.left_out = names, len(kept), len(texts) - len(kept)
        classes = [label for _, label in kept]
        if len(set(classes)) == 1:
            router.constant = classes[0]
        else:
            router.pipeline = _pipeline().fit([t for t, _ in kept], classes)
        return router

    def route(self, texts: Sequence[str]) -> list[int]:
        """The index (into `worker_names`) of the worker each question goes to."""
        if self.constant is None and self.pipeline is None:
            raise RouterError("the router is not trained: make it with Router.fit(...) or Router.load(path)")
        if not texts:
            return []
        if self.constant is not None:
            labels = [self.constant] * len(texts)
        else:
            assert self.pipeline is not None  # one of the two is set: checked above
            labels = self.pipeline.predict(list(texts))
        return [self.worker_names.index(str(label)) for label in labels]

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "format": FORMAT,
            "worker_names": self.worker_names,
            "pipeline": self.pipeline,
            "constant": self.constant,
            "trained_on": self.trained_on,
            "left_out": self.left_out,
        }
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
        for name in ("worker_names", "pipeline", "constant", "trained_on", "left_out"):
            setattr(router, name, state[name])
        return router
