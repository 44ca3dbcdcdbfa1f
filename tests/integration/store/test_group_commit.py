"""Group commit on both databases: concurrent callers share transactions, each gets its own
result, and a part that breaks the transaction fails only its own caller."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpuyard.errors import InvalidSpec
from gpuyard.store.engine import Store
from gpuyard.store.group_commit import GroupCommit
from gpuyard.store.tables import GroupRow


class Groups:
    """Parts are group names; "refuse-*" is refused by the write, a name given twice breaks
    the transaction (a primary key)."""

    def __init__(self, store: Store) -> None:
        self.batches: list[int] = []
        self.release = threading.Event()
        self.commit = GroupCommit(store, self.write)

    def write(self, session: Session, names: Sequence[str]) -> list[str | BaseException]:
        self.release.wait(10)
        self.batches.append(len(names))
        results: list[str | BaseException] = []
        for name in names:
            if name.startswith("refuse-"):
                results.append(InvalidSpec(f"{name} is refused"))
                continue
            session.add(GroupRow(name=name, created_at=0.0))
            session.flush()
            results.append(name.upper())
        return results


def _names(store: Store) -> list[str]:
    with store.read() as session:
        return sorted(session.scalars(select(GroupRow.name)))


def test_concurrent_callers_share_transactions_and_get_their_own_results(store: Store) -> None:
    groups = Groups(store)
    names = [f"g{i}" for i in range(40)] + ["refuse-1"]
    with ThreadPoolExecutor(len(names)) as pool:
        futures = {name: pool.submit(groups.commit, name) for name in names}
        groups.release.set()  # the first write waited: the others queued meanwhile
        for name, future in futures.items():
            if name.startswith("refuse-"):
                with pytest.raises(InvalidSpec, match="refuse-1 is refused"):
                    future.result()
            else:
                assert future.result() == name.upper()
    assert _names(store) == sorted(n for n in names if not n.startswith("refuse-"))
    assert sum(groups.batches) == len(names)
    assert len(groups.batches) < len(names) / 4  # shared, not one transaction each


def test_a_part_that_breaks_the_transaction_fails_alone(store: Store) -> None:
    groups = Groups(store)
    groups.commit("taken")
    groups.release.clear()
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(groups.commit, n) for n in ("a", "taken", "b", "c")]
        groups.release.set()
        results = []
        for future in futures:
            try:
                results.append(future.result())
            except IntegrityError:
                results.append("integrity")
    assert results == ["A", "integrity", "B", "C"]
    assert _names(store) == ["a", "b", "c", "taken"]
