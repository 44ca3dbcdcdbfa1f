"""Interactive jobs on a real pool (docs/interactive.md): JupyterLab and TensorBoard from PyPI,
reached only through the pool's proxy.

One pool for the module (one virtual node of two GPUs). Alice (the pool's owner) starts a
notebook with one GPU and runs a cell over the kernel's WebSocket through the proxy; a training
job of hers writes TensorBoard scalars, and TensorBoard shows them; bob (her group, read-only
access) cannot enter her notebook but makes his own TensorBoard over her job; carol (another
group) gets the answer a missing job gets.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from gpuyard.testing.jupyterlab import run_cell
from gpuyard.testing.process import ServerProcess

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = str(Path(sys.executable).parent)
"""Where this environment's jupyter and tensorboard are: on the PATH the CLI exports."""

SCALARS = """
import os
from torch.utils.tensorboard import SummaryWriter
w = SummaryWriter(os.environ["GPUYARD_OUTPUT_DIR"])
for step in range(5):
    w.add_scalar("loss", 1.0 / (step + 1), step)
w.close()
"""


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("interactive") / "home"
    args = ("--virtual-nodes", "1", "--gpus-per-node", "2", "--cpus-per-node", "4")
    started = ServerProcess(home, *args).start()
    yield started
    started.stop()


User = Callable[..., subprocess.CompletedProcess[str]]


def _user(pool: ServerProcess, name: str, tmp: Path, group: str) -> tuple[User, str]:
    """The CLI of a new user ``name`` of ``group`` on a machine of its own, with this
    environment's programs on its PATH, and its token."""
    pool.cli("users", "add", name, "--group", group)
    token = json.loads(pool.cli("tokens", "create", name, "--json").stdout)["token"]
    env = {
        **pool.env,
        "PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", ""),
        "GPUYARD_HOME": str(tmp / name),
        "GPUYARD_URL": pool.url,
        "GPUYARD_TOKEN": token,
    }

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "gpuyard", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert not check or done.returncode == 0, done.stderr
        return done

    return run, token


def _http(pool: ServerProcess, token: str) -> httpx.Client:
    return httpx.Client(base_url=pool.url, headers={"authorization": f"Bearer {token}"}, timeout=30)


def _execute(ws_url: str, token: str, code: str) -> str:
    """Run ``code`` in a kernel over its WebSocket (Jupyter's messaging protocol); its stdout."""

    async def run() -> str:
        headers = {"authorization": f"Bearer {token}"}
        async with websockets.connect(ws_url, additional_headers=headers) as ws:
            return await asyncio.wait_for(run_cell(ws, code), 120)

    return asyncio.run(run())


