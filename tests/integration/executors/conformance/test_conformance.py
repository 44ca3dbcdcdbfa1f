"""The executor conformance suite (issue 13 point 5): each test runs on every executor.

What an executor promises the controller (:mod:`gpuyard.executors.base`): a launch runs the
command once (a second launch of the same worker adopts it), status tells running from exited
(with the exit code, the signal, whether it was escalated) from lost, a stop is SIGTERM then
SIGKILL after the grace, a kill reaches every process of the worker (a grandchild in a session
of its own too), signals reach the worker's main process, logs are served by offset, a control
plane started again adopts running workers, and a node that dies makes its workers lost with
nothing of them left running.
"""

from __future__ import annotations

import signal

import pytest

from gpuyard.models.worker import WorkerState
from gpuyard.testing.conformance import Harness, gone, pid_from

# One worker runs the whole module: the Ray cases share the session's cluster (a mark on the
# "ray" parameter alone does not group them under xdist's loadgroup).
pytestmark = pytest.mark.xdist_group("ray")


def test_exit_codes_and_logs(harness: Harness) -> None:
    ok = harness.launch(harness.request("echo out; echo err >&2; exit 0", rank=0))
    bad = harness.launch(harness.request("echo failing; exit 7", rank=1))
    done_ok, done_bad = harness.wait(ok), harness.wait(bad)
    assert (done_ok.state, done_ok.exit_code) == (WorkerState.EXITED, 0), done_ok
    assert (done_bad.state, done_bad.exit_code) == (WorkerState.EXITED, 7), done_bad
    log = harness.wait_log(ok, "err")
    assert "out\n" in log and "err\n" in log
    data, size = harness.executor.read_log(ok, 4, 1 << 20)  # by offset: what follows "out\n"
    assert data.decode() == log[4:] and size == len(log.encode())
    assert harness.wait_log(bad, "failing").strip() == "failing"


def test_a_second_launch_adopts_the_first(harness: Harness) -> None:
    request = harness.request("echo started; sleep 60")
    first = harness.launch(request)
    again = harness.launch(request)
    assert harness.wait_log(first, "started").count("started") == 1
    assert harness.executor.status([first, again])[1].state is WorkerState.RUNNING
    harness.executor.kill(again)
    assert harness.wait(first).state is WorkerState.EXITED
    assert harness.log(first).count("started") == 1


def test_graceful_stop_then_kill(harness: Harness) -> None:
    polite = harness.launch(
        harness.request(
            'trap "echo got TERM; exit 143" TERM; echo ready; while :; do sleep 0.1; done'
        )
    )
    stubborn = harness.launch(
        harness.request(
            "trap 'echo ignoring TERM' TERM; echo ready; while :; do sleep 0.1; done",
            rank=1,
            grace=1.0,
        )
    )
    harness.wait_log(polite, "ready")
    harness.wait_log(stubborn, "ready")
    harness.executor.terminate(polite, 10.0)
    harness.executor.terminate(stubborn, 1.0)
    done = harness.wait(polite, timeout=8)
    assert (done.state, done.exit_code, done.escalated) == (WorkerState.EXITED, 143, False), done
    assert "got TERM" in harness.log(polite)
    done = harness.wait(stubborn, timeout=15)
    assert done.state is WorkerState.EXITED and done.escalated and done.signal == "SIGKILL", done
    assert "ignoring TERM" in harness.log(stubborn)


def test_kill_reaches_grandchildren(harness: Harness) -> None:
    handle = harness.launch(
        harness.request("setsid sleep 300 & echo grandchild $!; echo main $$; sleep 300")
    )
    log = harness.wait_log(handle, "main")
    grandchild, main = pid_from(log, "grandchild"), pid_from(log, "main")
    harness.executor.kill(handle)
    done = harness.wait(handle)
    assert done.state is WorkerState.EXITED and done.signal == "SIGKILL", done
    assert gone(main) and gone(grandchild)


def test_a_signal_reaches_the_main_process(harness: Harness) -> None:
    handle = harness.launch(
        harness.request("trap 'echo got USR1' USR1; echo ready; while :; do sleep 0.1; done")
    )
    harness.wait_log(handle, "ready")
    harness.executor.signal(handle, signal.SIGUSR1, steps=False)
    assert "got USR1" in harness.wait_log(handle, "got USR1")
    harness.executor.kill(handle)
    harness.wait(handle)


def test_a_restarted_control_plane_adopts_running_workers(harness: Harness) -> None:
    request = harness.request("echo main $$; sleep 300")
    handle = harness.launch(request)
    main = pid_from(harness.wait_log(handle, "main"), "main")
    again = harness.reopen()
    try:
        assert again.status([handle])[0].state is WorkerState.RUNNING
        assert again.launch(request)  # adopts: no second copy
        assert harness.log(handle).count("main") == 1
        data, _size = again.read_log(handle, 0, 1 << 20)
        assert f"main {main}" in data.decode()
        again.terminate(handle, 1.0)
        done = harness.wait(handle, executor=again)
        assert done.state is WorkerState.EXITED and done.signal == "SIGTERM", done
        assert gone(main)
    finally:
        again.close()


def test_a_lost_node_loses_its_workers_and_leaves_nothing_running(harness: Harness) -> None:
    node = harness.nodes[-1]
    handle = harness.launch(
        harness.request("setsid sleep 300 & echo grandchild $!; echo main $$; sleep 300", node=node)
    )
    log = harness.wait_log(handle, "main")
    grandchild, main = pid_from(log, "grandchild"), pid_from(log, "main")
    harness.lose(node)
    done = harness.wait(handle, timeout=60)
    assert done.state is WorkerState.LOST, done
    assert gone(main, 20) and gone(grandchild, 20)
    # What the control plane received of the log outlives the node.
    assert f"main {main}" in harness.log(handle)
