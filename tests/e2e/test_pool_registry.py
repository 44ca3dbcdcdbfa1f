"""The pool's own registry (docs/images.md#the-pools-own-registry): `gpuyard up` with
``GPUYARD_REGISTRY=local`` runs Debian's docker-registry on 127.0.0.1 with TLS and the pool's
generated credential, supervised; an image pushed there with that credential runs a job; the
registry is restarted when it dies and nothing of it is left once the pool stops."""

from __future__ import annotations

import json
import os
import signal
import ssl
import stat
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import pytest

from gpuyard.images.local_registry import POOL_USER
from gpuyard.images.registry import Credentials, RegistryClient
from gpuyard.models.image import ImageRef
from gpuyard.testing.process import ServerProcess
from gpuyard.testing.registry import (
    NODE_ARCH,
    busybox_layer,
    write_layout,
)
from gpuyard.testing.registry import unavailable_reason as registry_unavailable

pytestmark = [
    pytest.mark.skipif(
        os.geteuid() != 0, reason="workers in an image are mounted by supervisors run by root"
    ),
    pytest.mark.skipif(registry_unavailable() is not None, reason=str(registry_unavailable())),
]


def _until(what: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _registries(config: Path) -> list[psutil.Process]:
    """The docker-registry processes serving ``config``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "docker-registry" in cmdline and str(config) in cmdline:
            found.append(proc)
    return found


def _answers(url: str, ca: Path) -> bool:
    try:
        tls = ssl.create_default_context(cafile=str(ca))
        return httpx.get(f"{url}/v2/", verify=tls, timeout=2).status_code == 401
    except httpx.TransportError:
        return False


def test_the_pools_own_registry_serves_its_jobs_and_goes_with_the_pool(
    pool_factory: type[ServerProcess], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    pool = pool_factory(home, settings={"GPUYARD_REGISTRY": "local"}).start(timeout=60)
    files = home / "registry"
    url = json.loads((home / "server.json").read_text())["registry"]
    ca, config = files / "cert.pem", files / "config.yml"
    assert url.startswith("https://127.0.0.1:")
    for secret in ("password", "key.pem", "htpasswd"):
        assert stat.S_IMODE((files / secret).stat().st_mode) == 0o600
    assert _answers(url, ca)  # 401: nothing anonymous

    layout = tmp_path / "layout"
    write_layout(layout, [busybox_layer()], architecture=NODE_ARCH)
    credentials = Credentials(POOL_USER, (files / "password").read_text().strip())
    with RegistryClient(url, credentials=credentials, ca_file=ca) as client:
        digest = client.push(layout, ImageRef.parse("team/busybox:1"))

    job = pool.cli_json("submit", "--image", "team/busybox:1", "--", "cat /etc/os-release")
    assert job["spec"]["image"] == f"team/busybox:1@{digest}"
    pool.cli("wait", str(job["id"]))
    assert pool.cli("logs", str(job["id"])).stdout.splitlines()[0] == "ID=gpuyard-test"
    events = pool.cli_json("events", str(job["id"]))
    pulled = [e["reason"] for e in events if e["kind"] == "image"]
    assert pulled[0].startswith(f"pulling image team/busybox:1@{digest} on ")
    assert pulled[1].startswith(f"pulled image team/busybox:1@{digest} on ")
    assert " in " in pulled[1] and pulled[1].endswith(" MB/s)")

    # Supervised: killed, it is started again and answers.
    [first] = _registries(config)
    first.send_signal(signal.SIGKILL)
    _until(lambda: [p.pid for p in _registries(config)] not in ([], [first.pid]))
    _until(lambda: _answers(url, ca))

    pool.stop()
    _until(lambda: _registries(config) == [])  # the kernel tells it: its parent is gone
    assert not _answers(url, ca)
