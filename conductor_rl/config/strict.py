"""The base of every configuration section: unknown keys and a true/false where a
number belongs fail at start, and `ConfigError` names the key."""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


class ConfigError(ValueError):
    """A configuration file or override is invalid. The message names the key."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic reads true as 1 for a number; `lr: true` is a mistake, not a learning rate of 1.
        if info.field_name and _bool_for_a_number(cls.model_fields[info.field_name].annotation, value):
            raise ValueError("expected a number, not true/false")
        return value


def _bool_for_a_number(annotation: Any, value: Any) -> bool:
    """Whether `value` holds a bool where `annotation` wants a number (int, float, a
    Literal of ints), directly or inside an optional, a dict's values, a list or a tuple."""
    origin, args = get_origin(annotation), get_args(annotation)
    if isinstance(value, bool):
        if annotation in (int, float):
            return True
        if origin is Literal:
            return all(type(arg) is int for arg in args)
        if origin in (Union, types.UnionType):
            return bool not in args and any(_bool_for_a_number(arg, value) for arg in args)
        return False
    if origin is dict and isinstance(value, dict):
        return any(_bool_for_a_number(args[1], item) for item in value.values())
    if origin in (list, tuple) and isinstance(value, (list, tuple)):
        return any(_bool_for_a_number(arg, item) for arg in args if arg is not Ellipsis for item in value)
    return False
