//! Parsers for the values the `netdam` command takes: byte sizes, keys, regions.

use netdam_common::{
    region::{perm, perms_from_letters},
    wire::{Alu, Dtype},
    Region,
};
use thiserror::Error;

use crate::controller::keys::RegionArg;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ArgError {
    #[error("{0:?} is not a dtype: use i32, u32, i64, u64 or f32")]
    Dtype(String),
    #[error("{0:?} is not an operator: use sum (or add), min, max, and, or, xor")]
    Alu(String),
    #[error("{value:?} is not a {dtype} value")]
    Value { value: String, dtype: &'static str },
    #[error("{0:?} is not a size: expected bytes with an optional unit, e.g. 4096, 64KiB, 64MiB, 1GiB")]
    Size(String),
    #[error("{0:?} is not a number: expected decimal (4660) or hex (0x1234)")]
    Number(String),
    #[error(
        "{0:?} is not a region: expected [KEY:]BASE:SIZE:PERMS, e.g. 0:4MiB:rwam (random key) or 0x1234:0:4MiB:rwam"
    )]
    RegionShape(String),
    #[error("region {spec:?}: unknown permission letter {letter:?}; use r=READ w=WRITE a=ATOMIC m=MSG")]
    RegionPerm { spec: String, letter: char },
    #[error("region {0:?} has size 0")]
    RegionEmpty(String),
    #[error("{0:?} is not a group: expected the members' IPv4 addresses in group order, comma-separated, e.g. 198.18.0.1,198.18.0.2")]
    Group(String),
}

/// A number in decimal or 0x-hex.
pub fn parse_number(s: &str) -> Result<u64, ArgError> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => t.replace('_', "").parse(),
    };
    r.map_err(|_| ArgError::Number(s.to_string()))
}

/// A rkey: a u32 number.
pub fn parse_rkey(s: &str) -> Result<u32, ArgError> {
    parse_number(s)?.try_into().map_err(|_| ArgError::Number(s.to_string()))
}

/// Bytes with an optional unit: B, K/KiB, M/MiB, G/GiB (powers of 1024), KB/MB/GB (powers of 1000).
pub fn parse_size(s: &str) -> Result<u64, ArgError> {
    let t = s.trim();
    if t.starts_with("0x") || t.starts_with("0X") {
        return parse_number(t).map_err(|_| ArgError::Size(s.to_string()));
    }
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return Err(ArgError::Size(s.to_string())),
    };
    let n: u64 = num
        .trim()
        .replace('_', "")
        .parse()
        .map_err(|_| ArgError::Size(s.to_string()))?;
    n.checked_mul(mult).ok_or_else(|| ArgError::Size(s.to_string()))
}

/// `KEY:BASE:SIZE:PERMS`, e.g. `0x1234:0:4MiB:rwam`.
/// `KEY:BASE:SIZE:PERMS`, or `BASE:SIZE:PERMS` (or KEY `random`) for a
/// random key (`controller::keys`).
pub fn parse_region(s: &str) -> Result<RegionArg, ArgError> {
    let parts: Vec<&str> = s.split(':').collect();
    let (key, base, size, perms) = match parts[..] {
        [key, base, size, perms] => (Some(key), base, size, perms),
        [base, size, perms] => (None, base, size, perms),
        _ => return Err(ArgError::RegionShape(s.to_string())),
    };
    let rkey = match key {
        None | Some("random") => None,
        Some(k) => Some(parse_rkey(k).map_err(|_| ArgError::RegionShape(s.to_string()))?),
    };
    let base = parse_size(base).map_err(|_| ArgError::RegionShape(s.to_string()))?;
    let size = parse_size(size).map_err(|_| ArgError::RegionShape(s.to_string()))?;
    if size == 0 {
        return Err(ArgError::RegionEmpty(s.to_string()));
    }
    let perms = perms_from_letters(perms).map_err(|letter| ArgError::RegionPerm {
        spec: s.to_string(),
        letter,
    })?;
    Ok(RegionArg {
        rkey,
        region: Region {
            base,
            size,
            perms,
            _reserved: 0,
        },
    })
}

pub fn parse_dtype(s: &str) -> Result<Dtype, ArgError> {
    Dtype::ALL
        .iter()
        .copied()
        .find(|d| d.name() == s.to_ascii_lowercase())
        .ok_or_else(|| ArgError::Dtype(s.to_string()))
}

/// An operator by its nccl-tests name (sum) or its PROTOCOL.md name (add).
pub fn parse_alu(s: &str) -> Result<Alu, ArgError> {
    match s.to_ascii_lowercase().as_str() {
        "sum" | "add" => Ok(Alu::Add),
        "min" => Ok(Alu::Min),
        "max" => Ok(Alu::Max),
        "and" => Ok(Alu::And),
        "or" => Ok(Alu::Or),
        "xor" => Ok(Alu::Xor),
        _ => Err(ArgError::Alu(s.to_string())),
    }
}

