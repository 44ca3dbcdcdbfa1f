"""A worker inside an image's root filesystem (issue 26, point 4; docs/images.md, "How a worker
runs in an image"): real supervisors started on a ``spec.json`` with an ``image`` section, real
mounts, cgroups and uids.

The image is a rootfs made here from local files (Debian's busybox-static, a distinctive
``/etc/os-release``, an ``/etc/passwd``), once per session. The job's account is a uid no
account has: the supervisor drops to the numbers it is given.
"""

from __future__ import annotations

import contextlib
import os
import pty
import secrets
import select
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import gpuyard.executors.local.supervisor_entry as entry
from gpuyard.executors.local import cgroups
from gpuyard.models.workerdir import (
    AccountSpec,
    BindSpec,
    CgroupSpec,
    ExitRecord,
    ImageMountSpec,
    ImageSpec,
    SandboxSpec,
    SupervisorSpec,
)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="a worker's image is mounted by a supervisor run by root"
)

BUSYBOX = "/bin/busybox"
UID = 61_000 + os.getpid() % 1000
"""The job's account: no account of the machine has it."""
OS_RELEASE = 'ID=gpuyard-test-image\nPRETTY_NAME="gpuyard test image"\n'
TIMEOUT = 60.0
MINIMAL_DEV = {"null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm"}
MINIMAL_DEV |= {"fd", "stdin", "stdout", "stderr"}
SUID_SOURCE = """#include <stdio.h>
#include <unistd.h>
int main(void) { printf("euid=%d\\n", (int)geteuid()); return 0; }
"""


def _static_elf(path: str) -> bool:
    """Whether ``path`` is an ELF executable without a program interpreter (runs anywhere)."""
    with open(path, "rb") as file:
        head = file.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:
            return False
        (phoff,) = struct.unpack_from("<Q", head, 32)
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        file.seek(phoff)
        table = file.read(phentsize * phnum)
    kinds = [struct.unpack_from("<I", table, i * phentsize)[0] for i in range(phnum)]
    return 3 not in kinds  # PT_INTERP


@pytest.fixture(scope="session")
def rootfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not os.path.exists(BUSYBOX) or not _static_elf(BUSYBOX):
        pytest.skip("needs a static busybox: apt-get install busybox-static (make setup does)")
    root = tmp_path_factory.mktemp("image") / "rootfs"
    for name in ("bin", "etc", "tmp", "home/job"):
        (root / name).mkdir(parents=True)
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    applets = subprocess.run(
        [BUSYBOX, "--list"], check=True, capture_output=True, text=True
    ).stdout.split()
    for applet in applets:
        if not (root / "bin" / applet).exists():
            (root / "bin" / applet).symlink_to("busybox")
    (root / "etc" / "os-release").write_text(OS_RELEASE)
    (root / "etc" / "passwd").write_text(
        f"root:x:0:0::/root:/bin/sh\njob:x:{UID}:{UID}::/home/job:/bin/sh\n"
    )
    (root / "etc" / "resolv.conf").symlink_to("/run/systemd/resolve/stub-resolv.conf")
    _add_setuid_program(root)
    (root / "tmp").chmod(0o1777)
    for directory in (root, root.parent):
        directory.chmod(0o755)
    return root


def _add_setuid_program(root: Path) -> None:
    """``/bin/suid-euid``: a root-owned setuid program that prints its effective uid (none
    where no C compiler can make a static one)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return
    source = root.parent / "euid.c"
    source.write_text(SUID_SOURCE)
    program = root / "bin" / "suid-euid"
    made = subprocess.run([cc, "-static", "-O", "-o", str(program), str(source)], check=False)
    if made.returncode == 0:
        os.chown(program, 0, 0)
        program.chmod(0o4755)


class Worker:
    """One worker's supervisor: its directory, spec and process (``stdin``: a terminal's
    slave side, for a ``terminal`` spec)."""

    def __init__(self, base: Path, spec: SupervisorSpec, stdin: int | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="supervisor-", dir=base))
        (self.dir / "spec.json").write_text(spec.model_dump_json())
        self.log = Path(spec.log)
        command = [sys.executable, "-I", "-S", entry.__file__, str(self.dir)]
        self.process = subprocess.Popen(command, stdin=stdin)

    def wait(self) -> ExitRecord:
        assert self.process.wait(TIMEOUT) == 0
        return ExitRecord.model_validate_json((self.dir / "exit.json").read_text())

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_output(self, text: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while text not in self.output():
            assert self.process.poll() is None, self.output()
            assert time.monotonic() < deadline, self.output()
            time.sleep(0.02)


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory the job's account can pass through (pytest's own are root's alone)."""
    made = Path(tempfile.mkdtemp(prefix="gpuyard-image-test-"))
    made.chmod(0o711)
    workspace = made / "workspace"
    workspace.mkdir()
    os.chown(workspace, UID, UID)
    yield made
    shutil.rmtree(made, ignore_errors=True)
    for proc in _processes_of(UID):  # only this test's uid runs them
        with contextlib.suppress(psutil.Error):
            proc.kill()


