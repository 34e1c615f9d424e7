//! `netdam.Group`: this host's member of a group, and the in-network ring
//! all-reduce of numpy arrays through a scratch area of its node's memory
//! (`netdam_user::collective::staged`).

use std::{net::Ipv4Addr, sync::Mutex, time::Duration};

use netdam_common::wire::{Status, DEFAULT_PORT};
use netdam_user::{
    collective::{
        ring::RingPlan,
        staged::{self, Scratch, StagedError},
        Collective, CollectiveConfig, CollectiveError,
    },
    controller::LocalNode,
};
use numpy::{PyArrayDescr, PyUntypedArrayMethods};
use pyo3::{
    exceptions::{PyTypeError, PyValueError},
    prelude::*,
};

use crate::{
    arrays::{parse_op, vector, wire_dtype, with_bytes, with_bytes_mut, DTYPES},
    errors::{node_error, refused, Error, NodeError, TimeoutError},
    node::Node,
};

/// This host's member of a group of NetDAM nodes, for the ring all-reduce
/// that the nodes' data paths do (PROTOCOL.md section 6): no host CPU
/// touches an intermediate hop.
///
/// ``node`` is this host's ``netdam.Node``; ``members`` the members' IPv4
/// addresses in group order (2 to 8; the same list, in the same order, at
/// every member), ``node.ipv4`` among them; the rank is its place there.
/// Every member runs this process beside its own ``netdam serve``.
///
/// ``scratch_addr`` and ``scratch_len`` give a scratch area of every
/// member's memory, inside region ``rkey`` with READ, WRITE and ATOMIC
/// (``rwa``), 8-aligned, the same at every member: the group's sync area,
/// then an input half and an output half. An array larger than a half is
/// reduced in pieces (each a whole number of ring rounds, so the result is
/// the same as one ring over the whole array, bit for bit).
///
/// ``mtu`` (default: the node's) fixes the ring's chunking and must be the
/// same at every member; ``timeout_ms`` and ``retries`` apply to each
/// chunk; ``patience_ms`` is how long to wait for the other members to
/// start and to finish.
///
/// Example (the same program on 198.18.0.1, .2 and .3)::
///
///     node = netdam.Node("/sys/fs/bpf/netdam/eth0")
///     g = netdam.Group(node, ["198.18.0.1", "198.18.0.2", "198.18.0.3"],
///                      rkey=0x1234, scratch_addr=0, scratch_len=16 << 20)
///     x = np.full(1 << 20, g.rank, dtype=np.float32)
///     g.allreduce(x)                  # in place: x is now 0 + 1 + 2 everywhere
#[pyclass(module = "netdam", frozen)]
pub struct Group {
    /// Locked only without the GIL: one all-reduce at a time, and a thread
    /// waiting for the lock never holds up the one that has it.
    collective: Mutex<Collective<LocalNode>>,
    scratch: Scratch,
    rank: usize,
    members: Vec<Ipv4Addr>,
    mtu: u32,
}

