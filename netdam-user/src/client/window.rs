//! The bookkeeping of one bulk transfer: pieces 0..n, piece i sent with seq
//! `base + i` (every attempt reuses it), at most `window` unanswered at once,
//! resent once `timeout` passes without an answer, at most `attempts` sends
//! each. Until the first answer only one piece is out: a cold path (an
//! unresolved ARP entry queues only a few packets and drops the rest) costs
//! one round trip, not a window of timeouts. No I/O here: the transfer loop
//! asks what is due and reports answers.

use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

/// A piece sent `attempts` times, none answered within the timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Exhausted {
    pub piece: usize,
    pub attempts: u32,
}

pub(super) struct Window {
    base: u32,
    window: usize,
    timeout: Duration,
    attempts: u32,
    /// Sends of each piece so far (0: never sent).
    sends: Vec<u32>,
    answered: Vec<bool>,
    /// The first piece never sent.
    next: usize,
    /// Pieces sent and not answered.
    in_flight: usize,
    /// Pieces not answered yet, sent or not.
    left: usize,
    /// (deadline, piece) of every send, in send order, so deadlines only
    /// grow from front to back; entries of answered pieces are skipped.
    deadlines: VecDeque<(Instant, usize)>,
}

impl Window {
    pub fn new(base: u32, n: usize, window: usize, timeout: Duration, attempts: u32) -> Window {
        Window {
            base,
            window: window.max(1),
            timeout,
            attempts: attempts.max(1),
            sends: vec![0; n],
            answered: vec![false; n],
            next: 0,
            in_flight: 0,
            left: n,
            deadlines: VecDeque::new(),
        }
    }

    /// The seq of piece `p`.
    pub fn seq(&self, p: usize) -> u32 {
        self.base.wrapping_add(p as u32)
    }

    pub fn finished(&self) -> bool {
        self.left == 0
    }

    /// Fills `out` with up to `max` pieces to send at `now`: resends of
    /// expired pieces first, then new pieces while the window has room; each
    /// is counted as sent. Fails on an expired piece with no attempt left.
    pub fn due(&mut self, now: Instant, max: usize, out: &mut Vec<usize>) -> Result<(), Exhausted> {
        out.clear();
        while out.len() < max {
            let Some(&(deadline, p)) = self.deadlines.front() else {
                break;
            };
            if self.answered[p] {
                self.deadlines.pop_front();
                continue;
            }
            if deadline > now {
                break;
            }
            if self.sends[p] >= self.attempts {
                return Err(Exhausted {
                    piece: p,
                    attempts: self.sends[p],
                });
            }
            self.deadlines.pop_front();
            self.send(p, now, out);
        }
        let window = if self.left < self.sends.len() { self.window } else { 1 };
        while out.len() < max && self.in_flight < window && self.next < self.sends.len() {
            let p = self.next;
            self.next += 1;
            self.in_flight += 1;
            self.send(p, now, out);
        }
        Ok(())
    }

    fn send(&mut self, p: usize, now: Instant, out: &mut Vec<usize>) {
        self.sends[p] += 1;
        self.deadlines.push_back((now + self.timeout, p));
        out.push(p);
    }

    /// An answer carrying `seq`: the piece it answers, the first time only
    /// (late duplicates of a resent piece and foreign seqs give `None`).
    pub fn answer(&mut self, seq: u32) -> Option<usize> {
        let p = seq.wrapping_sub(self.base) as usize;
        if p >= self.sends.len() || self.sends[p] == 0 || self.answered[p] {
            return None;
        }
        self.answered[p] = true;
        self.in_flight -= 1;
        self.left -= 1;
        Some(p)
    }

