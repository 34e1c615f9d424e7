//! Map values the host reads and writes through aya.

use crate::{config::PeerEntry, NodeConfig, Region};

// SAFETY: all three are repr(C), made of integers only, with explicit padding
// fields, so every bit pattern is valid and there are no implicit holes.
unsafe impl aya::Pod for NodeConfig {}
unsafe impl aya::Pod for Region {}
unsafe impl aya::Pod for PeerEntry {}

use crate::window::{SourceKey, Window};

// SAFETY: repr(C) integers with explicit padding, as above.
unsafe impl aya::Pod for SourceKey {}
unsafe impl aya::Pod for Window {}

use crate::chaos::{ChaosConfig, Held};

// SAFETY: repr(C) integers and byte arrays with explicit padding, as above.
unsafe impl aya::Pod for ChaosConfig {}
unsafe impl aya::Pod for Held {}

// SAFETY: repr(C) integers and byte arrays with explicit padding, as above.
unsafe impl aya::Pod for crate::inject::InjectJob {}

// SAFETY: repr(C) integers without holes.
unsafe impl aya::Pod for crate::split::SplitRing {}

// SAFETY: repr(C) integers without holes.
unsafe impl aya::Pod for crate::chain::Readiness {}

// SAFETY: repr(C) integers with explicit padding, as above.
unsafe impl aya::Pod for crate::switch::SwitchConfig {}

// SAFETY: repr(C) byte arrays with explicit padding, as above.
unsafe impl aya::Pod for crate::steer::ClientFlow {}
