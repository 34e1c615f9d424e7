"""netdam.Client against a node on the testbed: transfers larger than an
MTU, the atomics' old values, ACCUMULATE and REDUCE on numpy arrays. The
client runs in host 1, the node is host 0."""

import numpy as np
import pytest

import netdam
from conftest import NUMPY_OPS, RKEY

NODE = "198.18.0.1"

# Addresses of region RKEY each test keeps to (the session's nodes are shared).
ROUND_TRIP_ADDR = 0x10000
ATOMIC_ADDR = 0x300000
VECTOR_ADDR = 0x310000
STRIPED_ADDR = 0x400000


def round_trip(data, addr):
    c = netdam.Client(NODE)
    c.write(RKEY, addr, data)
    back = c.read(RKEY, addr, len(data))
    into = np.zeros(len(data), dtype=np.uint8)
    c.read_into(RKEY, addr, into)
    return back, into


def test_write_and_read_back_a_megabyte_byte_exact(testbed):
    # 1 MiB + 13 bytes: 729 requests of 1440 bytes at MTU 1500, the last one short.
    data = np.random.default_rng(1).integers(0, 256, (1 << 20) + 13, dtype=np.uint8).tobytes()
    back, into = testbed.run(1, round_trip, data, ROUND_TRIP_ADDR)
    assert isinstance(back, bytes)
    assert back == data
    assert into.tobytes() == data


def striped_round_trip(data, addr):
    c = netdam.Client(NODE, streams=3)
    c.write(RKEY, addr, data)
    return c.read(RKEY, addr, len(data))


def test_a_transfer_striped_over_three_threads_is_byte_exact(testbed):
    # 3 MiB + 5 bytes: 2,185 requests, three stripes of about 728.
    data = np.random.default_rng(2).integers(0, 256, (3 << 20) + 5, dtype=np.uint8).tobytes()
    assert testbed.run(1, striped_round_trip, data, STRIPED_ADDR) == data


def afxdp_refused():
    try:
        netdam.Client(NODE, afxdp=True)
    except netdam.Error as e:
        return str(e)
    return None


def test_afxdp_on_a_host_that_serves_a_node_is_refused_with_the_reason(testbed):
    # Every host of the session serves a node, whose program holds eth0.
    err = testbed.run(1, afxdp_refused)
    assert err is not None and "holds the interface" in err, err


def test_streams_beyond_64_is_a_value_error():
    with pytest.raises(ValueError, match="streams 65"):
        netdam.Client(NODE, streams=65)


def write_array_read_floats(arr, addr):
    c = netdam.Client(NODE)
    c.write(RKEY, addr, arr)
    out = np.empty(arr.shape, arr.dtype)
    c.read_into(RKEY, addr, out)
    return out


def test_numpy_arrays_go_as_their_bytes(testbed):
    arr = np.linspace(-1, 1, 3001, dtype=np.float32)
    out = testbed.run(1, write_array_read_floats, arr, ROUND_TRIP_ADDR)
    assert out.dtype == np.float32
    assert np.array_equal(out, arr)


def atomics(addr):
    c = netdam.Client(NODE)
    olds = [c.swap(RKEY, addr, 40)]
    olds += [c.fetch_add(RKEY, addr, 2), c.fetch_add(RKEY, addr, 2**64 - 1)]
    olds += [c.cas(RKEY, addr, 7, 100), c.cas(RKEY, addr, 41, 1000)]
    olds += [c.swap(RKEY, addr, 5)]
    return olds


def test_atomics_answer_the_old_value(testbed):
    olds = testbed.run(1, atomics, ATOMIC_ADDR)
    # SWAP 40 over the fresh memory's 0; +2 is 42; + (2^64 - 1) wraps to 41;
    # CAS expecting 7 fails (41 stays); CAS expecting 41 stores 1000; SWAP.
    assert olds == [0, 40, 42, 41, 41, 1000]


def vector_ops(dtype, op, addr):
    rng = np.random.default_rng(7)
    if np.dtype(dtype).kind == "f":
        mem = (rng.standard_normal(1000) * 100).astype(dtype)
        values = (rng.standard_normal(1000) * 100).astype(dtype)
    else:
        info = np.iinfo(dtype)
        mem = rng.integers(info.min, info.max, 1000, dtype=dtype, endpoint=True)
        values = rng.integers(info.min, info.max, 1000, dtype=dtype, endpoint=True)
    c = netdam.Client(NODE)
    c.write(RKEY, addr, mem)
    reduced = c.reduce(RKEY, addr, values.reshape(10, 100), op)
    untouched = np.frombuffer(c.read(RKEY, addr, mem.nbytes), dtype)
    c.accumulate(RKEY, addr, values, op)
    accumulated = np.frombuffer(c.read(RKEY, addr, mem.nbytes), dtype)
    return mem, values, reduced, untouched, accumulated


@pytest.mark.parametrize(
    "dtype,op",
    [(d, o) for d in ("int32", "uint32", "int64", "uint64") for o in NUMPY_OPS]
    + [("float32", o) for o in ("sum", "min", "max")],
)
def test_reduce_and_accumulate_match_numpy(testbed, dtype, op):
    # 1000 elements: several requests at MTU 1500 for every width.
    mem, values, reduced, untouched, accumulated = testbed.run(1, vector_ops, dtype, op, VECTOR_ADDR)
    expected = NUMPY_OPS[op](values, mem)
    assert reduced.dtype == np.dtype(dtype) and reduced.shape == (10, 100)
    assert np.array_equal(reduced.reshape(-1), expected), "REDUCE"
    assert np.array_equal(untouched, mem), "REDUCE leaves memory as it was"
    assert np.array_equal(accumulated, NUMPY_OPS[op](mem, values)), "ACCUMULATE"


def ping():
    return netdam.Client(NODE).ping()


def test_ping_measures_a_round_trip(testbed):
    rtt = testbed.run(1, ping)
    assert 0 < rtt < 1
