"""Workers inside an image's root filesystem: the container runtime (docs/images.md, "How a
worker runs in an image"; the choice and its figures in docs/decisions.md).

:class:`ContainerRuntime` is what the supervisor's child calls between fork and exec; the
runtime named in the spec's ``image`` section (:class:`gpuyard.models.workerdir.ImageSpec`)
is picked by :func:`runtime_for`. A second runtime (one that wraps the command, such as
podman) implements the same two methods.

:class:`NativeRuntime`, the one we have, builds the worker's root with the kernel's mounts, in
the child, as root, after it joined the worker's cgroup and before it drops to the job's
account (so the command, and everything it starts, stays in that cgroup and runs as the
account's own uid, on the host network):

- an empty tmpfs of the worker's own (``nosuid``, ``nodev``; its pages count in the worker's
  memory cgroup) holds the writable upper layer of an overlay whose lower layer is the image's
  rootfs, which the node's image cache shares between workers and is never written;
- the child ``pivot_root``s into that overlay, then mounts, with every path now resolved
  inside the image (an image's absolute symlink cannot lead a mount out of it): the host's
  ``/etc/hosts`` and ``/etc/resolv.conf`` read-only, the driver's paths read-only, and the
  binds, whose sources were opened as the job's account before (what the account cannot reach
  is refused); then a minimal ``/dev`` (null, zero, full, random, urandom, tty, a devpts of
  its own, ``/dev/shm`` of ``shm_size`` bytes) plus only the listed device files, ``/sys``
  read-only, and last ``/proc`` (``hidepid=invisible``: the worker sees only its own
  account's processes), so that no link of the image leads through /proc while the child is
  still root; the host's tree is detached at the end;
- every mount the job can write is ``nosuid`` and ``nodev``, and ``no_new_privs`` is set before
  exec: a setuid binary of the image gives nothing.

Builtin modules only (and ctypes), like the supervisor: it is on the path of every launch.
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS = 38
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
"""The pivot_root system call's number (glibc has no wrapper)."""
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""PATH when neither the image nor the job sets one (what OCI runtimes use)."""
SHM = "/dev/shm"  # noqa: S108 - inside the worker's own root
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
HOST_FILES = ("/etc/hosts", "/etc/resolv.conf")
"""Host files every worker in an image gets read-only: it is on the host's network."""
STAGE = "/tmp"  # noqa: S108 - a mount point in the worker's own namespace, not a file
"""Where the child mounts the worker's tmpfs in its own mount namespace (the host's /tmp is
untouched; the namespace is the worker's alone, and the path is detached after pivot_root)."""
PATH_FLAGS = os.O_PATH | os.O_CLOEXEC
NOSUID_NODEV = MS_NOSUID | MS_NODEV
HIDEPID = ("hidepid=invisible", "hidepid=2")
"""The worker's /proc shows only its own account's processes: the name Linux 5.8 gave the
option, then the number older kernels know (the same rule, with the other pids' directories
present but unreadable)."""


class ContainerError(OSError):
    """A step of building the worker's root failed: ``filename`` says which path."""


def environment(image_env: dict[str, str], job_env: dict[str, str]) -> dict[str, str]:
    """The command's environment: the image's ``ENV``, the job's on top; PATH is the image's
    unless the job sets it (the caller leaves the pool's own PATH out), else the default."""
    return {"PATH": DEFAULT_PATH, **image_env, **job_env}


