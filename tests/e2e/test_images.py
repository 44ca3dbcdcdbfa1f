"""Jobs in images, end to end (docs/images.md, "Jobs in images"): a real `gpuyard up` whose
registry is Debian's `docker-registry` (TLS, two users), an image pushed to it, jobs submitted
with `--image` through the real CLI, pulled into the node's cache and run by the supervisor in
the image's root filesystem."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from gpuyard.models.image import ImageRef
from gpuyard.testing.process import ServerProcess
from gpuyard.testing.registry import (
    NODE_ARCH,
    PushedImage,
    TestRegistry,
    busybox_layer,
    registry_server,
    tar_layer,
    write_layout,
)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="workers in an image are mounted by supervisors run by root"
)


@pytest.fixture(scope="module")
def image(registry: TestRegistry, tmp_path_factory: pytest.TempPathFactory) -> PushedImage:
    """``alice/busybox:1``: busybox, a file of its own, and a working directory."""
    layout = tmp_path_factory.mktemp("layout")
    layers = [busybox_layer(), tar_layer([("srv/app/motd", b"hello from the image\n")])]
    config = {"Env": ["PATH=/bin", "IMAGE_SAYS=hi"], "WorkingDir": "/srv/app", "Cmd": ["sh"]}
    write_layout(layout, layers, architecture=NODE_ARCH, config=config)
    ref = ImageRef.parse("alice/busybox:1")
    with registry.client("alice") as client:
        digest = client.push(layout, ref)
    return PushedImage(ref, digest, layout)


def _pool(pool_factory: type[ServerProcess], home: Path, registry: TestRegistry) -> ServerProcess:
    return pool_factory(
        home,
        settings={
            "GPUYARD_REGISTRY": registry.url,
            "GPUYARD_REGISTRY_CA": str(registry.ca_file),
            "GPUYARD_REGISTRY_USER": "alice",
            "GPUYARD_REGISTRY_PASSWORD": registry.users["alice"],
        },
    ).start()


def test_a_job_in_an_image_runs_on_the_images_files_pinned_to_its_digest(
    pool_factory: type[ServerProcess], tmp_path: Path, registry: TestRegistry, image: PushedImage
) -> None:
    pool = _pool(pool_factory, tmp_path / "home", registry)
    script = "cat /etc/os-release motd; pwd; echo $IMAGE_SAYS $PATH"
    job = pool.cli_json("submit", "--image", "alice/busybox:1", "--", f"sh -c '{script}'")
    # The tag was resolved at submission: the job names the bytes it runs.
    assert job["spec"]["image"] == f"alice/busybox:1@{image.digest}"
    pool.cli("wait", str(job["id"]))
    out = pool.cli("logs", str(job["id"])).stdout.splitlines()
    assert out[0] == "ID=gpuyard-test"  # the image's, not this machine's
    assert out[2:] == ["hello from the image", "/srv/app", "hi /bin"]
    shown = pool.cli("show", str(job["id"])).stdout
    assert " image " in shown and "alice/busybox:1@sha256:" in shown.replace("\n", "")
    header, row = pool.cli("ls").stdout.splitlines()[:2]
    assert header.split()[-2:] == ["IMAGE", "REASON"] and "alice/busybox:1" in row.split()
    # A second job of the image finds it in the node's cache (one image there).
    again = pool.cli_json("submit", "--image", f"alice/busybox@{image.digest}", "--", "cat motd")
    pool.cli("wait", str(again["id"]))
    assert os.listdir(tmp_path / "home" / "images" / "images") == [image.digest[7:]]


def test_an_image_the_registry_lacks_is_refused_at_submission_naming_it(
    pool_factory: type[ServerProcess], tmp_path: Path, registry: TestRegistry, image: PushedImage
) -> None:
    pool = _pool(pool_factory, tmp_path / "home", registry)
    for wanted in ("alice/busybox:2", "alice/nothing:1", "Alice/Busybox"):
        refused = pool.cli("submit", "--image", wanted, "--", "true", check=False)
        assert refused.returncode != 0
        assert wanted in refused.stderr, refused.stderr
    listed = pool.cli_json("ls")
    assert (listed["items"] if isinstance(listed, dict) else listed) == []  # nothing stored


def test_exec_in_a_held_job_runs_in_its_image_without_the_entrypoint(
    pool_factory: type[ServerProcess],
    tmp_path: Path,
    registry: TestRegistry,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    layout = tmp_path_factory.mktemp("entry-layout")
    config = {"Env": ["PATH=/bin"], "Entrypoint": ["env", "FROM_ENTRYPOINT=yes"]}
    write_layout(layout, [busybox_layer()], architecture=NODE_ARCH, config=config)
    with registry.client("alice") as client:
        client.push(layout, ImageRef.parse("alice/entry:1"))
    pool = _pool(pool_factory, tmp_path / "home", registry)
    script = "echo main $FROM_ENTRYPOINT; exec sleep 600"
    job_id = str(
        pool.cli_json("submit", "--image", "alice/entry:1", "--", f"sh -c '{script}'")["id"]
    )
    deadline = time.monotonic() + 60
    while "main" not in pool.log(int(job_id)):
        assert time.monotonic() < deadline, pool.log_tail()
        time.sleep(0.1)
    assert pool.cli("logs", job_id).stdout == "main yes\n"  # the job's command: after it

    pool.cli("exec", job_id, "stop", "--hold", "10m")
    pool.wait_status(int(job_id), {"running"})
    while pool.job(int(job_id)).get("held_until") is None:
        assert time.monotonic() < deadline + 60
        time.sleep(0.2)
    ran = json.loads(
        pool.cli(
            "exec", job_id, "run", "--json", "--", "sh", "-c",
            "echo run ${FROM_ENTRYPOINT:-none}; cat /etc/os-release",
        ).stdout
    )  # fmt: skip
    rank = str(ran["ranks"][0])
    deadline = time.monotonic() + 60
    while "ID=" not in (log := pool.log(int(job_id), worker=int(rank))):
        assert time.monotonic() < deadline, log
        time.sleep(0.2)
    assert log.splitlines()[:2] == ["run none", "ID=gpuyard-test"]  # in the image, no ENTRYPOINT
    pool.cli("stop", job_id)


def test_a_job_waits_for_a_registry_that_went_away_then_fails_after_the_timeout(
    pool_factory: type[ServerProcess], tmp_path: Path, image: PushedImage
) -> None:
    """docs/images.md#pulling: submitted (and pinned) while its registry answered, released
    once it is gone, the job waits with that reason, then fails after the admin's timeout."""
    with registry_server() as gone:
        layout = image.layout
        with gone.client("alice") as client:
            client.push(layout, image.ref)
        ca_file = Path(shutil.copy(gone.ca_file, tmp_path / "ca.pem"))
        pool = pool_factory(
            tmp_path / "home",
            settings={
                "GPUYARD_REGISTRY": gone.url,
                "GPUYARD_REGISTRY_CA": str(ca_file),
                "GPUYARD_REGISTRY_USER": "alice",
                "GPUYARD_REGISTRY_PASSWORD": gone.users["alice"],
                "GPUYARD_IMAGE_PULL_TIMEOUT": "8",
            },
        ).start()
        job = pool.cli_json("submit", "--hold", "--image", str(image.ref), "--", "true")
    pool.cli("release", str(job["id"]))
    waiting = pool.wait_status(job["id"], {"running"}, timeout=30)
    deadline = time.monotonic() + 30
    while "cannot be reached" not in (waiting.get("reason") or ""):
        assert time.monotonic() < deadline, waiting
        time.sleep(0.1)
        waiting = pool.job(job["id"])
    assert waiting["state"] == "starting"
    assert "waiting to pull image alice/busybox:1@sha256:" in waiting["reason"]
    shown = " ".join(pool.cli("show", str(job["id"])).stdout.split())
    assert "waiting to pull image" in shown and "retrying every 5 s" in shown
    ended = pool.wait_status(job["id"], {"failed"}, timeout=60)
    assert "cannot be reached" in ended["reason"]
    assert "GPUYARD_IMAGE_PULL_TIMEOUT" in ended["reason"]
    kinds = [e["kind"] for e in pool.cli_json("events", str(job["id"]))]
    assert "image" in kinds


