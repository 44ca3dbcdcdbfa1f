"""The local executor: runs workers on this machine, each under its own supervisor.

Two directories per worker (:mod:`gpuyard.models.workerdir`, docs/runtime.md):

- ``<home>/jobs/<job>/attempts/<attempt>/worker-<rank>/``: what the job sees, its ``log`` and
  ``control/`` (``GPUYARD_CONTROL_DIR``, which this executor sets);
- ``<home>/supervisors/<job>-<attempt>-<rank>/`` (0700): the supervisor's spec, state, exit
  record and terminate request. The job is never pointed there.

Each worker runs as the OS account its launch names (``run_as``: its owner's, docs/security.md)
when the pool runs as root; otherwise, or when the launch names none, as the pool's own user.
With an account, the pool's files are out of the job's reach: the home is 0711 (pass through,
no listing), the supervisors' directories 0700, the job's directory ``root:<its group>`` 0750
(other accounts cannot enter it), and only what the job writes is the account's, 0700: its
``outputs``, ``checkpoints``, each worker's ``control`` and ``workspace``. Those the pool makes
itself, inside directories only root can change, and reaches without following links
(:func:`untrusted.make_dir`); the supervisor makes what lies below them as the account.

A job that runs as the pool's user could rewrite any of these files. What the pool believes
about a worker's life therefore comes from processes, not files: the handle (stored by the
controller, out of the job's reach) holds the supervisor's pid, start time and boot id, learned
at launch. While that process lives the worker is RUNNING, whatever the files say. Once it is
gone, its exit record is believed only if the worker's cgroup is empty (the supervisor empties it
before it writes the record); otherwise, or without a record, the worker is LOST and the
executor kills what is left of it before it says so. No pid read from a file is signalled
without checking that the process belongs to the worker.

Each worker runs in a cgroup of its own (:mod:`gpuyard.executors.local.cgroups`) with its memory,
CPU and process limits; ``warnings()`` and the nodes' ``isolation`` label say what this machine
allows (``cgroup-v2``, ``cgroup-v1`` or ``none``).

A restarted control plane gets the same handles from its store and asks ``status``; ``launch``
of a worker that already exists returns its handle instead of starting a second copy. So
adoption after a restart is not a special code path.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import ValidationError

from gpuyard.executors.base import LaunchDeferred, LaunchError
from gpuyard.executors.local import cgroups, logcap, node_images, procfs, untrusted
from gpuyard.executors.local.accounts import Account, AccountError, Accounts
from gpuyard.executors.local.control_state import listener_pids, read_control, read_slurm_steps
from gpuyard.executors.local.gpumeter import GpuMeter, NoGpus, NvmlMeter
from gpuyard.executors.local.layout import layout
from gpuyard.executors.local.machine import Machine, detect_machine
from gpuyard.executors.local.node_data import NodeData
from gpuyard.executors.local.node_images import NodeImages
from gpuyard.executors.local.node_memory import (
    MEMORY_DIR_VARIABLE,
    MEMORY_LIMIT_VARIABLE,
    NodeMemory,
)
from gpuyard.executors.local.notifications import Listener
from gpuyard.executors.local.terminal import PtyTerminal, open_terminal
from gpuyard.executors.local.usage import machine_usage, node_gpus, worker_usages
from gpuyard.executors.probes.gpu import GpuProber, NvmlLibrary
from gpuyard.executors.probes.host import (
    DISK_THRESHOLDS,
    DiskThresholds,
    disk,
    guarded,
    heartbeat,
    nic,
)
from gpuyard.images.errors import ImageError, RegistryUnavailable
from gpuyard.injob import rexec as rexec_module
from gpuyard.models.dataprep import CachedCopy, DataSource, PreparedData, copy_version
from gpuyard.models.environment import inherited_environment
from gpuyard.models.health import Finding, Probe, ProbeStatus
from gpuyard.models.image import ImageRef
from gpuyard.models.node import CONTROLLERS, IsolationMode, KillMethod, NodeIsolation
from gpuyard.models.sandbox import (
    DEFAULT_GPU_DEVICE_FILES,
    DEFAULT_GPU_SHARED_FILES,
    PRIVATE_DIRS,
    hidden_gpu_files,
    kept_paths,
    memory_default,
    parse_memory_default,
    renumbered_devices,
)
from gpuyard.models.usage import NodeUsage, WorkerUsage
from gpuyard.models.worker import (
    PREEMPT_SIGNAL,
    ControlState,
    Handle,
    NodeInfo,
    Notice,
    SlurmStep,
    Tools,
    WorkerKey,
    WorkerLaunch,
    WorkerState,
    WorkerStatus,
)
from gpuyard.models.workerdir import (
    FILE_CAP,
    AccountSpec,
    BindSpec,
    CgroupSpec,
    ExitRecord,
    FileSpec,
    ImageMountSpec,
    ImageSpec,
    PreemptFile,
    SandboxSpec,
    SupervisorSpec,
    TerminateRequest,
)
from gpuyard.quantities import format_bytes
from gpuyard.slurm.step import main as slurmstep_module

__all__ = ["DEFAULT_LOG_MAX", "DEFAULT_PIDS_LIMIT", "LocalExecutor"]

SUPERVISOR = Path(__file__).resolve().with_name("supervisor_entry.py")
"""Run, never imported (it starts a supervisor)."""
REXEC = Path(rexec_module.__file__).resolve()
SLURMSTEP = Path(slurmstep_module.__file__).resolve().with_name("entry.py")
"""Run, never imported: it imports the step's main.py, whose bytecode the import above caches."""
NODECHECK = REXEC.with_name("nodecheck.py")
PACKAGE = REXEC.parents[1]
"""This gpuyard package: a worker in an image gets it read-only (docs/images.md)."""
DEFAULT_PIDS_LIMIT = 4096
DEFAULT_LOG_MAX = 64 << 20
"""Bytes a worker's log may have before its oldest part is dropped (docs/security.md)."""
"""Processes (threads count too) a worker may have at once; a fork bomb stops there."""
CONTROL_DIR_VARIABLE = "GPUYARD_CONTROL_DIR"
CHECK_INJECT_VARIABLE = "GPUYARD_CHECK_INJECT"
"""What makes a node's check find a fault (:mod:`gpuyard.injob.nodecheck`)."""
IDENTITY = ("HOME", "USER", "LOGNAME")
"""Who a process is: not in the base env; a worker gets its account's (HOME: its workspace),
or the pool's own when it runs as the pool, unless its job sets them."""
_RUNNING = WorkerStatus(WorkerState.RUNNING)
ADOPT_SEARCH = 1.0
"""Seconds a launch that adopts looks for a supervisor that has not recorded an exit."""


