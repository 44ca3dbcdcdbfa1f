"""A dataset version of the catalogue put straight into a store, for tests of what uses one
(the controller's data preparation, the scheduler's preference for nodes holding a copy)."""

from __future__ import annotations

from gpuyard.models.dataset import DatasetVisibility, Manifest, VersionState
from gpuyard.store.engine import Store
from gpuyard.store.tables import DatasetRow, DatasetVersionRow

__all__ = ["ready_version"]


def ready_version(
    store: Store,
    manifest: Manifest,
    *,
    owner: str = "alice",
    name: str = "data",
    path: str = "/shared/data",
) -> int:
    """Version 1 of ``owner``'s private dataset ``name``, ready, made from ``path`` with
    ``manifest``; its id."""
    with store.write() as session:
        row = DatasetRow(
            owner=owner, name=name, visibility=DatasetVisibility.PRIVATE, created_at=0.0
        )
        session.add(row)
        session.flush()
        version = DatasetVersionRow(
            dataset_id=row.id,
            version=1,
            state=VersionState.READY,
            source="path",
            path=path,
            manifest=manifest.model_dump(),
            digest=manifest.digest(),
            size=manifest.size,
            files=len(manifest.files),
            created_by=owner,
            created_at=0.0,
        )
        session.add(version)
        session.flush()
        return version.id
