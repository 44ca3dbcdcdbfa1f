"""sbatch's options as Slurm 22.05 reads them: times, memory, arrays, #SBATCH lines, the
command line over the script."""

from __future__ import annotations

import pytest

from gpuyard.slurm.options import (
    OptionError,
    parse_array,
    parse_memory_mb,
    parse_sbatch,
    parse_time,
    script_components,
)

# --- --time ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10", 600.0),  # M
        ("10:30", 630.0),  # M:S
        ("1:02:03", 3723.0),  # H:M:S
        ("2-3", 2 * 86400.0 + 3 * 3600),  # D-H
        ("2-3:04", 2 * 86400.0 + 3 * 3600 + 4 * 60),  # D-H:M
        ("2-3:04:05", 2 * 86400.0 + 3 * 3600 + 4 * 60 + 5),  # D-H:M:S
        (" 5 ", 300.0),
        ("90", 5400.0),
        ("0:59", 59.0),
        ("0", None),
        ("00:00:00", None),
        ("UNLIMITED", None),
        ("unlimited", None),
        ("INFINITE", None),
        ("-1", None),
    ],
)
def test_parse_time(text: str, seconds: float | None) -> None:
    assert parse_time(text) == seconds


@pytest.mark.parametrize("text", ["abc", "1:2:3:4", "1h", "", "-5", "1-", "1-2-3", "1:", "1.5"])
def test_parse_time_refuses_garbage(text: str) -> None:
    with pytest.raises(OptionError, match=r"^Invalid --time specification$"):
        parse_time(text)


# --- --mem ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "megabytes"),
    [
        ("512", 512),
        ("100M", 100),
        ("100MB", 100),
        ("4G", 4096),
        ("4g", 4096),
        ("4GB", 4096),
        ("4gb", 4096),
        ("1024K", 1),
        ("2048KB", 2),
        ("1T", 1024 * 1024),
        ("1.5G", 1536),
        ("0", 0),
        (" 8G ", 8192),
    ],
)
def test_parse_memory_mb(text: str, megabytes: int) -> None:
    assert parse_memory_mb(text, "--mem") == megabytes


@pytest.mark.parametrize("text", ["4X", "abc", "-1", "", "G", "4 G B", "1e3"])
def test_parse_memory_refuses_garbage_naming_the_option(text: str) -> None:
    with pytest.raises(OptionError, match=r"^Invalid --mem-per-cpu specification$"):
        parse_memory_mb(text, "--mem-per-cpu")


# --- --array --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "indices", "throttle", "step"),
    [
        ("0-9", tuple(range(10)), None, 1),
        ("0-15:4", (0, 4, 8, 12), None, 4),
        ("1,3,5", (1, 3, 5), None, 2),
        ("0-9%2", tuple(range(10)), 2, 1),
        ("1-3,7,10-12", (1, 2, 3, 7, 10, 11, 12), None, 1),
        ("0-8:4,20%3", (0, 4, 8, 20), 3, 1),
        ("5", (5,), None, 1),
        ("3,1,3", (1, 3), None, 2),
        ("1000", (1000,), None, 1),
        ("0-1000", tuple(range(1001)), None, 1),
    ],
)
def test_parse_array(text: str, indices: tuple[int, ...], throttle: int | None, step: int) -> None:
    spec = parse_array(text)
    assert spec.indices == indices
    assert spec.throttle == throttle
    assert spec.step == step
    assert spec.text == text


def test_parse_array_keeps_the_text_stripped() -> None:
    assert parse_array(" 0-3%1 ").text == "0-3%1"


@pytest.mark.parametrize(
    "text", ["5-3", "a-b", "1001", "0-1001", "%x", "0-9%", "0-9%x", "", "1,,2", "0-9:0", "-1"]
)
def test_parse_array_refuses(text: str) -> None:
    with pytest.raises(OptionError, match=r"^Invalid job array specification$"):
        parse_array(text)


# --- #SBATCH lines --------------------------------------------------------------------------

