"""Files only the pool's account may read: ``pool.log`` included (issue 24, point 11)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpuyard.private_files import open_private_log


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_pool_log_is_made_0600_whatever_the_umask(tmp_path: Path) -> None:
    log = tmp_path / "pool.log"
    old = os.umask(0)
    try:
        fd = open_private_log(log)
    finally:
        os.umask(old)
    with os.fdopen(fd, "ab") as out:
        out.write(b"started\n")
    assert mode(log) == 0o600


def test_a_wider_log_of_an_older_version_is_narrowed_and_appended_to(tmp_path: Path) -> None:
    log = tmp_path / "pool.log"
    log.write_bytes(b"before\n")
    log.chmod(0o644)
    with os.fdopen(open_private_log(log), "ab") as out:
        out.write(b"after\n")
    assert mode(log) == 0o600 and log.read_bytes() == b"before\nafter\n"


def test_a_link_in_place_of_the_log_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    target.chmod(0o644)
    (tmp_path / "pool.log").symlink_to(target)
    with pytest.raises(OSError, match="symbolic link"):
        open_private_log(tmp_path / "pool.log")
    assert mode(target) == 0o644
