"""Build each worker's launch: the env contract, the mode's variables and files, the argv.

Pure: everything comes in as arguments (the job, its placement, the executor's base env and
paths), nothing is read from the machine. The env contract is documented in ``docs/jobs.md`` and
tested in ``tests/unit/launch``.

Precedence of the environment, lowest first: the executor's base env, the platform defaults
(:data:`PLATFORM_DEFAULTS`), the pool's network preset, the pool's interface for the job's
listeners (:func:`listener_env`), the job's ``env``, then what the mode and
the platform need to be right (``MASTER_ADDR``, ``TF_CONFIG``, hostfiles, ``SLURM_*``,
``GPUYARD_*``, ``CUDA_VISIBLE_DEVICES``), which a job cannot override.
"""

from __future__ import annotations

import itertools
import json
import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuyard.launch.formats import deepspeed_hostfile, mpich_hostfile, openmpi_hostfile, tf_config
from gpuyard.launch.mpi import with_mpi_prefix
from gpuyard.launch.network import Network, NetworkPreset, network_env
from gpuyard.launch.service import service_env
from gpuyard.launch.slurm import (
    HET_ONLY,
    Component,
    batch_env,
    het_env,
    slurm_components,
    slurm_env,
)
from gpuyard.launch.topology import Seat, seats
from gpuyard.launch.torchrun import wrap_python
from gpuyard.launch.workspace import (
    attempt_dir,
    control_dir,
    output_dir,
    worker_dir,
    workspace_binds,
)
from gpuyard.models.command import Literal, ParsedCommand, parse_command
from gpuyard.models.environment import HOST_ONLY_ENV
from gpuyard.models.job import JobMode, JobSpec, JobType, MpiImplementation, Slot
from gpuyard.models.slurm import SlurmBatch
from gpuyard.models.worker import (
    PREEMPT_SIGNAL,
    Bind,
    File,
    Tools,
    WorkerImage,
    WorkerKey,
    WorkerLaunch,
    WorkerRole,
)

__all__ = ["PLATFORM_DEFAULTS", "JobContext", "MpiInstall", "listener_env", "plan_worker"]

PLATFORM_DEFAULTS = {
    # Logs are files, and a Python writing to a file buffers its output by the block: a
    # training script's prints would reach `gpuyard logs -f` minutes late. A job may set it to
    # "" in its env to get buffering back.
    "PYTHONUNBUFFERED": "1",
}


LOOPBACK = "lo"
"""The interface of nodes that share one host (virtual nodes); see ``_one_host_env``."""


