//! A message service on NetDAM's AF_XDP endpoint: a word counter.
//!
//! Clients send words as MSG (`netdam msg --node IP --rkey K --addr A WORD`)
//! and documents as WRITE_NOTIFY (`netdam msg --notify ...`). The service
//! counts the words of each message in place, in UMEM, and the words of each
//! document in place, in NetDAM memory: the host's receive path never
//! carries a document. Ctrl-C prints the counts.
//!
//! Run beside `netdam serve`, in the node's network namespace:
//!
//!     cargo run --example msg_service -- /sys/fs/bpf/netdam/eth0

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use anyhow::{Context as _, Result};
use netdam_user::afxdp::{Delivery, Endpoint, EndpointConfig};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: i32) {
    STOP.store(true, Ordering::Relaxed);
}

fn count_words(text: &[u8], counts: &mut BTreeMap<String, u64>) {
    for w in text.split(|b| b.is_ascii_whitespace()).filter(|w| !w.is_empty()) {
        *counts.entry(String::from_utf8_lossy(w).to_lowercase()).or_default() += 1;
    }
}

fn main() -> Result<()> {
    env_logger::init();
    let pin_dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .context("usage: msg_service PIN_DIR (the node's pin directory, e.g. /sys/fs/bpf/netdam/eth0)")?,
    );
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(SigHandler::Handler(on_signal), SaFlags::empty(), SigSet::empty());
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { sigaction(sig, &action) }.context("installing the signal handler")?;
    }
    let mut ep = Endpoint::open(&pin_dir, EndpointConfig::default()).with_context(|| {
        format!(
            "opening the AF_XDP endpoint of the node pinned in {}",
            pin_dir.display()
        )
    })?;
    eprintln!("counting words; Ctrl-C prints them");
    let mut counts = BTreeMap::new();
    let (mut messages, mut documents) = (0u64, 0u64);
    while !STOP.load(Ordering::Relaxed) {
        let got = ep.recv(Duration::from_millis(200))?;
        for d in got.iter() {
            match d {
                Delivery::Message { body, .. } => {
                    count_words(body, &mut counts);
                    messages += 1;
                }
                Delivery::Notify { hdr, .. } => {
                    // A copy: peers may write the range again at any time.
                    let doc = got.memory().read(hdr.addr(), hdr.len() as usize)?;
                    count_words(&doc, &mut counts);
                    documents += 1;
                }
                _ => {}
            }
        }
    }
    println!("{messages} message(s), {documents} document(s)");
    for (w, n) in &counts {
        println!("{n:>8} {w}");
    }
    Ok(())
}
