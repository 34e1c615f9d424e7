//! AF_XDP: the receive side of the node's isolated I/O memory (PROTOCOL.md
//! sections 3 and 9). Plain Rust over the kernel's socket interface (libc);
//! aya only loads the program and holds the socket map.
//!
//! - `umem`: the frame area, hugepage-backed when hugepages are available.
//! - `ring`: the four single-producer single-consumer rings shared with the kernel.
//! - `socket`: one socket bound to one receive queue, its fill ring kept full.
//! - `endpoint`: the host API: a socket per queue of the node's interface,
//!   zero-copy views of delivered frames, NetDAM memory read in place.

mod endpoint;
mod ring;
mod socket;
mod umem;

pub use endpoint::{Delivery, Endpoint, EndpointConfig, HeldFrame, Received};
pub(crate) use socket::UmemView;
pub use socket::{Direction, SharedRx, XskSocket, XskStats};
pub use umem::{Backing, Umem};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum XskError {
    #[error(
        "this kernel has no AF_XDP sockets (socket(AF_XDP) failed: {0}); AF_XDP needs Linux 4.18 or later \
         built with CONFIG_XDP_SOCKETS=y"
    )]
    Unsupported(#[source] std::io::Error),
    #[error("AF_XDP needs root (or CAP_NET_RAW and CAP_NET_ADMIN): {0}")]
    NotPrivileged(#[source] std::io::Error),
    #[error("{what}: {source}")]
    Sys {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the node pinned in {dir} has no socket map {map} (it was loaded by an older netdam: restart `netdam serve`)"
    )]
    NoSocketMap { dir: std::path::PathBuf, map: &'static str },
    #[error(
        "{iface} has {queues} receive queues but the node's socket map has {slots} slots: it was loaded \
         before the queues were added; restart `netdam serve` (it sizes the map from the interface)"
    )]
    QueuesPastMap { iface: String, queues: u32, slots: u32 },
    #[error("{0}")]
    Controller(#[from] crate::controller::ControllerError),
    #[error("socket map: {0}")]
    Map(#[from] aya::maps::MapError),
    #[error("--frames {0} is not valid: a power of two from 64 to 65536 (e.g. 4096)")]
    Frames(u32),
}

impl XskError {
    /// A failed system call, named.
    pub(crate) fn last(what: impl Into<String>) -> XskError {
        XskError::Sys {
            what: what.into(),
            source: std::io::Error::last_os_error(),
        }
    }
}
