//! Regions of NetDAM memory and their permissions (PROTOCOL.md section 8).

use crate::wire::Opcode;

/// Permission bits of a region.
pub mod perm {
    pub const READ: u32 = 1 << 0;
    pub const WRITE: u32 = 1 << 1;
    pub const ATOMIC: u32 = 1 << 2;
    pub const MSG: u32 = 1 << 3;
    pub const ALL: u32 = READ | WRITE | ATOMIC | MSG;
}

/// Value of the region table, keyed by rkey.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Region {
    pub base: u64,
    pub size: u64,
    pub perms: u32,
    pub _reserved: u32,
}

impl Region {
    /// `[a, a+n)` lies inside the region, computed without wrap-around (section 3).
    #[inline(always)]
    pub const fn contains(&self, a: u64, n: u64) -> bool {
        a >= self.base && n <= self.size && a - self.base <= self.size - n
    }

    #[inline(always)]
    pub const fn permits(&self, needed: u32) -> bool {
        self.perms & needed == needed
    }
}

/// The permissions an op needs (section 3). NOP checks no key: 0.
pub const fn required_perms(op: Opcode) -> u32 {
    match op {
        Opcode::Nop => 0,
        Opcode::Read | Opcode::Reduce => perm::READ,
        Opcode::Write | Opcode::WriteNotify => perm::WRITE,
        Opcode::Accumulate | Opcode::FetchAdd | Opcode::Cas | Opcode::Swap => perm::ATOMIC,
        Opcode::Msg => perm::MSG,
        // A CHAIN hop needs its hop op's permission; the hop is known only
        // once the SR header is read (section 6).
        Opcode::Chain => 0,
    }
}

/// Letters of the CLI's PERMS field: r=READ w=WRITE a=ATOMIC m=MSG.
pub fn perms_from_letters(s: &str) -> Result<u32, char> {
    s.chars().try_fold(0, |acc, c| {
        Ok(acc
            | match c {
                'r' => perm::READ,
                'w' => perm::WRITE,
                'a' => perm::ATOMIC,
                'm' => perm::MSG,
                other => return Err(other),
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_include_both_edges_and_never_wrap() {
        let r = Region {
            base: 4096,
            size: 100,
            perms: perm::ALL,
            _reserved: 0,
        };
        assert!(r.contains(4096, 100));
        assert!(r.contains(4195, 1));
        assert!(r.contains(4196, 0));
        assert!(!r.contains(4196, 1));
        assert!(!r.contains(4095, 1));
        assert!(!r.contains(4096, 101));
        assert!(!r.contains(u64::MAX, 2));
        assert!(!r.contains(4100, u64::MAX));
    }

    #[test]
    fn perm_letters() {
        assert_eq!(perms_from_letters("rwam"), Ok(perm::ALL));
        assert_eq!(perms_from_letters("r"), Ok(perm::READ));
        assert_eq!(perms_from_letters(""), Ok(0));
        assert_eq!(perms_from_letters("rx"), Err('x'));
        let ro = Region {
            base: 0,
            size: 8,
            perms: perm::READ,
            _reserved: 0,
        };
        assert!(ro.permits(required_perms(Opcode::Read)));
        assert!(!ro.permits(required_perms(Opcode::Write)));
        assert!(ro.permits(required_perms(Opcode::Nop)));
    }
}
