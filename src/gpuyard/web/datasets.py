"""The Datasets page: the catalogue's datasets the signed-in user may see (docs/datasets.md),
filtered as ``gpuyard datasets ls --filter`` does, with their versions, sizes and states;
Favourite for any of them, Share and Delete for those the user may change, each through the
catalogue service's own calls and rules. Making a version stays with the command line
(``gpuyard datasets create|upload``): an upload is resumable chunks, not a form post.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from gpuyard.errors import InvalidSpec
from gpuyard.models.dataset import DatasetFilter, DatasetVisibility
from gpuyard.web.context import services
from gpuyard.web.render import page
from gpuyard.web.routing import CallerDep, WebRoute, back_to
from gpuyard.web.session import check_post, read_form

__all__ = ["router"]

router = APIRouter(route_class=WebRoute, include_in_schema=False)


@router.get("/datasets", response_class=HTMLResponse)
def datasets(
    request: Request,
    caller: CallerDep,
    which: Annotated[DatasetFilter, Query(alias="filter")] = DatasetFilter.ALL,
) -> HTMLResponse:
    found = services(request).datasets.list_datasets(actor=caller.name, which=which)
    return page(
        request,
        "datasets.html",
        caller,
        title="Datasets",
        datasets=found,
        filters=list(DatasetFilter),
        visibilities=list(DatasetVisibility),
        which=which.value,
    )


def _field(form: dict[str, list[str]], key: str) -> str:
    value = (form.get(key) or [""])[-1].strip()
    if not value or len(value) > 300:
        raise InvalidSpec(f"{key}: give the dataset, OWNER/NAME")
    return value


@router.post("/datasets/share")
async def share(request: Request, caller: CallerDep) -> Response:
    form = await read_form(request)
    check_post(request, form)
    name = _field(form, "name")
    try:
        visibility = DatasetVisibility.parse(_field(form, "visibility"))
    except ValueError as error:
        raise InvalidSpec(f"visibility: {error}") from None
    catalogue = services(request).datasets
    view = await run_in_threadpool(catalogue.share, name, visibility, actor=caller.name)
    return back_to("/datasets", f"{view.owner}/{view.name} is now {view.visibility.value}")


@router.post("/datasets/favourite")
async def favourite(request: Request, caller: CallerDep) -> Response:
    form = await read_form(request)
    check_post(request, form)
    name = _field(form, "name")
    on = (form.get("on") or ["1"])[-1] == "1"
    catalogue = services(request).datasets
    view = await run_in_threadpool(catalogue.favourite, name, actor=caller.name, on=on)
    said = "is a favourite" if view.favourite else "is no longer a favourite"
    return back_to("/datasets", f"{view.owner}/{view.name} {said}")


@router.post("/datasets/delete")
async def delete(request: Request, caller: CallerDep) -> Response:
    form = await read_form(request)
    check_post(request, form)
    name = _field(form, "name")
    await run_in_threadpool(services(request).datasets.delete, name, actor=caller.name)
    return back_to("/datasets", f"{name} deleted")
