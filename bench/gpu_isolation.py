"""Check on a GPU machine that a job opens only its own GPUs (issue 24, point 5).

Run as root on a host with NVIDIA GPUs: ``sudo .venv/bin/python bench/gpu_isolation.py``.
It starts a real local executor in a temporary home (mode 0711, so the job's account reaches
it) and runs, as a pool account (``gpy-gpucheck``, made when missing, removed at the end):

- a worker given no GPU, which unsets ``CUDA_VISIBLE_DEVICES`` and asks the CUDA driver
  (``libcuda``, through ctypes: no framework needed) how many devices it has and for a context
  on device 0: expected none;
- a worker given the machine's last GPU, which unsets the variable too: expected exactly one
  device, and a context on it;
- the same two as root (``--as-root``), where the devices cgroup on v1 holds and nothing on v2.

The account runs this Python, so the checkout and its ``.venv`` must be readable by other
accounts (not below ``/root``). Nothing is asserted; each worker's finding is printed beside
what was expected, and the exit code is 1 if one differs. docs/security.md, "What the job
gets", says what is isolated where.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.models.worker import Handle, WorkerKey, WorkerLaunch, WorkerState

PROBE = r"""
import ctypes, os
os.environ.pop("CUDA_VISIBLE_DEVICES", None)
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    print(f"devices=0 context=no (no libcuda: {exc})")
    raise SystemExit(0)
if cuda.cuInit(0) != 0:
    print("devices=0 context=no (cuInit failed)")
    raise SystemExit(0)
count = ctypes.c_int(0)
cuda.cuDeviceGetCount(ctypes.byref(count))
device, context = ctypes.c_int(0), ctypes.c_void_p()
made = count.value and cuda.cuDeviceGet(ctypes.byref(device), 0) == 0 and \
    cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device) == 0
print(f"devices={count.value} context={'yes' if made else 'no'}")
"""

ACCOUNT = "gpy-gpucheck"


def run(ex: LocalExecutor, job: int, gpus: str, run_as: str | None) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    handle: Handle = ex.launch(
        WorkerLaunch(
            WorkerKey(job, 0, 0),
            ex.nodes()[0].name,
            [sys.executable, "-c", PROBE],
            env,
            "/",
            5.0,
            run_as=run_as,
        )
    )
    deadline = time.monotonic() + 120
    while ex.status([handle])[0].state is WorkerState.RUNNING:
        if time.monotonic() > deadline:
            ex.kill(handle)
            return "timed out"
        time.sleep(0.1)
    return ex.read_log(handle, 0, 1 << 16)[0].decode().strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--as-root", action="store_true", help="also run the workers as root")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("run as root: the check needs a mount namespace per worker", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="gpuyard-gpu-isolation-", dir="/var/tmp"))
    base.chmod(0o711)
    ex = LocalExecutor(base / "home")
    gpus = ex.nodes()[0].gpu_devices
    print(f"machine: {len(ex.machine.gpus)} GPUs, isolation {ex.isolation.mode}")
    if not gpus:
        print("no GPU seen through NVML: nothing to check", file=sys.stderr)
        return 2
    cases = [
        ("no GPU", "", "devices=0 context=no"),
        (f"GPU {gpus[-1]}", gpus[-1], "devices=1 context=yes"),
    ]
    who = [ACCOUNT] + ([None] if args.as_root else [])
    failed = False
    try:
        job = 1
        for run_as in who:
            for label, given, expected in cases:
                got = run(ex, job, given, run_as)
                job += 1
                ok = got.startswith(expected)  # a failed cuInit says why after it
                failed |= not ok
                print(
                    f"{run_as or 'root':>14}  {label:<8} got {got!r:<28} expected {expected!r}"
                    f"  {'ok' if ok else 'DIFFERS'}"
                )
    finally:
        ex.close()
        shutil.rmtree(base, ignore_errors=True)
        subprocess.run(["userdel", ACCOUNT], check=False, capture_output=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