@dataclass(frozen=True, slots=True)
class MpiInstall:
    """Where an MPI implementation lives on the nodes: prepended to PATH / LD_LIBRARY_PATH."""

    bin_dir: str = ""
    lib_dir: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra variables this installation needs (e.g. to run on loopback)."""


@dataclass(frozen=True, slots=True)
class JobContext:
    """The facts about a job that are not in its spec."""

    job_id: int
    name: str
    attempt: int
    placement: Sequence[Slot]
    job_dir: str
    control_url: str = ""
    gpu_devices: Mapping[str, Sequence[str]] | None = None
    """Per node, what CUDA_VISIBLE_DEVICES names for each local GPU index."""
    token: str = ""
    """A secret of this attempt of the job (its workers use it to trust each other)."""
    tools: Tools = field(default_factory=Tools)
    mpi: Mapping[MpiImplementation, MpiInstall] = field(default_factory=dict)
    network: NetworkPreset = field(default_factory=NetworkPreset)
    mpi_interface: str = "eth0"
    """HYDRA_IFACE for MPICH jobs (the reference's eth0; `lo` for virtual nodes)."""
    owner: str = ""
    """The gpuyard user who owns the job (SLURM_JOB_USER)."""
    run_as: str | None = None
    """The OS account its workers run as (:func:`gpuyard.launch.accounts.os_account`); None:
    the pool's own user."""
    resume: bool = True
    """Whether this attempt resumes from the job's checkpoint (``GPUYARD_RESUME``): false
    after a fault restart of a job whose recovery is ``restart`` (from scratch)."""
    resume_step: int | None = None
    """The checkpoint step chosen to resume from (``GPUYARD_RESUME_STEP``); None: the newest."""
    held: frozenset[str] = frozenset()
    """Dataset directories the pool holds on the worker's node (uploaded versions, the node's
    copies): their binds are opened by the pool, not as the job's account."""
    memo: dict[object, Any] = field(default_factory=dict, compare=False, repr=False)
    """What every worker of the launch shares, worked out for the first (a gang's seats)."""

    @property
    def checkpoint_dir(self) -> str:
        return posixpath.join(self.job_dir, "checkpoints")


@dataclass(frozen=True, slots=True)
class _Worker:
    """Everything plan_worker derives about one worker before rendering it."""

    spec: JobSpec
    ctx: JobContext
    seat: Seat
    gang: tuple[Seat, ...]

    @property
    def slot(self) -> Slot:
        return self.ctx.placement[self.seat.rank]

    def slot_of(self, seat: Seat) -> Slot:
        return self.ctx.placement[seat.rank]

    @property
    def compute(self) -> list[Seat]:
        return [s for s in self.gang if s.role is not WorkerRole.PS]

    @property
    def master(self) -> Slot:
        return self.slot_of(self.gang[0])

    @property
    def slots_per_node(self) -> int:
        """SLOTS: GPUs per node, 1 on CPU (docs/distributed.md)."""
        return self.spec.resources.gpus or 1

    @property
    def files_dir(self) -> str:
        """Per attempt and sub-task: hostfiles and the like."""
        return posixpath.join(
            attempt_dir(self.ctx.job_dir, self.ctx.attempt), f"task-{self.seat.task}"
        )


def contract_env(w: _Worker, *, workspace: str, outputs: str) -> dict[str, str]:
    ctx, slot, seat = w.ctx, w.slot, w.seat
    devices = (ctx.gpu_devices or {}).get(slot.node)
    visible = [devices[i] if devices and i < len(devices) else str(i) for i in slot.gpus]
    env = {
        "GPUYARD_JOB_ID": str(ctx.job_id),
        "GPUYARD_JOB_NAME": ctx.name,
        "GPUYARD_ATTEMPT": str(ctx.attempt),
        "GPUYARD_RESUME": "1" if ctx.resume else "0",
        "GPUYARD_NODE_RANK": str(seat.node_rank),
        "GPUYARD_NUM_NODES": str(seat.gang_size),
        "GPUYARD_ROLE": seat.role.value,
        "GPUYARD_NODE_NAME": slot.node,
        "GPUYARD_NODE_ADDRESS": slot.address,
        "GPUYARD_JOB_DIR": ctx.job_dir,
        "GPUYARD_WORKSPACE": workspace,
        "GPUYARD_OUTPUT_DIR": outputs,
        "GPUYARD_CHECKPOINT_DIR": ctx.checkpoint_dir,
        "GPUYARD_CONTROL_DIR": control_dir(ctx.job_dir, ctx.attempt, seat.rank),
        "GPUYARD_PREEMPT_SIGNAL": PREEMPT_SIGNAL,
        "GPUYARD_GPUS": str(len(slot.gpus)),
        # An empty list hides every GPU from a job that asked for none.
        "CUDA_VISIBLE_DEVICES": ",".join(visible),
    }
    if w.spec.type is JobType.BATCH:
        env["GPUYARD_TASK_INDEX"] = str(seat.task)
        env["GPUYARD_NUM_TASKS"] = str(len(w.spec.tasks))
    if ctx.resume_step is not None:
        env["GPUYARD_RESUME_STEP"] = str(ctx.resume_step)
    if ctx.control_url:
        env["GPUYARD_URL"] = ctx.control_url
    if ctx.token:
        env["GPUYARD_JOB_TOKEN"] = ctx.token
    if w.spec.service is not None:
        env.update(service_env(w.spec.service, job_id=ctx.job_id, port=slot.port, token=ctx.token))
    return env


def _torch_env(w: _Worker) -> dict[str, str]:
    """MASTER_ADDR, MASTER_PORT, WORLD_SIZE (nodes), RANK (node rank), SLOTS, as in 002."""
    return {
        "MASTER_ADDR": w.master.address,
        "MASTER_PORT": str(w.master.port),
        "WORLD_SIZE": str(len(w.compute)),
        "RANK": str(w.seat.node_rank),
        "SLOTS": str(w.slots_per_node),
    }


def _tf_env(w: _Worker) -> dict[str, str]:
    hosts = {
        role: [f"{w.slot_of(s).address}:{w.slot_of(s).port}" for s in w.gang if s.role is role]
        for role in (WorkerRole.WORKER, WorkerRole.PS)
    }
    config = tf_config(
        workers=hosts[WorkerRole.WORKER],
        ps=hosts[WorkerRole.PS],
        task_type="ps" if w.seat.role is WorkerRole.PS else "worker",
        task_index=w.seat.role_index,
    )
    return {"TF_CONFIG": config}


def _hosts(w: _Worker) -> list[tuple[str, int]]:
    return [(w.slot_of(s).node, w.slots_per_node) for s in w.compute]


def _mpi(w: _Worker) -> tuple[list[str] | None, dict[str, str], dict[str, File]]:
    """MPI launcher/target: (argv override for targets, env, files).

    The launcher's mpirun finds the hosts in the hostfile and starts its daemon on each through
    ``rsh-agent`` (``injob/rexec.py agent``), which has the target worker's ``rexec.py serve``
    run it: no ssh anywhere (docs/distributed.md, "MPI without ssh").
    """
    ctx, impl = w.ctx, w.spec.mpi
    files_dir = w.files_dir
    agent = posixpath.join(files_dir, "rsh-agent")
    hosts_json = posixpath.join(files_dir, "rexec-hosts.json")
    hostfile = posixpath.join(files_dir, "hostfile")
    mpich_file = posixpath.join(files_dir, "mpich_hostfile")
    rexec_hosts = {
        w.slot_of(s).node: {"address": w.slot_of(s).address, "port": w.slot_of(s).port}
        for s in w.compute
    }
    tools = _tools(w)
    python, rexec = shlex.quote(tools.python), shlex.quote(tools.rexec)
    files = {
        hostfile: File(openmpi_hostfile(_hosts(w))),
        mpich_file: File(mpich_hostfile(_hosts(w))),
        hosts_json: File(json.dumps(rexec_hosts, sort_keys=True) + "\n"),
        agent: File(f'#!/bin/sh\nexec {python} -I -S {rexec} agent "$@"\n', 0o755),
    }
    env = {
        # Open MPI as the reference names it (up to 4, whose runtime is ORTE)...
        "OMPI_MCA_orte_default_hostfile": hostfile,
        "OMPI_MCA_plm_rsh_agent": agent,
        # ...and as Open MPI 5's runtime (PRRTE) reads it: its launcher is called "ssh" now.
        "PRTE_MCA_prte_default_hostfile": hostfile,
        "PRTE_MCA_plm_ssh_agent": agent,
        # Every worker has SLURM_* variables (for Lightning and submitit); Open MPI would take
        # them for a Slurm allocation, size the job from it and start its daemons with srun.
        # The hostfile is the allocation.
        "PRTE_MCA_ras": "^slurm",
        "PRTE_MCA_plm": "^slurm",
        "OMPI_MCA_ras": "^slurm",
        "OMPI_MCA_plm": "^slurm",
        # MPICH's Hydra: the hostfile, the interface, and our agent as its "ssh".
        "HYDRA_HOST_FILE": mpich_file,
        "HYDRA_IFACE": ctx.mpi_interface,
        "HYDRA_LAUNCHER": "ssh",
        "HYDRA_LAUNCHER_EXEC": agent,
        "GPUYARD_REXEC_HOSTS": hosts_json,
        "GPUYARD_REXEC_SELF": w.slot.node,
        "GPUYARD_HOSTFILE": mpich_file if impl is MpiImplementation.MPICH else hostfile,
    }
    if ctx.mpi_interface == LOOPBACK:
        env.update(_one_host_env(w))
    install = _mpi_install(w)
    if install is not None:
        env.update(install.env)
    if w.seat.role is WorkerRole.MPI_TARGET:
        env["GPUYARD_REXEC_ADDRESS"] = w.slot.address
        env["GPUYARD_REXEC_PORT"] = str(w.slot.port)
        return [tools.python, "-I", "-S", tools.rexec, "serve"], env, files
    if impl is MpiImplementation.OPENMPI:
        files[posixpath.join(mpirun_shim_dir(w.files_dir), "mpirun")] = File(MPIRUN_SHIM, 0o755)
    return None, env, files


def mpirun_shim_dir(files_dir: str) -> str:
    """Where an Open MPI launcher finds ``mpirun`` first (see :data:`MPIRUN_SHIM`)."""
    return posixpath.join(files_dir, "bin")


MPIRUN_SHIM = """#!/bin/sh
# gpuyard: Open MPI up to 4 read single-dash long options, as docs/distributed.md writes them
# (mpirun -bind-to none -map-by slot ...); Open MPI 5's mpirun loses their values ("Executable:
# none"). Give them two dashes, then run the real mpirun (this directory leaves PATH).
for a; do
  shift
  case $a in
    -bind-to|-map-by|-rank-by) a="-$a" ;;
  esac
  set -- "$@" "$a"
done
here=$(dirname "$0")
PATH=$(printf '%s' "$PATH" | sed "s#^$here:##")
export PATH
exec mpirun "$@"
"""
"""Run as ``mpirun`` by an Open MPI job's launcher: the reference's prefix and users' commands
written for Open MPI 4 run unchanged on Open MPI 5."""


def listener_env(ctx: JobContext) -> dict[str, str]:
    """Where a job's communication libraries listen and connect: the pool's interface only.

    Defaults under the job's own ``env`` (an InfiniBand job may name its UCX devices) and
    the pool's network preset. Open MPI's daemons (PRRTE's out-of-band channel) and its TCP
    transport, MPICH's Hydra control port and torchrun's store still *listen* on every
    interface, whatever they are told: docs/security.md, "Network exposure", says so.
    """
    iface = ctx.mpi_interface
    env = {
        # Open MPI's TCP transport: the addresses its ranks publish and connect to.
        "OMPI_MCA_btl_tcp_if_include": iface,
        # libfabric's TCP provider (MPICH's ch4:ofi), gloo and NCCL's sockets.
        "FI_TCP_IFACE": iface,
        "GLOO_SOCKET_IFNAME": iface,
        "NCCL_SOCKET_IFNAME": iface,
    }
    if iface != LOOPBACK:
        # PRRTE's out-of-band channel (and ORTE's, up to Open MPI 4); given only "lo" it finds
        # no interface at all and mpirun fails, so virtual nodes leave it to its default.
        env["PRTE_MCA_prte_if_include"] = iface
        env["OMPI_MCA_oob_tcp_if_include"] = iface
    if ctx.network.network is Network.NONE:
        # UCX (MPICH's ch4:ucx, Open MPI's pml/ucx) listens on every device it may use; on an
        # InfiniBand or RoCE pool its devices are the fabric's, which the job names itself.
        env["UCX_NET_DEVICES"] = iface
    return env


def _one_host_env(w: _Worker) -> dict[str, str]:
    """What MPI needs when the job's nodes are virtual nodes of one host (on loopback).

    MPI runtimes tell nodes apart by host name, so each worker's remote-launch agent gives the
    daemons it starts their node's name (a UTS namespace, ``injob/rexec.py``); and Open
    MPI's TCP transport skips loopback unless told to use it.
    """
    return {"GPUYARD_REXEC_HOSTNAME": w.slot.node, "OMPI_MCA_btl_tcp_if_include": LOOPBACK}


def slurm_bin_dir(files_dir: str) -> str:
    """Where a Slurm batch job finds ``srun`` and ``scontrol`` first (docs/slurm.md)."""
    return posixpath.join(files_dir, "slurm-bin")


SLURM_TOOLS = ("srun", "scontrol")
"""The commands a Slurm batch job runs inside its allocation (the others talk to the server
and come from ``gpuyard slurm-shims``)."""


def _slurm_files(w: _Worker) -> tuple[str, dict[str, File]]:
    """Where the batch step finds its nodes' ``rexec`` servers, and the Slurm commands of the
    job's ``slurm-bin`` directory (each runs the in-job ``slurm`` entry point)."""
    files_dir = w.files_dir
    hosts_json = posixpath.join(files_dir, "rexec-hosts.json")
    rexec_hosts = {
        w.slot_of(s).node: {"address": w.slot_of(s).address, "port": w.slot_of(s).port}
        for s in w.compute
    }
    tools = _tools(w)
    python, tool = shlex.quote(tools.python), shlex.quote(tools.slurm)
    files = {hosts_json: File(json.dumps(rexec_hosts, sort_keys=True) + "\n")}
    for name in SLURM_TOOLS:
        files[posixpath.join(slurm_bin_dir(files_dir), name)] = File(
            f'#!/bin/sh\nexec {python} -I -S {tool} {name} "$@"\n', 0o755
        )
    return hosts_json, files


def _array_env(slurm: SlurmBatch, job_id: int) -> dict[str, int] | None:
    """``SLURM_ARRAY_*`` of an array task, by name (None: the job is no array's)."""
    array = slurm.array
    if array is None:
        return None
    return {
        "job_id": array.job_id or job_id,
        "task_id": array.task_id,
        "task_count": array.count,
        "task_min": array.min,
        "task_max": array.max,
        "task_step": array.step,
    }


def _component_env(w: _Worker, slurm: SlurmBatch, gpus: list[str]) -> dict[str, str]:
    """The batch job's ``SLURM_*`` variables on this worker's node. A heterogeneous job's
    worker is a node of its component: the job variables are the component's (the batch
    shell's are component 0's), beside every component's ``*_HET_GROUP_n``."""
    ctx, r = w.ctx, w.spec.resources
    all_nodes = [w.slot_of(s).node for s in w.compute]
    components = slurm_components(slurm, all_nodes, gpus=r.gpus, cpus=r.cpus, memory=r.memory)
    mine = next(c for c in components if w.seat.node_rank < c.first + len(c.nodes))
    env = batch_env(
        job_id=ctx.job_id + mine.index,
        job_name=mine.job_name,
        nodes=mine.nodes,
        node_rank=w.seat.node_rank - mine.first,
        ntasks=mine.ntasks,
        ntasks_per_node=mine.ntasks_per_node,
        cpus_per_task=mine.cpus_per_task,
        cpus=w.slot.cpus,
        gpus=gpus,
        memory_mb=mine.memory_mb,
        submit_dir=slurm.submit_dir,
        submit_host=slurm.submit_host,
        partition=slurm.partition,
        account=slurm.account,
        qos=slurm.qos,
        user=ctx.owner,
        uid=slurm.uid,
        gid=slurm.gid,
        attempt=ctx.attempt,
        open_mode=slurm.open_mode,
        array=_array_env(slurm, ctx.job_id),
    )
    if len(components) > 1:
        for name in HET_ONLY:
            env.pop(name, None)
        env.update(_het_env(w, slurm, components))
    return env


def _het_env(w: _Worker, slurm: SlurmBatch, components: list[Component]) -> dict[str, str]:
    ctx = w.ctx
    return het_env(
        job_id=ctx.job_id,
        components=components,
        partition=slurm.partition,
        account=slurm.account,
        qos=slurm.qos,
        submit_dir=slurm.submit_dir,
        submit_host=slurm.submit_host,
        user=ctx.owner,
        uid=slurm.uid,
        gid=slurm.gid,
        attempt=ctx.attempt,
    )


def _slurm(w: _Worker) -> tuple[list[str], dict[str, str], dict[str, File]]:
    """A Slurm batch job: worker 0 runs the script (the batch step), the others serve the
    ``srun`` tasks it starts on their nodes (``slurm/step/main.py``)."""
    ctx, slurm = w.ctx, w.spec.slurm
    assert slurm is not None
    files_dir = w.files_dir
    hosts_json, files = _slurm_files(w)
    slot = w.slot
    devices = (ctx.gpu_devices or {}).get(slot.node)
    gpus = [devices[i] if devices and i < len(devices) else str(i) for i in slot.gpus]
    env = _component_env(w, slurm, gpus)
    env.update(
        {
            # Node names need not resolve (virtual nodes do not): Lightning and submitit's
            # helpers take MASTER_ADDR before the first name of SLURM_NODELIST.
            "MASTER_ADDR": w.master.address,
            "GPUYARD_REXEC_HOSTS": hosts_json,
            "GPUYARD_REXEC_SELF": slot.node,
            "GPUYARD_SLURM_STEPS": posixpath.join(files_dir, "slurm-steps"),
            # Absolute: in an image the script may start elsewhere (--container-workdir).
            "GPUYARD_SLURM_OUTPUT": posixpath.join(slurm.work_dir, slurm.output),
            "GPUYARD_SLURM_ERROR": posixpath.join(slurm.work_dir, slurm.error)
            if slurm.error
            else "",
        }
    )
    if w.seat.role is WorkerRole.MPI_TARGET:
        env["GPUYARD_REXEC_ADDRESS"] = slot.address
        env["GPUYARD_REXEC_PORT"] = str(slot.port)
        tools = _tools(w)
        return [tools.python, "-I", "-S", tools.rexec, "serve"], env, files
    script = posixpath.join(files_dir, "slurm-script")
    files[script] = File(slurm.script, 0o755)
    tools = _tools(w)
    argv = [tools.python, "-I", "-S", tools.slurm, "batch", script, *slurm.script_args]
    return argv, env, files


def _deepspeed(
    w: _Worker, command: ParsedCommand
) -> tuple[ParsedCommand, dict[str, str], dict[str, File]]:
    """The hostfile, and a `deepspeed` launcher told where it is and how to start without ssh."""
    hostfile = posixpath.join(w.files_dir, "hostfile")
    env = {"GPUYARD_HOSTFILE": hostfile, "DLTS_HOSTFILE": hostfile}
    files = {hostfile: File(deepspeed_hostfile(_hosts(w)))}
    words = command.display_words()
    if posixpath.basename(words[0]) != "deepspeed":
        return command, env, files
    given = {word.split("=", 1)[0] for word in words}
    extra = []
    if not given & {"-H", "--hostfile"}:
        extra.append(f"--hostfile={hostfile}")
    if len(w.compute) > 1 and "--no_ssh" not in given:
        # Each node runs its own launcher, as pods do, rather than one launcher sshing to all.
        extra += [
            "--no_ssh",
            f"--node_rank={w.seat.node_rank}",
            f"--master_addr={w.master.address}",
            f"--master_port={w.master.port}",
        ]
    literal = tuple((Literal(x, True),) for x in extra)
    return ParsedCommand(command.words[:1] + literal + command.words[1:]), env, files


def _prepend_path(env: dict[str, str], name: str, directory: str) -> None:
    if directory:
        env[name] = f"{directory}:{env[name]}" if env.get(name) else directory


def _seats(spec: JobSpec, ctx: JobContext) -> tuple[Seat, ...]:
    key = ("seats", id(spec))
    found: tuple[Seat, ...] | None = ctx.memo.get(key)
    if found is None:
        found = ctx.memo[key] = seats(spec)
    return found


@dataclass(slots=True)
class _ModeParts:
    """What a job's mode adds to a worker's launch: its command (rewritten by the launcher it
    goes through) or a whole argv instead, its variables and files."""

    command: ParsedCommand
    argv: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, File] = field(default_factory=dict)
    processes_per_node: int = 1

    def add(self, env: Mapping[str, str], files: Mapping[str, File]) -> None:
        self.env.update(env)
        self.files.update(files)