SCRIPT = """#!/bin/bash
#SBATCH --job-name=train -N 2
# a plain comment
#SBATCHfoo --time=99

#SBATCH --comment="two words" --output='out %j.log'
  #SBATCH --mem=4G # what the model needs
#SBATCH -p gpu
echo start
#SBATCH --nodes=8
"""


def test_script_components() -> None:
    assert script_components(SCRIPT) == [
        [
            "--job-name=train",
            "-N",
            "2",
            "--comment=two words",
            "--output=out %j.log",
            "--mem=4G",
            "-p",
            "gpu",
        ]
    ]


def test_script_directives_without_a_shebang_or_directives() -> None:
    assert script_components("#SBATCH -N3\n") == [["-N3"]]
    assert script_components("#!/bin/sh\necho hi\n") == [[]]
    assert script_components("") == [[]]
    # The first command ends the directives even when it comes first.
    assert script_components("#!/bin/sh\ntrue\n#SBATCH -N3\n") == [[]]


@pytest.mark.parametrize("word", ["hetjob", "packjob"])
def test_a_hetjob_line_starts_the_next_component(word: str) -> None:
    script = f"#!/bin/sh\n#SBATCH -N1 -J a\n#SBATCH {word}\n#SBATCH -N2\n#SBATCH -c 2\n"
    assert script_components(script) == [["-N1", "-J", "a"], ["-N2", "-c", "2"]]


def test_a_hetjob_line_stands_alone() -> None:
    with pytest.raises(OptionError, match=r"^script line 3: hetjob stands alone on its line"):
        script_components("#!/bin/sh\n#SBATCH -N1\n#SBATCH hetjob -N2\n")


def test_script_directives_refuse_an_unmatched_quote_naming_the_line() -> None:
    with pytest.raises(OptionError, match=r"^script line 3: .*#SBATCH --comment=\"open$"):
        script_components('#!/bin/sh\n#SBATCH -N1\n#SBATCH --comment="open\n')


def test_script_directives_keep_a_quoted_hash() -> None:
    assert script_components('#!/bin/sh\n#SBATCH --job-name="run #3"\n') == [["--job-name=run #3"]]


def test_script_directives_end_at_a_comment_after_a_tab() -> None:
    assert script_components("#!/bin/sh\n#SBATCH --time=5\t# five minutes\n") == [["--time=5"]]


# --- parse_sbatch ---------------------------------------------------------------------------


def test_command_line_overrides_the_script() -> None:
    script = "#!/bin/sh\n#SBATCH -N 4 --time=10 --job-name=from-script\n#SBATCH --qos=low\n"
    options = parse_sbatch(["--nodes=2", "-J", "from-cli", "job.sh"], script)
    assert options.values == {
        "nodes": "2",
        "time": "10",
        "job-name": "from-cli",
        "qos": "low",
    }
    assert options.script_path == "job.sh"
    assert options.script_args == []


def test_the_first_call_reads_the_command_line_only() -> None:
    options = parse_sbatch(["-N2", "job.sh"], None)
    assert options.values == {"nodes": "2"}
    assert options.script_path == "job.sh"


@pytest.mark.parametrize(
    ("args", "values"),
    [
        (["-J", "x"], {"job-name": "x"}),
        (["-Jx"], {"job-name": "x"}),
        (["-N2"], {"nodes": "2"}),
        (["-N", "2"], {"nodes": "2"}),
        (["--nodes=2"], {"nodes": "2"}),
        (["--nodes", "2"], {"nodes": "2"}),
        (["--job-name=a=b"], {"job-name": "a=b"}),
        (["--tasks-per-node=3"], {"ntasks-per-node": "3"}),
        (["--requeue", "--parsable"], {"requeue": "", "parsable": ""}),
        (["-vQ"], {"verbose": "", "quiet": ""}),
        (["-N1", "-N3"], {"nodes": "3"}),  # the last one wins
        (["--comment", "--x"], {"comment": "--x"}),  # a value may start with a dash
        (
            ["-G", "a100:2", "-c4", "--gres=gpu:1"],
            {"gpus": "a100:2", "cpus-per-task": "4", "gres": "gpu:1"},
        ),
    ],
)
def test_option_forms(args: list[str], values: dict[str, str]) -> None:
    options = parse_sbatch(args, "#!/bin/sh\n")
    assert options.values == values
    assert options.script_path is None
    assert options.script_args == []