/// Comma-separated values of `dtype` as the little-endian vector of the wire.
pub fn parse_values(s: &str, dtype: Dtype) -> Result<Vec<u8>, ArgError> {
    let mut out = Vec::new();
    for v in s.split(',').map(str::trim).filter(|v| !v.is_empty()) {
        let bad = || ArgError::Value {
            value: v.to_string(),
            dtype: dtype.name(),
        };
        match dtype {
            Dtype::I32 => out.extend(v.parse::<i32>().map_err(|_| bad())?.to_le_bytes()),
            Dtype::U32 => out.extend(v.parse::<u32>().map_err(|_| bad())?.to_le_bytes()),
            Dtype::I64 => out.extend(v.parse::<i64>().map_err(|_| bad())?.to_le_bytes()),
            Dtype::U64 => out.extend(v.parse::<u64>().map_err(|_| bad())?.to_le_bytes()),
            Dtype::F32 => out.extend(v.parse::<f32>().map_err(|_| bad())?.to_le_bytes()),
        }
    }
    Ok(out)
}

/// The little-endian vector as comma-separated values of `dtype`.
pub fn format_values(v: &[u8], dtype: Dtype) -> String {
    let w = dtype.width() as usize;
    v.chunks(w)
        .map(|e| match dtype {
            Dtype::I32 => i32::from_le_bytes(e.try_into().unwrap()).to_string(),
            Dtype::U32 => u32::from_le_bytes(e.try_into().unwrap()).to_string(),
            Dtype::I64 => i64::from_le_bytes(e.try_into().unwrap()).to_string(),
            Dtype::U64 => u64::from_le_bytes(e.try_into().unwrap()).to_string(),
            Dtype::F32 => f32::from_le_bytes(e.try_into().unwrap()).to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `IP,IP,...`: the members of a collective, in group order.
pub fn parse_group(s: &str) -> Result<Vec<std::net::Ipv4Addr>, ArgError> {
    s.split(',')
        .map(|m| m.trim().parse().map_err(|_| ArgError::Group(s.to_string())))
        .collect()
}

/// `rwam`-style letters of a permission set.
pub fn perm_letters(perms: u32) -> String {
    [
        (perm::READ, 'r'),
        (perm::WRITE, 'w'),
        (perm::ATOMIC, 'a'),
        (perm::MSG, 'm'),
    ]
    .iter()
    .filter(|(bit, _)| perms & bit != 0)
    .map(|(_, c)| *c)
    .collect()
}

/// How the collective's members send their chunks: `socket`, `injector` or `af-xdp`.
pub fn parse_transmit(s: &str) -> Result<crate::collective::TxPath, String> {
    use crate::collective::TxPath;
    match s {
        "socket" => Ok(TxPath::Socket),
        "injector" => Ok(TxPath::Injector),
        "af-xdp" => Ok(TxPath::AfXdp),
        _ => Err(format!("{s:?} is not a way to send: socket, injector or af-xdp")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("2kb"), Ok(2000));
        assert_eq!(parse_size("0x1000"), Ok(4096));
        assert!(parse_size("12XB").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("99999999999999GiB").is_err());
    }

    #[test]
    fn vectors() {
        assert_eq!(parse_dtype("F32"), Ok(Dtype::F32));
        assert!(parse_dtype("f16").is_err());
        assert_eq!(parse_alu("sum"), Ok(Alu::Add));
        assert!(parse_alu("avg").is_err());
        let v = parse_values("1, -2,3", Dtype::I32).unwrap();
        assert_eq!(v, [1, 0, 0, 0, 0xFE, 0xFF, 0xFF, 0xFF, 3, 0, 0, 0]);
        assert_eq!(format_values(&v, Dtype::I32), "1,-2,3");
        assert_eq!(
            format_values(&parse_values("1.5,-0", Dtype::F32).unwrap(), Dtype::F32),
            "1.5,-0"
        );
        assert!(matches!(parse_values("1,x", Dtype::U64), Err(ArgError::Value { .. })));
        assert!(parse_values("-1", Dtype::U32).is_err());
        assert_eq!(
            parse_group("198.18.0.1, 198.18.0.2"),
            Ok(vec![[198, 18, 0, 1].into(), [198, 18, 0, 2].into()])
        );
        assert!(matches!(parse_group("198.18.0.1;198.18.0.2"), Err(ArgError::Group(_))));
    }

    #[test]
    fn regions() {
        let RegionArg { rkey, region: r } = parse_region("0x1234:0:4MiB:rwam").unwrap();
        assert_eq!(rkey, Some(0x1234));
        assert_eq!((r.base, r.size, r.perms), (0, 4 << 20, perm::ALL));
        assert_eq!(perm_letters(r.perms), "rwam");
        let RegionArg { rkey, region: r } = parse_region("7:1KiB:100:r").unwrap();
        assert_eq!((rkey, r.base, r.size, r.perms), (Some(7), 1024, 100, perm::READ));
        // No key, or `random`: the controller draws one.
        assert_eq!(parse_region("0:4MiB:rw").unwrap().rkey, None);
        assert_eq!(
            parse_region("random:0:4MiB:rw").unwrap(),
            parse_region("0:4MiB:rw").unwrap()
        );
        assert!(matches!(parse_region("1:0"), Err(ArgError::RegionShape(_))));
        assert!(matches!(parse_region("1:2:0:4MiB:r"), Err(ArgError::RegionShape(_))));
        assert!(matches!(
            parse_region("1:0:4MiB:rx"),
            Err(ArgError::RegionPerm { letter: 'x', .. })
        ));
        assert!(matches!(parse_region("1:0:0:r"), Err(ArgError::RegionEmpty(_))));
        assert!(matches!(
            parse_region("0x1_0000_0000:0:1:r"),
            Err(ArgError::RegionShape(_))
        ));
    }
}
