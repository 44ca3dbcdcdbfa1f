"""Pydantic's validation errors as a sentence a person can act on."""

from __future__ import annotations

from typing import Any

__all__ = ["SECRET_FIELDS", "readable_validation_errors"]

SECRET_FIELDS = frozenset({"password"})
"""Fields whose refused value is never repeated in the message (a registry password)."""


def readable_validation_errors(errors: list[Any]) -> str:
    """One line per problem, e.g. ``resources.gpus: must be >= 0 (got -1)``."""
    lines = []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        got = err.get("input")
        quiet = err.get("type") in ("value_error", "missing") or bool(SECRET_FIELDS & set(loc))
        shown = "" if quiet else f" (got {got!r})"
        # A check across fields has no location; its message names the field itself.
        lines.append(f"{'.'.join(loc)}: {msg}{shown}" if loc else f"{msg}{shown}")
    return "; ".join(lines)
