"""The GRPO learner: one data-parallel rank of a DeepSpeed ZeRO engine.

Each rank gets the whole batch, trains on its share of the rows (rows r, r+W,
...), and DeepSpeed averages gradients across ranks. The loss is normalised by
the whole batch's token count (or completion count), times the world size to
undo DeepSpeed's averaging, so W ranks × micro-batches give the gradient of
one big batch. Gradient accumulation is driven by hand (DeepSpeed's own needs
a fixed batch shape, and the number of kept rollouts varies per iteration):
every rank pads to the same number of micro-batches so collectives line up.

GRPO's "old" log-probs are by default the learner's own before its one step
on the batch: the weights that sampled the batch are the weights that learn,
so the ratio is 1 and the step is the on-policy gradient, whatever the
sampler's arithmetic or its constrained-format mask made of its own log-probs.
Those are kept as a check (`StepStats.ratio_mean`), and, for rows an older
sampler drew (asynchronous training), they give the behaviour correction of
decoupled PPO (`grpo.behaviour_weights`). Where the sampler's are not the
policy's, the learner keeps the weights of its last `past_versions` steps and
recomputes a stale row's behaviour log-probs with the weights that sampled it
(learner.behaviour_logprobs); a row older than what it kept (the first steps
after a restart) is then learned as if on-policy.

The process group must exist before construction: `init_process_group` sets
it up (gloo on CPU, NCCL on GPU), from MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import torch

from conductor_rl.config import LearnerConfig
from conductor_rl.models import cache_dir, load_causal_lm, tell_deepspeed_the_accelerator
from conductor_rl.policy.grpo import behaviour_weights, grpo_loss
from conductor_rl.policy.learner_batch import RolloutBatch
from conductor_rl.policy.optimizer import learner_optimizer
from conductor_rl.policy.precision import bf16_is_fast


@dataclass(frozen=True)
class StepStats:
    loss: float
    grad_norm: float
    clip_fraction: float
    ratio_mean: float  # learner / sampler probability over loss tokens: 1 where they agree
    kl: float
    lr: float
    tokens: int  # completion tokens this rank trained on
    seconds: float
    behaviour_weight_mean: float = 1.0  # mean decoupled-PPO weight over stale rows' loss tokens (1: none)
    logprob_mean: float = 0.0  # the learner's log-prob of a loss token before the step (the warm start's fit)


def init_process_group(backend: str | None = None) -> None:
    """Join the torch.distributed group described by the environment."""
    if torch.distributed.is_initialized():
        return
    on_gpu = torch.cuda.is_available()
    tell_deepspeed_the_accelerator()
    import deepspeed

    backend = backend or ("nccl" if on_gpu else "gloo")
    # Any C++ op DeepSpeed compiles on first use is kept with our other caches.
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(cache_dir() / "torch_extensions"))
    if not on_gpu:
        # DeepSpeed's CPU backend compiles its shared-memory all-reduce when the group
        # starts (a C++ compiler and minutes on a small machine, on a user's first run);
        # only inference uses it, training reduces through torch.distributed (gloo).
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend=backend)


class FirstStep(NamedTuple):
    """What a batch's first step computed for a micro-batch, kept for its later ones (learner.epochs)."""

    old: torch.Tensor
    weights: torch.Tensor | None
    ref: torch.Tensor | None


