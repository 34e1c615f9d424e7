//! `netdam.Client`: the library's client of one node, on a runtime of its
//! own, with the GIL released while it waits for the network.

use std::{future::Future, net::Ipv4Addr, time::Duration};

use netdam_common::wire::DEFAULT_PORT;
use netdam_user::{ClientConfig, ClientError};
use pyo3::{exceptions::PyValueError, prelude::*, types::PyBytes};

use crate::{
    arrays::{fill, from_le_bytes, parse_op, vector, with_buffer, with_bytes, writable_buffer},
    errors::client_error,
};

/// A client of the NetDAM node at ``ip`` (UDP port ``port``), from any host
/// that reaches it.
///
/// Every request waits ``timeout_ms`` for its answer and is resent up to
/// ``retries`` times when that is safe (every op here: atomics and
/// accumulate run at most once on the node whatever the resends);
/// transfers are split into requests that fit ``mtu`` (the IP MTU of the
/// path), ``window`` of them in flight. Calls block, with the GIL released.
///
/// Raises ``netdam.TimeoutError`` when the node does not answer, and
/// ``netdam.RefusedError`` when it answers with a status (e.g. ``BAD_KEY``:
/// no region has this key; ``OUT_OF_BOUNDS``: the range leaves the region).
#[pyclass(module = "netdam", frozen)]
pub struct Client {
    node: Ipv4Addr,
    // Dropped before the runtime it was made on.
    inner: netdam_user::Client,
    /// Current-thread: the client's receive task runs while a call waits.
    runtime: tokio::runtime::Runtime,
}

impl Client {
    /// Runs one of the library's calls to completion without the GIL.
    /// (`call` makes the future on the detached thread: the library's
    /// futures need not be Send.)
    fn wait<T: Send, F: Future<Output = Result<T, ClientError>>>(
        &self,
        py: Python<'_>,
        call: impl FnOnce() -> F + Send,
    ) -> PyResult<T> {
        py.detach(|| self.runtime.block_on(call()))
            .map_err(|e| client_error(py, e))
    }
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (ip, port = DEFAULT_PORT, timeout_ms = 200, retries = 10, mtu = 1500, window = 192, streams = 0, afxdp = false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        ip: &str,
        port: u16,
        timeout_ms: u64,
        retries: u32,
        mtu: u32,
        window: usize,
        streams: usize,
        afxdp: bool,
    ) -> PyResult<Client> {
        let node: Ipv4Addr = ip
            .parse()
            .map_err(|_| PyValueError::new_err(format!("ip {ip:?} is not an IPv4 address (e.g. \"198.18.0.1\")")))?;
        if timeout_ms == 0 {
            return Err(PyValueError::new_err(
                "timeout_ms is 0: give the time to wait for each answer, e.g. 200",
            ));
        }
        if !(100..=9216).contains(&mtu) {
            return Err(PyValueError::new_err(format!(
                "mtu {mtu} is not an IP MTU of 100 to 9216 (the path's, e.g. 1500)"
            )));
        }
        if streams > 64 {
            return Err(PyValueError::new_err(format!(
                "streams {streams}: a transfer is striped over 1 to 64 threads (0: one per CPU)"
            )));
        }
        if !(1..1024).contains(&window) {
            return Err(PyValueError::new_err(format!(
                "window {window}: requests in flight are 1 to 1023 (PROTOCOL.md section 7)"
            )));
        }
        let cfg = ClientConfig {
            port,
            timeout: Duration::from_millis(timeout_ms),
            retries,
            window,
            mtu,
            streams,
            afxdp,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| crate::errors::Error::new_err(format!("starting the client's runtime: {e}")))?;
        let inner = py
            .detach(|| runtime.block_on(netdam_user::Client::connect(node, cfg)))
            .map_err(|e| client_error(py, e))?;
        Ok(Client { node, inner, runtime })
    }

    /// A NOP: returns the round-trip time in seconds.
    fn ping(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(self.wait(py, || self.inner.ping())?.as_secs_f64())
    }

