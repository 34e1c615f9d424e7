//! Wire types and pure protocol logic of NetDAM (`docs/PROTOCOL.md`).
//!
//! `no_std` so that the XDP program and the host use the very same code for
//! header layout, validation order and bounds arithmetic. Host-only helpers
//! (frame building, `aya::Pod` impls) are behind the `std` and `user` features.
#![cfg_attr(not(feature = "std"), no_std)]

pub mod alu;
pub mod chain;
pub mod chaos;
pub mod config;
pub mod counters;
pub mod inject;
pub mod region;
pub mod split;
pub mod steer;
pub mod switch;
pub mod validate;
pub mod verifier;
pub mod window;
pub mod wire;

#[cfg(feature = "std")]
pub mod frame;

#[cfg(feature = "model")]
pub mod model;

#[cfg(feature = "model")]
pub mod vectors;

#[cfg(feature = "user")]
mod pod;

pub use config::NodeConfig;
pub use region::Region;
pub use wire::{NetdamHdr, Opcode, Status};