def _tools(w: _Worker) -> Tools:
    """gpuyard's in-job tools as the worker reaches them: the node's, or in an image the
    image's Python running the pool's package mounted there (docs/images.md)."""
    return w.ctx.tools if w.spec.image is None else w.ctx.tools.in_image()


def _mpi_install(w: _Worker) -> MpiInstall | None:
    """The node's installation of the job's MPI, none in an image (it brings its own MPI:
    the node's paths are not there, and its ``OPAL_PREFIX`` would mislead the image's)."""
    return w.ctx.mpi.get(w.spec.mpi) if w.spec.image is None else None


def _job_env(w: _Worker, base_env: Mapping[str, str]) -> dict[str, str]:
    """The variables every worker of the job starts from: the pool's, the platform's
    defaults, the network's, the runtime listener's, then the spec's own."""
    spec = w.spec
    env = dict(base_env)
    if spec.image is not None:  # the image's own PATH, Python, libraries: not the node's
        for name in HOST_ONLY_ENV:
            env.pop(name, None)
    env.update(PLATFORM_DEFAULTS)
    total_gpus = spec.resources.gpus * spec.nodes
    env.update(network_env(w.ctx.network, total_gpus=total_gpus, mpi=spec.mode.uses_mpi))
    env.update({k: v for k, v in listener_env(w.ctx).items() if k not in env})
    env.update(spec.env)
    return env


