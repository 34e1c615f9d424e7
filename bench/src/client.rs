//! The client issue's benchmark, on one node of a 2-host testbed (host 0 the
//! node, host 1 the client), repetition by repetition, medians:
//!
//! the node's WRITE ceiling, measured as in `node` (the generator on host 1,
//! AF_PACKET past the qdisc, 64 frames per system call, the acks dropped in XDP)
//! but with WRITE frames of the client's request size (the payload an MTU
//! 1500 path carries, 1440 bytes), against `Client::write` and
//! `Client::read` of 64 MiB from host 1 in the same run, through the kernel's
//! UDP stack and through the AF_XDP path (`ClientConfig::afxdp`). Figures are
//! MB/s of payload: the ceiling is node WRITE frames/s x payload bytes per
//! frame.

use std::{path::PathBuf, time::Duration};

use anyhow::{ensure, Context as _, Result};
use netdam_common::{
    frame::{netdam_frame, Endpoint},
    wire::{flags, DEFAULT_PORT},
    NetdamHdr, Opcode,
};
use netdam_lab::{
    plot,
    testbed::{host_ip, host_mac, Testbed},
};
use netdam_tests::{netdam_bin, require_root, Rng};
use netdam_user::{Client, ClientConfig};
use serde::Serialize;

use crate::node::{generate, median, requests_ok, CLIENT_PORT};

const PREFIX: &str = "nbcl";
const RKEY: u32 = 0x1234;
const SIZE: usize = 64 << 20;

#[derive(clap::Args)]
pub struct Args {
    /// Repetitions (medians are reported).
    #[arg(long, default_value_t = 5)]
    reps: u32,
    /// Seconds of generator traffic per ceiling measurement.
    #[arg(long, default_value_t = 2.0)]
    secs: f64,
    /// The client's window (requests in flight); default: the library's.
    #[arg(long)]
    window: Option<usize>,
    /// Where the JSON and the SVG plot go.
    #[arg(long, default_value = "results")]
    out: PathBuf,
}

#[derive(Serialize, Default)]
struct Results {
    payload_bytes: usize,
    window: usize,
    /// Per repetition: the node's WRITE frames/s under the generator, and MB/s of payload.
    node_write_fps: Vec<f64>,
    ceiling_mb_s: Vec<f64>,
    /// The same with READ frames of the same size (the answers dropped in XDP too).
    node_read_fps: Vec<f64>,
    read_ceiling_mb_s: Vec<f64>,
    client_write_mb_s: Vec<f64>,
    client_read_mb_s: Vec<f64>,
    afxdp_write_mb_s: Vec<f64>,
    afxdp_read_mb_s: Vec<f64>,
}

pub fn run(a: Args) -> Result<()> {
    require_root();
    let cfg = ClientConfig {
        window: a.window.unwrap_or(ClientConfig::default().window),
        ..ClientConfig::default()
    };
    let unit = cfg.max_payload();
    let tb = Testbed::up(PREFIX, 2, cfg.mtu)?;
    let serve_args: Vec<String> = [
        "--mem-size",
        "64MiB",
        "--region",
        &format!("{RKEY:#x}:0:64MiB:rw"),
        "--mode",
        "native",
    ]
    .map(String::from)
    .to_vec();
    let served = tb.serve(0, &netdam_bin(), &serve_args)?;
    let node = Endpoint {
        mac: host_mac(0),
        ip: host_ip(0),
        port: DEFAULT_PORT,
    };
    let client = Endpoint {
        mac: host_mac(1),
        ip: host_ip(1),
        port: CLIENT_PORT,
    };
    let mut h = NetdamHdr::request(Opcode::Write);
    h.flags = flags::ACK_REQ;
    h.set_rkey(RKEY);
    h.set_addr(4096);
    h.set_len(unit as u16);
    let frame = netdam_frame(&client, &node, &h, &vec![0x5A; unit]);
    // A READ carries its length in padding (PROTOCOL.md section 3), so a READ
    // frame is as large as the WRITE's and its answer too.
    h.opcode = Opcode::Read as u8;
    h.flags = 0;
    let read_frame = netdam_frame(&client, &node, &h, &vec![0; unit]);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let data: Vec<u8> = (0..SIZE).map(|_| rng.next_u64() as u8).collect();
    let mut r = Results {
        payload_bytes: unit,
        window: cfg.window,
        ..Results::default()
    };
    let afxdp = ClientConfig {
        afxdp: true,
        ..cfg.clone()
    };
    // One untimed round trip each first: ARP and the caches warm.
    transfer(&tb, cfg.clone(), data.clone())?;
    transfer(&tb, afxdp.clone(), data.clone())?;
    // The node's OK answers to `op` per second under the generator's `frame`s.
    let ceiling = |op: &str, frame: &[u8]| -> Result<f64> {
        let before = requests_ok(&tb, op)?;
        let (_, secs) = generate(&tb, frame, Duration::from_secs_f64(a.secs))?;
        Ok((requests_ok(&tb, op)? - before) as f64 / secs)
    };
    for rep in 1..=a.reps {
        eprintln!("repetition {rep}/{}: the node's WRITE and READ ceilings", a.reps);
        let fps = ceiling("WRITE", &frame)?;
        r.node_write_fps.push(fps);
        r.ceiling_mb_s.push(fps * unit as f64 / 1e6);
        let fps = ceiling("READ", &read_frame)?;
        r.node_read_fps.push(fps);
        r.read_ceiling_mb_s.push(fps * unit as f64 / 1e6);
        for (path, c) in [("UDP", &cfg), ("AF_XDP", &afxdp)] {
            eprintln!(
                "repetition {rep}/{}: the client, 64 MiB WRITE and READ over {path}",
                a.reps
            );
            let (w, rd) = transfer(&tb, c.clone(), data.clone())?;
            let (writes, reads) = match c.afxdp {
                false => (&mut r.client_write_mb_s, &mut r.client_read_mb_s),
                true => (&mut r.afxdp_write_mb_s, &mut r.afxdp_read_mb_s),
            };
            writes.push(SIZE as f64 / w / 1e6);
            reads.push(SIZE as f64 / rd / 1e6);
        }
    }
    served.stop();
    report(&a, &r)
}

