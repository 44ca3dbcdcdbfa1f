"""`gpuyard images login|logins|logout` over the real HTTP API and a real registry, and a copy
(`gpuyard images push HOST/REPO:TAG NAME`) that then needs no --username. The CLI runs
in-process; the password is given on stdin and never printed."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuyard.cli.main import app as cli_app
from gpuyard.errors import GpuyardError
from gpuyard.models.image import ImageRef
from gpuyard.settings import Settings
from gpuyard.testing.auth import TokenFor
from gpuyard.testing.registry import NODE_ARCH, TestRegistry, tar_layer, write_layout


@pytest.fixture
def settings(tmp_path: Path, registry: TestRegistry) -> Settings:
    return registry.pool_settings(
        tmp_path / "home", image_sources=[registry.host], image_sources_ca=registry.ca_file
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_login_logins_logout_and_a_copy_without_username(
    api_url: str, token_for: TokenFor, registry: TestRegistry, tmp_path: Path
) -> None:
    layout = tmp_path / "layout"
    write_layout(layout, [tar_layer([("etc/cli", b"x\n")])], architecture=NODE_ARCH)
    with registry.client("bob") as client:
        client.push(layout, ImageRef.parse("ext/cli:1"))
    host, password = registry.host, registry.users["bob"]
    env = {"GPUYARD_URL": api_url, "GPUYARD_TOKEN": token_for("alice"), "COLUMNS": "300"}

    def gpuyard(*args: str, stdin: str | None = None) -> tuple[int, str]:
        """The exit code and output; a refusal's detail (``main`` prints it) as the output."""
        result = CliRunner().invoke(cli_app, list(args), env=env, input=stdin)
        if isinstance(result.exception, GpuyardError):
            return 1, result.output + result.exception.detail
        return result.exit_code, result.output

    code, out = gpuyard(
        "images", "login", host, "--username", "bob", "--password-stdin", stdin=password + "\n"
    )
    assert (code, out.strip()) == (0, f"saved your login bob for {host}")
    code, out = gpuyard("images", "logins")
    assert code == 0 and host in out and "bob" in out and password not in out
    code, out = gpuyard("images", "push", f"{host}/ext/cli:1", "cli:1")
    assert code == 0 and "alice/cli:1" in out, out
    code, out = gpuyard("images", "logout", host)
    assert (code, out.strip()) == (0, f"forgot your login for {host}")
    code, out = gpuyard("images", "logins", "--json")
    assert (code, out.strip()) == (0, "[]")
    code, out = gpuyard("images", "logout", host)
    assert code != 0 and "no saved login" in out
    code, out = gpuyard("images", "login", host, stdin="bob\nwrong-pw\n")  # prompted for both
    assert code != 0 and "refused the login of bob" in out and "wrong-pw" not in out
