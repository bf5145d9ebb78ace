"""What each worker model accepts, and how a reasoning level becomes its provider's parameters.

A worker's configuration says how much it should reason (`reasoning`: default, off,
minimal, low, medium, high; or a token `reasoning_budget`) and at what temperature.
Providers disagree on both: GPT-5 refuses any temperature but its default and takes a
`reasoning_effort`; Gemini 2.5 takes a `thinking_budget` whose range depends on the
model (2.5 Pro cannot turn thinking off); Claude's extended thinking needs a budget of
at least 1024 tokens below `max_tokens`, and Claude takes no temperature at all (API version
2026-10-21); Qwen3 switches thinking
in its chat template. `TRAITS` (model_traits.py) is the table; `shape_request` turns a configuration into
one `RequestShape`; conductor_rl/workers/request_args.py turns that into the exact
keyword arguments each SDK call takes (so tests compare them with what went over the wire).

The table of what each model accepts is conductor_rl/workers/model_traits.py.

Levels:
- `default` sends nothing: the model's own behaviour (GPT-5: medium; Gemini 2.5 Pro and
  Flash: dynamic thinking; Claude: no thinking; Qwen3: thinking).
- `off` turns reasoning off where the model can; where it cannot (GPT-5, o-series,
  Gemini 2.5 Pro, Gemini 3, R1) it sends the model's least and warns once.
- `minimal` is the least the model allows: off where off is allowed (Claude, Gemini 2.5
  Flash, Qwen3, gpt-5.1's "none"), else its minimum (GPT-5 "minimal", o3 "low",
  Gemini 2.5 Pro 128 tokens).
- `low`/`medium`/`high` are efforts where the API takes efforts (a level the model lacks
  becomes the next one up), and for budget-taking APIs `LEVEL_BUDGETS` tokens, capped at
  half of `max_tokens` so the answer keeps room (thinking counts against max_tokens),
  then put into the model's range.
- An explicit `reasoning_budget` overrides the level on budget-taking APIs and must lie
  in the model's range: `shape_problems` names it before any actor starts. On effort
  APIs a budget with level `default` picks the nearest effort (`level_for_budget`).

Models not in the table get a conservative default: the temperature is sent (set
`fixed_temperature: true` where the model refuses it), nothing reasoning-related is sent
at level `default`, and another level is passed under the provider's generic name
(OpenAI `reasoning_effort`, "none" for off; Gemini `thinking_budget`; Claude extended
thinking; open models `enable_thinking`) without range checks; `shape_notes` says so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from conductor_rl.config import REASONING_LEVELS, WorkerConfig
from conductor_rl.workers.model_traits import EFFORT_ORDER, UNKNOWN, ModelTraits, traits_for

if TYPE_CHECKING:  # the request type only; providers import this module
    from conductor_rl.workers.providers.base import WorkerRequest

log = logging.getLogger(__name__)

# What the Anthropic API version of the pinned SDK (2026-10-21) refuses in a request body, on every model.
ANTHROPIC_REFUSED = ("temperature", "top_p", "top_k")
# Thinking tokens of each level on budget-taking APIs (before the cap at half of max_tokens).
LEVEL_BUDGETS: dict[str, int] = {"low": 1024, "medium": 4096, "high": 16384}


class ShapeError(ValueError):
    """The configuration asks for something the model's API refuses; the message names the key and the fix."""


@dataclass(frozen=True)
class RequestShape:
    """What one request carries, whatever the provider calls it. None: not sent."""

    temperature: float | None
    effort: str | None = None  # OpenAI reasoning_effort, Gemini 3 thinking_level, Claude output_config.effort
    budget: int | None = None  # thinking tokens (Gemini thinking_budget, Claude budget_tokens); 0 = off
    thinking: bool | None = None  # on/off switch (Qwen3 enable_thinking; Claude adaptive or disabled)
    include_thoughts: bool = False  # Gemini: return thought summaries (thoughts are billed either way)
    notes: tuple[str, ...] = ()  # how the request differs from what the configuration says
    warnings: tuple[str, ...] = ()  # what the model cannot do as asked (logged once)


def level_for_budget(budget: int) -> str:
    """The reasoning level nearest a token budget, for APIs that take a level, not a budget."""
    if budget == 0:
        return "off"
    if budget <= LEVEL_BUDGETS["low"] * 2:
        return "low"
    if budget <= LEVEL_BUDGETS["medium"] * 2:
        return "medium"
    return "high"


