//! netdam_node: the node served on this host, through its pinned maps.

use std::{
    ffi::{c_char, c_int},
    path::PathBuf,
};

use netdam_user::controller::LocalNode;

use crate::{
    c_str,
    error::{boundary, call, Error},
    handle, handle_ref, required,
    settings::pin_dir_from_env,
};

/// netdam_node.
pub struct Node {
    pub(crate) node: LocalNode,
}

/// The directory `pin_dir` names, or the environment's when it is NULL.
unsafe fn pin_dir(pin_dir: *const c_char) -> Result<PathBuf, Error> {
    if pin_dir.is_null() {
        return pin_dir_from_env(&|v| std::env::var(v).ok())
            .map_err(Error::from)?
            .ok_or_else(|| {
                Error::arg(
                    "pin_dir is NULL and neither NETDAM_PIN_DIR nor NETDAM_IFACE is set: pass the node's pin \
                     directory (`netdam serve --pin-dir`), or set one of them",
                )
            });
    }
    // SAFETY: netdam.h: a NUL-terminated string.
    match unsafe { c_str(pin_dir, "pin_dir") }? {
        "" => Err(Error::arg(
            "pin_dir is \"\": pass the node's pin directory, or NULL for $NETDAM_PIN_DIR or $NETDAM_IFACE",
        )),
        d => Ok(PathBuf::from(d)),
    }
}

/// Opens the node pinned at `dir`, failing with a message that names it.
pub(crate) fn open(dir: &std::path::Path) -> Result<LocalNode, Error> {
    LocalNode::open(dir).map_err(|e| Error::from(e).context(format_args!("the node pinned in {}", dir.display())))
}

#[no_mangle]
pub unsafe extern "C" fn netdam_node_open(pin_dir_arg: *const c_char, out: *mut *mut Node) -> c_int {
    call(|| {
        let out = required(out, "out")?;
        // SAFETY: netdam.h: `out` points at a netdam_node pointer.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: netdam.h: NULL or a NUL-terminated string.
        let dir = unsafe { pin_dir(pin_dir_arg) }?;
        let node = Box::new(Node { node: open(&dir)? });
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(node)) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn netdam_node_close(node: *mut Node) {
    boundary(
        |_| (),
        || {
            if !node.is_null() {
                // SAFETY: netdam.h: from netdam_node_open, closed once.
                drop(unsafe { Box::from_raw(node) });
            }
            Ok(())
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn netdam_node_ipv4(node: *const Node) -> u32 {
    // SAFETY: netdam.h: a node from netdam_node_open.
    boundary(
        |_| 0,
        || Ok(u32::from(unsafe { handle_ref(node, "node") }?.node.ipv4())),
    )
}

#[no_mangle]
pub unsafe extern "C" fn netdam_node_mtu(node: *const Node) -> u32 {
    // SAFETY: as above.
    boundary(|_| 0, || Ok(unsafe { handle_ref(node, "node") }?.node.config.mtu))
}

#[no_mangle]
pub unsafe extern "C" fn netdam_node_memory(node: *mut Node, base: *mut *mut u8, len: *mut u64) -> c_int {
    call(|| {
        // SAFETY: as above.
        let node = unsafe { handle(node, "node") }?;
        let (base, len) = (required(base, "base")?, required(len, "len")?);
        let memory = node.node.memory();
        // The caller reads and writes the mapping as shared memory that the
        // data path changes too (netdam.h); the library never makes a Rust
        // reference into it.
        let p = memory.range_ptr(0, memory.len())?.cast_mut();
        // SAFETY: netdam.h: both point at storage of their type.
        unsafe {
            base.write(p);
            len.write(memory.len() as u64);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn netdam_node_generation(node: *mut Node, rkey: u32, generation: *mut u32) -> c_int {
    call(|| {
        // SAFETY: as above.
        let node = unsafe { handle(node, "node") }?;
        let generation = required(generation, "generation")?;
        let g = node.node.generation(rkey)?;
        // SAFETY: netdam.h: points at a uint32_t.
        unsafe { generation.write(g) };
        Ok(())
    })
}
