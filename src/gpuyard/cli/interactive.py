"""Interactive jobs (docs/interactive.md): notebook, tensorboard, open."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from gpuyard.client import Client
    from gpuyard.models import JobView

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
GpusOpt = Annotated[int | None, typer.Option(help="GPUs (default: none; with --from, the job's).")]
CpusOpt = Annotated[float | None, typer.Option(help="CPUs.")]
MemoryOpt = Annotated[str | None, typer.Option(help="Memory, e.g. 16G.")]
ImageOpt = Annotated[
    str | None,
    typer.Option(
        help="Run in this image of the pool's registry (it must carry JupyterLab or "
        "TensorBoard); without one, in this shell's environment (--export)."
    ),
]
RuntimeOpt = Annotated[
    str | None, typer.Option(help="Max runtime, e.g. 8h; then it ends (its files stay).")
]
NameOpt = Annotated[str | None, typer.Option(help="Job name.")]
ExportOpt = Annotated[
    str | None,
    typer.Option(
        help="What it takes from this shell's environment: ALL (the default without an "
        "image), NONE, or a list NAME,NAME=VALUE (Slurm's --export)."
    ),
]


def _client() -> Client:
    from gpuyard.client import Client

    return Client()


def register(app: typer.Typer) -> None:
    app.command()(notebook)
    app.command()(tensorboard)
    app.command("open")(open_service)


def notebook(
    from_job: Annotated[
        int | None,
        typer.Option(
            "--from",
            help="Make it from this job (a development environment): its image, resources, "
            "mounts, environment and working directory.",
        ),
    ] = None,
    gpus: GpusOpt = None,
    cpus: CpusOpt = None,
    memory: MemoryOpt = None,
    image: ImageOpt = None,
    dataset: Annotated[
        list[str] | None,
        typer.Option(
            help="NAME=PATH[:rw] at workspace/dataset/NAME, or a dataset of the catalogue, "
            "[OWNER/]NAME[@VERSION][:MOUNT] (read-only).",
        ),
    ] = None,
    workdir: Annotated[
        str | None,
        typer.Option(help="Its folder (default: the job's outputs folder, kept while it lives)."),
    ] = None,
    max_runtime: RuntimeOpt = None,
    name: NameOpt = None,
    export: ExportOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start JupyterLab as a job; `gpuyard open JOB` prints its address once it is ready."""
    from gpuyard.cli.specfile import parse_dataset_flags
    from gpuyard.models.service import ServiceKind

    resources = _resources(gpus, cpus, memory)
    if from_job is not None:
        job = _from(from_job, ServiceKind.NOTEBOOK, name, resources, image, max_runtime)
    else:
        fields: dict[str, Any] = {"image": image, "workdir": workdir, "max_runtime": max_runtime}
        if dataset:
            fields["datasets"] = parse_dataset_flags(dataset)
        job = _submit(ServiceKind.NOTEBOOK, name, resources, fields, export)
    _announce(job, as_json)


def tensorboard(
    jobs: Annotated[
        list[int] | None,
        typer.Argument(help="The jobs whose outputs it shows (any you may see)."),
    ] = None,
    cpus: CpusOpt = None,
    memory: MemoryOpt = None,
    image: ImageOpt = None,
    max_runtime: RuntimeOpt = None,
    name: NameOpt = None,
    export: ExportOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start TensorBoard as a job over the outputs of JOBS; `gpuyard open` prints where."""
    from gpuyard.models.service import ServiceKind

    fields: dict[str, Any] = {"image": image, "max_runtime": max_runtime}
    service = {"jobs": list(jobs or [])}
    if name is None and jobs:
        name = "tensorboard-" + "-".join(map(str, jobs[:4]))
    job = _submit(
        ServiceKind.TENSORBOARD, name, _resources(None, cpus, memory), fields, export, service
    )
    _announce(job, as_json)


def open_service(
    job: Annotated[int, typer.Argument(help="An interactive job of yours.")],
    wait: Annotated[
        float, typer.Option(help="Seconds to wait for it to be ready (0: ask once).")
    ] = 120.0,
) -> None:
    """Print the address of an interactive job's page, once it is ready."""
    typer.echo(_client().service_url(job, wait=wait))


def _resources(gpus: int | None, cpus: float | None, memory: str | None) -> dict[str, Any]:
    given = {"gpus": gpus, "cpus": cpus, "memory": memory}
    return {k: v for k, v in given.items() if v is not None}


def _submit(
    kind: Any,
    name: str | None,
    resources: dict[str, Any],
    fields: dict[str, Any],
    export: str | None,
    service: dict[str, Any] | None = None,
) -> JobView:
    from gpuyard.cli.specfile import build_spec, exported_env

    given = {k: v for k, v in fields.items() if v is not None}
    exported = exported_env(dict(given), export, os.environ)
    flags = {**given, **resources, "name": name, "service": {"kind": kind.value, **(service or {})}}
    return _client().submit(build_spec({}, flags, exported=exported))


def _from(
    job_id: int,
    kind: Any,
    name: str | None,
    resources: dict[str, Any],
    image: str | None,
    max_runtime: str | None,
) -> JobView:
    """A development environment made from job ``job_id`` (reference 002's "create
    development environment"), with what the flags change."""
    from gpuyard.models.service import environment_overrides

    client = _client()
    overrides = environment_overrides(kind, name or f"{kind.value}-of-{job_id}")
    if resources:
        source = client.job(job_id).spec
        base = source.resources.model_dump(mode="json") if source is not None else {}
        overrides["resources"] = {**base, **resources}
    if image is not None:
        overrides["image"] = image
    if max_runtime is not None:
        overrides["max_runtime"] = max_runtime
    return client.clone(job_id, **overrides)


def _announce(job: JobView, as_json: bool) -> None:
    from gpuyard.cli.output import console, print_json

    if as_json:
        print_json(job)
        return
    kind = job.spec.service.kind.value if job.spec and job.spec.service else "service"
    console().print(
        f"submitted job [bold]{job.id}[/] ({job.name}), {job.status.label}: its {kind} will be "
        f"at /proxy/{job.id}/; `gpuyard open {job.id}` prints the address once it is ready",
        highlight=False,
    )
