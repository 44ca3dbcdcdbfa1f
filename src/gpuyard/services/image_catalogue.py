"""The image catalogue: listing, showing, pushing, deleting and sharing the images of the
pool's registry (docs/images.md, "The catalogue"). Who sees what is the one rule of
``models/image_catalogue.py``; an image a caller may not see is answered as a missing one.
"""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from gpuyard.clock import Clock
from gpuyard.errors import InvalidSpec, NotFound, PermissionDenied, TooLarge
from gpuyard.images.access import RegistryAccess
from gpuyard.images.archive import LayoutImage, read_archive
from gpuyard.images.copy import check_source, copy_to_layout
from gpuyard.images.registry import Credentials, RegistryClient
from gpuyard.models.access import Caller
from gpuyard.models.actor import Actor
from gpuyard.models.image import ImageRef
from gpuyard.models.image_catalogue import (
    OFFICIAL_NAMESPACE,
    CatalogueEntry,
    ImageCopy,
    ImageScope,
    ImageView,
    ImageVisibility,
    may_change,
    may_see,
    push_repository,
)
from gpuyard.services.auth import Policy
from gpuyard.store import Store
from gpuyard.store.tables import ImageRow

__all__ = ["ImageCatalogue", "PushRequest", "SavedLogin", "receive_upload"]

_CHUNK = 1 << 20

SavedLogin = Callable[[str, str], Credentials | None]
"""(user, registry host) -> that user's saved login there, or None."""


class PushRequest:
    """What a push names besides its archive."""

    def __init__(
        self,
        name: str,
        *,
        scope: ImageScope = ImageScope.TRAINING,
        accelerator: str = "",
        description: str = "",
        visibility: ImageVisibility | None = None,
    ) -> None:
        self.name = name
        self.scope = scope
        self.accelerator = accelerator
        self.description = description
        self.visibility = visibility


def _too_large(limit: int) -> TooLarge:
    return TooLarge(
        f"the image archive is larger than {limit} bytes (GPUYARD_IMAGE_UPLOAD_MAX); push a "
        "smaller image or ask an admin"
    )


async def receive_upload(
    chunks: AsyncIterator[bytes], dest: Path, *, limit: int, declared: int | None = None
) -> None:
    """Write an upload to ``dest`` as it arrives; past ``limit`` bytes (or a ``declared``
    Content-Length over it) it is refused (413) and the partial file deleted, so an upload
    is never whole in memory nor unbounded."""
    if declared is not None and declared > limit:
        raise _too_large(limit)
    size = 0
    try:
        with dest.open("wb") as out:
            async for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise _too_large(limit)
                await run_in_threadpool(out.write, chunk)
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    if size == 0:
        dest.unlink(missing_ok=True)
        raise InvalidSpec("the upload is empty: send the image archive as the request body")


def _parse(text: str) -> ImageRef:
    try:
        return ImageRef.parse(text)
    except ValueError as error:
        raise InvalidSpec(str(error)) from None


def _entry(row: ImageRow) -> CatalogueEntry:
    return CatalogueEntry(owner=row.owner, visibility=row.visibility, group_id=row.group_id)


def _view(row: ImageRow) -> ImageView:
    return ImageView(
        name=f"{row.repository}:{row.tag}",
        repository=row.repository,
        tag=row.tag,
        digest=row.digest,
        owner=row.owner,
        visibility=row.visibility,
        scope=row.scope,
        accelerator=row.accelerator,
        description=row.description,
        size=row.size,
        pushed_by=row.pushed_by,
        pushed_at=datetime.fromtimestamp(row.pushed_at, UTC),
    )


def _not_found(ref: ImageRef | str) -> NotFound:
    """The one answer for an image that is not there and one the caller may not see."""
    return NotFound(f"image {ref} is not in the catalogue: check its name and tag")


