"""Published per-job results of other simulators, to show beside ours (never fed to a policy).

The file has one row per job: ``job_id``, the cluster (``vc`` or ``cluster``), and for each
policy ``P`` the columns ``P_queue`` and ``P_jct`` (seconds), optionally ``P_preemptions``:
the shape of the Venus trace's ``venus_sept2020_reference_results.csv.gz``. Submit times come
from the trace, by job id; jobs the trace does not replay are left out.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from pathlib import Path

from gpuyard.errors import InvalidSpec
from gpuyard.simulator.metrics import JobResult
from gpuyard.simulator.trace import TraceJob, open_text

__all__ = ["PUBLISHED_SUFFIX", "find_published", "label", "load_published"]

PUBLISHED_SUFFIX = " (published)"
_NAMES = {"fifo": "FIFO", "sjf": "SJF", "srtf": "SRTF", "tiresias": "Tiresias", "qssf": "QSSF"}


def label(policy: str) -> str:
    """``tiresias`` -> ``Tiresias (published)``."""
    return _NAMES.get(policy, policy.upper()) + PUBLISHED_SUFFIX


def find_published(trace: Path) -> Path | None:
    """A ``*reference_results.csv[.gz]`` file beside the trace, if there is exactly one."""
    found = sorted(trace.parent.glob("*reference_results.csv*"))
    return found[0] if len(found) == 1 else None


def load_published(path: Path, jobs: Iterable[TraceJob]) -> dict[str, list[JobResult]]:
    """Per-job results by label (``FIFO (published)`` ...), in file order.

    Checked whole before any replay (the CLI loads it first): a file of the wrong shape, a
    value that is not a number, or a file with none of the trace's jobs (the results of
    another trace) is an :class:`InvalidSpec` naming what to fix."""
    by_id = {j.job_id: j for j in jobs}
    line = 1
    with open_text(path) as stream:
        try:
            reader = csv.DictReader(stream)
            header = list(reader.fieldnames or [])
            policies = [c[: -len("_queue")] for c in header if c.endswith("_queue")]
            policies = [p for p in policies if f"{p}_jct" in header]
            if "job_id" not in header or not policies:
                raise InvalidSpec(
                    f"published results {path}: expected columns job_id and, per policy P, "
                    f"P_queue and P_jct (e.g. fifo_queue, fifo_jct); the file has "
                    f"{', '.join(header) or 'no header'} (--published none: show none)"
                )
            out: dict[str, list[JobResult]] = {label(p): [] for p in policies}
            rows = 0
            for row in reader:
                line = reader.line_num
                rows += 1
                job = by_id.get((row.get("job_id") or "").strip())
                if job is None:
                    continue
                cluster = row.get("vc") or row.get("cluster") or job.cluster
                for p in policies:
                    queue = _figure(path, line, row, f"{p}_queue")
                    jct = _figure(path, line, row, f"{p}_jct")
                    preemptions = int(_figure(path, line, row, f"{p}_preemptions", "0"))
                    out[label(p)].append(
                        JobResult(
                            policy=label(p),
                            cluster=cluster,
                            job_id=job.job_id,
                            gpus=job.gpus,
                            submit=job.submit,
                            start=None,
                            end=job.submit + jct,
                            queue=queue,
                            jct=jct,
                            preemptions=preemptions,
                        )
                    )
        except (csv.Error, UnicodeDecodeError, OSError, EOFError) as exc:
            raise InvalidSpec(
                f"published results {path}, after line {line}: cannot read the CSV ({exc})"
            ) from None
    if not any(out.values()):
        raise InvalidSpec(
            f"published results {path}: none of its {rows:,} rows is a job of the trace "
            "(no job_id in common): are they the results of another trace? Give the right "
            "file with --published FILE, or --published none"
        )
    return out


def _figure(
    path: Path, line: int, row: dict[str, str | None], column: str, default: str = ""
) -> float:
    text = (row.get(column) or default).strip()
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        what = "empty" if not text else f"{text!r} is not a number of 0 or more"
        raise InvalidSpec(f"published results {path}, line {line}, column {column!r}: {what}")
    return value