def _worker_image(spec: JobSpec, env: dict[str, str]) -> WorkerImage | None:
    """The image the job's workers run in, with its mounts and which of the job's variables
    give way to the image's own (docs/images.md, "Mounts and environment in the image").
    The ``PATH`` entries the launch added to ``env`` (its own directories) move to the image's
    ``path``, to go before the image's ``PATH``, not instead of it, unless the job sets
    ``PATH`` itself (then the job's, with them first, is the whole)."""
    if spec.image is None:
        return None
    over = spec.env_over_image
    job_path = spec.env.get("PATH")
    path: tuple[str, ...] = ()
    if job_path is None or (over is not None and "PATH" not in over):
        # The job's own PATH (if any) gives way to the image's; the launch's entries stay.
        own = set(job_path.split(":")) if job_path else set()
        path = tuple(p for p in env.pop("PATH", "").split(":") if p and p not in own)
    mounts = [Bind(m.target, m.source, m.readonly) for m in spec.container_mounts]
    mounts += [Bind(d, d, False) for d in _slurm_dirs(spec.slurm)]
    return WorkerImage(
        spec.image,
        shm_size=spec.shm_size,
        workdir=spec.workdir,
        path=path,
        mounts=tuple(mounts),
        weak_env=frozenset() if over is None else frozenset(spec.env).difference(over),
    )


