//! netdam_client: a client of one node. The handle owns a current-thread
//! tokio runtime and blocks on the async `netdam_user::Client` in it.

use std::{
    ffi::{c_char, c_int, c_void},
    future::Future,
    net::Ipv4Addr,
    time::Duration,
};

use netdam_common::wire::DEFAULT_PORT;
use netdam_user::{Client, ClientConfig, ClientError};
use tokio::runtime::Runtime;

use crate::{
    bytes, bytes_mut, c_str, dtype_op,
    error::{boundary, call, Error, Status},
    handle, required, vector_bytes,
};

/// netdam_client_config.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct netdam_client_config {
    pub port: u16,
    pub timeout_ms: u32,
    pub retries: u32,
    pub mtu: u32,
    pub window: u32,
    pub streams: u32,
    pub afxdp: u32,
}

/// `v`, or `default` when it is 0 (netdam.h's "0: the default").
pub(crate) fn or<T: PartialEq + Default>(v: T, default: T) -> T {
    if v == T::default() {
        default
    } else {
        v
    }
}

impl netdam_client_config {
    fn to_config(self) -> ClientConfig {
        let d = ClientConfig::default();
        ClientConfig {
            port: or(self.port, DEFAULT_PORT),
            timeout: or(Duration::from_millis(self.timeout_ms.into()), d.timeout),
            retries: or(self.retries, d.retries),
            mtu: or(self.mtu, d.mtu),
            window: or(self.window as usize, d.window),
            streams: self.streams as usize,
            afxdp: self.afxdp != 0,
        }
    }
}

/// netdam_client. Fields drop in order: the client (which stops its
/// receiver task) before the runtime it runs in.
pub struct ClientHandle {
    client: Client,
    rt: Runtime,
}

impl ClientHandle {
    fn run<T>(&self, f: impl Future<Output = Result<T, ClientError>>) -> Result<T, Error> {
        Ok(self.rt.block_on(f)?)
    }
}

