"""The renderers against outputs recorded from a real Slurm 22.05.8 (tests/data/slurm).

Every case file holds the argv Slurm ran, what it printed, and the facts (records) it printed
them from; the renderer must give the same bytes. No Slurm is needed here.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from slurm_cases import ALL_CASES, build, jobs_of

from gpuyard.slurm import render
from gpuyard.slurm.records import JobRecord, NodeRecord, PartitionRecord, StepRecord

CASES = Path(__file__).resolve().parents[2] / "data" / "slurm" / "cases"
UTC = dt.UTC

# Cases whose output the renderers do not produce, and why.
NOT_RENDERED = {
    "scontrol_show_hostnames_unbalanced": "Slurm prints 'n]' for 'n[1-2'; we refuse it",
    "het_scancel_component": "Slurm cancels one component; gpuyard stops the job whole and "
    "refuses `scancel L+k`, saying so (docs/slurm.md)",
    "het_scontrol_update_starttime": "scontrol update is not supported; it is refused",
}


def _option(argv: list[str], *names: str) -> str | None:
    for index, arg in enumerate(argv):
        for name in names:
            if arg == name and index + 1 < len(argv):
                return argv[index + 1]
            if name.startswith("--") and arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def _flag(argv: list[str], *names: str) -> bool:
    return any(arg in names for arg in argv)


Result = tuple[str, str, int]
"""(stdout, stderr, exit status)"""


def _sacct(case: dict[str, Any], args: list[str], now: float) -> Result:
    job_ids = _option(args, "-j")
    if (
        job_ids is not None
        and not job_ids.replace(",", "").replace("_", "").replace("+", "").isdigit()
    ):
        return "", render.SACCT_BAD_JOB.format(text=job_ids) + "\n", 1
    mode: Any = "table"
    if _flag(args, "--parsable"):
        mode = "parsable"
    if _flag(args, "-P", "--parsable2"):
        mode = "parsable2"
    try:
        out = render.render_sacct(
            jobs_of(case),
            fields=_option(args, "-o", "--format"),
            mode=mode,
            header=not _flag(args, "-n", "--noheader"),
            allocations=_flag(args, "-X"),
            duplicates=_flag(args, "-D"),
            now=now,
            tz=UTC,
        )
    except render.SlurmFormatError as error:
        return "", f"{error}\n", 1
    return out, "", 0


def _squeue(case: dict[str, Any], args: list[str], now: float) -> Result:
    if case["name"] == "squeue_no_such_job":
        return "", render.SQUEUE_INVALID_JOB + "\n", 1
    fmt = _option(args, "-o", "--format")
    _, errors = render.squeue_format(fmt)
    out = render.render_squeue(
        jobs_of(case), fmt=fmt, header=not _flag(args, "-h", "--noheader"), now=now, tz=UTC
    )
    return out, "".join(e + "\n" for e in errors), 0


def _sinfo(case: dict[str, Any], args: list[str], now: float) -> Result:
    if _flag(args, "--version"):
        return render.SINFO_VERSION + "\n", "", 0
    out, errors = render.render_sinfo(
        [build(NodeRecord, n) for n in case["nodes"]],
        [build(PartitionRecord, p) for p in case["partitions"]],
        fmt=_option(args, "-o", "--format"),
        node_oriented=_flag(args, "-N"),
        summarize=_flag(args, "-s"),
        reasons=_flag(args, "-R"),
        header=not _flag(args, "-h", "--noheader"),
        tz=UTC,
    )
    return out, "".join(e + "\n" for e in errors), 0


def _scontrol(case: dict[str, Any], args: list[str], now: float) -> Result:  # noqa: PLR0911
    verb, *rest = args
    if verb == "requeue":
        if rest[0].isdigit() and case["exit_code"] == 0:
            return "", "", 0  # a job that exists (the case's): requeued, nothing printed
        return "", render.SCONTROL_REQUEUE_INVALID.format(text=rest[0]) + "\n", 1
    oneliner = args[0] == "-o" or "-o" in rest
    if args[0] == "-o":
        verb, *rest = rest
    rest = [r for r in rest if r != "-o"]
    what, target = rest
    if what == "job":
        jobs = jobs_of(case)
        # a heterogeneous job's first id shows all its components
        found = [j for j in jobs if j.het_job_id is not None and str(j.het_job_id) == target]
        found = found or [j for j in jobs if target in (j.display_id, str(j.job_id))][:1]
        if not found:
            return "", render.SCONTROL_SHOW_JOB_INVALID + "\n", 1
        texts = [render.render_scontrol_show_job(j, now=now, tz=UTC) for j in found]
        if oneliner:
            return "".join(" ".join(t.split()) + " \n" for t in texts), "", 0
        return "".join(texts), "", 0
    show = render.render_show_hostnames if what == "hostnames" else render.render_show_hostlist
    try:
        return show(target), "", 0
    except ValueError:
        return "", render.INVALID_HOSTLIST.format(text=target) + "\n", 0


def _sbatch(case: dict[str, Any], args: list[str], now: float) -> Result:
    if case["exit_code"] == 0:
        parsable = _flag(args, "--parsable")
        return render.render_sbatch_submitted(case["job_id"], parsable=parsable), "", 0
    if args[0].startswith("--bogus"):
        return "", render.SBATCH_UNRECOGNIZED.format(option=args[0]) + "\n", 255
    if args[0] == "-t":
        return "", render.SBATCH_BAD_TIME + "\n", 255
    return "", render.SBATCH_NO_FILE.format(path=args[0]) + "\n", 1


def _scancel(case: dict[str, Any], args: list[str], now: float) -> Result:
    if args[0].isdigit():
        return "", "", 0  # an unknown job id: Slurm 22.05 says nothing and exits 0
    return "", render.SCANCEL_BAD_ID.format(text=args[0]) + "\n", 1


COMMANDS = {
    "sacct": _sacct,
    "squeue": _squeue,
    "sinfo": _sinfo,
    "scontrol": _scontrol,
    "sbatch": _sbatch,
    "scancel": _scancel,
}


def run_case(case: dict[str, Any]) -> Result:
    """What our renderers print for the case's argv."""
    command, *args = case["argv"]
    return COMMANDS[command](case, args, case.get("now", 0.0))