@pytest.fixture(scope="module")
def alice(pool: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> tuple[User, str]:
    pool.cli("groups", "add", "lab")
    return _user(pool, "alice", tmp_path_factory.mktemp("users"), "lab")


@pytest.fixture(scope="module")
def notebook(pool: ServerProcess, alice: tuple[User, str]) -> dict[str, Any]:
    run, _ = alice
    job = json.loads(run("notebook", "--gpus", "1", "--json").stdout)
    url = run("open", str(job["id"]), "--wait", "120").stdout.strip()
    assert url == f"{pool.url}/proxy/{job['id']}/lab"
    return pool.job(job["id"])


def test_a_notebook_runs_a_cell_through_the_proxy(
    pool: ServerProcess, alice: tuple[User, str], notebook: dict[str, Any]
) -> None:
    """Issue 27's acceptance: through the proxy, a kernel is started and
    ``os.environ["CUDA_VISIBLE_DEVICES"]`` run over its WebSocket gives the job's value."""
    _, token = alice
    job_id = notebook["id"]
    with _http(pool, token) as http:
        page = http.get(f"/proxy/{job_id}/lab", headers={"accept": "text/html"})
        assert page.status_code == 200 and "JupyterLab" in page.text
        kernel = http.post(f"/proxy/{job_id}/api/kernels", json={"name": "python3"})
        assert kernel.status_code == 201, kernel.text
    ws_url = pool.url.replace("http", "ws", 1) + f"/proxy/{job_id}/api/kernels/"
    printed = _execute(
        ws_url + kernel.json()["id"] + "/channels",
        token,
        'import os; print(os.environ["CUDA_VISIBLE_DEVICES"])',
    )
    gpus = notebook["placement"][0]["gpus"]
    assert printed.strip() == ",".join(map(str, gpus)) and len(gpus) == 1
    # Submitting from inside: the notebook's own token signs its owner in (issue 27, point 4);
    # the example notebook's cells, run in this kernel as written.
    cells = json.loads((ROOT / "examples" / "submit_from_notebook.ipynb").read_text())["cells"]
    printed = "".join(
        _execute(ws_url + kernel.json()["id"] + "/channels", token, "".join(c["source"]))
        for c in cells
        if c["cell_type"] == "code"
    )
    lines = printed.splitlines()
    assert lines[0].split()[1:] == ["alice", "queued"], printed
    assert lines[1] == "succeeded 42", printed
    assert "from-a-notebook" in printed  # gpuyard ls, from the notebook's shell


def test_the_browser_never_holds_the_services_token(
    pool: ServerProcess, alice: tuple[User, str], notebook: dict[str, Any]
) -> None:
    """JupyterLab writes its token into its page; the proxy takes it out (and the page still
    works: the proxy presents the token for every request)."""
    _, token = alice
    with _http(pool, token) as http:
        page = http.get(f"/proxy/{notebook['id']}/lab", headers={"accept": "text/html"})
    config = page.text.split('id="jupyter-config-data"', 1)[1].split("</script>", 1)[0]
    assert json.loads(config.split(">", 1)[1])["token"] == ""
    assert "gpuyard_session" not in page.headers.get("set-cookie", "")


def _scalars(http: httpx.Client, board: int, run: str, tag: str) -> httpx.Response:
    """TensorBoard's scalars of ``run``, once it has read them (it reads its logs in the
    background after it starts answering)."""
    deadline = time.monotonic() + 60
    while True:
        answer = http.get(
            f"/proxy/{board}/data/plugin/scalars/scalars", params={"run": run, "tag": tag}
        )
        if answer.status_code != 404 or time.monotonic() > deadline:
            return answer
        time.sleep(1)


def test_tensorboard_shows_a_finished_jobs_scalars_and_only_its_owner_enters(
    pool: ServerProcess,
    alice: tuple[User, str],
    notebook: dict[str, Any],
    tmp_path: Path,
) -> None:
    """A finished job's scalars in a TensorBoard made from it by a read-only member of its
    group; that member cannot enter the notebook (403), another group's user is told the job
    does not exist (404)."""
    run, alice_token = alice
    script = tmp_path / "scalars.py"
    script.write_text(SCALARS)
    script.chmod(0o644)
    train = json.loads(
        run("submit", "--json", "--access", "read-only", "--", "python", str(script)).stdout
    )
    assert run("wait", str(train["id"]), check=False).returncode == 0, pool.log(train["id"])
    bob, bob_token = _user(pool, "bob", tmp_path, "lab")
    board = json.loads(bob("tensorboard", str(train["id"]), "--json").stdout)
    assert (
        bob("open", str(board["id"]), "--wait", "120")
        .stdout.strip()
        .endswith(f"/proxy/{board['id']}/")
    )
    with _http(pool, bob_token) as http:
        answer = _scalars(http, board["id"], f"job-{train['id']}/.", "loss")  # its outputs' top
        assert answer.status_code == 200, (
            answer.text + http.get(f"/proxy/{board['id']}/data/runs").text + pool.log(board["id"])
        )
        assert [round(v, 4) for _, _, v in answer.json()] == [1.0, 0.5, 0.3333, 0.25, 0.2]
        hidden = http.get(f"/proxy/{notebook['id']}/lab")
        assert hidden.status_code == 404  # her notebook gives her group no access
    pool.cli("groups", "add", "elsewhere")
    _, carol_token = _user(pool, "carol", tmp_path, "elsewhere")
    with _http(pool, carol_token) as http:
        missing = http.get(f"/proxy/{board['id']}/")
        assert missing.status_code == 404
        absent = http.get("/proxy/99999/")
        assert missing.json()["detail"] == absent.json()["detail"].replace(
            "99999", str(board["id"])
        )
    shared = json.loads(
        run("notebook", "--json", "--from", str(train["id"]), "--name", "shared-nb").stdout
    )
    assert shared["spec"]["access"] == "read-only"  # a development environment of train's
    with _http(pool, bob_token) as http:
        refused = http.get(f"/proxy/{shared['id']}/lab")
        assert refused.status_code == 403 and "owner's alone" in refused.json()["detail"]
    run("stop", str(shared["id"]))
    with _http(pool, alice_token) as http:
        assert http.get(f"/proxy/{board['id']}/").status_code == 404  # bob's, not shared
    bob("stop", str(board["id"]))