def _pick_effort(level: str, traits: ModelTraits) -> str:
    """The effort word `traits` accepts for `level` (not "default")."""
    allowed = traits.levels
    if level == "off":
        return traits.off if traits.off is not None else allowed[0]
    if level == "minimal":
        return "minimal" if "minimal" in allowed else (traits.off if traits.off is not None else allowed[0])
    if level in allowed:
        return level
    # A level the model lacks becomes the next one up (more reasoning, never less), else its highest.
    rank = EFFORT_ORDER.index(level)
    above = [a for a in allowed if a in EFFORT_ORDER and EFFORT_ORDER.index(a) > rank]
    return above[0] if above else allowed[-1]


def _budget_for_level(level: str, traits: ModelTraits, max_tokens: int) -> int:
    """Thinking tokens of `level` (low/medium/high) on a budget API: capped at half of max_tokens, in range."""
    low, high = traits.budget_range or (1, None)
    budget = min(LEVEL_BUDGETS[level], max_tokens // 2)
    budget = max(budget, low)
    return budget if high is None else min(budget, high)


def _range_text(traits: ModelTraits, max_tokens: int) -> str:
    low, high = traits.budget_range or (1, None)
    top = (
        f"{high}"
        if high is not None
        else (f"{max_tokens - 1} (below max_tokens)" if traits.budget_below_max_tokens else "")
    )
    return f"{low}..{top}" + (" or 0 (off)" if traits.can_turn_off else "")


def shape_request(
    config: WorkerConfig,
    *,
    reasoning: str | None = None,
    reasoning_budget: int | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    check_budget_against: int | None = None,
) -> RequestShape:
    """How a request of worker `config` is shaped; arguments not given are the worker's own.

    `check_budget_against` is the max_tokens an explicit Claude budget must stay below to be
    accepted as configured (the worker's own; a smaller request, such as a preflight probe,
    gets its budget reduced to fit instead). Raises ShapeError for an explicit budget the
    model refuses, naming the key and the fix."""
    level = config.reasoning if reasoning is None else reasoning
    budget = config.reasoning_budget if reasoning_budget is None else reasoning_budget
    temp = config.temperature if temperature is None else temperature
    out_tokens = config.max_tokens if max_tokens is None else max_tokens
    if level not in REASONING_LEVELS:
        raise ShapeError(f"workers.{config.name}.reasoning={level!r}: not a level; use one of {list(REASONING_LEVELS)}")
    traits = traits_for(config.provider, config.model)
    key = f"workers.{config.name}"
    model = config.model
    notes: list[str] = []
    warnings: list[str] = []
    effort: str | None = None
    thinking_budget: int | None = None
    thinking: bool | None = None
    thinks = traits.thinks_by_default
    control = traits.control
    if not traits.known and config.provider in UNKNOWN:
        what = (
            "no reasoning parameter"
            if level == "default" and budget is None
            else f"{key}.reasoning under the provider's generic parameter, unchecked"
        )
        notes.append(
            f"{model} is not in the model table (conductor_rl/workers/request_shape.py): sending the "
            f"temperature and {what}; set {key}.fixed_temperature or extra_body if the API refuses them"
        )

    if control == "effort":
        if budget is not None and level == "default":
            level = level_for_budget(budget)
            notes.append(
                f"{key}.reasoning_budget={budget}: {model} takes an effort, not a budget; sending reasoning={level}"
            )
        elif budget is not None:
            notes.append(
                f"{key}.reasoning_budget={budget} is ignored: {model} takes an effort ({key}.reasoning={level})"
            )
        if level != "default":
            effort = _pick_effort(level, traits)
            if level == "off" and effort != traits.off:
                warnings.append(
                    f"{key}.reasoning=off: {model} cannot turn reasoning off; sending its least, "
                    f"reasoning_effort={effort!r}"
                )
            elif effort != level and level != "off" and traits.known:
                notes.append(f"{key}.reasoning={level}: {model} has no {level!r} effort; sending {effort!r}")
            thinks = effort != traits.off
    elif control == "budget":
        low, _high = traits.budget_range or (1, None)
        if budget is not None:
            if level != "default":
                notes.append(f"{key}.reasoning_budget={budget} overrides {key}.reasoning={level}")
            if traits.known or traits.budget_below_max_tokens:  # Claude's rules hold for every Claude model
                _check_budget(
                    key, model, budget, traits, check_budget_against if check_budget_against is not None else out_tokens
                )
            thinking_budget = budget
            if traits.budget_below_max_tokens and budget and budget >= out_tokens:
                # A smaller request than configured (the preflight probe): fit the budget under it.
                fitted = max(min(budget, out_tokens // 2), low)
                thinking_budget = fitted if fitted < out_tokens else 0
                warnings.append(
                    f"{key}.reasoning_budget={budget} does not fit a request of max_tokens={out_tokens}; "
                    f"sending " + (f"budget {thinking_budget}" if thinking_budget else "no thinking")
                )
        elif level in ("off", "minimal"):
            if traits.can_turn_off:
                thinking_budget = 0
            else:
                thinking_budget = low
                if level == "off":
                    warnings.append(
                        f"{key}.reasoning=off: {model} cannot turn thinking off; sending its minimum "
                        f"budget, {low} tokens"
                    )
        elif level != "default":
            thinking_budget = _budget_for_level(level, traits, out_tokens)
            if traits.budget_below_max_tokens and thinking_budget >= out_tokens:
                warnings.append(
                    f"{key}.reasoning={level}: max_tokens={out_tokens} leaves no room for {model}'s "
                    f"minimum thinking budget ({low}); sending no thinking (raise {key}.max_tokens)"
                )
                thinking_budget = 0
        if thinking_budget is not None:
            thinks = thinking_budget > 0
    elif control == "level":
        if budget is not None:
            # Gemini 3 still takes a budget (for compatibility); no level then, both at once are refused.
            thinking_budget = budget
            notes.append(f"{key}.reasoning_budget={budget}: sent as thinking_budget; {model} prefers {key}.reasoning")
        elif level != "default":
            effort = _pick_effort(level, traits)
            if level == "off":
                warnings.append(
                    f"{key}.reasoning=off: {model} cannot turn thinking off; sending its least, "
                    f"thinking_level={effort!r}"
                )
            elif effort != level:
                notes.append(f"{key}.reasoning={level}: {model} has no {level!r} thinking level; sending {effort!r}")
    elif control == "adaptive":
        if budget:
            raise ShapeError(
                f"{key}.reasoning_budget={budget}: {model} takes no thinking budget (adaptive thinking "
                f"only); remove it and set {key}.reasoning to low, medium or high"
            )
        if level in ("low", "medium", "high"):
            thinking, effort, thinks = True, _pick_effort(level, traits), True
        elif level in ("off", "minimal") or budget == 0:
            thinking, thinks = False, False
    elif control == "switch":
        if budget is not None:
            thinking = budget > 0
            if budget > 0:
                notes.append(f"{key}.reasoning_budget={budget}: {model} has no budget control; thinking on")
        elif level in ("off", "minimal"):
            thinking = False
        elif level != "default":
            thinking = True
            if traits.known:
                notes.append(f"{key}.reasoning={level}: {model} can only switch thinking on or off; thinking on")
        if thinking is not None:
            thinks = thinking
    elif control == "always":
        if level in ("off", "minimal") or budget == 0:
            warnings.append(
                f"{key}.reasoning={level if budget != 0 else 'off'}: {model} always reasons and cannot "
                f"be turned off; nothing sent (its reasoning is kept apart from the answer)"
            )
        elif level != "default" or budget:
            notes.append(f"{key}: {model} takes no reasoning setting; reasoning={level} has no effect")
    else:  # none
        if level in ("low", "medium", "high") or budget:
            what = f"reasoning_budget={budget}" if budget else f"reasoning={level}"
            if config.provider in UNKNOWN:  # offline providers have nothing to say
                warnings.append(f"{key}.{what}: {model} does not reason; nothing sent")

    if config.provider == "anthropic" and config.fixed_temperature is False:
        raise ShapeError(
            f"{key}.fixed_temperature=false: the Anthropic API version the anthropic SDK 2.x sends "
            f"(2026-10-21) refuses any temperature on every model; remove {key}.fixed_temperature"
        )
    send_temperature = _sends_temperature(config, traits, effort, thinking_budget, thinking)
    if not send_temperature and config.provider in UNKNOWN:
        if config.provider == "anthropic":
            why = "the Anthropic API (version 2026-10-21) takes no temperature"
        elif traits.control == "budget":
            why = "Claude's extended thinking refuses a temperature"
        elif traits.temperature_when_off:
            why = f"{model} takes a temperature only with reasoning_effort {traits.off!r} ({key}.reasoning=off)"
        else:
            why = f"{model} only takes its default temperature (1)"
        if config.fixed_temperature:
            why = f"{key}.fixed_temperature is true"
        notes.append(f"{key}.temperature={temp:g} is not sent: {why}")
    elif send_temperature and traits.fixed_temperature and config.fixed_temperature is False:
        notes.append(
            f"{key}.fixed_temperature=false: sending temperature {temp:g} though the model table says "
            f"{model} takes only its default"
        )
    return RequestShape(
        temperature=temp if send_temperature else None,
        effort=effort,
        budget=thinking_budget,
        thinking=thinking,
        include_thoughts=config.provider == "google" and thinks and traits.known,
        notes=tuple(notes),
        warnings=tuple(warnings),
    )


def _check_budget(key: str, model: str, budget: int, traits: ModelTraits, max_tokens: int) -> None:
    low, high = traits.budget_range or (1, None)
    if budget == 0:
        if not traits.can_turn_off:
            raise ShapeError(
                f"{key}.reasoning_budget=0: {model} cannot turn thinking off; its minimum budget is {low} "
                f"(set {key}.reasoning_budget to {low} or more, or remove it)"
            )
        return
    if budget < low or (high is not None and budget > high):
        raise ShapeError(
            f"{key}.reasoning_budget={budget}: {model} takes a thinking budget of "
            f"{_range_text(traits, max_tokens)} tokens; set {key}.reasoning_budget inside that range"
        )
    if traits.budget_below_max_tokens and budget >= max_tokens:
        raise ShapeError(
            f"{key}.reasoning_budget={budget}: Claude's thinking budget must be below max_tokens "
            f"({key}.max_tokens={max_tokens}); raise {key}.max_tokens or lower the budget"
        )


def _sends_temperature(
    config: WorkerConfig, traits: ModelTraits, effort: str | None, budget: int | None, thinking: bool | None
) -> bool:
    if config.fixed_temperature is not None:
        if config.fixed_temperature:
            return False
        # The user says the model takes one; Claude with thinking on still refuses it.
        return not _claude_thinking(config, traits, budget, thinking)
    if _claude_thinking(config, traits, budget, thinking):
        return False
    if traits.temperature_when_off:
        return effort == traits.off
    return not traits.fixed_temperature


def _claude_thinking(config: WorkerConfig, traits: ModelTraits, budget: int | None, thinking: bool | None) -> bool:
    return config.provider == "anthropic" and (bool(budget) or bool(thinking))


def shape_problems(worker: WorkerConfig) -> list[str]:
    """What in `worker`'s configuration its model's API would refuse, one line each naming the key
    and the fix (empty: none). Commands call it before any actor starts."""
    if worker.provider not in UNKNOWN:
        return []
    problems = [
        f"workers.{worker.name}.extra_body.{name}: the Anthropic API version the anthropic SDK 2.x sends "
        f"(2026-10-21) refuses temperature, top_p and top_k on every model; remove it"
        for name in ANTHROPIC_REFUSED
        if worker.provider == "anthropic" and name in worker.extra_body
    ]
    try:
        shape_request(worker)
    except ShapeError as err:
        problems.append(str(err))
    return problems


def shape_notes(worker: WorkerConfig) -> list[str]:
    """Informational lines on how `worker`'s requests differ from its configuration (a temperature
    not sent, a level mapped to the model's nearest); never a reason to stop."""
    if worker.provider not in UNKNOWN:
        return []
    try:
        shape = shape_request(worker)
    except ShapeError:
        return []  # shape_problems reports it
    return [*shape.warnings, *shape.notes]


_warned: set[tuple[str, str]] = set()


def warn_once(worker: str, message: str) -> None:
    """Log a shaping warning the first time it happens for a worker in this process."""
    if (worker, message) not in _warned:
        _warned.add((worker, message))
        log.warning("%s", message)


def shape_for(config: WorkerConfig, request: WorkerRequest) -> RequestShape:
    """The shape of one WorkerRequest of `config` (warnings logged once)."""
    shape = shape_request(
        config,
        reasoning=request.reasoning,
        reasoning_budget=request.reasoning_budget,
        temperature=request.temperature,
        max_tokens=request.max_tokens,
        check_budget_against=max(config.max_tokens, request.max_tokens),
    )
    for message in shape.warnings:
        warn_once(config.name, message)
    return shape
