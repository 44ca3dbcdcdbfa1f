"""The Ray executor: workers on the nodes of a Ray cluster, through one agent per node.

Ray is the substrate (node membership, placement of one long-lived actor per node, RPC, named
detached actors that outlive the control plane); gpuyard keeps every policy: the queue, gang
placement, preemption, faults. So Ray never schedules a worker: the controller places it on a
gpuyard node, and this executor asks that node's agent (:mod:`gpuyard.executors.ray.agent`) to
start it under the same supervisor the local executor uses. No Ray resources are reserved for
workers (the agent asks for ``num_cpus=0``); the pool's own accounting is what counts.

**The control plane is a Ray driver** (``ray.init(address=…)`` in the ``gpuyard up``
process): the Ray and Python versions of the control plane must equal the cluster's, to the
patch level (docs/decisions.md says why, and the way out).

Handles are JSON: the agent's own (local executor) handle under ``local``, and the Ray node id,
agent name and gpuyard node name beside it, so a restarted control plane finds every worker
again through the named agents: ``status`` of the same handles is adoption.

**Faults.** A call to an agent that has died, or whose node Ray no longer counts alive, makes
that node's workers LOST; the agent's death has stopped them (the parent death signal of their
supervisors), and the controller stops the rest of each gang (Ray has no gang semantics). An
agent that does not answer in time, on a node Ray still counts alive, is asked again later
(its workers are reported running meanwhile): Ray declares a silent node dead after its health
checks fail (about 15 s for a crash, 65 s for a hang with Ray's defaults; docs/cluster.md).

**Logs** are on the worker's node. ``read_log`` asks its agent, and a pump thread copies every
running worker's log into the control plane's home (``<home>/ray-logs/<job>/<attempt>/
worker-<rank>.log``) about every second, so a log outlives its worker and its node as far as
the control plane received it; ``read_log`` falls back to that copy when the agent is gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuyard.executors.base import LaunchError, Terminal
from gpuyard.executors.local.node_images import ImagesConfig
from gpuyard.executors.ray.agent import NodeAgent, agent_name
from gpuyard.executors.ray.nodes import joins, node_info, node_name
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
    WorkerState,
    WorkerStatus,
)

__all__ = ["RayExecutor"]

log = logging.getLogger("gpuyard.executors.ray")

CALL_TIMEOUT = 10.0
"""Seconds any one Ray call may take (a misconfigured cluster hangs instead of failing)."""
AGENT_START_TIMEOUT = 60.0
"""Seconds a new agent has to answer (a fresh Ray worker process: ~1.7 s on 2 cores)."""
PULL_TIMEOUT = 3600.0
"""Seconds an agent has to pull an image (a large one, from a slow registry)."""
LOOP_CALL_TIMEOUT = 3.0
"""Seconds the controller's pass waits for the agents (status of all at once, a stop)."""
SLOW_AGENT_REST = 5.0
"""Seconds an agent that did not answer in time is left alone (its workers count as running
until it answers or Ray declares its node dead)."""
NODES_TTL = 1.0
"""Seconds ``ray.nodes()`` is reused between calls."""
PUMP_EVERY = 1.0
PUMP_CHUNK = 1 << 20
NODE_REFRESH = 2.0
"""Seconds between the controller's looks at the nodes (a node joins or leaves)."""
_RUNNING = WorkerStatus(WorkerState.RUNNING)
AGENT_ENV = {"RAY_kill_child_processes_on_worker_exit": "false"}
"""A Ray worker SIGKILLs its direct children when it exits: the agent's are the supervisors,
which must live to stop their workers (the parent death signal, :mod:`.agent`), not die
before them and leave the workers running."""


