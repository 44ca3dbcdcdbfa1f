"""Published per-job results of other simulators, to show beside ours (never fed to a policy).

The file has one row per job: ``job_id``, the cluster (``vc`` or ``cluster``), and for each
policy ``P`` the columns ``P_queue`` and ``P_jct`` (seconds), optionally ``P_preemptions``:
the shape of the Venus trace's ``venus_sept2020_reference_results.csv.gz``. Submit times come
from the trace, by job id; jobs the trace does not replay are left out.
"""

from __future__ import annotations

import csv
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
    """Per-job results by label (``FIFO (published)`` ...), in file order."""
    by_id = {j.job_id: j for j in jobs}
    with open_text(path) as stream:
        reader = csv.DictReader(stream)
        header = list(reader.fieldnames or [])
        policies = [c[: -len("_queue")] for c in header if c.endswith("_queue")]
        policies = [p for p in policies if f"{p}_jct" in header]
        if "job_id" not in header or not policies:
            raise InvalidSpec(
                f"{path}: expected job_id and POLICY_queue, POLICY_jct columns; got {header}"
            )
        out: dict[str, list[JobResult]] = {label(p): [] for p in policies}
        for line, row in enumerate(reader, start=2):
            job = by_id.get(row["job_id"])
            if job is None:
                continue
            cluster = row.get("vc") or row.get("cluster") or job.cluster
            for p in policies:
                try:
                    queue = float(row[f"{p}_queue"])
                    jct = float(row[f"{p}_jct"])
                    preemptions = int(float(row.get(f"{p}_preemptions") or 0))
                except ValueError:
                    raise InvalidSpec(f"{path}, line {line}: {p} figures are not numbers") from None
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
    return out
