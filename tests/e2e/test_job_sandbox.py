"""A real `gpuyard up` whose environment holds secrets: its jobs see none of them, and each
job's /tmp is its own (issue 24, points 4 and 7; docs/security.md, "What the job gets")."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import pytest

import gpuyard
from gpuyard.testing.process import ServerProcess


def test_the_pools_environment_does_not_reach_its_jobs(
    pool_factory: type[ServerProcess], tmp_path: Path
) -> None:
    pool = pool_factory(
        tmp_path / "home",
        settings={
            "PGPASSWORD": "pool-secret-1",
            "AWS_SECRET_ACCESS_KEY": "pool-secret-2",
            "SITE_SCRATCH": "/scratch",
            "GPUYARD_JOB_ENV_ALLOW": "SITE_*",
        },
    ).start()
    # The test's CLI runs in the pool's environment; --export=NONE keeps its shell's (here the
    # same secrets, which a submitter may send their own job) out, to see what the pool gives.
    job = pool.cli_json("submit", "--export=NONE", "--", "env")
    pool.cli("wait", str(job["id"]))
    output = pool.cli("logs", str(job["id"])).stdout
    assert "pool-secret" not in output
    assert "SITE_SCRATCH=/scratch" in output.splitlines()
    assert any(line.startswith("PATH=") for line in output.splitlines())


@pytest.mark.skipif(os.geteuid() != 0, reason="a private /tmp needs a pool run by root")
def test_a_jobs_tmp_is_its_own_and_gone_when_it_ends(
    pool_factory: type[ServerProcess], tmp_path: Path
) -> None:
    pool = pool_factory(tmp_path / "home", settings={"GPUYARD_PRIVATE_TMP": "true"}).start()
    name = f"gpuyard-e2e-{secrets.token_hex(4)}"
    writer = pool.cli_json("submit", "--", f"bash -c 'echo x > /tmp/{name} && ls /tmp'")
    pool.cli("wait", str(writer["id"]))
    # Only the file, and the way to what the worker needs where that lies below /tmp: the
    # pool's home (pytest's tmp_path) and the Python and gpuyard it runs (a clone in /tmp).
    needed = [tmp_path / "home", sys.prefix, sys.base_prefix, Path(gpuyard.__file__).parents[2]]
    resolved = [Path(os.path.realpath(p)) for p in needed]
    kept = {p.relative_to("/tmp").parts[0] for p in resolved if p.is_relative_to("/tmp")}
    assert set(pool.cli("logs", str(writer["id"])).stdout.split()) == {name, *kept}
    assert not Path("/tmp", name).exists()
    reader = pool.cli_json("submit", "--", "ls -A /tmp /dev/shm")
    pool.cli("wait", str(reader["id"]))
    assert name not in pool.cli("logs", str(reader["id"])).stdout
