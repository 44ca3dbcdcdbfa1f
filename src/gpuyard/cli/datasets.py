"""The dataset catalogue: ``gpuyard datasets ls|show|create|upload|rm|share|fav``
(docs/datasets.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from gpuyard.client.datasets import DatasetsClient
    from gpuyard.models.dataset import DatasetView

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
NameArg = Annotated[str, typer.Argument(help="The dataset, [OWNER/]NAME.")]
VisibilityOpt = Annotated[
    str | None,
    typer.Option(help="For a new dataset: private (mine, the default), group or public."),
]
DescriptionOpt = Annotated[str, typer.Option(help="What it holds.")]
WaitOpt = Annotated[
    bool, typer.Option("--wait/--no-wait", help="Wait until the version is hashed.")
]

datasets_app = typer.Typer(
    help="Datasets jobs mount: list, show, make from a path, upload, remove, share, favourite."
)


def register(app: typer.Typer) -> None:
    app.add_typer(datasets_app, name="datasets")


def _datasets() -> DatasetsClient:
    from gpuyard.client import Client
    from gpuyard.client.datasets import DatasetsClient

    return DatasetsClient(Client())


def _size(size: int) -> str:
    from gpuyard.quantities import format_bytes

    return format_bytes(size)


@datasets_app.callback(invoke_without_command=True)
def datasets_main(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List the datasets you may use (also `gpuyard datasets ls`)."""
    if ctx.invoked_subcommand is None:
        datasets_ls("all", as_json)


@datasets_app.command("ls")
def datasets_ls(
    which: Annotated[
        str, typer.Option("--filter", help="all, mine, shared, public or favourites.")
    ] = "all",
    as_json: JsonOpt = False,
) -> None:
    """List the datasets you may use."""
    from rich.table import Table

    from gpuyard.cli.output import console, print_json

    found = _datasets().list(which)
    if as_json:
        print_json(found)
        return
    table = Table("NAME", "OWNER", "VISIBILITY", "LATEST", "SIZE", "VERSIONS", "FAV", box=None)
    for dataset in found:
        table.add_row(
            dataset.name,
            dataset.owner,
            dataset.visibility.value,
            str(dataset.latest) if dataset.latest else "-",
            _size(dataset.size),
            str(len(dataset.versions)),
            "*" if dataset.favourite else "",
        )
    console().print(table)