def start(
    base: Path,
    rootfs: Path,
    script: str,
    *,
    mounts: list[ImageMountSpec] | None = None,
    cgroup: CgroupSpec | None = None,
    binds: list[BindSpec] | None = None,
    sandbox: SandboxSpec | None = None,
    log_max: int = 0,
    grace: float = 5.0,
    terminal: int | None = None,
    **image: object,
) -> Worker:
    spec = SupervisorSpec(
        job=1,
        attempt=0,
        rank=0,
        argv=["sh", "-c", script],
        env={"JOB_VALUE": "from-the-job"},
        cwd="/nonexistent-on-the-host",
        grace=grace,
        log=str(base / f"log-{secrets.token_hex(4)}"),
        log_max=log_max,
        terminal=terminal is not None,
        cgroup=cgroup,
        binds=binds or [],
        sandbox=sandbox,
        account=AccountSpec(name="job", uid=UID, gid=UID),
        workspace=str(base / "workspace"),
        image=ImageSpec(
            rootfs=str(rootfs),
            env={"PATH": "/bin", "IMAGE_VALUE": "from-the-image", "JOB_VALUE": "image's"},
            mounts=mounts or [],
            **image,  # type: ignore[arg-type]
        ),
    )
    return Worker(base, spec, terminal)


def run(base: Path, rootfs: Path, script: str, **kwargs: object) -> str:
    """The worker's log once it has exited 0."""
    worker = start(base, rootfs, script, **kwargs)  # type: ignore[arg-type]
    record = worker.wait()
    assert record.exit_code == 0, (record, worker.output())
    return worker.output()


def test_a_worker_sees_the_images_files_as_the_jobs_account_with_the_images_env(
    base: Path, rootfs: Path
) -> None:
    out = run(base, rootfs, "cat /etc/os-release; id -u; id -g; pwd; env", workdir="/home/job")
    assert OS_RELEASE in out and "Debian" not in out
    lines = out.splitlines()
    assert lines[2:5] == [str(UID), str(UID), "/home/job"]
    # A working directory the image lacks is made, as OCI runtimes do.
    assert run(base, rootfs, "pwd", workdir="/opt/new/dir") == "/opt/new/dir\n"
    # The image's ENV, the job's on top.
    assert {"IMAGE_VALUE=from-the-image", "JOB_VALUE=from-the-job", "PATH=/bin"} <= set(lines)


def test_the_host_network_files_are_the_hosts_and_read_only(base: Path, rootfs: Path) -> None:
    out = run(base, rootfs, "cat /etc/hosts; (echo x >> /etc/hosts) 2>/dev/null || echo refused")
    assert out == Path("/etc/hosts").read_text() + "refused\n"
    # The image's /etc/resolv.conf is a link to nowhere (as in many images): the host's wins.
    assert run(base, rootfs, "cat /etc/resolv.conf") == Path("/etc/resolv.conf").read_text()


def test_dev_has_the_minimal_set_and_shm_its_asked_size(base: Path, rootfs: Path) -> None:
    out = run(base, rootfs, "ls -A /dev; echo; df -k /dev/shm", shm_size=48 << 20)
    listed, _, shm = out.partition("\n\n")
    assert set(listed.split()) == MINIMAL_DEV
    assert shm.splitlines()[1].split()[1] == str(48 << 10)


def test_only_the_listed_host_devices_are_there(base: Path, rootfs: Path) -> None:
    present = [d for d in ("/dev/fuse", "/dev/loop-control", "/dev/kmsg") if os.path.exists(d)]
    if len(present) < 2:
        pytest.skip("needs two of /dev/fuse, /dev/loop-control, /dev/kmsg on the host")
    given, other = present[:2]
    out = run(
        base,
        rootfs,
        f"test -c {given} && echo given; test -e {other} || echo absent",
        devices=[given],
    )
    assert out.split() == ["given", "absent"]


def test_binds_keep_their_read_only_flag_and_the_accounts_ownership(
    base: Path, rootfs: Path
) -> None:
    data = base / "dataset"
    data.mkdir()
    (data / "sample").write_text("data\n")
    mounts = [
        ImageMountSpec(source=str(base / "workspace"), target="/workspace"),
        ImageMountSpec(source=str(data), target="/data/set", readonly=True),
    ]
    script = "cat /data/set/sample; echo out > /workspace/result; (echo x > /data/set/new) 2>&1"
    worker = start(base, rootfs, script, mounts=mounts)
    worker.wait()
    assert worker.output().startswith("data\n") and "Read-only file system" in worker.output()
    result = base / "workspace" / "result"
    assert result.read_text() == "out\n" and result.stat().st_uid == UID
    assert not (data / "new").exists()