    /// When the earliest unanswered send expires; `None` when none is out.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(&(deadline, p)) = self.deadlines.front() {
            if !self.answered[p] {
                return Some(deadline);
            }
            self.deadlines.pop_front();
        }
        None
    }

    /// The pieces sent and not answered yet (a resent piece may come twice).
    pub fn unanswered(&self) -> impl Iterator<Item = usize> + '_ {
        self.deadlines.iter().map(|&(_, p)| p).filter(|&p| !self.answered[p])
    }

    /// Sends beyond the first of each piece so far.
    pub fn resends(&self) -> u64 {
        self.sends.iter().map(|&s| s.saturating_sub(1) as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(100);

    fn due(w: &mut Window, now: Instant, max: usize) -> Vec<usize> {
        let mut out = Vec::new();
        w.due(now, max, &mut out).unwrap();
        out
    }

    /// A window whose first piece was sent and answered.
    fn opened(base: u32, n: usize, window: usize, attempts: u32, t0: Instant) -> Window {
        let mut w = Window::new(base, n, window, T, attempts);
        assert_eq!(due(&mut w, t0, 100), [0], "one piece until the first answer");
        assert_eq!(due(&mut w, t0, 100), Vec::<usize>::new());
        assert_eq!(w.answer(base), Some(0));
        w
    }

    #[test]
    fn the_window_bounds_what_is_in_flight() {
        let t0 = Instant::now();
        let mut w = opened(7, 11, 4, 3, t0);
        assert_eq!(due(&mut w, t0, 100), [1, 2, 3, 4]);
        assert_eq!(due(&mut w, t0, 100), Vec::<usize>::new(), "full");
        assert_eq!(w.answer(w.seq(3)), Some(3));
        assert_eq!(w.answer(w.seq(1)), Some(1));
        assert_eq!(due(&mut w, t0, 1), [5], "max per call");
        assert_eq!(due(&mut w, t0, 100), [6]);
        assert!(!w.finished());
    }

    #[test]
    fn seqs_wrap_and_foreign_or_repeated_answers_are_ignored() {
        let t0 = Instant::now();
        let mut w = opened(u32::MAX - 1, 4, 8, 3, t0);
        assert_eq!(due(&mut w, t0, 100), [1, 2, 3]);
        assert_eq!(w.seq(3), 1);
        assert_eq!(w.answer(1), Some(3));
        assert_eq!(w.answer(1), None, "a late duplicate");
        assert_eq!(w.answer(2), None, "not ours");
        assert_eq!(w.answer(u32::MAX - 5), None, "not ours");
        for p in 1..3 {
            assert_eq!(w.answer(w.seq(p)), Some(p));
        }
        assert!(w.finished());
    }

    #[test]
    fn unsent_pieces_cannot_be_answered() {
        let t0 = Instant::now();
        let mut w = opened(0, 10, 2, 3, t0);
        due(&mut w, t0, 100);
        assert_eq!(w.answer(5), None);
        assert_eq!(w.answer(1), Some(1));
    }

    #[test]
    fn expired_pieces_are_resent_first_with_their_seq_until_attempts_run_out() {
        let t0 = Instant::now();
        let mut w = opened(100, 6, 2, 2, t0);
        assert_eq!(due(&mut w, t0, 100), [1, 2]);
        assert_eq!(w.next_deadline(), Some(t0 + T));
        w.answer(w.seq(1));
        assert_eq!(due(&mut w, t0 + T / 2, 100), [3]);
        assert_eq!(w.next_deadline(), Some(t0 + T), "piece 2 is still out");
        // Piece 2 expires: it is resent before anything new, and holds its slot.
        assert_eq!(due(&mut w, t0 + T, 100), [2]);
        assert_eq!(w.resends(), 1);
        assert_eq!(w.next_deadline(), Some(t0 + T / 2 + T), "piece 3 now");
        // Piece 3's second attempt, then piece 2 runs out.
        assert_eq!(due(&mut w, t0 + T / 2 + T, 100), [3]);
        let mut out = Vec::new();
        assert_eq!(
            w.due(t0 + 2 * T, 100, &mut out),
            Err(Exhausted { piece: 2, attempts: 2 })
        );
    }

    #[test]
    fn an_answer_to_a_resent_piece_ends_it() {
        let t0 = Instant::now();
        let mut w = Window::new(0, 2, 2, T, 5);
        due(&mut w, t0, 100);
        assert_eq!(due(&mut w, t0 + T, 100), [0], "still one piece out");
        // The first attempt's answer arrives late: it counts, the second's is ignored.
        assert_eq!(w.answer(0), Some(0));
        assert_eq!(w.answer(0), None);
        assert_eq!(due(&mut w, t0 + T, 100), [1]);
        assert_eq!(w.answer(1), Some(1));
        assert!(w.finished());
        assert_eq!(w.next_deadline(), None);
        assert_eq!(due(&mut w, t0 + 10 * T, 100), Vec::<usize>::new());
    }

    #[test]
    fn an_empty_transfer_is_finished() {
        let mut w = Window::new(0, 0, 4, T, 1);
        assert!(w.finished());
        assert_eq!(due(&mut w, Instant::now(), 100), Vec::<usize>::new());
    }
}