def _slurm_dirs(slurm: SlurmBatch | None) -> list[str]:
    """Where a Slurm batch script in an image works and writes its output: its working
    directory, and those of its output and error files (up to the first part with a
    ``%`` pattern), mounted at the same paths (docs/slurm.md, "Containers")."""
    if slurm is None:
        return []
    dirs = [slurm.work_dir]
    for name in (slurm.output, slurm.error):
        if not name:
            continue
        full = posixpath.normpath(posixpath.join(slurm.work_dir, name))
        parts = posixpath.dirname(full).split("/")
        fixed = "/".join(itertools.takewhile(lambda part: "%" not in part, parts)) or "/"
        if fixed != "/" and not any(_below(fixed, d) for d in dirs):
            dirs.append(fixed)
    return dirs


def _below(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _torch_parts(w: _Worker, parts: _ModeParts) -> None:
    """A torch job's Python command under the torch launcher, one process per slot."""
    wrapped = wrap_python(
        parts.command,
        nproc_per_node=w.slots_per_node,
        nnodes=len(w.compute),
        node_rank=w.seat.node_rank,
        master_addr="localhost" if w.seat.node_rank == 0 else w.master.address,
        master_port=w.master.port,
        launcher=w.spec.launcher,
    )
    if wrapped is not None:
        parts.command, parts.processes_per_node = wrapped, w.slots_per_node


def _mpi_parts(w: _Worker, env: dict[str, str], parts: _ModeParts) -> None:
    """An MPI job: its installation first on the paths, and the launcher's ``mpirun``."""
    spec, seat = w.spec, w.seat
    install = _mpi_install(w)
    if install is not None:
        _prepend_path(env, "PATH", install.bin_dir)
        _prepend_path(env, "LD_LIBRARY_PATH", install.lib_dir)
    if seat.role is WorkerRole.LAUNCHER and spec.mpi is MpiImplementation.OPENMPI:
        _prepend_path(env, "PATH", mpirun_shim_dir(w.files_dir))
    argv, more_env, more_files = _mpi(w)
    parts.argv = argv
    parts.add(more_env, more_files)
    if seat.role is WorkerRole.LAUNCHER:
        processes = w.slots_per_node * len(w.compute)
        parts.command = with_mpi_prefix(parts.command, spec.mpi, processes)


def _mode_parts(w: _Worker, env: dict[str, str]) -> _ModeParts:
    """What the job's mode (but Slurm's, :func:`_slurm_parts`) makes of the worker's command;
    an MPI installation's paths go into ``env``."""
    spec = w.spec
    parts = _ModeParts(parse_command(spec.commands()[w.seat.task]))
    if spec.mode in (JobMode.SINGLE, JobMode.PYTORCH, JobMode.PYTORCH_DEEPSPEED):
        parts.env.update(_torch_env(w))
    if spec.mode.uses_torch:
        _torch_parts(w, parts)
    if spec.mode is JobMode.PYTORCH_DEEPSPEED:
        parts.command, more_env, more_files = _deepspeed(w, parts.command)
        parts.add(more_env, more_files)
    elif spec.mode.uses_mpi:
        _mpi_parts(w, env, parts)
    elif spec.mode is JobMode.TENSORFLOW:
        parts.env.update(_tf_env(w))
    return parts


def _slurm_parts(w: _Worker, env: dict[str, str], parts: _ModeParts, cwd: str) -> str:
    """The ``SLURM_*`` side of the launch: a Slurm batch job's whole launch (:func:`_slurm`),
    any other job's description of its allocation as Slurm's. Returns the working
    directory (a Slurm job's is its ``--chdir``)."""
    if w.spec.mode is JobMode.SLURM:
        argv, more_env, more_files = _slurm(w)
        parts.argv = argv
        parts.files.update(more_files)
        _prepend_path(env, "PATH", slurm_bin_dir(w.files_dir))
        assert w.spec.slurm is not None  # JobSpec's rule: mode slurm carries it
        parts.env.update(more_env)
        return w.spec.slurm.work_dir
    more_env = slurm_env(
        job_id=w.ctx.job_id,
        job_name=w.ctx.name,
        nodes=[w.slot_of(s).node for s in w.gang],
        node_rank=w.seat.node_rank,
        processes_per_node=parts.processes_per_node,
        cpus=w.slot.cpus,
        gpus=len(w.slot.gpus),
        submit_dir=cwd,
        attempt=w.ctx.attempt,
    )
    parts.env.update(more_env)
    return cwd


def plan_worker(
    spec: JobSpec,
    ctx: JobContext,
    rank: int,
    *,
    base_env: Mapping[str, str],
    directory_rank: int | None = None,
) -> WorkerLaunch:
    """The launch of worker ``rank`` of a job. ``directory_rank``: the worker directory (its
    workspace) is that rank's, not ``rank``'s (an exec worker runs in the context of a worker
    of the job, in a directory of its own: :mod:`gpuyard.launch.exec_workers`)."""
    all_seats = _seats(spec, ctx)
    seat = all_seats[rank]
    w = _Worker(spec, ctx, seat, tuple(s for s in all_seats if s.task == seat.task))
    wdir = worker_dir(ctx.job_dir, ctx.attempt, rank if directory_rank is None else directory_rank)
    workspace = posixpath.join(wdir, "workspace")
    outputs = output_dir(spec, job_dir=ctx.job_dir, job_name=ctx.name, task=seat.task)
    env = _job_env(w, base_env)
    parts = _mode_parts(w, env)
    cwd = _slurm_parts(w, env, parts, spec.workdir or workspace)
    env.update(parts.env)
    env.update(contract_env(w, workspace=workspace, outputs=outputs))
    argv = parts.argv or parts.command.render(env)
    image = _worker_image(spec, env)
    return WorkerLaunch(
        key=WorkerKey(ctx.job_id, ctx.attempt, rank),
        node=w.slot.node,
        argv=argv,
        env=env,
        cwd=cwd,
        grace=spec.graceful_shutdown,
        files=parts.files,
        binds=tuple(
            workspace_binds(
                spec, workspace=workspace, outputs=outputs, task=seat.task, held=ctx.held
            )
        ),
        role=seat.role,
        task=seat.task,
        primary=seat.role.primary,
        limits=seat.member.need,
        run_as=ctx.run_as,
        image=image,
    )
