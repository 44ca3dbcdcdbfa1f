"""Settings of a gpuyard process, read from ``GPUYARD_*`` environment variables.

One object per process, built at start-up and passed down; nothing reads the environment at
import time. ``gpuyard config show`` prints it with each field's description.
"""

from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import Annotated, Literal

from platformdirs import user_config_dir, user_data_dir
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from gpuyard.models.cdi import CDI_DIRS
from gpuyard.models.environment import parse_allowlist
from gpuyard.models.node import Network
from gpuyard.models.sandbox import (
    DEFAULT_GPU_DEVICE_FILES,
    DEFAULT_GPU_SHARED_FILES,
    parse_memory_default,
)
from gpuyard.models.service import IdleAction
from gpuyard.models.worker import RunAs
from gpuyard.quantities import parse_bytes, parse_duration

__all__ = ["LOCAL_REGISTRY", "Settings"]

LOCAL_REGISTRY = "local"
"""``GPUYARD_REGISTRY`` that asks `gpuyard up` to run the pool's own registry."""


def _default_home() -> Path:
    return Path(user_data_dir("gpuyard", appauthor=False))


def _default_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry, e.g. in a bare container
        return "unknown"


def _default_config_dir() -> Path:
    return Path(user_config_dir("gpuyard", appauthor=False))


def _default_openmpi() -> Path | None:
    """The Open MPI of this Python environment (the ``openmpi`` package of the train extra)."""
    prefix = Path(sys.prefix)
    return prefix if (prefix / "bin" / "ompi_info").exists() else None


