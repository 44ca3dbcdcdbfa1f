"""The executor interface: what the controller needs from whatever runs worker processes.

An executor presents nodes, launches one worker per (job, attempt, rank) under a supervisor,
reports each worker's status, delivers stop signals, serves log bytes, and measures what
workers and nodes use (CPU, memory, GPUs; :mod:`gpuyard.models.usage`). Handles are plain
JSON-able dicts that the controller stores with the worker, so that a restarted control plane
can adopt workers it did not launch. Every method must be safe to call again after a crash:
``launch`` of a worker that already runs returns its handle instead of starting a second copy.

The data that crosses this interface (launches, statuses, notices) lives in
:mod:`gpuyard.models.worker`, so that executors depend on the models only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from gpuyard.models.dataprep import DataSource, PreparedData
from gpuyard.models.health import Finding
from gpuyard.models.usage import NodeUsage, WorkerUsage
from gpuyard.models.worker import (
    ControlState,
    Handle,
    NodeInfo,
    Notice,
    SlurmStep,
    Tools,
    WorkerKey,
    WorkerLaunch,
    WorkerStatus,
)

__all__ = ["DataMismatch", "DataNoRoom", "Executor", "LaunchDeferred", "LaunchError", "Terminal"]


class LaunchError(Exception):
    """A worker could not be launched; the message says why."""


class LaunchDeferred(LaunchError):
    """A worker cannot be launched yet, for a reason that may pass (its image's registry
    cannot be reached): its job waits with the message as its reason and is tried again,
    failing only once the admin's timeout has passed (docs/images.md#pulling)."""


class DataMismatch(LaunchError):
    """A dataset version's files differ from its manifest (a file changed under the
    version): the job's data preparation fails, the message naming the file."""


class DataNoRoom(LaunchError):
    """A node had no room for a copy of a dataset version: that node's copy fails (and is
    removed); nothing about the node is cordoned for it (docs/datasets.md)."""


class Terminal(Protocol):
    """The terminal of a worker launched with one (:meth:`Executor.launch_terminal`), from the
    side that relays it: a non-blocking descriptor to read the worker's output from and write
    its input to (an end-of-file or EIO once its processes have all let go of it)."""

    def fileno(self) -> int: ...

    def resize(self, rows: int, cols: int) -> None:
        """Tell the worker's foreground processes the terminal's new size (SIGWINCH)."""
        ...

    def close(self) -> None: ...


