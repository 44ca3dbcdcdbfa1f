"""Benchmark: jobs in images, each figure beside a baseline from the same run (docs/images.md).

A real pool (``gpuyard up``, local executor, one virtual 8-GPU node) in a fresh temporary home,
whose registry is its own (``GPUYARD_REGISTRY=local``: Debian's docker-registry on 127.0.0.1,
TLS, the pool's credential). The images are built here from local files (busybox-static and
random bytes) and pushed with the pool's credential, so nothing comes from the internet.

latency  submit -> running of a ``true`` job in an image the node holds already, against the
         same job on the host, interleaved (``--starts`` each): p50 and p90 of the server's
         ``started_at - created_at``. Goal: at most 50 ms more at p50.
pull     a cold pull of a ~1 GB image (``--pull-mb``, uncompressed tar layers of random bytes,
         so neither side pays for gzip) from the pool's registry: its size over the time
         between the job's ``pulling image`` and ``pulled image`` events (download, digest
         check, unpacking). Baseline: the same layers downloaded by the registry client over
         the same TLS registry, digests checked, not unpacked. Goal: at least 200 MB/s.
once     100 jobs of one image the node lacks, submitted in one request: how many times it was
         pulled (``pulled image`` events over all 100 jobs, and the registry's own access log:
         GETs of the image's layer). Goal: exactly one.
deep     ``--deep-jobs`` one-GPU ``true`` jobs on 8 slots, submitted at once: starts per second
         until the last has ended, in an image against on the host. Goal: at least 0.8x.

Needs root (workers in an image are mounted by their supervisors) and the packages of
``make setup``'s image-tools. Nothing is asserted; the figures are printed. Not part of
``make test``. Run: ``sudo .venv/bin/python bench/images.py`` (``nice -n 19`` on a shared box).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import json
import os
import statistics
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gpuyard.client import Client
from gpuyard.images.local_registry import POOL_USER
from gpuyard.images.registry import Credentials, RegistryClient
from gpuyard.models import JobState
from gpuyard.models.image import ImageRef, MediaType
from gpuyard.testing.registry import NODE_ARCH, busybox_layer, tar_layer, write_layout
from launch import Pool, percentile, running_pool

SLOTS = 8
POLL = 0.002
NOT_STARTED = frozenset({JobState.QUEUED, JobState.STARTING})
CHUNK = 8 << 20


# -- images ----------------------------------------------------------------------------------


def true_layer() -> bytes:
    """busybox's ``true`` as /bin/true (the busybox layer has a few other applets)."""
    info = tarfile.TarInfo("bin/true")
    info.type, info.linkname, info.mtime = tarfile.SYMTYPE, "busybox", 1_700_000_000
    return tar_layer([info])


def small_image(layout: Path, marker: bytes) -> None:
    layers = [busybox_layer(), true_layer(), tar_layer([("etc/marker", marker)])]
    write_layout(layout, layers, architecture=NODE_ARCH, config={"Env": ["PATH=/bin"]})


def _blob(layout: Path, path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        while chunk := data.read(CHUNK):
            digest.update(chunk)
    name = layout / "blobs/sha256" / digest.hexdigest()
    path.rename(name)
    return {"digest": f"sha256:{digest.hexdigest()}", "size": name.stat().st_size}


def _json_blob(layout: Path, value: Mapping[str, Any]) -> dict[str, Any]:
    scratch = layout / "scratch"
    scratch.write_bytes(json.dumps(value).encode())
    return _blob(layout, scratch)


def _random_tar(path: Path, name: str, size: int) -> None:
    """A tar of one file of ``size`` random bytes, written without holding it in memory."""
    source = path.with_suffix(".data")
    with source.open("wb") as out:
        for offset in range(0, size, CHUNK):
            out.write(os.urandom(min(CHUNK, size - offset)))
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(source, arcname=name)
    source.unlink()


def big_image(layout: Path, megabytes: int, layers: int = 8) -> int:
    """An OCI layout of busybox and ``layers`` uncompressed layers of random bytes; the
    bytes of all its layers."""
    (layout / "blobs/sha256").mkdir(parents=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    descriptors, diff_ids = [], []
    for i, data in enumerate([busybox_layer(), true_layer()]):  # so that `true` runs in it
        path = layout / f"base{i}.tar.gz"
        path.write_bytes(data)
        descriptors.append({"mediaType": MediaType.OCI_LAYER_GZIP, **_blob(layout, path)})
        diff_ids.append("sha256:" + hashlib.sha256(gzip.decompress(data)).hexdigest())
    for i in range(layers):
        path = layout / f"layer{i}.tar"
        _random_tar(path, f"data/part{i}", (megabytes << 20) // layers)
        descriptors.append({"mediaType": MediaType.OCI_LAYER, **_blob(layout, path)})
        diff_ids.append(descriptors[-1]["digest"])  # uncompressed: the same digest
    config = {
        "architecture": NODE_ARCH,
        "os": "linux",
        "config": {"Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": MediaType.OCI_MANIFEST,
        "config": {"mediaType": MediaType.OCI_CONFIG, **_json_blob(layout, config)},
        "layers": descriptors,
    }
    entry = {"mediaType": MediaType.OCI_MANIFEST, **_json_blob(layout, manifest)}
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry]}))
    return sum(int(d["size"]) for d in descriptors)