class ContainerRuntime:
    """The interface: :meth:`enter` builds the worker's root and enters it (in the child, as
    root, in its own mount namespace); :meth:`argv` is the command to exec there."""

    name = ""

    def __init__(self, image: dict[str, Any], account: dict[str, Any] | None) -> None:
        self.image = image
        self.account = account

    def enter(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def argv(self, argv: list[str]) -> list[str]:
        """The command as exec'd: a runtime that runs the command itself wraps it here."""
        return argv

    def workdir(self) -> str:
        return str(self.image.get("workdir") or "/")


class NativeRuntime(ContainerRuntime):
    """The kernel's mounts and ``pivot_root`` in the supervisor's child (see the module)."""

    name = "native"

    def __init__(self, image: dict[str, Any], account: dict[str, Any] | None) -> None:
        super().__init__(image, account)
        import ctypes  # only for workers in an image

        self.libc: Any = ctypes.CDLL(None, use_errno=True)
        self.fds = "/proc/self/fd"
        """Where the child's open files are named (the host's /proc, once pivoted)."""

    # -- the child's side (between fork and exec; tested through real supervisors) ------------

    def _mount(
        self, source: str | None, target: str, fstype: str | None, flags: int, data: str = ""
    ) -> None:  # pragma: no cover - child side
        def enc(text: str | None) -> bytes | None:
            return None if text is None else text.encode()

        if self.libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data or None)):
            import ctypes

            code = ctypes.get_errno() or errno.EPERM
            raise ContainerError(code, os.strerror(code), target)

    def enter(self) -> None:  # pragma: no cover - child side
        if self.libc.unshare(CLONE_NEWNS) != 0:  # a namespace of its own, whatever came before
            raise ContainerError(errno.EPERM, "cannot make a mount namespace", "unshare")
        self._mount(None, "/", None, MS_REC | MS_PRIVATE)
        umask = os.umask(0o022)  # the ways we make inside must let the job's account pass
        sources = self._open_sources()
        try:
            old = self._pivot(self._overlay())
            # The worker's /proc and /sys come last: while the child, still root, makes mount
            # points and the working directory, an image's link into /proc (/proc/1/root is the
            # host's root) leads nowhere. The opened sources are reached by the host's /proc.
            self.fds = f"{old}/proc/self/fd"
            self._binds(sources["binds"])
            _make_links(self.image.get("links") or [])
            _make_workdir(self.workdir())
            self._dev(sources["dev"])
            self._mount("sysfs", _made_dir("/sys"), "sysfs", MS_RDONLY | NOSUID_NODEV | MS_NOEXEC)
            self._proc()
        finally:
            for fds in sources.values():
                for _, fd, _ in fds:
                    os.close(fd)
            os.umask(umask)
        # The host's tree goes only now: a bind's source must be in this namespace to be bound.
        if self.libc.umount2(old.encode(), MNT_DETACH) != 0:
            raise ContainerError(errno.EPERM, "cannot detach the host's root", old)
        os.rmdir(old)
        if self.libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise ContainerError(errno.EPERM, "cannot set no_new_privs", "prctl")

    def _open_sources(self) -> dict[str, list[tuple[str, int, bool]]]:  # pragma: no cover
        """Everything of the host the worker gets, opened before the host's tree goes: binds
        as the job's account (what it cannot reach is refused), the rest as root."""
        dev = [(f"/dev/{name}", os.open(f"/dev/{name}", PATH_FLAGS), False) for name in DEV_NODES]
        dev += [(path, _open_host(path), False) for path in self.image.get("devices") or []]
        binds = [(path, _open_host(path), True) for path in HOST_FILES if os.path.exists(path)]
        binds += [(path, _open_host(path), True) for path in self.image.get("driver") or []]
        for mount in self.image.get("library") or []:
            binds.append((mount["target"], _open_host(mount["source"]), True))
        if self.account is not None:
            _become(self.account)
        try:
            for mount in self.image.get("mounts") or []:
                binds.append((mount["target"], _open_host(mount["source"]), mount["readonly"]))
        finally:
            if self.account is not None:
                os.seteuid(0)
                os.setegid(0)
        return {"dev": dev, "binds": binds}

    def _overlay(self) -> str:  # pragma: no cover - child side
        """The worker's writable root: the image below, a tmpfs of its own above."""
        lower = os.open(self.image["rootfs"], PATH_FLAGS | os.O_DIRECTORY)
        try:
            self._mount("tmpfs", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
            for name in ("upper", "work", "root"):
                os.mkdir(f"{STAGE}/{name}", 0o755)
            data = f"lowerdir=/proc/self/fd/{lower},upperdir={STAGE}/upper,workdir={STAGE}/work"
            self._mount("overlay", f"{STAGE}/root", "overlay", MS_NOSUID | MS_NODEV, data)
        finally:
            os.close(lower)
        return f"{STAGE}/root"

    def _pivot(self, root: str) -> str:  # pragma: no cover - child side
        """Make ``root`` the root; the host's tree stays below a name the image cannot know
        (so no link of the image leads there), which :meth:`enter` detaches at the end."""
        old = f".host-{os.urandom(8).hex()}"
        os.mkdir(f"{root}/{old}", 0o700)
        os.chdir(root)
        number = PIVOT_ROOT.get(os.uname().machine)
        if number is None or self.libc.syscall(number, b".", old.encode()) != 0:
            raise ContainerError(errno.EPERM, "cannot pivot_root", root)
        os.chdir("/")
        return f"/{old}"

    def _proc(self) -> None:  # pragma: no cover - child side
        target = _made_dir("/proc")
        try:
            self._mount("proc", target, "proc", NOSUID_NODEV | MS_NOEXEC, HIDEPID[0])
        except ContainerError as exc:
            if exc.errno != errno.EINVAL:
                raise
            self._mount("proc", target, "proc", NOSUID_NODEV | MS_NOEXEC, HIDEPID[1])

    def _dev(self, nodes: list[tuple[str, int, bool]]) -> None:  # pragma: no cover
        dev = _made_dir("/dev")
        # nodev too: each device file is a bind mount of its own, whose flags are what count.
        self._mount("tmpfs", dev, "tmpfs", NOSUID_NODEV | MS_NOEXEC, "mode=0755,size=64k")
        for path, fd, _ in nodes:
            self._bind(fd, _made_file(path), readonly=False, dev_ok=True)
        os.mkdir("/dev/pts", 0o755)
        self._mount(
            "devpts",
            "/dev/pts",
            "devpts",
            MS_NOSUID | MS_NOEXEC,
            "newinstance,ptmxmode=0666,mode=0620",
        )
        os.symlink("pts/ptmx", "/dev/ptmx")
        os.mkdir(SHM, 0o1777)
        size = int(self.image.get("shm_size") or 0) or 64 << 20
        self._mount("tmpfs", SHM, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={size}")
        for name, target in (
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ):
            os.symlink(target, f"/dev/{name}")

    def _binds(self, binds: list[tuple[str, int, bool]]) -> None:  # pragma: no cover
        for target, fd, readonly in binds:
            is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
            point = _made_dir(target) if is_dir else _made_file(target)
            self._bind(fd, point, readonly=readonly, dev_ok=False)

    def _bind(
        self, fd: int, target: str, *, readonly: bool, dev_ok: bool
    ) -> None:  # pragma: no cover - child side
        """Bind the opened ``fd`` at ``target``: ``nosuid`` always, ``nodev`` unless it is a
        device file we expose, read-only where asked."""
        self._mount(f"{self.fds}/{fd}", target, None, MS_BIND | MS_REC)
        flags = MS_BIND | MS_REMOUNT | MS_NOSUID | (0 if dev_ok else MS_NODEV)
        self._mount(None, target, None, flags | (MS_RDONLY if readonly else 0))


RUNTIMES: dict[str, type[ContainerRuntime]] = {"native": NativeRuntime}


def runtime_for(image: dict[str, Any], account: dict[str, Any] | None) -> ContainerRuntime:
    """The runtime the spec's ``image`` section names."""
    return RUNTIMES[image.get("runtime") or "native"](image, account)


def _open_host(path: str) -> int:  # pragma: no cover - child side
    try:
        return os.open(path, PATH_FLAGS)
    except OSError as exc:
        raise ContainerError(exc.errno or errno.ENOENT, exc.strerror or "", path) from None


def _become(account: dict[str, Any]) -> None:  # pragma: no cover - child side
    os.setgroups(account["groups"] or [account["gid"]])
    os.setegid(account["gid"])
    os.seteuid(account["uid"])


def _made_dir(path: str) -> str:  # pragma: no cover - child side, inside the new root
    """``path`` as a directory to mount on, made if missing (in the worker's upper layer)."""
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        os.unlink(path)  # an image's link or file where we mount: ours wins
    os.makedirs(path, 0o755, exist_ok=True)
    return path


def _make_links(links: list[list[str]]) -> None:  # pragma: no cover - child side
    """The driver's links, where the image has nothing of that name (its own file wins)."""
    for target, link in links:
        if os.path.lexists(link):
            continue
        try:  # a link that cannot be made (a read-only mount there) is not worth a failure
            os.makedirs(os.path.dirname(link) or "/", 0o755, exist_ok=True)
            os.symlink(target, link)
        except OSError:
            continue


def _make_workdir(path: str) -> None:  # pragma: no cover - child side, inside the new root
    """The working directory, made (root's, 0755) when the image lacks it, as OCI runtimes do;
    anything else in its way is left for the chdir to report."""
    try:  # noqa: SIM105 - contextlib would cost an import
        os.makedirs(path, 0o755, exist_ok=True)
    except OSError:
        pass


def _made_file(path: str) -> str:  # pragma: no cover - child side, inside the new root
    """``path`` as an empty file to mount a file on (an image's link there is replaced)."""
    if os.path.islink(path) or os.path.isdir(path):
        if os.path.isdir(path) and not os.path.islink(path):
            os.rmdir(path)
        else:
            os.unlink(path)
    os.makedirs(os.path.dirname(path) or "/", 0o755, exist_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644))
    return path
