"""An MPI allreduce across all ranks (mpi4py), to check an MPI launch.

    mpirun -np 2 python examples/mpi_allreduce.py

Every rank contributes rank + 1 and the ranks sum them with allreduce, so n ranks must all get
n * (n + 1) / 2. Rank 0 prints two machine-readable lines on stdout:

    allreduce SUM size N
    hosts HOST,HOST,...

the second naming the host of each rank in rank order. Only rank 0 writes, so the lines that
mpirun forwards from several ranks cannot interleave. A rank that gets a wrong sum exits with 1.
"""

from __future__ import annotations

import socket
import sys

from mpi4py import MPI


def main() -> int:
    """Runs one allreduce over MPI.COMM_WORLD; returns the exit status of this rank."""
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    total = comm.allreduce(rank + 1, op=MPI.SUM)
    hosts = comm.gather(socket.gethostname(), root=0)
    if rank == 0:
        print(f"allreduce {total} size {size}", flush=True)
        print(f"hosts {','.join(hosts)}", flush=True)
    if total != size * (size + 1) // 2:
        print(f"rank {rank}: allreduce gave {total}, expected {size * (size + 1) // 2}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
