"""What a worker gets of the machine (issue 24, points 4, 5 and 7; docs/security.md, "What the
job gets" and "What is protected"): an allowlisted environment, a memory limit by default,
a private /tmp, /var/tmp and /dev/shm, and only its own GPUs' device files.

Real supervisors, real mount namespaces and cgroups (a pool run by root); fake GPU device files
(a machine of two fake GPUs whose device files are files of the test's, or real character
devices made with mknod that are not GPUs).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from gpuyard.executors.local import cgroups
from gpuyard.executors.local.executor import LocalExecutor
from gpuyard.executors.local.gpumeter import NoGpus
from gpuyard.executors.local.machine import GpuDevice, Machine
from gpuyard.models.resources import Resources
from gpuyard.models.worker import Handle, WorkerKey, WorkerLaunch, WorkerState
from gpuyard.testing.waits import wait_log
from gpuyard.testing.waits import whole_log as log

MakeExecutor = Callable[..., LocalExecutor]
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="a mount namespace per worker needs a pool run by root"
)

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
TIMEOUT = 60.0


def launch(
    ex: LocalExecutor,
    script: str,
    *,
    job: int = 1,
    attempt: int = 0,
    env: dict[str, str] | None = None,
    run_as: str | None = None,
    cwd: str = "/",
    limits: Resources | None = None,
) -> Handle:
    return ex.launch(
        WorkerLaunch(
            WorkerKey(job, attempt, 0),
            "local",
            ["sh", "-c", script],
            {**ex.base_env("local"), **ENV, **(env or {})},
            cwd,
            5.0,
            run_as=run_as,
            limits=limits or Resources(),
        )
    )


def finished(ex: LocalExecutor, handle: Handle) -> str:
    """The worker's log once it has exited (0 expected)."""
    deadline = time.monotonic() + TIMEOUT
    while (status := ex.status([handle])[0]).state is WorkerState.RUNNING:
        assert time.monotonic() < deadline, log(ex, handle)
        time.sleep(0.02)
    assert (status.state, status.exit_code) == (WorkerState.EXITED, 0), (status, log(ex, handle))
    return log(ex, handle)


# -- the environment (point 4) -----------------------------------------------------------------


def test_a_job_inherits_only_the_allowlisted_part_of_the_pools_environment(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGPASSWORD", "pool-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "cloud-secret")
    monkeypatch.setenv("SITE_SCRATCH", "/scratch")
    monkeypatch.setenv("LC_TIME", "C")
    monkeypatch.setenv("NCCL_IB_HCA", "mlx5_0")
    ex = make_executor(env_allow=("SITE_*",))
    handle = launch(ex, "env")
    lines = set(finished(ex, handle).splitlines())
    assert "pool-secret" not in log(ex, handle) and "cloud-secret" not in log(ex, handle)
    assert {"SITE_SCRATCH=/scratch", "LC_TIME=C", "NCCL_IB_HCA=mlx5_0"} <= lines
    # The pool's own configuration never reaches a job, whatever an admin allows.
    monkeypatch.setenv("GPUYARD_DATABASE_URL", "postgresql://u:pw@db/x")
    assert "GPUYARD_DATABASE_URL" not in make_executor(env_allow=("*",)).base_env("local")


# -- the default memory limit (point 7) --------------------------------------------------------


def test_a_job_that_names_no_memory_gets_the_pools_default_limit(
    make_executor: MakeExecutor, needs_cgroup: None, tmp_path: Path
) -> None:
    ex = make_executor(default_memory="25%", memory_per_node=8 << 30)
    go = tmp_path / "home" / "go"
    handle = launch(ex, f"echo up; while [ ! -e {go} ]; do sleep 0.05; done")
    wait_log(ex, handle, "up", TIMEOUT)
    cgroup = cgroups.Cgroup.from_json(handle["cgroup"])
    assert cgroup is not None and cgroup.memory == 2 << 30
    limit = Path(cgroup.dirs["memory"]) / "memory.limit_in_bytes"
    assert int(limit.read_text()) == 2 << 30
    go.touch()
    finished(ex, handle)
    # What the job asks for wins over the default.
    asked = launch(ex, "true", job=2, limits=Resources(memory=1 << 30))
    assert handle_memory(asked) == 1 << 30
    finished(ex, asked)


def handle_memory(handle: Handle) -> int:
    cgroup = cgroups.Cgroup.from_json(handle["cgroup"])
    assert cgroup is not None
    return cgroup.memory


# -- private /tmp, /var/tmp and /dev/shm (point 7) ---------------------------------------------