class ImageCatalogue:
    """The catalogue over the store and the pool's registry (``access`` None: no registry)."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock,
        policy: Policy,
        access: RegistryAccess | None,
        upload_dir: Path,
        upload_max: int,
        sources: list[str] | None = None,
        sources_ca: Path | None = None,
        saved_login: SavedLogin | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.policy = policy
        self.access = access
        self.upload_dir = upload_dir
        self.upload_max = upload_max
        self.sources = list(sources or [])
        """Registries images may be copied from (GPUYARD_IMAGE_SOURCES)."""
        self.sources_ca = sources_ca
        self.saved_login = saved_login
        """The caller's own saved login at a source registry (services/registry_logins.py)."""

    # -- seeing ---------------------------------------------------------------------------

    def may_use(self, user: str, ref: ImageRef) -> bool:
        """Whether ``user`` may run ``ref`` (of the pool's registry): the rule, over the
        catalogue rows naming those bytes (by digest when pinned, else by tag)."""
        with self.store.read() as session:
            caller = self.policy.caller(session, user)
            rows = self._rows_for(session, ref)
        if not rows:
            return may_see(caller, ref.repository, None)
        return any(may_see(caller, ref.repository, _entry(row)) for row in rows)

    @staticmethod
    def _rows_for(session: Session, ref: ImageRef) -> Sequence[ImageRow]:
        query = select(ImageRow).where(ImageRow.repository == ref.repository)
        if ref.digest:
            query = query.where(ImageRow.digest == ref.digest)
        else:
            query = query.where(ImageRow.tag == (ref.tag or "latest"))
        return session.scalars(query).all()

    def list_images(
        self, *, actor: str, scope: ImageScope | None = None, accelerator: str | None = None
    ) -> list[ImageView]:
        """The catalogue's images ``actor`` may see, by name; ``accelerator`` keeps those
        built for it and those for any."""
        query = select(ImageRow).order_by(ImageRow.repository, ImageRow.tag)
        if scope is not None:
            query = query.where(ImageRow.scope == scope)
        if accelerator is not None:
            query = query.where(ImageRow.accelerator.in_([accelerator, ""]))
        with self.store.read() as session:
            caller = self.policy.caller(session, actor)
            rows = session.scalars(query).all()
            return [_view(r) for r in rows if may_see(caller, r.repository, _entry(r))]

    def get(self, name: str, *, actor: str) -> ImageView:
        with self.store.read() as session:
            _caller, row = self._visible_row(session, name, actor)
            return _view(row)

    def _visible_row(self, session: Session, name: str, actor: str) -> tuple[Caller, ImageRow]:
        ref = _parse(name)
        caller = self.policy.caller(session, actor)
        if ref.registry is not None or ref.digest is not None:
            raise _not_found(ref)
        row = session.scalars(
            select(ImageRow).where(ImageRow.repository == ref.repository, ImageRow.tag == ref.tag)
        ).first()
        if row is None or not may_see(caller, row.repository, _entry(row)):
            raise _not_found(ref)
        return caller, row

    # -- changing -------------------------------------------------------------------------

    def share(self, name: str, visibility: ImageVisibility, *, actor: str) -> ImageView:
        """Change an image's visibility (its owner or an admin; ``official`` admins only)."""
        with self.store.write() as session:
            caller, row = self._visible_row(session, name, actor)
            self._check_change(caller, row, visibility)
            row.visibility = visibility
            self.policy.audit.record(
                session, Actor.user(actor), "image.share", f"image:{name}", str(visibility)
            )
            return _view(row)

    def delete(self, name: str, *, actor: str) -> None:
        """Take an image out of the catalogue (its owner or an admin)."""
        with self.store.write() as session:
            caller, row = self._visible_row(session, name, actor)
            self._check_change(caller, row, None)
            session.delete(row)
            self.policy.audit.record(session, Actor.user(actor), "image.delete", f"image:{name}")

    @staticmethod
    def _check_change(caller: Caller, row: ImageRow, visibility: ImageVisibility | None) -> None:
        if not may_change(caller, _entry(row)):
            raise PermissionDenied(
                f"image {row.repository}:{row.tag} is {row.owner}'s: only its owner or an "
                "admin changes it"
            )
        if visibility is ImageVisibility.OFFICIAL and not caller.admin:
            raise PermissionDenied("only admins make an image official; share it as public")

    # -- pushing --------------------------------------------------------------------------

    def upload_path(self) -> Path:
        """A fresh file for one upload, in the pool's upload directory (the node's disk)."""
        self.upload_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        return self.upload_dir / f"image-{secrets.token_hex(12)}.tar"

    def admit(self, wanted: PushRequest, *, actor: str) -> None:
        """Refuse a push :meth:`push` would refuse for its name, namespace or owner, before
        its archive is uploaded."""
        self._start(wanted, actor)

    def push(self, archive: Path, wanted: PushRequest, *, actor: str) -> ImageView:
        """Check ``archive``, push its image to the pool's registry under the caller's
        namespace and record it; the archive is deleted whatever happens."""
        try:
            caller, target = self._start(wanted, actor)
            with tempfile.TemporaryDirectory(dir=self.upload_dir) as work:
                image = read_archive(archive, Path(work), max_bytes=self.upload_max)
                archive.unlink(missing_ok=True)
                return self._push_layout(caller, target, image, wanted)
        finally:
            archive.unlink(missing_ok=True)

    def copy(self, wanted: ImageCopy, *, actor: str) -> ImageView:
        """Copy ``wanted.source`` from a registry the admin listed, as :meth:`push` does an
        archive; the credentials given reach that registry only and are not kept. Without
        any, the caller's own saved login for that registry is used, if they have one."""
        source = _parse(wanted.source)
        host = check_source(source, self.sources)
        request = PushRequest(
            wanted.name,
            scope=wanted.scope,
            accelerator=wanted.accelerator,
            description=wanted.description,
            visibility=wanted.visibility,
        )
        caller, target = self._start(request, actor)
        credentials = self._source_credentials(wanted, host, actor)
        self.upload_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with (
            tempfile.TemporaryDirectory(dir=self.upload_dir) as work,
            RegistryClient(
                f"https://{host}", credentials=credentials, ca_file=self.sources_ca
            ) as client,
        ):
            image = copy_to_layout(client, source, Path(work), max_bytes=self.upload_max)
            return self._push_layout(caller, target, image, request)

    def _source_credentials(self, wanted: ImageCopy, host: str, actor: str) -> Credentials | None:
        if wanted.username:
            password = wanted.password.get_secret_value() if wanted.password else ""
            return Credentials(wanted.username, password)
        return self.saved_login(actor, host) if self.saved_login is not None else None

    def _start(self, wanted: PushRequest, actor: str) -> tuple[Caller, ImageRef]:
        with self.store.read() as session:
            caller = self.policy.caller(session, actor)
        target = self._target(caller, wanted)
        self._check_replace(caller, target)
        return caller, target

    def _push_layout(
        self, caller: Caller, target: ImageRef, image: LayoutImage, wanted: PushRequest
    ) -> ImageView:
        with self._access().client() as client:
            digest = client.push(image.layout, target)
        size = image.manifest.size
        try:
            return self._record(caller, target, digest, size, wanted)
        except IntegrityError:
            # A push of the same new name recorded it meanwhile: this one updates it.
            return self._record(caller, target, digest, size, wanted)

    def _check_replace(self, caller: Caller, target: ImageRef) -> None:
        """Refuse, before its bytes are pushed, a push over another's catalogued image."""
        with self.store.read() as session:
            row = session.scalars(
                select(ImageRow).where(
                    ImageRow.repository == target.repository, ImageRow.tag == target.tag
                )
            ).first()
            if row is not None and not may_change(caller, _entry(row)):
                raise PermissionDenied(
                    f"image {target} is {row.owner}'s: only its owner or an admin replaces it"
                )

    def _access(self) -> RegistryAccess:
        if self.access is None:
            raise InvalidSpec(
                "this pool has no image registry to push to: ask an admin to set GPUYARD_REGISTRY"
            )
        return self.access

    @staticmethod
    def _target(caller: Caller, wanted: PushRequest) -> ImageRef:
        try:
            target = push_repository(caller, _parse(wanted.name))
        except ValueError as error:
            raise InvalidSpec(str(error)) from None
        if wanted.visibility is ImageVisibility.OFFICIAL and not caller.admin:
            raise PermissionDenied("only admins push official images; push it as public")
        return target

    def _record(
        self, caller: Caller, ref: ImageRef, digest: str, size: int, wanted: PushRequest
    ) -> ImageView:
        official = ref.repository.split("/", 1)[0] == OFFICIAL_NAMESPACE
        default = ImageVisibility.OFFICIAL if official else ImageVisibility.PRIVATE
        with self.store.write() as session:
            row = session.scalars(
                select(ImageRow).where(
                    ImageRow.repository == ref.repository, ImageRow.tag == ref.tag
                )
            ).first()
            if row is None:
                row = ImageRow(repository=ref.repository, tag=ref.tag or "latest")
                row.owner, row.group_id = caller.name, caller.group_id
                row.visibility = wanted.visibility or default
                session.add(row)
            elif wanted.visibility is not None:
                row.visibility = wanted.visibility
            row.digest, row.size, row.scope = digest, size, wanted.scope
            row.accelerator, row.description = wanted.accelerator, wanted.description
            row.pushed_by, row.pushed_at = caller.name, self.clock.now()
            self.policy.audit.record(
                session, Actor.user(caller.name), "image.push", f"image:{ref}", digest
            )
            session.flush()
            return _view(row)
