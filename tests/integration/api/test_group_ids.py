"""Groups, jobs and tokens by id, over real HTTP on both databases (issue 24, point 6): a job's
access for others belongs to the group it was submitted in, not to its name, and no id is
ever given again after a delete."""

from __future__ import annotations

import pytest

from gpuyard.client import Client
from gpuyard.errors import NotFound
from gpuyard.testing.auth import AsUser


def test_a_group_made_again_under_a_deleted_ones_name_gets_nothing_of_its_jobs(
    api_url: str, as_user: AsUser
) -> None:
    admin = as_user("ada", admin=True)
    admin.create_group("team")
    admin.create_user("alice", group="team")
    admin.create_user("bob", group="team")
    alice = Client(api_url, token=admin.create_token(user="alice").token)
    bob = Client(api_url, token=admin.create_token(user="bob").token)
    job_id = alice.submit({"command": "sleep 1", "access": "read-write"}).id
    assert bob.job(job_id).id == job_id  # a member of its group sees it

    # The group goes (its members moved away first), and one of the same name is made.
    admin.update_user("alice", group="default")
    admin.update_user("bob", group="default")
    admin.delete_group("team")
    admin.create_group("team")
    admin.create_user("mallory", group="team")
    mallory = Client(api_url, token=admin.create_token(user="mallory").token)

    # The new member reads nothing of the old group's job, and may not stop it.
    with pytest.raises(NotFound, match=f"job {job_id} does not exist"):
        mallory.job(job_id)
    with pytest.raises(NotFound, match=f"job {job_id} does not exist"):
        mallory.stop(job_id)
    assert job_id not in [j.id for j in mallory.jobs().items]
    assert alice.job(job_id).state.value == "queued"  # its owner's, as before


def test_ids_of_deleted_jobs_and_tokens_are_never_given_again(
    api_url: str, as_user: AsUser
) -> None:
    alice = as_user("alice")
    first = alice.submit({"command": "sleep 1"}).id
    alice.stop(first)
    alice.delete(first)
    second = alice.submit({"command": "sleep 1"}).id
    assert second > first  # SQLite without AUTOINCREMENT gave `first` again
    made = alice.create_token(label="x")
    alice.revoke_token(made.id)
    assert alice.create_token(label="y").id > made.id
