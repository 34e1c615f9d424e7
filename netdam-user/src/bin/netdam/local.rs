//! Commands on the node of this host, through its pins: stats, ready, unpin.

use std::path::PathBuf;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use netdam_user::{
    args::parse_rkey,
    controller::{pins, sysctls, LocalNode},
    stats::Stats,
};

#[derive(Args, Clone)]
pub(crate) struct PinDirArgs {
    /// Where the node's maps are pinned [default: /sys/fs/bpf/netdam/IFACE].
    #[arg(long)]
    pub(crate) pin_dir: Option<PathBuf>,
}

/// A node served on this host, by its interface or its pin directory.
#[derive(Args)]
pub(crate) struct LocalArgs {
    /// Interface of the node (its default pin directory).
    #[arg(long, required_unless_present = "pin_dir")]
    pub(crate) iface: Option<String>,
    /// The node's pin directory.
    #[arg(long)]
    pub(crate) pin_dir: Option<PathBuf>,
}

impl LocalArgs {
    pub(crate) fn dir(&self) -> PathBuf {
        match (&self.pin_dir, &self.iface) {
            (Some(d), _) => d.clone(),
            (None, Some(i)) => pins::default_dir(i),
            (None, None) => unreachable!("clap requires --iface unless --pin-dir is given"),
        }
    }
}

#[derive(Args)]
pub(crate) struct StatsArgs {
    #[command(flatten)]
    pub(crate) local: LocalArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct ReadyArgs {
    #[command(flatten)]
    pub(crate) local: LocalArgs,
    /// Key of the region (hex or decimal).
    #[arg(long, value_parser = parse_rkey)]
    pub(crate) rkey: u32,
    /// The new generation; without it, the current one is printed.
    #[arg(long)]
    pub(crate) gen: Option<u32>,
}

/// `netdam stats`.
pub(crate) fn stats(a: StatsArgs) -> Result<()> {
    let dir = a.local.dir();
    let stats = Stats::read_pinned(&dir).with_context(|| format!("reading the counters in {}", dir.display()))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        print!("{}", stats.table());
    }
    Ok(())
}

/// `netdam ready`.
pub(crate) fn ready(a: ReadyArgs) -> Result<()> {
    let dir = a.local.dir();
    let mut node = LocalNode::open(&dir).with_context(|| format!("opening the node pinned in {}", dir.display()))?;
    let old = node.generation(a.rkey)?;
    match a.gen {
        Some(g) => {
            node.set_generation(a.rkey, g)?;
            println!("region {:#x}: generation {old} -> {g}", a.rkey);
        }
        None => println!("region {:#x}: generation {old}", a.rkey),
    }
    Ok(())
}

/// `netdam unpin`.
pub(crate) fn unpin(a: PinDirArgs) -> Result<()> {
    let Some(dir) = a.pin_dir else {
        bail!("give the node's --pin-dir (e.g. /sys/fs/bpf/netdam/eth0)")
    };
    // Settings a killed `serve` left on go back first: the record is
    // found by the pin directory.
    for path in sysctls::restore_recorded(&dir)? {
        println!("restored {} to its value before `netdam serve`", path.display());
    }
    let removed = pins::unpin(&dir)?;
    println!("removed {} pin(s) from {}", removed.len(), dir.display());
    Ok(())
}