# -- the pool --------------------------------------------------------------------------------


@contextlib.contextmanager
def image_pool() -> Iterator[tuple[Pool, RegistryClient]]:
    options = ["--virtual-nodes", "1", "--gpus-per-node", str(SLOTS), "--memory-per-node", "64G"]
    env = {"GPUYARD_REGISTRY": "local", "GPUYARD_RUN_AS": "pool"}
    with running_pool(SLOTS, options=options, env=env) as pool:
        url = json.loads((pool.home / "server.json").read_text())["registry"]
        files = pool.home / "registry"
        credentials = Credentials(POOL_USER, (files / "password").read_text().strip())
        with RegistryClient(url, credentials=credentials, ca_file=files / "cert.pem") as reg:
            yield pool, reg


def push(registry: RegistryClient, layout: Path, name: str) -> str:
    return registry.push(layout, ImageRef.parse(name))


def wait_job(client: Client, job_id: int, done: Any, timeout: float = 600) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        job = client.job(job_id)
        if done(job):
            return job
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} is still {job.state.value}: {job.reason}")
        time.sleep(POLL)


def start_latency(client: Client, spec: Mapping[str, Any]) -> float:
    """Seconds from submission to running on the server's clock; the job is let end."""
    job = client.submit(spec)
    job = wait_job(client, job.id, lambda j: j.state not in NOT_STARTED)
    if job.started_at is None:
        raise SystemExit(f"job {job.id} did not start: {job.state.value} {job.reason}")
    wait_job(client, job.id, lambda j: j.status.is_terminal())
    return float((job.started_at - job.created_at).total_seconds())


def drain(client: Client, specs: list[dict[str, Any]]) -> tuple[list[int], float]:
    """Submit ``specs`` at once; their ids and the seconds until every one has ended."""
    began = time.perf_counter()
    ids = client.submit_many(specs)
    while client.jobs(ids=ids, status=["queued", "running"], limit=1).total:
        time.sleep(0.05)
    seconds = time.perf_counter() - began
    failed = client.jobs(ids=ids, status=["failed"], limit=1)
    if failed.total:
        raise SystemExit(f"{failed.total} jobs failed: {failed.items[0].reason}")
    return ids, seconds


# -- scenarios -------------------------------------------------------------------------------


def latency(client: Client, image: str, starts: int) -> None:
    host = {"command": "true", "name": "lat-host", "resources": {"gpus": 1}}
    inside = {**host, "name": "lat-image", "image": image}
    start_latency(client, inside)  # the image on the node, first-use costs paid
    start_latency(client, host)
    times: dict[str, list[float]] = {"host": [], "image": []}
    for _ in range(starts):
        times["host"].append(start_latency(client, host))
        times["image"].append(start_latency(client, inside))
    base = statistics.median(times["host"]) * 1000
    print(f"submit -> running, {starts} jobs each (server clock)")
    for label, values in times.items():
        ms = [v * 1000 for v in values]
        p50, p90 = statistics.median(ms), percentile(ms, 90)
        extra = "" if label == "host" else f"   {p50 - base:+.1f} ms at p50 (goal: <= +50 ms)"
        print(f"  {label:<6} p50 {p50:7.1f} ms   p90 {p90:7.1f} ms{extra}")


