"""/api/v1/datasets: the dataset catalogue, thin routes over DatasetCatalogue
(docs/datasets.md).

A dataset a caller may not see is the same 404 as a missing one. An upload is a session:
``POST /dataset-uploads`` starts it, ``PUT /dataset-uploads/{id}?offset=N`` sends a chunk
(at most 4 MiB, the raw body), ``GET`` says the offset to resume from, ``POST …/commit``
closes it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from gpuyard.models.dataset import (
    DatasetCreate,
    DatasetFilter,
    DatasetShare,
    DatasetView,
    Manifest,
    UploadStart,
    UploadView,
)
from gpuyard.server.deps import ServicesDep, UserDep

router = APIRouter(tags=["datasets"])

_UPLOAD = "/dataset-uploads/{upload_id}"
_CHUNK_BODY = {
    "requestBody": {
        "required": True,
        "description": "The archive's bytes from `offset` on (at most 4 MiB).",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.get("/datasets")
def list_datasets(
    services: ServicesDep,
    user: UserDep,
    which: Annotated[
        DatasetFilter, Query(alias="filter", description="mine, shared, public, favourites")
    ] = DatasetFilter.ALL,
) -> list[DatasetView]:
    """The datasets you may see."""
    return services.datasets.list_datasets(actor=user, which=which)


@router.post("/datasets", status_code=201)
def create_dataset(wanted: DatasetCreate, services: ServicesDep, user: UserDep) -> DatasetView:
    """A new version from a directory below a dataset root (hashed in the background)."""
    return services.datasets.create_from_path(wanted, actor=user)


@router.post("/dataset-uploads", status_code=201)
def start_upload(wanted: UploadStart, services: ServicesDep, user: UserDep) -> UploadView:
    """Start uploading a new version (a tar archive of its directory)."""
    return services.datasets.start_upload(wanted, actor=user)


@router.get(_UPLOAD)
def get_upload(upload_id: str, services: ServicesDep, user: UserDep) -> UploadView:
    """Where an upload stands: send the next chunk from its ``offset``."""
    return services.datasets.upload(upload_id, actor=user)


@router.put(_UPLOAD, openapi_extra=_CHUNK_BODY)
async def put_chunk(
    upload_id: str,
    request: Request,
    services: ServicesDep,
    user: UserDep,
    offset: Annotated[int, Query(ge=0, le=(1 << 63) - 1)],
) -> UploadView:
    """Send a chunk at ``offset`` (409 with the right offset if it is not the one due)."""
    data = await request.body()  # at most 4 MiB: the request guard's cap
    return await run_in_threadpool(services.datasets.put_chunk, upload_id, offset, data, actor=user)


@router.post(_UPLOAD + "/commit")
def commit_upload(upload_id: str, services: ServicesDep, user: UserDep) -> DatasetView:
    """Close an upload whose bytes are all in: it is unpacked and hashed in the background."""
    return services.datasets.commit(upload_id, actor=user)


@router.post("/datasets/{name:path}/share")
def share_dataset(
    name: str, change: DatasetShare, services: ServicesDep, user: UserDep
) -> DatasetView:
    """Change who may see and mount a dataset (its owner or an admin)."""
    return services.datasets.share(name, change.visibility, actor=user)


@router.put("/datasets/{name:path}/favourite")
def favourite(name: str, services: ServicesDep, user: UserDep) -> DatasetView:
    return services.datasets.favourite(name, actor=user, on=True)


@router.delete("/datasets/{name:path}/favourite")
def unfavourite(name: str, services: ServicesDep, user: UserDep) -> DatasetView:
    return services.datasets.favourite(name, actor=user, on=False)


@router.get("/datasets/{name:path}/manifest")
def get_manifest(name: str, services: ServicesDep, user: UserDep) -> Manifest:
    """A version's files, sizes and sha256 (``NAME@N``; without a version, the newest ready)."""
    return services.datasets.manifest(name, actor=user)


@router.get("/datasets/{name:path}")
def get_dataset(name: str, services: ServicesDep, user: UserDep) -> DatasetView:
    """A dataset (``[OWNER/]NAME``) and its versions."""
    return services.datasets.get(name, actor=user)


@router.delete("/datasets/{name:path}", status_code=204)
def delete_dataset(name: str, services: ServicesDep, user: UserDep) -> Response:
    """Delete a dataset, or one version (``NAME@N``); refused while a job mounts it."""
    services.datasets.delete(name, actor=user)
    return Response(status_code=204)
