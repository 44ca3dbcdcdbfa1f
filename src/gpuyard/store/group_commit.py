"""Group commit: what many callers write goes into one transaction.

A write transaction costs far more than the rows it writes: taking the database's write lock,
beginning, committing (and, on PostgreSQL, a round trip per statement). Under a burst of
submissions from many clients each caller would queue for the lock and pay all of it alone.
:class:`GroupCommit` has one writer thread: callers hand it their part and get a future; the
thread takes every part waiting, writes them in one transaction, and settles each future with
its result. Under load, batches grow by themselves (whatever arrived during one transaction
goes into the next); when idle, a part is written at once.

A caller on an event loop awaits the future (``asyncio.wrap_future``) and never blocks the
loop; a thread calls :meth:`GroupCommit.__call__`, which waits for it.

``write(session, parts)`` returns, for each part, its result or the exception its caller
should get (a refusal of one part must not fail the others). If ``write`` itself raises, the
transaction rolls back and every part of the batch is tried again alone, so that one part
that breaks the transaction fails only its own caller. ``after(results)`` runs once a batch
is committed, before its callers are answered (to wake whoever acts on what was written).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Generic, TypeVar

from sqlalchemy.orm import Session

from gpuyard.models.job import MAX_BATCH
from gpuyard.store.engine import Store

__all__ = ["GroupCommit"]

log = logging.getLogger(__name__)

P = TypeVar("P")
R = TypeVar("R")


class GroupCommit(Generic[P, R]):
    def __init__(
        self,
        store: Store,
        write: Callable[[Session, Sequence[P]], Sequence[R | BaseException]],
        *,
        size: Callable[[P], int] = lambda _part: 1,
        after: Callable[[], None] = lambda: None,
        max_batch: int = MAX_BATCH,
        name: str = "group-commit",
    ) -> None:
        """``max_batch``: most items (the sum of the parts' sizes) one transaction takes; by
        default what one request may send (:data:`gpuyard.models.job.MAX_BATCH`), so that
        the largest request fits one."""
        self.store = store
        self._write = write
        self._size = size
        self._after = after
        self.max_batch = max_batch
        self._name = name
        self._queue: queue.SimpleQueue[tuple[P, Future[R]]] = queue.SimpleQueue()
        self._held: tuple[P, Future[R]] | None = None
        """A part taken from the queue that did not fit the batch: first in the next one."""
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()

    def submit(self, part: P) -> Future[R]:
        """Queue ``part``; the future gets its result once its transaction committed."""
        future: Future[R] = Future()
        self._queue.put((part, future))
        if self._thread is None:
            with self._start:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()
        return future

    def __call__(self, part: P) -> R:
        """Write ``part`` and return its result (or raise what ``write`` said for it)."""
        return self.submit(part).result()

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            try:
                self._commit(batch)
            except Exception as exc:
                if len(batch) == 1:
                    _settle(batch[0][1], exc)
                else:
                    for item in batch:  # alone, so that a bad part fails only its caller
                        try:
                            self._commit([item])
                        except Exception as alone:
                            _settle(item[1], alone)

    def _next_batch(self) -> list[tuple[P, Future[R]]]:
        """What waits, oldest first, up to the batch's limit; blocks until something does."""
        first = self._held or self._queue.get()
        self._held = None
        batch, total = [first], self._size(first[0])
        while total < self.max_batch:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            size = self._size(item[0])
            if total + size > self.max_batch:
                self._held = item
                break
            batch.append(item)
            total += size
        return [item for item in batch if item[1].set_running_or_notify_cancel()]

    def _commit(self, batch: list[tuple[P, Future[R]]]) -> None:
        if not batch:
            return
        with self.store.write() as session:
            results = self._write(session, [part for part, _ in batch])
        try:
            self._after()  # before the callers go on: what they wrote is acted upon
        except Exception:
            log.exception("after a group commit")
        for (_, future), result in zip(batch, results, strict=True):
            _settle(future, result)


def _settle(future: Future[R], result: R | BaseException) -> None:
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)