RENDERED = [
    c
    for c in ALL_CASES
    if c["name"] not in NOT_RENDERED
    and c.get("kind") not in ("env", "salloc")  # test_salloc.py reads those
    and "--json" not in c.get("argv", ())  # test_openapi.py compares the documents
]


def test_cases_are_there() -> None:
    assert len(RENDERED) >= 60
    assert {c["kind"] for c in RENDERED} >= {"sacct", "squeue", "sinfo", "scontrol", "sbatch"}
    assert all(c["slurm_version"] == render.SINFO_VERSION for c in ALL_CASES)


@pytest.mark.parametrize("case", RENDERED, ids=[c["name"] for c in RENDERED])
def test_recorded_output(case: dict[str, Any]) -> None:
    stdout, stderr, code = run_case(case)
    assert stdout == case["stdout"]
    # scontrol's reversed range also logs the parser's own complaint first; we match the last
    # line, which is the one users see
    if case["name"] == "scontrol_show_hostnames_reversed":
        assert case["stderr"].endswith(stderr)
    else:
        assert stderr == case["stderr"]
    assert code == case["exit_code"]


SORTED = [
    c
    for c in ALL_CASES
    if c.get("kind") == "squeue"
    and c["name"] not in NOT_RENDERED
    and "--json" not in c["argv"]  # 22.05's --json keeps the controller's own order
    and c["name"] != "squeue_j_array"  # two array tasks share a priority: Slurm's tie order
    and len(c.get("jobs", [])) > 1
]


@pytest.mark.parametrize("case", SORTED, ids=[c["name"] for c in SORTED])
def test_squeue_default_order(case: dict[str, Any]) -> None:
    jobs = jobs_of(case)
    assert [j.display_id for j in render.squeue_sort(reversed(jobs))] == [
        j.display_id for j in jobs
    ]


def test_env_case_recorded() -> None:
    (env,) = [c for c in ALL_CASES if c.get("kind") == "env" and c["name"] == "env_2x2"]
    assert env["batch"]["SLURM_NTASKS"] == "4"
    assert env["batch"]["SLURM_PROCID"] == "0"
    assert [t["SLURM_PROCID"] for t in env["tasks"]] == ["0", "1", "2", "3"]
    assert {t["CUDA_VISIBLE_DEVICES"] for t in env["tasks"]} == {"0,1"}


# --- focused unit tests ------------------------------------------------------------------------


def _job(**kwargs: Any) -> JobRecord:
    base: dict[str, Any] = {"job_id": 5, "name": "x", "user": "root", "uid": 0, "state": "RUNNING"}
    base.update(kwargs)
    return JobRecord(**base)


