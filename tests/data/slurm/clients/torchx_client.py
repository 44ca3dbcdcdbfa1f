"""A plain torchx program (no gpuyard import) on torchx's ``slurm`` scheduler, which submits
every app as a heterogeneous job: one component per replica, ``srun A : B : C`` in the script,
states read back with ``sacct --parsable2``. Runs an app of two roles with different resources
(it succeeds, and each replica's log names its task), one whose replica fails, and one that is
cancelled while it runs."""

import os
import subprocess
import sys
import time

from torchx import specs
from torchx.runner import get_runner
from torchx.schedulers.slurm_scheduler import create_scheduler
from torchx.specs.api import AppState

SHOW = (
    "import os; e = os.environ; print('task', e['SLURM_PROCID'], e['SLURM_JOB_NAME'], "
    "e['SLURM_JOB_NODELIST_HET_GROUP_0'], e['SLURMD_NODENAME'], "
    "e.get('CUDA_VISIBLE_DEVICES', ''), flush=True)"
)


def app(name: str, trainer_code: str) -> specs.AppDef:
    here = os.getcwd()
    return specs.AppDef(
        name=name,
        roles=[
            specs.Role(
                name="trainer",
                image=here,
                entrypoint=sys.executable,
                args=["-c", trainer_code],
                num_replicas=2,
                resource=specs.Resource(cpu=2, gpu=1, memMB=1024),
            ),
            specs.Role(
                name="ps",
                image=here,
                entrypoint=sys.executable,
                args=["-c", SHOW],
                num_replicas=1,
                resource=specs.Resource(cpu=1, gpu=0, memMB=512),
            ),
        ],
    )


def main() -> None:
    runner = get_runner()
    cfg = {"time": "10"}

    handle = runner.run(app("het", SHOW), scheduler="slurm", cfg=cfg)
    status = runner.wait(handle, wait_interval=0.5)
    assert status is not None and status.state == AppState.SUCCEEDED, status
    app_id = handle.rsplit("/", 1)[-1]
    # What another process learns of it: sacct's rows, one per component (N+0, N+1, ...)
    described = create_scheduler("other").describe(app_id)
    assert described is not None and described.state == AppState.SUCCEEDED, described
    replicas = {role.name: role.num_replicas for role in described.roles}
    assert replicas == {"trainer": 2, "ps": 1}, replicas
    lines = []
    for role, k in (("trainer", 0), ("trainer", 1), ("ps", 0)):
        path = f"slurm-{app_id}-{role}-{k}.out"
        with open(path) as file:
            found = [line.split() for line in file if line.startswith("task ")]
        assert len(found) == 1, (path, found)
        lines.append(found[0])
        print("log", role, k, " ".join(found[0][1:]))
    assert [line[1] for line in lines] == ["0", "1", "2"], lines
    # one step of three groups: every task has the last group's name, as in Slurm 22.05
    assert [line[2] for line in lines] == ["ps-0", "ps-0", "ps-0"], lines
    # every replica reads the first component's node, for torchx's rendezvous
    assert len({line[3] for line in lines}) == 1 and lines[0][3] == lines[0][4], lines
    assert len({line[4] for line in lines}) == 3, lines  # a node per replica
    print("het ok")

    failing = runner.run(
        app("fails", "import os, sys; sys.exit(3 if os.environ['SLURM_PROCID'] == '1' else 0)"),
        scheduler="slurm",
        cfg=cfg,
    )
    status = runner.wait(failing, wait_interval=0.5)
    assert status is not None and status.state == AppState.FAILED, status
    print("failure ok")

    slow = runner.run(app("slow", "import time; time.sleep(600)"), scheduler="slurm", cfg=cfg)
    deadline = time.time() + 120
    while (now := runner.status(slow)) is None or now.state != AppState.RUNNING:
        assert time.time() < deadline, now
        time.sleep(0.5)
    runner.cancel(slow)
    # torchx 0.7.0's status cannot read "CANCELLED by <uid>", which a real Slurm prints too
    # (its state table has no such key): read what sacct says of each component instead.
    slow_id = slow.rsplit("/", 1)[-1]
    deadline = time.time() + 60
    while True:
        states = subprocess.run(
            ["sacct", "-X", "-P", "-n", "-o", "JobID,State", "-j", slow_id],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        if states and all("|CANCELLED" in row for row in states):
            break
        assert time.time() < deadline, states
        time.sleep(0.5)
    assert [row.split("|")[0] for row in states] == [f"{slow_id}+{i}" for i in range(3)], states
    print("cancel ok")


if __name__ == "__main__":
    main()
