"""The dataset catalogue (docs/datasets.md): datasets with immutable, hashed versions, made
from a path on shared storage or uploaded in resumable chunks; listing, showing, sharing,
favourites, deleting; and a job's dataset mounts resolved and pinned at submission.

Who sees what is the one rule of ``models/dataset.py``; a dataset a caller may not see is
answered exactly as a missing one. A version's files are hashed into its manifest off the
request, on this service's own thread: the version is ``hashing`` until then, and one left
``hashing`` by a server that stopped is hashed again when the next one starts
(:meth:`DatasetCatalogue.resume`).
"""

from __future__ import annotations

import logging
import secrets
import shutil
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpuyard.clock import Clock
from gpuyard.errors import (
    Conflict,
    GpuyardError,
    InvalidSpec,
    NotFound,
    PermissionDenied,
    StorageFull,
    TooLarge,
)
from gpuyard.models.access import Caller
from gpuyard.models.actor import Actor
from gpuyard.models.dataset import (
    DatasetCreate,
    DatasetFilter,
    DatasetRef,
    DatasetVersionView,
    DatasetView,
    DatasetVisibility,
    Manifest,
    UploadStart,
    UploadView,
    VersionState,
    check_dataset_name,
    check_move,
    may_change,
    may_see,
)
from gpuyard.models.job import JobSpec, Mount
from gpuyard.models.states import JobState
from gpuyard.quantities import format_bytes
from gpuyard.services.auth import Policy
from gpuyard.services.dataset_files import (
    AccountOf,
    check_readable,
    hash_tree,
    resolve_under_roots,
    unpack_upload,
    write_chunk,
)
from gpuyard.store import Store
from gpuyard.store.tables import (
    DatasetFavouriteRow,
    DatasetRow,
    DatasetUploadRow,
    DatasetVersionRow,
    JobRow,
)

__all__ = ["MAX_CHUNK", "DatasetCatalogue", "mounts_at_launch", "names_datasets"]

log = logging.getLogger(__name__)

MAX_CHUNK = 4 << 20
"""Bytes of one uploaded chunk (the request guard's cap on a body)."""
_PATH, _UPLOAD = "path", "upload"
_ACTIVE = [s for s in JobState if not s.is_terminal()]


def _not_found(what: str) -> NotFound:
    """The one answer for a dataset that is not there and one the caller may not see."""
    return NotFound(f"dataset {what} is not in the catalogue: check its name (gpuyard datasets ls)")


def _parse(text: str) -> DatasetRef:
    try:
        return DatasetRef.parse(text)
    except ValueError as error:
        raise InvalidSpec(str(error)) from None


def _named(ref: DatasetRef) -> str:
    return f"{ref.owner}/{ref.name}" if ref.owner else ref.name


