"""Screenshots of every page of the web UI, for docs/web.md and the README.

Starts a real pool (``gpuyard up`` with 2 virtual nodes of 2 GPUs each) in a temporary home,
gives it a little history (a group and its quota, a second user, jobs that succeeded, failed,
were stopped, run now and wait), and photographs each page with Debian's Chromium (``make
chromium``) at 1280x720, plus the job list at a phone's width and the job page in the dark
theme. Rerun it after changing a page: ``.venv/bin/python bench/screenshots.py`` (writes
``docs/img/web-*.png``).

Then, on a pool of its own (one node of 2 GPUs, this environment's JupyterLab on its ``PATH``),
the interactive jobs (docs/interactive.md): a training job's page with "Create development
environment" and "Create TensorBoard", the development environment made from it once its
JupyterLab is ready, JupyterLab itself through the pool's proxy with a cell run, and the job
list with "My environments". ``--only interactive`` takes these alone.

And the Datasets page, on a pool of its own with a dataset root (``--only datasets``); and a
training job's Checkpoints section (docs/checkpoints.md), on a pool of its own where a 2-node
DDP job saves through the checkpoint service every step and one step is pinned (``--only
checkpoints``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from gpuyard.testing.browser import chromium, unavailable_reason
from gpuyard.testing.jupyterlab import LOAD_TIMEOUT, run_in_new_notebook
from gpuyard.testing.process import ServerProcess

STEPS = (
    "import math, time; "
    "[print(f'epoch {i // 50} step {i} loss {2.5 * math.exp(-i / 300):.4f} lr 3e-4', flush=True)"
    " or sum(j * j for j in range(200000 + 100000 * (i % 7))) * 0 or time.sleep(0.15)"
    " for i in range(100000)]"
)


def prepare(pool: ServerProcess, token: str) -> dict[str, int]:
    api = httpx.Client(
        base_url=f"{pool.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    api.post("/groups", json={"name": "vision", "urgent_limit": 2}).raise_for_status()
    me = api.get("/users/me").json()["name"]
    api.patch(f"/users/{me}", json={"group": "vision"}).raise_for_status()
    api.post("/users", json={"name": "mei", "group": "vision"}).raise_for_status()
    for tier, gpus in (("normal", 4), ("high", 2)):
        api.post(
            "/quotas", json={"kind": "group", "subject": "vision", "tier": tier, "gpus": gpus}
        ).raise_for_status()
    api.post(
        "/quotas", json={"kind": "user", "subject": "mei", "tier": "normal", "gpus": 2}
    ).raise_for_status()
    py = sys.executable

    def submit(**spec: object) -> int:
        answer = api.post("/jobs", json=spec)
        answer.raise_for_status()
        return int(answer.json()["id"])

    done = submit(name="warmup-check", command=f"{py} -c \"print('ok')\"")
    failed = submit(name="bad-lr-sweep", command=f"{py} -c \"raise SystemExit('diverged')\"")
    stopped = submit(name="old-baseline", command=f'{py} -c "import time; time.sleep(600)"')
    time.sleep(2)
    api.post(f"/jobs/{stopped}/stop").raise_for_status()
    running = submit(
        name="resnet50-ddp",
        command=f'{py} -c "{STEPS}"',
        mode="pytorch",
        nodes=2,
        resources={"gpus": 1, "cpus": 2, "memory": "2G"},
        access="read-only",
        max_runtime="8h",
        mounts={"datasets": [{"name": "imagenet", "path": "/tmp"}]},
        fault_tolerance={"enabled": True, "max_restarts": 3},
    )
    submit(
        name="llama-finetune",
        command=f'{py} -c "{STEPS}"',
        mode="pytorch",
        nodes=2,
        resources={"gpus": 2},
        priority="normal",
    )
    waiting = submit(
        name="bert-large-pretrain",
        command=f'{py} -c "{STEPS}"',
        nodes=2,
        resources={"gpus": 2},
        max_runtime="4h",
    )
    return {"done": done, "failed": failed, "running": running, "waiting": waiting}


def shoot(pool: ServerProcess, token: str, jobs: dict[str, int], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with chromium() as browser:
        context = browser.new_context(
            base_url=pool.url, viewport={"width": 1280, "height": 720}, color_scheme="light"
        )
        page = context.new_page()
        page.goto("/login")
        page.screenshot(path=str(out / "web-login.png"))
        page.get_by_label("Token").fill(token)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url("**/jobs**")
        page.goto("/jobs")
        page.screenshot(path=str(out / "web-jobs.png"))
        page.goto(f"/jobs/new?clone={jobs['running']}")
        page.wait_for_selector("#prediction[data-state]")
        page.screenshot(path=str(out / "web-form.png"))
        page.goto(f"/jobs/{jobs['running']}")
        page.wait_for_timeout(1500)
        page.screenshot(path=str(out / "web-job.png"), full_page=True)
        page.goto(f"/jobs/{jobs['running']}#h-usage")
        page.wait_for_timeout(500)
        page.screenshot(path=str(out / "web-job-charts.png"))
        page.goto(f"/jobs/{jobs['waiting']}")
        page.screenshot(path=str(out / "web-job-queued.png"))
        page.goto("/nodes")
        page.screenshot(path=str(out / "web-nodes.png"))
        page.goto("/pools")
        page.screenshot(path=str(out / "web-pools.png"))
        page.goto("/admin")
        page.screenshot(path=str(out / "web-admin.png"))
        context.close()

        dark = browser.new_context(
            base_url=pool.url, viewport={"width": 1280, "height": 720}, color_scheme="dark"
        )
        dark.add_cookies([{"name": "gpuyard_session", "value": token, "url": pool.url}])
        page = dark.new_page()
        page.goto(f"/jobs/{jobs['running']}")
        page.wait_for_timeout(1000)
        page.screenshot(path=str(out / "web-job-dark.png"))
        dark.close()

        phone = browser.new_context(
            base_url=pool.url, viewport={"width": 390, "height": 844}, is_mobile=True
        )
        phone.add_cookies([{"name": "gpuyard_session", "value": token, "url": pool.url}])
        page = phone.new_page()
        page.goto("/jobs")
        page.screenshot(path=str(out / "web-jobs-phone.png"))
        page.goto(f"/jobs/{jobs['running']}")
        page.wait_for_timeout(1000)
        page.screenshot(path=str(out / "web-job-phone.png"))
        phone.close()


def shoot_interactive(pool: ServerProcess, token: str, out: Path) -> dict[str, int]:
    """The interactive jobs' pages (``web-interactive-*.png``); the jobs' ids."""
    from playwright.sync_api import expect

    train = _api(pool, token).post(
        "/jobs",
        json={
            "name": "resnet50-finetune",
            "command": f'{sys.executable} -c "{STEPS}"',
            "resources": {"gpus": 1, "cpus": 1, "memory": "1G"},
            "access": "read-only",
            "max_runtime": "8h",
        },
    )
    train.raise_for_status()
    job = int(train.json()["id"])
    with chromium() as browser:
        context, page = _signed_in(browser, pool, token, timeout=30_000)
        page.goto(f"/jobs/{job}")
        expect(page.locator("#job-state")).to_contain_text("running")
        page.wait_for_timeout(3000)  # a few lines of its log
        page.screenshot(path=str(out / "web-interactive-job.png"))
        page.get_by_role("button", name="Create development environment").click()
        page.wait_for_url(re.compile(r"/jobs/\d+\?notice="))
        found = re.search(r"/jobs/(\d+)", page.url)
        assert found is not None
        notebook = int(found.group(1))
        expect(page.locator("#service-state")).to_have_text("ready", timeout=LOAD_TIMEOUT)
        page.screenshot(path=str(out / "web-interactive-service.png"))
        with context.expect_page() as opened:
            page.get_by_role("link", name="Open").click()
        lab = opened.value
        lab.set_viewport_size({"width": 1280, "height": 720})
        code = 'import os; print("CUDA_VISIBLE_DEVICES =", os.environ["CUDA_VISIBLE_DEVICES"])'
        expect(run_in_new_notebook(lab, code)).to_contain_text("=", timeout=LOAD_TIMEOUT)
        news = lab.get_by_role("alert").get_by_role("button", name="No")
        if news.count():  # JupyterLab asks whether to fetch its news: not in the picture
            news.click()
        lab.wait_for_timeout(1000)
        lab.screenshot(path=str(out / "web-interactive-jupyterlab.png"))
        page.goto("/jobs")
        page.screenshot(path=str(out / "web-interactive-environments.png"))
        context.close()
    return {"training": job, "notebook": notebook}


def _signed_in(
    browser: Any, pool: ServerProcess, token: str, *, timeout: float | None = None
) -> tuple[Any, Any]:
    """A light-themed 1280x720 browser context on ``pool`` and a page signed in with
    ``token`` (on the jobs list)."""
    context = browser.new_context(
        base_url=pool.url, viewport={"width": 1280, "height": 720}, color_scheme="light"
    )
    if timeout is not None:
        context.set_default_timeout(timeout)
    page = context.new_page()
    page.goto("/login")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/jobs**")
    return context, page


def _api(pool: ServerProcess, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=f"{pool.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


def interactive_pool(home: Path) -> ServerProcess:
    """One node of 2 GPUs, with this environment's programs (JupyterLab) first on its PATH."""
    path = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    return ServerProcess(
        home,
        "--virtual-nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--cpus-per-node",
        "4",
        "--memory-per-node",
        "8G",
        settings={"PATH": path},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    parser.add_argument("--settle", type=float, default=25.0, help="Seconds of running jobs.")
    parser.add_argument(
        "--only", choices=["interactive", "datasets", "checkpoints"], help="Only those pages."
    )
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"cannot take screenshots: {reason}")
    args.out.mkdir(parents=True, exist_ok=True)
    jobs: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.only is None:
            jobs |= _shoot_pages(Path(tmp) / "home", args.out, args.settle)
        if args.only in (None, "datasets"):
            shoot_datasets(Path(tmp) / "datasets", args.out)
        if args.only in (None, "checkpoints"):
            shoot_checkpoints(Path(tmp) / "checkpoints", args.out)
        if args.only in ("datasets", "checkpoints"):
            return
        pool = interactive_pool(Path(tmp) / "interactive")
        pool.start()
        try:
            token = (pool.home / "owner.token").read_text().strip()
            jobs |= shoot_interactive(pool, token, args.out)
        finally:
            pool.stop()
    for png in sorted(args.out.glob("web-*.png")):
        print(f"{png}: {png.stat().st_size // 1024} KiB")
    print(json.dumps(jobs))


