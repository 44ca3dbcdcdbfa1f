"""The test image's builder (gpuyard.testing.pyimage): what goes in, and its cache key."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from gpuyard.testing import pyimage

pytestmark = pytest.mark.skipif(
    pyimage.unavailable_reason() is not None, reason=str(pyimage.unavailable_reason())
)


def test_the_image_holds_python_torch_and_open_mpi_where_debians_python_looks() -> None:
    files = pyimage._direct({})
    site = pyimage.TARGET_SITE
    assert files["usr/bin/python3.11"] == pyimage.PYTHON
    for wanted in (f"{site}/torch/__init__.py", f"{site}/mpi4py/__init__.py", f"{site}/numpy"):
        assert any(name.startswith(wanted) for name in files), wanted
    assert files["usr/local/bin/mpirun"].name == "mpirun"  # the wheel's, beside the venv
    assert any(name.startswith(f"{site}/sympy/") for name in files)  # torch's requirement
    # What no job runs stays out; the bytecode stays in.
    assert not any(name.startswith(f"{site}/torch/test/") for name in files)
    assert f"{site}/torch/bin/torch_shm_manager" in files
    assert any("/__pycache__/" in name for name in files)


def test_the_cache_key_follows_the_inputs(tmp_path: Path) -> None:
    source = tmp_path / "code.py"
    source.write_text("print(1)\n")
    files = {"opt/code.py": source}
    key = pyimage._key(files)
    assert pyimage._key({"opt/code.py": source}) == key
    assert pyimage._key({"opt/other.py": source}) != key  # another place
    os.utime(source, ns=(0, 0))
    assert pyimage._key(files) != key  # the file changed


def test_the_environments_console_scripts_run_with_the_images_python() -> None:
    script = f"#!{sys.prefix}/bin/python\nimport sys\n".encode()
    assert pyimage.image_script(script) == b"#!/usr/bin/python3\nimport sys\n"
    for kept in (b"#!/bin/sh\necho\n", b"\x7fELF...", b"#!/usr/bin/env python3\nx\n"):
        assert pyimage.image_script(kept) == kept
