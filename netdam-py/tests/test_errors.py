"""The module's errors: typed exceptions with the library's messages, and
argument problems as ValueError or TypeError."""

import numpy as np
import pytest

import netdam
from conftest import NODES, RKEY

NODE = "198.18.0.1"
NOBODY = "198.18.0.200"  # on the testbed's subnet, served by no host
MEMBERS = [f"198.18.0.{i + 1}" for i in range(NODES)]


def test_the_exceptions_are_one_family():
    for e in (netdam.TimeoutError, netdam.RefusedError, netdam.NodeError):
        assert issubclass(e, netdam.Error) and e.__module__ == "netdam" and e.__doc__
    assert issubclass(netdam.Error, Exception)


def ping_nobody():
    netdam.Client(NOBODY, timeout_ms=50, retries=1).ping()


def test_no_answer_is_a_timeout_error(testbed):
    with pytest.raises(netdam.TimeoutError, match=r"NOP to 198\.18\.0\.200: no answer after 2 attempt\(s\) of 50ms"):
        testbed.run(1, ping_nobody)


def read_with(rkey, addr, n):
    return netdam.Client(NODE).read(rkey, addr, n)


def test_a_wrong_key_is_refused_with_bad_key(testbed):
    with pytest.raises(netdam.RefusedError, match="BAD_KEY") as e:
        testbed.run(1, read_with, 0x9999, 0, 8)
    assert (e.value.status, e.value.code) == ("BAD_KEY", 4)
    assert "check --rkey" in str(e.value)
    assert isinstance(e.value, netdam.Error)


def test_a_range_past_the_region_is_refused_out_of_bounds(testbed):
    with pytest.raises(netdam.RefusedError) as e:
        testbed.run(1, read_with, RKEY, (16 << 20) - 4, 8)
    assert (e.value.status, e.value.code) == ("OUT_OF_BOUNDS", 3)


def test_a_node_where_nothing_is_served(empty_pin_dir):
    with pytest.raises(netdam.NodeError, match="is `netdam serve` running on this host"):
        netdam.Node(empty_pin_dir)
    with pytest.raises(ValueError, match="not both"):
        netdam.Node(empty_pin_dir, iface="eth0")
    with pytest.raises(ValueError, match="give the node's pin_dir"):
        netdam.Node()


def test_client_arguments():
    with pytest.raises(ValueError, match="not an IPv4 address"):
        netdam.Client("node-1")
    with pytest.raises(ValueError, match="window 1024"):
        netdam.Client("127.0.0.1", window=1024)
    with pytest.raises(ValueError, match="mtu 50"):
        netdam.Client("127.0.0.1", mtu=50)
    c = netdam.Client("127.0.0.1")
    with pytest.raises(TypeError, match="dtype float64: NetDAM vectors are int32, uint32, int64, uint64 or float32"):
        c.accumulate(RKEY, 0, np.ones(4))
    with pytest.raises(TypeError, match="must be a numpy array"):
        c.reduce(RKEY, 0, [1, 2, 3])
    with pytest.raises(ValueError, match="not C-contiguous"):
        c.accumulate(RKEY, 0, np.ones(8, np.int32)[::2])
    with pytest.raises(TypeError, match="bitwise"):
        c.accumulate(RKEY, 0, np.ones(4, np.float32), "bxor")
    with pytest.raises(ValueError, match='op "prod" is not one of'):
        c.reduce(RKEY, 0, np.ones(4, np.int32), "prod")
    with pytest.raises(ValueError, match="not C-contiguous"):
        c.write(RKEY, 0, np.ones((4, 4), np.int32).T)
    with pytest.raises(TypeError, match="read-only"):
        c.read_into(RKEY, 0, b"12345678")


def group_misuse(pin_dir):
    """Each wrong call of a Group in host 0, and what it raised."""
    node = netdam.Node(pin_dir)
    g = netdam.Group(node, MEMBERS, RKEY, 8 << 20, 64 << 10)
    # Room for parts of 64 bytes: not even one chunk's cell (16 + 346 float32).
    small = netdam.Group(node, MEMBERS, RKEY, 8 << 20, 256)
    f32 = np.ones(100, np.float32)
    calls = {
        "bitwise on float32": lambda: g.allreduce(f32, op="band"),
        "float64": lambda: g.allreduce(np.ones(100)),
        "non-contiguous": lambda: g.allreduce(np.ones(200, np.int32)[::2]),
        "recv of another dtype": lambda: g.allreduce(f32, np.ones(100, np.int32)),
        "recv of another size": lambda: g.allreduce(f32, np.ones(99, np.float32)),
        "overlapping recv": lambda: g.allreduce(f32[:50], f32[25:75]),
        "unknown op": lambda: g.allreduce(f32, op="prod"),
        "scratch too small": lambda: small.allreduce(np.ones(2000, np.float32)),
        "scratch without parts": lambda: netdam.Group(node, MEMBERS, RKEY, 8 << 20, 64),
        "scratch misaligned": lambda: netdam.Group(node, MEMBERS, RKEY, (8 << 20) + 4, 4096),
        "scratch outside the memory": lambda: netdam.Group(node, MEMBERS, RKEY, 16 << 20, 4096),
        "not a member": lambda: netdam.Group(node, MEMBERS[1:], RKEY, 0, 4096),
        "one member": lambda: netdam.Group(node, MEMBERS[:1], RKEY, 0, 4096),
        "bad address": lambda: netdam.Group(node, ["198.18.0.1", "x"], RKEY, 0, 4096),
        "chunk of float64": lambda: g.chunk_elems("float64"),
    }
    raised = {}
    for name, call in calls.items():
        try:
            call()
            raised[name] = None
        except Exception as e:
            raised[name] = (type(e).__name__, str(e))
    return raised


def test_group_arguments(testbed):
    raised = testbed.run(0, group_misuse, testbed.hosts[0].pin_dir)
    expected = {
        "bitwise on float32": ("TypeError", "bitwise"),
        "float64": ("TypeError", "dtype float64"),
        "non-contiguous": ("ValueError", "not C-contiguous"),
        "recv of another dtype": ("TypeError", "recv has dtype int32 and send float32"),
        "recv of another size": ("ValueError", "recv holds 99 elements and send 100"),
        "overlapping recv": ("ValueError", "shares memory"),
        "unknown op": ("ValueError", "not one of"),
        "scratch too small": ("ValueError", "scratch area of 256 bytes is too small for one piece of 1038 f32"),
        "scratch without parts": ("ValueError", "leaves no room for the input, output and cell parts"),
        "scratch misaligned": ("ValueError", "is not 8-byte aligned"),
        "scratch outside the memory": ("ValueError", "does not fit the node's 16777216-byte NetDAM memory"),
        "not a member": ("ValueError", "this node (198.18.0.1) is not in the group"),
        "one member": ("ValueError", "a group has 2 to 8 members, not 1"),
        "bad address": ("ValueError", 'member "x" is not an IPv4 address'),
        "chunk of float64": ("TypeError", "the all-reduce takes int32"),
    }
    for name, (kind, words) in expected.items():
        got = raised[name]
        assert got is not None, f"{name}: nothing raised"
        assert got[0] == kind and words in got[1], f"{name}: {got}"
