"""`gpuyard users / groups / quota / pools / label / priority / show` against the real API.

The app is served over HTTP on SQLite (the API tests cover PostgreSQL); the CLI runs in-process
with Typer's runner, signed in (GPUYARD_TOKEN) as the user each call names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuyard.cli.main import app as cli_app
from gpuyard.controller.loop import Controller
from gpuyard.errors import Conflict, InvalidSpec, PermissionDenied
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models.worker import NodeInfo
from gpuyard.settings import Settings
from gpuyard.testing.auth import TokenFor


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gpuyard.db'}"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home", user="root", admins=["ada"])


@pytest.fixture
def fake_executor() -> FakeExecutor:
    return FakeExecutor(
        [NodeInfo(f"n{i}", f"127.0.0.{10 + i}", gpus=8, cpus=32, memory=64 << 30) for i in range(3)]
    )


class Cli:
    def __init__(self, url: str, token_for: TokenFor) -> None:
        self.url = url
        self.token_for = token_for
        self.tokens: dict[str, str] = {}

    def __call__(self, *args: str, user: str = "ada", columns: int = 200) -> str:
        """Run a command that must succeed; its stdout."""
        result = self._run(args, user, columns)
        assert result.exit_code == 0, (result.output, result.exception)
        return str(result.stdout)

    def json(self, *args: str, user: str = "ada") -> Any:
        """``--json`` goes last, or right before ``--`` (a job's command follows it)."""
        at = args.index("--") if "--" in args else len(args)
        return json.loads(self(*args[:at], "--json", *args[at:], user=user))

    def error(self, *args: str, user: str = "ada") -> BaseException:
        """Run a command that must fail with a gpuyard error; the error."""
        result = self._run(args, user, 200)
        assert result.exception is not None, result.output
        return result.exception

    def _run(self, args: tuple[str, ...], user: str, columns: int) -> Any:
        if user not in self.tokens:
            self.tokens[user] = self.token_for(user)
        env = {"GPUYARD_URL": self.url, "GPUYARD_TOKEN": self.tokens[user], "COLUMNS": str(columns)}
        return CliRunner().invoke(cli_app, list(args), env=env)


@pytest.fixture
def cli(api_url: str, controller: Controller, token_for: TokenFor) -> Cli:
    return Cli(api_url, token_for)


def test_users_and_groups(cli: Cli) -> None:
    listing = cli("users")
    assert "ada" in listing and "admin" in listing and "low, normal, high, highest" in listing
    assert cli("users", "ls") == listing
    me = cli.json("users", "show", user="root")
    assert (me["name"], me["role"]) == ("root", "admin")

    err = cli.error("groups", "add", "ml", user="alice")
    assert isinstance(err, PermissionDenied) and "only admins may create groups" in str(err)
    assert "urgent jobs 0 (limit 2)" in cli("groups", "add", "ml", "--urgent-limit", "2")
    added = cli("users", "add", "bob", "--group", "ml", "--share", "2")
    assert added == "bob: user in group ml, share 2, may use low, normal, high\n"
    assert cli.json("users", "set", "bob", "--role", "admin")["role"] == "admin"
    groups = cli.json("groups")
    assert [(g["name"], g["members"], g["urgent_limit"]) for g in groups] == [
        ("default", ["ada", "alice", "root"], None),  # alice: made for its token
        ("ml", ["bob"], 2),
    ]
    assert "no limit" in cli("groups", "set", "ml", "--no-urgent-limit")
    err = cli.error("groups", "set", "ml")
    assert isinstance(err, InvalidSpec) and "--urgent-limit N or --no-urgent-limit" in str(err)
    err = cli.error("groups", "rm", "ml")
    assert isinstance(err, Conflict) and "still has 1 member(s) (bob)" in str(err)
    cli("users", "set", "bob", "--group", "default")
    assert cli("groups", "rm", "ml") == "group ml: removed\n"
    assert [g["name"] for g in cli.json("groups", "ls")] == ["default"]


def test_quotas(cli: Cli) -> None:
    cli("submit", "--", "python", "train.py", user="alice")  # registers alice
    assert cli("quota", "set", "normal", "--user", "alice", "--nodes", "10") == (
        "user alice at normal: nodes 0/10, GPUs 0/-\n"
    )
    cli("quota", "set", "high", "--group", "default", "--gpus", "16")
    table = cli("quota")
    assert "alice" in table and "0/10" in table and "0/16" in table
    only = cli.json("quota", "ls", "--user", "alice")
    assert [(q["tier"], q["nodes"], q["gpus"]) for q in only] == [("normal", 10, None)]
    err = cli.error("quota", "set", "normal", "--nodes", "1")
    assert isinstance(err, InvalidSpec) and "give --user NAME or --group NAME" in str(err)
    err = cli.error("quota", "set", "normal", "--user", "alice", "--group", "default")
    assert isinstance(err, InvalidSpec) and "not both" in str(err)
    err = cli.error("quota", "set", "normal", "--user", "alice", "--nodes", "1", user="alice")
    assert isinstance(err, PermissionDenied)
    assert cli("quota", "clear", "normal", "--user", "alice") == "user alice at normal: no quota\n"
    assert [q["subject"] for q in cli.json("quota")] == ["default"]


def test_pools_and_labels(cli: Cli) -> None:
    assert "pool a100: preemption suspend, same zone, notice 2m00s" in cli(
        "pools", "add", "a100", "--preemption", "suspend", "--same-zone", "--notice", "2m"
    )
    shown = cli("label", "n1", "pool=a100", "zone=z1")
    assert "node n1" in shown and "a100" in shown and "admin" in shown
    labels = cli.json("label", "n1")
    assert labels["extra_labels"] == {"pool": "a100", "zone": "z1"}
    assert cli.json("label", "n1", "zone-")["extra_labels"] == {"pool": "a100"}
    err = cli.error("label", "n1", "zone")
    assert isinstance(err, InvalidSpec) and "KEY=VALUE to set or KEY- to remove" in str(err)
    err = cli.error("label", "n1", "rack=r1", user="alice")
    assert isinstance(err, PermissionDenied) and "only admins may label nodes" in str(err)
    pools = cli.json("pools")
    assert [(p["name"], p["nodes"], p["declared"]) for p in pools] == [
        ("a100", ["n1"], True),
        ("default", ["n0", "n2"], False),
    ]
    assert "any zone" in cli("pools", "set", "a100", "--any-zone")
    assert "slices 1h,10h,100h" in cli("pools", "set", "a100", "--slices", "1h,10h,100h")
    assert cli.json("pools", "set", "a100", "--slices", "none")["slices"] == []
    table = cli("pools", "ls")
    rows = {line.split()[0]: line.split()[1:3] for line in table.splitlines()[1:]}
    assert rows == {"a100": ["set", "suspend"], "default": ["default", "never"]}


def test_pools_tail_guards(cli: Cli) -> None:
    assert "age half-life off, min run off" in cli("pools", "add", "plain")
    shown = cli("pools", "add", "ts", "--preemption", "suspend", "--slices", "1h,10h,100h")
    assert "slices 1h,10h,100h, age half-life 3h00m, min run 1h00m" in shown
    changed = cli.json("pools", "set", "ts", "--age-halflife", "90m", "--min-run", "off")
    assert (changed["age_halflife"], changed["min_run"]) == (5400.0, None)
    table = cli("pools", "ls").splitlines()
    header = table[0].split()
    assert header[header.index("HALF-LIFE") - 1] == "SLICES"
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows["ts"][6:9] == ["1h,10h,100h", "1h30m", "off"]
    assert rows["plain"][6:9] == ["none", "off", "off"]
    for option, value in [("--age-halflife", "-1h"), ("--min-run", "0")]:
        err = cli.error("pools", "set", "ts", option, value)
        assert isinstance(err, InvalidSpec), err
        assert "above zero" in str(err) or "cannot read '-1h'" in str(err), str(err)
        assert "or off to switch it off" in str(err)
    assert cli.json("pools", "set", "ts", "--min-run", "2h")["age_halflife"] == 5400.0


def test_priority_show_and_ls(cli: Cli, controller: Controller) -> None:
    job = cli.json("submit", "--gpus", "8", "--nodes", "3", "--", "python", "train.py")
    waiting = cli.json("submit", "--gpus", "8", "--", "python", "train.py", user="alice")
    controller.tick()  # the first takes every node; the second waits
    out = cli("priority", str(waiting["id"]), "HIGH", user="alice")
    assert out == f"job {waiting['id']}: priority high, queued\n"
    err = cli.error("priority", str(waiting["id"]), "highest", user="alice")
    assert isinstance(err, PermissionDenied) and "users may choose low, normal, high" in str(err)
    err = cli.error("priority", str(job["id"]), "low")
    assert isinstance(err, Conflict) and "is running" in str(err)
    assert cli.json("priority", str(waiting["id"]), "highest")["spec"]["priority"] == "highest"

    shown = cli("show", str(waiting["id"]))
    assert "waiting because" in shown and "wait code" in shown and "expected start" in shown
    assert "alice (group default)" in shown
    listing = cli("ls")
    assert "PRIO" in listing and "highest" in listing
    # In 80 columns every job is one line, its columns whole and its reason cut short.
    narrow = cli("ls", columns=80).splitlines()
    assert all(len(line) <= 80 for line in narrow)
    header, second, first, _count = narrow
    assert header.split()[:8] == ["ID", "NAME", "STATUS", "PRIO", "OWNER", "NODES", "GPUS", "AGE"]
    assert second.split()[:6] == [str(waiting["id"]), "train", "queued", "highest", "alice", "1"]
    assert "[resources]" in second and second.rstrip().endswith("…")
    assert first.split()[:6] == [str(job["id"]), "train", "running", "normal", "ada", "3"]
    events = cli("events", str(waiting["id"]))
    assert "priority high -> highest" in events and "user:ada" in events


def test_nodes_warns_about_nodes_without_cgroup_isolation(cli: Cli) -> None:
    assert "warning" not in cli("nodes")
    cli("label", "n1", "isolation=none")  # what the local executor reports without cgroups
    shown = cli("nodes")
    assert "warning: no cgroup isolation on n1: no memory, CPU or process limits" in " ".join(
        shown.split()
    )


def test_nodes_say_what_each_node_enforces(cli: Cli) -> None:
    """What the local executor reports in its nodes' labels: here, a v2 host whose parent
    cgroup offers only memory (issue 24, point 12)."""
    cli(
        "label",
        "n1",
        "isolation=cgroup-v2",
        "isolation.enforced=memory",
        "isolation.kill=cgroup.kill",
    )
    shown = cli("nodes")
    rows = {line.split()[0]: line.rstrip() for line in shown.splitlines() if "127.0.0" in line}
    assert rows["n1"].split()[-3:] == ["v2", "memory,-pids,-cpu", "-"]  # then HEALTH
    assert (
        "n1 isolation: cgroup-v2: memory enforced; pids, cpu NOT enforced; whole-worker kill by "
        "cgroup.kill" in " ".join(shown.split())
    )
    assert rows["n0"].split()[-2:] == ["-", "-"]  # an executor that does not say
    nodes = {n["name"]: n for n in cli.json("nodes")}
    assert nodes["n1"]["isolation"] == {
        "mode": "cgroup-v2",
        "enforced": ["memory"],
        "kill": "cgroup.kill",
        "pids_ceiling": 0,
        "memory_ceiling": 0,
    }
    assert nodes["n0"]["isolation"] is None
