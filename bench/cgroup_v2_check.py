"""Check, on a cgroup v2 host, what the local executor's isolation really enforces there.

Run it as the user who runs ``gpuyard up`` (root for the full picture), on the kind of host of
issue 24 point 12: a GPU machine where ``gpuyard up`` is started by hand in a cgroup that holds
other processes (a login session, a container) and whose parent delegates only some
controllers. No pool is needed; nothing is left behind but the leaf ``gpuyard-pool`` that
detection may have made (the processes of our cgroup live there afterwards, as they do under a
pool)::

    .venv/bin/python bench/cgroup_v2_check.py

It uses the pool's own detection (:func:`gpuyard.executors.local.cgroups.detect`), then:

1. prints the mode, the controllers delegated to workers, what detection moved, the warnings;
2. makes a worker cgroup with ``memory.max`` = 64 MiB, runs a child in it that allocates
   256 MiB, and checks it was OOM-killed (``memory.events``: ``oom_kill``);
3. runs a child that starts a ``setsid`` grandchild, kills the cgroup whole (``cgroup.kill``
   where there is one) and checks the grandchild is gone;
4. with ``pids``: caps a worker at 16 processes and checks a fork loop stops there;
5. with ``cpu``: writes ``cpu.max`` for half a CPU and reads it back.

On a v1 host it checks the same with v1's files (a sanity check of the script itself).

Each line says HELD, FAILED or SKIPPED (the controller is not delegated here). The exit status
is 1 when anything failed. It measures nothing: it is the check to run where the test machines
cannot go (they have cgroup v1 only), and its output belongs in the issue.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

from gpuyard.executors.local import cgroups

ALLOCATE = "x = bytearray(256 << 20); x[::4096] = b'1' * len(x[::4096]); print('survived')"
FORK_LOOP = """
import os, time
n = 0
while n < 64:
    try:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
    except BlockingIOError:
        break
    n += 1
print(n, flush=True)
"""
SETSID = (
    "import os, subprocess, time; subprocess.Popen(['setsid', 'sleep', '600']); time.sleep(600)"
)


def run_in(cgroup: cgroups.Cgroup, code: str, *, wait: bool = True) -> subprocess.Popen[str]:
    """A Python child that joins ``cgroup`` before it runs ``code``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        preexec_fn=cgroup.join,  # noqa: PLW1509 - the child joins before it execs
        stdout=subprocess.PIPE,
        text=True,
    )
    if wait:
        proc.wait(timeout=120)
    return proc


def running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie has ended; only its parent's wait is missing)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def check_memory(found: cgroups.Isolation) -> tuple[str, str]:
    cgroup = found.cgroup(f"check-mem-{uuid.uuid4().hex[:6]}", memory=64 << 20, mcpus=0, pids=0)
    if cgroup is None or not cgroup.memory:
        return "SKIPPED", "memory is not delegated to workers"
    cgroup.create()
    try:
        proc = run_in(cgroup, ALLOCATE)
        out = proc.stdout.read() if proc.stdout else ""
        kills = cgroup.oom_kills()
        held = "survived" not in out and kills > 0
        return ("HELD" if held else "FAILED"), f"exit {proc.returncode}, oom_kill {kills}"
    finally:
        cgroup.kill()
        cgroup.remove()


def check_kill(found: cgroups.Isolation) -> tuple[str, str]:
    cgroup = found.cgroup(f"check-kill-{uuid.uuid4().hex[:6]}", memory=0, mcpus=0, pids=0)
    if cgroup is None:
        return "SKIPPED", "no cgroup"
    cgroup.create()
    try:
        proc = run_in(cgroup, SETSID, wait=False)
        deadline = time.monotonic() + 30
        while len(cgroup.procs()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        members = cgroup.procs()
        how = (
            "cgroup.kill" if os.path.exists(os.path.join(cgroup.main, "cgroup.kill")) else "freeze"
        )
        cgroup.kill()
        proc.wait(timeout=30)
        alive = [pid for pid in members if running(pid)]
        held = len(members) >= 2 and not alive and not cgroup.procs()
        detail = f"{len(members)} processes (setsid one included) killed by {how}; left {alive}"
        return ("HELD" if held else "FAILED"), detail
    finally:
        cgroup.remove()


def check_pids(found: cgroups.Isolation) -> tuple[str, str]:
    cgroup = found.cgroup(f"check-pids-{uuid.uuid4().hex[:6]}", memory=0, mcpus=0, pids=16)
    if cgroup is None or not cgroup.pids:
        return "SKIPPED", "pids is not delegated to workers"
    cgroup.create()
    try:
        proc = run_in(cgroup, FORK_LOOP, wait=False)
        out = proc.stdout.readline().strip() if proc.stdout else ""
        cgroup.kill()
        proc.wait(timeout=30)
        forked = int(out) if out.isdigit() else -1
        held = 0 <= forked < 16 and cgroup.pids_limit_hits() > 0
        return ("HELD" if held else "FAILED"), f"forked {forked} of 64 under pids.max 16"
    finally:
        cgroup.remove()


def check_cpu(found: cgroups.Isolation) -> tuple[str, str]:
    cgroup = found.cgroup(f"check-cpu-{uuid.uuid4().hex[:6]}", memory=0, mcpus=500, pids=0)
    if cgroup is None or not cgroup.mcpus:
        return "SKIPPED", "cpu is not delegated to workers"
    cgroup.create()
    try:
        if cgroup.version == 2:
            name, directory, want = "cpu.max", cgroup.main, "50000 100000"
        else:
            name, directory, want = "cpu.cfs_quota_us", cgroup.dirs["cpu"], "50000"
        with open(os.path.join(directory, name)) as fh:
            written = fh.read().strip()
        return ("HELD" if written == want else "FAILED"), f"{name} {written}"
    finally:
        cgroup.remove()


def main() -> int:
    found = cgroups.detect(f"gpuyard-check-{uuid.uuid4().hex[:8]}")
    print(f"mode: {found.mode}")
    print(f"controllers for workers: {', '.join(sorted(found.controllers)) or 'none'}")
    print(f"parents: {found.parents}")
    for note in found.notes:
        print(f"note: {note}")
    for warning in found.warnings:
        print(f"warning: {warning}")
    if found.mode == cgroups.NONE:
        return 1
    failed = False
    for name, check in (
        ("memory.max OOM-kills a worker", check_memory),
        ("a worker is killed whole", check_kill),
        ("pids.max stops a fork loop", check_pids),
        ("cpu.max is written", check_cpu),
    ):
        try:
            verdict, detail = check(found)
        except (OSError, subprocess.SubprocessError) as exc:
            verdict, detail = "FAILED", f"{type(exc).__name__}: {exc}"
        failed = failed or verdict == "FAILED"
        print(f"{verdict:8} {name}: {detail}")
    found.remove_parents()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