def shoot_datasets(base: Path, out: Path) -> None:
    """The Datasets page (docs/datasets.md): a pool with one dataset made from a path below
    its dataset root (two versions), one uploaded and shared, another user's public one."""
    from gpuyard.client import Client, DatasetsClient

    shared = base / "shared" / "imagenet-mini"
    (shared / "train").mkdir(parents=True)
    for i in range(12):
        (shared / "train" / f"shard-{i:03}.tar").write_bytes(os.urandom(40_000))
    tree = base / "tokens"
    tree.mkdir()
    (tree / "vocab.json").write_text(json.dumps({str(i): i for i in range(3000)}))
    pool = ServerProcess(
        base / "home",
        "--virtual-nodes",
        "1",
        settings={"GPUYARD_DATASET_ROOTS": str(base / "shared")},
    )
    pool.start()
    try:
        token = (pool.home / "owner.token").read_text().strip()
        api = _api(pool, token)
        api.post("/users", json={"name": "mei"}).raise_for_status()
        mei_token = api.post("/tokens", json={"user": "mei", "label": "shots"}).json()["token"]
        with Client(pool.url, token=token) as client, Client(pool.url, token=mei_token) as mei:
            mine = DatasetsClient(client)
            mine.create("imagenet-mini", str(shared), description="12 shards of a small ImageNet")
            mine.wait("imagenet-mini")
            (shared / "train" / "shard-012.tar").write_bytes(os.urandom(40_000))
            mine.create("imagenet-mini", str(shared))
            mine.upload("tokenizer", tree, description="the tokenizer's vocabulary")
            mine.share("tokenizer", "public")
            mine.favourite("imagenet-mini")
            DatasetsClient(mei).upload("speech-eval", tree, visibility="public")
            for name in ("imagenet-mini", "tokenizer"):
                mine.wait(name)
            DatasetsClient(mei).wait("speech-eval")
        with chromium() as browser:
            context, page = _signed_in(browser, pool, token)
            page.goto("/datasets")
            page.screenshot(path=str(out / "web-datasets.png"))
            context.close()
    finally:
        pool.stop()


