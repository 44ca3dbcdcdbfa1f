"""`gpuyard simulate` checks every input before it replays anything: a bad trace, cluster file,
mapping, mapping file, published file, overhead or output directory stops it with a message
that names what to fix, a non-zero exit, no replay and no output."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuyard.cli.main import app, main
from gpuyard.errors import GpuyardError, InvalidSpec

TRACE = """job_id,user,vc,gpu_num,cpu_num,state,submit_time,duration
1,ua,vcA,8,1,COMPLETED,0,100
2,ub,vcA,4,1,COMPLETED,10,50
3,ua,vcA,16,1,FAILED,20,30
4,uc,vcB,1,1,COMPLETED,5,10
"""
CLUSTER = "vc,num_nodes,gpus_per_node\nvcA,2,8\nvcB,1,8\n"
PUBLISHED = "job_id,vc,fifo_queue,fifo_jct\n1,vcA,0,100\n2,vcA,0,50\n3,vcA,100,130\n4,vcB,0,10\n"


@pytest.fixture
def no_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any replay fails the test: the inputs must be refused before one starts."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a replay started although an input is bad")

    monkeypatch.setattr("gpuyard.simulator.study.replay", refuse)


def files(
    tmp_path: Path, trace: str = TRACE, cluster: str = CLUSTER, **others: str
) -> dict[str, Path]:
    """trace.csv, cluster.csv and others (file name -> text) in a folder of their own; by
    "trace", "cluster" and the others' names."""
    folder = tmp_path / "in"
    folder.mkdir(exist_ok=True)
    out: dict[str, Path] = {}
    for key, name, text in [
        ("trace", "trace.csv", trace),
        ("cluster", "cluster.csv", cluster),
        *((n, n, t) for n, t in others.items()),
    ]:
        out[key] = folder / name
        out[key].write_text(text)
    return out


def simulate(tmp_path: Path, paths: dict[str, Path], *extra: str) -> Any:
    args = ["simulate", "--trace", str(paths["trace"]), "--cluster", str(paths["cluster"])]
    args += ["--out", str(tmp_path / "out"), "--workers", "1", "--no-plot", *extra]
    return CliRunner().invoke(app, args)


def refused(result: Any, tmp_path: Path, *needles: str) -> str:
    assert result.exit_code != 0
    assert isinstance(result.exception, GpuyardError), result.output
    message = str(result.exception)
    for needle in needles:
        assert needle in message, message
    assert not (tmp_path / "out").exists()  # nothing written: nothing was replayed
    return message


@pytest.mark.usefixtures("no_replay")
@pytest.mark.parametrize(
    ("published", "needles"),
    [
        ("job_id,vc,fifo_wait\n1,vcA,0\n", ["published results", "P_queue and P_jct"]),
        ("job_id,fifo_queue,fifo_jct\n99,0,1\n98,0,2\n", ["none of its 2 rows", "--published"]),
        (PUBLISHED.replace("3,vcA,100,130", "3,vcA,soon,130"), ["line 4", "'fifo_queue'", "soon"]),
        (PUBLISHED.replace("0,50", "0,-50"), ["line 3", "'fifo_jct'"]),
    ],
)
def test_a_published_file_that_does_not_fit_is_refused_before_the_replay(
    tmp_path: Path, published: str, needles: list[str]
) -> None:
    paths = files(tmp_path, **{"results.csv": published})
    result = simulate(tmp_path, paths, "--published", str(paths["results.csv"]))
    refused(result, tmp_path, *needles)


@pytest.mark.usefixtures("no_replay")
def test_a_published_file_that_is_not_there_is_named(tmp_path: Path) -> None:
    result = simulate(tmp_path, files(tmp_path), "--published", str(tmp_path / "nope.csv"))
    refused(result, tmp_path, "nope.csv: no such file")


def test_a_published_file_found_beside_the_trace_that_does_not_fit_is_left_out_saying_why(
    tmp_path: Path,
) -> None:
    # Not asked for, so not an error: the replay goes on without it, and says so.
    paths = files(tmp_path, **{"x_reference_results.csv": "job_id,other\n1,2\n"})
    result = simulate(tmp_path, paths)
    assert result.exit_code == 0, result.output
    assert "not showing the published results found beside the trace" in result.stderr
    assert "(published)" not in (tmp_path / "out" / "summary.csv").read_text()


@pytest.mark.usefixtures("no_replay")
@pytest.mark.parametrize(
    ("name", "text", "needles"),
    [
        ("map.yaml", "columns: {job_id: id\n  gpus: [", ["map.yaml, line", "not valid YAML"]),
        ("map.json", '{"columns": {"job_id": "id",}}', ["map.json, line 1", "not valid JSON"]),
        ("map.yaml", "- job_id\n- gpus\n", ["expected a mapping", "got list"]),
        ("map.yaml", "", ["expected a mapping", "an empty file"]),
        ("map.yaml", "columns: {jobid: id}\n", ["unknown columns ['jobid']"]),
        ("map.yaml", "columns: {gpus: [a, b]}\n", ["columns.gpus must be a column name"]),
        ("map.yaml", "columns: {}\npriority: {a: b}\n", ["unknown keys ['priority']"]),
        ("map.yaml", "columns: {}\npriorities: {urgent: top}\n", ["priorities.urgent", "'top'"]),
        ("map.yaml", "columns: [job_id]\n", ["must be mappings"]),
    ],
)
def test_a_malformed_mapping_file_is_a_clear_error(
    tmp_path: Path, name: str, text: str, needles: list[str]
) -> None:
    paths = files(tmp_path, **{name: text})
    result = simulate(tmp_path, paths, "--map-file", str(paths[name]))
    refused(result, tmp_path, "mapping file", *needles)