#[pymethods]
impl Group {
    #[new]
    #[pyo3(signature = (
        node, members, rkey, scratch_addr, scratch_len, *,
        port = None, mtu = None, timeout_ms = 200, retries = 10, patience_ms = 30_000
    ))]
    #[allow(clippy::too_many_arguments)] // the Python signature, keywords
    fn new(
        py: Python<'_>,
        node: &Bound<'_, Node>,
        members: Vec<String>,
        rkey: u32,
        scratch_addr: u64,
        scratch_len: u64,
        port: Option<u16>,
        mtu: Option<u32>,
        timeout_ms: u64,
        retries: u32,
        patience_ms: u64,
    ) -> PyResult<Group> {
        let members = members
            .iter()
            .map(|m| {
                m.parse::<Ipv4Addr>().map_err(|_| {
                    PyValueError::new_err(format!("member {m:?} is not an IPv4 address (e.g. \"198.18.0.1\")"))
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        if timeout_ms == 0 {
            return Err(PyValueError::new_err(
                "timeout_ms is 0: give the time to wait for each chunk's answer, e.g. 200",
            ));
        }
        let node = &node.get().local;
        let mtu = mtu.unwrap_or(node.config.mtu);
        if !(100..=9216).contains(&mtu) {
            return Err(PyValueError::new_err(format!(
                "mtu {mtu} is not an IP MTU of 100 to 9216 (every member's path MTU, e.g. 1500)"
            )));
        }
        // A member of its own: the collective owns its node, the Node stays the caller's.
        let pin_dir = node.pin_dir().to_path_buf();
        let local = py
            .detach(|| LocalNode::open(&pin_dir))
            .map_err(|e| NodeError::new_err(format!("opening the node pinned in {}: {e}", pin_dir.display())))?;
        let cfg = CollectiveConfig {
            mtu,
            timeout: Duration::from_millis(timeout_ms),
            retries,
            patience: Duration::from_millis(patience_ms),
            sync_addr: scratch_addr,
            ..CollectiveConfig::default()
        };
        let group = netdam_user::collective::Group {
            members,
            port: port.unwrap_or(DEFAULT_PORT),
        };
        let collective = Collective::new(local, group, cfg).map_err(|e| collective_error(py, e))?;
        let scratch = Scratch {
            rkey,
            addr: scratch_addr,
            len: scratch_len,
        };
        // Misplaced or without room for the parts: said now, not at the first all-reduce.
        scratch
            .check(collective.group().members.len(), node.config.mem_size)
            .map_err(|e| staged_error(py, e))?;
        Ok(Group {
            rank: collective.rank(),
            members: collective.group().members.clone(),
            mtu,
            collective: Mutex::new(collective),
            scratch,
        })
    }

    /// This member's place in ``members`` (0-based).
    #[getter]
    fn rank(&self) -> usize {
        self.rank
    }

    /// Members of the group.
    #[getter]
    fn size(&self) -> usize {
        self.members.len()
    }

    /// The members' IPv4 addresses, in group order.
    #[getter]
    fn members(&self) -> Vec<String> {
        self.members.iter().map(Ipv4Addr::to_string).collect()
    }

    /// The IP MTU that fixes the ring's chunking.
    #[getter]
    fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Elements per ring chunk E for elements of ``dtype`` (anything
    /// ``numpy.dtype`` takes): floor((mtu - 60 - 24 - 16 (size - 1)) / 8) * 8 / width,
    /// whole 8-byte words (PROTOCOL.md, version 2). Chunk k (elements kE to (k+1)E - 1) is
    /// started by member k mod size, and its elements are folded in from
    /// that member on: ((x_o + x_(o+1)) + ...) + x_(o+size-1).
    fn chunk_elems(&self, dtype: &Bound<'_, PyAny>) -> PyResult<u32> {
        let descr = PyArrayDescr::new(dtype.py(), dtype)?;
        let dt = wire_dtype(&descr)
            .ok_or_else(|| PyTypeError::new_err(format!("dtype {descr}: the all-reduce takes {DTYPES}")))?;
        RingPlan::new(self.size(), dt, 1, self.mtu)
            .map(|plan| plan.chunk_elems)
            .ok_or_else(|| {
                let e = CollectiveError::Mtu {
                    mtu: self.mtu,
                    dtype: dt.name(),
                    members: self.size(),
                };
                PyValueError::new_err(e.to_string())
            })
    }

    /// All-reduces ``send`` (a C-contiguous numpy array of int32, uint32,
    /// int64, uint64 or float32) with ``op`` ("sum", "min", "max", or on
    /// integers "band", "bor", "bxor") across the group; every member calls
    /// it with the same shape, dtype and op. The result goes to ``recv``
    /// (same dtype and size as ``send``, not overlapping it), or into
    /// ``send`` itself when ``recv`` is None or ``send``; returns the array
    /// holding it. Raises ``netdam.TimeoutError`` when members do not
    /// answer or finish within the timeouts and ``patience_ms``.
    #[pyo3(signature = (send, recv = None, op = "sum"))]
    fn allreduce<'py>(
        &self,
        py: Python<'py>,
        send: &Bound<'py, PyAny>,
        recv: Option<&Bound<'py, PyAny>>,
        op: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (s, dt) = vector(send, "send")?;
        let alu = parse_op(op, dt)?;
        let run = |send: Option<&[u8]>, recv: &mut [u8]| {
            py.detach(|| {
                let mut collective = self.collective.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                staged::allreduce(&mut collective, &self.scratch, send, recv, dt, alu)
            })
            .map(drop)
            .map_err(|e| staged_error(py, e))
        };
        match recv.filter(|r| !r.is(send)) {
            None => {
                with_bytes_mut(&s, dt, "send", |bytes| run(None, bytes))?;
                Ok(send.clone())
            }
            Some(r_obj) => {
                let (r, rdt) = vector(r_obj, "recv")?;
                if rdt != dt {
                    return Err(PyTypeError::new_err(format!(
                        "recv has dtype {} and send {}: they must be the same",
                        r.dtype(),
                        s.dtype()
                    )));
                }
                if r.len() != s.len() {
                    return Err(PyValueError::new_err(format!(
                        "recv holds {} elements and send {}: they must be the same",
                        r.len(),
                        s.len()
                    )));
                }
                with_bytes(&s, dt, "send", |sb| {
                    with_bytes_mut(&r, dt, "recv", |rb| run(Some(sb), rb))
                })?;
                Ok(r_obj.clone())
            }
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "netdam.Group(rank={}, members={:?}, rkey={:#x}, scratch_addr={:#x}, scratch_len={}, mtu={})",
            self.rank(),
            self.members(),
            self.scratch.rkey,
            self.scratch.addr,
            self.scratch.len,
            self.mtu()
        )
    }
}

fn collective_error(py: Python<'_>, e: CollectiveError) -> PyErr {
    let message = e.to_string();
    match e {
        CollectiveError::GroupSize(_)
        | CollectiveError::Duplicate(_)
        | CollectiveError::NotMember { .. }
        | CollectiveError::Layout(_)
        | CollectiveError::Mtu { .. } => PyValueError::new_err(message),
        CollectiveError::Timeout { .. } | CollectiveError::NotReady { .. } | CollectiveError::Incomplete { .. } => {
            TimeoutError::new_err(message)
        }
        CollectiveError::Refused { status, .. } => refused(py, message, status),
        CollectiveError::Mismatch { .. } => refused(py, message, Status::Mismatch),
        CollectiveError::PeerFailed { .. } => refused(py, message, Status::Stale),
        CollectiveError::Node(e) => node_error(e),
        CollectiveError::Stale { .. } | CollectiveError::Io(..) => Error::new_err(message),
    }
}

fn staged_error(py: Python<'_>, e: StagedError) -> PyErr {
    match e {
        StagedError::Collective(c) => collective_error(py, c),
        other => PyValueError::new_err(other.to_string()),
    }
}
