"""netdam.Group.allreduce with 3 processes, one per testbed host: every
dtype and op, in place and out of place, and vectors larger than the scratch
area, checked exactly against the ring's defined result (PROTOCOL.md
section 6): chunk k of E elements is started by member o = k mod N and
folded in the order ((x_o + x_(o+1)) + ...) + x_(o+N-1), in the dtype's own
arithmetic (float32 rounding included)."""

import numpy as np

import netdam
from conftest import MTU, NODES, NUMPY_OPS as OPS, RKEY

MEMBERS = [f"198.18.0.{i + 1}" for i in range(NODES)]
# The scratch area at every member: 64 KiB, so that each half holds 32 KiB.
SCRATCH_ADDR = 8 << 20
SCRATCH_LEN = 64 << 10
DTYPES = ["int32", "uint32", "int64", "uint64", "float32"]
# Several chunks for every width, the last one partial.
COUNT = 5000
CASES = [
    (dtype, op, COUNT, in_place)
    for dtype in DTYPES
    for op in OPS
    if not (dtype == "float32" and op.startswith("b"))
    for in_place in (True, False)
]
# Larger than the scratch area (400 KB each): reduced in pieces.
LARGE = [("float32", "sum", 100_000, True), ("int64", "bxor", 50_000, False)]


def member_input(rank, dtype, op, count):
    """Member ``rank``'s input: float32 of magnitudes 1e-4 to 1e4 (so the
    order of the sums shows in the rounding), integers over the whole range."""
    rng = np.random.default_rng([rank, DTYPES.index(dtype), list(OPS).index(op), count])
    if dtype == "float32":
        return (rng.standard_normal(count) * 10.0 ** rng.integers(-4, 5, count)).astype(np.float32)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)


def ring_result(inputs, op, chunk_elems):
    """The ring's defined result, from every member's input."""
    n = len(inputs)
    origin = (np.arange(len(inputs[0])) // chunk_elems) % n
    out = np.empty_like(inputs[0])
    for o in range(n):
        at = origin == o
        acc = inputs[o][at]
        for j in range(1, n):
            acc = OPS[op](acc, inputs[(o + j) % n][at])
        out[at] = acc
    return out


def member(pin_dir, rank, cases):
    """One member's all-reduces, run in its host: the results, the chunk
    sizes the group uses, and its generations before and after."""
    node = netdam.Node(pin_dir)
    g = netdam.Group(node, MEMBERS, RKEY, SCRATCH_ADDR, SCRATCH_LEN)
    assert (g.rank, g.size, g.members, g.mtu) == (rank, NODES, MEMBERS, MTU)
    before = node.generation(RKEY)
    results = []
    for dtype, op, count, in_place in cases:
        send = member_input(rank, dtype, op, count)
        if in_place:
            assert g.allreduce(send, op=op) is send
            results.append(send)
        else:
            kept = send.copy()
            recv = np.empty_like(send)
            assert g.allreduce(send, recv, op) is recv
            assert np.array_equal(send, kept), "out of place leaves send as it was"
            results.append(recv)
    chunks = {d: g.chunk_elems(np.dtype(d)) for d in DTYPES}
    return results, chunks, before, node.generation(RKEY)


def run_group(testbed, cases):
    running = [testbed.start(i, member, h.pin_dir, i, cases) for i, h in enumerate(testbed.hosts)]
    return [r.result(timeout=300) for r in running]


def check(outcomes, cases):
    chunks = outcomes[0][1]
    for dtype, width in [("int32", 4), ("uint32", 4), ("int64", 8), ("uint64", 8), ("float32", 4)]:
        # E = floor((MTU - 60 - sr_len) / 8) * 8 / w, sr_len = 16 + 8 x 2(N-1) segments of the
        # ring program + 8 for the version-2 trailer, call word and cell address (docs/PROTOCOL.md, version 2).
        assert chunks[dtype] == (MTU - 60 - (16 + 8 * 2 * (NODES - 1) + 8)) // 8 * 8 // width
    for c, (dtype, op, count, in_place) in enumerate(cases):
        inputs = [member_input(r, dtype, op, count) for r in range(NODES)]
        expected = ring_result(inputs, op, chunks[dtype])
        for rank, (results, _, _, _) in enumerate(outcomes):
            got = results[c]
            assert got.dtype == np.dtype(dtype) and got.shape == (count,)
            wrong = np.flatnonzero(got != expected)
            assert wrong.size == 0, (
                f"{dtype} {op} count {count} {'in place' if in_place else 'out of place'}, rank {rank}: "
                f"{wrong.size} wrong elements, first at {wrong[:5]}: {got[wrong[:5]]} != {expected[wrong[:5]]}"
            )
    for rank, (_, _, before, after) in enumerate(outcomes):
        assert after >= before + len(cases), f"rank {rank}: generation {before} -> {after}"


def test_every_dtype_and_op_in_place_and_out_of_place_bit_exact(testbed):
    check(run_group(testbed, CASES), CASES)


def test_vectors_larger_than_the_scratch_area_in_pieces(testbed):
    assert all(count * np.dtype(d).itemsize > SCRATCH_LEN for d, _, count, _ in LARGE)
    check(run_group(testbed, LARGE), LARGE)


def test_the_check_tells_the_ring_order_from_another():
    # Float32 sums of these inputs depend on the order: a result folded
    # from member 0 everywhere differs from the ring's, so `check` would see it.
    inputs = [member_input(r, "float32", "sum", COUNT) for r in range(NODES)]
    e = (MTU - 60 - (16 + 16 * (NODES - 1) + 8)) // 4
    ring = ring_result(inputs, "sum", e)
    from_zero = (inputs[0] + inputs[1]) + inputs[2]
    assert not np.array_equal(ring, from_zero)
    assert np.array_equal(ring[:e], from_zero[:e]), "chunk 0 starts at member 0"


def disagreeing_member(pin_dir, rank, dtype, op, count):
    """One member's all-reduce of its own count, dtype and op: the status
    it was refused with, or what it returned."""
    node = netdam.Node(pin_dir)
    g = netdam.Group(node, MEMBERS, RKEY, SCRATCH_ADDR, SCRATCH_LEN)
    send = member_input(rank, dtype, op, count)
    try:
        g.allreduce(send, op=op)
    except netdam.RefusedError as e:
        return e.status
    return "returned a result"


def test_members_that_pass_different_sizes_dtypes_or_ops_all_get_mismatch(testbed):
    # The ring's call word (docs/PROTOCOL.md, version 2) finds the
    # difference on every member, then the group's next call is exact.
    for calls in [
        [("int32", "sum", 1000), ("int32", "sum", 1000), ("int32", "sum", 1001)],
        [("int32", "sum", 1000), ("float32", "sum", 1000), ("int32", "sum", 1000)],
        [("int32", "max", 10), ("int32", "sum", 10), ("int32", "sum", 10)],
    ]:
        running = [
            testbed.start(i, disagreeing_member, h.pin_dir, i, *calls[i]) for i, h in enumerate(testbed.hosts)
        ]
        statuses = [r.result(timeout=120) for r in running]
        assert statuses == ["MISMATCH"] * NODES, f"{calls}: {statuses}"
        agreed = [("int32", "sum", 1000, True)]
        check(run_group(testbed, agreed), agreed)