def _when(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


class DatasetCatalogue:
    """The catalogue over the store and the pool's data directory (``data_dir``: uploaded
    versions and the archives being uploaded)."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock,
        policy: Policy,
        roots: Sequence[str],
        data_dir: Path,
        upload_max: int,
        upload_expiry: float = 86400.0,
        account: AccountOf | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.policy = policy
        self.roots = list(roots)
        """Where datasets may be made from (GPUYARD_DATASET_ROOTS)."""
        self.data_dir = data_dir
        self.upload_max = upload_max
        self.upload_expiry = upload_expiry
        """Seconds an unfinished upload is kept after its last chunk (:meth:`expire_uploads`)."""
        self.account = account
        """A user's OS account, where jobs run as their owners: what a path is read as."""
        self._hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dataset-hash")
        self._starting = threading.Lock()
        """Held from an upload's room check until its session is recorded (this server's
        requests run in threads of one process)."""

    # -- seeing ---------------------------------------------------------------------------

    def list_datasets(
        self, *, actor: str, which: DatasetFilter = DatasetFilter.ALL
    ) -> list[DatasetView]:
        """The datasets ``actor`` may see, by owner and name, kept by ``which``."""
        with self.store.read() as session:
            caller = self.policy.caller(session, actor)
            rows = session.scalars(select(DatasetRow).order_by(DatasetRow.owner, DatasetRow.name))
            favourites = self._favourites(session, actor)
            seen = [
                r for r in rows if self._sees(caller, r) and _kept(r, which, caller, favourites)
            ]
            return [self._view(session, caller, r, r.id in favourites) for r in seen]

    def get(self, name: str, *, actor: str) -> DatasetView:
        """One dataset (``[OWNER/]NAME``) with its versions."""
        with self.store.read() as session:
            caller = self.policy.caller(session, actor)
            row = self._find(session, caller, _parse(name))
            return self._view(session, caller, row, row.id in self._favourites(session, actor))

    def manifest(self, ref: str, *, actor: str) -> Manifest:
        """The manifest of the version ``ref`` names (``…@N``, or the newest ready one)."""
        parsed = _parse(ref)
        with self.store.read() as session:
            caller = self.policy.caller(session, actor)
            row = self._find(session, caller, parsed)
            version = self._version(session, row, parsed)
            if version.manifest is None:
                raise Conflict(
                    f"dataset {row.owner}/{row.name}@{version.version} is {version.state}: it "
                    "has a manifest once ready"
                )
            return Manifest.model_validate(version.manifest)

    @staticmethod
    def _sees(caller: Caller, row: DatasetRow) -> bool:
        return may_see(caller, owner=row.owner, visibility=row.visibility, group_id=row.group_id)

    @staticmethod
    def _favourites(session: Session, actor: str) -> set[int]:
        query = select(DatasetFavouriteRow.dataset_id).where(DatasetFavouriteRow.user == actor)
        return set(session.scalars(query))

    def _find(self, session: Session, caller: Caller, ref: DatasetRef) -> DatasetRow:
        """The dataset ``ref`` names for ``caller``: with an owner, that one; without, the
        caller's own, else the only one of that name the caller may see."""
        query = select(DatasetRow).where(DatasetRow.name == ref.name)
        if ref.owner:
            query = query.where(DatasetRow.owner == ref.owner)
        rows = [r for r in session.scalars(query) if self._sees(caller, r)]
        own = [r for r in rows if r.owner == caller.name]
        if ref.owner is None and own:
            return own[0]
        if len(rows) == 1:
            return rows[0]
        if not rows:
            raise _not_found(_named(ref))
        owners = ", ".join(sorted(r.owner for r in rows))
        raise InvalidSpec(
            f"dataset {ref.name} is one of several ({owners}): write OWNER/{ref.name}"
        )

    @staticmethod
    def _version(session: Session, row: DatasetRow, ref: DatasetRef) -> DatasetVersionRow:
        query = select(DatasetVersionRow).where(DatasetVersionRow.dataset_id == row.id)
        if ref.version is None:
            query = query.where(DatasetVersionRow.state == VersionState.READY)
            found = session.scalars(query.order_by(DatasetVersionRow.version.desc())).first()
            if found is None:
                raise InvalidSpec(
                    f"dataset {row.owner}/{row.name} has no ready version yet "
                    "(gpuyard datasets show shows its versions)"
                )
            return found
        found = session.scalars(query.where(DatasetVersionRow.version == ref.version)).first()
        if found is None:
            raise NotFound(f"dataset {row.owner}/{row.name} has no version {ref.version}")
        return found

    def _view(self, session: Session, caller: Caller, row: DatasetRow, fav: bool) -> DatasetView:
        versions = session.scalars(
            select(DatasetVersionRow)
            .where(DatasetVersionRow.dataset_id == row.id)
            .order_by(DatasetVersionRow.version)
        ).all()
        ready = [v for v in versions if v.state is VersionState.READY]
        owner_or_admin = may_change(caller, owner=row.owner)
        return DatasetView(
            name=row.name,
            owner=row.owner,
            visibility=row.visibility,
            description=row.description,
            created_at=_when(row.created_at),
            favourite=fav,
            latest=ready[-1].version if ready else None,
            size=ready[-1].size if ready else 0,
            versions=[_version_view(v, owner_or_admin) for v in versions],
        )

    # -- making versions ------------------------------------------------------------------

    def create_from_path(self, wanted: DatasetCreate, *, actor: str) -> DatasetView:
        """A new version of ``wanted.name`` (the dataset made if new) from a directory below
        a dataset root, which the caller's account may read; hashed in the background."""
        name = self._check_name(wanted.name)
        path = resolve_under_roots(wanted.path, self.roots)
        account = self.account(actor) if self.account is not None else None
        check_readable(path, account)
        version_id = self._new_version(
            actor, name, wanted.description, wanted.visibility, _PATH, path, VersionState.HASHING
        )
        self._hash_later(version_id)
        return self.get(f"{actor}/{name}", actor=actor)

    def start_upload(self, wanted: UploadStart, *, actor: str) -> UploadView:
        """An upload session for a new version of ``wanted.name``: send the archive's bytes
        in chunks (:meth:`put_chunk`), then :meth:`commit`."""
        name = self._check_name(wanted.name)
        if wanted.size > self.upload_max:
            raise self._too_large()
        upload_id = secrets.token_hex(16)
        with self._starting:  # the room checked is the room taken: one start at a time
            self._check_room(wanted.size, actor=actor)
            version_id = self._new_version(
                actor,
                name,
                wanted.description,
                wanted.visibility,
                _UPLOAD,
                str(self._stored_dir()),
                VersionState.UPLOADING,
            )
            with self.store.write() as session:
                session.add(
                    DatasetUploadRow(
                        id=upload_id,
                        version_id=version_id,
                        owner=actor,
                        size=wanted.size,
                        received=0,
                        updated_at=self.clock.now(),
                    )
                )
        self._make_dirs()
        self._archive(upload_id).touch(mode=0o600)
        return self.upload(upload_id, actor=actor)

    def _check_room(self, size: int, *, actor: str) -> None:
        """Refuse an upload of ``size`` bytes that would take ``actor``'s unfinished uploads
        past GPUYARD_DATASET_UPLOAD_MAX in all (409), or that the pool's disk has no room for
        beside the bytes the other unfinished uploads still have to send (503): one user's
        uploads never fill the disk everyone's jobs and uploads share."""
        with self.store.read() as session:
            query = (
                select(DatasetUploadRow.owner, DatasetUploadRow.size, DatasetUploadRow.received)
                .join(DatasetVersionRow, DatasetVersionRow.id == DatasetUploadRow.version_id)
                .where(DatasetVersionRow.state == VersionState.UPLOADING)
            )
            open_uploads = list(session.execute(query))
        mine = [s for owner, s, _ in open_uploads if owner == actor]
        if sum(mine) + size > self.upload_max:
            raise Conflict(
                f"you have {len(mine)} unfinished upload(s) of {format_bytes(sum(mine))} in all; "
                f"with this one of {format_bytes(size)} they would pass "
                f"{format_bytes(self.upload_max)} (GPUYARD_DATASET_UPLOAD_MAX), a user's limit "
                "at once: finish one, or delete its version (gpuyard datasets rm NAME@N)"
            )
        coming = sum(s - received for _, s, received in open_uploads)
        self._make_dirs()
        free = shutil.disk_usage(self.data_dir).free
        if free < 2 * size + coming:  # the archive and its unpacked files
            raise StorageFull(
                f"the pool's disk has {format_bytes(free)} free, and an upload of "
                f"{format_bytes(size)} needs twice that (the archive and its unpacked files) "
                f"beside {format_bytes(coming)} other uploads are still sending; try again "
                "later, or ask an admin"
            )

    def expire_uploads(self) -> int:
        """Delete the uploads nobody sent a chunk to for :attr:`upload_expiry` seconds: their
        bytes, their version (still ``uploading``), and their dataset if that was its only
        version. How many went."""
        cutoff = self.clock.now() - self.upload_expiry
        with self.store.write() as session:
            query = (
                select(DatasetUploadRow, DatasetVersionRow)
                .join(DatasetVersionRow, DatasetVersionRow.id == DatasetUploadRow.version_id)
                .where(DatasetUploadRow.updated_at < cutoff)
                .where(DatasetVersionRow.state == VersionState.UPLOADING)
            )
            stale = list(session.execute(query))
            for upload, version in stale:
                self._expire(session, upload, version)
        for upload, version in stale:
            self._archive(upload.id).unlink(missing_ok=True)
            shutil.rmtree(version.path, ignore_errors=True)
        return len(stale)

    def _expire(
        self, session: Session, upload: DatasetUploadRow, version: DatasetVersionRow
    ) -> None:
        row = session.get_one(DatasetRow, version.dataset_id)
        others = session.scalar(
            select(DatasetVersionRow.id)
            .where(DatasetVersionRow.dataset_id == row.id)
            .where(DatasetVersionRow.id != version.id)
        )
        session.delete(version if others is not None else row)  # the upload goes with it
        what = f"dataset:{row.owner}/{row.name}"
        detail = f"upload {upload.id} of version {version.version}: no chunk since it expired"
        self.policy.audit.record(session, Actor.POOL, "dataset.upload.expire", what, detail)

    def upload(self, upload_id: str, *, actor: str) -> UploadView:
        """Where an upload stands: the next chunk starts at its ``offset``."""
        with self.store.read() as session:
            upload, version, row = self._upload_rows(session, upload_id, actor)
            return _upload_view(upload, version, row)

    def put_chunk(self, upload_id: str, offset: int, data: bytes, *, actor: str) -> UploadView:
        """Append ``data`` at ``offset``, which must be the bytes received so far (409 with
        the right offset otherwise: a client resumes from it)."""
        if len(data) > MAX_CHUNK:
            raise TooLarge(f"a chunk is at most {MAX_CHUNK} bytes; send smaller chunks")
        with self.store.write() as session:
            upload, version, row = self._upload_rows(session, upload_id, actor, lock=True)
            if version.state is not VersionState.UPLOADING:
                raise Conflict(f"upload {upload_id} is committed; start a new one")
            if offset != upload.received:
                raise Conflict(
                    f"upload {upload_id} has {upload.received} bytes; send from offset "
                    f"{upload.received}, not {offset}",
                    extra={"offset": upload.received},
                )
            if offset + len(data) > upload.size:
                raise TooLarge(
                    f"upload {upload_id} was started for {upload.size} bytes; this chunk "
                    f"would make {offset + len(data)}"
                )
            write_chunk(self._archive(upload_id), offset, data)
            upload.received = offset + len(data)
            upload.updated_at = self.clock.now()
            return _upload_view(upload, version, row)

    def commit(self, upload_id: str, *, actor: str) -> DatasetView:
        """Close an upload whose bytes are all in: its archive is unpacked and hashed in the
        background (the version is ``hashing`` until ready or failed)."""
        with self.store.write() as session:
            upload, version, row = self._upload_rows(session, upload_id, actor, lock=True)
            if upload.received != upload.size:
                raise Conflict(
                    f"upload {upload_id} has {upload.received} of its {upload.size} bytes; "
                    f"send the rest from offset {upload.received} first",
                    extra={"offset": upload.received},
                )
            self._move(version, VersionState.HASHING)
            version_id, name = version.id, f"{row.owner}/{row.name}"
        self._hash_later(version_id)
        return self.get(name, actor=actor)

    def _upload_rows(
        self, session: Session, upload_id: str, actor: str, *, lock: bool = False
    ) -> tuple[DatasetUploadRow, DatasetVersionRow, DatasetRow]:
        query = select(DatasetUploadRow).where(DatasetUploadRow.id == upload_id)
        upload = session.scalars(query.with_for_update() if lock else query).first()
        if upload is None or upload.owner != actor:
            raise NotFound(f"upload {upload_id} does not exist (or is done): start a new one")
        version = session.get_one(DatasetVersionRow, upload.version_id)
        return upload, version, session.get_one(DatasetRow, version.dataset_id)

    def _check_name(self, name: str) -> str:
        try:
            return check_dataset_name(name)
        except ValueError as error:
            raise InvalidSpec(str(error)) from None

    def _too_large(self) -> TooLarge:
        return TooLarge(
            f"a dataset upload is at most {self.upload_max} bytes (GPUYARD_DATASET_UPLOAD_MAX); "
            "make it from a path on shared storage instead, or ask an admin"
        )

    def _new_version(
        self,
        actor: str,
        name: str,
        description: str,
        visibility: DatasetVisibility | None,
        source: str,
        path: str,
        state: VersionState,
    ) -> int:
        """A new version of the caller's dataset ``name`` (made when new); its id."""
        try:
            return self._add_version(actor, name, description, visibility, source, path, state)
        except IntegrityError:  # made (or versioned) by another request meanwhile: once more
            return self._add_version(actor, name, description, visibility, source, path, state)

    def _add_version(
        self,
        actor: str,
        name: str,
        description: str,
        visibility: DatasetVisibility | None,
        source: str,
        path: str,
        state: VersionState,
    ) -> int:
        with self.store.write() as session:
            caller = self.policy.caller(session, actor)
            if not caller.signed_in:
                raise PermissionDenied("sign in to make a dataset")
            query = select(DatasetRow).where(DatasetRow.owner == actor, DatasetRow.name == name)
            row = session.scalars(query.with_for_update()).first()
            now = self.clock.now()
            if row is None:
                row = DatasetRow(owner=actor, name=name, group_id=caller.group_id, created_at=now)
                row.visibility = visibility or DatasetVisibility.PRIVATE
                row.description = description
                session.add(row)
                session.flush()
            elif description:
                row.description = description
            last = session.scalars(
                select(DatasetVersionRow.version)
                .where(DatasetVersionRow.dataset_id == row.id)
                .order_by(DatasetVersionRow.version.desc())
            ).first()
            version = DatasetVersionRow(
                dataset_id=row.id,
                version=(last or 0) + 1,
                state=state,
                source=source,
                path=path,
                created_by=actor,
                created_at=now,
            )
            session.add(version)
            self.policy.audit.record(
                session, Actor.user(actor), "dataset.version", f"dataset:{actor}/{name}", source
            )
            session.flush()
            return version.id

    # -- hashing (off the request) --------------------------------------------------------

    def _hash_later(self, version_id: int) -> Future[None]:
        return self._hasher.submit(self._hash, version_id)

    def resume(self) -> None:
        """Hash again every version a stopped server left ``hashing``; expire stale uploads."""
        self.expire_uploads()
        with self.store.read() as session:
            query = select(DatasetVersionRow.id).where(
                DatasetVersionRow.state == VersionState.HASHING
            )
            left = list(session.scalars(query))
        for version_id in left:
            self._hash_later(version_id)

    def _hash(self, version_id: int) -> None:
        with self.store.read() as session:
            version = session.get(DatasetVersionRow, version_id)
            if version is None or version.state is not VersionState.HASHING:
                return
            row = session.get_one(DatasetRow, version.dataset_id)
            source, path, owner = version.source, version.path, row.owner
            upload = session.scalars(
                select(DatasetUploadRow.id).where(DatasetUploadRow.version_id == version_id)
            ).first()
        try:
            manifest: Manifest | None = self._files(source, path, owner, upload)
            error = ""
        except GpuyardError as failure:
            manifest, error = None, failure.detail
        except OSError as failure:
            manifest, error = None, f"{path}: {failure.strerror or failure}"
        except Exception as failure:  # one version's failure stays that version's
            log.exception("hashing dataset version %s failed", version_id)
            manifest, error = None, f"could not be hashed ({type(failure).__name__})"
        if not self._finish(version_id, manifest, error) and source == _UPLOAD:
            shutil.rmtree(path, ignore_errors=True)  # deleted while it was unpacked

    def _files(self, source: str, path: str, owner: str, upload: str | None) -> Manifest:
        if source == _UPLOAD:
            if upload is None:
                raise InvalidSpec("its upload's archive is gone; upload it again")
            shutil.rmtree(path, ignore_errors=True)  # a start cut short by a restart
            self._make_dirs()
            unpack_upload(self._archive(upload), Path(path), max_bytes=self.upload_max)
            return hash_tree(path, None)
        account = self.account(owner) if self.account is not None else None
        return hash_tree(path, account)

    def _finish(self, version_id: int, manifest: Manifest | None, error: str) -> bool:
        """Record the outcome; False when the version is gone (deleted meanwhile)."""
        with self.store.write() as session:
            version = session.get(DatasetVersionRow, version_id)
            if version is None or version.state is not VersionState.HASHING:
                return False
            if manifest is None:
                self._move(version, VersionState.FAILED)
                version.error = error
            else:
                self._move(version, VersionState.READY)
                version.manifest = manifest.model_dump(mode="json")
                version.digest, version.size = manifest.digest(), manifest.size
                version.files = len(manifest.files)
            uploads = session.scalars(
                select(DatasetUploadRow).where(DatasetUploadRow.version_id == version_id)
            ).all()
            upload_ids = [u.id for u in uploads]
            for upload in uploads:
                session.delete(upload)
            if manifest is None and version.source == _UPLOAD:
                shutil.rmtree(version.path, ignore_errors=True)
        for upload_id in upload_ids:
            self._archive(upload_id).unlink(missing_ok=True)
        return True

    @staticmethod
    def _move(version: DatasetVersionRow, new: VersionState) -> None:
        check_move(version.state, new)
        version.state = new

    def _make_dirs(self) -> None:
        """The data directory (others may pass, not list: 0711); the stored versions' parent
        and the archives being uploaded: the pool's alone (0700). A job reaches an uploaded
        version only through the mount its launch makes (docs/datasets.md, "Who reaches a
        dataset's files"), so unsharing one takes effect at once."""
        for folder, mode in (
            (self.data_dir, 0o711),
            (self.data_dir / "v", 0o700),
            (self._uploads(), 0o700),
        ):
            folder.mkdir(parents=True, exist_ok=True, mode=mode)
            folder.chmod(mode)

    def _uploads(self) -> Path:
        return self.data_dir / "uploads"

    def _archive(self, upload_id: str) -> Path:
        return self._uploads() / f"{upload_id}.tar"

    def _stored_dir(self) -> Path:
        """Where an uploaded version is unpacked: below a directory only the pool enters."""
        return self.data_dir / "v" / secrets.token_hex(16)

    def wait_idle(self) -> None:
        """Return once the hashing queued so far is done (tests, and a clean stop)."""
        self._hasher.submit(lambda: None).result()

    def close(self) -> None:
        self._hasher.shutdown(wait=False, cancel_futures=True)

    # -- changing -------------------------------------------------------------------------

    def share(self, name: str, visibility: DatasetVisibility, *, actor: str) -> DatasetView:
        """Change who sees a dataset (its owner or an admin)."""
        with self.store.write() as session:
            caller = self.policy.caller(session, actor)
            row = self._find(session, caller, _parse(name))
            self._check_change(caller, row)
            row.visibility = visibility
            self.policy.audit.record(
                session,
                Actor.user(actor),
                "dataset.share",
                f"dataset:{row.owner}/{row.name}",
                str(visibility),
            )
            favourite = row.id in self._favourites(session, actor)
            return self._view(session, caller, row, favourite)

    def favourite(self, name: str, *, actor: str, on: bool = True) -> DatasetView:
        """Make a dataset one of ``actor``'s favourites (or no longer)."""
        with self.store.write() as session:
            caller = self.policy.caller(session, actor)
            row = self._find(session, caller, _parse(name))
            found = session.get(DatasetFavouriteRow, (actor, row.id))
            if on and found is None:
                session.add(DatasetFavouriteRow(user=actor, dataset_id=row.id))
            elif not on and found is not None:
                session.delete(found)
            session.flush()
            return self._view(session, caller, row, on)

    def delete(self, name: str, *, actor: str) -> None:
        """Delete a dataset (``[OWNER/]NAME``) or one version (``…@N``): its owner or an
        admin; refused (409) while a job that has not ended mounts it."""
        ref = _parse(name)
        has_version = "@" in name
        with self.store.write() as session:
            caller = self.policy.caller(session, actor)
            row = self._find(session, caller, ref)
            self._check_change(caller, row)
            query = select(DatasetVersionRow).where(DatasetVersionRow.dataset_id == row.id)
            if has_version:
                query = query.where(
                    DatasetVersionRow.version == self._version(session, row, ref).version
                )
            versions = session.scalars(query).all()
            self._check_unused(session, row, versions)
            stored = [Path(v.path) for v in versions if v.source == _UPLOAD]
            archives = session.scalars(
                select(DatasetUploadRow.id).where(
                    DatasetUploadRow.version_id.in_([v.id for v in versions])
                )
            ).all()
            what = f"dataset:{row.owner}/{row.name}"
            # Its versions, favourites and uploads go with it (ON DELETE CASCADE).
            for gone in versions if has_version else [row]:
                session.delete(gone)
            detail = str(ref.version) if has_version else ""
            self.policy.audit.record(session, Actor.user(actor), "dataset.delete", what, detail)
        for path in stored:
            shutil.rmtree(path, ignore_errors=True)
        for upload_id in archives:
            self._archive(upload_id).unlink(missing_ok=True)

    @staticmethod
    def _check_change(caller: Caller, row: DatasetRow) -> None:
        if not may_change(caller, owner=row.owner):
            raise PermissionDenied(
                f"dataset {row.owner}/{row.name} is {row.owner}'s: only its owner or an admin "
                "changes it"
            )

    @staticmethod
    def _check_unused(
        session: Session, row: DatasetRow, versions: Sequence[DatasetVersionRow]
    ) -> None:
        ids = {v.id: v.version for v in versions}
        jobs = session.execute(
            select(JobRow.id, JobRow.spec).where(JobRow.state.in_(_ACTIVE)).order_by(JobRow.id)
        )
        for job_id, spec in jobs:
            for version_id in _mounted_versions(spec):
                if version_id in ids:
                    raise Conflict(
                        f"dataset {row.owner}/{row.name}@{ids[version_id]} is mounted by job "
                        f"{job_id}, which has not ended; stop it (gpuyard stop {job_id}) or "
                        "wait for it, then delete",
                        extra={"job": job_id},
                    )

    # -- jobs -----------------------------------------------------------------------------

    def resolved(self, specs: Sequence[JobSpec], *, owner: str) -> list[JobSpec]:
        """``specs`` with each dataset mount pinned: the version ``owner`` may see, ready,
        its path and id filled in, read-only. Refused (422) with what to do otherwise."""
        if not names_datasets(specs):
            return list(specs)
        with self.store.read() as session:
            caller = self.policy.caller(session, owner)
            return [self._pinned(session, caller, spec) for spec in specs]

    def _pinned(self, session: Session, caller: Caller, spec: JobSpec) -> JobSpec:
        if not any(m.dataset for m in spec.mounts.datasets):
            return spec
        mounts = [self._pin(session, caller, m) if m.dataset else m for m in spec.mounts.datasets]
        return spec.model_copy(
            update={"mounts": spec.mounts.model_copy(update={"datasets": mounts})}
        )

    def _pin(self, session: Session, caller: Caller, mount: Mount) -> Mount:
        assert mount.dataset is not None
        ref = _parse(mount.dataset)
        try:
            row = self._find(session, caller, ref)
            version = self._version(session, row, ref)
        except GpuyardError as error:
            raise InvalidSpec(f"mounts.datasets {mount.name!r}: {error.detail}") from None
        if version.state is not VersionState.READY:
            raise InvalidSpec(
                f"mounts.datasets {mount.name!r}: {row.owner}/{row.name}@{version.version} is "
                f"{version.state}, not ready; mount it once `gpuyard datasets show "
                f"{row.owner}/{row.name}` says ready"
            )
        return mount.model_copy(
            update={
                "dataset": f"{row.owner}/{row.name}@{version.version}",
                "dataset_version": version.id,
                "path": version.path,
                "readonly": True,
            }
        )


def mounts_at_launch(session: Session, spec: JobSpec, owner: str) -> tuple[JobSpec, frozenset[str]]:
    """The job's catalogue mounts as they stand when its workers start (docs/datasets.md,
    "Who reaches a dataset's files"): each pinned version read again by its id, still one
    ``owner`` may see (a dataset unshared or deleted since the submission is refused here,
    not mounted), its path the catalogue's (never the spec's), read-only; and the paths the
    pool holds (uploaded versions), which the launcher opens itself. PermissionDenied naming
    the mount otherwise."""
    pinned = {m.dataset_version for m in spec.mounts.datasets if m.dataset_version is not None}
    if not pinned:
        return spec, frozenset()
    caller = Policy.caller(session, owner)
    query = (
        select(DatasetVersionRow, DatasetRow)
        .join(DatasetRow, DatasetRow.id == DatasetVersionRow.dataset_id)
        .where(DatasetVersionRow.id.in_(pinned))
    )
    found = {version.id: (version, row) for version, row in session.execute(query)}
    held: set[str] = set()
    mounts = []
    for mount in spec.mounts.datasets:
        if mount.dataset_version is None:
            mounts.append(mount)
            continue
        version, row = found.get(mount.dataset_version, (None, None))
        if version is None or row is None or not DatasetCatalogue._sees(caller, row):
            raise PermissionDenied(
                f"mounts.datasets {mount.name!r}: dataset {mount.dataset} is no longer one "
                f"{owner} may mount (deleted, or no longer shared with them); submit again "
                "with a dataset they may see (gpuyard datasets ls)"
            )
        if version.source == _UPLOAD:
            held.add(version.path)
        mounts.append(mount.model_copy(update={"path": version.path, "readonly": True}))
    datasets = spec.mounts.model_copy(update={"datasets": mounts})
    return spec.model_copy(update={"mounts": datasets}), frozenset(held)


def names_datasets(specs: Sequence[JobSpec]) -> bool:
    """Whether submitting ``specs`` looks datasets up (a database read: not on an event loop)."""
    return any(m.dataset for spec in specs for m in spec.mounts.datasets)


def _mounted_versions(spec: Any) -> list[int]:
    """The dataset version ids a stored spec mounts (read defensively: it is JSON)."""
    try:
        entries = spec.get("mounts", {}).get("datasets", []) or []
        return [int(e["dataset_version"]) for e in entries if e.get("dataset_version")]
    except (AttributeError, TypeError, ValueError, KeyError):
        return []


def _kept(row: DatasetRow, which: DatasetFilter, caller: Caller, favourites: set[int]) -> bool:
    if which is DatasetFilter.MINE:
        return row.owner == caller.name
    if which is DatasetFilter.SHARED:
        return row.owner != caller.name and row.visibility is DatasetVisibility.GROUP
    if which is DatasetFilter.PUBLIC:
        return row.visibility is DatasetVisibility.PUBLIC
    if which is DatasetFilter.FAVOURITES:
        return row.id in favourites
    return True


def _version_view(version: DatasetVersionRow, owner_or_admin: bool) -> DatasetVersionView:
    return DatasetVersionView(
        version=version.version,
        state=version.state,
        size=version.size,
        files=version.files,
        digest=version.digest,
        source=version.source,
        path=version.path if owner_or_admin else None,
        error=version.error,
        created_at=_when(version.created_at),
        created_by=version.created_by,
    )


def _upload_view(
    upload: DatasetUploadRow, version: DatasetVersionRow, row: DatasetRow
) -> UploadView:
    return UploadView(
        id=upload.id,
        dataset=f"{row.owner}/{row.name}",
        version=version.version,
        size=upload.size,
        offset=upload.received,
        state=version.state,
    )
