"""The Images page: the catalogue's images the signed-in user may use (docs/images.md, "The
catalogue"), filtered by scope and accelerator kind, as ``gpuyard images ls`` lists them; an
upload form that pushes an archive, and Share and Delete for the images the user may change,
each through the catalogue service's own calls and rules.

The upload is the archive as the raw request body (the page's script sends the chosen file
with ``fetch``), streamed to disk under the pool's cap exactly as ``POST /api/v1/images``
does: the server has no streaming multipart parser, and a form post of a file would be read
whole (docs/web.md, "Images"). Its CSRF token comes in the ``X-Gpuyard-CSRF`` header.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.concurrency import run_in_threadpool

from gpuyard.errors import InvalidSpec
from gpuyard.models.image_catalogue import ImageScope, ImageVisibility
from gpuyard.services.image_catalogue import PushRequest, receive_upload
from gpuyard.web.context import services
from gpuyard.web.render import page
from gpuyard.web.routing import CallerDep, WebRoute, back_to
from gpuyard.web.session import CSRF_FIELD, check_post, read_form

__all__ = ["CSRF_HEADER", "PUSH_PATH", "router"]

router = APIRouter(route_class=WebRoute, include_in_schema=False)

PUSH_PATH = "/images/push"
"""The upload's route: the request guard passes its body on unread (it streams it)."""
CSRF_HEADER = "x-gpuyard-csrf"


@router.get("/images", response_class=HTMLResponse)
def images(
    request: Request,
    caller: CallerDep,
    scope: Annotated[ImageScope | None, Query()] = None,
    accelerator: Annotated[str, Query(max_length=64)] = "",
) -> HTMLResponse:
    found = services(request).images.list_images(
        actor=caller.name, scope=scope, accelerator=accelerator or None
    )
    # Official is for admins only (the catalogue refuses it to others all the same).
    choices = [v for v in ImageVisibility if caller.admin or v != ImageVisibility.OFFICIAL]
    return page(
        request,
        "images.html",
        caller,
        title="Images",
        images=found,
        scopes=list(ImageScope),
        visibilities=choices,
        scope=scope.value if scope else "",
        accelerator=accelerator,
    )


@router.post(PUSH_PATH)
async def push(
    request: Request,
    caller: CallerDep,
    name: Annotated[str, Query(max_length=512)],
    scope: ImageScope = ImageScope.TRAINING,
    accelerator: Annotated[str, Query(max_length=64)] = "",
    description: Annotated[str, Query(max_length=2000)] = "",
    visibility: ImageVisibility | None = None,
) -> JSONResponse:
    """Push the archive in the body, as ``POST /api/v1/images`` does (the same calls)."""
    check_post(request, {CSRF_FIELD: [request.headers.get(CSRF_HEADER, "")]})
    catalogue = services(request).images
    wanted = PushRequest(
        name, scope=scope, accelerator=accelerator, description=description, visibility=visibility
    )
    await run_in_threadpool(catalogue.admit, wanted, actor=caller.name)
    archive = catalogue.upload_path()
    length = request.headers.get("content-length", "")
    declared = int(length) if length.isdigit() else None
    await receive_upload(request.stream(), archive, limit=catalogue.upload_max, declared=declared)
    view = await run_in_threadpool(catalogue.push, archive, wanted, actor=caller.name)
    notice = f"pushed {view.name} ({view.visibility.value})"
    return JSONResponse({"name": view.name, "next": "/images?notice=" + quote(notice)})


def _name(form: dict[str, list[str]]) -> str:
    name = (form.get("name") or [""])[-1].strip()
    if not name or len(name) > 512:
        raise InvalidSpec("name: give the image's name, e.g. alice/train:3")
    return name


@router.post("/images/share")
async def share(request: Request, caller: CallerDep) -> Response:
    form = await read_form(request)
    check_post(request, form)
    name = _name(form)
    text = (form.get("visibility") or [""])[-1]
    if text not in set(ImageVisibility):
        raise InvalidSpec(f"visibility: {text!r} is not one of {', '.join(ImageVisibility)}")
    catalogue = services(request).images
    view = await run_in_threadpool(catalogue.share, name, ImageVisibility(text), actor=caller.name)
    return back_to("/images", f"{view.name} is now {view.visibility.value}")


@router.post("/images/delete")
async def delete(request: Request, caller: CallerDep) -> Response:
    form = await read_form(request)
    check_post(request, form)
    name = _name(form)
    await run_in_threadpool(services(request).images.delete, name, actor=caller.name)
    return back_to("/images", f"{name} deleted")
