"""/api/v1/images: the image catalogue, thin routes over ImageCatalogue (docs/images.md).

An image a caller may not see is the same 404 as a missing one. ``POST /images`` takes the
archive as the raw request body, streamed to disk under ``GPUYARD_IMAGE_UPLOAD_MAX`` (the
request guard passes this route's body on unread).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from gpuyard.models.image_catalogue import (
    ImageCopy,
    ImageScope,
    ImageShare,
    ImageView,
    ImageVisibility,
)
from gpuyard.server.deps import ServicesDep, UserDep
from gpuyard.services.image_catalogue import PushRequest, receive_upload

router = APIRouter(tags=["images"])

_NAME = "An image of the pool's registry, e.g. alice/train:3."


@router.get("/images")
def list_images(
    services: ServicesDep,
    user: UserDep,
    scope: Annotated[ImageScope | None, Query(description="training or development")] = None,
    accelerator: Annotated[
        str | None, Query(max_length=64, description="Those built for it, and for any.")
    ] = None,
) -> list[ImageView]:
    """The catalogue's images you may see."""
    return services.images.list_images(actor=user, scope=scope, accelerator=accelerator)


_ARCHIVE_BODY = {
    "requestBody": {
        "required": True,
        "description": "The image archive: an OCI layout as a tar, an OCI archive, or the tar "
        "`docker save` writes (optionally gzip-compressed).",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.post("/images", status_code=201, openapi_extra=_ARCHIVE_BODY)
async def push_image(
    request: Request,
    services: ServicesDep,
    user: UserDep,
    name: Annotated[str, Query(max_length=512, description=_NAME)],
    scope: ImageScope = ImageScope.TRAINING,
    accelerator: Annotated[str, Query(max_length=64)] = "",
    description: Annotated[str, Query(max_length=2000)] = "",
    visibility: ImageVisibility | None = None,
) -> ImageView:
    """Push an image: the body is an OCI layout as a tar, an OCI archive or a docker archive."""
    catalogue = services.images
    wanted = PushRequest(
        name, scope=scope, accelerator=accelerator, description=description, visibility=visibility
    )
    # The name, the namespace and a replaced image's owner are checked before the body is
    # read: a refused push costs no upload (push checks again, for a change meanwhile).
    await run_in_threadpool(catalogue.admit, wanted, actor=user)
    archive = catalogue.upload_path()
    length = request.headers.get("content-length", "")
    declared = int(length) if length.isdigit() else None
    await receive_upload(request.stream(), archive, limit=catalogue.upload_max, declared=declared)
    return await run_in_threadpool(catalogue.push, archive, wanted, actor=user)


@router.post("/images/copy", status_code=201)
def copy_image(wanted: ImageCopy, services: ServicesDep, user: UserDep) -> ImageView:
    """Push an image copied from another registry (one the pool's admin listed)."""
    return services.images.copy(wanted, actor=user)


@router.post("/images/{name:path}/share")
def share_image(name: str, change: ImageShare, services: ServicesDep, user: UserDep) -> ImageView:
    """Change who may see an image (its owner or an admin)."""
    return services.images.share(name, change.visibility, actor=user)


@router.get("/images/{name:path}")
def get_image(name: str, services: ServicesDep, user: UserDep) -> ImageView:
    return services.images.get(name, actor=user)


@router.delete("/images/{name:path}", status_code=204)
def delete_image(name: str, services: ServicesDep, user: UserDep) -> Response:
    """Take an image out of the catalogue (its owner or an admin)."""
    services.images.delete(name, actor=user)
    return Response(status_code=204)
