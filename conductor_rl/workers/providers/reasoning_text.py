"""Reasoning written inline in an answer, in <think>...</think> tags, taken out of it.

Open reasoning models served without a reasoning parser (or with one that missed)
write their thoughts into the content: Qwen3 as `<think>...</think>answer`; the
DeepSeek-R1 distills, whose chat template already opens `<think>` in the prompt, as
`reasoning...</think>answer`. A model that ran out of tokens mid-thought leaves an
opening tag and no closing one: all of it is reasoning, and the answer is empty.
"""

from __future__ import annotations

import re

OPEN, CLOSE = "<think>", "</think>"
_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def split_think(text: str) -> tuple[str, str]:
    """(answer, reasoning) of `text`; text without think tags is all answer."""
    if OPEN not in text and CLOSE not in text:
        return text, ""
    thoughts: list[str] = []
    head, sep, tail = text.partition(CLOSE)
    if sep and OPEN not in head:
        # The template opened <think>: everything before the first </think> is reasoning.
        thoughts.append(head)
        text = tail

    def take(m: re.Match[str]) -> str:
        thoughts.append(m.group(1))
        return ""

    text = _BLOCK.sub(take, text)
    if OPEN in text:  # an unclosed block: the budget ran out while thinking
        text, _, rest = text.partition(OPEN)
        thoughts.append(rest)
    reasoning = "\n\n".join(t.strip() for t in thoughts if t.strip())
    return text.strip(), reasoning