def test_each_worker_has_its_own_tmp_and_shm_gone_at_its_end(
    make_executor: MakeExecutor, tmp_path: Path
) -> None:
    ex = make_executor(private_tmp=True)
    name = f"gpuyard-private-{secrets.token_hex(4)}"
    go = tmp_path / "home" / "go"  # the pool's home stays reachable inside
    writer = launch(
        ex,
        f"echo mine > /tmp/{name} && echo mine > /dev/shm/{name} && echo mine > /var/tmp/{name}"
        f" && echo written; while [ ! -e {go} ]; do sleep 0.05; done",
    )
    wait_log(ex, writer, "written", TIMEOUT)
    probe = (
        f"for d in /tmp /dev/shm /var/tmp; do [ -e $d/{name} ] && echo seen $d; done; "
        "stat -c '%a %U' /tmp; echo probed"
    )
    reader = launch(ex, probe, job=2)
    assert finished(ex, reader).splitlines() == ["1777 root", "probed"]
    for directory in ("/tmp", "/dev/shm", "/var/tmp"):
        assert not Path(directory, name).exists()  # never on the host's
    go.touch()
    finished(ex, writer)
    again = launch(ex, probe, job=1, attempt=1)  # the same job's next worker starts empty
    assert finished(ex, again).splitlines() == ["1777 root", "probed"]


def test_a_link_planted_in_the_hosts_tmp_cannot_reach_a_job(
    make_executor: MakeExecutor, tmp_path: Path
) -> None:
    victim = tmp_path / "home" / "victim"
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text("intact\n")
    trap = Path("/tmp") / f"gpuyard-trap-{secrets.token_hex(4)}"
    trap.symlink_to(victim)
    try:
        ex = make_executor(private_tmp=True)
        handle = launch(ex, f"echo overwritten > {trap}; cat {trap}")
        assert finished(ex, handle) == "overwritten\n"
        assert victim.read_text() == "intact\n"
    finally:
        trap.unlink()


