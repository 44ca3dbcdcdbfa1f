"""Printing for the CLI: tables for people, ``--json`` for programs."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console

__all__ = ["age", "console", "err_console", "print_json", "status_style"]

_STATUS_STYLE = {
    "queued": "yellow",
    "running": "cyan",
    "failed": "red",
    "stopped": "magenta",
    "expired": "magenta",
    "succeeded": "green",
}


def console() -> Console:
    from rich.console import Console

    return Console()


def err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def print_json(value: BaseModel | list[Any] | dict[str, Any]) -> None:
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        sys.stdout.write(value.model_dump_json(indent=2) + "\n")
        return
    data = (
        [v.model_dump(mode="json") if isinstance(v, BaseModel) else v for v in value]
        if (isinstance(value, list))
        else value
    )
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def status_style(status: str) -> str:
    label = "error" if status == "failed" else status
    return f"[{_STATUS_STYLE.get(status, 'white')}]{label}[/]"


def age(when: datetime | None) -> str:
    if when is None:
        return "-"
    from gpuyard.quantities import format_duration

    return format_duration((datetime.now(UTC) - when).total_seconds())