def test_sacct_truncates_with_plus_and_pads() -> None:
    job = _job(name="a" * 30, start=100.0, nodes=("n0001",), state="COMPLETED", end=200.0)
    out = render.render_sacct([job], fields="JobID,JobName,Elapsed", now=300.0, tz=UTC)
    lines = out.splitlines()
    assert lines[0] == "JobID           JobName    Elapsed "
    assert lines[2] == "5            aaaaaaaaa+   00:01:40 "


def test_sacct_field_names_prefix_and_case() -> None:
    names = [f.name for f in render.sacct_fields("jobid,JOBIDRAW,jobn,stat,nodel%3")]
    assert names == ["JobID", "JobIDRaw", "JobName", "State", "NodeList"]
    assert render.sacct_fields("nodel%3")[0].width == 3
    with pytest.raises(render.SlurmFormatError, match='Invalid field requested: "nope"'):
        render.sacct_fields("JobID,nope")


def test_sacct_days_elapsed_and_cancelled_by() -> None:
    job = _job(state="CANCELLED", cancelled_by=1000, start=0.5, end=2 * 86400 + 3661.0)
    out = render.render_sacct([job], fields="State,Elapsed", mode="parsable2", now=0, tz=UTC)
    assert out == "State|Elapsed\nCANCELLED by 1000|2-01:01:00\n"


def test_sacct_without_duplicates_keeps_last_attempt() -> None:
    first = _job(state="REQUEUED", start=10.0, end=20.0)
    last = _job(state="COMPLETED", start=30.0, end=40.0)
    out = render.render_sacct([first, last], fields="JobID,State", mode="parsable2", now=50)
    assert out == "JobID|State\n5|COMPLETED\n"
    both = render.render_sacct(
        [first, last], fields="JobID,State", mode="parsable2", duplicates=True, now=50
    )
    assert both.splitlines()[1:] == ["5|REQUEUED", "5|COMPLETED"]


def test_renderers_are_total_on_odd_values() -> None:
    odd = _job(
        name="",
        user="",
        state="WEIRD_STATE",
        start=1e300,
        end=-5.0,
        submit=float("nan"),
        time_limit=1e20,
        priority=2**70,
        nodes=("",),
        steps=(StepRecord(name="", state="", nodes=()),),
    )
    every_field = ",".join(render.SACCT_FIELDS)
    for text in (
        render.render_sacct([odd], fields=every_field, now=0.0),
        render.render_sacct([odd], mode="parsable", now=1e300),
        render.render_squeue(
            [odd],
            fmt="%i %t %T %j %u %P %M %D %R %N %l %C %b %r %S %V %a %A %K %F %Q %Z %o %L %e",
            now=0.0,
        ),
        render.render_scontrol_show_job(odd, now=0.0),
    ):
        assert isinstance(text, str)
    node = NodeRecord(name="", partitions=(), state="", cpus=0)
    out, _ = render.render_sinfo([node], [PartitionRecord(name="", default=False)])
    assert out.startswith("PARTITION")


def test_squeue_widths_and_bad_spec() -> None:
    job = _job(
        name="abcdefghijkl",
        array_job_id=7,
        array_task="[2-9%2]",
        state="PENDING",
        reason="JobArrayTaskLimit",
    )
    out = render.render_squeue([job], fmt="%.5i|%10j|%.4t|%R", header=False, now=0)
    assert out == "7_[2-|abcdefghij|  PD|(JobArrayTaskLimit)\n"
    _, errors = render.squeue_format("%i %!")
    assert errors == ["squeue: error: Invalid job format specification: !"]
    assert render.render_squeue([job], fmt="%i %!", header=False, now=0) == "7_[2-9%2] %!\n"


def test_squeue_time_column() -> None:
    job = _job(start=1000.0)
    out = render.render_squeue([job], fmt="%M", header=False, now=1000 + 86400 + 3723)
    assert out == "1-01:02:03\n"
    assert render.render_squeue([job], fmt="%M", header=False, now=1000 + 3723) == "1:02:03\n"
    assert render.render_squeue([job], fmt="%M", header=False, now=1005) == "0:05\n"


def test_compact_states() -> None:
    assert [
        render.compact_state(s)
        for s in (
            "PENDING",
            "RUNNING",
            "CANCELLED",
            "CONFIGURING",
            "COMPLETING",
            "COMPLETED",
            "FAILED",
            "TIMEOUT",
            "NODE_FAIL",
            "SUSPENDED",
            "STOPPED",
            "PREEMPTED",
            "BOOT_FAIL",
            "REQUEUED",
            "OUT_OF_MEMORY",
        )
    ] == ["PD", "R", "CA", "CF", "CG", "CD", "F", "TO", "NF", "S", "ST", "PR", "BF", "RQ", "OOM"]
