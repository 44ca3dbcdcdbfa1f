"""The verdict of a node check from its workers' logs (:mod:`gpuyard.injob.nodecheck`).

Only the logs of check workers are read this way: they run the pool's tool and none of the
job's code, so a line there can be trusted to name a node; the same words in a job's own log
mean nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["CheckFailure", "check_failures", "inconclusive"]

_FAILED = re.compile(r"^gpuyard-check: FAILED node=(\S{1,128}) test=(\w{1,32}) (.{0,600})")
_INCONCLUSIVE = re.compile(r"^gpuyard-check: INCONCLUSIVE node=(\S{1,128}) (.{0,600})")


@dataclass(frozen=True, slots=True)
class CheckFailure:
    node: str
    test: str
    evidence: str


def check_failures(lines: Iterable[str], nodes: Iterable[str]) -> list[CheckFailure]:
    """Each node the check blamed, once, with the first evidence given; a name that is not
    one of the check's ``nodes`` is ignored."""
    allowed = set(nodes)
    found: dict[str, CheckFailure] = {}
    for line in lines:
        match = _FAILED.match(line)
        if match and match[1] in allowed and match[1] not in found:
            found[match[1]] = CheckFailure(match[1], match[2], match[3].strip())
    return list(found.values())


def inconclusive(lines: Iterable[str]) -> list[str]:
    """What the check could not decide, line by line."""
    return [f"{m[1]}: {m[2].strip()}" for line in lines if (m := _INCONCLUSIVE.match(line))]
