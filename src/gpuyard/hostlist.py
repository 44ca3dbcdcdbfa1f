"""Slurm host lists: ``n[0001-0003,0010],gpu7`` and back.

* ``expand_hostlist(text, limit=MAX_HOSTS) -> list[str]`` is what ``scontrol show hostnames``
  prints, one name per item, in the order written (duplicates kept). Malformed text (unbalanced
  or nested brackets, ``[3-1]``, ``[a-b]``, empty ranges, text after ``]`` which Slurm 22.05
  refuses too) raises ``ValueError`` naming the offending part; a list that would expand to
  more than ``limit`` names raises ``ValueError`` before anything is built.
* ``compress_hostlist(names) -> str`` is what ``sacct``/``squeue`` NodeList print and what a
  job's ``SLURM_NODELIST`` holds (:mod:`gpuyard.launch.slurm`): names that end in a number are
  grouped by prefix (and zero-padded width), sorted, and runs become ranges; other names are
  kept as they are.
* ``compress_counts(counts) -> str`` is Slurm's form of a per-node list of numbers, as
  ``SLURM_TASKS_PER_NODE`` and ``SLURM_JOB_CPUS_PER_NODE`` hold it: ``2(x3),1`` for
  [2, 2, 2, 1] (a run of equal neighbours as ``value(xcount)``).

The one copy of these rules, for every side: the Slurm commands (:mod:`gpuyard.slurm`), the
launch plan (:mod:`gpuyard.launch.slurm`, which may not import ``gpuyard.slurm``) and the steps
inside a job (:mod:`gpuyard.slurm.step`, which run with the standard library only). So it is a
foundation module: pure functions over the standard library, importing nothing of gpuyard.
"""

from __future__ import annotations

import functools
import re

TYPE_CHECKING = False  # typing is not imported at run time (sbatch's quick path)
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["MAX_HOSTS", "compress_counts", "compress_hostlist", "expand_hostlist"]

MAX_HOSTS = 100_000
"""The most names ``expand_hostlist`` builds: ``n[0-99999999]`` from a client is refused."""

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_NUMBERED = re.compile(r"^(.*?)(\d+)$")


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


def compress_hostlist(hosts: Sequence[str]) -> str:
    """Slurm's hostlist form: ``node[0-3,7],gpu[01-02,10]``. Names that end in a number are
    grouped by their prefix and zero-padded width (``n01`` and ``n1`` stay apart, ``n01`` and
    ``n10`` go together, as in Slurm), each group's numbers sorted into ranges; other names are
    kept once, in order."""
    return _compress(tuple(hosts))


@functools.lru_cache(maxsize=64)
def _compress(hosts: tuple[str, ...]) -> str:
    # Every worker of a gang gets the same list: worked out once, not once per worker (a
    # 1,000-node gang would cost a second of a launch).
    groups: dict[tuple[str, int], set[int]] = {}
    order: list[tuple[str, int] | str] = []
    plain: set[str] = set()
    numbered = [(host, _NUMBERED.match(host)) for host in hosts]
    # A number without leading zeros joins the zero-padded ones of its length (gpu01, gpu10:
    # gpu[01,10]); otherwise it is unpadded (n9, n10: n[9-10]).
    padded = {
        (m.group(1), len(m.group(2)))
        for _, m in numbered
        if m is not None and m.group(2).startswith("0") and len(m.group(2)) > 1
    }
    for host, match in numbered:
        if match is None:
            if host not in plain:
                plain.add(host)
                order.append(host)
            continue
        prefix, digits = match.groups()
        key = (prefix, len(digits) if (prefix, len(digits)) in padded else 0)
        if key not in groups:
            groups[key] = set()
            order.append(key)
        groups[key].add(int(digits))
    parts = []
    for entry in order:
        if isinstance(entry, str):
            parts.append(entry)
            continue
        prefix, width = entry
        runs: list[list[int]] = []
        for number in sorted(groups[entry]):
            if runs and number == runs[-1][1] + 1:
                runs[-1][1] = number
            else:
                runs.append([number, number])
        text = ",".join(
            f"{low:0{width}d}" if low == high else f"{low:0{width}d}-{high:0{width}d}"
            for low, high in runs
        )
        single = len(runs) == 1 and runs[0][0] == runs[0][1]
        parts.append(f"{prefix}{text}" if single else f"{prefix}[{text}]")
    return ",".join(parts)


def compress_counts(counts: Sequence[int]) -> str:
    """Slurm's form of a per-node list of numbers: ``2(x3),1`` for [2, 2, 2, 1]."""
    parts: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j + 1 < len(counts) and counts[j + 1] == counts[i]:
            j += 1
        parts.append(f"{counts[i]}(x{j - i + 1})" if j > i else str(counts[i]))
        i = j + 1
    return ",".join(parts)
