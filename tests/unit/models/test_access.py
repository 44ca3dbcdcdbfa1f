"""The policy table itself: every input has an answer, and the rules that do not depend on
the job hold in every cell (the HTTP matrix test checks the job cells against reference 002)."""

from __future__ import annotations

import itertools

from gpuyard.models.access import (
    JOB_ACTIONS,
    POOL_ACTIONS,
    Access,
    Action,
    Caller,
    Relation,
    Verdict,
    decide,
    relation_to,
)


def test_every_cell_has_a_verdict_and_the_fixed_rules_hold() -> None:
    for relation, action, access, sharing in itertools.product(
        Relation, Action, Access, (True, False)
    ):
        verdict = decide(relation, action, access, sharing=sharing)
        assert isinstance(verdict, Verdict)
        if relation is Relation.ANONYMOUS:
            assert verdict is Verdict.SIGN_IN
        elif relation is Relation.ADMIN:
            # Entering a job runs code as its owner: admins only where the pool allows it.
            want = Verdict.FORBIDDEN if action is Action.ENTER else Verdict.ALLOW
            assert verdict is want
            assert decide(relation, action, access, sharing=sharing, admin_enter=True) is (
                Verdict.ALLOW
            )
        elif action is Action.ENTER and relation is Relation.GROUP:
            # Never a member of the group, whatever access it has: 403 where it may see it.
            visible = sharing and access is not Access.NONE
            assert verdict is (Verdict.FORBIDDEN if visible else Verdict.HIDDEN)
        elif action in JOB_ACTIONS:
            if relation is Relation.OWNER:
                assert verdict is Verdict.ALLOW
            elif relation is Relation.OTHER or not sharing or access is Access.NONE:
                assert verdict is Verdict.HIDDEN  # never 403: a job's existence is not leaked
        else:
            assert verdict is (
                Verdict.ALLOW if Relation.OTHER in POOL_ACTIONS[action] else Verdict.FORBIDDEN
            )


def test_relations() -> None:
    lab, ops = 1, 2
    alice = Caller("alice", group="lab", group_id=lab)
    assert relation_to(Caller(""), "alice", lab) is Relation.ANONYMOUS
    assert relation_to(Caller("root", admin=True), "alice", lab) is Relation.ADMIN
    assert relation_to(alice, "alice", lab) is Relation.OWNER
    # An admin's own job is its own (entering it needs no GPUYARD_ADMIN_EXEC).
    assert relation_to(Caller("root", admin=True), "root", lab) is Relation.OWNER
    assert relation_to(Caller("gina", group="lab", group_id=lab), "alice", lab) is Relation.GROUP
    assert relation_to(Caller("otto", group="ops", group_id=ops), "alice", lab) is Relation.OTHER
    # The group is its id, not its name: a group made again under the name is another.
    assert relation_to(Caller("nina", group="lab", group_id=3), "alice", lab) is Relation.OTHER
    # No group on either side is no group in common.
    assert relation_to(Caller("gina"), "alice", None) is Relation.OTHER
    assert relation_to(alice, None, None) is Relation.OTHER
