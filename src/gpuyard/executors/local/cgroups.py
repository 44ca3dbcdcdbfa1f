"""cgroups for workers: find a hierarchy we may write, give each worker a cgroup with its
limits, kill everything in it, and tell whether the OOM killer struck.

Both cgroup versions are supported, because both are still deployed:

- **v2** (the unified hierarchy): one directory per worker; it is used when ``memory`` and
  ``pids`` can be delegated to our cgroup's children, or with whatever it has where v1 is not
  writable. Where our cgroup holds processes it cannot delegate ("no internal processes"): the
  pool then asks systemd for a delegated scope (:mod:`.systemd`) or moves those processes into
  the leaf ``gpuyard-pool`` and enables what the parent offers. Killing uses ``cgroup.kill``
  (Linux 5.14), else ``cgroup.freeze``.
- **v1**: one directory per worker in each of the ``memory``, ``freezer`` (both required),
  ``pids``, ``cpu`` and ``cpuacct`` hierarchies (``cpuacct`` only where it is mounted apart
  from ``cpu``; it counts the CPU time). Killing freezes the cgroup, SIGKILLs every member,
  thaws it, and repeats until it is empty: a frozen process cannot fork, so no child is missed.
- **none**: no writable cgroup. Workers run without limits, and killing falls back to the
  worker's process group, which a process that calls ``setsid`` leaves.

Worker cgroups live under ``gpuyard-<digest of the pool's home>`` inside the cgroup of the
process that detects them (``gpuyard up``), so two pools on one machine never collide; that
parent holds the machine's ceilings (``pids.max``, ``memory.max``) for all workers together.

The executor uses this module to detect what it may use, to read what a worker uses (its CPU
time and memory: :meth:`Cgroup.cpu_seconds`, :meth:`Cgroup.memory_in_use`), and to kill the
workers of a dead supervisor; the supervisor uses it to create, join, kill and remove its
worker's cgroup. The supervisor starts fast with ``python -I -S``, so this module imports only
cheap builtin modules, like the supervisor itself.
"""

from __future__ import annotations

import errno
import os
import time

TYPE_CHECKING = False  # typing itself costs an import in the supervisor
if TYPE_CHECKING:
    import signal as _signal
    from collections.abc import Iterable

    from gpuyard.executors.local.systemd import Systemd
else:
    import _signal

__all__ = ["CGROUP_V1", "CGROUP_V2", "NONE", "Cgroup", "Isolation", "detect"]

CGROUP_V2 = "cgroup-v2"
CGROUP_V1 = "cgroup-v1"
NONE = "none"

V2_REQUIRED = ("memory", "pids")
V1_REQUIRED = ("memory", "freezer")
OPTIONAL = ("pids", "cpu", "cpuacct", "devices")
"""Used where present; a warning says what is not enforced where they are not."""
_WITHOUT = {
    "memory": "memory limits are not enforced",
    "pids": "process limits are not enforced",
    "cpu": "CPU limits are not enforced",
    "cpuacct": "a worker's CPU time is counted over its live processes instead",
    "devices": "other GPUs' device files are hidden by the worker's mount namespace only",
}
CPU_PERIOD_US = 100_000
KILL_TIMEOUT = 10.0
"""Seconds a kill keeps trying before it gives up (a process stuck in the kernel)."""

# A cgroup's files, named once.
PROCS = "cgroup.procs"
PARENT_PREFIX = "gpuyard-"
"""The pool's parent cgroup is ``gpuyard-<digest of its home>``; nothing else is removed."""


class CgroupError(OSError):
    """A cgroup could not be created, limited or joined; the message says which file."""


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(fd)


def _keyed(path: str) -> dict[str, int]:
    """A flat-keyed file (``memory.events``, ``memory.oom_control``): name -> number."""
    try:
        text = _read(path)
    except OSError:
        return {}
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if value.strip().isdigit():
            values[name] = int(value)
    return values


