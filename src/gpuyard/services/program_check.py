"""At submission: can the job's OS account run the job's program? Refused with the fix if not.

The rule is :mod:`gpuyard.launch.program`'s; this module looks up what it needs on this
machine: the account (``pwd``, its groups), where the program is on the job's ``PATH`` and the
mode of each directory on the way (``os.stat``). It is made only where the answer holds for
the job: a pool of the local executor (its nodes are this machine) whose jobs run as their
owners' accounts (docs/security.md); elsewhere (a Ray pool, jobs run as the pool's user)
nothing is checked at submission and the launch says what went wrong.

Like ``exec`` (and Python's ``os.execvpe``, which the worker uses), a file on ``PATH`` that
the account may not run is passed over for the next one; the submission is refused only
when some file of that name was found and none of them may be run.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping

from sqlalchemy import select

from gpuyard.errors import InvalidSpec
from gpuyard.launch.accounts import AccountRefused, os_account
from gpuyard.launch.program import (
    Account,
    PathFacts,
    blocked_at,
    candidates,
    chain_of,
    program_of,
    refusal,
    search_path,
)
from gpuyard.models import JobSpec
from gpuyard.store.engine import Store
from gpuyard.store.tables import UserRow

__all__ = ["ProgramCheck", "lookup_account", "path_facts"]


class ProgramCheck:
    """``check(spec, owner)`` raises :class:`InvalidSpec` when the owner's account cannot run
    the job's program. ``pool_env``: what a job inherits from the pool (its ``PATH`` is the
    job's unless the job sets its own)."""

    def __init__(self, store: Store, *, pool_env: Mapping[str, str]) -> None:
        self.store = store
        self.pool_env = dict(pool_env)

    def check(self, spec: JobSpec, owner: str) -> None:
        programs = program_of(spec)
        if not programs:
            return
        account = self.account(owner)
        if account is None:
            return
        path = search_path(spec, self.pool_env)
        for program in programs:
            why = _refusal(program, candidates(program, path, spec.workdir), account)
            if why is not None:
                raise InvalidSpec(why)

    def account(self, owner: str) -> Account | None:
        """The OS account ``owner``'s jobs run as (None: refused, the launch says why)."""
        with self.store.read() as session:
            mapped = session.scalar(select(UserRow.os_user).where(UserRow.name == owner))
        try:
            name = os_account(owner, mapped)
        except AccountRefused:
            return None  # the launch refuses it, with its own message
        return lookup_account(name)


def lookup_account(name: str) -> Account:
    """The account ``name`` as the rule needs it; one not made yet owns nothing."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return Account(name, None, frozenset())
    return Account(name, entry.pw_uid, frozenset(os.getgrouplist(name, entry.pw_gid)))


def _refusal(program: str, files: list[str], account: Account) -> str | None:
    """None when the first file ``exec`` would run is found (or none is); else why not."""
    first: str | None = None
    for file in files:
        real = os.path.realpath(file)  # a venv's python links to the system's: both ways count
        chain = path_facts(list(dict.fromkeys([*chain_of(file), *chain_of(real)])))
        if chain is None:
            continue  # not there (or not a file): exec looks further
        blocked = blocked_at(chain, account)
        if blocked is None:
            return None
        first = first or refusal(program, file, blocked, account)
    return first


def path_facts(paths: list[str]) -> list[PathFacts] | None:
    """Each path's mode and owners, following links as ``exec`` does; None when the last is
    not a regular file."""
    facts = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            return None
        facts.append(PathFacts(path, st.st_mode, st.st_uid, st.st_gid))
    if not os.path.isfile(paths[-1]):
        return None
    return facts
