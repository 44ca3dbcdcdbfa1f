"""A real pool run by root runs each job as its owner's OS account (docs/security.md)."""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpuyard.testing.process import ServerProcess

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="running jobs as other OS accounts needs root"),
]


class OwnerPool(ServerProcess):
    """A pool whose jobs run as their owners, with a pool user of this test's own (so that
    the account made for it, gpy-<user>, is this test's to remove)."""

    def __init__(self, home: Path, user: str) -> None:
        super().__init__(home, "--virtual-nodes", "1", run_as="owner")
        self.user = user

    @property
    def env(self) -> dict[str, str]:
        return {**super().env, "GPUYARD_USER": self.user}


@pytest.fixture
def pool() -> Iterator[OwnerPool]:
    # pytest's temporary directories are private to root: the home must be one every
    # account can pass through.
    base = Path(tempfile.mkdtemp(prefix="gpuyard-e2e-run-as-"))
    base.chmod(0o711)
    pool = OwnerPool(base / "home", f"e2e{secrets.token_hex(4)}")
    try:
        yield pool.start()
    finally:
        pool.stop()
        account = f"gpy-{pool.user}"
        with contextlib.suppress(KeyError):
            uid = pwd.getpwnam(account).pw_uid
            for proc in psutil.process_iter(["uids"]):  # only this test's account runs them
                if proc.info["uids"].real == uid:
                    with contextlib.suppress(psutil.Error):
                        proc.kill()
            time.sleep(0.2)
            subprocess.run(["userdel", account], check=False, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_a_job_runs_as_its_owners_account_and_cannot_read_the_pools_database(
    pool: OwnerPool,
) -> None:
    database = pool.home / "gpuyard.db"
    probe = f"cat {database} >/dev/null 2>&1 && echo db-read || echo db-denied"
    job = pool.cli_json("submit", "--", f'sh -c "id -un; id -u; {probe}"')
    done = pool.wait_status(job["id"], {"succeeded", "failed"})
    log = pool.cli("logs", str(job["id"])).stdout
    assert done["status"] == "succeeded", log
    account = f"gpy-{pool.user}"
    assert log.splitlines() == [account, str(pwd.getpwnam(account).pw_uid), "db-denied"]
    assert stat.S_IMODE(database.stat().st_mode) == 0o600
    assert stat.S_IMODE(pool.home.stat().st_mode) == 0o711
    assert "cannot reach the pool's home" not in pool.log_tail()