class Cgroup:
    """One worker's cgroup: one directory (v2) or one per controller (v1).

    ``dirs`` maps a controller (``unified`` for v2) to its directory; ``limits`` are what
    :meth:`create` writes (bytes of memory, thousandths of a CPU, processes; 0 is none).
    ``ceiling_pids`` and ``ceiling_memory`` are the node's ceilings, written on the pool's
    parent cgroup, which holds every worker of this machine (0 is none).
    """

    def __init__(
        self,
        version: int,
        dirs: dict[str, str],
        *,
        memory: int = 0,
        mcpus: int = 0,
        pids: int = 0,
        ceiling_pids: int = 0,
        ceiling_memory: int = 0,
        deny_devices: list[str] | None = None,
    ) -> None:
        self.version = version
        self.dirs = dirs
        self.memory = memory
        self.mcpus = mcpus
        self.pids = pids
        self.ceiling_pids = ceiling_pids
        self.ceiling_memory = ceiling_memory
        self.deny_devices = list(deny_devices or [])
        """``devices.deny`` rules (v1: ``c 195:1 rwm``), other GPUs' device files."""

    @property
    def main(self) -> str:
        """The directory whose ``cgroup.procs`` lists the worker's processes."""
        return self.dirs["unified"] if self.version == 2 else self.dirs["freezer"]

    def to_json(self) -> dict[str, object]:
        return {
            "version": self.version,
            "dirs": dict(self.dirs),
            "memory": self.memory,
            "mcpus": self.mcpus,
            "pids": self.pids,
            "ceiling_pids": self.ceiling_pids,
            "ceiling_memory": self.ceiling_memory,
            "deny_devices": list(self.deny_devices),
        }

    @classmethod
    def from_json(cls, data: object) -> Cgroup | None:
        """The cgroup a handle or a spec names, or None when it names none (or nonsense)."""
        if not isinstance(data, dict):
            return None
        version, dirs = data.get("version"), data.get("dirs")
        if version not in (1, 2) or not isinstance(dirs, dict):
            return None
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in dirs.items()):
            return None
        if ("unified" if version == 2 else "freezer") not in dirs:
            return None
        names = ("memory", "mcpus", "pids", "ceiling_pids", "ceiling_memory")
        limits = [data.get(k, 0) for k in names]
        deny = data.get("deny_devices") or []
        sound_deny = isinstance(deny, list) and all(isinstance(d, str) for d in deny)
        if not sound_deny or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in limits
        ):
            return None
        return cls(version, dirs, **dict(zip(names, limits, strict=True)), deny_devices=deny)

    def _file(self, controller: str, name: str) -> str | None:
        directory = self.dirs.get("unified" if self.version == 2 else controller)
        return None if directory is None else os.path.join(directory, name)

    # -- the supervisor's side ------------------------------------------------------------

    def create(self) -> None:
        """Make the directories and write the limits. The pool's parent cgroup is made again
        if the last worker to leave it removed it (see :meth:`remove`); a cgroup left by an
        earlier life of this worker is emptied first."""
        for directory in self.dirs.values():
            for attempt in range(10):
                try:
                    os.makedirs(directory, 0o755, exist_ok=True)
                    break
                except FileNotFoundError:  # a worker that left removed the parent meanwhile
                    if attempt == 9:
                        raise CgroupError(errno.ENOENT, f"cannot create {directory}") from None
                except OSError as exc:
                    raise CgroupError(
                        exc.errno, f"cannot create {directory}: {exc.strerror}"
                    ) from None
        if self.version == 2:  # a parent made again must give its workers the controllers
            limits = (("memory", self.memory), ("pids", self.pids), ("cpu", self.mcpus))
            _enable(os.path.dirname(self.main), [name for name, value in limits if value])
        if self.procs():
            self.kill()
        for path, value in [*self._ceilings(), *self._limits()]:
            try:
                _write(path, value)
            except OSError as exc:
                raise CgroupError(
                    exc.errno, f"cannot write {value} to {path}: {exc.strerror}"
                ) from None

    def _ceilings(self) -> list[tuple[str, str]]:
        """The node's ceilings, on the pool's parent cgroup (written by every worker that
        creates its cgroup: the parent is made again after its last worker removed it)."""
        parent = {c: os.path.dirname(d) for c, d in self.dirs.items()}
        ceilings = []
        if self.ceiling_pids:
            directory = parent.get("unified" if self.version == 2 else "pids")
            if directory is not None:
                ceilings.append((os.path.join(directory, "pids.max"), str(self.ceiling_pids)))
        if self.ceiling_memory:
            directory = parent.get("unified" if self.version == 2 else "memory")
            name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
            if directory is not None:
                ceilings.append((os.path.join(directory, name), str(self.ceiling_memory)))
        return ceilings

    def _limits(self) -> list[tuple[str, str]]:
        limits: list[tuple[str | None, str]] = []
        if self.version == 2:
            if self.memory:
                limits.append((self._file("memory", "memory.max"), str(self.memory)))
                swap = self._file("memory", "memory.swap.max")  # the limit is memory, not RAM
                if swap and os.path.exists(swap):
                    limits.append((swap, "0"))
            if self.pids:
                limits.append((self._file("pids", "pids.max"), str(self.pids)))
            if self.mcpus:
                weight = min(10_000, max(1, round(self.mcpus / 10)))  # 1 CPU = the default 100
                quota = max(1000, self.mcpus * CPU_PERIOD_US // 1000)
                limits.append((self._file("cpu", "cpu.weight"), str(weight)))
                limits.append((self._file("cpu", "cpu.max"), f"{quota} {CPU_PERIOD_US}"))
        else:
            if self.memory:
                limits.append((self._file("memory", "memory.limit_in_bytes"), str(self.memory)))
                memsw = self._file("memory", "memory.memsw.limit_in_bytes")  # swap accounting
                if memsw and os.path.exists(memsw):
                    limits.append((memsw, str(self.memory)))
            if self.pids:
                limits.append((self._file("pids", "pids.max"), str(self.pids)))
            devices = self.dirs.get("devices")
            if devices is not None:
                limits.extend((os.path.join(devices, "devices.deny"), d) for d in self.deny_devices)
            if self.mcpus:
                shares = max(2, self.mcpus * 1024 // 1000)  # 1 CPU = the default 1024
                quota = max(1000, self.mcpus * CPU_PERIOD_US // 1000)
                limits.append((self._file("cpu", "cpu.shares"), str(shares)))
                limits.append((self._file("cpu", "cpu.cfs_period_us"), str(CPU_PERIOD_US)))
                limits.append((self._file("cpu", "cpu.cfs_quota_us"), str(quota)))
        missing = [value for path, value in limits if path is None]
        if missing:
            raise CgroupError(errno.ENOENT, f"this cgroup has no controller for {missing}")
        return [(path, value) for path, value in limits if path is not None]

    def join(self) -> None:
        """Move the calling process into the cgroup (the child does, before it execs)."""
        for directory in self.dirs.values():
            try:
                _write(os.path.join(directory, PROCS), "0")
            except OSError as exc:
                raise CgroupError(exc.errno, f"cannot join {directory}: {exc.strerror}") from None

    def remove(self) -> None:
        """Remove the (empty) directories, and any the job made inside them, and the pool's
        parent cgroup if this was its last worker; what cannot be removed is left."""
        for top in self.dirs.values():
            for directory in reversed(_subtree(top)):  # the deepest first
                for _ in range(50):  # a process that just died may still be leaving it
                    try:
                        os.rmdir(directory)
                    except FileNotFoundError:
                        break
                    except OSError as exc:
                        if exc.errno != errno.EBUSY:
                            break
                        time.sleep(0.002)
                    else:
                        break
            parent = os.path.dirname(top)
            if os.path.basename(parent).startswith(PARENT_PREFIX):
                try:  # noqa: SIM105 - contextlib would cost the supervisor an import
                    os.rmdir(parent)  # busy while the pool has other workers: left then
                except OSError:
                    pass

    # -- both sides -----------------------------------------------------------------------

    def exists(self) -> bool:
        return os.path.isdir(self.main)

    def procs(self) -> list[int]:
        """The worker's processes now, in its cgroup and in any cgroup a process of the job
        made below it (none when the cgroup is gone)."""
        pids = []
        for directory in _subtree(self.main):
            try:
                text = _read(os.path.join(directory, PROCS))
            except OSError:
                continue
            pids += [int(p) for p in text.split()]
        return pids

    def holds(self, pid: int) -> bool:
        return pid in self.procs()

    def signal(self, signum: int) -> None:
        """Send ``signum`` to every process in it (best effort: one that forks meanwhile may
        leave a child unsignalled; :meth:`kill` is exact)."""
        _signal_all(self.procs(), signum)

    def kill(self, timeout: float = KILL_TIMEOUT) -> int:
        """SIGKILL every process in the cgroup, until it is empty. Returns how many there were
        at first (0 when it was already empty or gone)."""
        first = self.procs()
        if not first:
            return 0
        deadline = time.monotonic() + timeout
        kill_file = self._file("", "cgroup.kill") if self.version == 2 else None
        if kill_file is not None and os.path.exists(kill_file):
            try:
                _write(kill_file, "1")
            except OSError:
                pass
            else:
                self._wait_empty(deadline)
                return len(first)
        while self.procs() and time.monotonic() < deadline:
            self._freeze(True, deadline)
            _signal_all(self.procs(), _signal.SIGKILL)
            self._freeze(False, deadline)
            self._wait_empty(min(deadline, time.monotonic() + 0.05))
        return len(first)

    def _freeze(self, frozen: bool, deadline: float) -> None:
        if self.version == 2:
            self._freeze_v2(frozen, deadline)
            return
        path = os.path.join(self.dirs["freezer"], "freezer.state")
        want = "FROZEN" if frozen else "THAWED"
        try:
            _write(path, want)
        except OSError:
            return
        while frozen and time.monotonic() < deadline:  # FREEZING until every task stopped
            try:
                if _read(path).strip() == want:
                    return
            except OSError:
                return
            time.sleep(0.001)

    def _freeze_v2(self, frozen: bool, deadline: float) -> None:
        path = os.path.join(self.main, "cgroup.freeze")
        try:
            _write(path, "1" if frozen else "0")
        except OSError:
            return
        events = os.path.join(self.main, "cgroup.events")
        want = "frozen 1" if frozen else "frozen 0"
        while time.monotonic() < deadline:
            try:
                if want in _read(events):
                    return
            except OSError:
                return
            time.sleep(0.001)

    def _wait_empty(self, deadline: float) -> None:
        pause = 0.0005
        while self.procs() and time.monotonic() < deadline:
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer ended in this cgroup (read before removing it)."""
        if self.version == 2:
            path = self._file("memory", "memory.events")
            return _keyed(path).get("oom_kill", 0) if path else 0
        memory = self.dirs.get("memory")
        if memory is None:
            return 0
        control = _keyed(os.path.join(memory, "memory.oom_control"))
        if "oom_kill" in control:  # Linux 4.13
            return control["oom_kill"]
        # Older kernels: the limit was hit and the peak reached it; count one kill.
        try:
            failed = int(_read(os.path.join(memory, "memory.failcnt")))
            peak = int(_read(os.path.join(memory, "memory.max_usage_in_bytes")))
        except (OSError, ValueError):
            return 0
        return int(failed > 0 and self.memory > 0 and peak >= self.memory - 4096)

    def pids_limit_hits(self) -> int:
        """Forks refused because the worker reached its process limit."""
        path = self._file("pids", "pids.events")
        return _keyed(path).get("max", 0) if path else 0

    # -- what it uses (the executor's side) -------------------------------------------------

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) its processes have used, theirs and their children's,
        including those that ended: v2 ``cpu.stat`` (always there), v1 ``cpuacct.usage`` (in
        the ``cpuacct`` hierarchy, or ``cpu`` where the two are mounted together). None when
        there is no counter or the cgroup is gone."""
        if self.version == 2:
            usec = _keyed(os.path.join(self.main, "cpu.stat")).get("usage_usec")
            return None if usec is None else usec / 1e6
        for controller in ("cpuacct", "cpu"):
            directory = self.dirs.get(controller)
            if directory is None:
                continue
            try:
                return int(_read(os.path.join(directory, "cpuacct.usage"))) / 1e9
            except (OSError, ValueError):
                continue
        return None

    def memory_in_use(self) -> int | None:
        """Its working set in bytes: the memory charged to it less the file cache the kernel
        may reclaim first (``inactive_file``), as the OOM killer sees it; None when the
        cgroup has no memory controller or is gone."""
        directory = self.dirs.get("unified" if self.version == 2 else "memory")
        if directory is None:
            return None
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        try:
            charged = int(_read(os.path.join(directory, name)))
        except (OSError, ValueError):
            return None
        stat = _keyed(os.path.join(directory, "memory.stat"))
        inactive = stat.get("inactive_file" if self.version == 2 else "total_inactive_file", 0)
        return max(0, charged - inactive)


def _subtree(top: str) -> list[str]:
    """``top`` and the directories below it, parents before children."""
    found = [top]
    for directory in found:  # grows as it goes: breadth first
        try:
            with os.scandir(directory) as entries:
                found += [e.path for e in entries if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
    return found


def _signal_all(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        try:  # noqa: SIM105 - contextlib would cost the supervisor an import
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


# -- detection --------------------------------------------------------------------------------


class Isolation:
    """What this machine lets the pool use, found once by :func:`detect`.

    ``parents`` maps a controller (``unified`` for v2) to the pool's parent cgroup directory,
    ``controllers`` the controllers worker cgroups have, ``warnings`` what is not enforced.
    """

    def __init__(
        self,
        mode: str,
        parents: dict[str, str] | None = None,
        controllers: Iterable[str] = (),
        warnings: Iterable[str] = (),
    ) -> None:
        self.mode = mode
        self.parents = dict(parents or {})
        self.controllers = frozenset(controllers)
        self.warnings = list(warnings)
        self.notes: list[str] = []
        """What detection changed to be able to delegate (logged by ``gpuyard up``)."""
        self.whole_kill = mode == CGROUP_V2
        """v2: whether ``cgroup.kill`` ends a worker at once (else it is frozen first)."""

    def cgroup(
        self,
        name: str,
        *,
        memory: int,
        mcpus: int,
        pids: int,
        ceiling_pids: int = 0,
        ceiling_memory: int = 0,
        deny_devices: Iterable[str] = (),
    ) -> Cgroup | None:
        """The cgroup of worker ``name`` (not created yet), limited to what can be enforced;
        the ceilings are the node's (all its workers together); ``deny_devices``: devices it may
        not open (v1's devices controller only)."""
        if self.mode == NONE:
            return None
        version = 2 if self.mode == CGROUP_V2 else 1
        dirs = {c: os.path.join(p, name) for c, p in self.parents.items()}
        return Cgroup(
            version,
            dirs,
            memory=memory if "memory" in self.controllers else 0,
            mcpus=mcpus if "cpu" in self.controllers else 0,
            pids=pids if "pids" in self.controllers else 0,
            ceiling_pids=ceiling_pids if "pids" in self.controllers else 0,
            ceiling_memory=ceiling_memory if "memory" in self.controllers else 0,
            deny_devices=list(deny_devices) if "devices" in self.controllers else [],
        )

    def remove_parents(self, fs: CgroupFs | None = None) -> None:
        """Remove the pool's parent cgroups if no worker cgroup is left in them."""
        fs = fs or CgroupFs()
        for directory in self.parents.values():
            try:  # noqa: SIM105 - as above
                fs.rmdir(directory)
            except OSError:
                pass

    @classmethod
    def unified(
        cls, parent: str, base: str | None = None, fs: CgroupFs | None = None
    ) -> Isolation | str:
        """v2 with ``parent`` as the pool's cgroup: created if needed, with every controller we
        use that ``base`` (its parent) can give it enabled for the workers below. Where
        ``base`` holds processes, which keeps it from delegating anything ("no internal
        processes"), they are moved into a leaf of it first (:func:`_delegate`). Returns why
        not when ``parent`` cannot be created."""
        fs = fs or CgroupFs()
        note = "" if base is None else _delegate(base, fs)
        try:
            fs.mkdir(parent)
        except OSError as exc:
            return f"cgroup v2: cannot create {parent}: {exc.strerror}"
        have = set(fs.words(os.path.join(parent, "cgroup.controllers")))
        _enable(parent, [c for c in V2_WANTED if c in have], fs)
        enabled = set(fs.words(os.path.join(parent, "cgroup.subtree_control")))
        found = cls(CGROUP_V2, {"unified": parent}, enabled)
        found.whole_kill = fs.exists(os.path.join(parent, "cgroup.kill"))
        found.notes = [note] if note else []
        return found


class CgroupFs:
    """The cgroup filesystem as detection sees it: reads, writes and directories. The seam
    where unit tests put a fake tree that follows the kernel's rules for v2 (a cgroup that
    holds processes cannot delegate; a controller is offered only where the parent enables
    it), since no test machine can be every kind of host."""

    def read(self, path: str) -> str:
        return _read(path)

    def write(self, path: str, text: str) -> None:
        _write(path, text)

    def mkdir(self, path: str) -> None:
        os.makedirs(path, 0o755, exist_ok=True)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)

    def words(self, path: str) -> list[str]:
        try:
            return self.read(path).split()
        except OSError:
            return []


POOL_LEAF = "gpuyard-pool"
"""Where the processes of the pool's own cgroup go when it must delegate (v2)."""
V2_WANTED = ("memory", "pids", "cpu")
_MOVE_ROUNDS = 5
"""Rounds of moving ``base``'s processes to the leaf: one may fork while they move."""


def _delegate(base: str, fs: CgroupFs) -> str:
    """Make ``base`` enable, for its children, each controller we use that it is offered.
    The kernel refuses while ``base`` itself holds processes (cgroup v2's "no internal
    processes" rule: a login session, a container, ``gpuyard up`` started by hand), so they
    are moved into the leaf ``base/gpuyard-pool`` first; they keep every limit of ``base``,
    which is their ancestor still. Returns what was done ("" when nothing was needed)."""
    subtree = os.path.join(base, "cgroup.subtree_control")
    offered = [c for c in V2_WANTED if c in fs.words(os.path.join(base, "cgroup.controllers"))]
    missing = [c for c in offered if c not in fs.words(subtree)]
    if missing:
        _enable(base, missing, fs)
        missing = [c for c in missing if c not in fs.words(subtree)]
    if not missing or not fs.words(os.path.join(base, PROCS)):
        return ""
    leaf = os.path.join(base, POOL_LEAF)
    try:
        fs.mkdir(leaf)
    except OSError as exc:
        return f"cgroup v2: cannot create {leaf} to delegate from {base}: {exc.strerror}"
    moved: set[str] = set()
    for _ in range(_MOVE_ROUNDS):
        left = [pid for pid in fs.words(os.path.join(base, PROCS)) if pid not in moved]
        if not left:
            break
        for pid in left:
            try:
                fs.write(os.path.join(leaf, PROCS), pid)
            except OSError:
                continue  # ended meanwhile, or not ours to move: enabling says
            moved.add(pid)
    _enable(base, missing, fs)
    enabled = [c for c in missing if c in fs.words(subtree)]
    return (
        f"cgroup v2: moved {len(moved)} process(es) of {base} into {leaf} so that it can "
        f"delegate {', '.join(enabled) or 'nothing'} to the workers"
    )


def default_pids_ceiling(proc_sys: str = "/proc/sys/kernel") -> int:
    """Half of what the host can number (``kernel.pid_max``) or hold (``kernel.threads-max``),
    whichever is lower: all jobs together can never take the host's last pids. 0 when
    neither can be read."""
    found = []
    for name in ("pid_max", "threads-max"):
        try:
            found.append(int(_read(os.path.join(proc_sys, name))))
        except (OSError, ValueError):
            continue
    return min(found) // 2 if found else 0


def _enable(directory: str, controllers: list[str], fs: CgroupFs | None = None) -> None:
    fs = fs or CgroupFs()
    path = os.path.join(directory, "cgroup.subtree_control")
    for controller in controllers:  # one at a time: one refused must not stop the others
        try:  # noqa: SIM105 - as above
            fs.write(path, f"+{controller}")
        except OSError:
            pass


def detect(
    name: str,
    *,
    proc: str = "/proc/self",
    fs: CgroupFs | None = None,
    systemd: Systemd | None = None,
) -> Isolation:
    """The isolation this process may give workers: cgroup v2 if it can delegate ``memory``
    and ``pids`` to its children (in a delegated scope systemd gives it, or by moving the
    processes of its own cgroup into a leaf, if that is what it takes), else cgroup v1 if
    ``memory`` and ``freezer`` are writable, else none. ``name`` is the pool's parent cgroup
    (``gpuyard-<digest>``); it exists only while the pool has workers. ``fs`` and ``systemd``
    are seams for tests: systemd is asked only on the real cgroupfs unless one is given."""
    mounts = _mounts(os.path.join(proc, "mountinfo"))
    own = _own_cgroups(os.path.join(proc, "cgroup"))
    if systemd is None and fs is None:
        from gpuyard.executors.local.systemd import Systemd  # the executor's side only

        systemd = Systemd()
    fs = fs or CgroupFs()
    v2 = _detect_v2(name, mounts, own, fs, systemd, proc)
    # v2 with memory and pids first; else v1 where it has them (a hybrid host's v2 often has
    # no controller); else v2 with what it has: its cgroup.kill still ends a worker whole.
    if isinstance(v2, Isolation) and all(c in v2.controllers for c in V2_REQUIRED):
        return _made(v2, fs)
    v1 = _detect_v1(name, mounts, own)
    if isinstance(v1, Isolation):
        if isinstance(v2, Isolation):
            v2.remove_parents(fs)
        return _made(v1, fs)
    if isinstance(v2, Isolation):
        return _made(v2, fs)
    reasons = [v2, v1]
    return Isolation(
        NONE,
        warnings=[
            "no writable cgroup ("
            + "; ".join(reasons)
            + "): workers run without memory, CPU and process limits, out-of-memory kills are "
            "not reported as such, and a worker's processes that leave its process group "
            "(setsid, daemons) can outlive it"
        ],
    )


def _made(found: Isolation, fs: CgroupFs) -> Isolation:
    # Made to be sure we may; made again by the first worker (a pool that never launches,
    # or is killed, leaves nothing behind).
    found.remove_parents(fs)
    return found


def _detect_v2(
    name: str,
    mounts: list[tuple[str, str, str, set[str]]],
    own: dict[str, str],
    fs: CgroupFs,
    systemd: Systemd | None,
    proc: str,
) -> Isolation | str:
    unified = [m for m in mounts if m[2] == "cgroup2"]
    if not unified or "" not in own:
        return "cgroup v2: not mounted"
    root, mountpoint = unified[0][0], unified[0][1]
    base = _own_dir(mountpoint, root, own[""])
    if base is None:
        return "cgroup v2: our cgroup is not visible"
    if os.path.basename(base) == POOL_LEAF:  # moved there by an earlier detection: its parent
        base = os.path.dirname(base)  # delegates already; a second leaf would nest in it
    scope_note = ""
    subtree = fs.words(os.path.join(base, "cgroup.subtree_control"))
    delegates = all(c in subtree for c in V2_REQUIRED)
    # A hybrid host (v1 has the memory controller) gives v2 no controller, scope or not.
    hybrid = any(m[2] == "cgroup" and "memory" in m[3] for m in mounts)
    if systemd is not None and not delegates and not hybrid and systemd.available():
        # systemd owns our cgroup: ask it for one of our own rather than rearrange its own
        scope_note, base = _into_scope(name, base, (root, mountpoint), systemd, proc)
    found = Isolation.unified(os.path.join(base, name), base, fs)
    if isinstance(found, str):
        return found
    if scope_note:
        found.notes.insert(0, scope_note)
    for controller in V2_WANTED:
        if controller not in found.controllers:
            found.warnings.append(
                f"cgroup v2: the {controller} controller is not offered to {base}; "
                f"{_WITHOUT[controller]} (start gpuyard up where it is, e.g. a systemd "
                "service with Delegate=yes, or `systemd-run --scope -p Delegate=yes gpuyard up`)"
            )
    if not found.whole_kill:
        found.warnings.append(
            "cgroup v2: no cgroup.kill (Linux < 5.14); a worker is killed by freezing it"
        )
    return found


def _into_scope(
    name: str, base: str, mount: tuple[str, str], systemd: Systemd, proc: str
) -> tuple[str, str]:
    """Move this process into a transient scope with ``Delegate=yes``: what happened, and our
    cgroup's directory afterwards (``base`` unchanged where systemd would not)."""
    unit = f"{name}-{os.getpid()}.scope"
    cgroup_file = os.path.join(proc, "cgroup")
    why = systemd.delegated_scope(unit, os.getpid(), cgroup_file)
    if why:
        return why, base
    moved = _own_dir(mount[1], mount[0], _own_cgroups(cgroup_file).get("", ""))
    if moved is None:
        return f"systemd: the scope {unit} is not visible under {mount[1]}", base
    return f"systemd: the pool runs in the delegated scope {unit}", moved


def _detect_v1(
    name: str, mounts: list[tuple[str, str, str, set[str]]], own: dict[str, str]
) -> Isolation | str:
    parents: dict[str, str] = {}
    problems = []
    for controller in (*V1_REQUIRED, *OPTIONAL):
        mount = next((m for m in mounts if m[2] == "cgroup" and controller in m[3]), None)
        if controller == "cpuacct" and mount is not None and "cpu" in mount[3]:
            continue  # mounted with cpu: the cpu directory counts the time
        if mount is None or controller not in own:
            problems.append(f"{controller} is not mounted")
            continue
        base = _own_dir(mount[1], mount[0], own[controller])
        if base is None:
            problems.append(f"{controller}: our cgroup is not visible")
            continue
        parent = os.path.join(base, name)
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            problems.append(f"{controller}: cannot create {parent}: {exc.strerror}")
            continue
        if not os.access(os.path.join(parent, PROCS), os.W_OK):
            problems.append(f"{controller}: {parent} is not writable")
            continue
        parents[controller] = parent
    missing = [c for c in V1_REQUIRED if c not in parents]
    if missing:
        Isolation(CGROUP_V1, parents).remove_parents()
        return "cgroup v1: " + "; ".join(problems)
    warnings = [
        f"cgroup v1: {p}; {_WITHOUT.get(p.split()[0].rstrip(':'), 'not used')}" for p in problems
    ]
    return Isolation(CGROUP_V1, parents, parents, warnings)


def _mounts(path: str) -> list[tuple[str, str, str, set[str]]]:
    """cgroup mounts from mountinfo: (root, mount point, fs type, super options)."""
    try:
        text = _read_all(path)
    except OSError:
        return []
    mounts = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        options = set(tail[2].split(","))
        mounts.append((_unescape(fields[3]), _unescape(fields[4]), tail[0], options))
    return mounts


def _own_cgroups(path: str) -> dict[str, str]:
    """This process's cgroup per controller ("" for v2) from /proc/self/cgroup."""
    try:
        text = _read_all(path)
    except OSError:
        return {}
    own = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            own[controller] = parts[2]
    return own


def _own_dir(mountpoint: str, root: str, path: str) -> str | None:
    """Where cgroup ``path`` appears under a mount of hierarchy subtree ``root``."""
    if root != "/" and (path == root or path.startswith(root + "/")):
        path = path[len(root) :]
    directory = os.path.normpath(mountpoint + "/" + path.lstrip("/"))
    return directory if os.path.isdir(directory) else None


def _read_all(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)