def pull(client: Client, registry: RegistryClient, work: Path, megabytes: int) -> None:
    layout = work / "big"
    size = big_image(layout, megabytes)
    ref = ImageRef.parse("bench/big:1")
    digest = registry.push(layout, ref)
    baseline = download(registry, ref.pinned(digest), work / "download")
    job = client.submit({"command": "true", "name": "pull", "image": str(ref)})
    wait_job(client, job.id, lambda j: j.status.is_terminal())
    events = [e for e in client.events(job.id) if e.kind == "image"]
    began = next(e.time for e in events if e.reason.startswith("pulling image"))
    ended = next(e.time for e in events if e.reason.startswith("pulled image"))
    seconds = (ended - began).total_seconds()
    print(f"cold pull of {size / 1e6:.0f} MB ({megabytes} MiB of random bytes, 8 tar layers)")
    print(f"  download only    {size / baseline / 1e6:7.0f} MB/s   ({baseline:.1f} s)")
    print(
        f"  pull (job)       {size / seconds / 1e6:7.0f} MB/s   ({seconds:.1f} s; "
        f"goal: >= 200 MB/s)   {seconds / baseline:.2f}x the download's time"
    )


def download(registry: RegistryClient, ref: ImageRef, into: Path) -> float:
    """Seconds to download every layer of ``ref`` with its digest checked."""
    into.mkdir()
    manifest = registry.image(ref).manifest
    began = time.perf_counter()
    for i, layer in enumerate(manifest.layers):
        registry.blob(ref, layer, into / str(i))
    seconds = time.perf_counter() - began
    for path in into.iterdir():
        path.unlink()
    return seconds


def once(client: Client, registry: RegistryClient, pool: Pool, work: Path, jobs: int) -> None:
    small_image(work / "once", b"pulled once\n")
    digest = push(registry, work / "once", "bench/once:1")
    layers = registry.image(ImageRef.parse(f"bench/once@{digest}")).manifest.layers
    spec = {"command": "true", "name": "once", "image": "bench/once:1", "resources": {"gpus": 1}}
    ids, seconds = drain(client, [spec] * jobs)
    pulled = sum(
        1
        for job_id in ids
        for e in client.events(job_id)
        if e.kind == "image" and e.reason.startswith("pulled image")
    )
    log = (pool.home / "registry" / "log").read_text(errors="replace")
    gets = log.count(f"GET /v2/bench/once/blobs/{layers[-1].digest}")
    print(f"{jobs} jobs of one image the node lacked, submitted at once ({seconds:.1f} s)")
    print(f"  pulls: {pulled} (pulled-image events), {gets} (registry GETs of its top layer)")


def deep(client: Client, image: str, jobs: int) -> None:
    host = {"command": "true", "name": "deep-host", "resources": {"gpus": 1}}
    inside = {**host, "name": "deep-image", "image": image}
    _, host_s = drain(client, [host] * jobs)
    _, image_s = drain(client, [inside] * jobs)
    host_rate, image_rate = jobs / host_s, jobs / image_s
    print(f"deep queue: {jobs} one-GPU `true` jobs on {SLOTS} slots, submitted at once")
    print(f"  host   {host_rate:6.1f} starts/s")
    print(
        f"  image  {image_rate:6.1f} starts/s   {image_rate / host_rate:.2f}x the host's "
        "(goal: >= 0.8x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--starts", type=int, default=30)
    parser.add_argument("--pull-mb", type=int, default=1024)
    parser.add_argument("--once-jobs", type=int, default=100)
    parser.add_argument("--deep-jobs", type=int, default=300)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: workers in an image are mounted by their supervisors")
    with tempfile.TemporaryDirectory(prefix="gpuyard-bench-images-") as tmp:
        work = Path(tmp)
        with image_pool() as (pool, registry), Client(pool.url) as client:
            small_image(work / "true", b"bench\n")
            push(registry, work / "true", "bench/true:1")
            latency(client, "bench/true:1", args.starts)
            once(client, registry, pool, work, args.once_jobs)
            deep(client, "bench/true:1", args.deep_jobs)
            pull(client, registry, work, args.pull_mb)
        for line in pool.log_problems:
            print(f"  pool log: {line}")


if __name__ == "__main__":
    main()
