"""The node check: a compute burn and a collective across a job's nodes, before its command.

Run by the platform as workers of the job, one per node (docs/fault-tolerance.md), with the
pool's own interpreter in isolated mode (``python -I``) and the pool's environment, never the
job's: no code of the job runs in this process, so its verdict can be trusted with a cordon.
It imports only the standard library at module level (torch when present, inside functions),
so an executor can run it as a file on any node.

Tests, in order:

1. **burn**: repeated matrix products on every GPU this worker sees, each compared bit for bit
   with the first, and the first with a float64 reference on a corner (a GPU that computes
   wrong or unsteady results fails). Without a GPU it says so ("GPU burn: not available") and
   runs the same test on the CPU, so the path is exercised; it never reports GPU health it did
   not measure.
2. **collective**: the job's nodes meet at a TCP store on rank 0's node; every rank sends its
   own pattern with ``all_gather`` (a rank whose data arrives wrong is named), then all-reduce
   bandwidth is measured (bus bandwidth, as nccl-tests reports it) and compared with a floor
   when one is given. NCCL on GPUs, gloo otherwise. A rank that never arrives is named by
   rank 0 when most others arrived.

The verdict is one line per blamed node, ``gpuyard-check: FAILED node=N test=T <evidence>``,
and the exit status: 0 passed, :data:`EXIT_FAILED` a node failed, :data:`EXIT_INCONCLUSIVE`
the check could not tell (it could not reach the others, say).

``GPUYARD_CHECK_INJECT`` (``burn`` or ``collective``) makes this node corrupt its own results:
the executor sets it for chaos tests (the local executor's ``inject_faults`` setting); the
checks that catch the corruption are the real ones.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Sequence

EXIT_FAILED = 86
"""A node failed the check (named in a FAILED line)."""
EXIT_INCONCLUSIVE = 87
"""The check could not decide (this rank could not reach the others)."""
PREFIX = "gpuyard-check:"
INJECT = "GPUYARD_CHECK_INJECT"


def say(text: str) -> None:
    print(f"{PREFIX} {text}", flush=True)


class Failed(Exception):
    def __init__(self, test: str, evidence: str, node: str | None = None) -> None:
        super().__init__(evidence)
        self.test, self.evidence, self.node = test, evidence, node


# -- burn -------------------------------------------------------------------------------


def burn(seconds: float, inject: bool) -> str:
    try:
        import torch
    except ImportError:
        say("GPU burn: not available (torch is not installed in the pool's python)")
        return _burn_python(seconds, inject)
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        results = [
            _burn_torch(f"cuda:{i}", 4096, seconds, inject)
            for i in range(torch.cuda.device_count())
        ]
        return "; ".join(f"GPU {i}: {r}" for i, r in enumerate(results))
    say("GPU burn: not available (no CUDA device visible to this worker); burning the CPU")
    return "CPU: " + _burn_torch("cpu", 256, seconds, inject)


def _burn_torch(device: str, n: int, seconds: float, inject: bool) -> str:
    import torch as t

    gen = t.Generator().manual_seed(1234)
    a = t.rand(n, n, generator=gen, dtype=t.float32).to(device)
    b = t.rand(n, n, generator=gen, dtype=t.float32).to(device)
    first = a @ b
    corner = (a[:32].double() @ b[:, :32].double()).cpu()
    if not t.allclose(first[:32, :32].double().cpu(), corner, rtol=1e-4, atol=1e-3):
        raise Failed("burn", f"{device}: the product differs from a float64 reference")
    deadline = time.monotonic() + seconds
    rounds = 0
    start = time.perf_counter()
    while time.monotonic() < deadline or rounds < 2:
        c = a @ b
        if inject and rounds == 1:
            c[7, 7] += 1.0  # a flipped result, as a faulty unit would give
        if not t.equal(c, first):
            diff = (c - first).abs().max().item()
            raise Failed(
                "burn", f"{device}: product {rounds} differs from the first (max |diff| {diff:g})"
            )
        rounds += 1
    if device.startswith("cuda"):
        t.cuda.synchronize(device)
    elapsed = time.perf_counter() - start
    gflops = 2 * n**3 * rounds / elapsed / 1e9
    return f"{rounds} products of {n}x{n} checked, {gflops:.1f} GFLOP/s"


def _burn_python(seconds: float, inject: bool) -> str:
    n = 40
    rng = random.Random(1234)
    a = [[rng.randrange(1000) for _ in range(n)] for _ in range(n)]
    b = [[rng.randrange(1000) for _ in range(n)] for _ in range(n)]
    columns = list(zip(*b, strict=True))
    first = [[sum(x * y for x, y in zip(row, col, strict=True)) for col in columns] for row in a]
    deadline, rounds = time.monotonic() + seconds, 0
    while time.monotonic() < deadline or rounds < 2:
        c = [[sum(x * y for x, y in zip(row, col, strict=True)) for col in columns] for row in a]
        if inject and rounds == 1:
            c[7][7] += 1
        if c != first:
            raise Failed("burn", f"cpu: integer product {rounds} differs from the first")
        rounds += 1
    return f"CPU: {rounds} integer products of {n}x{n} checked (pure Python)"


# -- collective -------------------------------------------------------------------------


def collective(args: argparse.Namespace, nodes: Sequence[str], inject: bool) -> str:
    world, rank = len(nodes), args.rank
    if world == 1:
        return "single node: no collective test"
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        say("collective: not available (torch is not installed in the pool's python)")
        return "collective: not available"
    from datetime import timedelta

    host, _, port = args.store.rpartition(":")
    timeout = timedelta(seconds=args.timeout)
    try:
        store = dist.TCPStore(  # type: ignore[attr-defined]
            host, int(port), world, rank == 0, timeout=timeout, wait_for_workers=False
        )
    except Exception as exc:  # rank 0 could not listen, or this rank could not connect
        if rank == 0:
            raise Failed(
                "collective", f"could not open the rendezvous on {args.store}: {exc}"
            ) from exc
        raise Inconclusive(f"could not reach the rendezvous on {args.store}: {exc}") from exc
    store.set(f"joined/{rank}", nodes[rank])
    if rank == 0:
        _wait_for_all(store, nodes, args.timeout)
    use_nccl = torch.cuda.is_available() and torch.cuda.device_count() > 0
    device = "cuda:0" if use_nccl else "cpu"
    dist.init_process_group(
        "nccl" if use_nccl else "gloo", store=store, rank=rank, world_size=world, timeout=timeout
    )
    try:
        mine = torch.full((1024,), float(rank + 1), device=device)
        if inject:
            mine[3] = -1.0
        parts = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(parts, mine)
        bad = [r for r, part in enumerate(parts) if not bool((part == float(r + 1)).all())]
        if bad:
            raise _blame_all(bad, nodes, "its data arrived corrupted in an all_gather")
        size = 4 * 1024 * 1024  # floats: 16 MiB
        data = torch.ones(size, device=device)
        dist.all_reduce(data)  # warm-up
        rounds = 5
        start = time.perf_counter()
        for _ in range(rounds):
            dist.all_reduce(data)
        if use_nccl:
            torch.cuda.synchronize()
        elapsed = (time.perf_counter() - start) / rounds
        busbw = size * 4 * 2 * (world - 1) / world / elapsed / 1e9
        if args.floor and busbw < args.floor:
            # Every rank measures the same ring: no node can be singled out from it (that
            # needs DLRover's pairwise rounds), so nobody is blamed and the check fails.
            raise Inconclusive(
                f"all-reduce bus bandwidth {busbw:.2f} GB/s is below the pool's floor "
                f"{args.floor:g} GB/s; no single node can be blamed from one ring"
            )
        backend = "nccl" if use_nccl else "gloo"
        return (
            f"{backend} all-reduce of 16 MiB across {world} nodes: {busbw:.2f} GB/s bus bandwidth"
        )
    finally:
        dist.destroy_process_group()


class Inconclusive(Exception):
    pass


class _Blame(Exception):
    def __init__(self, failures: list[Failed]) -> None:
        super().__init__("; ".join(f.evidence for f in failures))
        self.failures = failures


def _blame_all(ranks: list[int], nodes: Sequence[str], why: str) -> _Blame:
    return _Blame([Failed("collective", f"rank {r}: {why}", node=nodes[r]) for r in ranks])


def _wait_for_all(store: object, nodes: Sequence[str], timeout: float) -> None:
    """Rank 0: everyone arrives, or name who did not (when most did; else it is likely this
    node that cannot be reached, and it names itself)."""
    deadline = time.monotonic() + timeout
    missing = list(range(1, len(nodes)))
    while missing and time.monotonic() < deadline:
        missing = [r for r in missing if not store.check([f"joined/{r}"])]  # type: ignore[attr-defined]
        if missing:
            time.sleep(0.1)
    if not missing:
        return
    why = f"did not reach the rendezvous on {nodes[0]} within {timeout:g} s"
    if len(missing) * 2 < len(nodes):
        raise _blame_all(missing, nodes, why)
    if len(nodes) > 2:
        raise Failed("collective", f"{len(missing)} of {len(nodes) - 1} peers {why}", node=nodes[0])
    raise Inconclusive(f"the other node {why}; cannot tell which of the two is at fault")


# -- main -------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nodecheck", description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--nodes", required=True, help="every node of the check, by rank")
    parser.add_argument("--store", required=True, help="HOST:PORT of rank 0's rendezvous")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--burn", type=float, default=2.0, help="seconds of burn per device")
    parser.add_argument("--floor", type=float, default=0.0, help="all-reduce GB/s floor")
    args = parser.parse_args(argv)
    nodes = args.nodes.split(",")
    node = nodes[args.rank]
    inject = os.environ.get(INJECT, "")
    say(f"checking node {node} (rank {args.rank} of {len(nodes)})")
    failures: list[Failed] = []
    try:
        say("burn: " + burn(args.burn, inject == "burn"))
    except Failed as exc:
        failures.append(exc)
    except Exception as exc:  # a device error is the node's
        failures.append(Failed("burn", f"{type(exc).__name__}: {_first_line(exc)}"))
    undecided = ""
    try:
        say("collective: " + collective(args, nodes, inject == "collective"))
    except Failed as exc:
        failures.append(exc)
    except _Blame as exc:
        failures.extend(exc.failures)
    except Inconclusive as exc:
        undecided = str(exc)
    except Exception as exc:  # a collective that broke (a peer died, a timeout)
        undecided = f"collective: {type(exc).__name__}: {_first_line(exc)}"
    for failure in failures:
        say(f"FAILED node={failure.node or node} test={failure.test} {failure.evidence}")
    if failures:
        return EXIT_FAILED
    if undecided:
        say(f"INCONCLUSIVE node={node} {undecided}")
        return EXIT_INCONCLUSIVE
    say(f"PASSED node={node}")
    return 0


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


def leave(status: int) -> None:
    """Exit with ``status`` without the interpreter's own shutdown.

    The verdict is known, printed and flushed; tearing down torch and its distributed state
    took 1-2 s more on a 2-core machine (bench/goodput.py), and the controller waits for
    every check worker to exit before it restarts the job.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    leave(main())
