//! The `netdam` Python module: the Rust library (`netdam-user`) wrapped
//! with PyO3, not the C API. Built by maturin (`netdam-py/pyproject.toml`);
//! docs/python.md is its guide.

mod arrays;
mod client;
mod errors;
mod group;
mod node;

// numpy's memory goes to the wire as it is: the wire's vectors are little-endian.
#[cfg(not(target_endian = "little"))]
compile_error!("the netdam module hands numpy's memory to the wire as is, which needs a little-endian host");

use pyo3::prelude::*;

/// NetDAM from Python: memory and a small ALU on the network side of a host,
/// served by `netdam serve` (XDP), reached over UDP.
///
/// Classes:
///
/// - ``Node(pin_dir=None, *, iface=None)``: the node served on *this* host,
///   through the maps its ``netdam serve`` pinned. ``Node.memory`` is a
///   writable, zero-copy ``memoryview`` of its NetDAM memory
///   (``numpy.frombuffer(node.memory, numpy.uint8)``): what a remote WRITE
///   puts there is visible at once, and what you store there a remote READ
///   gets.
/// - ``Client(ip, port=4793, timeout_ms=200, retries=10, mtu=1500)``: a client
///   of one node anywhere on the network: ``ping``, ``write``, ``read``,
///   ``read_into``, ``fetch_add``, ``cas``, ``swap``, ``accumulate`` and
///   ``reduce`` on numpy arrays (int32, uint32, int64, uint64, float32).
/// - ``Group(node, members, rkey, scratch_addr, scratch_len, ...)``: this
///   host's member of a group of nodes; ``Group.allreduce(send, recv=None,
///   op="sum")`` is the ring all-reduce of a numpy array that the nodes'
///   XDP data paths do (PROTOCOL.md section 6), bit-exact with the ring's
///   defined order. One process per member, like MPI ranks.
///
/// Errors: every failure the network or a node reports is a ``netdam.Error``:
/// ``netdam.TimeoutError`` (no answer in time), ``netdam.RefusedError`` (the
/// node answered with a status: ``.status`` is its name, e.g. ``"BAD_KEY"``,
/// ``.code`` its number), ``netdam.NodeError`` (this host's node cannot be
/// opened or used). Bad arguments raise ``ValueError`` or ``TypeError``.
/// Messages say what happened and what to do.
///
/// Example (on a host of the network, with a node at 198.18.0.1 serving
/// region 0x1234 with ``--region 0x1234:0:64MiB:rwam``)::
///
///     import numpy as np, netdam
///     c = netdam.Client("198.18.0.1")
///     c.write(0x1234, 0, np.arange(1000, dtype=np.float32))
///     c.accumulate(0x1234, 0, np.ones(1000, np.float32), "sum")
///     back = np.frombuffer(c.read(0x1234, 0, 4000), np.float32)
#[pymodule]
fn netdam(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULT_PORT", netdam_common::wire::DEFAULT_PORT)?;
    m.add_class::<node::Node>()?;
    m.add_class::<client::Client>()?;
    m.add_class::<group::Group>()?;
    errors::register(m)
}
