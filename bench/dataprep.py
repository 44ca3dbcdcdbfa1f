"""Benchmark: data preparation's copy (docs/datasets.md, "Data preparation"), each figure
beside a baseline from the same run.

The node data cache itself (``executors/local/node_data.py``: the code a job's data phase runs
on each node), on a tree of random files made here (``--mb`` in all: a few large files and
many small ones, as a dataset of shards and an index), hashed into its manifest as the
catalogue would.

copy     a cold copy of the version into a node's cache (read, sha256 of every byte, write,
         checked against the manifest, sealed, renamed into place) against ``cp -r`` of the
         same tree to the same filesystem, interleaved ``--rounds`` times, medians. Both read
         the source from the page cache (it was just written or read) and are timed until
         their last write returned (dirty pages flushed, untimed, between rounds): the
         figure is the copy's own cost, not the disks'. Goal: at least 0.9x ``cp -r``.
once     ``--jobs`` jobs of one version on one node, asking at once (a thread each, as the
         launcher's threads do): how many copied it (goal: exactly one), and the time until
         the last had its copy, against one job alone.

Nothing is asserted; the figures are printed. Not part of ``make test``. Run:
``.venv/bin/python bench/dataprep.py`` (``nice -n 19`` on a shared box); ``--dir`` puts the
trees on the filesystem to measure (default: a temporary directory).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from gpuyard.executors.local.node_data import NodeData
from gpuyard.models.dataprep import DataSource
from gpuyard.services.dataset_files import hash_tree


def make_tree(root: Path, total_mb: int) -> DataSource:
    """Four large shards holding most of the bytes, and 200 small files."""
    root.mkdir(parents=True)
    small = 200
    small_size = 16 << 10
    large = (total_mb << 20) - small * small_size
    for i in range(4):
        with open(root / f"shard-{i}.bin", "wb") as out:
            left = large // 4
            while left:
                chunk = min(left, 8 << 20)
                out.write(os.urandom(chunk))
                left -= chunk
    index = root / "index"
    index.mkdir()
    for i in range(small):
        (index / f"{i:04d}.json").write_bytes(os.urandom(small_size))
    manifest = hash_tree(str(root), None)
    return DataSource(
        version_id=1,
        ref="bench/data@1",
        path=str(root),
        manifest=manifest,
        digest=manifest.digest(),
    )


def time_cp(source: DataSource, target: Path) -> float:
    began = time.perf_counter()
    subprocess.run(["cp", "-r", source.path, str(target)], check=True)
    took = time.perf_counter() - began
    shutil.rmtree(target)
    os.sync()  # untimed: each round starts with nothing dirty
    return took


def time_prepare(source: DataSource, cache: Path) -> float:
    data = NodeData(cache)
    began = time.perf_counter()
    data.prepare("n0", source, job_id=1, progress=lambda _d, _t: None)
    took = time.perf_counter() - began
    data.release(1)
    data.retention = 0
    data.sweep()
    os.sync()
    return took


def copy_round(source: DataSource, work: Path, rounds: int) -> None:
    cp_times, prep_times = [], []
    for i in range(rounds):
        cp_times.append(time_cp(source, work / f"cp-{i}"))
        prep_times.append(time_prepare(source, work / f"cache-{i}"))
    size = source.manifest.size
    cp, prep = statistics.median(cp_times), statistics.median(prep_times)
    print(f"copy   {size / 1e6:.0f} MB, {len(source.manifest.files)} files, median of {rounds}")
    print(f"       cp -r           {cp:6.2f} s  {size / cp / 1e6:7.0f} MB/s")
    print(f"       prepare          {prep:5.2f} s  {size / prep / 1e6:7.0f} MB/s (sha256 checked)")
    print(f"       ratio           {cp / prep:6.2f}x cp -r  (goal >= 0.9x)")


def once_round(source: DataSource, work: Path, jobs: int) -> None:
    alone = time_prepare(source, work / "alone")
    data = NodeData(work / "shared")
    copied: list[int] = []
    lock = threading.Lock()

    def job(job_id: int) -> None:
        got = data.prepare("n0", source, job_id=job_id, progress=lambda _d, _t: None)
        with lock:
            copied.append(got.copied)

    threads = [threading.Thread(target=job, args=(j,)) for j in range(jobs)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - began
    print(f"once   {jobs} jobs of one version on one node, at once")
    print(f"       copies made     {sum(1 for c in copied if c)}  (goal: 1)")
    print(f"       last job ready  {took:6.2f} s  (one job alone: {alone:.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="MB of the dataset tree")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--dir", type=Path, default=None, help="where to make the trees")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="dataprep-bench-") as tmp:
        work = Path(tmp)
        source = make_tree(work / "source", args.mb)
        copy_round(source, work, args.rounds)
        once_round(source, work, args.jobs)


if __name__ == "__main__":
    main()
