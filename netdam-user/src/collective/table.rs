//! Results of all-reduce runs in the nccl-tests format: what one member
//! measured (`MemberRow`, the JSON of `netdam allreduce --json`), and the
//! row of the table for a run of the whole group.

use std::net::Ipv4Addr;

use netdam_common::wire::Alu;
use serde::{Deserialize, Serialize};

/// One `netdam allreduce` run as one member saw it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemberRow {
    pub member: Ipv4Addr,
    pub rank: usize,
    pub members: usize,
    pub bytes: u64,
    pub count: u64,
    pub dtype: String,
    pub op: String,
    pub iters: u32,
    /// Mean of the timed iterations, microseconds.
    pub time_us: f64,
    pub times_us: Vec<f64>,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    /// Wrong elements of the result; `None` without --check.
    pub wrong: Option<u64>,
    pub chunks: u64,
    pub own_chunks: u64,
    pub resent: u64,
    pub not_ready: u64,
    /// HELD answers to this member's chunks, partials it continued for its
    /// node, its chunks repaired after STALE (docs/collective.md).
    #[serde(default)]
    pub held: u64,
    #[serde(default)]
    pub continued: u64,
    #[serde(default)]
    pub repaired: u64,
    pub generations: (u32, u32),
    /// How chunks left.
    pub transmit: super::TxPath,
}

/// A row of the nccl-tests table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub bytes: u64,
    pub count: u64,
    pub dtype: String,
    pub op: String,
    pub time_us: f64,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    pub wrong: Option<u64>,
}

impl From<&MemberRow> for Row {
    fn from(m: &MemberRow) -> Row {
        Row {
            bytes: m.bytes,
            count: m.count,
            dtype: m.dtype.clone(),
            op: m.op.clone(),
            time_us: m.time_us,
            algbw_gbps: m.algbw_gbps,
            busbw_gbps: m.busbw_gbps,
            wrong: m.wrong,
        }
    }
}

impl Row {
    /// The group's row from every member's: the time of the slowest
    /// member (the collective is done when the last member is), the wrong
    /// elements of all members together.
    pub fn of_group(rows: &[MemberRow]) -> Option<Row> {
        let first = rows.first()?;
        let time_us = rows.iter().map(|r| r.time_us).fold(0.0, f64::max);
        let algbw = first.bytes as f64 / time_us / 1e3;
        Some(Row {
            time_us,
            algbw_gbps: algbw,
            busbw_gbps: busbw(algbw, first.members),
            wrong: rows.iter().map(|r| r.wrong).sum(),
            ..Row::from(first)
        })
    }

    pub fn line(&self) -> String {
        format!(
            "{:>12} {:>12} {:>6} {:>6} {:>10.1} {:>8.3} {:>8.3} {:>8}",
            self.bytes,
            self.count,
            self.dtype,
            self.op,
            self.time_us,
            self.algbw_gbps,
            self.busbw_gbps,
            self.wrong.map_or("N/A".to_string(), |w| w.to_string())
        )
    }
}

/// busbw of nccl-tests for all-reduce: algbw x 2(n-1)/n.
pub fn busbw(algbw: f64, members: usize) -> f64 {
    algbw * 2.0 * (members as f64 - 1.0) / members as f64
}

/// The table's two header lines, in nccl-tests' column order.
pub fn header() -> String {
    format!(
        "{:>12} {:>12} {:>6} {:>6} {:>10} {:>8} {:>8} {:>8}\n{:>12} {:>12} {:>6} {:>6} {:>10} {:>8} {:>8} {:>8}\n",
        "size",
        "count",
        "type",
        "redop",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "(B)",
        "(elements)",
        "",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        ""
    )
}

/// nccl-tests' name of an operator.
pub fn redop(alu: Alu) -> &'static str {
    match alu {
        Alu::Add => "sum",
        Alu::Min => "min",
        Alu::Max => "max",
        Alu::And => "and",
        Alu::Or => "or",
        Alu::Xor => "xor",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_group_row_is_the_slowest_member_and_all_wrong_elements() {
        let m = |rank: usize, time_us: f64, wrong: u64| MemberRow {
            member: Ipv4Addr::new(198, 18, 0, rank as u8 + 1),
            rank,
            members: 4,
            bytes: 1 << 20,
            count: 1 << 18,
            dtype: "i32".into(),
            op: "sum".into(),
            iters: 1,
            time_us,
            times_us: vec![time_us],
            algbw_gbps: 0.0,
            busbw_gbps: 0.0,
            wrong: Some(wrong),
            chunks: 0,
            own_chunks: 0,
            resent: 0,
            not_ready: 0,
            held: 0,
            continued: 0,
            repaired: 0,
            generations: (1, 1),
            transmit: crate::collective::TxPath::Injector,
        };
        let r = Row::of_group(&[m(0, 1000.0, 0), m(1, 2000.0, 3), m(2, 1500.0, 0), m(3, 10.0, 1)]).unwrap();
        assert_eq!(r.time_us, 2000.0);
        assert_eq!(r.wrong, Some(4));
        // 1 MiB in 2 ms: 0.524 GB/s; busbw x 2 * 3 / 4.
        assert!((r.algbw_gbps - 0.524288).abs() < 1e-9);
        assert!((r.busbw_gbps - 0.786432).abs() < 1e-9);
        assert!(r.line().ends_with("       4"));
        let header = header();
        let cols: Vec<&str> = header.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(
            cols,
            ["size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong"]
        );
    }
}
