//! `netdam.Node`: the node served on this host, through its pinned maps.

use std::{ffi::c_int, path::PathBuf};

use netdam_user::controller::{pins, LocalNode};
use pyo3::{exceptions::PyValueError, ffi, prelude::*, types::PyMemoryView};

use crate::errors::{node_error, NodeError};

/// The NetDAM node served on this host by ``netdam serve``, reached through
/// the maps it pinned: no network, no copy.
///
/// ``Node(pin_dir)`` opens the node whose maps are pinned in ``pin_dir``
/// (``netdam serve --pin-dir``); ``Node(iface="eth0")`` the one serving
/// ``eth0`` with the default pin directory (``/sys/fs/bpf/netdam/eth0``).
/// Needs root (or CAP_BPF). Raises ``netdam.NodeError`` when nothing is
/// served there.
///
/// ``memory`` is a writable, zero-copy view of the node's whole NetDAM
/// memory (the same pages the XDP program reads and writes); it keeps the
/// mapping alive as long as it exists. The data path changes these bytes
/// whenever a request arrives: read what a client wrote after its WRITE was
/// answered.
///
/// Example::
///
///     node = netdam.Node("/sys/fs/bpf/netdam/eth0")
///     mem = np.frombuffer(node.memory, dtype=np.uint8)
///     mem[:4] = [1, 2, 3, 4]          # a READ of address 0 now returns them
#[pyclass(module = "netdam", frozen)]
pub struct Node {
    pub(crate) local: LocalNode,
}

#[pymethods]
impl Node {
    #[new]
    #[pyo3(signature = (pin_dir = None, *, iface = None))]
    fn new(py: Python<'_>, pin_dir: Option<PathBuf>, iface: Option<String>) -> PyResult<Node> {
        let dir = match (pin_dir, iface) {
            (Some(d), None) => d,
            (None, Some(i)) => pins::default_dir(&i),
            (Some(_), Some(_)) => return Err(PyValueError::new_err("give the node's pin_dir or its iface, not both")),
            (None, None) => {
                return Err(PyValueError::new_err(
                    "give the node's pin_dir (its `netdam serve --pin-dir`, e.g. \"/sys/fs/bpf/netdam/eth0\") \
                     or iface=\"eth0\" for the default pin directory of that interface",
                ))
            }
        };
        let local = py
            .detach(|| LocalNode::open(&dir))
            .map_err(|e| NodeError::new_err(format!("opening the node pinned in {}: {e}", dir.display())))?;
        Ok(Node { local })
    }

    /// The node's IPv4 address, as a string.
    #[getter]
    fn ipv4(&self) -> String {
        self.local.ipv4().to_string()
    }

    /// The node's UDP port P.
    #[getter]
    fn port(&self) -> u16 {
        self.local.config.port
    }

    /// IP MTU of the node's interface: no answer is larger.
    #[getter]
    fn mtu(&self) -> u32 {
        self.local.config.mtu
    }

    /// Bytes of NetDAM memory.
    #[getter]
    fn mem_size(&self) -> u64 {
        self.local.config.mem_size
    }

    /// Where the node's maps are pinned.
    #[getter]
    fn pin_dir(&self) -> PathBuf {
        self.local.pin_dir().to_path_buf()
    }

    /// A writable ``memoryview`` (format ``"B"``) of the node's whole NetDAM
    /// memory, without a copy: ``numpy.frombuffer(node.memory, np.uint8)``
    /// or ``np.frombuffer(node.memory, np.float32, count, offset)``.
    #[getter]
    fn memory<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyMemoryView>> {
        PyMemoryView::from(slf.as_any())
    }

    /// The readiness generation of region ``rkey`` (0 until something raised it).
    fn generation(&self, rkey: u32) -> PyResult<u32> {
        self.local.generation(rkey).map_err(node_error)
    }

    fn __repr__(&self) -> String {
        format!(
            "netdam.Node(ipv4={:?}, port={}, mtu={}, mem_size={}, pin_dir={:?})",
            self.ipv4(),
            self.port(),
            self.mtu(),
            self.mem_size(),
            self.local.pin_dir().display().to_string()
        )
    }

    /// The buffer protocol behind ``memory``: the mapping itself, writable.
    /// The view holds a reference to this Node, so the mapping outlives it.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let memory = slf.get().local.memory();
        let ptr = memory.range_ptr(0, memory.len()).map_err(node_error)?;
        // SAFETY: `view` is the caller's Py_buffer; the pointer and length are
        // the whole shared, PROT_READ | PROT_WRITE mapping, which lives as
        // long as `slf` (the view's owner, referenced by the view). Python
        // code touches it only through the buffer, never a Rust reference.
        let r = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                ptr.cast_mut().cast(),
                memory.len() as ffi::Py_ssize_t,
                0,
                flags,
            )
        };
        if r < 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }
}