def full_parameters(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Every parameter by name, tied ones under each name. A ZeRO-3 slice is
    gathered from the ranks while it is yielded (a collective: every rank must
    iterate, in step)."""
    for name, p in module.named_parameters(remove_duplicate=False):
        if hasattr(p, "ds_id"):
            import deepspeed

            with deepspeed.zero.GatheredParameters([p]):
                yield name, p.detach().clone()
        else:
            yield name, p.detach()


def lr_lambda(step: int, total_steps: int, warmup_ratio: float, min_ratio: float) -> float:
    """Linear warm-up, then cosine decay to min_ratio (multiplier of the base lr)."""
    warmup = max(1, math.ceil(total_steps * warmup_ratio)) if warmup_ratio > 0 else 0
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


class PolicyLearner:
    def __init__(self, model_name: str, config: LearnerConfig, total_steps: int, past_versions: int = 0) -> None:
        """`past_versions`: how many steps' weights to keep, to recompute the behaviour log-probs of
        rows that many versions stale (0: stale rows use the sampler's)."""
        import deepspeed

        if not torch.distributed.is_initialized():
            raise RuntimeError("call conductor_rl.policy.learner.init_process_group() before building a PolicyLearner")
        self.config = config
        self.rank, self.world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
        bf16 = config.precision == "bfloat16" or (config.precision == "auto" and bf16_is_fast())
        # On a CPU, bf16 is autocast around the forward pass (fp32 weights and optimizer):
        # faster only on CPUs that compute in bf16, and DeepSpeed's own bf16 mode needs a GPU.
        self.cpu_autocast = bf16 and not torch.cuda.is_available()
        bf16 = bf16 and not self.cpu_autocast
        model, self.tokenizer = load_causal_lm(model_name, "float32")
        if config.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        model.train()
        optimizer, self.head_rows = learner_optimizer(model, config)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: lr_lambda(step, total_steps, config.warmup_ratio, config.min_lr_ratio)
        )
        ds_config = {
            "train_micro_batch_size_per_gpu": config.micro_batch_size,
            "gradient_accumulation_steps": 1,  # accumulation is driven by hand, see the module docstring
            "gradient_clipping": config.grad_clip,
            "zero_optimization": {"stage": config.zero_stage},
            "bf16": {"enabled": bf16},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 10**9,
        }
        self.engine, _, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config
        )
        self.device = self.engine.device
        # The KL term's reference is the initial policy, frozen (only loaded when β > 0).
        self.reference = None
        if config.kl_beta > 0:
            self.reference = load_causal_lm(model_name, "float32")[0].to(self.device).eval().requires_grad_(False)
        if past_versions and config.zero_stage == 3:
            raise ValueError(
                "recomputing behaviour log-probs keeps whole weights per rank, which ZeRO-3 does not "
                "hold: use learner.zero_stage <= 2 or learner.behaviour_logprobs=sampler"
            )
        self.past_versions = past_versions
        self.past_weights: deque[list[torch.Tensor]] = deque()  # the weights before each recent step, newest first

    def train_step(self, batch: RolloutBatch, epochs: int = 1) -> StepStats:
        """`epochs` optimizer steps on the whole batch (every rank calls it with the same batch). After the
        first, the old log-probs and behaviour weights stay those of the weights before it (PPO's epochs):
        the clip bounds how far one batch moves the policy. Statistics are the first step's, but the clip
        fraction, which is the later steps' (0 in the first with learner.old_logprobs=learner)."""
        started = time.perf_counter()
        c = self.config
        # Contiguous blocks per rank: a question's completions stay together, so their prompt is shared.
        per_rank = math.ceil(len(batch.prompt_ids) / self.world_size)
        rows = list(range(self.rank * per_rank, min((self.rank + 1) * per_rank, len(batch.prompt_ids))))
        n_micro = max(1, math.ceil(per_rank / c.micro_batch_size))
        if c.aggregation == "token_mean":
            normalizer = float(sum(sum(batch.loss_mask(i)) for i in range(len(batch.completion_ids)))) / self.world_size
        else:
            normalizer = float(len(batch.completion_ids)) / self.world_size
        normalizer = max(normalizer, 1e-8)
        behaviour = self._behaviour_logprobs(batch, rows) if self.past_versions else None
        self._keep_weights()
        if self.head_rows is not None:
            self.head_rows.learn(batch.worker_tokens)
        totals = dict.fromkeys(("loss", "clip", "ratio", "kl", "weight", "lp"), 0.0) | {"tokens": 0, "stale_tokens": 0}
        proximal: dict[int, FirstStep] = {}  # per micro-batch, from the batch's first step
        later_clip, later_tokens, grad_norm = 0.0, 0, None
        for epoch in range(epochs):
            for m in range(n_micro):
                chunk = rows[m * c.micro_batch_size : (m + 1) * c.micro_batch_size]
                self.engine.set_gradient_accumulation_boundary(m == n_micro - 1)
                loss, stats, tokens, (weight_sum, stale_tokens), lp = self._micro_loss(
                    batch, chunk, normalizer, behaviour, proximal, m
                )
                self.engine.backward(loss, scale_wrt_gas=False)
                if epoch > 0:
                    later_clip += stats.clip_fraction * tokens
                    later_tokens += tokens
                    continue
                totals["loss"] += float(loss.detach())
                totals["tokens"] += tokens
                totals["weight"] += weight_sum
                totals["stale_tokens"] += stale_tokens
                totals["lp"] += lp
                for key, value in (("clip", stats.clip_fraction), ("ratio", stats.ratio_mean), ("kl", stats.kl)):
                    totals[key] += value * tokens
            self.engine.step()
            if epoch == 0:
                grad_norm = self.engine.get_global_grad_norm()
        denominator = max(totals["tokens"], 1)
        clip = later_clip / max(later_tokens, 1) if epochs > 1 else totals["clip"] / denominator
        return StepStats(
            loss=totals["loss"],
            grad_norm=float(grad_norm) if grad_norm is not None else float("nan"),
            clip_fraction=clip,
            ratio_mean=totals["ratio"] / denominator,
            kl=totals["kl"] / denominator,
            lr=self.scheduler.get_last_lr()[0],
            tokens=int(totals["tokens"]),
            seconds=time.perf_counter() - started,
            behaviour_weight_mean=totals["weight"] / totals["stale_tokens"] if totals["stale_tokens"] else 1.0,
            logprob_mean=totals["lp"] / denominator,
        )

    def _weight_tensors(self) -> list[torch.Tensor]:
        return list(self.engine.module.parameters())

    def _keep_weights(self) -> None:
        """Keep the weights before this step (the version that sampled next steps' stale rows)."""
        if not self.past_versions:
            return
        tensors = self._weight_tensors()
        if len(self.past_weights) == self.past_versions:  # reuse the oldest copy's memory
            kept = self.past_weights.pop()
            for copy, t in zip(kept, tensors):
                copy.copy_(t.detach())
        else:
            kept = [t.detach().clone() for t in tensors]
        self.past_weights.appendleft(kept)

    @contextmanager
    def _weights_from(self, steps_ago: int) -> Iterator[None]:
        """The engine computes with the weights of `steps_ago` steps ago, for the block's duration."""
        tensors = self._weight_tensors()
        current = [t.data for t in tensors]
        for t, past in zip(tensors, self.past_weights[steps_ago - 1]):
            t.data = past
        try:
            yield
        finally:
            for t, data in zip(tensors, current):
                t.data = data

    def _behaviour_logprobs(self, batch: RolloutBatch, rows: Sequence[int]) -> dict[int, torch.Tensor]:
        """Log-probs of this rank's stale rows under the weights that sampled them, by row; rows
        staler than the weights kept are left out (learned as if on-policy)."""
        out: dict[int, torch.Tensor] = {}
        by_age: dict[int, list[int]] = {}
        for i in rows:
            age = batch.staleness[i] if batch.staleness else 0
            if 0 < age <= len(self.past_weights):
                by_age.setdefault(age, []).append(i)
        size = self.config.micro_batch_size
        for age, members in sorted(by_age.items()):
            with (
                self._weights_from(age),
                torch.no_grad(),
                torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.cpu_autocast),
            ):
                for start in range(0, len(members), size):
                    chunk = members[start : start + size]
                    width = max(1, max(len(batch.completion_ids[i]) for i in chunk))
                    needed = torch.zeros((len(chunk), width), dtype=torch.bool)
                    for r, i in enumerate(chunk):
                        needed[r, : len(batch.completion_ids[i])] = torch.tensor(batch.loss_mask(i)) > 0
                    logprobs, _ = self._completion_logprobs(self.engine, batch, chunk, width, needed.to(self.device))
                    for r, i in enumerate(chunk):
                        out[i] = logprobs[r, : len(batch.completion_ids[i])].float()
        return out

    def _micro_loss(
        self,
        batch: RolloutBatch,
        chunk: list[int],
        normalizer: float,
        behaviour: dict[int, torch.Tensor] | None = None,
        proximal: dict[int, FirstStep] | None = None,
        micro: int = 0,
    ) -> tuple[torch.Tensor, Any, int, tuple[float, int], float]:
        """The loss of one micro-batch. `proximal` holds, per micro-batch, what the batch's first optimizer
        step computed (`FirstStep`): filled by it, read by the later ones."""
        c = self.config
        first = proximal.get(micro) if proximal is not None else None
        if not chunk:  # this rank has fewer rows: a zero loss keeps the collectives in step
            chunk, weight = [0], 0.0
        else:
            weight = 1.0
        width = max(1, max(len(batch.completion_ids[i]) for i in chunk))
        mask = torch.zeros((len(chunk), width))
        old = torch.zeros((len(chunk), width))
        for r, i in enumerate(chunk):
            n = len(batch.completion_ids[i])
            mask[r, :n] = weight * torch.tensor(batch.loss_mask(i), dtype=torch.float32)
            old[r, :n] = torch.tensor(batch.old_logprobs[i], dtype=torch.float32)
        mask, old = mask.to(self.device), old.to(self.device)
        advantages = torch.tensor([batch.advantages[i] for i in chunk], device=self.device)
        terms = batch.logit_term_tensor(chunk, width) if weight else None
        terms = terms.to(self.device) if terms is not None else None
        needed = mask > 0 if terms is None else (mask > 0) | (terms != 0).any(-1)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.cpu_autocast):
            logprobs, extra = self._completion_logprobs(self.engine, batch, chunk, width, needed, terms)
            ref = first.ref if first is not None else None
            if self.reference is not None and ref is None:
                with torch.no_grad():
                    ref, _ = self._completion_logprobs(self.reference, batch, chunk, width, mask > 0)
        # The sampler's log-probs serve as a check either way: a ratio far from 1 means the
        # sampler's distribution is not the learner's (a constrained format, stale weights).
        sampler_ratio = float((torch.exp(logprobs.detach() - old) * mask).sum() / mask.sum().clamp_min(1.0))
        weights, weighed = None, (0.0, 0)
        # Stale rows whose behaviour log-probs are known: the sampler's, or those recomputed from kept weights.
        stale = torch.tensor(
            [bool(batch.staleness and batch.staleness[i] > 0) and (behaviour is None or i in behaviour) for i in chunk],
            device=self.device,
        )
        if behaviour:
            for r, i in enumerate(chunk):
                if i in behaviour:
                    old[r, : len(behaviour[i])] = behaviour[i].to(self.device)
        if first is not None:
            old, weights = first.old, first.weights  # a later step on the batch: the first step's proximal policy
        elif c.old_logprobs == "learner":
            # Decoupled PPO (grpo.py): the learner's weights are the proximal policy; rows an older
            # policy drew are corrected towards them by the truncated behaviour weight.
            if bool(stale.any()):
                weights = behaviour_weights(logprobs, old, stale, c.behaviour_weight_cap)
                stale_mask = mask * stale.unsqueeze(1)
                weighed = (float((weights * stale_mask).sum()), int(stale_mask.sum()))
            old = logprobs.detach()
        if proximal is not None and first is None:
            proximal[micro] = FirstStep(old, weights, ref)
        loss, stats = grpo_loss(
            logprobs,
            old,
            advantages,
            mask,
            clip_low=c.clip_low,
            clip_high=c.clip_high,
            kl_beta=c.kl_beta,
            ref_logprobs=ref,
            aggregation=c.aggregation,
            normalizer=normalizer,
            behaviour_weights=weights,
        )
        if terms is not None:
            loss = loss + extra / normalizer
        logprob_sum = float((logprobs.detach() * mask).sum())
        return loss, replace(stats, ratio_mean=sampler_ratio), int((mask > 0).sum()), weighed, logprob_sum

    def _completion_logprobs(
        self,
        model: Any,
        batch: RolloutBatch,
        chunk: list[int],
        width: int,
        needed: torch.Tensor,
        terms: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """[len(chunk), width] log-probs of each row's completion tokens where `needed`
        (a [len(chunk), width] bool mask), 0 elsewhere; and, with `terms` ([len(chunk), width,
        len(batch.worker_tokens)], at needed positions only), sum(terms x those tokens' logits).
        At `batch.worker_positions` the log-softmax is over `batch.worker_tokens` alone.

        GRPO's G completions of a question share one prompt, usually much longer
        than a plan. Rows with the same prompt run as one packed sequence (see
        `_packed_hidden`): the prompt once, no padding. With gradient checkpointing,
        or an attention implementation other than SDPA (which takes the block
        mask), every row runs its whole sequence, padded.
        The vocabulary projection, a large share of a small model's arithmetic,
        runs only at the needed positions (a constrained format's own text and the
        subtasks are not in the loss).
        """
        out = torch.zeros((len(chunk), width), device=self.device)
        extra = torch.zeros((), device=self.device)
        found = batch.roster_positions(chunk, width, self.engine.module.config.vocab_size)
        roster = (found[0].to(self.device), found[1].to(self.device)) if found is not None else None
        by_prompt: dict[tuple[int, ...], list[int]] = {}
        for r, i in enumerate(chunk):
            by_prompt.setdefault(tuple(batch.prompt_ids[i]), []).append(r)
        pad = self.tokenizer.pad_token_id or 0
        hf_model = getattr(model, "module", model)  # the DeepSpeed engine wraps the model
        project = hf_model.get_output_embeddings()
        packed = not self.config.gradient_checkpointing and hf_model.config._attn_implementation == "sdpa"
        for prompt, members in by_prompt.items():
            comps = [batch.completion_ids[chunk[r]] for r in members]
            ids = torch.full((len(members), width), pad, dtype=torch.long)
            for k, comp in enumerate(comps):
                ids[k, : len(comp)] = torch.tensor(comp, dtype=torch.long)
            ids = ids.to(self.device)
            # hidden[k, t]: the final hidden state that predicts completion token t of row k
            if packed:
                hidden = self._packed_hidden(model, prompt, comps, width)
            else:
                attention = torch.zeros((len(members), len(prompt) + width), dtype=torch.long)
                attention[:, : len(prompt)] = 1
                for k, comp in enumerate(comps):
                    attention[k, len(prompt) : len(prompt) + len(comp)] = 1
                full = torch.cat([torch.tensor([prompt], device=self.device).expand(len(members), -1), ids], dim=1)
                states = model(
                    input_ids=full,
                    attention_mask=attention.to(self.device),
                    logits_to_keep=1,
                    output_hidden_states=True,
                )
                hidden = states.hidden_states[-1][:, len(prompt) - 1 : -1]
            rows, cols = needed[members].nonzero(as_tuple=True)
            if not len(rows):  # one position anyway: a rank's padding chunk still needs a graph for backward
                rows = cols = torch.zeros(1, dtype=torch.long, device=needed.device)
            logits = project(hidden[rows, cols])
            logps = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[rows, cols].unsqueeze(-1)).squeeze(-1)
            at = torch.tensor(members, device=self.device)[rows]
            if roster is not None:  # a worker id: over the roster's tokens, as the constrained sampler draws it
                which, place = roster
                restricted = torch.log_softmax(logits.float()[:, batch.worker_tokens], dim=-1)
                chosen = restricted.gather(-1, place[ids[rows, cols]].unsqueeze(-1)).squeeze(-1)
                logps = torch.where(which[at, cols], chosen, logps)
            out[at, cols] = logps
            if terms is not None:
                extra = extra + (logits.float()[:, batch.worker_tokens] * terms[at, cols]).sum()
        return out, extra

    def _packed_hidden(self, model: Any, prompt: tuple[int, ...], comps: list[list[int]], width: int) -> torch.Tensor:
        """[len(comps), width, hidden] final hidden states that predict each completion token, from
        one sequence: the prompt, then each completion but its last token, every completion
        attending to the prompt and to its own earlier tokens only (a block-causal mask, and
        positions that restart after the prompt). Exact: each token sees what it saw when
        sampled, and the gradient reaches the shared prompt once, summed over completions."""
        p = len(prompt)
        total = p + sum(max(len(c) - 1, 0) for c in comps)
        tokens = list(prompt)
        positions = list(range(p))
        allowed = torch.zeros((total, total), dtype=torch.bool)
        allowed[:p, :p] = True
        index = torch.full((len(comps), width), p - 1, dtype=torch.long)  # token 0 is predicted by the prompt's end
        start = p
        for k, comp in enumerate(comps):
            n = max(len(comp) - 1, 0)
            tokens += comp[:n]
            positions += range(p, p + n)
            allowed[start : start + n, :p] = True
            allowed[start : start + n, start : start + n] = True
            index[k, 1 : n + 1] = torch.arange(start, start + n)
            start += n
        allowed &= torch.ones_like(allowed).tril()  # causal within each block
        states = model(
            input_ids=torch.tensor([tokens], device=self.device),
            position_ids=torch.tensor([positions], device=self.device),
            attention_mask=allowed[None, None].to(self.device),
            logits_to_keep=1,
            output_hidden_states=True,
        )
        return states.hidden_states[-1][0][index.to(self.device)]

    def named_weights(self) -> list[tuple[str, torch.Tensor]]:
        """The full weights, on CPU, by Hugging Face name (what samplers load), tied
        ones under each name. Under ZeRO-3 every rank must call it (each parameter is
        gathered); only rank 0 gets the weights, the others an empty list."""
        weights = []
        for name, tensor in full_parameters(self.engine.module):
            if self.rank == 0 or self.config.zero_stage != 3:
                weights.append((name, tensor.to("cpu", copy=True)))
        return weights

    def save(self, folder: str | Path) -> Path:
        """A Hugging Face folder that vLLM and transformers load as is
        (`<folder>/model`), plus DeepSpeed's optimizer and scheduler state
        (`<folder>/optimizer`). Every rank must call it."""
        folder = Path(folder)
        self.engine.save_checkpoint(str(folder / "optimizer"), tag="state")
        # Under ZeRO-3 the module holds slices: gather (every rank) into the state dict rank 0 writes.
        state = dict(self.named_weights()) if self.config.zero_stage == 3 else None
        if self.rank == 0:
            self.engine.module.save_pretrained(folder / "model", state_dict=state, safe_serialization=True)
            self.tokenizer.save_pretrained(folder / "model")
            (folder / "learner.json").write_text(self.config.model_dump_json(indent=2))
        torch.distributed.barrier()
        return folder

    def load(self, folder: str | Path) -> None:
        """Restore weights, optimizer and scheduler from `save`."""
        self.engine.load_checkpoint(str(Path(folder) / "optimizer"), tag="state")