#[no_mangle]
pub unsafe extern "C" fn netdam_client_open(
    node_ip: *const c_char,
    config: *const netdam_client_config,
    out: *mut *mut ClientHandle,
) -> c_int {
    call(|| {
        let out = required(out, "out")?;
        // SAFETY: netdam.h: `out` points at a netdam_client pointer.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: netdam.h: a NUL-terminated string.
        let text = unsafe { c_str(node_ip, "node_ip") }?;
        let ip: Ipv4Addr = text
            .parse()
            .map_err(|_| Error::arg(format!("node_ip {text:?} is not an IPv4 address, e.g. 198.18.0.2")))?;
        // SAFETY: netdam.h: NULL or a netdam_client_config.
        let cfg = unsafe { config.as_ref() }.copied().unwrap_or_default().to_config();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::new(Status::Io, format!("starting the client's tokio runtime: {e}")))?;
        let client = rt.block_on(Client::connect(ip, cfg))?;
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(Box::new(ClientHandle { client, rt }))) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn netdam_client_close(client: *mut ClientHandle) {
    boundary(
        |_| (),
        || {
            if !client.is_null() {
                // SAFETY: netdam.h: from netdam_client_open, closed once.
                drop(unsafe { Box::from_raw(client) });
            }
            Ok(())
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn netdam_ping(client: *mut ClientHandle, rtt_ns: *mut u64) -> c_int {
    call(|| {
        // SAFETY: netdam.h: a client from netdam_client_open.
        let c = unsafe { handle(client, "client") }?;
        let rtt_ns = required(rtt_ns, "rtt_ns")?;
        let rtt = c.run(c.client.ping())?;
        // SAFETY: netdam.h: points at a uint64_t.
        unsafe { rtt_ns.write(rtt.as_nanos().try_into().unwrap_or(u64::MAX)) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn netdam_write(
    client: *mut ClientHandle,
    rkey: u32,
    addr: u64,
    data: *const c_void,
    len: usize,
) -> c_int {
    call(|| {
        // SAFETY: as above; `data` holds `len` bytes.
        let (c, data) = unsafe { (handle(client, "client")?, bytes(data, len, "data")?) };
        if data.is_empty() {
            return Ok(());
        }
        c.run(c.client.write(rkey, addr, data, &|_| {}))
    })
}

#[no_mangle]
pub unsafe extern "C" fn netdam_read(
    client: *mut ClientHandle,
    rkey: u32,
    addr: u64,
    out: *mut c_void,
    len: usize,
) -> c_int {
    call(|| {
        // SAFETY: as above; `out` holds `len` writable bytes.
        let (c, out) = unsafe { (handle(client, "client")?, bytes_mut(out, len, "out")?) };
        if out.is_empty() {
            return Ok(());
        }
        let data = c.run(c.client.read(rkey, addr, len, &|_| {}))?;
        out.copy_from_slice(&data);
        Ok(())
    })
}

/// An atomic whose old value goes to `old`.
unsafe fn atomic(
    client: *mut ClientHandle,
    old: *mut u64,
    op: impl AsyncFnOnce(&Client) -> Result<u64, ClientError>,
) -> c_int {
    call(|| {
        // SAFETY: as above.
        let c = unsafe { handle(client, "client") }?;
        let old = required(old, "old")?;
        let v = c.run(op(&c.client))?;
        // SAFETY: netdam.h: points at a uint64_t.
        unsafe { old.write(v) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn netdam_fetch_add(
    client: *mut ClientHandle,
    rkey: u32,
    addr: u64,
    add: u64,
    old: *mut u64,
) -> c_int {
    // SAFETY: netdam.h's contract, passed on.
    unsafe { atomic(client, old, async |c| c.fetch_add(rkey, addr, add).await) }
}

#[no_mangle]
pub unsafe extern "C" fn netdam_cas(
    client: *mut ClientHandle,
    rkey: u32,
    addr: u64,
    expected: u64,
    desired: u64,
    old: *mut u64,
) -> c_int {
    // SAFETY: as above.
    unsafe { atomic(client, old, async |c| c.cas(rkey, addr, expected, desired).await) }
}

#[no_mangle]
pub unsafe extern "C" fn netdam_swap(
    client: *mut ClientHandle,
    rkey: u32,
    addr: u64,
    desired: u64,
    old: *mut u64,
) -> c_int {
    // SAFETY: as above.
    unsafe { atomic(client, old, async |c| c.swap(rkey, addr, desired).await) }
}

#[no_mangle]
pub unsafe extern "C" fn netdam_accumulate(
    client: *mut ClientHandle,
    rkey: u32,
    addr: u64,
    dtype: c_int,
    op: c_int,
    values: *const c_void,
    count: u64,
) -> c_int {
    call(|| {
        // SAFETY: as above.
        let c = unsafe { handle(client, "client") }?;
        let (dtype, alu) = dtype_op(dtype, op)?;
        // SAFETY: netdam.h: `values` holds `count` elements.
        let v = unsafe { bytes(values, vector_bytes(count, dtype)?, "values") }?;
        if v.is_empty() {
            return Ok(());
        }
        c.run(c.client.accumulate(rkey, addr, dtype, alu, v))
    })
}

#[no_mangle]
pub unsafe extern "C" fn netdam_reduce(
    client: *mut ClientHandle,
    rkey: u32,
    addr: u64,
    dtype: c_int,
    op: c_int,
    values: *mut c_void,
    count: u64,
) -> c_int {
    call(|| {
        // SAFETY: as above.
        let c = unsafe { handle(client, "client") }?;
        let (dtype, alu) = dtype_op(dtype, op)?;
        // SAFETY: netdam.h: `values` holds `count` writable elements.
        let v = unsafe { bytes_mut(values, vector_bytes(count, dtype)?, "values") }?;
        if v.is_empty() {
            return Ok(());
        }
        let reduced = c.run(c.client.reduce(rkey, addr, dtype, alu, v))?;
        v.copy_from_slice(&reduced);
        Ok(())
    })
}