class RayExecutor:
    name = "ray"
    node_refresh = NODE_REFRESH
    """The controller reads the nodes again this often (Ray nodes come and go)."""

    def __init__(
        self,
        home: Path,
        *,
        address: str,
        namespace: str = "gpuyard",
        node_home: str | None = None,
        interface: str = "eth0",
        call_timeout: float = CALL_TIMEOUT,
        connect: bool = True,
        images: ImagesConfig | None = None,
    ) -> None:
        """``home``: the control plane's (its copies of the logs). ``node_home``: the
        directory on every node where its agent keeps workers (the same path on each, on the
        node's own disk). ``namespace``: the Ray namespace of this pool's agents (two pools
        on one cluster need two). ``interface``: the nodes' network interface (``lo`` for a
        test cluster on one machine)."""
        self.home = home
        self.images = images
        """The registry the nodes pull jobs' images from, their cache's size (None: none)."""
        self.address = address
        self.namespace = namespace
        self.node_home = node_home or str(home / "node")
        self._interface = interface
        self.call_timeout = call_timeout
        self.logs_root = home / "ray-logs"
        self._lock = threading.Lock()
        self._agents: dict[str, Any] = {}
        """Ray node id -> agent actor handle."""
        self._infos: dict[str, dict[str, Any]] = {}
        """Ray node id -> what its agent said (``info()``), once it has answered."""
        self._pending: dict[str, Any] = {}
        """Ray node id -> its agent's ``info()`` reference, not answered yet."""
        self._ray_nodes: list[dict[str, Any]] = []
        self._ray_nodes_at = 0.0
        self._slow: dict[str, float] = {}
        """Ray node id -> when its agent last failed to answer in time."""
        self._tracked: dict[WorkerKey, Handle] = {}
        """Workers whose logs the pump copies (running ones, as far as we know)."""
        self._wakeup: Callable[[WorkerKey | None], None] = lambda _key: None
        self._stop = threading.Event()
        self._pump: threading.Thread | None = None
        if connect:
            self.connect()

    # -- Ray --------------------------------------------------------------------------------

    def connect(self) -> None:
        """Join the cluster as a Ray driver and start copying logs."""
        self._init()
        self._pump = threading.Thread(target=self._pump_logs, name="gpuyard-ray-logs", daemon=True)
        self._pump.start()

    def _init(self) -> None:
        import ray

        if not ray.is_initialized():
            ray.init(
                address=self.address,
                namespace=self.namespace,
                log_to_driver=False,
                logging_level=logging.WARNING,
                configure_logging=False,
            )

    def _get(self, ref: Any, timeout: float | None = None) -> Any:
        import ray

        return ray.get(ref, timeout=self.call_timeout if timeout is None else timeout)

    def _alive_nodes(self, *, fresh: bool = False) -> list[dict[str, Any]]:
        import ray

        now = time.monotonic()
        if fresh or now - self._ray_nodes_at > NODES_TTL:
            self._ray_nodes = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
            self._ray_nodes_at = now
        return self._ray_nodes

    def _node_alive(self, node_id: str) -> bool:
        return any(n["NodeID"] == node_id for n in self._alive_nodes(fresh=True))

    def _agent(self, node_id: str) -> Any:
        """The agent actor of Ray node ``node_id``: found by its name, or started."""
        with self._lock:
            agent = self._agents.get(node_id)
        if agent is not None:
            return agent
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        entry = next((n for n in self._alive_nodes() if n["NodeID"] == node_id), None)
        try:
            agent = ray.get_actor(agent_name(node_id), namespace=self.namespace)
        except ValueError:
            if entry is None:
                raise LookupError(f"Ray node {node_id} is not alive") from None
            info = node_info(entry)
            actor = ray.remote(NodeAgent).options(
                name=agent_name(node_id),
                namespace=self.namespace,
                lifetime="detached",
                get_if_exists=True,
                num_cpus=0,
                max_concurrency=16,
                max_restarts=0,
                runtime_env={"env_vars": AGENT_ENV},
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            )
            agent = actor.remote(
                self.node_home, node_name(entry), info.gpus, info.cpus, info.memory
            )
        with self._lock:
            self._agents[node_id] = agent
        return agent

    def _forget(self, node_id: str) -> None:
        with self._lock:
            self._agents.pop(node_id, None)
            self._infos.pop(node_id, None)
            self._pending.pop(node_id, None)

    # -- nodes ------------------------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        """The alive Ray nodes of the pool whose agent has answered; a node's agent is
        started the first time the node is seen (the first call waits for them)."""
        import ray

        first = not self._infos and not self._pending
        entries = [n for n in self._alive_nodes(fresh=True) if joins(n)]
        alive = {n["NodeID"] for n in entries}
        for node_id in list(self._infos) + list(self._pending):
            if node_id not in alive:
                self._forget(node_id)
        for entry in entries:
            node_id = entry["NodeID"]
            if node_id not in self._infos and node_id not in self._pending:
                try:
                    self._pending[node_id] = self._agent(node_id).info.remote()
                except LookupError:
                    continue
        if self._pending:
            refs = list(self._pending.values())
            ready, _ = ray.wait(
                refs, num_returns=len(refs), timeout=AGENT_START_TIMEOUT if first else 0
            )
            for node_id, ref in list(self._pending.items()):
                if ref in ready:
                    del self._pending[node_id]
                    try:
                        self._infos[node_id] = self._get(ref)
                    except Exception as exc:  # one node's agent failing leaves it out
                        log.warning("the agent of Ray node %s failed to start: %s", node_id, exc)
                        self._forget(node_id)
        return [
            node_info(n, self._infos[n["NodeID"]]) for n in entries if n["NodeID"] in self._infos
        ]

    def _any_info(self) -> Mapping[str, Any]:
        if not self._infos:
            self.nodes()
        return next(iter(self._infos.values()), {})

    def _info_of(self, node: str) -> Mapping[str, Any]:
        for info in self._infos.values():
            if info.get("node") == node:
                return info
        return {}

    def _node_id(self, node: str) -> str:
        for entry in self._alive_nodes():
            if node_name(entry) == node and joins(entry):
                return str(entry["NodeID"])
        raise LaunchError(f"node {node} is not an alive node of the Ray cluster")

    @property
    def interface(self) -> str:
        return self._interface

    def tools(self) -> Tools:
        """Where gpuyard's tools are on the nodes (every node installs gpuyard at one path)."""
        tools = self._any_info().get("tools") or {}
        return Tools(**{k: str(v) for k, v in tools.items()})

    def base_env(self, node: str) -> Mapping[str, str]:
        return dict(self._info_of(node).get("env") or {})

    def unreachable_home(self) -> str:
        """Why jobs cannot run as their owners' OS accounts on the nodes ("" when they can),
        as the first node's agent found its node home."""
        return str(self._any_info().get("unreachable_home", ""))

    def job_dir(self, job_id: int) -> str:
        return str(Path(self.node_home) / "jobs" / str(job_id))

    # -- launch ------------------------------------------------------------------------------

    def pull_image(self, node: str, ref: str, *, pulling: Callable[[], None]) -> int:
        """The node's agent pulls into its node's cache (docs/images.md, "On Ray nodes"):
        asked first whether it holds the image, so that ``pulling`` is said only for a pull."""
        if self.images is None:
            raise LaunchError(f"node {node} cannot pull image {ref}: the pool has no registry")
        agent = self._agent(self._node_id(node))
        if not self._agent_call(
            node, agent.holds_image.remote(self.images, ref), AGENT_START_TIMEOUT
        ):
            pulling()
        return int(self._agent_call(node, agent.pull_image.remote(self.images, ref), PULL_TIMEOUT))

    def _agent_call(self, node: str, ref: Any, timeout: float) -> Any:
        """An agent's answer; what it raised as the launch error it is (a registry that
        cannot be reached stays a reason to wait)."""
        import ray

        try:
            return self._get(ref, timeout)
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, LaunchError):  # LaunchDeferred too
                raise exc.cause from None
            raise LaunchError(str(exc.cause) if exc.cause else str(exc)) from None
        except (ray.exceptions.RayError, TimeoutError) as exc:
            raise LaunchError(f"the agent of node {node} failed: {exc}") from None

    def launch(self, request: WorkerLaunch) -> Handle:
        node_id = self._node_id(request.node)
        agent = self._agent(node_id)

        images = self.images if request.image is not None else None
        local = self._agent_call(
            request.node, agent.launch.remote(request, images), AGENT_START_TIMEOUT
        )
        handle = {
            "job": request.key.job_id,
            "attempt": request.key.attempt,
            "rank": request.key.rank,
            "node": request.node,
            "ray_node": node_id,
            "agent": agent_name(node_id),
            "local": local,
        }
        with self._lock:
            self._tracked[request.key] = handle
        return handle

    def launch_terminal(
        self, request: WorkerLaunch, *, rows: int, cols: int
    ) -> tuple[Handle, Terminal]:
        raise LaunchError(
            "an interactive shell in a worker needs the local executor for now (the Ray "
            "executor relays no terminal)"
        )

    # -- calls per agent ---------------------------------------------------------------------

    def _by_agent(self, handles: Sequence[Handle]) -> dict[str, list[int]]:
        groups: dict[str, list[int]] = {}
        for i, h in enumerate(handles):
            groups.setdefault(str(h.get("ray_node", "")), []).append(i)
        return groups

    def _fan_out(
        self, handles: Sequence[Handle], method: str
    ) -> Iterator[tuple[str, list[int], Any]]:
        """Call ``method`` of each agent with its handles' local handles, all at once, and
        wait ``LOOP_CALL_TIMEOUT`` at most for all of them together; yields (node id, indices,
        answer or the exception). An agent that did not answer in time is not asked again
        for ``SLOW_AGENT_REST`` seconds (it gets a TimeoutError meanwhile): one hung node must
        not stall every pass of the controller."""
        import ray

        calls: dict[str, tuple[list[int], Any]] = {}
        now = time.monotonic()
        for node_id, idx in self._by_agent(handles).items():
            if now - self._slow.get(node_id, -SLOW_AGENT_REST) < SLOW_AGENT_REST:
                calls[node_id] = (idx, TimeoutError(f"the agent of {node_id} answers slowly"))
                continue
            try:
                agent = self._agent(node_id)
                ref = getattr(agent, method).remote([handles[i]["local"] for i in idx])
            except Exception as exc:  # a dead node has no agent to ask
                calls[node_id] = (idx, exc)
                continue
            calls[node_id] = (idx, ref)
        refs = [ref for _idx, ref in calls.values() if not isinstance(ref, Exception)]
        ready: set[Any] = set()
        if refs:
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=LOOP_CALL_TIMEOUT)
            ready = set(done)
        for node_id, (idx, ref) in calls.items():
            if isinstance(ref, Exception):
                yield node_id, idx, ref
            elif ref not in ready:
                self._slow[node_id] = time.monotonic()
                yield node_id, idx, TimeoutError(f"no answer in {LOOP_CALL_TIMEOUT:g} s")
            else:
                self._slow.pop(node_id, None)
                try:
                    yield node_id, idx, self._get(ref)
                except Exception as exc:
                    yield node_id, idx, exc

    def status(self, handles: Sequence[Handle]) -> list[WorkerStatus]:
        import ray

        statuses: list[WorkerStatus] = [_RUNNING] * len(handles)
        alive = {n["NodeID"] for n in self._alive_nodes()}
        for node_id, idx, reply in self._fan_out(handles, "status"):
            answer = reply
            if not isinstance(answer, Exception) and node_id not in alive:
                # Its agent answers, but Ray has declared the node dead (a frozen raylet, a
                # partition that heals): it is out of the cluster, so are its workers.
                answer = self._evict(node_id, [handles[i] for i in idx], answer)
            if not isinstance(answer, Exception):
                for i, st in zip(idx, answer, strict=True):
                    statuses[i] = st
                continue
            dead = isinstance(answer, ray.exceptions.ActorDiedError) or not self._node_alive(
                node_id
            )
            if dead:
                self._forget(node_id)
                node = handles[idx[0]].get("node", node_id)
                why = (
                    f"node {node} left the Ray cluster or its agent died ({_short(answer)}); "
                    "its workers were stopped with it"
                )
                for i in idx:
                    statuses[i] = WorkerStatus(WorkerState.LOST, message=why)
            else:
                log.info("the agent of Ray node %s did not answer: %s", node_id, answer)
        with self._lock:
            for h, st in zip(handles, statuses, strict=True):
                key = WorkerKey(h["job"], h["attempt"], h["rank"])
                if st.state is WorkerState.RUNNING:
                    self._tracked.setdefault(key, h)
        for h, st in zip(handles, statuses, strict=True):
            if st.state is not WorkerState.RUNNING:
                self._copy_log(h)  # the last of it, while the agent can still be asked
                with self._lock:
                    self._tracked.pop(WorkerKey(h["job"], h["attempt"], h["rank"]), None)
        return statuses

    def _evict(
        self, node_id: str, handles: list[Handle], answer: list[WorkerStatus]
    ) -> list[WorkerStatus] | Exception:
        """The workers of a node Ray declared dead whose agent still answers: kill those that
        run (they must not outlive the node's membership), and report them lost."""
        if self._node_alive(node_id):  # the cached list was stale
            return answer
        for handle, st in zip(handles, answer, strict=True):
            if st.state is WorkerState.RUNNING:
                self._call(handle, "kill", timeout=LOOP_CALL_TIMEOUT)
        return LookupError(f"Ray declared node {node_id} dead")

    def _call(self, handle: Handle, method: str, *args: Any, timeout: float | None = None) -> Any:
        """One agent call for one worker; best effort (None when its agent cannot answer in
        ``timeout`` seconds; the call itself still reaches an agent that answers late)."""
        try:
            agent = self._agent(str(handle["ray_node"]))
            ref = getattr(agent, method).remote(handle["local"], *args)
            return self._get(ref, timeout)
        except Exception as exc:
            log.info("%s of %s on node %s: %s", method, handle.get("job"), handle.get("node"), exc)
            return None

    def terminate(self, handle: Handle, grace: float) -> None:
        self._call(handle, "terminate", grace, timeout=LOOP_CALL_TIMEOUT)

    def kill(self, handle: Handle) -> None:
        self._call(handle, "kill", timeout=LOOP_CALL_TIMEOUT)

    def notify(self, handle: Handle, notice: Notice) -> None:
        self._call(handle, "notify", notice, timeout=LOOP_CALL_TIMEOUT)

    def signal(self, handle: Handle, signum: int, *, steps: bool) -> None:
        self._call(handle, "signal", signum, steps, timeout=LOOP_CALL_TIMEOUT)

    def control(self, handles: Sequence[Handle]) -> list[ControlState]:
        found = [ControlState()] * len(handles)
        for _node, idx, answer in self._fan_out(handles, "control"):
            if not isinstance(answer, Exception):
                for i, c in zip(idx, answer, strict=True):
                    found[i] = c
        return found

    def slurm_steps(self, handle: Handle) -> list[SlurmStep]:
        """Read on the worker's node by its agent; none while the agent cannot answer."""
        steps = self._call(handle, "slurm_steps", timeout=LOOP_CALL_TIMEOUT)
        return list(steps) if isinstance(steps, list) else []

    def usage(self, handles: Sequence[Handle]) -> list[WorkerUsage | None]:
        found: list[WorkerUsage | None] = [None] * len(handles)
        for _node, idx, answer in self._fan_out(handles, "usage"):
            if not isinstance(answer, Exception):
                for i, u in zip(idx, answer, strict=True):
                    found[i] = u
        return found

    def _each_agent(self, method: str, *args: Any) -> Iterator[tuple[str, Any]]:
        """Call ``method`` on every known agent at once; yields (node id, answer) of those
        that answered."""
        refs = []
        for node_id in list(self._infos):
            with contextlib.suppress(Exception):
                refs.append((node_id, getattr(self._agent(node_id), method).remote(*args)))
        for node_id, ref in refs:
            try:
                yield node_id, self._get(ref)
            except Exception as exc:
                log.info("%s on Ray node %s: %s", method, node_id, exc)

    def node_usage(self) -> dict[str, NodeUsage]:
        found: dict[str, NodeUsage] = {}
        for _node, answer in self._each_agent("node_usage"):
            found.update(answer)
        return found

    def inspect(self) -> dict[str, list[Finding]]:
        found: dict[str, list[Finding]] = {}
        for _node, answer in self._each_agent("inspect"):
            found.update(answer)
        return found

    # -- logs ---------------------------------------------------------------------------------

    def _copy_path(self, handle: Handle) -> Path:
        return (
            self.logs_root
            / str(handle["job"])
            / str(handle["attempt"])
            / f"worker-{handle['rank']}.log"
        )

    def _append_copy(self, handle: Handle, offset: int, data: bytes) -> None:
        """Add what is new in ``data`` (read at ``offset``) to the control plane's copy."""
        if not data:
            return
        path = self._copy_path(handle)
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, open(path, "ab") as fh:
            have = fh.tell()
            if offset <= have < offset + len(data):
                fh.write(data[have - offset :])

    def _copy_log(self, handle: Handle) -> None:
        """Bring the copy of one worker's log up to date (best effort)."""
        path = self._copy_path(handle)
        have = path.stat().st_size if path.exists() else 0
        while True:
            answer = self._call(handle, "read_logs_one", have, PUMP_CHUNK)
            if answer is None:
                return
            data, _size = answer
            self._append_copy(handle, have, data)
            if len(data) < PUMP_CHUNK:
                return
            have += len(data)

    def read_log(self, handle: Handle, offset: int, limit: int) -> tuple[bytes, int]:
        if "local" not in handle:
            return b"", 0
        answer = self._call(handle, "read_logs_one", offset, limit)
        if answer is not None:
            data, size = answer
            self._append_copy(handle, offset, data)
            return data, size
        path = self._copy_path(handle)  # the agent is gone: what the pool received
        try:
            with open(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                fh.seek(offset)
                return fh.read(limit), size
        except FileNotFoundError:
            return b"", 0

    def log_start(self, handle: Handle) -> int:
        return 0  # Ray nodes' logs are not capped: nothing is dropped

    def _pump_logs(self) -> None:
        while not self._stop.wait(PUMP_EVERY):
            with self._lock:
                handles = list(self._tracked.values())
            groups = self._by_agent(handles)
            for node_id, idx in groups.items():
                try:
                    self._pump_node(node_id, [handles[i] for i in idx])
                except Exception as exc:  # one node's trouble never stops the others' copies
                    log.debug("log copy from Ray node %s: %s", node_id, exc)

    def _pump_node(self, node_id: str, handles: list[Handle]) -> None:
        sizes = []
        for h in handles:
            path = self._copy_path(h)
            sizes.append(path.stat().st_size if path.exists() else 0)
        agent = self._agent(node_id)
        answers = self._get(
            agent.read_logs.remote(
                [(h["local"], have, PUMP_CHUNK) for h, have in zip(handles, sizes, strict=True)]
            )
        )
        for h, have, (data, _size) in zip(handles, sizes, answers, strict=True):
            self._append_copy(h, have, data)

    def prepare_data(
        self,
        node: str,
        source: DataSource,
        *,
        job_id: int,
        progress: Callable[[int, int], None],
    ) -> PreparedData:
        raise LaunchError(
            f"data preparation of dataset {source.ref} is not available on a Ray cluster yet: "
            'mount it without `prepare` (docs/datasets.md, "Data preparation")'
        )

    def data_jobs(self) -> set[int]:
        return set()

    def data_held(self) -> dict[str, frozenset[int]]:
        return {}  # data preparation is the local executor's only, for now

    def release_data(self, job_id: int) -> None:
        return

    def sweep_data(self) -> None:
        return

    def memory_jobs(self) -> set[int]:
        held: set[int] = set()
        for _node, answer in self._each_agent("memory_jobs"):
            held.update(answer)
        return held

    def drop_memory(self, job_id: int) -> None:
        for _node, _answer in self._each_agent("drop_memory", job_id):
            pass

    def remove_job(self, job_id: int) -> None:
        import shutil

        for _node, _answer in self._each_agent("remove_job", job_id):
            pass
        shutil.rmtree(self.logs_root / str(job_id), ignore_errors=True)

    # -- the rest -----------------------------------------------------------------------------

    def set_wakeup(self, callback: Callable[[WorkerKey | None], None]) -> None:
        self._wakeup = callback

    def shutdown_agents(self) -> int:
        """Kill this pool's agents (and so every worker they run): for tests, and for taking
        a pool off a cluster for good. How many there were."""
        import ray

        self._init()
        killed = 0
        for entry in ray.util.list_named_actors(all_namespaces=True):
            if entry.get("namespace") != self.namespace:
                continue
            if not str(entry.get("name", "")).startswith("gpuyard-agent-"):
                continue
            with contextlib.suppress(Exception):
                ray.kill(ray.get_actor(entry["name"], namespace=self.namespace))
                killed += 1
        with self._lock:
            self._agents.clear()
            self._infos.clear()
            self._pending.clear()
        return killed

    def close(self) -> None:
        """Leave the agents and their workers running (the next control plane adopts them)."""
        self._stop.set()
        if self._pump is not None:
            self._pump.join(5)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
