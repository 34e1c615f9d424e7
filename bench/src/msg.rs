//! Benchmarks of the AF_XDP issue, on the memory-wall rig (a 2-host
//! testbed: host 0 sends, host 1 serves NetDAM and receives), repetition
//! by repetition, interleaved, medians:
//!
//! 1. MSG delivery rate into AF_XDP against the same-sized messages received
//!    from a kernel UDP socket with recvmmsg, 64 B and 1 KiB, each sent as
//!    fast as the generator (`netdam_lab::generator`) goes. The application reads every
//!    message it receives. (The MSG datagram carries the 32-byte NetDAM
//!    header on top of the message; the socket's does not.)
//! 2. Bytes the receive path hands the host per 1 KiB message: WRITE_NOTIFY
//!    against the socket path, measured from what each received.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context as _, Result};
use netdam_lab::{
    memwall::{Mode, Rig, Traffic},
    plot,
};
use netdam_tests::{netdam_bin, require_root};
use serde::Serialize;

use crate::node::median;

#[derive(clap::Args)]
pub struct Args {
    /// Repetitions (medians are reported).
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// Seconds of traffic per measurement.
    #[arg(long, default_value_t = 2.0)]
    secs: f64,
    /// Where the JSON and the SVG plot go.
    #[arg(long, default_value = "results")]
    out: PathBuf,
}

#[derive(Serialize, Default)]
struct Results {
    /// Per size: messages per second delivered, per repetition.
    af_xdp_per_s: Vec<(usize, Vec<f64>)>,
    socket_per_s: Vec<(usize, Vec<f64>)>,
    /// What the generator sent per second during each.
    sent_af_xdp_per_s: Vec<(usize, Vec<f64>)>,
    sent_socket_per_s: Vec<(usize, Vec<f64>)>,
    /// Busy CPU of the whole machine per delivered message, ns, per repetition.
    af_xdp_machine_ns: Vec<(usize, Vec<f64>)>,
    socket_machine_ns: Vec<(usize, Vec<f64>)>,
    /// CPU of the receiving thread per message, ns, per repetition.
    af_xdp_receiver_ns: Vec<(usize, Vec<f64>)>,
    socket_receiver_ns: Vec<(usize, Vec<f64>)>,
    /// Bytes handed to the host per 1 KiB message, per repetition.
    write_notify_host_bytes: Vec<f64>,
    socket_host_bytes: Vec<f64>,
}

const SIZES: [usize; 2] = [64, 1024];

pub fn run(a: Args) -> Result<()> {
    require_root();
    let mut rig = Rig::up("nbmsg", &netdam_bin()).context("the benchmark testbed")?;
    let time = Duration::from_secs_f64(a.secs);
    let mut r = Results::default();
    for size in SIZES {
        for v in [
            &mut r.af_xdp_per_s,
            &mut r.socket_per_s,
            &mut r.sent_af_xdp_per_s,
            &mut r.sent_socket_per_s,
            &mut r.af_xdp_machine_ns,
            &mut r.socket_machine_ns,
            &mut r.af_xdp_receiver_ns,
            &mut r.socket_receiver_ns,
        ] {
            v.push((size, Vec::new()));
        }
    }
    let at = |mode, size, rate| Traffic {
        mode,
        size,
        rate,
        hold: Duration::ZERO,
        time,
    };
    for rep in 1..=a.reps {
        for (i, size) in SIZES.iter().enumerate() {
            eprintln!("repetition {rep}/{}: {size} B messages, AF_XDP then socket", a.reps);
            let m = rig.measure(&at(Mode::AfXdp, *size, 0), None)?;
            r.af_xdp_per_s[i].1.push(m.delivered_per_s(Mode::AfXdp));
            r.sent_af_xdp_per_s[i].1.push(m.sent_per_s());
            r.af_xdp_machine_ns[i].1.push(m.machine_ns_per_message(Mode::AfXdp));
            r.af_xdp_receiver_ns[i].1.push(m.receiver_ns_per_message());
            let m = rig.measure(&at(Mode::Socket, *size, 0), None)?;
            r.socket_per_s[i].1.push(m.delivered_per_s(Mode::Socket));
            r.sent_socket_per_s[i].1.push(m.sent_per_s());
            r.socket_machine_ns[i].1.push(m.machine_ns_per_message(Mode::Socket));
            r.socket_receiver_ns[i].1.push(m.receiver_ns_per_message());
        }
        eprintln!(
            "repetition {rep}/{}: bytes handed to the host per 1 KiB message",
            a.reps
        );
        let wn = rig.measure(&at(Mode::WriteNotify, 1024, 20_000), None)?;
        r.write_notify_host_bytes.push(wn.host_bytes_per_message());
        let s = rig.measure(&at(Mode::Socket, 1024, 20_000), None)?;
        r.socket_host_bytes.push(s.host_bytes_per_message());
    }
    drop(rig);
    report(&a, &r)
}

