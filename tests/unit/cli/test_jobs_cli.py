"""`gpuyard submit --dry-run`, `suspend` and the new submit flags, against a fake API.

The fake serves the routes of the wire contract (predict, prediction, suspend) over real HTTP
and records what it was sent, so these tests check the CLI and the client without a pool.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import pytest
from fastapi import Body, FastAPI
from typer.testing import CliRunner

from gpuyard.cli.jobs import describe_prediction
from gpuyard.cli.main import app as cli_app
from gpuyard.client import Client
from gpuyard.errors import InvalidSpec, NotFound
from gpuyard.models import (
    BulkResult,
    JobFailure,
    JobIds,
    JobSpec,
    JobState,
    JobStatus,
    JobView,
    Prediction,
    SuspendRequest,
)
from gpuyard.server.errors import install_error_handlers
from gpuyard.testing.server import serve

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


class FakeApi:
    def __init__(self) -> None:
        self.specs: list[dict[str, Any]] = []
        self.suspended: list[int] = []
        self.held: list[int] = []
        self.released: list[int] = []
        self.prediction = Prediction(now=True, reason="it fits now")
        self.app = FastAPI()
        install_error_handlers(self.app)
        self.app.post("/api/v1/jobs/predict")(self.predict)
        self.app.get("/api/v1/jobs/{job_id}/prediction")(self.job_prediction)
        self.app.post("/api/v1/jobs/{job_id}/suspend")(self.suspend)
        self.app.post("/api/v1/jobs", status_code=201)(self.create)
        self.app.post("/api/v1/jobs/release")(self.release)

    def create(self, spec: JobSpec) -> JobView:
        self.specs.append(spec.model_dump(mode="json", exclude_unset=True))
        return JobView(
            id=len(self.specs),
            name="x",
            owner="alice",
            status=JobStatus.QUEUED,
            state=JobState.QUEUED,
            spec=spec,
            attempt=0,
            created_at=NOW,
        )

    def predict(self, spec: JobSpec) -> Prediction:
        self.specs.append(spec.model_dump(mode="json", exclude_unset=True))
        return self.prediction

    def job_prediction(self, job_id: int) -> Prediction:
        if job_id != 7:
            raise NotFound(f"job {job_id} does not exist")
        return self.prediction

    def suspend(
        self, job_id: int, request: Annotated[SuspendRequest | None, Body()] = None
    ) -> JobView:
        self.suspended.append(job_id)
        if request is not None and request.hold:
            self.held.append(job_id)
        return JobView(
            id=job_id,
            name="train",
            owner="alice",
            status=JobStatus.RUNNING,
            state=JobState.SUSPENDING,
            spec=JobSpec(command="python train.py"),
            attempt=0,
            created_at=NOW,
            on_hold=job_id in self.held,
        )

    def release(self, ids: JobIds) -> BulkResult:
        self.released += ids.ids
        known = [i for i in ids.ids if i != 404]
        return BulkResult(
            done=known,
            states=dict.fromkeys(known, JobState.SUSPENDED),
            failed=[JobFailure(id=404, code="not_found", detail="job 404 does not exist")]
            if 404 in ids.ids
            else [],
        )


@pytest.fixture
def fake_api() -> Iterator[tuple[FakeApi, str]]:
    api = FakeApi()
    with serve(api.app) as url:
        yield api, url


def _cli(url: str, *args: str) -> Any:
    env = {"GPUYARD_URL": url, "GPUYARD_USER": "alice", "COLUMNS": "200"}
    return CliRunner().invoke(cli_app, list(args), env=env)


def test_describe_prediction() -> None:
    assert describe_prediction(Prediction(now=True, reason="fits"), NOW) == "starts now"
    later = Prediction(
        now=False,
        start_at=NOW + timedelta(minutes=12),
        ahead=[3, 7],
        reason="behind 3 and 7",
    )
    local = (NOW + timedelta(minutes=12)).astimezone().strftime("%H:%M")
    assert describe_prediction(later, NOW) == (
        f"starts at about {local} (in 12m00s), behind jobs 3, 7"
    )
    tomorrow = later.model_copy(update={"start_at": NOW + timedelta(days=2), "ahead": []})
    shown = (NOW + timedelta(days=2)).astimezone().strftime("%Y-%m-%d %H:%M")
    assert describe_prediction(tomorrow, NOW) == f"starts at about {shown} (in 2d00h)"
    ranged = later.model_copy(
        update={
            "earliest": NOW + timedelta(minutes=5),
            "latest": NOW + timedelta(minutes=30),
            "ahead": [],
        }
    )
    assert describe_prediction(ranged, NOW) == (
        f"starts at about {local} (in 12m00s; between 5m00s and 30m00s)"
    )
    unknown = Prediction(now=False, ahead=[4], reason="job 4 has no max runtime")
    assert describe_prediction(unknown, NOW) == (
        "cannot say when it starts, behind jobs 4: job 4 has no max runtime"
    )


def test_dry_run_sends_the_spec_and_prints_the_prediction(
    fake_api: tuple[FakeApi, str], tmp_path: Path
) -> None:
    api, url = fake_api
    result = _cli(url, "submit", "--dry-run", "--gpus", "2", "--", "python", "train.py")
    assert (result.exit_code, result.stdout) == (0, "starts now\n")
    api.prediction = Prediction(
        now=False,
        start_at=datetime.now(UTC) + timedelta(minutes=12, seconds=20),
        ahead=[3, 7],
        reason="behind jobs 3, 7",
    )
    result = _cli(
        url,
        "submit",
        "--dry-run",
        "--nodes",
        "2..4",
        "--driver",
        "535",
        "--priority",
        "high",
        "--",
        "python",
        "train.py",
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("starts at about ")
    assert result.stdout.rstrip().endswith("behind jobs 3, 7")
    assert "(in 12m" in result.stdout
    result = _cli(
        url,
        "submit",
        "--dry-run",
        "--json",
        "--node",
        "n0",
        "--node",
        "n1",
        "--alternative",
        "gpus=4,memory=32G",
        "--alternative",
        "gpus=2",
        "--gpus",
        "8",
        "--",
        "python",
        "train.py",
    )
    assert result.exit_code == 0, result.output
    assert Prediction.model_validate_json(result.stdout) == api.prediction
    first, second, third = api.specs
    assert first["resources"] == {"gpus": 2}
    assert (second["nodes"], second["min_nodes"], second["driver_version"]) == (4, 2, "535")
    assert second["priority"] == "high"
    assert third["node_names"] == ["n0", "n1"]
    assert third["alternatives"] == [{"gpus": 4, "memory": 32 << 30}, {"gpus": 2}]


def test_dry_run_errors_say_what_to_fix(fake_api: tuple[FakeApi, str]) -> None:
    api, url = fake_api
    result = _cli(url, "submit", "--dry-run", "--pool", "a", "--node", "n0", "--", "x")
    assert isinstance(result.exception, InvalidSpec)
    assert "a job names a dedicated pool, node names or a driver version, not several" in str(
        result.exception
    )
    result = _cli(url, "submit", "--dry-run", "--nodes", "4..2", "--", "x")
    assert isinstance(result.exception, InvalidSpec)
    assert "4 is more than 2" in str(result.exception)
    assert api.specs == []


def test_suspend_and_job_prediction(fake_api: tuple[FakeApi, str]) -> None:
    api, url = fake_api
    result = _cli(url, "suspend", "5", "6")
    assert (result.exit_code, result.stdout) == (0, "job 5: suspending\njob 6: suspending\n")
    assert api.suspended == [5, 6]
    with Client(url, token="test-token") as client:
        assert client.prediction(7) == api.prediction
        with pytest.raises(NotFound, match="job 8 does not exist"):
            client.prediction(8)
        assert client.predict(JobSpec(command="x")).now
        assert client.suspend(9).state is JobState.SUSPENDING
    assert api.held == []


def test_suspend_with_a_hold_and_resume(fake_api: tuple[FakeApi, str]) -> None:
    api, url = fake_api
    result = _cli(url, "suspend", "--hold", "5")
    assert (result.exit_code, result.stdout) == (0, "job 5: suspending, held\n")
    assert api.held == [5]
    result = _cli(url, "resume", "5", "404")
    assert result.exit_code == 1
    assert result.stdout == "job 5: released, suspended\n"
    assert "job 404 does not exist" in result.stderr
    assert api.released == [5, 404]
    with Client(url, token="test-token") as client:
        assert client.suspend(9, hold=True).on_hold


@pytest.mark.parametrize(
    ("state", "shown"),
    [(JobState.SUCCEEDED, "succeeded"), (JobState.STOPPING, "running (stopping)")],
)
def test_show_names_the_finer_state_only_when_it_says_more(state: JobState, shown: str) -> None:
    from rich.text import Text

    from gpuyard.cli.jobs import _status_text

    job = JobView.model_construct(status=state.status, state=state)
    assert Text.from_markup(_status_text(job)).plain == shown


HINT = (
    "an error of the job's own is not restarted (submit with --retry-job-errors, or set "
    "fault_tolerance.retry_job_errors, to restart it anyway)"
)


@pytest.mark.parametrize("width", [80, 120, 240])
def test_ft_log_prints_a_hint_whole_at_any_width(width: int) -> None:
    from rich.console import Console

    from gpuyard.cli.jobs import fault_table
    from gpuyard.models.faults import FaultEntry

    entry = FaultEntry(
        id=1,
        attempt=1,
        time=NOW,
        kind="failure",
        cause="Python exception",
        suspect="job",
        evidence="ZeroDivisionError: division by zero",
        action=HINT,
    )
    console = Console(width=width, record=True)
    console.print(fault_table([entry]))
    text = console.export_text()
    assert "…" not in text
    # The ACTION column, read down its lines, is the whole hint (folded or wrapped).
    rows = [line.split("│") for line in text.splitlines() if line.count("│") >= 7]
    action = "".join(row[7] for row in rows).replace(" ", "")
    assert action == HINT.replace(" ", "")


def test_retry_job_errors_has_a_flag(fake_api: tuple[FakeApi, str]) -> None:
    api, url = fake_api
    args = ("submit", "--dry-run", "--max-restarts", "2", "--retry-job-errors", "--", "x")
    result = _cli(url, *args)
    assert result.exit_code == 0, result.output
    ft = api.specs[-1]["fault_tolerance"]
    assert (ft["max_restarts"], ft["retry_job_errors"]) == (2, True)


def test_submit_exports_the_shells_environment_as_slurm_does(
    fake_api: tuple[FakeApi, str], tmp_path: Path
) -> None:
    api, url = fake_api
    shell = {"GPUYARD_URL": url, "GPUYARD_USER": "alice", "MY_FLAG": "on", "HOME": "/root"}
    run = CliRunner().invoke
    dry = ["submit", "--dry-run"]
    assert run(cli_app, [*dry, "--", "env"], env=shell).exit_code == 0
    assert run(cli_app, [*dry, "--export=NONE", "--", "env"], env=shell).exit_code == 0
    assert run(cli_app, [*dry, "--export=A=1", "-e", "A=2", "--", "env"], env=shell).exit_code == 0
    assert run(cli_app, [*dry, "--image", "official/x:1", "--", "env"], env=shell).exit_code == 0
    job_file = tmp_path / "job.yaml"
    job_file.write_text("command: env\nexport: [MY_FLAG, B=2]\n")
    assert run(cli_app, [*dry, "-f", str(job_file)], env=shell).exit_code == 0
    every, none, given, image, from_file = api.specs
    assert every["env"]["MY_FLAG"] == "on"
    assert "HOME" not in every["env"] and "GPUYARD_URL" not in every["env"]
    assert "env" not in none and "env" not in image
    assert given["env"] == {"A": "2"}  # --env wins over --export
    assert from_file["env"] == {"MY_FLAG": "on", "B": "2"}
    refused = run(cli_app, [*dry, "--export=GPUYARD_TOKEN", "--", "env"], env=shell)
    assert isinstance(refused.exception, InvalidSpec)
    assert "cannot be given to a job" in str(refused.exception)


def test_the_client_exports_its_environment_when_asked(fake_api: tuple[FakeApi, str]) -> None:
    api, url = fake_api
    with Client(url, token="test-token") as client:
        client.submit({"command": "env"})
        client.submit({"command": "env", "env": {"LANG": "mine"}}, export="ALL,ONE=1")
        client.submit({"command": "env"}, export="NONE,A=1")
        with pytest.raises(InvalidSpec, match="cannot be given to a job"):
            client.submit({"command": "env"}, export="GPUYARD_TOKEN")
    plain, every, listed = api.specs
    assert "env" not in plain  # by default the spec says everything, as before
    assert every["env"]["PATH"] == os.environ["PATH"]  # this process's own environment
    assert (every["env"]["LANG"], every["env"]["ONE"]) == ("mine", "1")  # the spec's env wins
    assert listed["env"] == {"A": "1"}
