"""An MPI smoke test: every rank adds its share in an allreduce, and every rank checks the sum.

Submit it as a plain Python command in `mpi` mode; gpuyard puts mpirun in front of it::

    gpuyard submit --mode mpi --nodes 2 --gpus 2 -- python examples/mpi_test.py
    gpuyard submit --mode mpi --mpi mpich --nodes 2 --gpus 2 -- python examples/mpi_test.py

Rank 0 prints which ranks ran on which node and the result. The script exits 1 if any rank
saw a wrong sum, so the job fails when MPI does not add up.
"""

from __future__ import annotations

import array
import sys

from mpi4py import MPI


def main() -> int:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()

    # A buffer allreduce (the collective a training step runs), of rank+1 and its square.
    mine = array.array("q", [rank + 1, (rank + 1) ** 2])
    total = array.array("q", [0, 0])
    comm.Allreduce(mine, total, op=MPI.SUM)
    expected = [size * (size + 1) // 2, size * (size + 1) * (2 * size + 1) // 6]
    ok = list(total) == expected
    # Every rank's verdict, so that one wrong rank fails the job wherever it ran.
    all_ok = comm.allreduce(int(ok), op=MPI.MIN) == 1

    # On gpuyard's virtual nodes too, each node's MPI daemons have the node's host name.
    nodes = comm.gather(MPI.Get_processor_name(), root=0)
    if rank == 0 and nodes is not None:
        by_node: dict[str, list[int]] = {}
        for r, node in enumerate(nodes):
            by_node.setdefault(node, []).append(r)
        where = "; ".join(f"{n}: {' '.join(map(str, rs))}" for n, rs in sorted(by_node.items()))
        library = MPI.Get_library_version().splitlines()[0].split(",")[0].strip()
        print(f"mpi_test: {size} ranks on {len(by_node)} nodes ({where}), {library}")
        verdict = "ok" if all_ok else f"WRONG, expected {expected}"
        print(f"mpi_test: allreduce over {size} ranks: sums {list(total)}: {verdict}")
    if not ok:
        print(f"mpi_test: rank {rank} got {list(total)}, expected {expected}", file=sys.stderr)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
