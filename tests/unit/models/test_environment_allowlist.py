"""The pool's environment a job inherits: an allowlist (models/environment.py)."""

from __future__ import annotations

import pytest

from gpuyard.models.environment import inherited_environment, parse_allowlist

POOL = {
    "PATH": "/usr/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C",
    "TZ": "UTC",
    "NCCL_SOCKET_IFNAME": "eth0",
    "PGPASSWORD": "secret",
    "AWS_SECRET_ACCESS_KEY": "secret",
    "HOME": "/root",
    "USER": "root",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "GPUYARD_TOKEN": "secret",
    "SITE_SCRATCH": "/scratch",
}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ((), {"PATH", "LANG", "LC_ALL", "TZ", "NCCL_SOCKET_IFNAME"}),
        (("SITE_*",), {"PATH", "LANG", "LC_ALL", "TZ", "NCCL_SOCKET_IFNAME", "SITE_SCRATCH"}),
        # Never: the pool's configuration, who it is, its GPUs; whatever the allowlist says.
        (("*",), set(POOL) - {"GPUYARD_TOKEN", "HOME", "USER", "CUDA_VISIBLE_DEVICES"}),
    ],
)
def test_a_job_inherits_only_allowlisted_names(extra: tuple[str, ...], expected: set[str]) -> None:
    env = inherited_environment(POOL, extra)
    assert set(env) == expected
    assert all(env[k] == POOL[k] for k in env)


def test_the_allowlist_setting_is_names_and_globs_separated_by_commas() -> None:
    assert parse_allowlist(" PYTHONPATH, SITE_* ,,") == ("PYTHONPATH", "SITE_*")
    assert parse_allowlist(["A", " "]) == ("A",)
    with pytest.raises(ValueError, match="not an environment variable name"):
        parse_allowlist("A=1")
