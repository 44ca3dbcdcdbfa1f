"""cgroup detection from /proc files, and the limits a worker's cgroup gets, on fake trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuyard.executors.local import cgroups
from gpuyard.executors.local.cgroups import Cgroup

MOUNTINFO = """\
25 30 0:22 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
27 25 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
28 25 0:25 /docker/abc /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
29 25 0:26 / /sys/fs/cgroup/my\\040dir rw,nosuid - cgroup cgroup rw,freezer
30 25 0:27 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd
"""
SELF = """\
9:name=systemd:/user.slice
4:memory:/docker/abc/inner
3:cpu,cpuacct:/
1:freezer:/
0::/user.slice/session-1.scope
"""


def test_mountinfo_names_each_hierarchy_and_its_controllers(tmp_path: Path) -> None:
    path = tmp_path / "mountinfo"
    path.write_text(MOUNTINFO)
    mounts = cgroups._mounts(str(path))
    assert [(root, point, kind) for root, point, kind, _ in mounts] == [
        ("/", "/sys/fs/cgroup/unified", "cgroup2"),
        ("/", "/sys/fs/cgroup/cpu,cpuacct", "cgroup"),
        ("/docker/abc", "/sys/fs/cgroup/memory", "cgroup"),
        ("/", "/sys/fs/cgroup/my dir", "cgroup"),
        ("/", "/sys/fs/cgroup/systemd", "cgroup"),
    ]
    assert {"cpu", "cpuacct"} <= mounts[1][3]


def test_own_cgroups_by_controller(tmp_path: Path) -> None:
    path = tmp_path / "cgroup"
    path.write_text(SELF)
    assert cgroups._own_cgroups(str(path)) == {
        "name=systemd": "/user.slice",
        "memory": "/docker/abc/inner",
        "cpu": "/",
        "cpuacct": "/",
        "freezer": "/",
        "": "/user.slice/session-1.scope",
    }


def test_own_dir_under_a_mount_of_a_subtree(tmp_path: Path) -> None:
    (tmp_path / "inner").mkdir()
    assert cgroups._own_dir(str(tmp_path), "/docker/abc", "/docker/abc/inner") == str(
        tmp_path / "inner"
    )
    assert cgroups._own_dir(str(tmp_path), "/", "/inner") == str(tmp_path / "inner")
    assert cgroups._own_dir(str(tmp_path), "/", "/") == str(tmp_path)
    assert cgroups._own_dir(str(tmp_path), "/", "/missing") is None


def test_nothing_mounted_is_none_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / "mountinfo").write_text("")
    (tmp_path / "cgroup").write_text("")
    found = cgroups.detect("gpuyard-test", proc=str(tmp_path))
    assert found.mode == cgroups.NONE
    assert found.cgroup("1-0-0", memory=1, mcpus=1, pids=1) is None
    [warning] = found.warnings
    assert "no writable cgroup" in warning and "setsid" in warning


def fake_cgroup(tmp_path: Path, version: int, files: dict[str, list[str]]) -> Cgroup:
    """A cgroup on plain directories with the files a cgroupfs would show."""
    dirs = {}
    for controller, names in files.items():
        directory = tmp_path / controller / "1-0-0"
        directory.mkdir(parents=True)
        for name in [*names, "cgroup.procs"]:
            (directory / name).write_text("")
        dirs[controller] = str(directory)
    return Cgroup(version, dirs, memory=64 << 20, mcpus=1500, pids=100)


def contents(cgroup: Cgroup) -> dict[str, str]:
    return {
        f"{Path(d).parent.name}/{f.name}": f.read_text()
        for d in cgroup.dirs.values()
        for f in sorted(Path(d).iterdir())
        if f.read_text()
    }


def test_limits_on_v2(tmp_path: Path) -> None:
    names = ["memory.max", "memory.swap.max", "pids.max", "cpu.weight", "cpu.max"]
    cgroup = fake_cgroup(tmp_path, 2, {"unified": names})
    cgroup.create()
    assert contents(cgroup) == {
        "unified/memory.max": str(64 << 20),
        "unified/memory.swap.max": "0",
        "unified/pids.max": "100",
        "unified/cpu.weight": "150",
        "unified/cpu.max": "150000 100000",
    }


def test_limits_on_v1(tmp_path: Path) -> None:
    cgroup = fake_cgroup(
        tmp_path,
        1,
        {
            "memory": ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"],
            "cpu": ["cpu.shares", "cpu.cfs_period_us", "cpu.cfs_quota_us"],
            "pids": ["pids.max"],
            "freezer": ["freezer.state"],
        },
    )
    cgroup.create()
    assert contents(cgroup) == {
        "memory/memory.limit_in_bytes": str(64 << 20),
        "memory/memory.memsw.limit_in_bytes": str(64 << 20),
        "cpu/cpu.shares": "1536",
        "cpu/cpu.cfs_period_us": "100000",
        "cpu/cpu.cfs_quota_us": "150000",
        "pids/pids.max": "100",
    }


def test_no_limits_write_nothing(tmp_path: Path) -> None:
    cgroup = fake_cgroup(tmp_path, 2, {"unified": ["memory.max", "pids.max", "cpu.max"]})
    Cgroup(2, cgroup.dirs).create()
    assert contents(cgroup) == {}


def test_a_limit_without_its_controller_is_refused(tmp_path: Path) -> None:
    cgroup = fake_cgroup(tmp_path, 1, {"freezer": ["freezer.state"]})
    with pytest.raises(cgroups.CgroupError, match="no controller"):
        cgroup.create()


def test_oom_kills_and_fork_failures_are_read(tmp_path: Path) -> None:
    v2 = fake_cgroup(tmp_path / "v2", 2, {"unified": ["memory.events", "pids.events"]})
    Path(v2.dirs["unified"], "memory.events").write_text(
        "low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\n"
    )
    Path(v2.dirs["unified"], "pids.events").write_text("max 3\n")
    assert (v2.oom_kills(), v2.pids_limit_hits()) == (2, 3)
    v1 = fake_cgroup(tmp_path / "v1", 1, {"memory": ["memory.oom_control"], "freezer": []})
    Path(v1.dirs["memory"], "memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"
    )
    assert (v1.oom_kills(), v1.pids_limit_hits()) == (1, 0)


@pytest.mark.parametrize(
    "data",
    [
        None,
        [1],
        {"version": 3, "dirs": {"unified": "/x"}},
        {"version": 2, "dirs": {"memory": "/x"}},
        {"version": 1, "dirs": {"memory": "/x"}},
        {"version": 2, "dirs": {"unified": 5}},
        {"version": 2, "dirs": {"unified": "/x"}, "memory": -1},
        {"version": 2, "dirs": {"unified": "/x"}, "pids": True},
    ],
)
def test_a_handle_naming_no_sound_cgroup_gives_none(data: object) -> None:
    assert Cgroup.from_json(data) is None


def test_a_cgroup_round_trips_through_json() -> None:
    cgroup = Cgroup(1, {"memory": "/m", "freezer": "/f"}, memory=5, mcpus=6, pids=7)
    again = Cgroup.from_json(cgroup.to_json())
    assert again is not None and again.to_json() == cgroup.to_json()


def test_the_pids_ceiling_defaults_to_half_of_what_the_host_can_number(tmp_path: Path) -> None:
    (tmp_path / "pid_max").write_text("32768\n")
    (tmp_path / "threads-max").write_text("192731\n")
    assert cgroups.default_pids_ceiling(str(tmp_path)) == 16384
    (tmp_path / "threads-max").write_text("1000\n")
    assert cgroups.default_pids_ceiling(str(tmp_path)) == 500
    assert cgroups.default_pids_ceiling(str(tmp_path / "missing")) == 0
