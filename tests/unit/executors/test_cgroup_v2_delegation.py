"""cgroup v2 where the pool's cgroup holds processes and delegates nothing (issue 24, point 12):
detection on a fake cgroupfs that follows the kernel's rules, since this machine has no such
host. The seam is the cgroup root (a directory) and :class:`cgroups.CgroupFs`."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpuyard.executors.local import cgroups
from gpuyard.executors.local.systemd import Systemd
from gpuyard.models.node import IsolationMode, KillMethod, NodeIsolation

PROCS = "cgroup.procs"
SUBTREE = "cgroup.subtree_control"
CONTROLLERS = "cgroup.controllers"


class FakeCgroupFs(cgroups.CgroupFs):
    """A cgroup v2 hierarchy on plain directories, with the kernel's rules that matter here:

    - a child is offered (``cgroup.controllers``) what its parent enables (``subtree_control``);
    - a controller is enabled only if offered, and never in a non-root cgroup that holds
      processes ("no internal processes": EBUSY);
    - a process joins no non-root cgroup that enables controllers for children (EBUSY), and
      leaves its old cgroup when it joins another;
    - a cgroup is removed only when it holds no process and no child (EBUSY).
    """

    def __init__(self, root: Path, offered: list[str] | None, *, kill: bool = True) -> None:
        """``offered``: what the root offers; None for a tree made before (left as it is)."""
        self.root = root
        self.kill = kill
        if offered is None:
            return
        root.mkdir(parents=True, exist_ok=True)
        (root / CONTROLLERS).write_text(" ".join(offered) + "\n")
        (root / SUBTREE).write_text("")
        (root / PROCS).write_text("")

    def mkdir(self, path: str) -> None:
        directory = Path(path)
        if directory.is_dir():
            return
        directory.mkdir()
        (directory / CONTROLLERS).write_text((directory.parent / SUBTREE).read_text())
        (directory / SUBTREE).write_text("")
        (directory / PROCS).write_text("")
        if self.kill:
            (directory / "cgroup.kill").write_text("")
        for name in (directory.parent / SUBTREE).read_text().split():
            (directory / f"{name}.max").write_text("max\n")

    def write(self, path: str, text: str) -> None:
        target = Path(path)
        if target.name == SUBTREE:
            self._enable(target.parent, text)
        elif target.name == PROCS:
            self._join(target.parent, text.strip())
        else:
            target.write_text(text)

    def _enable(self, directory: Path, text: str) -> None:
        enabled = (directory / SUBTREE).read_text().split()
        for token in text.split():
            name = token[1:]
            if name not in (directory / CONTROLLERS).read_text().split():
                raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
            if directory != self.root and (directory / PROCS).read_text().split():
                raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
            if token[0] == "+" and name not in enabled:
                enabled.append(name)
            elif token[0] == "-" and name in enabled:
                enabled.remove(name)
        (directory / SUBTREE).write_text(" ".join(enabled))
        for child in (d for d in directory.iterdir() if d.is_dir()):
            (child / CONTROLLERS).write_text(" ".join(enabled))

    def _join(self, directory: Path, pid: str) -> None:
        if directory != self.root and (directory / SUBTREE).read_text().split():
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
        for procs in self.root.rglob(PROCS):
            pids = procs.read_text().split()
            if pid in pids:
                procs.write_text("\n".join(p for p in pids if p != pid))
        pids = (directory / PROCS).read_text().split()
        (directory / PROCS).write_text("\n".join([*pids, pid]))

    def rmdir(self, path: str) -> None:
        directory = Path(path)
        if (directory / PROCS).read_text().split() or any(d.is_dir() for d in directory.iterdir()):
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
        shutil.rmtree(directory)


def host(
    tmp_path: Path, offered: list[str], *, session: list[str], kill: bool = True
) -> cgroups.Isolation:
    """Detection on a v2 host like the one of point 12: the root offers ``offered`` to
    ``/session`` (a login session, a container), where ``session`` runs (``gpuyard up`` among
    them)."""
    fs = FakeCgroupFs(tmp_path / "cgroup", offered, kill=kill)
    fs.mkdir(str(fs.root / "session"))
    for name in offered:
        fs.write(str(fs.root / SUBTREE), f"+{name}")
    (fs.root / "session" / PROCS).write_text("\n".join(session))
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mountinfo").write_text(f"26 25 0:23 / {fs.root} rw,nosuid - cgroup2 cgroup2 rw\n")
    (proc / "cgroup").write_text("0::/session\n")
    return cgroups.detect("gpuyard-pool0", proc=str(proc), fs=fs)


def test_a_cgroup_holding_processes_moves_them_into_a_leaf_and_delegates_what_it_is_offered(
    tmp_path: Path,
) -> None:
    """The host of point 12: the session cgroup holds processes and is offered only memory.
    Before, nothing could be enabled there and the pool ran without any isolation."""
    found = host(tmp_path, ["memory"], session=["100", "101", "102"])
    session = tmp_path / "cgroup" / "session"
    assert found.mode == cgroups.CGROUP_V2
    assert found.controllers == {"memory"}
    assert found.parents == {"unified": str(session / "gpuyard-pool0")}
    assert (session / "gpuyard-pool" / PROCS).read_text().split() == ["100", "101", "102"]
    assert (session / PROCS).read_text().split() == []
    assert (session / SUBTREE).read_text().split() == ["memory"]
    [note] = found.notes
    assert "moved 3 process(es)" in note and "delegate memory" in note
    assert any("pids controller" in w and "not enforced" in w for w in found.warnings)
    assert any("cpu controller" in w for w in found.warnings)
    assert found.whole_kill
    cgroup = found.cgroup("1-0-0", memory=256 << 20, mcpus=500, pids=64, ceiling_pids=1000)
    assert cgroup is not None
    assert (cgroup.memory, cgroup.mcpus, cgroup.pids, cgroup.ceiling_pids) == (256 << 20, 0, 0, 0)


def test_a_second_detection_finds_the_leaf_and_its_parent_as_they_were(tmp_path: Path) -> None:
    """A pool restarted in the same process (the Ray node agent, tests) or a child of the pool
    detects again from inside the leaf: it uses the parent that delegates, nesting nothing."""
    first = host(tmp_path, ["memory", "pids"], session=["100", str(os.getpid())])
    session = tmp_path / "cgroup" / "session"
    fs = FakeCgroupFs(tmp_path / "cgroup", None)
    (tmp_path / "proc" / "cgroup").write_text("0::/session/gpuyard-pool\n")
    again = cgroups.detect("gpuyard-pool0", proc=str(tmp_path / "proc"), fs=fs)
    assert again.parents == first.parents == {"unified": str(session / "gpuyard-pool0")}
    assert again.controllers == {"memory", "pids"}
    assert again.notes == []
    assert not (session / "gpuyard-pool" / "gpuyard-pool").exists()


def test_every_offered_controller_is_delegated(tmp_path: Path) -> None:
    found = host(tmp_path, ["cpu", "memory", "pids", "io"], session=["100"])
    assert found.mode == cgroups.CGROUP_V2
    assert found.controllers == {"memory", "pids", "cpu"}
    assert found.warnings == []
    session = tmp_path / "cgroup" / "session"
    assert set((session / SUBTREE).read_text().split()) == {"memory", "pids", "cpu"}
    assert "io" not in (session / SUBTREE).read_text().split()  # not ours to use


def test_a_cgroup_that_already_delegates_is_left_as_it_is(tmp_path: Path) -> None:
    found = host(tmp_path, ["memory", "pids"], session=[])
    assert found.controllers == {"memory", "pids"}
    assert found.notes == []
    assert not (tmp_path / "cgroup" / "session" / "gpuyard-pool").exists()


def test_a_cgroup_offered_nothing_still_kills_a_worker_whole(tmp_path: Path) -> None:
    """No controller at all: the cgroup still holds a worker's processes, and cgroup.kill
    ends them all, setsid or not; every limit is said not to be enforced."""
    found = host(tmp_path, [], session=["100"])
    assert found.mode == cgroups.CGROUP_V2
    assert found.controllers == frozenset()
    assert found.notes == []  # nothing to delegate: nobody moved
    assert (tmp_path / "cgroup" / "session" / PROCS).read_text().split() == ["100"]
    assert len([w for w in found.warnings if "not enforced" in w]) == 3


def test_without_cgroup_kill_a_worker_is_frozen_to_be_killed(tmp_path: Path) -> None:
    found = host(tmp_path, ["memory", "pids"], session=["100"], kill=False)
    assert found.controllers == {"memory", "pids"}
    assert not found.whole_kill
    assert any("cgroup.kill" in w for w in found.warnings)


@pytest.mark.parametrize(
    ("mode", "enforced", "kill"),
    [
        (IsolationMode.CGROUP_V2, ["memory"], KillMethod.CGROUP_KILL),
        (IsolationMode.CGROUP_V2, ["memory", "pids", "cpu"], KillMethod.FREEZER),
        (IsolationMode.CGROUP_V1, ["memory", "pids", "cpu"], KillMethod.FREEZER),
        (IsolationMode.NONE, [], KillMethod.ENVIRONMENT),
    ],
)
def test_what_is_enforced_travels_in_the_nodes_labels(
    mode: IsolationMode, enforced: list[str], kill: KillMethod
) -> None:
    report = NodeIsolation(mode=mode, enforced=enforced, kill=kill, pids_ceiling=7)
    assert NodeIsolation.from_labels(report.to_labels()) == report
    # Labels become Slurm features, a comma-separated list: no value may hold a comma.
    assert not any("," in value for value in report.to_labels().values())
    line = report.describe()
    assert line.startswith(mode.value) and kill.value in line
    missing = line.partition(" NOT enforced")[0].rpartition(";")[2]
    assert [m for m in report.not_enforced if m not in missing] == []


def test_labels_of_another_executor_say_nothing_about_isolation() -> None:
    assert NodeIsolation.from_labels({"executor": "ray"}) is None
    assert NodeIsolation.from_labels({"isolation": "cgroup-v9"}) is None


class FakeSystemd(Systemd):
    """systemd as PID 1 on the fake tree: a delegated scope is a cgroup under system.slice with
    every controller the root has; the process moves into it and its /proc cgroup file says so.
    ``refuse``: what busctl would answer instead."""

    def __init__(self, fs: FakeCgroupFs, refuse: str = "") -> None:
        super().__init__()
        self.fs = fs
        self.refuse = refuse
        self.units: list[str] = []

    def available(self) -> bool:
        return True

    def delegated_scope(self, unit: str, pid: int, cgroup_file: str) -> str:
        self.units.append(unit)
        if self.refuse:
            return self.refuse
        offered = (self.fs.root / CONTROLLERS).read_text().split()
        slice_ = self.fs.root / "system.slice"
        self.fs.mkdir(str(slice_))
        self.fs.write(str(slice_ / SUBTREE), " ".join(f"+{c}" for c in offered))
        self.fs.mkdir(str(slice_ / unit))
        self.fs.write(str(slice_ / unit / PROCS), str(pid))
        Path(cgroup_file).write_text(f"0::/system.slice/{unit}\n")
        return ""


def systemd_host(tmp_path: Path, refuse: str = "") -> tuple[cgroups.Isolation, FakeSystemd]:
    """A systemd host: our process shares a session scope, which systemd owns and which
    delegates nothing, with two others."""
    fs = FakeCgroupFs(tmp_path / "cgroup", ["memory", "pids", "cpu"])
    fs.write(str(fs.root / SUBTREE), "+memory +pids +cpu")
    fs.mkdir(str(fs.root / "session"))
    (fs.root / "session" / PROCS).write_text(f"100\n101\n{os.getpid()}")
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mountinfo").write_text(f"26 25 0:23 / {fs.root} rw,nosuid - cgroup2 cgroup2 rw\n")
    (proc / "cgroup").write_text("0::/session\n")
    systemd = FakeSystemd(fs, refuse)
    return cgroups.detect("gpuyard-pool0", proc=str(proc), fs=fs, systemd=systemd), systemd


def test_under_systemd_the_pool_asks_for_a_delegated_scope_of_its_own(tmp_path: Path) -> None:
    found, systemd = systemd_host(tmp_path)
    [unit] = systemd.units
    scope = tmp_path / "cgroup" / "system.slice" / unit
    assert unit == f"gpuyard-pool0-{os.getpid()}.scope"
    assert found.mode == cgroups.CGROUP_V2
    assert found.controllers == {"memory", "pids", "cpu"}
    assert found.parents == {"unified": str(scope / "gpuyard-pool0")}
    assert found.notes[0] == f"systemd: the pool runs in the delegated scope {unit}"
    # Only this process left the session, whose other processes systemd's cgroup keeps.
    assert (tmp_path / "cgroup" / "session" / PROCS).read_text().split() == ["100", "101"]
    assert (scope / "gpuyard-pool" / PROCS).read_text().split() == [str(os.getpid())]
    assert found.warnings == []


def test_where_systemd_refuses_the_processes_move_into_a_leaf(tmp_path: Path) -> None:
    found, _ = systemd_host(tmp_path, refuse="systemd: cannot start it: Access denied")
    session = tmp_path / "cgroup" / "session"
    assert found.controllers == {"memory", "pids", "cpu"}
    assert found.parents == {"unified": str(session / "gpuyard-pool0")}
    assert found.notes[0] == "systemd: cannot start it: Access denied"
    assert "moved 3 process(es)" in found.notes[1]


def test_a_hybrid_host_does_not_ask_systemd_for_a_scope(tmp_path: Path) -> None:
    """Its v2 hierarchy has no controller to give, scope or not; v1 has them."""
    fs = FakeCgroupFs(tmp_path / "cgroup", [])
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mountinfo").write_text(
        f"26 25 0:23 / {fs.root} rw,nosuid - cgroup2 cgroup2 rw\n"
        f"28 25 0:25 / {tmp_path / 'memory'} rw,nosuid - cgroup cgroup rw,memory\n"
    )
    (proc / "cgroup").write_text("0::/\n")
    systemd = FakeSystemd(fs)
    cgroups.detect("gpuyard-pool0", proc=str(proc), fs=fs, systemd=systemd)
    assert systemd.units == []


def test_a_scope_is_asked_of_systemd_over_its_bus_with_delegation(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    cgroup_file = tmp_path / "cgroup"
    cgroup_file.write_text("0::/user.slice/session-1.scope\n")

    def busctl(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        cgroup_file.write_text("0::/user.slice/gpuyard-x-1.scope\n")
        return subprocess.CompletedProcess(argv, 0, "o /org/freedesktop/systemd1/job/1", "")

    assert Systemd(busctl).delegated_scope("gpuyard-x-1.scope", 4242, str(cgroup_file)) == ""
    [argv] = calls
    assert argv[0] == "busctl" and "StartTransientUnit" in argv
    text = " ".join(argv)
    assert "gpuyard-x-1.scope fail" in text
    assert "PIDs au 1 4242" in text and "Delegate b true" in text

    def refused(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", "Access denied")

    why = Systemd(refused).delegated_scope("gpuyard-x-2.scope", 4242, str(cgroup_file))
    assert why == "systemd: cannot start gpuyard-x-2.scope: Access denied"
