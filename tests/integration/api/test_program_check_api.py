"""A job whose OS account cannot run its program is refused at submission (422, with the fix).

Over real HTTP on SQLite and PostgreSQL, with the check on as ``gpuyard up`` turns it on for a
local pool whose jobs run as their owners' accounts (``create_app(program_env=…)``). The
files are real: a program in a directory only root (or the user running the tests) may
search, as in ``/root/venv``; the owner's account ``gpy-alice`` need not exist (it would be
made at the first launch, owning nothing: the others' bits count).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.client import Client
from gpuyard.clock import ManualClock
from gpuyard.errors import InvalidSpec
from gpuyard.executors.fake import FakeExecutor
from gpuyard.server.app import create_app
from gpuyard.settings import Settings
from gpuyard.store.engine import Store
from gpuyard.testing.auth import user_token
from gpuyard.testing.server import serve


@pytest.fixture
def programs() -> Iterator[Path]:
    """``open/bin/tool`` anyone may run, ``closed/bin/tool`` behind a 0700 directory."""
    top = Path(tempfile.mkdtemp(prefix="gpuyard-programs-"))  # not under pytest's 0700 tree
    top.chmod(0o755)
    for name, mode in (("open", 0o755), ("closed", 0o700)):
        (top / name / "bin").mkdir(parents=True)
        (top / name).chmod(mode)
        tool = top / name / "bin" / "tool"
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    yield top
    shutil.rmtree(top)


@pytest.fixture
def alice(
    tmp_path: Path, store: Store, fake_executor: FakeExecutor, clock: ManualClock
) -> Iterator[Client]:
    settings = Settings(home=tmp_path / "h", user="root")
    app = create_app(
        settings, store=store, executor=fake_executor, clock=clock, program_env={"PATH": "/bin"}
    )
    with serve(app) as url, Client(url, token=user_token(app, "alice")) as client:
        yield client


def test_a_program_the_account_cannot_reach_is_refused_with_the_fix(
    alice: Client, programs: Path
) -> None:
    closed = f"{programs}/closed/bin"
    with pytest.raises(InvalidSpec) as refused:
        alice.submit({"command": "tool --x", "env": {"PATH": f"{closed}:/usr/bin"}})
    message = str(refused.value)
    assert "the job's account 'gpy-alice' cannot run 'tool'" in message
    assert f"(found at {closed}/tool on the job's PATH)" in message
    assert f"it may not search the directory {programs}/closed (mode 0700)" in message
    assert "--image" in message
    assert alice.jobs().items == []  # nothing stored
    with pytest.raises(InvalidSpec, match="cannot run"):
        alice.submit({"command": f"{closed}/tool"})  # a path, not looked up


def test_what_the_account_can_run_or_the_pool_cannot_see_is_not_refused(
    alice: Client, programs: Path
) -> None:
    opened = f"{programs}/open/bin"
    # exec passes over the file it may not run for the next one on PATH, as the worker does.
    path = f"{programs}/closed/bin:{opened}"
    assert alice.submit({"command": "tool", "env": {"PATH": path}}).id
    assert alice.submit({"command": "not-installed-here"}).id  # another node may have it
    assert alice.submit({"command": "sh -c true"}).id  # the pool's PATH: /bin
    assert alice.submit({"command": "${TOOL} x"}).id  # known only at launch


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a file owned by another account (root)")
def test_an_existing_mapped_account_is_checked_as_itself(
    tmp_path: Path, store: Store, fake_executor: FakeExecutor, clock: ManualClock, programs: Path
) -> None:
    # "nobody" exists everywhere: mapped to it, alice runs as it, and it owns no file here.
    settings = Settings(home=tmp_path / "h", user="root")
    app = create_app(
        settings, store=store, executor=fake_executor, clock=clock, program_env={"PATH": "/bin"}
    )
    with serve(app) as url, Client(url, token=user_token(app, "root")) as admin:
        admin.create_user("carol", os_user="nobody")
        with Client(url, token=user_token(app, "carol")) as carol:
            with pytest.raises(
                InvalidSpec,
                match=r"'nobody' cannot run '/tmp/.*/closed/bin/tool': it may not search",
            ):
                carol.submit({"command": f"{programs}/closed/bin/tool"})
            assert carol.submit({"command": f"{programs}/open/bin/tool"}).id
