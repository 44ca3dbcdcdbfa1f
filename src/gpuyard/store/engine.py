"""The store: one SQLAlchemy engine, short sessions, migrations on start.

SQLite is the embedded default and runs in WAL mode so readers never wait for the writer.
Write transactions on SQLite begin with ``BEGIN IMMEDIATE``: a deferred transaction that reads
and then writes can fail with "database is locked" the moment another writer commits, and
``busy_timeout`` does not retry that case. Read sessions stay deferred and run concurrently.
Writers of one process also queue on a lock before they begin: SQLite makes a blocked writer
sleep and retry with a growing backoff, which under concurrent submissions turned a 2 ms write
into a 100-1000 ms wait; a queue hands the database over as soon as it is free.

The store counts committed writes per table (:meth:`Store.generation`), so that what rarely
changes (nodes, pools, users) can be cached by its readers in this process and reloaded only
after a write. Writes are seen from the session itself (objects flushed, DML statements
executed), so no writer has to remember to say so.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import ORMExecuteState, Session, UOWTransaction, sessionmaker

from gpuyard.errors import StorageFull
from gpuyard.store.full import is_storage_full

__all__ = ["Store", "normalize_url"]

_MIGRATIONS = Path(__file__).parent / "migrations"


def normalize_url(url: str) -> str:
    """Use the psycopg (v3) driver for a plain ``postgresql://`` URL."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


class Store:
    def __init__(self, url: str) -> None:
        self.url = normalize_url(url)
        self.engine: Engine = _make_engine(self.url)
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        self._write = sessionmaker(
            self.engine.execution_options(gpuyard_write=True), expire_on_commit=False
        )
        self._writers: AbstractContextManager[object] = (
            threading.Lock() if self.dialect == "sqlite" else nullcontext()
        )
        self._generations: Counter[str] = Counter()
        _count_writes(self._write, self._generations)
        self.on_full: list[Callable[[], None]] = []
        """Called when a write fails because the disk is full."""

    def generation(self, *tables: str) -> tuple[int, ...]:
        """How many committed write transactions of this process touched each of ``tables``:
        a cache of them is current while this tuple is unchanged (writes by other processes
        are not counted; caches bound their age for those)."""
        return tuple(self._generations[t] for t in tables)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reads; rolled back at the end."""
        with self._read() as session:
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session that commits at the end (or rolls back on error). Do not nest. A write
        that fails because the disk is full raises StorageFull, after calling each of
        :attr:`on_full` (the pool releases its disk reserve)."""
        try:
            with self._writers, self._write() as session, session.begin():
                yield session
        except StorageFull:
            raise
        except Exception as exc:
            if not is_storage_full(exc):
                raise
            for hook in list(self.on_full):
                with contextlib.suppress(Exception):
                    hook()
            raise StorageFull(
                "the pool's storage is full, so nothing was changed; it works again once "
                "space is freed (`gpuyard health` shows the disk)"
            ) from exc

    def migrate(self, target: str = "head") -> None:
        """Bring the schema up to ``target`` (the newest migration by default)."""
        with self.migrating() as connection:
            command.upgrade(alembic_config(connection), target)

    def downgrade(self, target: str) -> None:
        """Take the schema down to ``target``, keeping every row the older schema can hold."""
        with self.migrating() as connection:
            command.downgrade(alembic_config(connection), target)

    @contextmanager
    def migrating(self) -> Iterator[Any]:
        """A connection in one transaction to run migrations on.

        On SQLite, foreign keys are off while it runs: Alembic's batch mode alters a table by
        copying it and dropping the old one, and with foreign keys on, dropping ``jobs``
        would delete every worker, event and fault of every job through ``ON DELETE
        CASCADE``. The pragma has no effect inside a transaction, so it is set before the
        transaction begins, and the keys are checked before it commits."""
        with self.engine.connect() as connection:
            sqlite = connection.dialect.name == "sqlite"
            raw: Any = connection.connection.driver_connection
            if sqlite:
                raw.execute("PRAGMA foreign_keys=OFF")
            try:
                with connection.begin():
                    yield connection
                    if sqlite:
                        broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
                        if broken:
                            raise RuntimeError(f"a migration broke foreign keys: {broken[:5]}")
            finally:
                if sqlite:
                    raw.execute("PRAGMA foreign_keys=ON")

    def close(self) -> None:
        self.engine.dispose()


def alembic_config(connection: Any) -> Config:
    """An Alembic config that runs this package's migrations on ``connection``."""
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def _count_writes(sessions: sessionmaker[Session], generations: Counter[str]) -> None:
    """Count, per table, the committed write sessions that changed it (see the module)."""

    def touched(session: Session) -> set[str]:
        found: set[str] = session.info.setdefault("gpuyard_touched", set())
        return found

    @event.listens_for(sessions, "after_flush")
    def _flushed(session: Session, _flush: UOWTransaction) -> None:
        tables = touched(session)
        for obj in itertools.chain(session.new, session.dirty, session.deleted):
            tables.add(obj.__table__.name)

    @event.listens_for(sessions, "do_orm_execute")
    def _executed(state: ORMExecuteState) -> None:
        if state.is_insert or state.is_update or state.is_delete:
            table = getattr(state.statement, "table", None)
            if table is not None:
                touched(state.session).add(table.name)

    lock = threading.Lock()

    @event.listens_for(sessions, "after_commit")
    def _committed(session: Session) -> None:
        tables = session.info.pop("gpuyard_touched", ())
        if tables:
            with lock:
                generations.update(tables)

    @event.listens_for(sessions, "after_rollback")
    def _rolled_back(session: Session) -> None:
        session.info.pop("gpuyard_touched", None)


def _private(database: Path) -> None:
    """Make the SQLite file (made empty if missing) and its journals the pool's alone (0600):
    jobs must neither read nor rewrite them (docs/security.md). SQLite gives the ``-wal`` and
    ``-shm`` files it makes the database file's mode."""
    fd = os.open(database, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        with contextlib.suppress(PermissionError):  # someone else's: it fails on its own
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    for suffix in ("-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError, PermissionError):
            os.chmod(f"{database}{suffix}", 0o600)


def _make_engine(url: str) -> Engine:
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
    database = make_url(url).database
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).parent.mkdir(parents=True, exist_ok=True)
        _private(Path(database))
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": 30},
        pool_size=10,
        max_overflow=20,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the sqlite3 module; we emit BEGIN ourselves.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        immediate = connection.get_execution_options().get("gpuyard_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine
