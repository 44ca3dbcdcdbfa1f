"""Which OS account a user's jobs run as: an admin's mapping, else gpy-<name> (never root)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuyard.launch.accounts import MAX_ACCOUNT, AccountRefused, os_account, pool_account
from gpuyard.launch.plan import JobContext, plan_worker
from gpuyard.models import JobSpec, Slot

VALID = re.compile(r"[a-z_][a-z0-9_-]*\$?")


@pytest.mark.parametrize(
    ("user", "mapped", "account"),
    [
        ("alice", None, "gpy-alice"),
        ("alice", "", "gpy-alice"),  # an empty mapping is no mapping
        ("alice", "research", "research"),  # the admin's choice wins, as given
        ("bob_2-x", None, "gpy-bob_2-x"),
        ("a" * 28, None, "gpy-" + "a" * 28),  # exactly 32: kept
        ("svc$", "svc$", "svc$"),  # Samba machine accounts end in $
    ],
)
def test_the_account_of_a_user(user: str, mapped: str | None, account: str) -> None:
    assert os_account(user, mapped) == account


@pytest.mark.parametrize(
    "user",
    ["Alice", "alice.smith", "alice@example.com", "a" * 29, "", "李雷", "x-0123456789"],
)
def test_a_name_that_had_to_change_gets_a_hash(user: str) -> None:
    account = pool_account(user)
    assert account.startswith("gpy-")
    assert len(account) <= MAX_ACCOUNT
    assert VALID.fullmatch(account)
    assert re.fullmatch(r"gpy-[a-z0-9_-]*-[0-9a-f]{10}", account)


def test_names_that_sanitise_alike_stay_apart() -> None:
    names = ["Alice", "alice.", "alice@", "ALICE", "a" * 40, "a" * 41]
    accounts = {pool_account(n) for n in names} | {pool_account("alice")}
    assert len(accounts) == len(names) + 1
    assert pool_account("alice") == "gpy-alice"


def test_a_kept_name_can_never_equal_a_hashed_one() -> None:
    # "Bob" becomes gpy-bob-<hash>; a user literally named "bob-<hash>" must not get it too.
    hashed = pool_account("Bob")
    impostor = hashed.removeprefix("gpy-")
    assert pool_account(impostor) != hashed


@given(st.text(max_size=80), st.text(max_size=80))
def test_two_users_never_share_a_pool_account(first: str, second: str) -> None:
    if first != second:
        assert pool_account(first) != pool_account(second)
    for user in (first, second):
        account = pool_account(user)
        assert len(account) <= MAX_ACCOUNT and VALID.fullmatch(account)


@pytest.mark.parametrize("mapped", ["root"])
def test_a_mapping_to_root_is_refused_with_what_to_do(mapped: str) -> None:
    with pytest.raises(AccountRefused) as refused:
        os_account("alice", mapped)
    message = str(refused.value)
    assert "jobs never run as root" in message
    assert "gpuyard users set alice --os-user ACCOUNT" in message


@pytest.mark.parametrize("mapped", ["Alice", "a b", "../etc", "-x", "a" * 33, "1$x"])
def test_a_mapping_that_is_no_account_name_is_refused(mapped: str) -> None:
    with pytest.raises(AccountRefused, match="not a valid OS account name"):
        os_account("alice", mapped)


@pytest.mark.parametrize("run_as", ["gpy-alice", None])
def test_the_plan_gives_every_worker_the_jobs_account(run_as: str | None) -> None:
    spec = JobSpec(command="mpirun python x.py", nodes=3, mode="mpi")
    placement = [
        Slot(node=f"node{i}", address=f"127.0.0.{i + 2}", gpus=(), cpus=1, port=20000 + i)
        for i in range(3)
    ]
    ctx = JobContext(
        job_id=1, name="j", attempt=0, placement=placement, job_dir="/p/jobs/1", run_as=run_as
    )
    launches = [plan_worker(spec, ctx, rank, base_env={}) for rank in range(3)]
    assert [launch.run_as for launch in launches] == [run_as] * 3