def _print(dataset: DatasetView) -> None:
    from rich.table import Table

    from gpuyard.cli.output import console

    lines = [
        ("name", f"{dataset.owner}/{dataset.name}"),
        ("visibility", dataset.visibility.value),
        ("latest", str(dataset.latest) if dataset.latest else "- (none ready)"),
        ("favourite", "yes" if dataset.favourite else "no"),
        ("description", dataset.description or "-"),
    ]
    for key, value in lines:
        console().print(f"{key:<12} {value}", highlight=False, markup=False, soft_wrap=True)
    table = Table("VERSION", "STATE", "SIZE", "FILES", "SOURCE", "CREATED", "DIGEST", box=None)
    for v in dataset.versions:
        table.add_row(
            str(v.version),
            v.state.value,
            _size(v.size),
            str(v.files),
            v.path if v.path and v.source == "path" else v.source,
            f"{v.created_at:%Y-%m-%d %H:%M}",
            v.digest[:19] or "-",
        )
    console().print(table)
    for v in dataset.versions:
        if v.error:
            console().print(
                f"version {v.version} failed: {v.error}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )


def _show(dataset: DatasetView, as_json: bool) -> None:
    from gpuyard.cli.output import print_json

    if as_json:
        print_json(dataset)
    else:
        _print(dataset)


def _finish(name: str, dataset: DatasetView, *, wait: bool, as_json: bool) -> None:
    """Show ``dataset`` (after waiting for its hashing); exit 1 if its newest version failed."""
    if wait:
        dataset = _datasets().wait(f"{dataset.owner}/{dataset.name}")
    _show(dataset, as_json)
    newest = dataset.versions[-1] if dataset.versions else None
    if newest is not None and newest.state.value == "failed":
        raise typer.Exit(1)


@datasets_app.command("show")
def datasets_show(
    name: Annotated[
        str, typer.Argument(help="The dataset, [OWNER/]NAME; with --manifest, NAME@VERSION too.")
    ],
    manifest: Annotated[
        bool, typer.Option("--manifest", help="List the version's files, sizes and sha256.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """One dataset and its versions, or one version's manifest."""
    if not manifest:
        _show(_datasets().get(name), as_json)
        return
    from gpuyard.cli.output import console, print_json

    found = _datasets().manifest(name)
    if as_json:
        print_json({"digest": found.digest(), "size": found.size, **found.model_dump()})
        return
    console().print(f"digest {found.digest()}  {len(found.files)} files, {_size(found.size)}")
    for item in found.files:
        console().print(
            f"{item.sha256}  {item.size:>12}  {item.path}", highlight=False, markup=False
        )


@datasets_app.command("create")
def datasets_create(
    name: Annotated[str, typer.Argument(help="The dataset's name (yours).")],
    path: Annotated[
        str,
        typer.Option("--from", help="A directory of shared storage below a dataset root."),
    ],
    description: DescriptionOpt = "",
    visibility: VisibilityOpt = None,
    wait: WaitOpt = True,
    as_json: JsonOpt = False,
) -> None:
    """Make a new version of NAME from a directory on shared storage (left where it is)."""
    dataset = _datasets().create(name, path, description=description, visibility=visibility)
    _finish(name, dataset, wait=wait, as_json=as_json)


@datasets_app.command("upload")
def datasets_upload(
    name: Annotated[str, typer.Argument(help="The dataset's name (yours).")],
    directory: Annotated[Path, typer.Argument(help="The directory to upload.")],
    description: DescriptionOpt = "",
    visibility: VisibilityOpt = None,
    chunk_size: Annotated[
        int, typer.Option(help="Bytes per chunk (at most 4 MiB).", min=4096, max=4 << 20)
    ] = 1 << 20,
    wait: WaitOpt = True,
    as_json: JsonOpt = False,
) -> None:
    """Upload DIRECTORY as a new version of NAME, in chunks; a dropped connection resumes
    where the server stopped, and so does running the same command again."""
    from gpuyard.cli.output import err_console

    shown = [-1]

    def progress(done: int, total: int) -> None:
        percent = done * 100 // max(total, 1)
        if percent // 10 != shown[0] and not as_json:
            shown[0] = percent // 10
            err_console().print(f"sent {percent}% of {_size(total)}", highlight=False)

    dataset = _datasets().upload(
        name,
        directory,
        description=description,
        visibility=visibility,
        chunk=chunk_size,
        progress=progress,
    )
    _finish(name, dataset, wait=wait, as_json=as_json)


@datasets_app.command("rm")
def datasets_rm(
    name: Annotated[str, typer.Argument(help="[OWNER/]NAME, or NAME@VERSION for one version.")],
) -> None:
    """Delete a dataset or one version (yours, or any for admins); refused while a job that
    has not ended mounts it."""
    from gpuyard.cli.output import console

    _datasets().delete(name)
    console().print(f"removed {name}", highlight=False, markup=False)


@datasets_app.command("share")
def datasets_share(
    name: NameArg,
    visibility: Annotated[str, typer.Argument(help="private (mine), group or public.")],
    as_json: JsonOpt = False,
) -> None:
    """Change who may see and mount a dataset (yours, or any for admins)."""
    _show(_datasets().share(name, visibility), as_json)


@datasets_app.command("fav")
def datasets_fav(
    name: NameArg,
    off: Annotated[bool, typer.Option("--off", help="No longer a favourite.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Mark a dataset as a favourite (`--off`: unmark it); `ls --filter favourites` lists them."""
    _show(_datasets().favourite(name, on=not off), as_json)
