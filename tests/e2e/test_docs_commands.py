"""Every shell command of README.md and docs/*.md runs as written against a fresh pool.

What is run: each command of a fenced block tagged ``sh`` or ``bash`` (lines joined at a
trailing backslash; blank and comment lines left out), and each ``$ `` line of one tagged
``console`` (a transcript: the other lines are its output), in document order, each document against
a pool of its own, from a copy of the repository's ``examples/`` (so what the commands write
stays out of the tree), with ``.venv/bin`` first on ``PATH`` as the README says. Blocks that
show output or a diagram are tagged ``text`` and are not run.

What is not run, and how a reader sees it:

- a command with a placeholder, written ``<LIKE-THIS>`` (docs/README.md says so): it stands
  for the reader's own value;
- ``make run`` and ``make test``: the CI runs them (this test runs inside ``make test``).

A ``gpuyard up`` that stays in the foreground is started as written, in the background, and
the commands after it use that pool (a second one stops the first, as a reader's Ctrl-C would:
its jobs are adopted); a document with no ``gpuyard up`` gets one started as ``make run`` does.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("docs")]

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
_PLACEHOLDER = re.compile(r"<[A-Za-z][^<>\s]*>")
RUN_ELSEWHERE = ("make run", "make test")
TIMEOUT = 300


@dataclass(frozen=True)
class Command:
    document: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.document}:{self.line}: {self.text}"


def commands(path: Path) -> list[Command]:
    """The runnable commands of ``path``'s ``sh``/``bash`` blocks, in order."""
    text = path.read_text()
    found: list[Command] = []
    for block in _FENCE.finditer(text):
        kind, body = block.group(1), block.group(2)
        if kind not in ("sh", "bash", "console"):
            continue
        first = text.count("\n", 0, block.start(2)) + 1
        if kind == "console":  # a transcript: the commands are the lines after the prompt
            body = _prompted(body)
        found.extend(_logical_lines(path.name, first, body))
    return [c for c in found if not _skipped(c.text)]


def _prompted(body: str) -> str:
    """A console transcript with its output lines blanked (kept, for the line numbers)."""
    kept: list[str] = []
    going_on = False
    for line in body.splitlines():
        command = line.startswith("$ ") or going_on
        kept.append(line.removeprefix("$ ") if command else "")
        going_on = command and line.rstrip().endswith("\\")
    return "\n".join(kept)


def _logical_lines(document: str, first: int, body: str) -> Iterator[Command]:
    pending: list[str] = []
    start = first
    for number, raw in enumerate(body.splitlines(), start=first):
        if not pending:
            start = number
        if raw.rstrip().endswith("\\"):
            pending.append(raw.rstrip()[:-1])
            continue
        line = " ".join([*pending, raw]).strip()
        pending = []
        if line and not line.startswith("#"):
            yield Command(document, start, line)


def _skipped(text: str) -> bool:
    return bool(_PLACEHOLDER.search(text)) or text.startswith(RUN_ELSEWHERE)


def _foreground_up(text: str) -> bool:
    words = text.split("#", 1)[0].split()
    names = [w for w in words if "=" not in w]
    return names[:2] == ["gpuyard", "up"] and not {"--detach", "-d", "--help"} & set(words)


class Shell:
    """The reader's shell: the repository as working directory, the venv first on PATH, a
    home and a pool home of its own."""

    def __init__(self, base: Path) -> None:
        bin_dir = Path(sys.executable).parent
        self.cwd = base / "repo"
        shutil.copytree(ROOT / "examples", self.cwd / "examples")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
        self.env.update(
            HOME=str(base / "user"),
            PATH=f"{bin_dir}:{os.environ.get('PATH', '')}",
            GPUYARD_HOME=str(base / "pool"),
            GPUYARD_CONFIG_DIR=str(base / "config"),
            GPUYARD_PORT="0",
            # As in every e2e test: jobs run as the pool's user, /tmp shared (docs/security.md).
            GPUYARD_RUN_AS="pool",
            GPUYARD_PRIVATE_TMP="false",
        )
        (base / "user").mkdir(parents=True)
        self.pool_home = base / "pool"
        self.foreground: subprocess.Popen[bytes] | None = None

    def run(self, command: Command) -> None:
        if _foreground_up(command.text):
            self._start_foreground(command)
            return
        done = subprocess.run(
            ["bash", "-c", command.text],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        assert done.returncode == 0, (
            f"{command}\nexit {done.returncode}\n{done.stdout}{done.stderr}"
        )

    def ensure_pool(self) -> None:
        if self.foreground is None and not (self.pool_home / "server.json").exists():
            self.run(Command("(as make run)", 0, "gpuyard up --detach --virtual-nodes 2"))

    def _start_foreground(self, command: Command) -> None:
        self._stop_foreground()
        self.pool_home.mkdir(parents=True, exist_ok=True)
        log = open(self.pool_home / "foreground.log", "ab")  # noqa: SIM115 - the child's
        self.foreground = subprocess.Popen(
            ["bash", "-c", command.text],
            cwd=self.cwd,
            env=self.env,
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 60
        while not (self.pool_home / "server.json").exists():
            assert self.foreground.poll() is None, f"{command}\nexited: {self._log()}"
            assert time.monotonic() < deadline, f"{command}\nnot ready in 60 s: {self._log()}"
            time.sleep(0.2)

    def _log(self) -> str:
        return (self.pool_home / "foreground.log").read_text()[-3000:]

    def _stop_foreground(self) -> None:
        if self.foreground is not None and self.foreground.poll() is None:
            os.killpg(self.foreground.pid, signal.SIGTERM)
            self.foreground.wait(30)
        self.foreground = None

    def close(self) -> None:
        subprocess.run(
            ["bash", "-c", "gpuyard down"], env=self.env, capture_output=True, check=False
        )
        self._stop_foreground()
        from gpuyard.testing.process import kill_workers

        kill_workers(self.pool_home)


def test_placeholders_and_joined_lines_are_read_as_a_reader_reads_them(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n```sh\ngpuyard ls   # a comment\n\n# only a comment\n"
        "gpuyard submit --gpus 1 \\\n    -- true\ngpuyard show <JOB>\nmake run\n```\n"
        "```text\ngpuyard never\n```\n"
        "```console\n$ gpuyard nodes \\\n    --json\nNAME  STATE\n```\n"
    )
    assert [(c.line, c.text) for c in commands(page)] == [
        (3, "gpuyard ls   # a comment"),
        (6, "gpuyard submit --gpus 1      -- true"),
        (15, "gpuyard nodes      --json"),
    ]
    assert _foreground_up("gpuyard up --virtual-nodes 2   # in the foreground")
    assert _foreground_up("GPUYARD_REGISTRY=local gpuyard up")
    assert not _foreground_up("gpuyard up --detach")


@pytest.mark.parametrize(
    "document", [d for d in DOCUMENTS if commands(d)], ids=lambda d: d.relative_to(ROOT).name
)
def test_every_command_of_the_document_runs_as_written(document: Path, tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    try:
        for command in commands(document):
            if not _foreground_up(command.text):
                shell.ensure_pool()
            shell.run(command)
    finally:
        shell.close()