fn report(a: &Args, r: &Results) -> Result<()> {
    println!(
        "MSG delivery into AF_XDP vs recvmmsg from a kernel UDP socket, messages/s, median of {} repetitions of {} s",
        a.reps, a.secs
    );
    println!(
        "{:<8} {:>14} {:>14} {:>14} {:>14} {:>8}",
        "size", "AF_XDP sent", "AF_XDP recv", "socket sent", "socket recv", "ratio"
    );
    let mut bars = Vec::new();
    for (i, size) in SIZES.iter().enumerate() {
        let (x, s) = (median(&r.af_xdp_per_s[i].1), median(&r.socket_per_s[i].1));
        println!(
            "{:<8} {:>14.0} {:>14.0} {:>14.0} {:>14.0} {:>7.2}x  (goal >= 2x: {})",
            format!("{size} B"),
            median(&r.sent_af_xdp_per_s[i].1),
            x,
            median(&r.sent_socket_per_s[i].1),
            s,
            x / s,
            if x / s >= 2.0 { "met" } else { "not met" }
        );
        bars.push((format!("AF_XDP {size} B"), x));
        bars.push((format!("socket {size} B"), s));
    }
    println!(
        "\nCPU per delivered message, ns: the whole machine (generator, kernel, receiver) and the receiving thread"
    );
    println!(
        "{:<8} {:>14} {:>14} {:>8} {:>16} {:>16} {:>8}",
        "size", "AF_XDP machine", "socket machine", "ratio", "AF_XDP receiver", "socket receiver", "ratio"
    );
    for (i, size) in SIZES.iter().enumerate() {
        let (xm, sm) = (median(&r.af_xdp_machine_ns[i].1), median(&r.socket_machine_ns[i].1));
        let (xr, sr) = (median(&r.af_xdp_receiver_ns[i].1), median(&r.socket_receiver_ns[i].1));
        println!(
            "{:<8} {:>14.0} {:>14.0} {:>7.2}x {:>16.0} {:>16.0} {:>7.2}x",
            format!("{size} B"),
            xm,
            sm,
            xm / sm,
            xr,
            sr,
            xr / sr
        );
    }
    let (wn, sock) = (median(&r.write_notify_host_bytes), median(&r.socket_host_bytes));
    println!("\nbytes the receive path handed the host per 1 KiB message (measured from what arrived)");
    println!(
        "WRITE_NOTIFY {wn:.0} (goal <= 64: {})",
        if wn <= 64.0 { "met" } else { "not met" }
    );
    println!("socket       {sock:.0} (the baseline: >= 1024)");
    std::fs::create_dir_all(&a.out)?;
    let json = a.out.join("bench-msg.json");
    std::fs::write(&json, serde_json::to_string_pretty(r)?)?;
    let top: Vec<(&str, f64)> = bars.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let svg = plot::bars(
        "MSG into AF_XDP vs recvmmsg, messages/s (top); host bytes per 1 KiB message (bottom)",
        &top,
        &[("WRITE_NOTIFY", wn), ("socket", sock)],
    );
    let svg_path = a.out.join("bench-msg.svg");
    std::fs::write(&svg_path, svg)?;
    eprintln!("results: {} and {}", json.display(), svg_path.display());
    Ok(())
}
