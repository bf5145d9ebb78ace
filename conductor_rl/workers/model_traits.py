"""What each worker model accepts: one row per model family (provider, first matching model-name pattern
wins), read by conductor_rl/workers/request_shape.py.

The table (provider, first matching model-name pattern wins):

| provider          | model pattern                  | reasoning control                                  | temperature |
|-------------------|--------------------------------|----------------------------------------------------|-------------|
| openai(_responses)| gpt-5-chat                     | none                                               | sent        |
|                   | gpt-5-pro                      | reasoning_effort high only                         | never       |
|                   | gpt-5.1                        | reasoning_effort none/low/medium/high (none = off) | only with effort none |
|                   | gpt-6.1 and later (gpt-6.x)    | reasoning_effort low/medium/high (no none, minimal)| never       |
|                   | gpt-5.2 and later              | reasoning_effort none/low/medium/high/xhigh        | never       |
|                   | gpt-5, -mini, -nano            | reasoning_effort minimal/low/medium/high           | never       |
|                   | o1-mini, o1-preview            | always reasons, no control                         | never       |
|                   | o1, o3, o4 (-mini)             | reasoning_effort low/medium/high                   | never       |
|                   | gpt-4*, gpt-3.5, chatgpt-4o    | none                                               | sent        |
| google            | gemini-2.5-pro                 | thinking_budget 128..32768, cannot be 0            | sent        |
|                   | gemini-2.5-flash-lite          | thinking_budget 512..24576 or 0 (off, its default) | sent        |
|                   | gemini-2.5-flash               | thinking_budget 1..24576 or 0 (off)                | sent        |
|                   | gemini-3 pro                   | thinking_level low/high, cannot be off             | sent        |
|                   | gemini-3.8-flash               | thinking_level low/medium/high (no minimal)        | sent        |
|                   | gemini-3 flash                 | thinking_level minimal/low/medium/high             | sent        |
|                   | gemini-1.x, gemini-2.0         | none                                               | sent        |
| anthropic         | claude-*-4-7 and later, *-5+   | adaptive thinking + output_config.effort low/medium/high | never |
|                   | claude-3-7-sonnet, claude-*-4* | extended thinking: off, or budget_tokens >= 1024 and < max_tokens | never |
|                   | claude-3*                      | none                                               | never       |

No Claude model takes a temperature: the anthropic SDK 2.x (the pinned range) sends API version
2026-10-21, which refuses `temperature`, `top_p` and `top_k` on every model, even at their defaults.
| openai_compatible | qwen3 *-thinking-2507          | always thinks                                      | sent        |
|                   | qwen3 *-instruct-2507, -coder  | none                                               | sent        |
|                   | qwen3                          | chat_template_kwargs.enable_thinking on/off        | sent        |
|                   | deepseek-r1 (and distills), qwq| always thinks (inline <think>), cannot be off      | sent        |
|                   | gpt-oss                        | reasoning_effort low/medium/high                   | sent        |
|                   | gemma-3                        | none                                               | sent        |

Sources: OpenAI's reasoning guide and its 400s ("Only the default (1) value is
supported", gpt-5.1's "Supported values are: 'none', 'low', 'medium', and 'high'");
Gemini's thinking guide (budget ranges; "Budget 0 is invalid. This model only works in
thinking mode."; thinking_level is for Gemini 3 only); Anthropic's extended-thinking
guide (budget >= 1024, below max_tokens, temperature only 1) and its Opus 4.7 refusal
of `thinking.type.enabled`; Anthropic's API version 2026-10-21 (no sampling parameters); the
GPT-6.1 Sol and Gemini 3.8 Flash model pages as quoted at their release (no effort below low;
thinking levels low/medium/high); Qwen3's model card (enable_thinking); vLLM, which drops
chat_template_kwargs a template does not use (so enable_thinking is harmless elsewhere).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANTHROPIC_MIN_BUDGET = 1024
# Order of effort words from least to most reasoning (OpenAI's, Gemini 3's, Anthropic's).
EFFORT_ORDER: tuple[str, ...] = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


@dataclass(frozen=True)
class ModelTraits:
    """What one model (family) accepts.

    `control` is how its reasoning is set:
      none    - it does not reason; levels have no effect
      effort  - a named effort from `levels` (OpenAI reasoning_effort, gpt-oss on vLLM)
      budget  - a token budget in `budget_range`, 0 = off where `can_turn_off` (Gemini 2.5, Claude)
      level   - a named thinking level from `levels` (Gemini 3 thinking_level)
      adaptive- Claude's adaptive thinking with output_config.effort from `levels`
      switch  - on or off only (Qwen3's chat-template enable_thinking)
      always  - it always reasons and takes no setting (DeepSeek-R1 distills)
    """

    name: str
    control: str
    levels: tuple[str, ...] = ()  # least reasoning first
    off: str | None = None  # the effort word that turns reasoning off ("none"), if any
    budget_range: tuple[int, int | None] | None = None  # non-zero budgets allowed; None max: below max_tokens
    can_turn_off: bool = False
    thinks_by_default: bool = False
    fixed_temperature: bool = False  # refuses any temperature but its default
    temperature_when_off: bool = False  # takes a temperature only with reasoning off (gpt-5.1 effort "none")
    budget_below_max_tokens: bool = False  # the budget counts inside max_tokens and must stay below it (Claude)
    template_opens_think: bool = False  # the chat template ends the prompt with <think>: content is "...</think>answer"
    known: bool = True


_OPENAI = ("openai", "openai_responses")

#: (providers, lower-case model-name pattern, traits); the first row that matches wins.
TRAITS: tuple[tuple[tuple[str, ...], str, ModelTraits], ...] = (
    (_OPENAI, r"^gpt-5(\.\d+)?-chat", ModelTraits("gpt-5-chat", "none")),
    (_OPENAI, r"^gpt-5(\.\d+)?-pro", ModelTraits("gpt-5-pro", "effort", ("high",), fixed_temperature=True)),
    (
        _OPENAI,
        r"^gpt-5\.1(\D|$)",
        ModelTraits(
            "gpt-5.1",
            "effort",
            ("none", "low", "medium", "high"),
            off="none",
            can_turn_off=True,
            fixed_temperature=True,
            temperature_when_off=True,
        ),
    ),
    (
        _OPENAI,
        r"^gpt-6\.\d",
        ModelTraits("gpt-6.1+", "effort", ("low", "medium", "high"), fixed_temperature=True, thinks_by_default=True),
    ),
    (
        _OPENAI,
        r"^gpt-5\.\d",
        ModelTraits(
            "gpt-5.2+",
            "effort",
            ("none", "low", "medium", "high", "xhigh"),
            off="none",
            can_turn_off=True,
            fixed_temperature=True,
        ),
    ),
    (
        _OPENAI,
        r"^gpt-5",
        ModelTraits(
            "gpt-5", "effort", ("minimal", "low", "medium", "high"), fixed_temperature=True, thinks_by_default=True
        ),
    ),
    (_OPENAI, r"^o1-(mini|preview)", ModelTraits("o1-mini", "always", fixed_temperature=True, thinks_by_default=True)),
    (
        _OPENAI,
        r"^o[134](\D|$)",
        ModelTraits("o-series", "effort", ("low", "medium", "high"), fixed_temperature=True, thinks_by_default=True),
    ),
    (_OPENAI, r"^(gpt-4|gpt-3\.5|chatgpt-4o)", ModelTraits("gpt-4", "none")),
    (
        ("google",),
        r"^gemini-2\.5-pro",
        ModelTraits("gemini-2.5-pro", "budget", budget_range=(128, 32768), thinks_by_default=True),
    ),
    (
        ("google",),
        r"^gemini-2\.5-flash-lite",
        ModelTraits("gemini-2.5-flash-lite", "budget", budget_range=(512, 24576), can_turn_off=True),
    ),
    (
        ("google",),
        r"^gemini-2\.5-flash",
        ModelTraits("gemini-2.5-flash", "budget", budget_range=(1, 24576), can_turn_off=True, thinks_by_default=True),
    ),
    (
        ("google",),
        r"^gemini-3(\.\d+)?-pro",
        ModelTraits("gemini-3-pro", "level", ("low", "high"), thinks_by_default=True),
    ),
    (
        ("google",),
        r"^gemini-3\.8-flash",
        ModelTraits("gemini-3.8-flash", "level", ("low", "medium", "high"), thinks_by_default=True),
    ),
    (
        ("google",),
        r"^gemini-3(\.\d+)?-flash",
        ModelTraits("gemini-3-flash", "level", ("minimal", "low", "medium", "high"), thinks_by_default=True),
    ),
    (("google",), r"^gemini-(1\.|2\.0)", ModelTraits("gemini-2.0", "none")),
    (
        ("anthropic",),
        r"^claude-(opus|sonnet|haiku)-(4-[7-9]|[5-9])(\D|$)",
        ModelTraits("claude-4.7+", "adaptive", ("low", "medium", "high"), can_turn_off=True, fixed_temperature=True),
    ),
    (
        ("anthropic",),
        r"^claude-(3-7-sonnet|(opus|sonnet|haiku)-4)",
        ModelTraits(
            "claude",
            "budget",
            budget_range=(ANTHROPIC_MIN_BUDGET, None),
            can_turn_off=True,
            budget_below_max_tokens=True,
            fixed_temperature=True,
        ),
    ),
    (("anthropic",), r"^claude-3", ModelTraits("claude-3", "none", fixed_temperature=True)),
    (
        ("openai_compatible",),
        r"qwen3.*thinking-2507",
        ModelTraits("qwen3-thinking", "always", thinks_by_default=True, template_opens_think=True),
    ),
    (("openai_compatible",), r"qwen3.*(instruct-2507|coder)", ModelTraits("qwen3-instruct", "none")),
    (("openai_compatible",), r"qwen3", ModelTraits("qwen3", "switch", can_turn_off=True, thinks_by_default=True)),
    (
        ("openai_compatible",),
        r"deepseek-r1|qwq",
        ModelTraits("deepseek-r1", "always", thinks_by_default=True, template_opens_think=True),
    ),
    (
        ("openai_compatible",),
        r"gpt-oss",
        ModelTraits("gpt-oss", "effort", ("low", "medium", "high"), thinks_by_default=True),
    ),
    (("openai_compatible",), r"gemma-?3", ModelTraits("gemma-3", "none")),
)

#: Models not in the table: each provider's generic parameter, no range checks, temperature sent.
UNKNOWN: dict[str, ModelTraits] = {
    "openai": ModelTraits("unknown", "effort", EFFORT_ORDER, off="none", can_turn_off=True, known=False),
    "openai_responses": ModelTraits("unknown", "effort", EFFORT_ORDER, off="none", can_turn_off=True, known=False),
    "google": ModelTraits("unknown", "budget", budget_range=(1, None), can_turn_off=True, known=False),
    "anthropic": ModelTraits(
        "unknown",
        "budget",
        budget_range=(ANTHROPIC_MIN_BUDGET, None),
        can_turn_off=True,
        budget_below_max_tokens=True,
        fixed_temperature=True,
        known=False,
    ),
    "openai_compatible": ModelTraits("unknown", "switch", can_turn_off=True, known=False),
}
_OFFLINE = ModelTraits("offline", "none", known=False)


def _model_key(model: str) -> str:
    """The bare model name: no "models/" (Gemini), "ft:" (OpenAI fine-tunes) or organisation ("Qwen/")."""
    name = model.strip().lower()
    for prefix in ("models/", "ft:"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return name


def traits_for(provider: str, model: str) -> ModelTraits:
    """The table row for `model` on `provider`, or that provider's conservative default."""
    name = _model_key(model)
    for providers, pattern, traits in TRAITS:
        if provider in providers:
            # Open models are named with an organisation ("Qwen/Qwen3-32B"): search, not match.
            found = re.search(pattern, name) if provider == "openai_compatible" else re.match(pattern, name)
            if found:
                return traits
    return UNKNOWN.get(provider, _OFFLINE)