def shoot_checkpoints(base: Path, out: Path) -> None:
    """A job's page at its Checkpoints section (``web-checkpoints.png``): examples/
    flash_train.py on 2 virtual nodes, saving every step, with the newest step it listed on
    storage pinned; taken while it runs (its newest steps in node memory and on storage)."""
    train = Path(__file__).resolve().parent.parent / "examples" / "flash_train.py"
    pool = ServerProcess(
        base / "home", "--virtual-nodes", "2", "--gpus-per-node", "1", "--cpus-per-node", "1"
    )
    pool.start()
    try:
        token = (pool.home / "owner.token").read_text().strip()
        job = pool.cli_json(
            "submit", "--name", "flash-ddp", "--mode", "pytorch", "--nodes", "2", "--gpus", "1",
            "--", sys.executable, str(train), "--steps", "600", "--step-time", "1.0",
        )  # fmt: skip
        job_id = int(job["id"])
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            listing = pool.cli_json("checkpoints", str(job_id))["checkpoints"]
            steps = [c["step"] for c in listing if "storage" in c["held"]]
            if steps:
                pool.cli("checkpoints", str(job_id), "--pin", str(max(steps)))
                break
            time.sleep(0.5)
        time.sleep(5)  # a few steps more, past the pinned one
        with chromium() as browser:
            context, page = _signed_in(browser, pool, token)
            page.goto(f"/jobs/{job_id}#checkpoints")
            page.locator("#checkpoints").scroll_into_view_if_needed()
            page.screenshot(path=str(out / "web-checkpoints.png"))
            context.close()
        pool.cli("stop", str(job_id))
    finally:
        pool.stop()


def _shoot_pages(home: Path, out: Path, settle: float) -> dict[str, int]:
    pool = ServerProcess(
        home,
        "--virtual-nodes",
        "2",
        "--gpus-per-node",
        "2",
        "--cpus-per-node",
        "4",
        "--memory-per-node",
        "8G",
        settings={"GPUYARD_USAGE_INTERVAL": "2"},
    )
    pool.start()
    try:
        token = (pool.home / "owner.token").read_text().strip()
        jobs = prepare(pool, token)
        time.sleep(settle)  # the running job's log and usage samples pile up
        shoot(pool, token, jobs, out)
    finally:
        pool.stop()
    return jobs


if __name__ == "__main__":
    main()
