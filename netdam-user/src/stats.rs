//! The data path's counters as a table or JSON.

use std::path::Path;

use aya::maps::{Map, MapData, PerCpuArray};
use netdam_common::{
    counters::{op_slot_name, Event, OP_SLOTS, STATUS_SLOTS},
    Status,
};
use serde::Serialize;

use crate::controller::{queues::queue_frames, sum_counters, ControllerError, MAP_COUNTERS};

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct OpCount {
    pub op: &'static str,
    pub status: &'static str,
    pub count: u64,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct EventCount {
    pub event: &'static str,
    pub count: u64,
}

/// An event whose count means someone is attacking the node (or is
/// misconfigured), with what it means.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Alarm {
    pub event: &'static str,
    pub count: u64,
    pub meaning: &'static str,
}

/// The events that raise an alarm when they count (docs/conformance.md 12, 19, 21).
pub const ALARMS: &[(Event, &str)] = &[
    (
        Event::BadKeyLimited,
        "BAD_KEY answers refused past --bad-key-limit: someone guesses region keys, or a client has a wrong key",
    ),
    (
        Event::DropBadKeyLockout,
        "requests dropped from a source locked out for key guessing",
    ),
    (
        Event::DropPeerMac,
        "frames from a peer's address but another MAC: someone spoofs a peer, or a peer's MAC changed",
    ),
    (
        Event::DropOwnAddress,
        "frames from the wire claiming this node's own address (spoofed)",
    ),
    (
        Event::WindowSourceFull,
        "new sources refused past --window-per-source: one address sprays source or CHAIN origin ports, \
         or a client opens more sockets than the cap",
    ),
];

/// Frames the data path saw on one receive queue.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct QueueFrames {
    pub queue: u32,
    pub frames: u64,
}

/// Non-zero counters, by (opcode, status) and by event, the alarms among
/// the events, and the frames of each receive queue (how RSS spreads them).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Stats {
    pub requests: Vec<OpCount>,
    pub events: Vec<EventCount>,
    pub alarms: Vec<Alarm>,
    pub queues: Vec<QueueFrames>,
}

impl Stats {
    pub fn from_counters(c: &[u64]) -> Stats {
        let mut requests = Vec::new();
        for slot in 0..OP_SLOTS {
            for s in Status::ALL {
                let count = c.get((slot * STATUS_SLOTS + *s as u32) as usize).copied().unwrap_or(0);
                if count > 0 {
                    requests.push(OpCount {
                        op: op_slot_name(slot),
                        status: s.name(),
                        count,
                    });
                }
            }
        }
        let events = Event::ALL
            .iter()
            .map(|e| EventCount {
                event: e.name(),
                count: c.get(*e as usize).copied().unwrap_or(0),
            })
            .collect();
        let alarms = ALARMS
            .iter()
            .filter_map(|(e, meaning)| {
                let count = c.get(*e as usize).copied().unwrap_or(0);
                (count > 0).then_some(Alarm {
                    event: e.name(),
                    count,
                    meaning,
                })
            })
            .collect();
        Stats {
            requests,
            events,
            alarms,
            queues: Vec::new(),
        }
    }

