"""Benchmark: what running a worker inside an image adds to its start, beside the host path
measured in the same run (docs/decisions.md, "Workers in an image run by the supervisor's own
mounts").

What is measured, and how
-------------------------
Real supervisors (``python -I -S supervisor_entry.py DIR``), driven directly with a
``spec.json`` each (no executor, no server), in a fresh temporary directory. Each start runs
``true`` as a throw-away uid (no account is made: the supervisor drops to the numbers), without
a cgroup (the same cost on both paths). For each path, ``--starts`` starts one after the other;
the figure is the wall time from spawning the supervisor to its exit, which comes after the
command has ended and the exit record is written (start, run, end):

- *host*: the command on the host, as a pool run by root starts it today (a private /tmp,
  /var/tmp and /dev/shm in a mount namespace of its own: docs/security.md);
- *host, bare*: the same without that namespace (a pool not run by root), for reference;
- *image (native)*: the command inside a busybox rootfs made here from ``/bin/busybox`` (no
  host sandbox: the image has its own /tmp and /dev/shm), with the native runtime
  (:mod:`gpuyard.executors.local.container`): overlay, pivot_root, /proc, /sys, /dev,
  /dev/shm, a read-write bind of the workspace;
- *host + bwrap* (when ``bwrap`` is installed): the host path with the command
  ``bwrap --ro-bind ROOTFS / --proc /proc --dev /dev --unshare-pid true``: what exec'ing
  bubblewrap from the supervisor's child would add.

p50 and p90 of each, and the difference from the host's p50. Nothing is asserted. Needs root
(mount namespaces). Run it as ``.venv/bin/python bench/container_start.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gpuyard.executors.local.supervisor_entry as entry

UID = 64_321
PRIVATE = [d for d in ("/tmp", "/var/tmp", "/dev/shm") if os.path.isdir(d)]
"""What a root pool's executor makes private by default (docs/security.md)."""
TRUE_ARGV = ["true"]


def make_rootfs(root: Path) -> None:
    (root / "bin").mkdir(parents=True)
    for name in ("etc", "proc", "dev"):  # bwrap mounts on them: it cannot make them
        (root / name).mkdir()
    shutil.copy("/bin/busybox", root / "bin" / "busybox")
    for name in ("sh", "true"):
        (root / "bin" / name).symlink_to("busybox")
    (root / "etc" / "os-release").write_text("ID=gpuyard-bench\n")
    root.chmod(0o755)


def spec(
    base: Path, n: int, argv: list[str], image: dict[str, object] | None, sandbox: bool
) -> Path:
    directory = base / f"sup-{n}"
    directory.mkdir(mode=0o700)
    workspace = base / f"ws-{n}"
    workspace.mkdir()
    os.chown(workspace, UID, UID)
    data = {
        "job": n,
        "attempt": 0,
        "rank": 0,
        "argv": argv,
        "env": {"PATH": "/usr/bin:/bin"} if image is None else {},
        "cwd": "/",
        "grace": 5,
        "log": str(directory / "log"),
        "log_max": 0,
        "files": {},
        "binds": [],
        "notify": "",
        "cgroup": None,
        "account": {"name": "bench", "uid": UID, "gid": UID, "groups": []},
        "workspace": str(workspace),
        "job_dir": "",
        "sandbox": {"private": PRIVATE, "keep": [str(workspace.parent.parent)]}
        if sandbox
        else None,
        "terminal": False,
        "image": None
        if image is None
        else {**image, "mounts": [{"source": str(workspace), "target": "/ws", "readonly": False}]},
    }
    (directory / "spec.json").write_text(json.dumps(data))
    return directory


def start(directory: Path) -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-I", "-S", entry.__file__, str(directory)], check=True)
    took = time.perf_counter() - began
    record = json.loads((directory / "exit.json").read_text())
    if record["exit_code"] != 0:
        raise SystemExit(f"{directory}: {record} {(directory / 'log').read_text()}")
    return took


def measure(
    base: Path, argv: list[str], image: dict[str, object] | None = None, sandbox: bool = False
) -> float:
    return start(spec(base, len(list(base.iterdir())), argv, image, sandbox))


def report(label: str, times: list[float], host_p50: float) -> None:
    p50 = statistics.median(times) * 1000
    p90 = statistics.quantiles(times, n=10)[-1] * 1000
    extra = "" if label == "host" else f"  (+{p50 - host_p50 * 1000:.1f} ms at p50)"
    print(f"{label:<16} p50 {p50:7.1f} ms   p90 {p90:7.1f} ms{extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=50)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: the worker's mount namespace")
    with tempfile.TemporaryDirectory(prefix="gpuyard-bench-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)
        rootfs = base / "rootfs"
        make_rootfs(rootfs)
        runs = base / "runs"
        runs.mkdir()
        image: dict[str, object] = {
            "runtime": "native",
            "rootfs": str(rootfs),
            "env": {"PATH": "/bin"},
        }
        # Interleaved rounds, so that a change of the machine's load hits every path alike.
        results: dict[str, list[float]] = {"host": [], "host, bare": [], "image (native)": []}
        bwrap = shutil.which("bwrap")
        if bwrap:
            results["host + bwrap"] = []
        wrapped = [bwrap or "", "--ro-bind", str(rootfs), "/", "--proc", "/proc", "--dev", "/dev"]
        wrapped += ["--unshare-pid", "/bin/true"]
        for _ in range(args.starts):
            results["host"].append(measure(runs, TRUE_ARGV, sandbox=True))
            results["host, bare"].append(measure(runs, TRUE_ARGV))
            results["image (native)"].append(measure(runs, TRUE_ARGV, image))
            if bwrap:
                results["host + bwrap"].append(measure(runs, wrapped, sandbox=True))
        host_p50 = statistics.median(results["host"])
        print(f"{args.starts} starts of `true` per path, each from supervisor spawn to its exit")
        for label, times in results.items():
            report(label, times, host_p50)


if __name__ == "__main__":
    main()
