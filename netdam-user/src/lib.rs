//! NetDAM on the host: the controller that loads and configures the XDP data
//! path, the client library that talks to nodes, the AF_XDP endpoint that
//! receives what the data path hands over, and the parsers the `netdam`
//! command shares with them.

pub mod afxdp;
pub mod args;
pub mod cli;
pub mod client;
pub mod collective;
pub mod config;
pub mod controller;
pub mod doctor;
pub mod metrics;
pub mod sd_notify;
pub mod stats;

pub use client::{Client, ClientConfig, ClientError};
pub use controller::{Node, NodeSpec};
