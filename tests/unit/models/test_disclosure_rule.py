"""The one rule of which jobs a viewer is told about, and how reasons name the others."""

from __future__ import annotations

import pytest

from gpuyard.models.access import Access, Caller
from gpuyard.models.disclosure import JobFacts, disclose, job_ids_in, may_see, name_jobs, redact

ML, CV = 1, 2
ALICE_PRIVATE = JobFacts(1, "alice", ML, Access.NONE)
ALICE_SHARED = JobFacts(2, "alice", ML, Access.READ_ONLY)


@pytest.mark.parametrize(
    ("caller", "job", "sharing", "seen"),
    [
        (Caller("alice", group="ml", group_id=ML), ALICE_PRIVATE, True, True),  # owner
        (Caller("ada", admin=True), ALICE_PRIVATE, True, True),  # admin
        (Caller("bob", group="ml", group_id=ML), ALICE_PRIVATE, True, False),  # group, access none
        (Caller("bob", group="ml", group_id=ML), ALICE_SHARED, True, True),  # group, shared
        (Caller("bob", group="ml", group_id=ML), ALICE_SHARED, False, False),  # sharing turned off
        (Caller("erin", group="cv", group_id=CV), ALICE_SHARED, True, False),  # another group
        (Caller(""), ALICE_SHARED, True, False),  # nobody signed in
    ],
)
def test_who_is_told_about_a_job(caller: Caller, job: JobFacts, sharing: bool, seen: bool) -> None:
    assert may_see(caller, job, sharing=sharing) is seen


def test_disclose_keeps_the_order_of_the_visible_and_counts_the_rest() -> None:
    found = disclose([5, 1, 7, 3], lambda i: i in {7, 5})
    assert (found.shown, found.hidden) == ((5, 7), 2)


@pytest.mark.parametrize(
    ("ids", "hidden", "words"),
    [
        ([3], 0, "job 3"),
        ([3, 4], 0, "jobs 3, 4"),
        ([], 1, "a job of another user"),
        ([], 2, "2 jobs of other users"),
        ([3], 2, "job 3 and 2 jobs of other users"),
        ([], 0, ""),
    ],
)
def test_name_jobs(ids: list[int], hidden: int, words: str) -> None:
    assert name_jobs(ids, hidden) == words


@pytest.mark.parametrize(
    ("reason", "told"),
    [
        ("suspended to make room for job 7 (a higher priority)",
         "suspended to make room for a job of another user (a higher priority)"),
        ("waiting for jobs 3, 7, 8 to suspend and free its room",
         "waiting for job 3 and 2 jobs of other users to suspend and free its room"),
        ("behind job 3, which goes first", "behind job 3, which goes first"),
        ("check:job 8", "check:a job of another user"),
        ("needs 8 GPUs", "needs 8 GPUs"),
    ],
)  # fmt: skip
def test_a_reason_names_only_the_visible_jobs(reason: str, told: str) -> None:
    assert redact(reason, lambda i: i == 3) == told


def test_job_ids_in_a_reason() -> None:
    assert job_ids_in("waiting for jobs 3, 7 to suspend; behind job 9") == [3, 7, 9]
    assert job_ids_in(None) == [] and job_ids_in("8 GPUs") == []
