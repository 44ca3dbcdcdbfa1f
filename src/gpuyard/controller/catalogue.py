"""A job's dataset mounts as they stand when any of its workers starts (docs/datasets.md,
"Who reaches a dataset's files"): its own workers (:mod:`gpuyard.controller.lifecycle`) and
the exec workers and shells of ``gpuyard exec`` (:mod:`gpuyard.controller.hold`) alike."""

from __future__ import annotations

from gpuyard.errors import GpuyardError
from gpuyard.executors.base import LaunchError
from gpuyard.models.job import JobSpec
from gpuyard.services.datasets import mounts_at_launch
from gpuyard.store.engine import Store

__all__ = ["catalogue_mounts"]


def catalogue_mounts(store: Store, spec: JobSpec, owner: str) -> tuple[JobSpec, frozenset[str]]:
    """``spec`` with each pinned dataset version read again from the catalogue (still
    ``owner``'s to mount, at the catalogue's path), and the paths the pool holds, which the
    workers' launcher opens itself; LaunchError saying which mount is no longer theirs."""
    if not any(m.dataset_version is not None for m in spec.mounts.datasets):
        return spec, frozenset()
    with store.read() as session:
        try:
            return mounts_at_launch(session, spec, owner)
        except GpuyardError as exc:
            raise LaunchError(exc.detail) from None
