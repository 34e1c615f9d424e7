"""NetDAM from Python: the client, this host's node memory and the in-network
ring all-reduce on numpy arrays (docs/python.md)."""

from os import PathLike
from typing import Literal, TypeVar

import numpy as np
import numpy.typing as npt

__version__: str
DEFAULT_PORT: int

Op = Literal["sum", "min", "max", "band", "bor", "bxor"]
"""Reduction operators; the bitwise ones (band, bor, bxor) on integer dtypes only."""

Vector = npt.NDArray[np.int32] | npt.NDArray[np.uint32] | npt.NDArray[np.int64] | npt.NDArray[np.uint64] | npt.NDArray[np.float32]
"""A C-contiguous numpy array of a NetDAM dtype, native byte order."""

V = TypeVar("V", bound=np.ndarray)

class Error(Exception):
    """Base of every error NetDAM reports."""

class TimeoutError(Error):
    """No answer in time from a node or a member of the group."""

class RefusedError(Error):
    """A node answered with a status other than OK."""

    status: str
    """The status's name in PROTOCOL.md, e.g. "BAD_KEY"."""
    code: int
    """The status's number, e.g. 4."""

class NodeError(Error):
    """This host's node cannot be opened or used."""

class Node:
    """The NetDAM node served on this host, through the maps its `netdam serve` pinned."""

    def __init__(self, pin_dir: str | PathLike[str] | None = None, *, iface: str | None = None) -> None: ...
    @property
    def ipv4(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def mtu(self) -> int: ...
    @property
    def mem_size(self) -> int: ...
    @property
    def pin_dir(self) -> PathLike[str]: ...
    @property
    def memory(self) -> memoryview:
        """The node's whole NetDAM memory, writable, without a copy (format "B")."""
    def generation(self, rkey: int) -> int:
        """The readiness generation of region `rkey` (0 until raised)."""

class Client:
    """A client of the NetDAM node at `ip`."""

    def __init__(
        self,
        ip: str,
        port: int = 4793,
        timeout_ms: int = 200,
        retries: int = 10,
        mtu: int = 1500,
        window: int = 192,
        streams: int = 0,
        afxdp: bool = False,
    ) -> None:
        """A client of the node at ``ip``. ``write`` and ``read`` stripe a
        large transfer over ``streams`` threads (0: one per CPU, one more
        with ``afxdp``, at most 4). ``afxdp`` takes the answers off the
        kernel's UDP stack through a steering XDP program on this host's
        interface (root; the interface must have no XDP program, so not
        on a host serving a node there; docs/client.md)."""
    def ping(self) -> float:
        """A NOP; the round-trip time in seconds."""
    def write(self, rkey: int, addr: int, data: bytes | bytearray | memoryview | np.ndarray) -> None: ...
    def read(self, rkey: int, addr: int, n: int) -> bytes: ...
    def read_into(self, rkey: int, addr: int, out: bytearray | memoryview | np.ndarray) -> None: ...
    def fetch_add(self, rkey: int, addr: int, value: int) -> int: ...
    def cas(self, rkey: int, addr: int, expected: int, value: int) -> int: ...
    def swap(self, rkey: int, addr: int, value: int) -> int: ...
    def accumulate(self, rkey: int, addr: int, values: Vector, op: Op = "sum") -> None: ...
    def reduce(self, rkey: int, addr: int, values: V, op: Op = "sum") -> V: ...

class Group:
    """This host's member of a group of NetDAM nodes, for the ring all-reduce."""

    def __init__(
        self,
        node: Node,
        members: list[str],
        rkey: int,
        scratch_addr: int,
        scratch_len: int,
        *,
        port: int | None = None,
        mtu: int | None = None,
        timeout_ms: int = 200,
        retries: int = 10,
        patience_ms: int = 30000,
    ) -> None: ...
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def members(self) -> list[str]: ...
    @property
    def mtu(self) -> int: ...
    def chunk_elems(self, dtype: npt.DTypeLike) -> int:
        """Elements per ring chunk E for `dtype` (PROTOCOL.md section 6)."""
    def allreduce(self, send: V, recv: V | None = None, op: Op = "sum") -> V:
        """All-reduces `send` across the group into `recv`, or in place; returns the array holding the result."""