/// `Client::write` of `data` at 0, then `Client::read` of it back, from
/// host 1; (write seconds, read seconds). Fails unless byte-exact.
fn transfer(tb: &Testbed, cfg: ClientConfig, data: Vec<u8>) -> Result<(f64, f64)> {
    tb.in_host(1, move || -> Result<(f64, f64)> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async {
            let c = Client::connect(host_ip(0), cfg).await?;
            let t = std::time::Instant::now();
            c.write(RKEY, 0, &data, &|_| {}).await.context("64 MiB WRITE")?;
            let w = t.elapsed().as_secs_f64();
            let t = std::time::Instant::now();
            let back = c.read(RKEY, 0, data.len(), &|_| {}).await.context("64 MiB READ")?;
            let rd = t.elapsed().as_secs_f64();
            ensure!(back == data, "the 64 MiB read back differ from what was written");
            Ok((w, rd))
        })
    })?
}

fn report(a: &Args, r: &Results) -> Result<()> {
    let ceiling = median(&r.ceiling_mb_s);
    let read_ceiling = median(&r.read_ceiling_mb_s);
    let (w, rd) = (median(&r.client_write_mb_s), median(&r.client_read_mb_s));
    let (xw, xrd) = (median(&r.afxdp_write_mb_s), median(&r.afxdp_read_mb_s));
    println!(
        "64 MiB through the client (window {}, {}-byte requests) against the node's WRITE and READ ceilings \
         (AF_PACKET generator, two threads, {}-byte requests, answers dropped in XDP), median of {} repetitions",
        r.window, r.payload_bytes, r.payload_bytes, a.reps
    );
    println!(
        "{:<36} {:>10} {:>14} {:>13}",
        "", "MB/s", "of WRITE ceil", "of READ ceil"
    );
    println!(
        "{:<36} {ceiling:>10.1} {:>13.2}x {:>13}  ({:.0} WRITE frames/s)",
        "node WRITE ceiling",
        1.0,
        "",
        median(&r.node_write_fps)
    );
    println!(
        "{:<36} {read_ceiling:>10.1} {:>13.2}x {:>12.2}x  ({:.0} READ frames/s)",
        "node READ ceiling",
        read_ceiling / ceiling,
        1.0,
        median(&r.node_read_fps)
    );
    for (name, v, read) in [
        ("write over UDP (netdam write)", w, false),
        ("write over AF_XDP (--afxdp)", xw, false),
        ("read over UDP (netdam read)", rd, true),
        ("read over AF_XDP (--afxdp)", xrd, true),
    ] {
        let of_read = if read {
            format!("{:.2}x", v / read_ceiling)
        } else {
            String::new()
        };
        println!("{name:<36} {v:>10.1} {:>13.2}x {of_read:>13}", v / ceiling);
    }
    let met = |x: f64| if x >= 0.8 { "met" } else { "not met" };
    let (bw, br) = (w.max(xw), rd.max(xrd));
    println!(
        "goal >= 0.8x the WRITE ceiling: write {:.2}x ({}), read {:.2}x ({}; {:.2}x of the READ ceiling, {})",
        bw / ceiling,
        met(bw / ceiling),
        br / ceiling,
        met(br / ceiling),
        br / read_ceiling,
        met(br / read_ceiling)
    );
    std::fs::create_dir_all(&a.out)?;
    let json = a.out.join("bench-client.json");
    std::fs::write(&json, serde_json::to_string_pretty(r)?)?;
    let svg = plot::bars(
        "64 MiB through the client against the node's ceilings, MB/s",
        &[
            ("node WRITE ceiling", ceiling),
            ("node READ ceiling", read_ceiling),
            ("write, UDP", w),
            ("read, UDP", rd),
            ("write, AF_XDP", xw),
            ("read, AF_XDP", xrd),
        ],
        &[],
    );
    let svg_path = a.out.join("bench-client.svg");
    std::fs::write(&svg_path, svg)?;
    eprintln!("results: {} and {}", json.display(), svg_path.display());
    Ok(())
}
