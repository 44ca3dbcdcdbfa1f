"""The root cause across ranks: the earliest root wins over every cascade, advice lines are
never causes, a traceback's exception is the job's fault unless a signature explains it."""

from __future__ import annotations

from gpuyard.diagnosis.signatures import Cause, Suspect, diagnose, observe, scan, xid_suspect

ILLEGAL = "RuntimeError: CUDA error: an illegal memory access was encountered"
ADVICE = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect."
)


def test_the_earliest_root_across_ranks_wins_over_earlier_cascades() -> None:
    rank0 = scan(
        ["step 100 loss 0.41", "Timed out waiting 1800000ms for recv operation to complete"],
        rank=0,
        node="node0",
        at=10.0,
    )
    rank3 = scan(
        [
            "step 100 loss 0.40",
            "Traceback (most recent call last):",
            '  File "t.py", line 3',
            ILLEGAL,
            ADVICE,
            "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
        ],
        rank=3,
        node="node1",
        at=12.0,  # seen after rank 0's timeout: still the root
    )
    found = diagnose(rank0 + rank3)
    assert found.cause is not None and found.cause.cause is Cause.CUDA_FATAL
    assert found.suspect is Suspect.NODE
    assert found.summary().startswith("rank 3 on node1: CUDA fatal error (RuntimeError: CUDA")
    # The advice lines and the traceback's own exception line add nothing.
    assert [o.cause for o in rank3] == [Cause.CUDA_FATAL]


def test_a_cascade_alone_is_reported_as_unknown() -> None:
    found = diagnose(
        scan(["[E ProcessGroupNCCL.cpp:475] Some NCCL operations have failed or timed out."])
    )
    assert found.cause is not None and found.cause.cause is Cause.COLLECTIVE
    assert found.suspect is Suspect.UNKNOWN
    assert diagnose([]).summary() == "no known fault signature in the logs"


def test_a_python_exception_is_the_jobs_own_fault() -> None:
    log = [
        "Traceback (most recent call last):",
        '  File "/w/train.py", line 40, in <module>',
        "    batch['labels']",
        "KeyError: 'labels'",
        "step 1",
    ]
    [seen] = scan(log, rank=1)
    assert (seen.cause, seen.suspect, seen.title) == (
        Cause.APPLICATION,
        Suspect.JOB,
        "Python exception KeyError",
    )


def test_xids_are_split_into_application_and_node_critical() -> None:
    assert xid_suspect(13) is Suspect.JOB and xid_suspect(43) is Suspect.JOB
    assert xid_suspect(79) is Suspect.NODE and xid_suspect(48) is Suspect.NODE
    [seen] = scan(["NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."])
    assert (seen.cause, seen.suspect, seen.title) == (Cause.XID, Suspect.NODE, "GPU Xid 79 (node)")
    [app] = scan(["NVRM: Xid (PCI:0000:3b:00): 13, Graphics SM Warp Exception"])
    assert app.suspect is Suspect.JOB


def test_advice_and_ordinary_lines_are_not_observations() -> None:
    for line in [
        ADVICE,
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        "step 10 loss 0.0312 lr 0.1",
        "loss: 0.3 (nan-safe mode)",
        "NCCL INFO Channel 00/02 : 0 1",
        "config: timeout=1800 info=verbose",
        "",
    ]:
        assert observe(line) is None, line


def test_a_hostile_log_costs_little_and_reaches_no_terminal() -> None:
    """A job writes its own log: long lines, runs of blanks after a keyword, terminal escapes
    and control characters must neither stall the controller nor come out in an event."""
    import time

    lines = [
        "loss" + " " * 50_000 + "x",
        "grad_norm" + "\t" * 50_000,
        "NCCL WARN " + "a" * 100_000,
        "x" * 1_000_000,
    ]
    started = time.perf_counter()
    assert scan(lines) == []
    assert time.perf_counter() - started < 0.5
    [seen] = scan(
        ["\x1b]0;owned\x07\x1b[31mRuntimeError: CUDA error: unspecified launch failure\x1b[0m\r"]
    )
    assert seen.cause is Cause.CUDA_FATAL
    assert seen.line == "]0;ownedRuntimeError: CUDA error: unspecified launch failure"
    assert all(ch.isprintable() for ch in seen.describe())
