"""The wire types in models: their values are the strings stored and shown before they
became types, and an actor reads back from its string."""

from __future__ import annotations

import json

import pytest

from gpuyard.models import Actor, EventKind, JobEvent, JobView, SlurmState, WaitCode
from gpuyard.models.actor import ActorKind


def test_wait_codes_keep_their_strings() -> None:
    assert [c.value for c in WaitCode] == [
        "quota",
        "priority",
        "reserved",
        "resources",
        "preempting",
        "pool",
        "unsatisfiable",
        "held",
        "dependency",
        "begin",
        "array-limit",
    ]


def test_the_scheduler_still_exports_the_wait_code() -> None:
    from gpuyard.scheduler import WaitCode as FromScheduler

    assert FromScheduler is WaitCode


def test_event_kinds_keep_their_strings() -> None:
    assert {k.value for k in EventKind} == {
        "submitted",
        "transition",
        "hold",
        "release",
        "priority",
        "runtime",
        "signal",
        "exec",
        "usercall",
        "notice",
        "acknowledged",
        "checkpoint",
        "task",
        "worker_exited",
        "worker_lost",
        "control_file",
        "controller_error",
        "check",
        "fault",
        "diagnosis",
        "image",
        "data",
        "gpu_xid",
        "idle",
    }


def test_slurm_states_are_slurms_words() -> None:
    assert all(s.value == s.name for s in SlurmState)
    assert f"{SlurmState.NODE_FAIL}" == "NODE_FAIL"
    assert json.dumps([SlurmState.PENDING]) == '["PENDING"]'


@pytest.mark.parametrize(
    ("actor", "text", "kind", "name"),
    [
        (Actor.user("ada"), "user:ada", ActorKind.USER, "ada"),
        (Actor.worker(3), "worker:3", ActorKind.WORKER, "3"),
        (Actor.CONTROLLER, "controller", ActorKind.CONTROLLER, ""),
        (Actor.SCHEDULER, "scheduler", ActorKind.SCHEDULER, ""),
        (Actor.TIME_LIMIT, "time-limit", ActorKind.TIME_LIMIT, ""),
        (Actor.JOB, "job", ActorKind.JOB, ""),
        (Actor.INSPECTION, "inspection", ActorKind.INSPECTION, ""),
        (Actor.POOL, "pool", ActorKind.POOL, ""),
    ],
)
def test_an_actor_is_its_old_string_and_reads_back(
    actor: Actor, text: str, kind: ActorKind, name: str
) -> None:
    assert actor == text and str(actor) == text and f"{actor}" == text
    assert json.dumps(actor) == json.dumps(text)
    back = Actor.parse(str(actor))
    assert back == actor and back.kind is kind and back.name == name


@pytest.mark.parametrize("text", ["", "user", "user:", "worker", "controller:x", "nobody"])
def test_parse_refuses_what_names_no_actor(text: str) -> None:
    with pytest.raises(ValueError, match="not an actor"):
        Actor.parse(text)


def test_the_openapi_schema_lists_the_values() -> None:
    wait = JobView.model_json_schema()["$defs"]["WaitCode"]["enum"]
    assert wait == [c.value for c in WaitCode]
    kind = JobEvent.model_json_schema()["$defs"]["EventKind"]["enum"]
    assert kind == [k.value for k in EventKind]