def test_the_workspaces_own_binds_carry_into_the_image_and_the_host_sandbox_is_moot(
    base: Path, rootfs: Path
) -> None:
    """What the executor makes on the host for a worker composes with the image: the workspace
    goes in with its read-only binds below it; a host sandbox (which would hide the rootfs,
    here below /tmp) gives way to the image's own /tmp."""
    data = base / "dataset"
    data.mkdir()
    (data / "sample").write_text("data\n")
    workspace = base / "workspace"
    worker = start(
        base,
        rootfs,
        "cat /workspace/data/sample; (echo x > /workspace/data/new) 2>&1; ls -A /tmp",
        binds=[BindSpec(target=str(workspace / "data"), source=str(data), readonly=True)],
        sandbox=SandboxSpec(private=["/tmp"], keep=[str(base)]),
        mounts=[ImageMountSpec(source=str(workspace), target="/workspace")],
    )
    assert worker.wait().exit_code == 0, worker.output()
    lines = worker.output().splitlines()
    assert lines[0] == "data" and "Read-only file system" in lines[1] and lines[2:] == []


def test_a_source_the_account_cannot_reach_is_refused(base: Path, rootfs: Path) -> None:
    (base / "roots-only").mkdir(mode=0o700)
    secret = base / "roots-only" / "inside"
    secret.mkdir()
    worker = start(base, rootfs, "true", mounts=[ImageMountSpec(source=str(secret), target="/s")])
    record = worker.wait()
    assert record.exit_code != 0 and "cannot set up the worker's image" in record.message
    assert str(secret) in record.message


def test_a_setuid_program_of_the_image_gives_no_root(base: Path, rootfs: Path) -> None:
    out = run(base, rootfs, "grep NoNewPrivs /proc/self/status; grep ' / / ' /proc/self/mountinfo")
    status, root = out.splitlines()
    assert status.split() == ["NoNewPrivs:", "1"] and "nosuid" in root.split()[5].split(",")
    program = rootfs / "bin" / "suid-euid"
    if not program.exists():
        pytest.skip("no C compiler here to make a static setuid program")
    assert program.stat().st_mode & stat.S_ISUID and program.stat().st_uid == 0
    assert run(base, rootfs, "suid-euid").strip() == f"euid={UID}"


def test_its_proc_shows_only_its_accounts_processes(base: Path, rootfs: Path) -> None:
    out = run(base, rootfs, "ls /proc | grep -c '^[0-9]'; test -e /proc/1 || echo no-init")
    count, init = out.split()
    assert int(count) < 10 and init == "no-init"  # its own sh and ls, not the host's hundreds


@pytest.fixture
def cgroup() -> Iterator[CgroupSpec]:
    found = cgroups.detect(f"gpuyard-image-{secrets.token_hex(4)}")
    if found.mode == cgroups.NONE or "memory" not in found.controllers:
        found.remove_parents()
        pytest.skip(f"no memory cgroup here: {'; '.join(found.warnings)}")
    made = found.cgroup("1-0-0", memory=64 << 20, mcpus=0, pids=0)
    assert made is not None
    yield CgroupSpec.model_validate(made.to_json())
    found.remove_parents()


def test_its_memory_limit_applies_inside_the_image(
    base: Path, rootfs: Path, cgroup: CgroupSpec
) -> None:
    # /dev/shm's pages are charged to the worker: filling 256 MiB of it breaks a 64 MiB limit.
    worker = start(
        base,
        rootfs,
        "head -c 268435456 /dev/zero > /dev/shm/fill",
        cgroup=cgroup,
        shm_size=512 << 20,
    )
    record = worker.wait()
    assert record.oom_kills >= 1 and record.memory_limit == 64 << 20, worker.output()


def test_stopping_it_kills_everything_it_started_in_the_image(
    base: Path, rootfs: Path, cgroup: CgroupSpec
) -> None:
    script = "sleep 1000 & setsid sleep 1000 & (trap '' TERM; sleep 1000) & echo up; wait"
    worker = start(base, rootfs, script, cgroup=cgroup, grace=0.5)
    worker.wait_output("up")
    assert len(_processes_of(UID)) >= 4
    worker.process.terminate()
    record = worker.wait()
    assert record.terminated
    deadline = time.monotonic() + TIMEOUT  # the last ones may not be reaped yet
    while left := _processes_of(UID):
        assert time.monotonic() < deadline, left
        time.sleep(0.02)