class LocalExecutor:
    """Runs workers on this machine. Its arguments, beside ``home`` (the pool's directory):

    ``pids_limit``: processes per worker, 0 for none. ``pids_ceiling`` and
    ``memory_ceiling``: processes and memory bytes of all workers together (the pool's
    cgroup), 0 for none; the pids ceiling defaults to half of what the host can number
    (:func:`cgroups.default_pids_ceiling`). ``isolation``: what cgroups to
    use; detected on this machine when not given (tests pass their own). ``gpu_meter``:
    how GPUs are measured (NVML where the machine has GPUs; tests pass their own).
    ``inject_faults``: node -> a fault its node check finds (``burn``, ``collective``),
    for chaos tests of the fault-tolerance loop (docs/fault-tolerance.md).
    ``nvml``: the NVML the GPU probes call (default: ``pynvml``; tests pass a fake, with
    a ``machine`` whose GPUs it describes). ``supervisor_prefix``: a command that execs
    each supervisor (the Ray node agent's ``setpriv --pdeathsig TERM``, which ties the
    supervisors to the agent's life). ``disk_thresholds``: free fractions of the
    job directories' filesystem below which the disk probe warns and is critical.
    ``log_max``: bytes each worker's log may have; past them its oldest half is dropped
    (:mod:`gpuyard.executors.local.logcap`; 0: no cap).
    ``env_allow``: names and globs of the pool's environment its jobs inherit beside
    :data:`~gpuyard.models.environment.DEFAULT_JOB_ENV_ALLOW`. ``default_memory``: the
    limit of a worker whose job names no memory (:func:`memory_default`: ``50%`` of its
    node's, a size, ``0`` for none). ``private_tmp``: a private /tmp, /var/tmp and
    /dev/shm per worker (a pool run by root only). ``gpu_device_files`` (with
    ``{index}``) and ``gpu_shared_files``: the device files of the machine's GPUs, hidden
    from workers not given them (:mod:`gpuyard.models.sandbox`). ``images``: the node's
    image cache and the registry it pulls from, for jobs in images (docs/images.md).
    """

    name = "local"

    def __init__(
        self,
        home: Path,
        *,
        virtual_nodes: int = 0,
        gpus_per_node: int | None = None,
        cpus_per_node: float | None = None,
        memory_per_node: int | None = None,
        machine: Machine | None = None,
        pids_limit: int = DEFAULT_PIDS_LIMIT,
        pids_ceiling: int | None = None,
        memory_ceiling: int = 0,
        isolation: cgroups.Isolation | None = None,
        inject_faults: Mapping[str, str] | None = None,
        nvml: NvmlLibrary | None = None,
        disk_thresholds: DiskThresholds = DISK_THRESHOLDS,
        gpu_meter: GpuMeter | None = None,
        supervisor_prefix: Sequence[str] = (),
        log_max: int = DEFAULT_LOG_MAX,
        env_allow: Sequence[str] = (),
        default_memory: str = "0",
        private_tmp: bool = False,
        gpu_device_files: str = DEFAULT_GPU_DEVICE_FILES,
        gpu_shared_files: Sequence[str] = DEFAULT_GPU_SHARED_FILES,
        images: NodeImages | None = None,
        checkpoint_memory: str = "0",
        data: NodeData | None = None,
    ) -> None:
        self.home = home
        self.images = images
        """Where workers in an image get it (None: this pool has no registry)."""
        self.data = data or NodeData(home / "data-cache")
        """Each node's copies of dataset versions (docs/datasets.md, "Data preparation")."""
        self.jobs_root = home / "jobs"
        self.supervisors_root = home / "supervisors"
        self._init_environment(env_allow, inject_faults, supervisor_prefix)
        self._init_sandbox(default_memory, private_tmp, gpu_device_files, gpu_shared_files)
        self.disk_thresholds = disk_thresholds
        self._gpus = GpuProber(nvml)
        self.machine = machine or detect_machine()
        self._init_limits(pids_limit, pids_ceiling, memory_ceiling, log_max)
        self._name = f"gpuyard-{hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:20]}"
        self.isolation = isolation or cgroups.detect(self._name)
        self._init_home()
        self.checkpoint_memory = parse_memory_default(checkpoint_memory)
        self.node_memory = NodeMemory(
            home / "memory", enabled=self.switch_users and self.checkpoint_memory != "0"
        )
        self._init_nodes(virtual_nodes, gpus_per_node, cpus_per_node, memory_per_node)
        self.gpu_meter = gpu_meter or (NvmlMeter() if self.machine.gpus else NoGpus())
        self._init_supervision()

    def _init_environment(
        self,
        env_allow: Sequence[str],
        inject_faults: Mapping[str, str] | None,
        supervisor_prefix: Sequence[str],
    ) -> None:
        """What each worker inherits, and how its supervisor is started."""
        self.env_allow = tuple(env_allow)
        self.inject_faults = dict(inject_faults or {})
        self.supervisor_prefix = tuple(supervisor_prefix)

    def _init_sandbox(
        self,
        default_memory: str,
        private_tmp: bool,
        gpu_device_files: str,
        gpu_shared_files: Sequence[str],
    ) -> None:
        """A worker's default memory and what its sandbox hides (:meth:`_sandbox`)."""
        self.default_memory = parse_memory_default(default_memory)
        self.private_tmp = private_tmp
        self.gpu_device_files = gpu_device_files
        self.gpu_shared_files = tuple(gpu_shared_files)
        self._sandbox_ok: bool | None = None

    def _init_limits(
        self, pids_limit: int, pids_ceiling: int | None, memory_ceiling: int, log_max: int
    ) -> None:
        """Each worker's process limit and log cap, and the ceilings of all workers together."""
        self.pids_limit = pids_limit
        self.pids_ceiling = cgroups.default_pids_ceiling() if pids_ceiling is None else pids_ceiling
        self.memory_ceiling = memory_ceiling
        if 0 < log_max < logcap.MIN_CAP:
            raise ValueError(f"a log cap is at least {logcap.MIN_CAP} bytes")
        self.log_max = log_max

    def _init_home(self) -> None:
        """Whose accounts workers may run as, and the home secured for them if it exists."""
        self.switch_users = os.geteuid() == 0
        """Whether workers can run as accounts other than the pool's (only root can)."""
        self._accounts = Accounts(self.home / "accounts.lock")
        self._home_secured = False
        if self.home.is_dir():
            self._secure_home()

    def _init_nodes(
        self,
        virtual_nodes: int,
        gpus_per_node: int | None,
        cpus_per_node: float | None,
        memory_per_node: int | None,
    ) -> None:
        """The nodes this machine is offered as (:func:`layout`), labelled with what each
        worker is held to."""
        self._nodes = layout(
            self.machine,
            virtual_nodes,
            gpus_per_node,
            cpus_per_node,
            memory_per_node,
            self.enforced().to_labels(),
        )
        self._by_name = {n.name: n for n in self._nodes}

    def _init_supervision(self) -> None:
        """What this executor tracks of the supervisors it starts and hears from."""
        self._boot = procfs.boot_id()
        self._watcher = procfs.Watcher()
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._known: dict[int, tuple[int, str]] = {}
        """Live supervisors seen in launches and handles (pid -> start time, directory): whose
        pokes to believe."""
        self._lock = threading.Lock()
        self._listener: Listener | None = None

    # -- nodes and paths ------------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        return list(self._nodes)

    def enforced(self) -> NodeIsolation:
        """What each worker of this machine is held to, exactly (``gpuyard up`` prints it;
        the nodes' labels carry it to ``gpuyard nodes`` and the API)."""
        iso = self.isolation
        mode = IsolationMode(iso.mode)
        if mode is IsolationMode.NONE:
            kill = KillMethod.ENVIRONMENT
        elif mode is IsolationMode.CGROUP_V2 and iso.whole_kill:
            kill = KillMethod.CGROUP_KILL
        else:
            kill = KillMethod.FREEZER
        enforced = [c for c in CONTROLLERS if c in iso.controllers]
        return NodeIsolation(
            mode=mode,
            enforced=enforced,
            kill=kill,
            pids_ceiling=self.pids_ceiling if "pids" in enforced else 0,
            memory_ceiling=self.memory_ceiling if "memory" in enforced else 0,
        )

    def warnings(self) -> list[str]:
        """What this executor cannot enforce on this machine (empty when all is well)."""
        warnings = list(self.isolation.warnings)
        if self.private_tmp and not self._can_sandbox():
            warnings.append(
                "workers share /tmp, /var/tmp and /dev/shm, and can open every GPU's device "
                "file: this pool cannot give them a mount namespace of their own (it needs "
                "root with CAP_SYS_ADMIN)"
            )
        return warnings

    @property
    def interface(self) -> str:
        # Virtual nodes live on loopback addresses; a single node reaches itself there too.
        return "lo"

    def tools(self) -> Tools:
        return Tools(
            python=sys.executable, rexec=str(REXEC), slurm=str(SLURMSTEP), check=str(NODECHECK)
        )

    def base_env(self, node: str) -> Mapping[str, str]:
        # An allowlist, never the whole environment: the pool's may hold secrets
        # (models/environment.py, docs/security.md "What the job gets").
        env = inherited_environment(os.environ, self.env_allow)
        if fault := self.inject_faults.get(node):
            env[CHECK_INJECT_VARIABLE] = fault
        return env

    def job_dir(self, job_id: int) -> str:
        return str(self.jobs_root / str(job_id))

    def worker_dir(self, job_id: int, attempt: int, rank: int) -> Path:
        """What the job sees: its log and control directory."""
        return self.jobs_root / str(job_id) / "attempts" / str(attempt) / f"worker-{rank}"

    def supervisor_dir(self, key: WorkerKey) -> Path:
        """The supervisor's own files; the job is never pointed here."""
        return self.supervisors_root / f"{key.job_id}-{key.attempt}-{key.rank}"

    def _command(self, key: WorkerKey) -> list[str]:
        """The supervisor's argv after the interpreter: how its process is recognized."""
        return ["-I", "-S", str(SUPERVISOR), str(self.supervisor_dir(key))]

    # -- launch ---------------------------------------------------------------------------

    def launch(self, request: WorkerLaunch) -> Handle:
        return self._launch(request, None)

    def launch_terminal(
        self, request: WorkerLaunch, *, rows: int, cols: int
    ) -> tuple[Handle, PtyTerminal]:
        terminal, slave = open_terminal(rows, cols)
        try:
            handle = self._launch(request, slave)
        except BaseException:
            terminal.close()
            raise
        finally:
            os.close(slave)  # the supervisor has its own copy now
        return handle, terminal

    def _launch(self, request: WorkerLaunch, terminal: int | None) -> Handle:
        """Launch ``request``; ``terminal``: the slave side of its terminal, for its
        supervisor's stdin."""
        key = request.key
        wd = self.worker_dir(key.job_id, key.attempt, key.rank)
        sdir = self.supervisor_dir(key)
        try:
            account = self._account(request.run_as)
            self._secure_home()
            if account is None:
                self._make_dirs(key)
            else:
                self._make_owned_dirs(key, account)
            self.supervisors_root.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                sdir.mkdir(mode=0o700)  # exactly one launch of a worker gets past this
            except FileExistsError:
                if terminal is not None:
                    raise LaunchError(
                        f"{key} was launched before; its terminal cannot be had again"
                    ) from None
                return self._adopt(request)  # launched before (a retry after a crash)
            try:
                return self._start(request, wd, sdir, account, terminal)
            except BaseException:
                shutil.rmtree(sdir, ignore_errors=True)  # so that a retry starts it
                raise
        except AccountError as exc:
            raise LaunchError(f"cannot launch {key} on {request.node}: {exc}") from None
        except (OSError, untrusted.Unreadable) as exc:
            raise LaunchError(f"cannot launch {key} on {request.node}: {exc}") from exc

    # -- accounts and directories ---------------------------------------------------------

    def _account(self, run_as: str | None) -> Account | None:
        """The account to switch to; None to run as the pool's own user."""
        if run_as is None:
            return None
        if not self.switch_users:
            if run_as == _own_name():
                return None
            raise AccountError(
                f"cannot run the job as the OS account {run_as!r}: only a pool run by root can "
                "switch users (GPUYARD_RUN_AS=pool runs jobs as the pool's own user)"
            )
        return self._accounts.resolve(run_as)

    def _secure_home(self) -> None:
        """The home lets others pass through and nothing more (0711); a pool that cannot run
        jobs as other accounts may keep it tighter (0700). Its ``jobs`` folder likewise."""
        if self._home_secured:
            return
        self.home.mkdir(parents=True, exist_ok=True)
        self.jobs_root.mkdir(exist_ok=True)
        for path in (self.home, self.jobs_root):
            mode = stat.S_IMODE(os.stat(path).st_mode)
            wanted = (mode & 0o711) | (0o011 if self.switch_users else 0)
            if mode != wanted:
                os.chmod(path, wanted)
        self._home_secured = True

    def _make_dirs(self, key: WorkerKey) -> None:
        """A worker's directories, all the pool user's (a job that runs as the pool)."""
        job_dir = Path(self.job_dir(key.job_id))
        job_dir.mkdir(mode=0o700, exist_ok=True)
        (self.worker_dir(key.job_id, key.attempt, key.rank) / "control").mkdir(
            parents=True, exist_ok=True
        )
        (job_dir / "outputs").mkdir(exist_ok=True)
        (job_dir / "checkpoints").mkdir(exist_ok=True)

    def _make_owned_dirs(self, key: WorkerKey, account: Account) -> None:
        """A worker's directories when it runs as ``account``: root's, which it can read but
        not change, down to the worker's directory; its own (0700) where the job writes. Each
        step opens the last without following a link, inside directories the job cannot
        change, so no name the job controls can send root elsewhere."""
        theirs = (account.uid, account.gid)
        opened: list[int] = []

        def make(parent: int, name: str, mode: int, owner: tuple[int, int] | None = None) -> int:
            opened.append(untrusted.make_dir(parent, name, mode, owner))
            return opened[-1]

        try:
            opened.append(os.open(self.home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
            jobs = make(opened[0], self.jobs_root.name, 0o711)
            job = make(jobs, str(key.job_id), 0o750, (os.geteuid(), account.gid))
            for name in ("outputs", "checkpoints"):
                make(job, name, 0o700, theirs)
            attempt = make(make(job, "attempts", 0o755), str(key.attempt), 0o755)
            worker = make(attempt, f"worker-{key.rank}", 0o755)
            for name in ("control", "workspace"):
                make(worker, name, 0o700, theirs)
        finally:
            for fd in opened:
                os.close(fd)

    def unreachable_home(self) -> str:
        """Why other OS accounts cannot reach this pool's home ("" when they can): every
        directory above it must let them pass (search permission for others)."""
        home = self.home.absolute()
        for directory in home.parents:
            try:
                info = os.stat(directory)
            except OSError:
                continue
            if not info.st_mode & stat.S_IXOTH:
                return (
                    f"jobs cannot run as their owners' OS accounts: those cannot reach the pool's "
                    f"home {home}, since {directory} is mode {stat.S_IMODE(info.st_mode):04o} "
                    "(no passing through for other accounts); choose a home every account can "
                    "pass through (GPUYARD_HOME=/var/lib/gpuyard, say)"
                )
        return ""

    def _start(
        self,
        request: WorkerLaunch,
        wd: Path,
        sdir: Path,
        account: Account | None,
        terminal: int | None = None,
    ) -> Handle:
        key = request.key
        hidden = self._hidden_devices(request)
        image = self._image(request, wd) if request.image is not None else None
        try:
            sandbox = None if image is not None else self._sandbox(request, sdir, hidden)
            cgroup = self._cgroup(request, hidden)
            spec = self._supervisor_spec(request, wd, account, sandbox, cgroup, terminal=terminal)
            spec, image = self._with_node_memory(request, account, spec, image)
            if image is not None:
                spec = image.applied(spec)
            fd = os.open(sdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                untrusted.write_file(fd, "spec.json", spec.model_dump_json().encode(), mode=0o600)
            finally:
                os.close(fd)
            identity = self._spawn_supervisor(key, sdir, terminal)
        except BaseException:
            if image is not None and self.images is not None:
                self.images.release(image.digest, key)
            raise
        return {
            "image": None if image is None else [image.digest, key.job_id, key.attempt, key.rank],
            "dir": str(wd),
            "log": str(wd / "log"),
            "supervisor": str(sdir),
            "pid": identity.pid,
            "start_time": identity.start_time,
            "boot_id": identity.boot_id,
            "cgroup": None if cgroup is None else cgroup.to_json(),
            "spawned_at": time.time(),
            **_placed(request),
        }

    def _with_node_memory(
        self,
        request: WorkerLaunch,
        account: Account | None,
        spec: SupervisorSpec,
        image: _ImageLaunch | None,
    ) -> tuple[SupervisorSpec, _ImageLaunch | None]:
        """The job's node memory for the checkpoint service, in the worker's environment
        (and mounted into its image); unchanged where it gets none."""
        info = self._by_name.get(request.node) or self._nodes[0]
        size = memory_default(self.checkpoint_memory, info.memory)
        path = self.node_memory.ensure(request.node, request.key.job_id, size, account)
        if path is None:
            return spec, image
        env = {**spec.env, MEMORY_DIR_VARIABLE: str(path), MEMORY_LIMIT_VARIABLE: str(size)}
        if image is not None:
            mount = ImageMountSpec(source=str(path), target=str(path))
            image = replace(
                image, spec=image.spec.model_copy(update={"mounts": [*image.spec.mounts, mount]})
            )
        return spec.model_copy(update={"env": env}), image

    def memory_jobs(self) -> set[int]:
        return self.node_memory.jobs()

    def drop_memory(self, job_id: int) -> None:
        self.node_memory.drop(job_id)

    def _cgroup(self, request: WorkerLaunch, hidden: Sequence[str]) -> cgroups.Cgroup | None:
        """The worker's cgroup with its limits (None where this machine has no cgroups)."""
        key = request.key
        return self.isolation.cgroup(
            f"{key.job_id}-{key.attempt}-{key.rank}",
            memory=request.limits.memory or self._default_memory(request.node),
            mcpus=request.limits.mcpus,
            pids=self.pids_limit,
            ceiling_pids=self.pids_ceiling,
            ceiling_memory=self.memory_ceiling,
            deny_devices=_device_rules(hidden),
        )

    def _supervisor_spec(
        self,
        request: WorkerLaunch,
        wd: Path,
        account: Account | None,
        sandbox: SandboxSpec | None,
        cgroup: cgroups.Cgroup | None,
        *,
        terminal: int | None,
    ) -> SupervisorSpec:
        """What the supervisor of ``request`` is told to run, where, and held to what."""
        key = request.key
        return SupervisorSpec(
            job=key.job_id,
            attempt=key.attempt,
            rank=key.rank,
            argv=list(request.argv),
            env=_worker_env(request, wd, account, sandbox, cgroup),
            cwd=request.cwd,
            grace=request.grace,
            log=str(wd / "log"),
            log_max=self.log_max,
            files={p: FileSpec(content=f.content, mode=f.mode) for p, f in request.files.items()},
            binds=[
                BindSpec(target=b.target, source=b.source, readonly=b.readonly, held=b.held)
                for b in request.binds
            ],
            notify=self._name,
            cgroup=None if cgroup is None else CgroupSpec.model_validate(cgroup.to_json()),
            account=None
            if account is None
            else AccountSpec(
                name=account.name, uid=account.uid, gid=account.gid, groups=list(account.groups)
            ),
            workspace=str(wd / "workspace"),
            job_dir=self.job_dir(key.job_id),
            terminal=terminal is not None,
            sandbox=sandbox,
        )

    def _spawn_supervisor(
        self, key: WorkerKey, sdir: Path, terminal: int | None
    ) -> procfs.Identity:
        """Start the supervisor of ``key`` in a session of its own, and remember it."""
        with open(sdir / "supervisor.err", "ab") as err:
            proc = subprocess.Popen(
                [*self.supervisor_prefix, sys.executable, *self._command(key)],
                stdin=subprocess.DEVNULL if terminal is None else terminal,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
                close_fds=True,
            )
        # Our child, not reaped yet: its /proc entry is there even if it has already exited.
        identity = procfs.Identity.of(proc.pid, self._boot)
        if identity is None:
            raise LaunchError(f"cannot read the start time of supervisor {proc.pid}")
        with self._lock:
            self._children[proc.pid] = proc
            self._known[proc.pid] = (identity.start_time, str(sdir))
        return identity

    # -- sandbox ----------------------------------------------------------------------------

    def _default_memory(self, node: str) -> int:
        info = self._by_name.get(node) or self._nodes[0]  # tests name their one node freely
        return memory_default(self.default_memory, info.memory)

    def _can_sandbox(self) -> bool:
        """Whether workers can have a mount namespace with a tmpfs of their own (root with
        CAP_SYS_ADMIN: not root in a container without it), tried once in a child."""
        if self._sandbox_ok is None:
            self._sandbox_ok = self.switch_users and self._probe_sandbox()
        return self._sandbox_ok

    @staticmethod
    def _probe_sandbox() -> bool:
        probe = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _SANDBOX_PROBE],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            check=False,
        )
        return probe.returncode == 0

    def _hidden_devices(self, request: WorkerLaunch) -> list[str]:
        """The device files of the machine's GPUs that ``request`` was not given, and the
        shared ones when it was given none (those that exist here)."""
        if len(self._nodes[0].gpu_devices) * len(self._nodes) > len(self.machine.gpus):
            return []  # virtual GPUs: no device files behind them
        by_uuid = {g.uuid: g.index for g in self.machine.gpus}
        given = [
            int(d) if d.isdigit() else by_uuid.get(d, -1)
            for d in request.env.get("CUDA_VISIBLE_DEVICES", "").split(",")
            if d
        ]
        indices = max((g.index for g in self.machine.gpus), default=-1) + 1
        files = hidden_gpu_files(self.gpu_device_files, indices, given, self.gpu_shared_files)
        return [f for f in files if os.path.lexists(f)]

    def _sandbox(self, request: WorkerLaunch, sdir: Path, hidden: list[str]) -> SandboxSpec | None:
        """The worker's mount namespace (a pool run by root only: it needs CAP_SYS_ADMIN)."""
        if not (self.private_tmp or hidden) or not self._can_sandbox():
            return None
        private = [d for d in PRIVATE_DIRS if os.path.isdir(d)] if self.private_tmp else []
        mask = ""
        if hidden:
            fd = os.open(sdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:  # what covers a hidden device file: nobody but root may open it
                untrusted.write_file(fd, "hidden", b"", mode=0)
            finally:
                os.close(fd)
            mask = str(sdir / "hidden")
        # What the worker needs of the host there: the pool's home (its job's files), its
        # working directory, and the Python and gpuyard its tools run (a checkout in /tmp).
        keep = kept_paths(private, [str(self.home.resolve()), request.cwd, *_INSTALLATION])
        return SandboxSpec(private=private, keep=keep, hide=hidden, mask=mask)

    # -- images -----------------------------------------------------------------------------

    def _image(self, request: WorkerLaunch, wd: Path) -> _ImageLaunch:
        """The image ``request`` runs in, pulled and pinned, and how its worker runs there."""
        wanted = request.image
        assert wanted is not None
        images = self._node_images(request.node, wanted.ref)
        with _image_errors(request.node, wanted.ref):
            cached = images.acquire(wanted.ref, request.key)
        memory = request.limits.memory or self._default_memory(request.node)
        job_dir = self.job_dir(request.key.job_id)
        try:
            spec = ImageSpec(
                rootfs=str(cached.rootfs),
                env=node_images.image_env(cached.config.environment(), wanted.path),
                workdir=wanted.workdir or cached.config.working_dir or str(wd / "workspace"),
                mounts=[
                    ImageMountSpec(source=job_dir, target=job_dir),
                    *(
                        ImageMountSpec(source=m.source, target=m.target, readonly=m.readonly)
                        for m in wanted.mounts
                    ),
                ],
                library=[ImageMountSpec(source=str(PACKAGE), target=node_images.LIBRARY_PACKAGE)],
                shm_size=node_images.shm_size(wanted.shm_size, memory),
                devices=self._visible_devices(request),
            )
            spec = self._with_driver(spec, request)
            argv = list(request.argv)
            if request.role.runs_job_command:
                argv = cached.config.argv(argv)
        except ValueError as exc:  # the image's config (a relative WorkingDir, say)
            images.release(cached.digest, request.key)
            raise LaunchError(f"image {wanted.ref} cannot be run: {exc}") from None
        yields = wanted.weak_env.intersection(spec.env)
        return _ImageLaunch(spec, argv, cached.digest, frozenset(yields))

    def _with_driver(self, spec: ImageSpec, request: WorkerLaunch) -> ImageSpec:
        """``spec`` with the GPU driver's files the node's CDI spec lists for the worker's GPUs
        (docs/images.md, "GPUs in an image"): none for a worker without GPUs or on virtual ones."""
        cdi = self.images.driver if self.images is not None else None
        gpus = _placed(request)["gpus"]
        if cdi is None or not gpus or not spec.devices:
            return spec
        edits = cdi.edits_for(gpus)
        same = [host for host, inside in edits.mounts if host == inside and os.path.exists(host)]
        moved = [
            ImageMountSpec(source=host, target=inside, readonly=True)
            for host, inside in edits.mounts
            if host != inside and os.path.exists(host)
        ]
        nodes = [n for n in edits.device_nodes if n not in spec.devices and os.path.exists(n)]
        return spec.model_copy(
            update={
                "driver": [*spec.driver, *same],
                "mounts": [*spec.mounts, *moved],
                "links": [*spec.links, *edits.links],
                "devices": [*spec.devices, *nodes],
            }
        )

    def pull_image(self, node: str, ref: str, *, pulling: Callable[[], None]) -> int:
        images = self._node_images(node, ref)
        with _image_errors(node, ref):
            return images.pull(ref, pulling=pulling)

    # -- data preparation -------------------------------------------------------------------

    def prepare_data(
        self,
        node: str,
        source: DataSource,
        *,
        job_id: int,
        progress: Callable[[int, int], None],
    ) -> PreparedData:
        if node not in self._by_name:
            raise LaunchError(f"node {node} is not one of this executor's")
        return self.data.prepare(node, source, job_id=job_id, progress=progress)

    def data_jobs(self) -> set[int]:
        return self.data.jobs()

    def data_held(self) -> dict[str, frozenset[int]]:
        # A copy's metadata is written once it is complete and verified: copies() lists
        # only those.
        held = {node: _versions(self.data.copies(node)) for node in self._by_name}
        return {node: versions for node, versions in held.items() if versions}

    def release_data(self, job_id: int) -> None:
        self.data.release(job_id)

    def sweep_data(self) -> None:
        self.data.sweep()

    def holds_image(self, node: str, ref: str) -> bool:
        """Whether ``node`` has the image of the pinned ``ref`` already."""
        images = self._node_images(node, ref)
        return images.cache.holds(ImageRef.parse(ref))

    def _node_images(self, node: str, ref: str) -> NodeImages:
        """The node's image cache, if it can run jobs in images at all."""
        if self.images is None:
            raise LaunchError(
                f"node {node} cannot pull image {ref}: it has no image registry (GPUYARD_REGISTRY)"
            )
        if not self._can_sandbox():
            raise LaunchError(
                f"node {node} cannot run jobs in images: the pool must run as root "
                "with the right to mount (docs/images.md)"
            )
        return self.images

    def _visible_devices(self, request: WorkerLaunch) -> list[str]:
        """The device files of the GPUs ``request`` was given, and the shared ones, that
        exist here (none for virtual GPUs)."""
        if len(self._nodes[0].gpu_devices) * len(self._nodes) > len(self.machine.gpus):
            return []
        hidden = set(self._hidden_devices(request))
        indices = max((g.index for g in self.machine.gpus), default=-1) + 1
        every = hidden_gpu_files(self.gpu_device_files, indices, [], self.gpu_shared_files)
        return [f for f in every if f not in hidden and os.path.exists(f)]

    def _release_image(self, handle: Handle) -> None:
        pinned = handle.get("image")
        if pinned and self.images is not None:
            digest, job, attempt, rank = pinned
            self.images.release(str(digest), WorkerKey(int(job), int(attempt), int(rank)))

    def _adopt(self, request: WorkerLaunch) -> Handle:
        """The handle of a worker launched before: its supervisor is the earliest-started
        process running its supervisor command (none if it has ended)."""
        key = request.key
        wd = self.worker_dir(key.job_id, key.attempt, key.rank)
        identity = self._find_supervisor(key)
        # Where this executor puts the worker's cgroup (not what spec.json says: a file).
        cgroup = self.isolation.cgroup(
            f"{key.job_id}-{key.attempt}-{key.rank}", memory=0, mcpus=0, pids=0
        )
        return {
            "dir": str(wd),
            "log": str(wd / "log"),
            "supervisor": str(self.supervisor_dir(key)),
            "pid": None if identity is None else identity.pid,
            "start_time": None if identity is None else identity.start_time,
            "boot_id": self._boot,
            "cgroup": None if cgroup is None else cgroup.to_json(),
            "spawned_at": time.time(),
            # The cache's pin of its image (on disk since its launch) goes when it ends.
            "image": _adopted_pin(request),
            **_placed(request),
        }

    def _find_supervisor(self, key: WorkerKey) -> procfs.Identity | None:
        """The live supervisor of ``key``, found by its command line. A handle without one is
        reported lost (and what is left of the worker killed), so a supervisor that has no
        exit record yet is looked for a little longer: one spawned a moment ago by another
        launch may not be seen by the first scan of a busy machine."""
        tails = [[sys.executable, *self._command(key)][1:]]
        if self.supervisor_prefix:
            # Caught between the prefix's start and its exec of the supervisor (same process).
            tails.append([*self.supervisor_prefix[1:], sys.executable, *self._command(key)])
        deadline = time.monotonic() + ADOPT_SEARCH
        while True:
            for tail in tails:
                identity = procfs.oldest_running(tail, self._boot)
                if identity is not None:
                    return identity
            if (
                time.monotonic() >= deadline
                or self._exit_record(str(self.supervisor_dir(key))) is not None
            ):
                return None
            time.sleep(0.02)

    # -- status ---------------------------------------------------------------------------

    def status(self, handles: Sequence[Handle]) -> list[WorkerStatus]:
        # The controller asks this for every running worker every pass: a running worker
        # costs a few dictionary lookups, and all of them one poll(2) of their pidfds.
        self._watcher.refresh()
        statuses: list[WorkerStatus] = []
        alive: dict[int, tuple[int, str]] = {}
        for handle in handles:
            pid, start = handle.get("pid"), handle.get("start_time")
            if (
                isinstance(pid, int)
                and isinstance(start, int)
                and handle.get("boot_id") == self._boot
                and self._watcher.running(pid, start)
            ):
                alive[pid] = (start, str(handle.get("supervisor")))
                statuses.append(_RUNNING)
            else:
                statuses.append(self._gone(handle, procfs.Identity.from_handle(handle)))
        with self._lock:
            self._known.update(alive)
        return statuses

    def _gone(self, handle: Handle, identity: procfs.Identity | None) -> WorkerStatus:
        if "supervisor" not in handle:
            return WorkerStatus(
                WorkerState.LOST,
                message="launched by an older gpuyard, whose worker files a job could forge; "
                "it is no longer watched",
            )
        if identity is not None:
            self._reap(identity.pid)
            with self._lock:
                self._known.pop(identity.pid, None)
        return self._ended(handle)

    def _ended(self, handle: Handle) -> WorkerStatus:
        """The supervisor is gone: believe its exit record only if nothing of the worker is
        left; otherwise kill what is left and report the worker lost."""
        sdir = str(handle["supervisor"])
        cgroup = cgroups.Cgroup.from_json(handle.get("cgroup"))
        self._release_image(handle)
        record = self._exit_record(sdir)
        if cgroup is not None:
            left = cgroup.kill()
            cgroup.remove()
            believed = isinstance(record, ExitRecord) and not left
        else:
            # Without a cgroup, processes that left the group may outlive a normal exit, so
            # what is left proves nothing; they are killed all the same.
            left = self._kill_marked(handle)
            believed = isinstance(record, ExitRecord)
        if isinstance(record, ExitRecord) and believed:
            return WorkerStatus(
                WorkerState.EXITED,
                exit_code=record.exit_code,
                signal=record.signal,
                escalated=record.escalated,
                finished_at=record.finished_at,
                message=record.message,
                cause=_cause(record),
            )
        if record is not None:
            self._reject_record(sdir)
        why = "the worker's supervisor ended without recording an exit"
        if isinstance(record, str):
            why += f" ({record})"
        elif isinstance(record, ExitRecord):
            why = (
                "the worker's supervisor ended while processes of the worker still ran (its "
                "exit record is not believed)"
            )
        err = self._tail(sdir, "supervisor.err")
        if err:
            why += f": {err}"
        if left:
            why += f"; {left} process{'es' if left > 1 else ''} of the worker killed"
        return WorkerStatus(WorkerState.LOST, message=why)

    def _exit_record(self, sdir: str) -> ExitRecord | str | None:
        """The exit record, None when absent, or why it cannot be read."""
        name = "exit.json"
        try:
            fd = untrusted.open_dir(str(self.home), sdir)
        except FileNotFoundError:
            return None
        except (untrusted.Unreadable, OSError) as exc:
            return f"{Path(sdir).name}: {exc}"
        try:
            raw = untrusted.read_file(fd, name, FILE_CAP)
        except untrusted.Unreadable as exc:
            return f"{name}: {exc}"
        finally:
            os.close(fd)
        if raw is None:
            return None
        try:
            return ExitRecord.model_validate_json(raw)
        except ValidationError as exc:
            return f"{name}: {exc.errors(include_url=False)[0]['msg']}"

    def _reject_record(self, sdir: str) -> None:
        """Set aside an exit record that was not believed, so that the next ``status`` does not
        believe it either once the cgroup is empty (nothing of the job is left to write it)."""
        with contextlib.suppress(OSError, untrusted.Unreadable):
            fd = untrusted.open_dir(str(self.home), sdir)
            try:
                os.rename("exit.json", "exit.json.rejected", src_dir_fd=fd, dst_dir_fd=fd)
            finally:
                os.close(fd)

    def _tail(self, sdir: str, name: str, limit: int = 500) -> str:
        try:
            fd = untrusted.open_dir(str(self.home), sdir)
        except (OSError, untrusted.Unreadable):
            return ""
        try:
            raw = untrusted.read_file(fd, name, 1 << 20) or b""
        except untrusted.Unreadable:
            return ""
        finally:
            os.close(fd)
        return raw.decode(errors="replace")[-limit:].strip()

    def _reap(self, pid: int) -> None:
        with self._lock:
            child = self._children.get(pid)
            if child is not None and child.poll() is not None:
                del self._children[pid]

    # -- stopping -------------------------------------------------------------------------

    def terminate(self, handle: Handle, grace: float) -> None:
        """Tell the supervisor to stop the worker: SIGTERM now, SIGKILL of its whole cgroup
        after ``grace``. Without a live supervisor there is nobody to wait for: the next
        ``status`` reports the worker lost and kills what is left."""
        identity = procfs.Identity.from_handle(handle)
        if identity is None or "supervisor" not in handle:
            return
        with contextlib.suppress(OSError, untrusted.Unreadable):
            fd = untrusted.open_dir(str(self.home), str(handle["supervisor"]))
            try:
                data = TerminateRequest(grace=max(0.0, grace)).model_dump_json().encode()
                untrusted.write_file(fd, "terminate.json", data)
            finally:
                os.close(fd)
        identity.send(signal.SIGTERM, self._boot)

    def kill(self, handle: Handle) -> None:
        """SIGKILL every process of the worker now: its whole cgroup, or without one every
        process started with its environment. A live supervisor then records the exit."""
        cgroup = cgroups.Cgroup.from_json(handle.get("cgroup"))
        if cgroup is not None:
            cgroup.kill()
        elif "dir" in handle:
            self._kill_marked(handle)

    def _kill_marked(self, handle: Handle) -> int:
        """Without a cgroup: SIGKILL every process that started with this worker's control
        directory in its environment (its process group, and children that left the group but
        kept the environment), and wait until they have ended. How many there were."""
        return procfs.kill_with_environ(_marker(handle), timeout=cgroups.KILL_TIMEOUT)

    def _members(self, handle: Handle) -> Callable[[int], bool]:
        """Whether a pid is a process of the worker: in its cgroup, or (without one) started
        with its environment."""
        cgroup = cgroups.Cgroup.from_json(handle.get("cgroup"))
        if cgroup is not None:
            members = set(cgroup.procs())
            return members.__contains__
        marker = _marker(handle)
        return lambda pid: procfs.environ_has(pid, marker)

    # -- usage ----------------------------------------------------------------------------

    def usage(self, handles: Sequence[Handle]) -> list[WorkerUsage | None]:
        """What each worker uses now (:mod:`gpuyard.executors.local.usage`): from its cgroup,
        or from its processes where it has none; None for a worker that cannot be read."""
        marker = {
            i: _marker(h)
            for i, h in enumerate(handles)
            if cgroups.Cgroup.from_json(h.get("cgroup")) is None and isinstance(h.get("dir"), str)
        }
        return worker_usages(handles, marker=marker, nodes=self._by_name, meter=self.gpu_meter)

    def node_usage(self) -> dict[str, NodeUsage]:
        """The machine as a whole when it is one node; a virtual node's GPUs only (its CPU
        and memory are its workers': the controller adds them up)."""
        if len(self._nodes) == 1 and "virtual" not in self._nodes[0].labels:
            node = self._nodes[0]
            return {node.name: machine_usage(node, self.gpu_meter)}
        found = {}
        for node in self._nodes:
            util, memory = node_gpus(node, self.gpu_meter)
            found[node.name] = NodeUsage(gpu_util=util, gpu_memory=memory)
        return found

    # -- the control directory ------------------------------------------------------------

    def notify(self, handle: Handle, notice: Notice) -> None:
        control = Path(handle["dir"]) / "control"
        content = PreemptFile(
            requested_at=notice.requested_at,
            deadline=notice.deadline,
            reason=notice.reason,
            by=notice.by,
        )
        try:
            fd = untrusted.open_dir(str(self.home), str(control))
        except FileNotFoundError:
            control.mkdir(parents=True, exist_ok=True)
            fd = untrusted.open_dir(str(self.home), str(control))
        try:
            untrusted.write_file(fd, "preempt.json", content.model_dump_json().encode())
            pids = listener_pids(fd, [])
        finally:
            os.close(fd)
        if not pids:
            return
        # A listener file can outlive its process (os._exit), pids are reused, and the job
        # writes these names: signal only processes of this worker.
        member = self._members(handle)
        for pid in pids:
            if member(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, getattr(signal, PREEMPT_SIGNAL))

    def signal(self, handle: Handle, signum: int, *, steps: bool) -> None:
        if "dir" not in handle:
            return
        member = self._members(handle)
        if steps:
            try:
                fd = untrusted.open_dir(str(self.home), str(Path(handle["dir"]) / "control"))
            except (FileNotFoundError, untrusted.Unreadable, OSError):
                return
            try:
                pids = listener_pids(fd, [], "steps")
            finally:
                os.close(fd)
        else:
            # The supervisor records the command's pid in its own directory (state.json),
            # not in the worker's: the job cannot write there.
            try:
                fd = untrusted.open_dir(str(self.home), str(handle.get("supervisor", "")))
            except (FileNotFoundError, untrusted.Unreadable, OSError):
                return
            try:
                raw = untrusted.read_file(fd, "state.json", FILE_CAP)
            except untrusted.Unreadable:
                raw = None
            finally:
                os.close(fd)
            try:
                pid = json.loads(raw or b"{}").get("pid")
            except (ValueError, AttributeError):
                pid = None
            pids = [pid] if isinstance(pid, int) and not isinstance(pid, bool) else []
        # The job writes these names and pids are reused: only processes of this worker.
        for pid in pids:
            if pid > 1 and member(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signum)

    def control(self, handles: Sequence[Handle]) -> list[ControlState]:
        return [
            read_control(str(self.home), str(Path(h["dir"]) / "control"))
            if "dir" in h
            else ControlState()
            for h in handles
        ]

    def slurm_steps(self, handle: Handle) -> list[SlurmStep]:
        if "dir" not in handle:
            return []
        return read_slurm_steps(str(self.home), str(Path(handle["dir"]) / "control"))

    def read_log(self, handle: Handle, offset: int, limit: int) -> tuple[bytes, int]:
        """Bytes from ``offset`` of the whole output, and its size: offsets count what was
        dropped from a capped log too (:mod:`logcap`); an offset that was dropped reads
        nothing (:meth:`log_start` says where the log now starts)."""
        start, data, size = self._read_log(handle, offset, limit)
        return (data, size) if start == offset else (b"", size)

    def log_start(self, handle: Handle) -> int:
        """The offset of the oldest byte of the log still kept (its drop marker, once the
        cap has dropped something)."""
        return self._read_log(handle, 0, 0)[0]

    def _read_log(self, handle: Handle, offset: int, limit: int) -> tuple[int, bytes, int]:
        path = Path(handle["log"])
        try:
            dir_fd = untrusted.open_dir(str(self.home), str(path.parent))
        except (OSError, untrusted.Unreadable):
            return offset, b"", 0
        try:
            for _ in range(10):  # a drop renames the file between our two reads: read again
                fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
                with os.fdopen(fd, "rb") as fh:
                    info = os.fstat(fh.fileno())
                    if not stat.S_ISREG(info.st_mode):
                        return offset, b"", 0
                    base = self._log_base(handle, info.st_ino)
                    if base < 0:
                        continue
                    fh.seek(max(0, offset - base))
                    return max(offset, base), fh.read(limit), base + info.st_size
        except OSError:
            pass
        finally:
            os.close(dir_fd)
        return offset, b"", 0

    def _log_base(self, handle: Handle, inode: int) -> int:
        sdir = handle.get("supervisor")
        if not sdir:
            return 0
        try:
            dir_fd = untrusted.open_dir(str(self.home), str(sdir))
        except (OSError, untrusted.Unreadable):
            return 0
        try:
            raw = untrusted.read_file(dir_fd, logcap.META, untrusted.CAP)
            meta = None if raw is None else json.loads(raw)
        except (untrusted.Unreadable, ValueError):
            return -1
        finally:
            os.close(dir_fd)
        return logcap.read_meta(meta, inode)

    def remove_job(self, job_id: int) -> None:
        self.node_memory.drop(job_id)
        shutil.rmtree(self.jobs_root / str(job_id), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            for sdir in self.supervisors_root.glob(f"{job_id}-*-*"):
                shutil.rmtree(sdir, ignore_errors=True)

    # -- health ---------------------------------------------------------------------------

    def inspect(self) -> dict[str, list[Finding]]:
        """Every node's health (docs/node-health.md). Virtual nodes are one machine: they
        share its heartbeat and its disk (looked at once), and each has its own address (the
        NIC probe) and its own GPUs."""
        beat = guarded(Probe.HEARTBEAT, self._heartbeat)
        space = guarded(Probe.DISK, self._disk)
        real = {n.name: n.gpu_devices for n in self._nodes if n.labels.get("gpu.kind") != "virtual"}
        virtual = [n.name for n in self._nodes if n.labels.get("gpu.kind") == "virtual"]
        gpus = self._gpus.inspect(real, virtual=virtual)
        found: dict[str, list[Finding]] = {}
        for node in self._nodes:
            link = guarded(Probe.NIC, functools.partial(nic, node.address))
            found[node.name] = [beat, space, link, *gpus.get(node.name, [])]
        return found

    def _disk(self) -> Finding:
        """The disk probe of the job directories' filesystem and the data cache's: the one
        with less free space (the same figure when they share one)."""
        found = [disk(path, self.disk_thresholds) for path in (self.jobs_root, self.data.root)]
        return min(found, key=lambda f: float(f.value) if f.value is not None else 1.0)

    def _heartbeat(self) -> Finding:
        """The local executor's heartbeat: it answers, and it can write what launching a
        worker writes first (:mod:`gpuyard.executors.probes.host`)."""
        try:
            self._secure_home()
        except OSError as exc:
            return Finding(
                probe=Probe.HEARTBEAT,
                status=ProbeStatus.CRITICAL,
                value="unwritable",
                message=f"cannot make the pool's home {self.home}: {exc.strerror or exc}",
            )
        return heartbeat(self.supervisors_root)

    # -- notifications --------------------------------------------------------------------

    def set_wakeup(self, callback: Callable[[WorkerKey | None], None]) -> None:
        """Listen for supervisors' pokes and call ``callback`` with the worker each names."""
        if self._listener is not None:
            return
        try:
            self._listener = Listener(
                self._name,
                callback,
                is_supervisor=self._is_supervisor,
                on_exit=self._reap,
            )
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            # Another process listens for this home; we fall back to polling.

    def _is_supervisor(self, pid: int, key: WorkerKey) -> bool:
        """Whether process ``pid`` is the supervisor of worker ``key``: the one this executor
        knows, or (for a worker it has not seen yet) a process running its command."""
        with self._lock:
            known = self._known.get(pid)
        if known is not None:
            start, sdir = known
            return sdir == str(self.supervisor_dir(key)) and procfs.start_time(pid) == start
        return procfs.cmdline(pid)[1:] == self._command(key)

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._watcher.close()
        self._gpus.close()
        self.gpu_meter.close()
        self.isolation.remove_parents()  # only if no worker's cgroup is left in them


def _versions(copies: Iterable[CachedCopy]) -> frozenset[int]:
    """The version ids of a node's copies."""
    return frozenset(v for c in copies if (v := copy_version(c.key)) is not None)


def _own_name() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return ""


def _identity(account: Account | None, workspace: Path) -> dict[str, str]:
    """HOME, USER and LOGNAME of a worker, unless its job sets them: its account's (HOME its
    workspace, which only it can write), or the pool's own."""
    if account is None:
        return {k: os.environ[k] for k in IDENTITY if k in os.environ}
    return {"HOME": str(workspace), "USER": account.name, "LOGNAME": account.name}


_SANDBOX_PROBE = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
ok = libc.unshare(0x00020000) == 0 and libc.mount(None, b"/", None, (1 << 18) | 16384, None) == 0
ok = ok and libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, None) == 0
sys.exit(0 if ok else 1)
"""
"""Run in a child of its own: a private mount namespace, then a tmpfs in it (gone with it)."""
_INSTALLATION = tuple(
    {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, Path(__file__).parents[3])}
)
"""Where this Python and gpuyard live: the tools a worker runs (``Tools``) are there."""


def _device_rules(files: Sequence[str]) -> list[str]:
    """``devices.deny`` rules for the character devices among ``files``."""
    rules = []
    for path in files:
        with contextlib.suppress(OSError):
            info = os.stat(path)
            if stat.S_ISCHR(info.st_mode):
                rules.append(f"c {os.major(info.st_rdev)}:{os.minor(info.st_rdev)} rwm")
    return rules


def _worker_env(
    request: WorkerLaunch,
    wd: Path,
    account: Account | None,
    sandbox: SandboxSpec | None,
    cgroup: cgroups.Cgroup | None,
) -> dict[str, str]:
    """The worker's environment: its identity, its launch's env, and its control directory."""
    env = dict(request.env)
    isolated = (sandbox is not None and sandbox.hide) or (cgroup and cgroup.deny_devices)
    if isolated and env.get("CUDA_VISIBLE_DEVICES"):
        # Inside, CUDA numbers the GPUs whose files it can open from 0.
        env["CUDA_VISIBLE_DEVICES"] = renumbered_devices(env["CUDA_VISIBLE_DEVICES"].split(","))
    # The control directory is where this executor reads: the job is told so.
    return {
        **_identity(account, wd / "workspace"),
        **env,
        CONTROL_DIR_VARIABLE: str(wd / "control"),
    }


@dataclass(frozen=True)
class _ImageLaunch:
    """A worker's image: what its supervisor is told, its command, the image's digest."""

    spec: ImageSpec
    argv: list[str]
    digest: str
    yields: frozenset[str] = frozenset()
    """The job's variables that give way to the image's ``Env`` (which sets them)."""

    def applied(self, spec: SupervisorSpec) -> SupervisorSpec:
        """``spec`` run in the image: its command with the image's ENTRYPOINT, its GPUs
        numbered from 0 (only their device files are there), the job's variables that give
        way to the image's left out (the supervisor sets the image's below the rest)."""
        env = {k: v for k, v in spec.env.items() if k not in self.yields}
        if self.spec.devices and env.get("CUDA_VISIBLE_DEVICES"):
            env["CUDA_VISIBLE_DEVICES"] = renumbered_devices(env["CUDA_VISIBLE_DEVICES"].split(","))
        return spec.model_copy(update={"image": self.spec, "argv": self.argv, "env": env})


def _placed(request: WorkerLaunch) -> Handle:
    """Where the worker runs, for its usage: its node and the GPUs it was given."""
    visible = request.env.get("CUDA_VISIBLE_DEVICES", "")
    return {"node": request.node, "gpus": [d for d in visible.split(",") if d]}


def _adopted_pin(request: WorkerLaunch) -> list[str | int] | None:
    """The image pin of a worker launched before this executor started: its image was pinned
    to a digest at submission, and the node's cache pinned that digest for it at launch."""
    if request.image is None:
        return None
    digest = ImageRef.parse(request.image.ref).digest
    key = request.key
    return None if digest is None else [digest, key.job_id, key.attempt, key.rank]


def _marker(handle: Handle) -> str:
    """The environment entry every process of the worker starts with (set at launch)."""
    return f"{CONTROL_DIR_VARIABLE}={Path(handle['dir']) / 'control'}"


def _cause(record: ExitRecord) -> str:
    if record.oom_kills:
        limit = f"limit {format_bytes(record.memory_limit)}" if record.memory_limit else "no limit"
        return f"out of memory: {limit}"
    if record.pids_limit_hits:
        return f"reached its limit of {record.pids_limit} processes (a fork failed)"
    return ""


@contextlib.contextmanager
def _image_errors(node: str, ref: str) -> Iterator[None]:
    """An image that cannot be had as a launch error; a registry that cannot be reached as
    one that may pass (the job waits; docs/images.md#pulling)."""
    try:
        yield
    except RegistryUnavailable as exc:
        raise LaunchDeferred(f"waiting to pull image {ref} on {node}: {exc}") from None
    except ImageError as exc:
        raise LaunchError(f"cannot get image {ref} on {node}: {exc}") from None