    /// Writes ``data`` (bytes, bytearray, memoryview or any C-contiguous
    /// numpy array, as its raw bytes) at ``addr`` of region ``rkey``; returns
    /// when every piece is acknowledged.
    fn write(&self, py: Python<'_>, rkey: u32, addr: u64, data: &Bound<'_, PyAny>) -> PyResult<()> {
        with_buffer(data, "data", |bytes| {
            self.wait(py, || self.inner.write(rkey, addr, bytes, &|_| {}))
        })?
    }

    /// Reads ``n`` bytes at ``addr`` of region ``rkey``.
    fn read<'py>(&self, py: Python<'py>, rkey: u32, addr: u64, n: usize) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.wait(py, || self.inner.read(rkey, addr, n, &|_| {}))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Reads ``len(out)`` bytes (its size in bytes) at ``addr`` of region
    /// ``rkey`` into ``out``, a writable C-contiguous buffer such as a numpy
    /// array: ``c.read_into(key, 0, np.empty(1000, np.float32))``.
    fn read_into(&self, py: Python<'_>, rkey: u32, addr: u64, out: &Bound<'_, PyAny>) -> PyResult<()> {
        let buf = writable_buffer(out, "out")?;
        let n = buf.len_bytes();
        let bytes = self.wait(py, || self.inner.read(rkey, addr, n, &|_| {}))?;
        fill(py, &buf, &bytes);
        Ok(())
    }

    /// FETCH_ADD: adds ``value`` to the 64-bit word at ``addr`` (8-aligned,
    /// wrapping); returns its old value.
    fn fetch_add(&self, py: Python<'_>, rkey: u32, addr: u64, value: u64) -> PyResult<u64> {
        self.wait(py, || self.inner.fetch_add(rkey, addr, value))
    }

    /// CAS: stores ``value`` in the 64-bit word at ``addr`` if it holds
    /// ``expected``; returns its old value (equal to ``expected`` when it swapped).
    fn cas(&self, py: Python<'_>, rkey: u32, addr: u64, expected: u64, value: u64) -> PyResult<u64> {
        self.wait(py, || self.inner.cas(rkey, addr, expected, value))
    }

    /// SWAP: stores ``value`` in the 64-bit word at ``addr``; returns its old value.
    fn swap(&self, py: Python<'_>, rkey: u32, addr: u64, value: u64) -> PyResult<u64> {
        self.wait(py, || self.inner.swap(rkey, addr, value))
    }

    /// ACCUMULATE: ``mem[i] = op(mem[i], values[i])`` for the elements of
    /// ``values`` (a C-contiguous numpy array of int32, uint32, int64, uint64
    /// or float32) at ``addr``; ``op`` is "sum", "min", "max", or on integers
    /// "band", "bor", "bxor". Exact under resends (at most once per request).
    #[pyo3(signature = (rkey, addr, values, op = "sum"))]
    fn accumulate(&self, py: Python<'_>, rkey: u32, addr: u64, values: &Bound<'_, PyAny>, op: &str) -> PyResult<()> {
        let (a, dt) = vector(values, "values")?;
        let alu = parse_op(op, dt)?;
        with_bytes(&a, dt, "values", |bytes| {
            self.wait(py, || self.inner.accumulate(rkey, addr, dt, alu, bytes))
        })
    }

    /// REDUCE: returns ``op(values[i], mem[i])`` for the elements of
    /// ``values`` against memory at ``addr``, as a new array shaped like
    /// ``values``; memory is unchanged. Dtypes and ops as for ``accumulate``.
    #[pyo3(signature = (rkey, addr, values, op = "sum"))]
    fn reduce<'py>(
        &self,
        py: Python<'py>,
        rkey: u32,
        addr: u64,
        values: &Bound<'py, PyAny>,
        op: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (a, dt) = vector(values, "values")?;
        let alu = parse_op(op, dt)?;
        let out = with_bytes(&a, dt, "values", |bytes| {
            self.wait(py, || self.inner.reduce(rkey, addr, dt, alu, bytes))
        })?;
        from_le_bytes(py, dt, &out, &a)
    }

    fn __repr__(&self) -> String {
        let c = self.inner.config();
        format!(
            "netdam.Client({:?}, port={}, timeout_ms={}, retries={}, mtu={}, window={})",
            self.node.to_string(),
            c.port,
            c.timeout.as_millis(),
            c.retries,
            c.mtu,
            c.window
        )
    }
}
