"""`gpuyard config show` documents every setting from the same Settings object."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_config_show_lists_every_setting(tmp_path: Path) -> None:
    env = {
        "GPUYARD_HOME": str(tmp_path),
        "GPUYARD_PORT": "9999",
        "PATH": "/usr/bin:/bin",
        "COLUMNS": "250",  # so the table does not wrap the descriptions
    }
    out = subprocess.run(
        [sys.executable, "-m", "gpuyard", "config", "show", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    data = json.loads(out)
    assert (data["home"], data["port"], data["virtual_nodes"]) == (str(tmp_path), 9999, 0)
    table = subprocess.run(
        [sys.executable, "-m", "gpuyard", "config", "show"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "GPUYARD_DATABASE_URL" in table and "SQLite (WAL)" in table
