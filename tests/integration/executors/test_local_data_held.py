"""The local executor tells which dataset versions each of its nodes holds a complete copy of
(docs/datasets.md, "Data preparation"): what placement prefers and prediction counts."""

from __future__ import annotations

from pathlib import Path

from gpuyard.executors.local import cgroups
from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.models.dataprep import DataSource
from gpuyard.services.dataset_files import hash_tree

NO_CGROUPS = cgroups.Isolation(cgroups.NONE)


def version(root: Path, version_id: int) -> DataSource:
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.bin").write_bytes(b"x" * 4096)
    manifest = hash_tree(str(root), None)
    return DataSource(
        version_id=version_id,
        ref=f"alice/data@{version_id}",
        path=str(root),
        manifest=manifest,
        digest=manifest.digest(),
    )


def test_each_node_reports_the_versions_it_holds(tmp_path: Path) -> None:
    executor = LocalExecutor(tmp_path / "home", virtual_nodes=2, isolation=NO_CGROUPS)
    try:
        assert executor.data_held() == {}
        five, six = version(tmp_path / "v5", 5), version(tmp_path / "v6", 6)
        executor.prepare_data("node1", five, job_id=1, progress=lambda _d, _t: None)
        executor.prepare_data("node1", six, job_id=1, progress=lambda _d, _t: None)
        executor.prepare_data("node0", six, job_id=2, progress=lambda _d, _t: None)
        # A copy cut short (no metadata written) is not held.
        (executor.data.node_dir("node0") / "v5-0123456789abcdef").mkdir()
        assert executor.data_held() == {"node0": {6}, "node1": {5, 6}}
    finally:
        executor.close()
