"""The rule checked at submission: can the job's account run its program (docs/jobs.md)?"""

from __future__ import annotations

import stat

import pytest

from gpuyard.launch.program import (
    Account,
    PathFacts,
    blocked_at,
    candidates,
    chain_of,
    program_of,
    refusal,
    search_path,
)
from gpuyard.models import JobSpec

DIR, FILE = stat.S_IFDIR, stat.S_IFREG
ROOT, ALICE_UID, STAFF = 0, 1001, 50
ALICE = Account("gpy-alice", ALICE_UID, frozenset({1001, STAFF}))
NEW = Account("gpy-bob", None, frozenset())  # not made yet: the others' bits count


def chain(*modes: tuple[int, int, int]) -> list[PathFacts]:
    paths = ["/", "/a", "/a/bin", "/a/bin/python"]
    return [PathFacts(p, m, uid, gid) for p, (m, uid, gid) in zip(paths, modes, strict=True)]


OPEN = (DIR | 0o755, ROOT, ROOT)
EXE = (FILE | 0o755, ROOT, ROOT)


@pytest.mark.parametrize(
    ("modes", "account", "blocked"),
    [
        ((OPEN, OPEN, OPEN, EXE), ALICE, None),
        ((OPEN, OPEN, OPEN, EXE), NEW, None),
        ((OPEN, (DIR | 0o700, ROOT, ROOT), OPEN, EXE), ALICE, "/a"),  # /root's case
        ((OPEN, (DIR | 0o700, ROOT, ROOT), OPEN, EXE), NEW, "/a"),
        ((OPEN, (DIR | 0o700, ALICE_UID, ROOT), OPEN, EXE), ALICE, None),  # hers
        ((OPEN, (DIR | 0o750, ROOT, STAFF), OPEN, EXE), ALICE, None),  # her group's
        ((OPEN, (DIR | 0o750, ROOT, STAFF), OPEN, EXE), NEW, "/a"),
        ((OPEN, (DIR | 0o075, ALICE_UID, ROOT), OPEN, EXE), ALICE, "/a"),  # owner bits only
        ((OPEN, OPEN, OPEN, (FILE | 0o744, ROOT, ROOT)), ALICE, "/a/bin/python"),
    ],
)
def test_blocked_at(
    modes: tuple[tuple[int, int, int], ...], account: Account, blocked: str | None
) -> None:
    found = blocked_at(chain(*modes), account)
    assert (found.path if found else None) == blocked


def test_the_program_is_each_commands_first_word() -> None:
    assert program_of(JobSpec(command="python train.py")) == ["python"]
    assert program_of(JobSpec(command="./run.sh --x", mode="pytorch")) == ["./run.sh"]
    assert program_of(JobSpec(command="${PY} x")) == []  # known only at launch
    assert program_of(JobSpec(command="python x", image="official/x:1")) == []
    batch = JobSpec(type="batch", tasks=[{"command": "a 1"}, {"command": "b"}, {"command": "a"}])
    assert program_of(batch) == ["a", "b"]


def test_where_exec_looks() -> None:
    spec = JobSpec(command="python x", env={"PATH": "/venv/bin:/usr/bin"})
    assert search_path(spec, {"PATH": "/bin"}) == "/venv/bin:/usr/bin"
    assert search_path(JobSpec(command="x"), {"PATH": "/bin"}) == "/bin"
    assert candidates("python", "/venv/bin::rel:/usr/bin", None) == [
        "/venv/bin/python",
        "/usr/bin/python",
    ]
    assert candidates("/opt/py/../bin/python", "/x", None) == ["/opt/bin/python"]
    assert candidates("./run.sh", "/x", "/work") == ["/work/run.sh"]
    assert candidates("./run.sh", "/x", None) == []
    assert chain_of("/a/bin/python") == ["/", "/a", "/a/bin", "/a/bin/python"]


def test_the_refusal_names_the_file_the_account_and_the_fix() -> None:
    facts = PathFacts("/root", DIR | 0o700, ROOT, ROOT)
    text = refusal("python", "/root/venv/bin/python", facts, Account("gpy-root", None, frozenset()))
    assert "'gpy-root' cannot run 'python'" in text
    assert "(found at /root/venv/bin/python on the job's PATH)" in text
    assert "it may not search the directory /root (mode 0700)" in text
    assert "--image" in text
    exe = PathFacts("/x/python", FILE | 0o700, ROOT, ROOT)
    assert "'/x/python': it may not execute /x/python" in refusal(
        "/x/python", "/x/python", exe, ALICE
    )
