"""comm.Allreduce on numpy arrays, run by tests/tests/mpi.rs under
LD_PRELOAD=libnetdam_mpi.so: every NetDAM type and operator, in place and
not, from one element to more than the scratch area holds, each result
checked on every rank against the ring's defined result (PROTOCOL.md
section 6: chunk k of E elements folded from member k mod N in ring order,
which fixes the float32 bits); float64 (left to MPI) against the exact sum.

    python allreduce_mpi4py.py E4 E8 SIZES

E4 and E8: the ring's elements per chunk of 4- and 8-byte types; SIZES:
comma-separated element counts. Prints one line per rank; exits 1 on any
wrong element.
"""

import sys

import numpy as np
from mpi4py import MPI

SEED = 0x4D50
OPS = [
    (MPI.SUM, np.add),
    (MPI.MIN, np.minimum),
    (MPI.MAX, np.maximum),
    (MPI.BAND, np.bitwise_and),
    (MPI.BOR, np.bitwise_or),
    (MPI.BXOR, np.bitwise_xor),
]
# NetDAM's types with their operators (no bitwise on float32), then float64 (MPI's own).
CASES = [(t, op, fold) for t in (np.int32, np.uint32, np.int64, np.uint64) for op, fold in OPS]
CASES += [(np.float32, op, fold) for op, fold in OPS[:3]] + [(np.float64, MPI.SUM, np.add)]


def member_input(dtype, rank, case, count):
    """Any bits for integers; for float32, nonzero values of many
    magnitudes (no NaN or zero, whose MIN/MAX numpy and NetDAM order
    differently), so another summation order gives other bits."""
    rng = np.random.default_rng([SEED, rank, case])
    if dtype == np.float32:
        v = rng.standard_normal(count) * np.exp2(rng.integers(-20, 20, count))
        v[v == 0] = 1.0
        return v.astype(np.float32)
    if dtype == np.float64:
        return rng.integers(-1000000, 1000000, count).astype(np.float64)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)


def ring_result(inputs, fold, chunk):
    """Chunk k of the whole vector folded from member k mod N, in ring order."""
    n, count = len(inputs), len(inputs[0])
    out = np.empty_like(inputs[0])
    with np.errstate(over="ignore"):
        for start in range(0, count, chunk):
            origin = (start // chunk) % n
            span = slice(start, min(start + chunk, count))
            acc = inputs[origin][span].copy()
            for j in range(1, n):
                acc = fold(acc, inputs[(origin + j) % n][span])
            out[span] = acc
    return out


def main():
    e4, e8, sizes = int(sys.argv[1]), int(sys.argv[2]), [int(s) for s in sys.argv[3].split(",")]
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    cases, wrong = 0, []
    for count in sizes:
        for in_place in (False, True):
            for dtype, mpi_op, fold in CASES:
                cases += 1
                inputs = [member_input(dtype, r, cases, count) for r in range(n)]
                if in_place:
                    got = inputs[rank].copy()
                    comm.Allreduce(MPI.IN_PLACE, got, op=mpi_op)
                else:
                    got = np.empty_like(inputs[rank])
                    comm.Allreduce(inputs[rank], got, op=mpi_op)
                if dtype == np.float64:
                    want = np.sum(inputs, axis=0)
                else:
                    want = ring_result(inputs, fold, e8 if np.dtype(dtype).itemsize == 8 else e4)
                if want.tobytes() != got.tobytes():
                    bad = int(np.flatnonzero(want.view(np.uint8) != got.view(np.uint8))[0]) // got.itemsize
                    wrong.append(
                        f"{count} x {np.dtype(dtype).name} {fold.__name__}{' in place' if in_place else ''}: "
                        f"element {bad} is {got[bad]!r}, the ring's result is {want[bad]!r}"
                    )
    print(f"mpi4py rank {rank}: {cases} cases, {len(wrong)} wrong", flush=True)
    for w in wrong[:5]:
        print(f"mpi4py rank {rank}: {w}", flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
