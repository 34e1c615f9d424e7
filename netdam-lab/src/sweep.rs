//! The all-reduce sweep of `cargo xtask allreduce`: a testbed of N hosts
//! serving NetDAM, `netdam allreduce --check` on every member for each size
//! from min to max (doubling), one nccl-tests row per size.

use std::{
    path::Path,
    process::{Child, Stdio},
};

use netdam_common::wire::{Alu, Dtype};
use thiserror::Error;

use crate::testbed::{Served, Testbed, TestbedError};
use netdam_user::collective::{
    ring::RingPlan,
    sync_len,
    table::{redop, MemberRow, Row},
    TxPath,
};

/// Region key of the sweep's nodes.
const RKEY: u32 = 0x5EEB;

#[derive(Clone, Debug)]
pub struct SweepSpec {
    pub nodes: usize,
    pub dtype: Dtype,
    pub alu: Alu,
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// Timed iterations per size, and untimed ones before them.
    pub iters: u32,
    pub warmup: u32,
    /// Testbed name prefix.
    pub prefix: String,
    /// How members send their chunks.
    pub transmit: TxPath,
    /// What joins the testbed's links.
    pub fabric: crate::testbed::Fabric,
    /// MTU of every link.
    pub mtu: u32,
}

#[derive(Debug, Error)]
pub enum SweepError {
    #[error("testbed: {0}")]
    Testbed(#[from] TestbedError),
    #[error("--min-bytes {min} .. --max-bytes {max}: give 1 <= min <= max <= 1GiB, with max at least one {dtype} element ({width} bytes)")]
    Sizes {
        min: u64,
        max: u64,
        dtype: &'static str,
        width: u32,
    },
    #[error("--op {0} is bitwise: it is defined for integer dtypes only, not f32")]
    BitwiseF32(&'static str),
    #[error("{bytes}-byte all-reduce, member {member}: {detail}")]
    Member { bytes: u64, member: usize, detail: String },
}

impl SweepSpec {
    /// The sizes of the sweep: min (rounded up to one element) doubling up to max.
    pub fn sizes(&self) -> Result<Vec<u64>, SweepError> {
        let w = self.dtype.width() as u64;
        if self.min_bytes == 0 || self.min_bytes > self.max_bytes || self.max_bytes > 1 << 30 || self.max_bytes < w {
            return Err(SweepError::Sizes {
                min: self.min_bytes,
                max: self.max_bytes,
                dtype: self.dtype.name(),
                width: self.dtype.width(),
            });
        }
        let mut sizes = Vec::new();
        let mut s = self.min_bytes.max(w);
        while s <= self.max_bytes {
            sizes.push(s / w * w);
            s *= 2;
        }
        Ok(sizes)
    }

    /// NetDAM memory of each node: the sync area's page, input, output and
    /// the ring's cells (where `netdam allreduce` puts them: after the output)
    /// of the largest size.
    fn layout(&self) -> (u64, u64, u64) {
        let input = 4096.max(sync_len(self.nodes).next_multiple_of(4096));
        let output = (input + self.max_bytes).next_multiple_of(4096);
        let cells = (output + self.max_bytes).next_multiple_of(4096);
        let cells_len = RingPlan::cells_len_of(self.nodes, self.dtype, self.max_bytes, self.mtu);
        let mem = (cells + cells_len).next_multiple_of(64 << 10);
        (input, output, mem)
    }
}

/// Runs the sweep with the `netdam` binary at `netdam`; `row` gets each
/// size's row as it is measured.
pub fn sweep(netdam: &Path, spec: &SweepSpec, mut row: impl FnMut(&Row)) -> Result<Vec<Row>, SweepError> {
    if spec.dtype == Dtype::F32 && spec.alu.is_bitwise() {
        return Err(SweepError::BitwiseF32(redop(spec.alu)));
    }
    let sizes = spec.sizes()?;
    let (input, output, mem) = spec.layout();
    let tb = Testbed::up_on(&spec.prefix, spec.nodes, spec.mtu, spec.fabric)?;
    let group: Vec<String> = tb.hosts.iter().map(|h| h.ip.to_string()).collect();
    let mut serve_args: Vec<String> = vec![
        "--mem-size".into(),
        format!("{mem}"),
        "--region".into(),
        format!("{RKEY:#x}:0:{mem}:rwa"),
        "--mode".into(),
        "native".into(),
    ];
    for ip in &group {
        serve_args.extend(["--peer".into(), ip.clone()]);
    }
    let _served: Vec<Served> = (0..spec.nodes)
        .map(|i| tb.serve(i, netdam, &serve_args))
        .collect::<Result<_, _>>()?;
    let mut rows = Vec::new();
    for bytes in sizes {
        let count = bytes / spec.dtype.width() as u64;
        let args: Vec<String> = [
            "allreduce",
            "--json",
            "--check",
            "--group",
            &group.join(","),
            "--rkey",
            &RKEY.to_string(),
            "--count",
            &count.to_string(),
            "--dtype",
            spec.dtype.name(),
            "--op",
            redop(spec.alu),
            "--iters",
            &spec.iters.to_string(),
            "--warmup",
            &spec.warmup.to_string(),
            "--input-addr",
            &input.to_string(),
            "--output-addr",
            &output.to_string(),
            "--patience",
            "20",
        ]
        .map(String::from)
        .to_vec();
        let mut args = args;
        match spec.transmit {
            TxPath::Socket => {}
            TxPath::Injector => args.push("--inject".into()),
            TxPath::AfXdp => args.push("--afxdp-tx".into()),
        }
        let members: Vec<Child> = (0..spec.nodes)
            .map(|i| {
                let mut cmd = tb.command(i, netdam)?;
                cmd.args(&args)
                    .arg("--pin-dir")
                    .arg(&tb.hosts[i].pin_dir)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                cmd.spawn()
                    .map_err(|e| TestbedError::Io(format!("start {}", netdam.display()), e))
            })
            .collect::<Result<_, _>>()?;
        let mut member_rows = Vec::new();
        for (member, child) in members.into_iter().enumerate() {
            let out = child
                .wait_with_output()
                .map_err(|e| TestbedError::Io(format!("wait for {}", netdam.display()), e))?;
            // A member that found wrong elements prints its row and exits 1: the row shows them.
            let m: MemberRow = serde_json::from_slice(&out.stdout).map_err(|_| SweepError::Member {
                bytes,
                member,
                detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            })?;
            member_rows.push(m);
        }
        let r = Row::of_group(&member_rows).expect("at least two members");
        row(&r);
        rows.push(r);
    }
    Ok(rows)
}
