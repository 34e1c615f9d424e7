"""netdam.Node: this host's node through its pins, its memory a zero-copy
view that sees what the network writes, and what the network reads."""

import gc

import numpy as np

import netdam
from conftest import MEM_SIZE, MTU, RKEY

NODE = "198.18.0.1"
ADDR = 0x200000


def write_bytes(addr, data):
    netdam.Client(NODE).write(RKEY, addr, data)


def read_bytes(addr, n):
    return netdam.Client(NODE).read(RKEY, addr, n)


def test_node_describes_the_served_node(testbed):
    node = netdam.Node(testbed.hosts[0].pin_dir)
    assert node.ipv4 == NODE
    assert node.mtu == MTU
    assert node.port == netdam.DEFAULT_PORT == 4793
    assert node.mem_size == 16 << 20 and MEM_SIZE == "16MiB"
    assert str(node.pin_dir) == testbed.hosts[0].pin_dir
    assert node.generation(0xDEAD) == 0, "no region, no generation raised"
    assert "198.18.0.1" in repr(node)


def test_memory_is_a_writable_zero_copy_view_both_ways(testbed):
    node = netdam.Node(testbed.hosts[0].pin_dir)
    view = node.memory
    assert isinstance(view, memoryview)
    assert (view.format, view.readonly, view.nbytes) == ("B", False, node.mem_size)
    # One numpy array over the view, made before anything is written.
    mem = np.frombuffer(node.memory, dtype=np.uint8)
    assert mem.flags.writeable
    data = np.random.default_rng(3).integers(0, 256, 5000, dtype=np.uint8).tobytes()
    testbed.run(1, write_bytes, ADDR, data)
    assert mem[ADDR : ADDR + len(data)].tobytes() == data, "a remote WRITE shows in the same array"
    # Stored through numpy, read by a remote READ.
    floats = np.frombuffer(node.memory, dtype=np.float32, count=1000, offset=ADDR + 8192)
    floats[:] = np.arange(1000, dtype=np.float32) / 7
    back = testbed.run(2, read_bytes, ADDR + 8192, 4000)
    assert back == floats.tobytes()
    # The view keeps the mapping alive after the Node is gone.
    del node, view, floats
    gc.collect()
    assert mem[ADDR : ADDR + len(data)].tobytes() == data