def test_the_working_directory_below_tmp_stays_reachable(
    make_executor: MakeExecutor, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.txt").write_text("data\n")
    ex = make_executor(private_tmp=True)
    handle = launch(ex, "cat train.txt && echo out > result.txt", cwd=str(project))
    assert finished(ex, handle) == "data\n"
    assert (project / "result.txt").read_text() == "out\n"


# -- GPU device files (point 5) ----------------------------------------------------------------


TWO_GPUS = Machine(
    hostname="local",
    cpus=4,
    memory=8 << 30,
    gpus=(GpuDevice(0, "Fake GPU", "GPU-aaaa"), GpuDevice(1, "Fake GPU", "GPU-bbbb")),
)


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory every account can pass through (pytest's own are 0700)."""
    path = Path(tempfile.mkdtemp(prefix="gpuyard-sandbox-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def owner() -> Iterator[str]:
    """A fresh pool account name (the executor makes it), removed at the end."""
    name = f"gpy-t{secrets.token_hex(4)}sb"
    yield name
    with contextlib.suppress(Exception):
        uid = int(
            subprocess.run(["id", "-u", name], check=False, capture_output=True, text=True).stdout
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            left = [p for p in psutil.process_iter(["uids"]) if p.info["uids"].real == uid]
            if not left:
                break
            for proc in left:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            time.sleep(0.05)
    subprocess.run(["userdel", name], check=False, capture_output=True)


def fake_devices(base: Path) -> Path:
    """GPU device files of the two fake GPUs and the shared ones, world-readable like the
    driver's (mode 0666)."""
    dev = base / "dev"
    dev.mkdir(mode=0o755)
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (dev / name).write_text(f"{name}\n")
        (dev / name).chmod(0o666)
    return dev


def test_a_job_opens_only_its_own_gpus_device_files(
    make_executor: MakeExecutor, base: Path, owner: str
) -> None:
    dev = fake_devices(base)
    ex = make_executor(
        base / "home",
        machine=TWO_GPUS,
        gpu_meter=NoGpus(),
        gpu_device_files=str(dev / "nvidia{index}"),
        gpu_shared_files=(str(dev / "nvidiactl"), str(dev / "nvidia-uvm")),
    )
    probe = (
        "for f in nvidia0 nvidia1 nvidiactl nvidia-uvm; do "
        f"cat {dev}/$f 2>/dev/null || echo denied $f; done; "
        'echo "visible=$CUDA_VISIBLE_DEVICES"'
    )
    given_one = launch(ex, probe, env={"CUDA_VISIBLE_DEVICES": "1"}, run_as=owner)
    assert finished(ex, given_one).splitlines() == [
        "denied nvidia0",
        "nvidia1",
        "nvidiactl",
        "nvidia-uvm",
        "visible=0",  # CUDA numbers the GPUs it can open from 0
    ]
    given_none = launch(ex, probe, job=2, run_as=owner)
    assert finished(ex, given_none).splitlines() == [
        "denied nvidia0",
        "denied nvidia1",
        "denied nvidiactl",
        "denied nvidia-uvm",
        "visible=",
    ]
    # The host's files are as they were.
    assert (dev / "nvidia0").read_text() == "nvidia0\n"


def test_the_devices_cgroup_denies_other_gpus_even_to_a_job_run_as_root(
    make_executor: MakeExecutor, needs_cgroup: None, base: Path
) -> None:
    """Character devices that are not GPUs stand in for them (/dev/full's and /dev/zero's
    numbers): opened through the host's own /dev, which no mount namespace hides."""
    ex = make_executor(base / "home", machine=TWO_GPUS, gpu_meter=NoGpus())
    if "devices" not in ex.isolation.controllers:
        pytest.skip("no devices controller (cgroup v2 hides GPUs by the mount namespace only)")
    dev = base / "dev"
    dev.mkdir()
    subprocess.run(["mknod", str(dev / "nvidia0"), "c", "1", "7"], check=True)  # /dev/full
    subprocess.run(["mknod", str(dev / "nvidia1"), "c", "1", "5"], check=True)  # /dev/zero
    ex.gpu_device_files = str(dev / "nvidia{index}")
    probe = (
        "head -c1 /dev/zero >/dev/null 2>&1 && echo zero || echo denied zero; "
        "head -c1 /dev/full >/dev/null 2>&1 && echo full || echo denied full"
    )
    handle = launch(ex, probe, env={"CUDA_VISIBLE_DEVICES": "1"})
    assert finished(ex, handle).splitlines() == ["zero", "denied full"]


def test_what_a_job_keeps_in_its_shm_counts_in_its_memory(
    make_executor: MakeExecutor, needs_cgroup: None
) -> None:
    """tmpfs pages are charged to the cgroup of whoever writes them: an OOM kill, and nothing
    of it is left on the host after (the tmpfs died with the worker)."""
    ex = make_executor(private_tmp=True)
    fill = f"/dev/shm/gpuyard-fill-{secrets.token_hex(4)}"
    script = f"head -c 400M /dev/zero > {fill}; echo filled"
    handle = launch(ex, script, limits=Resources(memory=64 << 20))
    deadline = time.monotonic() + TIMEOUT
    while (status := ex.status([handle])[0]).state is WorkerState.RUNNING:
        assert time.monotonic() < deadline, log(ex, handle)
        time.sleep(0.02)
    assert status.cause.startswith("out of memory"), (status, log(ex, handle))
    assert not Path(fill).exists()


def test_an_owners_job_reaches_its_home_and_working_directory_below_a_private_tmp(
    make_executor: MakeExecutor, base: Path, owner: str
) -> None:
    ex = make_executor(base / "home", private_tmp=True)
    project = base / "project"
    project.mkdir(mode=0o755)
    (project / "data.txt").write_text("data\n")
    (project / "data.txt").chmod(0o644)
    handle = launch(ex, "cat data.txt; id -un; ls -A /tmp", run_as=owner, cwd=str(project))
    lines = finished(ex, handle).splitlines()
    assert lines == ["data", owner, base.relative_to("/tmp").parts[0]]


def test_a_working_directory_the_account_cannot_reach_is_not_mounted_back_for_it(
    make_executor: MakeExecutor, base: Path, owner: str
) -> None:
    """Root mounts the kept paths back: one the account could not reach on the host (below a
    directory only root may enter) must stay out of its reach inside."""
    inner = base / "roots" / "inner"
    inner.mkdir(parents=True)
    (base / "roots").chmod(0o700)
    inner.chmod(0o755)
    (inner / "secret.txt").write_text("root's\n")
    ex = make_executor(base / "home", private_tmp=True)
    handle = launch(ex, "cat secret.txt", run_as=owner, cwd=str(inner))
    deadline = time.monotonic() + TIMEOUT
    while (status := ex.status([handle])[0]).state is WorkerState.RUNNING:
        assert time.monotonic() < deadline, log(ex, handle)
        time.sleep(0.02)
    assert status.exit_code != 0
    assert "root's" not in log(ex, handle)
    assert "working directory" in log(ex, handle)  # not there, for the account
