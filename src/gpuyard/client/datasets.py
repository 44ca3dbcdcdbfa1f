"""The dataset catalogue's client calls (docs/datasets.md), over a :class:`Client`'s
connection: list, show, make from a path, upload a directory in resumable chunks, share,
favourite, delete.

    from gpuyard.client import Client, DatasetsClient
    datasets = DatasetsClient(Client())
    datasets.upload("imagenet-mini", Path("data/"))      # resumes if the connection drops
    datasets.wait("imagenet-mini")                        # until hashed: ready or failed

An upload is a tar of the directory, written to a temporary file (entries sorted, so the
same tree gives the same bytes), sent in chunks. When the connection drops, the client asks
the server how many bytes it has and goes on from there; a 409 for a wrong offset carries
the right one. :meth:`DatasetsClient.upload` also remembers an unfinished upload in the
config directory, so that running the same upload again (another process, after a crash)
resumes it rather than starting over.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gpuyard.client.http import Client
from gpuyard.errors import Conflict, GpuyardError, InvalidSpec, NotFound, ServerUnavailable
from gpuyard.models.dataset import (
    DatasetFilter,
    DatasetView,
    DatasetVisibility,
    Manifest,
    UploadView,
    VersionState,
)
from gpuyard.private_files import write_private
from gpuyard.settings import Settings

__all__ = ["DEFAULT_CHUNK", "DatasetsClient"]

DEFAULT_CHUNK = 1 << 20
"""Bytes per chunk sent (the server takes up to 4 MiB)."""
Progress = Callable[[int, int], None]
"""(bytes the server has, bytes in all)."""


def _path(name: str) -> str:
    return "/datasets/" + quote(name, safe="/@")


class DatasetsClient:
    """The catalogue's calls over ``client``'s connection and token."""

    def __init__(self, client: Client, *, settings: Settings | None = None) -> None:
        self.client = client
        self.settings = settings

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        # The same connection, token and error mapping as the Client's own calls.
        return self.client._request(method, path, **kwargs).json()

    # -- seeing ---------------------------------------------------------------------------

    def list(self, which: DatasetFilter | str = DatasetFilter.ALL) -> list[DatasetView]:
        """The datasets you may see: all, mine, shared (with your group), public, favourites."""
        found = self._json("GET", "/datasets", params={"filter": str(which)})
        return [DatasetView.model_validate(d) for d in found]

    def get(self, name: str) -> DatasetView:
        """A dataset (``[OWNER/]NAME``) with its versions."""
        return DatasetView.model_validate(self._json("GET", _path(name)))

    def manifest(self, ref: str) -> Manifest:
        """A version's files with their sizes and sha256 (``NAME@N``, or the newest ready)."""
        return Manifest.model_validate(self._json("GET", _path(ref) + "/manifest"))

    def wait(self, name: str, *, timeout: float = 3600.0, poll: float = 0.5) -> DatasetView:
        """``name`` once none of its versions is uploading or hashing any more."""
        deadline = time.monotonic() + timeout
        while True:
            view = self.get(name)
            if all(v.state.is_terminal() for v in view.versions):
                return view
            if time.monotonic() > deadline:
                raise TimeoutError(f"dataset {name} is still being hashed after {timeout:.0f} s")
            time.sleep(poll)

    # -- making ---------------------------------------------------------------------------

    def create(
        self,
        name: str,
        path: str,
        *,
        description: str = "",
        visibility: DatasetVisibility | str | None = None,
    ) -> DatasetView:
        """A new version of ``name`` from ``path``, a directory below a dataset root."""
        body: dict[str, Any] = {"name": name, "path": path, "description": description}
        if visibility:
            body["visibility"] = _visibility(visibility)
        return DatasetView.model_validate(self._json("POST", "/datasets", json=body))

    def start_upload(
        self,
        name: str,
        size: int,
        *,
        description: str = "",
        visibility: DatasetVisibility | str | None = None,
    ) -> UploadView:
        body: dict[str, Any] = {"name": name, "size": size, "description": description}
        if visibility:
            body["visibility"] = _visibility(visibility)
        return UploadView.model_validate(self._json("POST", "/dataset-uploads", json=body))

    def upload_status(self, upload_id: str) -> UploadView:
        return UploadView.model_validate(self._json("GET", f"/dataset-uploads/{upload_id}"))

    def put_chunk(self, upload_id: str, offset: int, data: bytes) -> UploadView:
        headers = {"Content-Type": "application/octet-stream"}
        found = self._json(
            "PUT",
            f"/dataset-uploads/{upload_id}",
            params={"offset": offset},
            content=data,
            headers=headers,
        )
        return UploadView.model_validate(found)

    def commit(self, upload_id: str) -> DatasetView:
        found = self._json("POST", f"/dataset-uploads/{upload_id}/commit", timeout=600.0)
        return DatasetView.model_validate(found)

    def send(
        self,
        upload_id: str,
        archive: Path,
        *,
        chunk: int = DEFAULT_CHUNK,
        retries: int = 8,
        progress: Progress | None = None,
    ) -> UploadView:
        """Send ``archive`` from the offset the server has; a dropped connection is retried
        (at most ``retries`` times in a row, backing off) from the server's offset again."""
        status = self.upload_status(upload_id)
        offset, failures = status.offset, 0
        with archive.open("rb") as data:
            while offset < status.size:
                data.seek(offset)
                piece = data.read(chunk)
                try:
                    status = self.put_chunk(upload_id, offset, piece)
                    offset, failures = status.offset, 0
                except Conflict as refused:
                    right = refused.extra.get("offset")
                    if not isinstance(right, int):
                        raise
                    offset = right
                except ServerUnavailable:
                    failures += 1
                    if failures > retries:
                        raise
                    time.sleep(min(0.2 * 2**failures, 10.0))
                    offset = self._offset_after_drop(upload_id, offset)
                if progress is not None:
                    progress(offset, status.size)
        return status

    def _offset_after_drop(self, upload_id: str, fallback: int) -> int:
        try:
            return self.upload_status(upload_id).offset
        except ServerUnavailable:
            return fallback  # still down: the next PUT finds out again

    def upload(
        self,
        name: str,
        directory: Path,
        *,
        description: str = "",
        visibility: DatasetVisibility | str | None = None,
        chunk: int = DEFAULT_CHUNK,
        retries: int = 8,
        progress: Progress | None = None,
    ) -> DatasetView:
        """Upload ``directory`` as a new version of ``name``; resumes an unfinished upload
        of the same directory to the same dataset (module docstring)."""
        if not directory.is_dir():
            raise GpuyardError(f"{directory} is not a directory")
        with _tarred(directory) as archive:
            size = archive.stat().st_size
            memo = self._memo(name, directory)
            upload_id = self._resumable(memo, size, archive)
            if upload_id is None:
                started = self.start_upload(
                    name, size, description=description, visibility=visibility
                )
                upload_id = started.id
                write_private(memo, json.dumps(_memo_body(upload_id, size, archive)))
            self.send(upload_id, archive, chunk=chunk, retries=retries, progress=progress)
            view = self.commit(upload_id)
            memo.unlink(missing_ok=True)
            return view

    def _memo(self, name: str, directory: Path) -> Path:
        settings = self.settings or Settings()
        key = f"{self.client.url}\0{name}\0{directory.resolve()}"
        digest = hashlib.sha256(key.encode()).hexdigest()[:32]
        return settings.config_dir / "dataset-uploads" / f"{digest}.json"

    def _resumable(self, memo: Path, size: int, archive: Path) -> str | None:
        """The unfinished upload of the same bytes, if the server still has it."""
        try:
            saved = json.loads(memo.read_text())
        except (OSError, ValueError):
            return None
        if saved != _memo_body(str(saved.get("id")), size, archive):
            return None
        try:
            status = self.upload_status(str(saved["id"]))
        except NotFound:
            return None
        return status.id if status.state is VersionState.UPLOADING else None

    # -- changing -------------------------------------------------------------------------

    def share(self, name: str, visibility: DatasetVisibility | str) -> DatasetView:
        body = {"visibility": _visibility(visibility)}
        return DatasetView.model_validate(self._json("POST", _path(name) + "/share", json=body))

    def favourite(self, name: str, *, on: bool = True) -> DatasetView:
        method = "PUT" if on else "DELETE"
        return DatasetView.model_validate(self._json(method, _path(name) + "/favourite"))

    def delete(self, name: str) -> None:
        """Delete a dataset, or one version of it (``NAME@N``)."""
        self.client._request("DELETE", _path(name))


def _visibility(text: DatasetVisibility | str) -> str:
    try:
        return str(DatasetVisibility.parse(str(text)))
    except ValueError as error:
        raise InvalidSpec(str(error)) from None


def _memo_body(upload_id: str, size: int, archive: Path) -> dict[str, Any]:
    """What identifies an upload's bytes: its size and the sha256 of the archive."""
    digest = hashlib.sha256()
    with archive.open("rb") as data:
        while block := data.read(1 << 20):
            digest.update(block)
    return {"id": upload_id, "size": size, "sha256": digest.hexdigest()}


@contextmanager
def _tarred(directory: Path) -> Iterator[Path]:
    """``directory`` as a tar in a temporary file; the same tree gives the same bytes."""
    fd, name = tempfile.mkstemp(suffix=".tar")
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as out, tarfile.open(fileobj=out, mode="w") as tar:
            for root, dirs, files in os.walk(directory):
                dirs.sort()
                for name in sorted([*dirs, *files]):
                    item = Path(root) / name
                    tar.add(item, arcname=str(item.relative_to(directory)), recursive=False)
        yield path
    finally:
        path.unlink(missing_ok=True)
