//! The HLS port's C engine (fpga-port/src, compiled in by build.rs) behind
//! a safe wrapper, configured like a `NodeSpec`. Its tables are static in
//! C, so one engine exists per process: `CEngine::new` takes a lock that the
//! engine holds until dropped.

use std::{
    net::Ipv4Addr,
    sync::{Mutex, MutexGuard},
};

use netdam_common::{chain::Readiness, model::Action};
use netdam_user::NodeSpec;

#[repr(C)]
struct Config {
    mac: [u8; 6],
    ip: u32,
    port: u16,
    mtu: u32,
    mem_size: u64,
    verify_csum: bool,
    receiver: bool,
    window_sources: u32,
    window_per_source: u32,
}

/// NETDAM_FRAME_MAX of fpga-port/include/netdam.h.
const FRAME_MAX: usize = 9600;

unsafe extern "C" {
    fn netdam_reset(cfg: *const Config);
    fn netdam_add_region(rkey: u32, base: u64, size: u64, perms: u32) -> i32;
    fn netdam_add_peer(ip: u32) -> i32;
    fn netdam_add_nexthop(ip: u32, mac: *const u8) -> i32;
    fn netdam_set_readiness(rkey: u32, generation: u32, call: u32) -> i32;
    fn netdam_counter(index: u32) -> u64;
    fn netdam_top(input: *const u8, in_len: u32, out: *mut u8, out_len: *mut u32, mem: *mut u8) -> u32;
}

static ENGINE: Mutex<()> = Mutex::new(());

pub struct CEngine {
    _only: MutexGuard<'static, ()>,
    pub mem: Vec<u8>,
    input: Vec<u8>,
    out: Vec<u8>,
}

impl CEngine {
    /// An engine configured as `spec`, with next hops and each region's
    /// readiness (generation and call word, by rkey).
    pub fn new(spec: &NodeSpec, neighbours: &[(Ipv4Addr, [u8; 6])], readiness: &[(u32, Readiness)]) -> CEngine {
        let only = ENGINE.lock().unwrap_or_else(|e| e.into_inner());
        let cfg = Config {
            mac: spec.mac,
            ip: u32::from(spec.ipv4),
            port: spec.port,
            mtu: spec.mtu,
            mem_size: spec.mem_size,
            verify_csum: spec.verify_csum,
            receiver: false,
            window_sources: spec.window_sources,
            window_per_source: spec.window_per_source,
        };
        // SAFETY: a live config; the tables are the engine's own, used under the lock.
        unsafe {
            netdam_reset(&cfg);
            for (rkey, r) in &spec.regions {
                assert_eq!(netdam_add_region(*rkey, r.base, r.size, r.perms), 0, "region {rkey:#x}");
            }
            for p in &spec.peers {
                assert_eq!(netdam_add_peer(u32::from(*p)), 0, "peer {p}");
            }
            for (ip, mac) in neighbours {
                assert_eq!(netdam_add_nexthop(u32::from(*ip), mac.as_ptr()), 0, "next hop {ip}");
            }
            for (rkey, r) in readiness {
                assert_eq!(
                    netdam_set_readiness(*rkey, r.generation, r.call),
                    0,
                    "readiness of {rkey:#x}"
                );
            }
        }
        CEngine {
            _only: only,
            mem: vec![0; spec.mem_size as usize],
            input: vec![0; FRAME_MAX],
            out: vec![0; FRAME_MAX],
        }
    }

    /// One frame through `netdam_top`: the verdict and the frame after it
    /// (the answer, the forwarded or handed-over frame, or the input when
    /// passed untouched), as the model reports them.
    pub fn process(&mut self, frame: &[u8]) -> (Action, Vec<u8>) {
        assert!(frame.len() <= FRAME_MAX, "a {}-byte frame", frame.len());
        self.input[..frame.len()].copy_from_slice(frame);
        let mut out_len = 0u32;
        // SAFETY: buffers of FRAME_MAX bytes and memory of mem_size bytes, as the engine expects.
        let v = unsafe {
            netdam_top(
                self.input.as_ptr(),
                frame.len() as u32,
                self.out.as_mut_ptr(),
                &mut out_len,
                self.mem.as_mut_ptr(),
            )
        };
        let action = match v {
            0 => Action::Pass,
            1 => Action::Drop,
            2 => Action::Tx,
            3 => Action::Redirect,
            other => panic!("the C engine returned verdict {other}"),
        };
        let after = if action == Action::Pass && out_len == 0 {
            frame.to_vec()
        } else {
            self.out[..out_len as usize].to_vec()
        };
        (action, after)
    }

    /// The engine's counters, with the XDP program's indices.
    pub fn counters(&self) -> Vec<u64> {
        // SAFETY: a read of the engine's counter array under the lock.
        (0..netdam_common::counters::COUNTER_SLOTS)
            .map(|i| unsafe { netdam_counter(i) })
            .collect()
    }
}
