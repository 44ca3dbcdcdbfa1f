"""The CLI against a real pool of two virtual nodes."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpuyard.testing.process import ServerProcess, unmount_node_memory

pytestmark = pytest.mark.slow


def test_cli_round_trip_on_virtual_nodes(pool_factory: type[ServerProcess], tmp_path: Path) -> None:
    pool = pool_factory(
        tmp_path / "home", "--virtual-nodes", "2", "--gpus-per-node", "2", "--cpus-per-node", "4"
    ).start()
    nodes = pool.cli_json("nodes")
    assert [(n["name"], n["address"], n["gpus"]) for n in nodes] == [
        ("node0", "127.0.0.2", 2),
        ("node1", "127.0.0.3", 2),
    ]
    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        "name: gang\nnodes: 2\ngpus: 2\nmax_runtime: 5m\nenv: {GREETING: hi}\n"
        "command: [sh, -c, 'echo $GREETING rank $GPUYARD_NODE_RANK of $GPUYARD_NUM_NODES "
        "on $GPUYARD_NODE_ADDRESS gpus $CUDA_VISIBLE_DEVICES; pwd']\n"
    )
    job = pool.cli_json("submit", "-f", str(job_file), "--workdir", str(tmp_path))
    assert (job["name"], job["spec"]["nodes"], job["spec"]["max_runtime"]) == ("gang", 2, 300)
    follow = pool.cli("logs", "-f", str(job["id"]), "--worker", "1").stdout
    assert follow == f"hi rank 1 of 2 on 127.0.0.3 gpus 0,1\n{tmp_path}\n"
    assert pool.cli("wait", str(job["id"])).returncode == 0
    assert pool.cli("logs", str(job["id"])).stdout.startswith("hi rank 0 of 2 on 127.0.0.2")

    # A single-node job defaults its workdir to where `submit` ran.
    failing = subprocess.run(
        [sys.executable, "-m", "gpuyard", "submit", "--json", "--", "sh", "-c", "pwd; exit 4"],
        env=pool.env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    failing_id = __import__("json").loads(failing.stdout)["id"]
    assert pool.cli("wait", str(failing_id), check=False).returncode == 1
    shown = pool.cli_json("show", str(failing_id))
    assert (shown["status"], shown["exit_code"]) == ("failed", 4)
    assert shown["reason"].endswith("exited with code 4")
    assert pool.cli("logs", str(failing_id)).stdout == f"{tmp_path}\n"
    assert "error" in pool.cli("ls", "--status", "error").stdout

    copy = pool.cli_json("clone", str(failing_id), "--name", "again")
    assert (copy["name"], copy["spec"]["command"]) == ("again", shown["spec"]["command"])
    pool.cli("wait", str(copy["id"]), check=False)
    listing = pool.cli_json("ls", "--name", "again")
    assert [j["id"] for j in listing["items"]] == [copy["id"]]
    pool.cli("rm", str(copy["id"]))
    assert pool.cli_json("ls", "--name", "again")["total"] == 0
    assert not (tmp_path / "home" / "jobs" / str(copy["id"])).exists()


def test_bad_input_gets_a_clear_error_and_no_job(
    pool_factory: type[ServerProcess], tmp_path: Path
) -> None:
    pool = pool_factory(tmp_path / "home").start()
    result = pool.cli("submit", "--", "KEY=VALUE python3 train.py", check=False)
    assert result.returncode == 2
    assert 'bash -c "KEY=VALUE python3 train.py"' in result.stderr
    result = pool.cli("submit", "--gpus", "64", "--", "python", "x.py", check=False)
    assert result.returncode == 2 and "no node has 64 GPUs" in result.stderr
    result = pool.cli("submit", "--max-runtime", "soon", "--", "true", check=False)
    assert "cannot read 'soon' as a duration" in result.stderr
    result = pool.cli("show", "999", check=False)
    assert result.returncode == 1 and "job 999 does not exist" in result.stderr
    assert pool.cli_json("ls")["total"] == 0


def test_up_detached_and_down(tmp_path: Path) -> None:
    pool = ServerProcess(tmp_path / "home")
    up = pool.cli("up", "--detach", "--port", "0")
    assert "gpuyard pool running at http://127.0.0.1:" in up.stdout
    # What the server logs (users, jobs, errors) is for the pool's account alone.
    assert stat.S_IMODE((tmp_path / "home" / "pool.log").stat().st_mode) == 0o600
    assert "already running" in pool.cli("up", "--detach", "--port", "0").stdout
    job = pool.cli_json("submit", "--", "true")
    assert pool.cli("wait", str(job["id"])).returncode == 0
    assert "pool stopped" in pool.cli("down").stdout
    log = (tmp_path / "home" / "pool.log").read_text()
    assert "`gpuyard down` stops it" in log and "Ctrl-C" not in log  # no terminal to press it in
    assert "pool stopped; running jobs keep running" in log
    assert "no pool is running" in pool.cli("down").stdout
    result = pool.cli("ls", check=False)
    assert result.returncode == 1 and "gpuyard up" in result.stderr
    unmount_node_memory(tmp_path / "home")  # what its job held: the pool that would free it is down


def test_admin_labels_a_node_and_a_user_is_held_to_their_tiers(
    pool_factory: type[ServerProcess], tmp_path: Path
) -> None:
    """The pool's own user is its admin from the start and needs no sign-in on its machine;
    it adds a user and gives them a token, who signs in from elsewhere (`gpuyard login`) and
    is held to a plain user's rights."""
    pool = pool_factory(tmp_path / "home", "--virtual-nodes", "2", "--cpus-per-node", "2").start()
    [me] = pool.cli_json("users")
    assert me["role"] == "admin"
    labels = pool.cli_json("label", "node1", "pool=gpu")
    assert labels["effective"]["pool"] == "gpu"
    job = pool.cli_json("submit", "--pool", "gpu", "--priority", "highest", "--", "true")
    assert pool.cli("wait", str(job["id"])).returncode == 0
    assert [s["node"] for s in pool.cli_json("show", str(job["id"]))["placement"]] == ["node1"]

    added = pool.cli("users", "add", "alice", "--json").stdout
    assert json.loads(added)["role"] == "user"
    made = pool.cli("tokens", "create", "alice", "--label", "laptop", "--expires", "7d", "--json")
    issued = json.loads(made.stdout)
    # Alice's machine: her own home and config directory, only the pool's URL in common.
    elsewhere = {
        **{k: v for k, v in pool.env.items() if k != "GPUYARD_HOME"},
        "GPUYARD_HOME": str(tmp_path / "alice-home"),
        "GPUYARD_CONFIG_DIR": str(tmp_path / "alice-config"),
        "GPUYARD_URL": pool.url,
    }

    def as_alice(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpuyard", *args],
            env=elsewhere,
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
        )

    unsigned = as_alice("ls")
    assert unsigned.returncode == 1 and "gpuyard login" in unsigned.stderr
    login = as_alice("login", "--token-stdin", stdin=issued["token"] + "\n")
    assert login.returncode == 0 and "signed in" in login.stdout and "as alice" in login.stdout
    credentials = tmp_path / "alice-config" / "credentials.json"
    assert credentials.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "home" / "owner.token").stat().st_mode & 0o777 == 0o600

    refused = as_alice("submit", "--priority", "highest", "--", "true")
    assert refused.returncode == 1 and "priority highest is not open to alice" in refused.stderr
    queued = as_alice("submit", "--json", "--pool", "nowhere", "--", "true")
    assert queued.returncode == 2 and "there is no pool nowhere" in queued.stderr
    assert as_alice("submit", "--", "true").returncode == 0
    # Not an admin, and cannot become one; the owner's job is not hers to see.
    promote = as_alice("users", "set", "alice", "--role", "admin")
    assert promote.returncode == 1 and "only admins may change users" in promote.stderr
    hidden = as_alice("show", str(job["id"]))
    assert hidden.returncode == 1 and f"job {job['id']} does not exist" in hidden.stderr
    assert [(u["name"], u["role"]) for u in pool.cli_json("users")] == sorted(
        [("alice", "user"), (me["name"], "admin")]
    )
    trail = json.loads(pool.cli("audit", "--action", "token.create", "--json").stdout)
    assert [e["target"] for e in trail][-1] == "user:alice"
