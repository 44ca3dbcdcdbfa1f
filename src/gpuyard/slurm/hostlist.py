"""Slurm host lists: ``n[0001-0003,0010],gpu7`` and back.

* ``expand_hostlist(text, limit=MAX_HOSTS) -> list[str]`` is what ``scontrol show hostnames``
  prints, one name per item, in the order written (duplicates kept). Malformed text (unbalanced
  or nested brackets, ``[3-1]``, ``[a-b]``, empty ranges, text after ``]`` which Slurm 22.05
  refuses too) raises ``ValueError`` naming the offending part; a list that would expand to
  more than ``limit`` names raises ``ValueError`` before anything is built.
* ``compress_hostlist(names) -> str`` (from :mod:`gpuyard.launch.slurm`, which writes the jobs'
  ``SLURM_NODELIST`` with it) is what ``sacct``/``squeue`` NodeList print: names that end in a
  number are grouped by prefix (and zero-padded width), sorted, and runs become ranges; other
  names are kept as they are.

Pure functions, no I/O.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # typing is not imported at run time (sbatch's quick path)
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["MAX_HOSTS", "compress_hostlist", "expand_hostlist"]

MAX_HOSTS = 100_000
"""The most names ``expand_hostlist`` builds: ``n[0-99999999]`` from a client is refused."""

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def compress_hostlist(hosts: Sequence[str]) -> str:
    """:func:`gpuyard.launch.slurm.compress_hostlist`, loaded when first used: ``sbatch``'s
    quick path only expands host lists."""
    from gpuyard.launch.slurm import compress_hostlist as compress

    return compress(hosts)


def _split_top(text: str) -> list[str]:
    """Split at commas (and whitespace) that are outside brackets."""
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"invalid hostlist {text!r}: nested '['")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"invalid hostlist {text!r}: unbalanced ']'")
        if depth == 0 and (ch == "," or ch.isspace()):
            if current:
                items.append("".join(current))
            current = []
            continue
        current.append(ch)
    if depth != 0:
        raise ValueError(f"invalid hostlist {text!r}: unbalanced '['")
    if current:
        items.append("".join(current))
    return items


def _ranges(body: str, item: str) -> list[tuple[int, int, int]]:
    """``0001-0003,0010`` -> [(1, 3, 4), (10, 10, 4)] (low, high, width)."""
    out: list[tuple[int, int, int]] = []
    for raw in body.split(","):
        part = raw.strip()
        match = _RANGE.match(part)
        if match is None:
            raise ValueError(f"invalid hostlist range {part!r} in {item!r}")
        low_text, high_text = match.group(1), match.group(2)
        low = int(low_text)
        high = int(high_text) if high_text is not None else low
        if high < low:
            raise ValueError(f"invalid hostlist range {part!r} in {item!r}: {high} < {low}")
        out.append((low, high, len(low_text)))
    return out


def _count_item(item: str) -> int:
    match = re.search(r"\[([^\]]*)\]", item)
    if match is None:
        return 1
    return sum(high - low + 1 for low, high, _ in _ranges(match.group(1), item))


def _expand_item(item: str) -> list[str]:
    start = item.find("[")
    if start < 0:
        if "]" in item:
            raise ValueError(f"invalid hostlist {item!r}: unbalanced ']'")
        return [item]
    end = item.find("]", start)
    if end < 0:
        raise ValueError(f"invalid hostlist {item!r}: unbalanced '['")
    prefix, body, rest = item[:start], item[start + 1 : end], item[end + 1 :]
    if rest:
        # Slurm 22.05 refuses text after the brackets too (``a[1-2]b``: "Invalid hostlist")
        raise ValueError(f"invalid hostlist {item!r}: text after ']'")
    names: list[str] = []
    for low, high, width in _ranges(body, item):
        names.extend(f"{prefix}{number:0{width}d}" for number in range(low, high + 1))
    return names


def expand_hostlist(text: str, limit: int = MAX_HOSTS) -> list[str]:
    """``n[0001-0003,0010],gpu7`` -> ``["n0001", "n0002", "n0003", "n0010", "gpu7"]``."""
    items = _split_top(text)
    total = 0
    for item in items:
        total += _count_item(item)
        if total > limit:
            raise ValueError(f"hostlist {text[:80]!r} expands to more than {limit} names")
    names: list[str] = []
    for item in items:
        names.extend(_expand_item(item))
    return names