def _as_user(pool: ServerProcess, name: str, home: Path) -> Callable[..., CompletedProcess[str]]:
    """The CLI of user ``name`` (made by the pool's admin), on a machine of its own."""
    pool.cli("users", "add", name)
    token = json.loads(pool.cli("tokens", "create", name, "--json").stdout)["token"]
    env = {
        **{k: v for k, v in pool.env.items() if k != "GPUYARD_HOME"},
        "GPUYARD_HOME": str(home),
        "GPUYARD_URL": pool.url,
        "GPUYARD_TOKEN": token,
    }

    def run(*args: str) -> CompletedProcess[str]:
        command = [sys.executable, "-m", "gpuyard", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, check=False)

    return run


def test_another_users_private_image_is_a_404_until_shared(
    pool_factory: type[ServerProcess], tmp_path: Path, registry: TestRegistry, image: PushedImage
) -> None:
    """Issue 26's acceptance: alice pushes a private image with `gpuyard images push`; bob's
    `images show` and `submit --image` get word for word what a missing image gets; once alice
    shares it, bob's job runs in it."""
    pool = _pool(pool_factory, tmp_path / "home", registry)
    alice = _as_user(pool, "alice", tmp_path / "alice")
    bob = _as_user(pool, "bob", tmp_path / "bob")
    pushed = alice("images", "push", str(image.layout), "x:1", "--json")
    assert pushed.returncode == 0, pushed.stderr
    assert json.loads(pushed.stdout)["name"] == "alice/x:1"
    assert "alice/x:1" in alice("images", "ls").stdout

    def refusals(*args: str) -> tuple[str, str]:
        """bob's stderr for ``args`` naming alice's image, and naming a missing one."""
        answers = []
        for name in ("alice/x:1", "alice/none:1"):
            done = bob(*(name if a == "NAME" else a for a in args))
            assert done.returncode != 0, done.stdout
            answers.append(done.stderr.replace(name, "NAME"))
        return answers[0], answers[1]

    shown, shown_missing = refusals("images", "show", "NAME")
    assert shown == shown_missing and "is not in the catalogue" in shown
    submitted, submitted_missing = refusals("submit", "--image", "NAME", "--", "true")
    assert submitted == submitted_missing and "is not in the pool's registry" in submitted
    assert "alice/x:1" not in bob("images", "ls").stdout

    assert alice("images", "share", "alice/x:1", "public").returncode == 0
    job = json.loads(bob("submit", "--json", "--image", "alice/x:1", "--", "cat motd").stdout)
    assert job["spec"]["image"] == f"alice/x:1@{image.digest}"
    pool.cli("wait", str(job["id"]))
    assert bob("logs", str(job["id"])).stdout == "hello from the image\n"
