"""What of a configuration may be written down: a dump with its secrets masked, for every file, tracker
and report that records a configuration (config.json, state.json, TensorBoard, W&B, MLflow, results).

Keys come from the environment and are never in a configuration; but a user may put credentials into
one: a URL with a password (`base_url`, `tracking.mlflow_tracking_uri`), a token in a URL's query, a
header or token in `extra_body`, a variable in `serve.env` or `cluster.env`. Masked: a URL's password
and its query values whose names look secret, and every value under a key whose name looks secret (or
under an `env` mapping: the whole environment of a served worker is its operator's). The mask keeps the
shape, so a dump still reads, and differs from a setting's real value, so it can never be loaded back
in place of one."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .sections import Config

MASK = "***"
_SECRET_WORDS = {
    "key", "apikey", "token", "secret", "password", "passwd", "pwd", "credential", "credentials",
    "auth", "authorization", "cookie", "signature", "sig",
}  # fmt: skip
_NAMES_A_PLACE = ("env", "file", "path")  # api_key_env names a variable, not its value
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_ENV_KEYS = ("env", "env_vars")


def secret_name(name: str) -> bool:
    """Whether a setting or header called `name` holds a secret (`api_key`, `Authorization`, `hf_token`;
    not `api_key_env`, which names a variable, nor `max_tokens`)."""
    words = re.split(r"[^a-z0-9]+", name.lower())
    return any(w in _SECRET_WORDS for w in words) and words[-1] not in _NAMES_A_PLACE


def masked_url(url: str) -> str:
    """`url` without its password and without the values of query parameters whose names look secret."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    netloc = parts.netloc
    if parts.password is not None:
        netloc = f"{parts.username}:{MASK}@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, MASK if secret_name(k) else v) for k, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redacted(dump: Any, *, under: str = "") -> Any:
    """A JSON-like dump (a configuration's, or any part of one) with its secrets masked."""
    if isinstance(dump, Mapping):
        whole = under in _ENV_KEYS
        return {
            k: (MASK if (whole or secret_name(str(k))) and isinstance(v, str) and v else redacted(v, under=str(k)))
            for k, v in dump.items()
        }
    if isinstance(dump, list | tuple):
        return [redacted(v, under=under) for v in dump]
    if isinstance(dump, str) and _URL.match(dump):
        return masked_url(dump)
    return dump


def recorded(config: Config) -> dict[str, Any]:
    """The configuration as every record of a run holds it: JSON-like, its secrets masked."""
    return redacted(config.model_dump(mode="json"))
