"""The Images page: the catalogue's images the signed-in user may use (docs/images.md, "The
catalogue"), filtered by scope and accelerator kind, as ``gpuyard images ls`` lists them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from gpuyard.models.image_catalogue import ImageScope
from gpuyard.web.context import services
from gpuyard.web.render import page
from gpuyard.web.routing import CallerDep, WebRoute

__all__ = ["router"]

router = APIRouter(route_class=WebRoute, include_in_schema=False)


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
    return page(
        request,
        "images.html",
        caller,
        title="Images",
        images=found,
        scopes=list(ImageScope),
        scope=scope.value if scope else "",
        accelerator=accelerator,
    )