def _processes_of(uid: int) -> list[psutil.Process]:
    """Live processes of ``uid`` (zombies left for their parent to reap are not)."""
    found = []
    for proc in psutil.process_iter(["uids", "status"]):
        uids = proc.info["uids"]
        if uids and uids.real == uid and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def test_its_output_reaches_the_capped_log(base: Path, rootfs: Path) -> None:
    out = run(base, rootfs, "seq 1 100000; echo last-line", log_max=8192)
    marker = out.splitlines()[0]  # the cap's own rules are logcap's (tests/.../test_log_cap.py)
    assert marker.startswith("gpuyard: ") and "oldest output were dropped" in marker
    assert (
        out.endswith("100000\nlast-line\n")
        and len(out) < sum(len(f"{i}\n") for i in range(1, 100001)) // 4
    )


def test_a_shell_in_the_image_has_the_terminal_it_was_given(base: Path, rootfs: Path) -> None:
    """``gpuyard exec JOB shell`` in an image: the terminal is the command's, as on the host."""
    master, slave = pty.openpty()
    try:
        worker = start(
            base, rootfs, "test -t 0 && test -t 1 && echo on-a-tty; id -u", terminal=slave
        )
        os.close(slave)
        out = b""
        while chunk := _read_terminal(master):
            out += chunk
        assert worker.wait().exit_code == 0
    finally:
        os.close(master)
    assert out.decode().split() == ["on-a-tty", str(UID)]


def _read_terminal(fd: int) -> bytes:
    """What the terminal shows next; b"" once its other side has closed (EIO on Linux)."""
    ready, _, _ = select.select([fd], [], [], TIMEOUT)
    assert ready, "the shell printed nothing"
    try:
        return os.read(fd, 4096)
    except OSError:
        return b""


@pytest.fixture
def hostile_rootfs(rootfs: Path, base: Path) -> Path:
    """The test image with what a hostile one may hold: links where the runtime mounts,
    pointing out of the image, and a device file anyone may open (``/dev/mem``'s numbers)."""
    root = base / "hostile"
    shutil.copytree(rootfs, root, symlinks=True)
    (root / "dev").symlink_to("/")
    (root / "proc").symlink_to("/etc")
    (root / "workspace").symlink_to("/etc")
    (root / "etc" / "hosts").symlink_to("../../../../../../etc/shadow")
    os.mknod(root / "mem", 0o666 | stat.S_IFCHR, os.makedev(1, 1))
    return root


def test_a_hostile_images_links_and_device_files_lead_nowhere(
    base: Path, hostile_rootfs: Path
) -> None:
    host_etc = sorted(os.listdir("/etc"))
    mounts = [ImageMountSpec(source=str(base / "workspace"), target="/workspace")]
    script = "ls -A /dev; echo mine > /workspace/f; cat /etc/hosts; (head -c1 /mem) 2>&1; exit 0"
    out = run(base, hostile_rootfs, script, mounts=mounts)
    lines = out.splitlines()
    assert set(lines[: len(MINIMAL_DEV)]) == MINIMAL_DEV
    assert "\n".join(lines[len(MINIMAL_DEV) : -1]) + "\n" == Path("/etc/hosts").read_text()
    assert "Permission denied" in lines[-1]  # nodev: the image's device file cannot be opened
    assert (base / "workspace" / "f").read_text() == "mine\n"
    assert sorted(os.listdir("/etc")) == host_etc and not Path("/etc/f").exists()
    assert (hostile_rootfs / "workspace").is_symlink()  # the image itself is never written


def test_an_images_links_into_proc_make_nothing_on_the_host(base: Path, rootfs: Path) -> None:
    """While the child, still root, makes mount points and the working directory, /proc is
    not there: /proc/self/fd/N (the host files it opened), /proc/1/root (the host's root where
    root may follow it) lead nowhere but into the image's own files."""
    sentinel = Path(tempfile.mkdtemp(prefix="host-sentinel-", dir=base))
    root = base / "through-proc"
    shutil.copytree(rootfs, root, symlinks=True)
    (root / "data").symlink_to(f"/proc/1/root{sentinel}")
    (root / "work").symlink_to(f"/proc/1/root{sentinel}")
    (root / "fds").symlink_to("/proc/sys/fs")
    (root / "proc" / "sys" / "fs").mkdir(parents=True)  # the image's own, not the worker's
    (base / "dataset").mkdir(exist_ok=True)
    dataset = str(base / "dataset")
    mounts = [ImageMountSpec(source=dataset, target="/fds/set", readonly=True)]
    # The link led into the image's own (empty) /proc, below the worker's real one.
    assert run(base, root, "test -e /fds/set || echo below", mounts=mounts) == "below\n"
    mounts = [ImageMountSpec(source=dataset, target="/data/set", readonly=True)]
    start(base, root, "pwd", mounts=mounts, workdir="/work/made").wait()
    assert os.listdir(sentinel) == []  # neither the mount point nor the working directory