def test_script_path_and_its_arguments_follow_the_options() -> None:
    options = parse_sbatch(["-N2", "train.sh", "--lr", "0.1", "-N", "5"], "#!/bin/sh\n")
    assert options.values == {"nodes": "2"}
    assert options.script_path == "train.sh"
    assert options.script_args == ["--lr", "0.1", "-N", "5"]


def test_double_dash_ends_the_options() -> None:
    options = parse_sbatch(["-N2", "--", "-weird.sh", "a"], None)
    assert options.values == {"nodes": "2"}
    assert options.script_path == "-weird.sh"
    assert options.script_args == ["a"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bogus", "job.sh"], "unrecognized option '--bogus'"),
        (["--bogus=1"], "unrecognized option '--bogus=1'"),
        (["--time"], "option '--time' requires an argument"),
        (["-t"], "option requires an argument -- 't'"),
        (["-Z"], "invalid option -- 'Z'"),
        (["-vJ"], "invalid option -- 'J'"),
        (["--hold=1"], "option '--hold' doesn't allow an argument"),
    ],
)
def test_command_line_errors(args: list[str], message: str) -> None:
    with pytest.raises(OptionError) as caught:
        parse_sbatch(args, None)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("#!/bin/sh\n#SBATCH --bogus\n", "unrecognized option '--bogus'"),
        ("#!/bin/sh\n#SBATCH --time\n", "option '--time' requires an argument"),
        ("#!/bin/sh\n#SBATCH -N2 extra\n", "#SBATCH: unexpected word 'extra'"),
    ],
)
def test_script_errors(script: str, message: str) -> None:
    with pytest.raises(OptionError) as caught:
        parse_sbatch(["job.sh"], script)
    assert str(caught.value) == message


# --- heterogeneous jobs -----------------------------------------------------------------------

TORCHX = (
    "#!/bin/bash\n"
    "#SBATCH --job-name=trainer-0 --requeue --ntasks-per-node=1 --cpus-per-task=2 --mem=1024\n"
    "#SBATCH hetjob\n"
    "#SBATCH --job-name=ps-0 --ntasks-per-node=1 --cpus-per-task=1 --mem=512\n"
    "srun hostname\n"
)


def test_components_take_what_the_one_before_propagates() -> None:
    options = parse_sbatch(["--time=10", "--parsable", "job.sh"], TORCHX)
    first, second = options.components
    assert options.values is first
    assert first["time"] == "10" and first["parsable"] == ""
    # --time, --job-name and --requeue propagate; resources and sbatch's own flags do not
    assert second == {
        "job-name": "ps-0",
        "requeue": "",
        "time": "10",
        "ntasks-per-node": "1",
        "cpus-per-task": "1",
        "mem": "512",
    }


def test_command_line_components_override_the_scripts_one_by_one() -> None:
    options = parse_sbatch(["-N2", ":", "-N3", "-c", "4", "job.sh", "arg"], TORCHX)
    assert [c.get("nodes") for c in options.components] == ["2", "3"]
    assert options.components[1]["cpus-per-task"] == "4"
    assert options.script_path == "job.sh" and options.script_args == ["arg"]


def test_command_line_components_make_a_plain_script_heterogeneous() -> None:
    options = parse_sbatch(["-n1", ":", "-n2", "job.sh"], "#!/bin/sh\n#SBATCH -J x\n")
    assert [c.get("ntasks") for c in options.components] == ["1", "2"]
    assert [c.get("job-name") for c in options.components] == ["x", "x"]


def test_a_plain_job_has_no_components() -> None:
    options = parse_sbatch(["-N2", "job.sh"], "#!/bin/sh\n")
    assert options.components == [] and options.values == {"nodes": "2"}