    /// Reads the counters pinned in a node's pin directory (no need to own the node).
    pub fn read_pinned(dir: &Path) -> Result<Stats, ControllerError> {
        let path = dir.join(MAP_COUNTERS);
        if !path.exists() {
            return Err(ControllerError::Io(
                format!("no counters at {}", path.display()),
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "has `netdam serve` run on this interface? pass its --pin-dir",
                ),
            ));
        }
        let data = MapData::from_pin(&path).map_err(|e| ControllerError::Map(MAP_COUNTERS, e))?;
        let arr: PerCpuArray<MapData, u64> =
            PerCpuArray::try_from(Map::PerCpuArray(data)).map_err(|e| ControllerError::Map(MAP_COUNTERS, e))?;
        let mut stats = Stats::from_counters(&sum_counters(&arr)?);
        stats.queues = queue_frames(dir)?
            .into_iter()
            .zip(0..)
            .map(|(frames, queue)| QueueFrames { queue, frames })
            .collect();
        Ok(stats)
    }

    /// The count of requests with this opcode name and status.
    pub fn requests(&self, op: &str, status: Status) -> u64 {
        self.requests
            .iter()
            .find(|r| r.op == op && r.status == status.name())
            .map_or(0, |r| r.count)
    }

    pub fn event(&self, e: Event) -> u64 {
        self.events.iter().find(|x| x.event == e.name()).map_or(0, |x| x.count)
    }

    /// The receive queues that saw frames.
    pub fn busy_queues(&self) -> usize {
        self.queues.iter().filter(|q| q.frames > 0).count()
    }

    /// A plain-text table for the terminal.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let w = 14;
        out.push_str(&format!("{:<w$} {:<w$} {:>14}\n", "opcode", "status", "requests"));
        if self.requests.is_empty() {
            out.push_str("(no requests yet)\n");
        }
        for r in &self.requests {
            out.push_str(&format!("{:<w$} {:<w$} {:>14}\n", r.op, r.status, r.count));
        }
        out.push('\n');
        out.push_str(&format!("{:<29} {:>14}\n", "frame event", "frames"));
        for e in &self.events {
            out.push_str(&format!("{:<29} {:>14}\n", e.event, e.count));
        }
        if !self.queues.is_empty() {
            out.push('\n');
            out.push_str(&format!("{:<29} {:>14}\n", "receive queue", "frames"));
        }
        for q in &self.queues {
            out.push_str(&format!("{:<29} {:>14}\n", q.queue, q.frames));
        }
        for a in &self.alarms {
            out.push_str(&format!("\nALARM {} = {}: {}\n", a.event, a.count, a.meaning));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netdam_common::counters::{op_status, COUNTER_SLOTS};

    #[test]
    fn rows_from_counters() {
        let mut c = vec![0u64; COUNTER_SLOTS as usize];
        c[op_status(1, Status::Ok) as usize] = 5;
        c[op_status(2, Status::BadKey) as usize] = 2;
        c[Event::DropBadMagic as usize] = 7;
        let s = Stats::from_counters(&c);
        assert_eq!(s.requests("WRITE", Status::Ok), 5);
        assert_eq!(s.requests("READ", Status::BadKey), 2);
        assert_eq!(s.requests("READ", Status::Ok), 0);
        assert_eq!(s.event(Event::DropBadMagic), 7);
        let t = s.table();
        assert!(t.contains("WRITE") && t.contains("BAD_KEY") && t.contains("drop_bad_magic"));
        let j = serde_json::to_value(&s).unwrap();
        assert_eq!(j["requests"][0]["count"], 5);
        assert!(s.alarms.is_empty() && !t.contains("ALARM"));
        assert!(!t.contains("receive queue"));
    }

    #[test]
    fn queues_are_listed_with_their_frames() {
        let mut s = Stats::from_counters(&vec![0u64; COUNTER_SLOTS as usize]);
        s.queues = vec![
            QueueFrames { queue: 0, frames: 9 },
            QueueFrames { queue: 1, frames: 0 },
            QueueFrames { queue: 2, frames: 4 },
        ];
        assert_eq!(s.busy_queues(), 2);
        let t = s.table();
        assert!(t.contains("receive queue"), "{t}");
        assert!(t.lines().any(|l| l.split_whitespace().eq(["2", "4"])), "{t}");
        assert_eq!(serde_json::to_value(&s).unwrap()["queues"][2]["frames"], 4);
    }

    #[test]
    fn key_guessing_and_spoofing_raise_alarms() {
        let mut c = vec![0u64; COUNTER_SLOTS as usize];
        c[Event::BadKeyLimited as usize] = 3;
        c[Event::DropPeerMac as usize] = 1;
        let s = Stats::from_counters(&c);
        let raised: Vec<_> = s.alarms.iter().map(|a| (a.event, a.count)).collect();
        assert_eq!(raised, [("bad_key_limited", 3), ("drop_peer_mac", 1)]);
        assert!(s.table().contains("ALARM bad_key_limited = 3: BAD_KEY answers refused"));
        assert_eq!(serde_json::to_value(&s).unwrap()["alarms"][1]["event"], "drop_peer_mac");
    }
}
