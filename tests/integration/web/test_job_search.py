"""The web list's query (services/job_search.py) on both databases: every filter, the sorts,
paging, and the visibility rule of the API's list."""

from __future__ import annotations

from typing import Any

from gpuyard.clock import ManualClock
from gpuyard.models import JobMode, JobSpec, JobStatus, Priority
from gpuyard.models.access import Action
from gpuyard.models.job_query import JobQuery, JobSort
from gpuyard.services.job_search import JobSearch
from gpuyard.testing.auth import user_token


def _submit(app: Any, owner: str, **spec: Any) -> int:
    services = app.state.services
    made = services.jobs.submit(
        JobSpec.model_validate({"command": "python x.py", **spec}), owner=owner
    )
    return int(made.id)


def test_filters_sorts_and_pages(app: Any, clock: ManualClock) -> None:
    user_token(app, "ana", group="nlp")
    user_token(app, "ben", group="nlp")
    user_token(app, "root", admin=True)
    day = 86400.0
    first = _submit(app, "ana", name="a-small", priority="low")
    clock.advance(day)
    second = _submit(app, "ben", name="b-mpi", mode="mpi", access="read-only")
    clock.advance(day)
    third = _submit(app, "ana", name="c-big", priority="high", nodes=2)
    app.state.services.jobs.stop(first, actor="ana")
    search: JobSearch = app.state.services.search
    start = clock.now() - 2 * day

    def ids(**wanted: Any) -> list[int]:
        return [j.id for j in search.search(JobQuery(**wanted), actor="root").items]

    assert ids() == [third, second, first]
    assert ids(statuses=(JobStatus.STOPPED,)) == [first]
    assert ids(owner="ben") == [second]
    assert ids(group="nlp") == [third, second, first]
    assert ids(priority=Priority.HIGH) == [third]
    assert ids(pool="default") == [third, second, first]
    assert ids(pool="a100") == []
    assert ids(mode=JobMode.MPI) == [second]
    assert ids(since=start + day / 2) == [third, second]
    assert ids(until=start + day / 2) == [first]
    assert ids(text="big") == [third]
    assert ids(text=f"#{second}") == [second]
    assert ids(sort=JobSort.PRIORITY, descending=True) == [third, second, first]
    assert ids(sort=JobSort.NAME, descending=False) == [first, second, third]
    assert ids(limit=2) == [third, second]
    page = search.search(JobQuery(offset=2, limit=2), actor="root")
    assert ([j.id for j in page.items], page.total) == ([first], 3)
    # ana sees her own and ben's read-only job, may stop only her own.
    seen = search.search(JobQuery(), actor="ana")
    assert [j.id for j in seen.items] == [third, second, first]
    allowed = {j.id: j.allowed for j in seen.items}
    assert Action.STOP in allowed[third] and Action.STOP not in allowed[second]
    assert Action.VIEW in allowed[second]
    assert seen.can_stop and seen.can_delete
    user_token(app, "cy", group="vision")
    assert search.search(JobQuery(), actor="cy").total == 0