@pytest.mark.usefixtures("no_replay")
def test_a_missing_mapping_file_is_named(tmp_path: Path) -> None:
    result = simulate(tmp_path, files(tmp_path), "--map-file", str(tmp_path / "map.yaml"))
    refused(result, tmp_path, "map.yaml: no such file")


@pytest.mark.usefixtures("no_replay")
@pytest.mark.parametrize(
    ("option", "needles"),
    [
        (["--map", "submit=submit_time"], ["CANONICAL=COLUMN"]),
        (["--map", "submit_time=queued"], ["no column for submit_time=queued", "--map"]),
        (["--map", "gpus="], ["names no column for gpus"]),
        (["--preset", "slurm"], ["unknown preset 'slurm'"]),
        (["--cluster-preset", "k8s"], ["unknown cluster preset 'k8s'"]),
        (["--overhead", "8:40,4:30"], ["--overhead '8:40,4:30'", "must rise"]),
        (["--overhead", "fast"], ["--overhead 'fast'", "1:30,8:40,64:90"]),
        (["--workers", "0"], ["--workers 0"]),
    ],
)
def test_bad_options_are_refused_before_the_replay(
    tmp_path: Path, option: list[str], needles: list[str]
) -> None:
    refused(simulate(tmp_path, files(tmp_path), *option), tmp_path, *needles)


@pytest.mark.usefixtures("no_replay")
@pytest.mark.parametrize(
    ("trace", "cluster", "needles"),
    [
        (TRACE.replace("0,50", "0,fifty"), CLUSTER, ["trace.csv, line 3, column 'duration'"]),
        (TRACE.replace("vcB,1,1", "vcB,-,1"), CLUSTER, ["line 5, column 'gpu_num' (gpus)"]),
        (TRACE, "vc,num_nodes,gpus_per_node\nvcA,two,8\n", ["line 2, column 'num_nodes'"]),
        (TRACE, "vc,num_nodes,gpus_per_node\nvcA,2,-8\n", ["line 2, column 'gpus_per_node'"]),
        (TRACE, "vc,num_nodes,gpus_per_node\nvcC,2,8\n", ["no job to replay", "skipped 4"]),
        ("", CLUSTER, ["trace.csv: empty file"]),
        ("job_id,user,gpus,submit_time,duration\n1,u,1,0,5\n", CLUSTER, ["no cluster column"]),
    ],
)
def test_a_bad_trace_or_cluster_file_names_the_line_and_column(
    tmp_path: Path, trace: str, cluster: str, needles: list[str]
) -> None:
    paths = files(tmp_path, trace=trace, cluster=cluster)
    refused(simulate(tmp_path, paths), tmp_path, *needles)


@pytest.mark.usefixtures("no_replay")
def test_an_output_path_that_is_a_file_is_refused_before_the_replay(tmp_path: Path) -> None:
    paths = files(tmp_path)
    (tmp_path / "out").write_text("not a directory")
    result = simulate(tmp_path, paths)
    assert isinstance(result.exception, InvalidSpec)
    assert "exists and is not a directory" in str(result.exception)


@pytest.mark.usefixtures("no_replay")
def test_a_missing_plotting_library_is_found_before_the_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name)
    )
    paths = files(tmp_path)
    args = ["simulate", "--trace", str(paths["trace"]), "--cluster", str(paths["cluster"])]
    args += ["--out", str(tmp_path / "out")]
    refused(CliRunner().invoke(app, args), tmp_path, "matplotlib", "--no-plot")


@pytest.mark.usefixtures("no_replay")
def test_the_command_line_prints_the_error_and_exits_non_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = files(tmp_path, **{"results.csv": "job_id,x\n"})
    argv = ["gpuyard", "simulate", "--trace", str(paths["trace"]), "--cluster"]
    argv += [str(paths["cluster"]), "--published", str(paths["results.csv"]), "--no-plot"]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setenv("COLUMNS", "300")  # one line, whatever the terminal
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "expected columns job_id" in err


@pytest.mark.parametrize("policy", ["fifo", "srtf", "tiresias"])
def test_a_gang_on_mixed_node_sizes_is_refused_before_the_replay_for_consolidate_policies(
    tmp_path: Path, policy: str
) -> None:
    paths = files(
        tmp_path,
        trace="job_id,submit_time,gpus,duration\n1,0,16,100\n2,5,2,10\n",
        cluster="gpus_per_node,num_nodes,node_class\n8,2,a\n4,1,b\n",
    )
    result = simulate(tmp_path, paths, "--policy", f"gpuyard,{policy}")
    # Checked in replay() before any cluster is replayed: nothing written.
    refused(result, tmp_path, f"--policy {policy}", "nodes of 4, 8 GPUs", "line 2")