class Executor(Protocol):
    name: str

    @property
    def interface(self) -> str:
        """The network interface that carries the nodes' addresses (eth0 on a cluster, lo for
        virtual nodes); MPICH's Hydra needs to be told."""
        ...

    def tools(self) -> Tools: ...

    def nodes(self) -> list[NodeInfo]: ...

    def base_env(self, node: str) -> Mapping[str, str]:
        """The environment a worker on ``node`` starts from, before the job's own."""
        ...

    def job_dir(self, job_id: int) -> str:
        """The job's directory (outputs, checkpoints) as workers see it."""
        ...

    def pull_image(self, node: str, ref: str, *, pulling: Callable[[], None]) -> int:
        """Have ``node`` hold the image ``ref`` (a pinned reference) before its workers
        start: calls ``pulling`` first when it must be pulled, and returns the bytes it
        pulled (0: it was already there). Raises :class:`LaunchDeferred` while its registry
        cannot be reached, :class:`LaunchError` when the image cannot be had at all."""
        ...

    def prepare_data(
        self,
        node: str,
        source: DataSource,
        *,
        job_id: int,
        progress: Callable[[int, int], None],
    ) -> PreparedData:
        """Have ``node`` hold a verified copy of a dataset version on its fast storage, pinned
        for job ``job_id`` until :meth:`release_data`; ``progress(done, total)`` is called as
        bytes are copied (never when the copy was there). Raises :class:`DataMismatch` when a
        file differs from the manifest, :class:`DataNoRoom` when the node has no room, and
        :class:`LaunchError` when it cannot prepare data at all (docs/datasets.md, "Data
        preparation")."""
        ...

    def data_jobs(self) -> set[int]:
        """The jobs pinning a dataset copy on some node."""
        ...

    def data_held(self) -> dict[str, frozenset[int]]:
        """Per node, the ids of the dataset versions it holds a complete, verified copy of
        (a node holding none may be left out): what placement prefers and queue prediction
        counts (docs/datasets.md, "Data preparation")."""
        ...

    def release_data(self, job_id: int) -> None:
        """Drop the job's pins of dataset copies (it has ended): the copies' last use."""
        ...

    def sweep_data(self) -> None:
        """Drop copies unused for the retention, then the least recently used ones past the
        cache's cap."""
        ...

    def launch(self, request: WorkerLaunch) -> Handle: ...

    def launch_terminal(
        self, request: WorkerLaunch, *, rows: int, cols: int
    ) -> tuple[Handle, Terminal]:
        """Launch a worker whose command runs on a new terminal of ``rows`` x ``cols`` (its
        controlling terminal, its stdin, stdout and stderr), for an interactive shell. Unlike
        :meth:`launch` it never adopts: a worker launched before raises LaunchError (its
        terminal cannot be had again)."""
        ...

    def status(self, handles: Sequence[Handle]) -> list[WorkerStatus]: ...

    def terminate(self, handle: Handle, grace: float) -> None:
        """SIGTERM now, SIGKILL after ``grace`` seconds unless it has exited."""
        ...

    def kill(self, handle: Handle) -> None:
        """SIGKILL the worker's whole process group now."""
        ...

    def notify(self, handle: Handle, notice: Notice) -> None:
        """Raise the preemption notice: the flag file in the worker's control directory and
        the notice signal to the worker's processes that registered for it."""
        ...

    def signal(self, handle: Handle, signum: int, *, steps: bool) -> None:
        """Send ``signum`` to the worker's job steps (``steps``: the processes that registered
        in its control directory's ``steps/``, which are Slurm's ``srun``), or to its main
        process (the batch shell of a Slurm batch job). Best effort: a worker that has ended
        gets nothing."""
        ...

    def slurm_steps(self, handle: Handle) -> list[SlurmStep]:
        """The ``srun`` steps a Slurm batch job's worker recorded (``control/slurm-steps``),
        by step id; empty for any other worker. Read as untrusted input."""
        ...

    def control(self, handles: Sequence[Handle]) -> list[ControlState]:
        """What each worker's runtime wrote to its control directory (ack, checkpoint, …)."""
        ...

    def usage(self, handles: Sequence[Handle]) -> list[WorkerUsage | None]:
        """What each worker uses now, in the order of ``handles``: CPU seconds so far (a
        counter), memory in use, and GPU figures where it has real GPUs and a driver. None for
        a worker that cannot be measured (ended, its cgroup gone); one such worker never makes
        the call raise."""
        ...

    def node_usage(self) -> dict[str, NodeUsage]:
        """What each node uses now, as far as the executor can measure a node as a whole;
        figures it cannot (a virtual node's CPU and memory) are None, and the caller adds up
        the node's workers for them."""
        ...

    def read_log(self, handle: Handle, offset: int, limit: int) -> tuple[bytes, int]:
        """Up to ``limit`` bytes of the worker's log from ``offset``, and the log's size.
        Offsets are those of the whole output, also when a capped log has dropped its oldest
        part: then an offset that was dropped reads nothing (see :meth:`log_start`)."""
        ...

    def log_start(self, handle: Handle) -> int:
        """The offset of the oldest byte of the worker's log still kept (0 unless a cap has
        dropped part of it; docs/security.md#logs-and-disk-space)."""
        ...

    def remove_job(self, job_id: int) -> None:
        """Delete what the executor keeps for a job (logs, work files)."""
        ...

    def memory_jobs(self) -> set[int]:
        """The jobs holding node memory for the checkpoint service on some node
        (docs/checkpoints.md); none where the executor gives none."""
        return set()

    def drop_memory(self, job_id: int) -> None:
        """Free a job's node memory on every node (it has ended)."""
        return

    def inspect(self) -> dict[str, list[Finding]]:
        """Inspect every node's health: per node name, what each probe found (the agent's
        heartbeat, disk, NIC, each GPU through NVML; docs/node-health.md). A probe that cannot
        look says NOT_AVAILABLE, never OK. It may take seconds: the controller calls it beside
        its loop, with a deadline, and a node missing from the answer keeps its last findings."""
        ...

    def set_wakeup(self, callback: Callable[[WorkerKey | None], None]) -> None:
        """Call ``callback`` when a worker may have changed state (best effort): with its key
        when the executor knows which worker, with None when it does not (look at all)."""
        ...

    def close(self) -> None: ...
