"""The command rules of reference 002 ("运行指令说明"), table by table."""

from __future__ import annotations

import pytest

from gpuyard.models.command import CommandError, bash_c_form, parse_command

ACCEPTED = [
    ("python train.py --lr 0.1", {}, ["python", "train.py", "--lr", "0.1"]),
    ("python3 /workspace/algorithm/train.py", {}, ["python3", "/workspace/algorithm/train.py"]),
    # The reference's explicit torchrun form, with line continuations and ${VAR}s.
    (
        "torchrun \\\n--nnodes ${WORLD_SIZE} \\\n--nproc_per_node ${SLOTS} \\\n"
        "--node_rank ${RANK} \\\n--master_addr ${MASTER_ADDR} \\\n"
        "--master_port ${MASTER_PORT} \\\n/workspace/algorithm/train.py",
        {
            "WORLD_SIZE": "2",
            "SLOTS": "4",
            "RANK": "1",
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "2222",
        },
        [
            "torchrun",
            "--nnodes",
            "2",
            "--nproc_per_node",
            "4",
            "--node_rank",
            "1",
            "--master_addr",
            "10.0.0.1",
            "--master_port",
            "2222",
            "/workspace/algorithm/train.py",
        ],
    ),
    # The reference's suggested fix is itself accepted: bash gets the script as one argument.
    (
        'bash -c "KEY=VALUE python3 train.py && python3 evaluate.py"',
        {},
        ["bash", "-c", "KEY=VALUE python3 train.py && python3 evaluate.py"],
    ),
    ("echo 'a && b; c | d'", {}, ["echo", "a && b; c | d"]),
    ("echo a\\&\\&b", {}, ["echo", "a&&b"]),
    ('echo "$X" $X', {"X": " u  v "}, ["echo", " u  v ", "u", "v"]),
    ("echo $UNSET end", {}, ["echo", "end"]),
    ('echo "" x', {}, ["echo", "", "x"]),
    ("echo pre${X}post", {"X": "1"}, ["echo", "pre1post"]),
    ("echo '$X'", {"X": "1"}, ["echo", "$X"]),
    ("echo \\$X", {"X": "1"}, ["echo", "$X"]),
    ("echo $ 5$", {}, ["echo", "$", "5$"]),
    ("python x.py --files data/*.csv ~/y", {}, ["python", "x.py", "--files", "data/*.csv", "~/y"]),
    ("  python x.py  \n", {}, ["python", "x.py"]),
    ("env KEY=VALUE python3 train.py", {}, ["env", "KEY=VALUE", "python3", "train.py"]),
]


@pytest.mark.parametrize(("command", "env", "argv"), ACCEPTED)
def test_accepted_commands_render_as_a_shell_would(
    command: str, env: dict[str, str], argv: list[str]
) -> None:
    assert parse_command(command).render(env) == argv


REJECTED = [
    ("KEY=VALUE python3 train.py", "must start with an executable"),
    ("python3 train.py && python3 evaluate.py", "'&&'"),
    ("a || b", "'||'"),
    ("a; b", "';'"),
    ("a | b", "pipe"),
    ("sleep 1 &", "background"),
    ("python x.py > out.log", "redirection"),
    ("python x.py < in", "redirection"),
    ("echo $(hostname)", "command substitution"),
    ("echo `hostname`", "backquotes"),
    ('echo "`hostname`"', "backquotes"),
    ("(cd x)", "subshell"),
    ("echo ${X:-default}", "only ${NAME}"),
    ("python a.py\npython b.py", "several lines"),
    ("echo 'unclosed", "never closed"),
    ('echo "unclosed', "never closed"),
    ("", "empty"),
    ("   ", "empty"),
]


@pytest.mark.parametrize(("command", "message"), REJECTED)
def test_rejected_commands_say_why(command: str, message: str) -> None:
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace("$", r"\$")):
        parse_command(command)


@pytest.mark.parametrize(
    "command",
    ["KEY=VALUE python3 train.py", "python3 train.py && python3 evaluate.py", "a | b"],
)
def test_rejection_shows_the_bash_c_form(command: str) -> None:
    with pytest.raises(CommandError) as info:
        parse_command(command)
    assert f'bash -c "{command}"' in str(info.value)


def test_the_bash_c_form_round_trips_through_the_lexer() -> None:
    command = 'KEY="a b" python3 train.py && echo \\done `date` "$X"'
    suggested = bash_c_form(command)
    argv = parse_command(suggested).render({"X": "$X"})
    assert argv == ["bash", "-c", command.replace("$X", "$X")]


def test_display_words_keep_variables_unexpanded() -> None:
    parsed = parse_command("torchrun --nnodes ${WORLD_SIZE} $RANK x.py")
    assert parsed.display_words() == ["torchrun", "--nnodes", "${WORLD_SIZE}", "${RANK}", "x.py"]
    assert parsed.executable == "torchrun"


def test_prepend_adds_literal_words() -> None:
    parsed = parse_command("python x.py").prepend("mpirun", "-np", "4")
    assert parsed.render({}) == ["mpirun", "-np", "4", "python", "x.py"]