def _default_mpich() -> Path | None:
    """The MPICH that ``make setup`` installs in a prefix of its own beside Open MPI (both ship
    ``mpirun`` and ``libmpi``, so they cannot share one)."""
    prefix = Path(sys.prefix) / "mpich"
    return prefix if (prefix / "bin" / "mpichversion").exists() else None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUYARD_", extra="ignore")

    home: Path = Field(
        default_factory=_default_home,
        description="Data directory: the SQLite database, job logs, worker state, server.json.",
    )
    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL of the store, e.g. postgresql+psycopg://user@host/db. "
        "Default: SQLite (WAL) at <home>/gpuyard.db.",
    )
    url: str | None = Field(
        None,
        description="Server URL for clients (CLI, Python client). Default: what `gpuyard up` "
        "wrote to <home>/server.json.",
    )
    user: str = Field(
        default_factory=_default_user,
        description="The pool's own user: `gpuyard up` makes it an admin and writes its token "
        "to <home>/owner.token (0600), where the CLI on this machine finds it.",
    )
    token: str | None = Field(
        None,
        description="The API token clients send (default: the one `gpuyard login` stored for "
        "the server's URL, else the pool owner's token of a pool on this machine).",
    )
    config_dir: Path = Field(
        default_factory=_default_config_dir,
        description="Where `gpuyard login` keeps tokens (credentials.json, 0600).",
    )
    host: str = Field(
        "127.0.0.1",
        description="Address the server listens on. Any other than a loopback address needs "
        "TLS (tls_cert and tls_key) or insecure.",
    )
    tls_cert: Path | None = Field(None, description="PEM certificate: serve HTTPS.")
    tls_key: Path | None = Field(None, description="PEM private key of tls_cert.")
    insecure: bool = Field(
        False,
        description="Serve plain HTTP on a non-loopback address (tokens cross the network in "
        "clear text; only behind a TLS proxy or on a trusted network).",
    )
    port: int = Field(8470, ge=0, le=65535, description="Port the server listens on (0: any).")
    virtual_nodes: int = Field(
        0, ge=0, le=4096, description="Present this many virtual nodes (0: the machine itself)."
    )
    gpus_per_node: int | None = Field(
        None, ge=0, description="GPUs per virtual node (default: the machine's GPUs / nodes)."
    )
    cpus_per_node: float | None = Field(
        None,
        gt=0,
        description="CPUs per virtual node (default: the machine's CPUs / nodes, at least 1). "
        "May add up to more than the machine has: the workers' CPU limits then overlap and "
        'its cores are shared (docs/scheduling.md, "Virtual nodes").',
    )
    memory_per_node: int | None = Field(
        None, gt=0, description="Memory bytes per virtual node (default: machine / nodes)."
    )
    pids_per_worker: int = Field(
        4096,
        ge=0,
        le=4_194_304,
        description="Processes (threads count too) one worker may have at once, its cgroup's "
        "pids.max: a fork bomb stops there. 0: no limit (docs/security.md).",
    )
    pids_ceiling: int | None = Field(
        None,
        ge=0,
        le=4_194_304,
        description="Processes all workers of this machine may have together, pids.max of the "
        "pool's cgroup (default: half of the host's kernel.pid_max or kernel.threads-max, "
        "whichever is lower, so jobs cannot exhaust the host's pids; 0: none).",
    )
    memory_ceiling: int | None = Field(
        None,
        gt=0,
        description="Memory bytes all workers of this machine may use together, memory.max of "
        "the pool's cgroup (default: none, only each worker's own limit).",
    )
    alert_webhook: str | None = Field(
        None,
        pattern=r"^https?://",
        description="URL that receives a JSON POST for each alert (a job found running slow; "
        "docs/fault-tolerance.md).",
    )
    inject_faults: dict[str, Literal["burn", "collective"]] = Field(
        default_factory=dict,
        description="Chaos testing of fault tolerance: node -> the fault its node check finds "
        '(burn or collective), e.g. GPUYARD_INJECT_FAULTS=\'{"node1": "burn"}\'. Local '
        "executor only; leave empty in production.",
    )
    registry: str | None = Field(
        None,
        description="The URL of the pool's OCI image registry (https://host:port), where the "
        "images jobs name live (docs/images.md). 'local': `gpuyard up` runs the pool's own "
        "(Debian's docker-registry on 127.0.0.1, TLS, the pool's credential; its files under "
        "<home>/registry). None: jobs cannot name an image.",
    )
    registry_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="The port of the pool's own registry (GPUYARD_REGISTRY=local); 0: a free "
        "one at each start.",
    )
    registry_ca: Path | None = Field(
        None, description="The CA certificate (PEM) the registry's TLS certificate is checked with."
    )
    registry_user: str | None = Field(
        None, description="The pool's account on the registry (it resolves and pulls images)."
    )
    registry_password: SecretStr | None = Field(
        None, description="The password or token of registry_user; never logged or shown."
    )
    image_pull_timeout: float = Field(
        600.0,
        gt=0,
        description="Seconds a starting job waits for its image's registry to answer (tried "
        "again every few seconds, the job's reason saying why) before it fails "
        "(docs/images.md#pulling).",
    )
    image_cache_max: int = Field(
        100 << 30,
        ge=64 << 20,
        description="Bytes of images each node keeps (unpacked); past them the least recently "
        "used image no worker runs in is evicted.",
    )
    image_upload_max: int = Field(
        16 << 30,
        ge=1 << 20,
        description="Bytes an image archive uploaded with `gpuyard images push` may have, and "
        "may unpack to; a larger upload is refused (413) as it arrives.",
    )
    image_sources: list[str] = Field(
        default_factory=list,
        description="Registries (host[:port]) users may copy images from with `gpuyard images "
        "push HOST/REPO:TAG NAME`; the server connects only to these (empty: no copying).",
    )
    image_sources_ca: Path | None = Field(
        None,
        description="The CA certificates (PEM) those registries are checked with "
        "(default: the system's).",
    )
    dataset_roots: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="Directories of shared storage datasets may be made from (`gpuyard "
        "datasets create NAME --from PATH`), colon-separated: GPUYARD_DATASET_ROOTS="
        "'/data:/scratch/shared'. Empty: no dataset is made from a path, only uploaded "
        "(docs/datasets.md).",
    )
    dataset_upload_max: int = Field(
        64 << 30,
        ge=1 << 20,
        description="Bytes a dataset upload (`gpuyard datasets upload`, a tar) may have, and may "
        "unpack to; a larger one is refused (413).",
    )
    dataset_upload_expiry: float = Field(
        86400.0,
        ge=60,
        description="Seconds an unfinished dataset upload is kept after its last chunk (also "
        "90m, 24h, 7d); then its bytes and its version are deleted, and the upload must start "
        "again.",
    )
    data_cache: Path | None = Field(
        None,
        description="Where each node keeps copies of datasets its jobs prepare (a mount's "
        "`prepare: true`), one directory per node: its fast local storage (default "
        '<home>/data-cache). The disk probe watches its filesystem (docs/datasets.md, "Data '
        'preparation").',
    )
    data_retention: float = Field(
        7 * 86400.0,
        ge=0,
        description="Seconds a node keeps a dataset copy after the last job using it ended "
        "(also 90m, 12h, 7d).",
    )
    data_cache_max: int = Field(
        500 << 30,
        ge=1 << 20,
        description="Bytes of dataset copies each node keeps; past them the least recently "
        "used copy no job uses is evicted (also 200G, 2T).",
    )
    secrets_key_file: Path | None = Field(
        None,
        description="The pool's secret key (Fernet), which encrypts what users ask the pool to "
        "keep (registry logins); made (mode 0600) when first needed. Servers sharing one "
        "database need the same file; another key cannot read what this one sealed. "
        "Default: <home>/secrets.key.",
    )
    log_max: int = Field(
        64 << 20,
        ge=1 << 20,
        description="Bytes each worker's log may have (stdout and stderr together). Past them "
        "the oldest half is dropped, behind a line saying how many bytes were, so one job's "
        "output cannot fill the disk (docs/security.md#logs-and-disk-space).",
    )
    disk_reserve: int = Field(
        64 << 20,
        ge=0,
        description="Bytes of <home>/disk.reserve, a file the pool removes when the disk of "
        "its home fills, so that the database can still write, and makes again once twice "
        "as much is free; /health says degraded meanwhile (docs/security.md#logs-and-disk-"
        "space). 0: no reserve.",
    )
    controller_interval: float = Field(
        0.5, gt=0, le=60, description="Seconds between reconcile passes when nothing wakes it."
    )
    inspect_interval: float = Field(
        60.0,
        ge=0,
        le=86400,
        description="Seconds between inspections of every node's health (the executor's "
        "heartbeat, free disk of the job directories, the NIC, each GPU through NVML: "
        "temperature, ECC, retired pages, Xid events); 0: never. A new critical finding "
        "cordons the node (docs/node-health.md).",
    )
    disk_warning: float = Field(
        0.10,
        ge=0,
        le=1,
        description="Free fraction of a node's disk (its job directories' filesystem, and its "
        "data cache's) below which the disk probe warns (docs/node-health.md).",
    )
    disk_critical: float = Field(
        0.03,
        ge=0,
        le=1,
        description="Free fraction below which the disk probe is critical: the node is "
        "cordoned, with the reason, and takes no job (at most disk_warning).",
    )
    predict_run_times: bool = Field(
        True,
        description="Learn each job's run time from the jobs that ended (its user's, its "
        "name's, its size's) and use it where a job has no max runtime: to order the queue "
        "within a tier, to time reservations and backfill, and to predict starts with a "
        "range (docs/scheduling.md#predicted-run-times). false: none of it, as before.",
    )
    idle_timeout: float = Field(
        3600.0,
        ge=0,
        le=30 * 86400,
        description="Seconds an interactive job (a notebook, a TensorBoard) may stay idle "
        "before it is reclaimed as idle_action says: no kernel ran, no terminal was used, "
        "nothing was changed through the proxy (a TensorBoard: nothing was asked of it) and "
        "its GPUs stayed under idle_gpu_util. A warning event comes first. 0: never "
        "(docs/interactive.md#idle).",
    )
    idle_action: IdleAction = Field(
        IdleAction.SUSPEND,
        description="suspend (suspended and held, its files kept; opening it resumes it) or stop.",
    )
    idle_gpu_util: float = Field(
        5.0,
        ge=0,
        le=100,
        description="GPU utilisation (percent, its GPUs together) at or above which an "
        "interactive job is busy, whatever else it does.",
    )
    usage_interval: float = Field(
        10.0,
        ge=1,
        le=60,
        description="Seconds between samples of what running workers and nodes use (CPU, "
        "memory, GPUs); the realtime view shows the last 10 minutes of them "
        "(docs/monitoring.md).",
    )
    executor: Literal["local", "ray"] = Field(
        "local",
        description="Executor that runs workers: 'local' (this machine, optionally as virtual "
        "nodes) or 'ray' (the nodes of a Ray cluster, ray_address; docs/cluster.md).",
    )
    ray_address: str | None = Field(
        None,
        description="The Ray cluster's GCS address (HEAD:PORT) for executor 'ray'. The control "
        "plane connects as a Ray driver: its Ray and Python versions must equal the cluster's.",
    )
    ray_namespace: str = Field(
        "gpuyard",
        min_length=1,
        description="Ray namespace of this pool's node agents (two pools on one Ray cluster "
        "need two namespaces).",
    )
    ray_node_home: Path | None = Field(
        None,
        description="Directory on every Ray node where its agent keeps workers (logs, control "
        "files, supervisors): the same path on each node, on the node's own disk. Default: "
        "<home>/node.",
    )
    ray_interface: str = Field(
        "eth0",
        description="Network interface that carries the Ray nodes' addresses, where jobs' "
        "MPI, gloo, NCCL and UCX are told to talk (docs/security.md, 'Network exposure'); "
        "'lo' for a test cluster on one machine.",
    )
    mpi_openmpi: Path | None = Field(
        default_factory=_default_openmpi,
        description="Prefix of the Open MPI that `mpi: openmpi` jobs use (bin/mpirun, lib/); "
        "its bin and lib lead their PATH and LD_LIBRARY_PATH. Default: the one installed in "
        "gpuyard's Python environment, if any (else mpirun is whatever PATH finds).",
    )
    mpi_mpich: Path | None = Field(
        default_factory=_default_mpich,
        description="Prefix of the MPICH that `mpi: mpich` jobs use. Default: <python "
        "environment>/mpich, where `make setup` installs it, if present.",
    )
    network: Network = Field(
        Network.NONE,
        description="The pool's network preset: 'roce' or 'ib' give jobs the NCCL variables "
        "of docs/distributed.md, 'Network presets', for that fabric; 'none' gives none.",
    )
    network_iface: str = Field(
        "eth0", description="NCCL_SOCKET_IFNAME of the network preset: the nodes' interface."
    )
    large_scale_gpus: int = Field(
        1000,
        ge=1,
        description="From this many GPUs in one job, the network preset adds NCCL_ALGO "
        "(docs/distributed.md, 'Network presets': advice for thousands of GPUs).",
    )
    user_tiers: list[str] = Field(
        default_factory=lambda: ["low", "normal", "high"],
        description="Priority tiers a plain user may choose; admins may choose any (docs/jobs.md, "
        "'Priority tiers': users pick normal or urgent, admins also very urgent).",
    )
    urgent_tier: str = Field(
        "high",
        description="The tier whose running + queued jobs a group's urgent_limit counts "
        "(docs/jobs.md, 'Priority tiers').",
    )
    admins: list[str] = Field(
        default_factory=list,
        description="Users made admins when the pool starts, beside the user who starts it.",
    )
    admin_exec: bool = Field(
        False,
        description="Whether admins may enter other users' jobs (gpuyard exec JOB "
        "run/shell/kill/start, terminals), which runs code as the job's owner's OS account; "
        "each such entry is audited as job.exec.admin. Off: only a job's owner may "
        "(docs/security.md).",
    )
    job_env_allow: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="Names and globs of the pool's environment its jobs inherit beside the "
        "built-in allowlist (PATH, LANG, LC_*, TZ, TERM, LD_LIBRARY_PATH, CUDA_HOME, CUDA_PATH, "
        "CUDA_MODULE_LOADING, NCCL_*), comma-separated: GPUYARD_JOB_ENV_ALLOW='PYTHONPATH,SITE_*'"
        ". Nothing else of the environment of `gpuyard up` reaches a job (docs/security.md).",
    )
    default_memory: str = Field(
        "50%",
        description="Memory limit of a job that names no `memory`, per worker: a share of its "
        "node's memory (50%), a size (16G), or 0 for none. Enforced by the worker's cgroup.",
    )
    checkpoint_memory: str = Field(
        "25%",
        description="Node memory each job gets per node for the checkpoint service "
        "(`gpuyard.runtime.save`): a share of the node's memory (25%), a size (16G), or 0 for "
        "none. A tmpfs of the job's own, kept across its restarts on the node and freed when it "
        "ends; its pages count in the memory of the worker that writes them. Needs a pool run "
        "by root (docs/checkpoints.md).",
    )
    private_tmp: bool = Field(
        True,
        description="Give each worker a private, empty /tmp, /var/tmp and /dev/shm (tmpfs, "
        "counted in its memory, gone at its end) in a mount namespace of its own; needs a pool "
        "run by root (docs/security.md).",
    )
    gpu_device_files: str = Field(
        DEFAULT_GPU_DEVICE_FILES,
        pattern=r"\{index\}",
        description="The device file of GPU {index} of the machine: a worker can open only its "
        "own GPUs' (mount namespace; devices cgroup on v1).",
    )
    gpu_shared_device_files: Annotated[tuple[str, ...], NoDecode] = Field(
        DEFAULT_GPU_SHARED_FILES,
        description="Device files every GPU job needs (comma-separated); hidden from jobs "
        "given no GPU.",
    )
    gpu_cdi_dirs: Annotated[tuple[str, ...], NoDecode] = Field(
        CDI_DIRS,
        description="Where each node looks for the CDI spec of its GPUs (comma-separated; "
        "`nvidia-ctk cdi generate` writes one): a GPU job in an image gets the driver's "
        "libraries and tools it lists (docs/images.md).",
    )
    run_as: RunAs = Field(
        RunAs.OWNER,
        description="Which OS account runs jobs: 'owner' runs each job as its owner's account "
        "(the one an admin mapped with `gpuyard users set NAME --os-user ACCOUNT`, else "
        "gpy-<name>, created when missing), never root; 'pool' runs them as the pool's own "
        "user. Switching users needs a pool run by root: a pool that is not falls back to "
        "'pool' and says so once at start (docs/security.md).",
    )

    @field_validator("job_env_allow", "gpu_shared_device_files", "gpu_cdi_dirs", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return parse_allowlist(value) if isinstance(value, str) else value

    @field_validator("dataset_roots", mode="before")
    @classmethod
    def _colon_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part for part in value.split(":") if part)
        return value

    @field_validator("data_retention", "dataset_upload_expiry", mode="before")
    @classmethod
    def _retention(cls, value: object) -> object:
        return parse_duration(value) if isinstance(value, str) else value

    @field_validator("data_cache_max", mode="before")
    @classmethod
    def _cache_max(cls, value: object) -> object:
        return parse_bytes(value) if isinstance(value, str) else value

    @field_validator("default_memory", "checkpoint_memory")
    @classmethod
    def _memory_default(cls, value: str) -> str:
        return parse_memory_default(value)

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'gpuyard.db'}"

    @property
    def resolved_secrets_key_file(self) -> Path:
        """The pool's secret key: ``secrets_key_file``, else <home>/secrets.key."""
        return self.secrets_key_file or self.home / "secrets.key"

    @property
    def owner_token_file(self) -> Path:
        """The pool owner's token, written by `gpuyard up` (0600)."""
        return self.home / "owner.token"

    @property
    def credentials_file(self) -> Path:
        """Tokens `gpuyard login` stored, by server URL (0600)."""
        return self.config_dir / "credentials.json"

    @property
    def server_file(self) -> Path:
        """Where `gpuyard up` records its URL and pid for clients to find."""
        return self.home / "server.json"
