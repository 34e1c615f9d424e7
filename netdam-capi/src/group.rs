//! netdam_group: this host's member of a ring all-reduce, and the
//! all-reduce of caller buffers staged through the group's scratch area
//! (`netdam_user::collective::staged`).

use std::{
    ffi::{c_int, c_void},
    net::Ipv4Addr,
    time::Duration,
};

use netdam_common::wire::DEFAULT_PORT;
use netdam_user::{
    collective::{
        restart_sync_area,
        staged::{self, Scratch},
        Allreduce, Collective, CollectiveConfig, Group,
    },
    controller::LocalNode,
};

use crate::{
    client::or,
    dtype, dtype_op,
    error::{boundary, call, Error},
    handle, handle_ref,
    node::{open, Node},
    required, vector_bytes,
};

/// netdam_group_config.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct netdam_group_config {
    pub port: u16,
    pub rkey: u32,
    pub scratch_addr: u64,
    pub scratch_len: u64,
    pub mtu: u32,
    pub timeout_ms: u32,
    pub retries: u32,
    pub patience_ms: u32,
}

impl netdam_group_config {
    /// The collective's settings, 0s being netdam.h's defaults (`node_mtu` for the MTU).
    fn to_config(self, node_mtu: u32) -> CollectiveConfig {
        let d = CollectiveConfig::default();
        CollectiveConfig {
            mtu: or(self.mtu, node_mtu),
            timeout: or(Duration::from_millis(self.timeout_ms.into()), d.timeout),
            retries: or(self.retries, d.retries),
            patience: or(Duration::from_millis(self.patience_ms.into()), d.patience),
            sync_addr: self.scratch_addr,
            ..d
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn netdam_sync_restart(
    node: *mut Node,
    config: *const netdam_group_config,
    members: usize,
    generation: u32,
) -> c_int {
    call(|| {
        // SAFETY: netdam.h: a node from netdam_node_open, a config.
        let (node, cfg) = unsafe { (handle(node, "node")?, handle_ref(config, "config")?) };
        Ok(restart_sync_area(&node.node, cfg.scratch_addr, members, generation)?)
    })
}

/// netdam_group.
pub struct GroupHandle {
    coll: Collective<LocalNode>,
    scratch: Scratch,
}

#[no_mangle]
pub unsafe extern "C" fn netdam_group_open(
    node: *mut Node,
    members: *const u32,
    n: usize,
    config: *const netdam_group_config,
    out: *mut *mut GroupHandle,
) -> c_int {
    call(|| {
        let out = required(out, "out")?;
        // SAFETY: netdam.h: `out` points at a netdam_group pointer.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: netdam.h: a node from netdam_node_open, a config.
        let (node, cfg) = unsafe { (handle(node, "node")?, handle_ref(config, "config")?) };
        if members.is_null() {
            return Err(Error::null("members"));
        }
        // SAFETY: netdam.h: `members` holds `n` addresses.
        let members: Vec<Ipv4Addr> = unsafe { std::slice::from_raw_parts(members, n) }
            .iter()
            .map(|m| Ipv4Addr::from(*m))
            .collect();
        // The collective owns its node: a second handle on the same pins.
        let own = open(node.node.pin_dir())?;
        let scratch = Scratch {
            rkey: cfg.rkey,
            addr: cfg.scratch_addr,
            len: cfg.scratch_len,
        };
        let group = Group {
            members,
            port: or(cfg.port, DEFAULT_PORT),
        };
        let mem_len = own.memory().len() as u64;
        let coll = Collective::new(own, group, cfg.to_config(node.node.config.mtu))?;
        scratch.check(coll.group().members.len(), mem_len)?;
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(Box::new(GroupHandle { coll, scratch }))) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn netdam_group_close(group: *mut GroupHandle) {
    boundary(
        |_| (),
        || {
            if !group.is_null() {
                // SAFETY: netdam.h: from netdam_group_open, closed once.
                drop(unsafe { Box::from_raw(group) });
            }
            Ok(())
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn netdam_group_rank(group: *const GroupHandle) -> usize {
    // SAFETY: netdam.h: a group from netdam_group_open.
    boundary(|_| 0, || Ok(unsafe { handle_ref(group, "group") }?.coll.rank()))
}

#[no_mangle]
pub unsafe extern "C" fn netdam_group_chunk_elems(group: *const GroupHandle, dtype_code: c_int) -> u64 {
    boundary(
        |_| 0,
        || {
            // SAFETY: as above.
            let g = unsafe { handle_ref(group, "group") }?;
            let op = Allreduce {
                rkey: g.scratch.rkey,
                input_addr: 0,
                output_addr: 0,
                cells_addr: 0,
                count: 1,
                dtype: dtype(dtype_code)?,
                alu: netdam_common::wire::Alu::Add,
            };
            Ok(g.coll.plan(&op)?.chunk_elems.into())
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn netdam_allreduce(
    group: *mut GroupHandle,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: u64,
    dtype_code: c_int,
    op: c_int,
) -> c_int {
    call(|| {
        // SAFETY: as above.
        let g = unsafe { handle(group, "group") }?;
        let (dtype, alu) = dtype_op(dtype_code, op)?;
        let len = vector_bytes(count, dtype)?;
        let in_place = sendbuf.is_null() || sendbuf == recvbuf.cast_const();
        if !in_place && len > 0 && !recvbuf.is_null() {
            let (s, r) = (sendbuf as usize, recvbuf as usize);
            if s < r + len && r < s + len {
                return Err(Error::arg(
                    "sendbuf and recvbuf overlap without being equal: pass the same buffer (or NULL sendbuf) \
                     for in place, or two apart",
                ));
            }
        }
        // SAFETY: netdam.h: recvbuf holds `count` writable elements, sendbuf
        // (unless in place) `count` elements, apart from recvbuf (checked).
        let recv = unsafe { crate::bytes_mut(recvbuf, len, "recvbuf") }?;
        let send = match in_place {
            true => None,
            // SAFETY: as above.
            false => Some(unsafe { crate::bytes(sendbuf, len, "sendbuf") }?),
        };
        staged::allreduce(&mut g.coll, &g.scratch, send, recv, dtype, alu)?;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn netdam_allreduce_at(
    group: *mut GroupHandle,
    input_addr: u64,
    output_addr: u64,
    count: u64,
    dtype_code: c_int,
    op: c_int,
) -> c_int {
    call(|| {
        // SAFETY: as above.
        let g = unsafe { handle(group, "group") }?;
        let (dtype, alu) = dtype_op(dtype_code, op)?;
        if count == 0 {
            return Ok(());
        }
        let mut op = Allreduce {
            rkey: g.scratch.rkey,
            input_addr,
            output_addr,
            cells_addr: 0,
            count,
            dtype,
            alu,
        };
        op.cells_addr = op.cells_after_output();
        g.coll.allreduce(&op)?;
        Ok(())
    })
}
