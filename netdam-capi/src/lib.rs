//! libnetdam: the C API of NetDAM-XDP, as `include/netdam.h` declares it
//! (docs/capi.md). Each exported function checks its pointers, runs the
//! library (`netdam_user`) behind `error::call`, which turns errors into a
//! status and the thread's last error and panics into
//! NETDAM_ERR_INTERNAL, and never unwinds into C.

// The contract of every exported function (valid pointers, one thread at a
// time per handle) is netdam.h's.
#![allow(clippy::missing_safety_doc)]

pub mod client;
pub mod error;
pub mod group;
pub mod node;
pub mod settings;

use std::{
    ffi::{c_char, c_int, c_void, CStr},
    ptr::NonNull,
};

use error::Error;
use netdam_common::wire::{Alu, Dtype};

/// NETDAM_API_VERSION of the header this library implements.
pub const API_VERSION: u32 = 1;

/// netdam_dtype: the header's names of the wire's element types.
pub const DTYPES: [(&str, Dtype); 5] = [
    ("NETDAM_I32", Dtype::I32),
    ("NETDAM_U32", Dtype::U32),
    ("NETDAM_I64", Dtype::I64),
    ("NETDAM_U64", Dtype::U64),
    ("NETDAM_F32", Dtype::F32),
];

/// netdam_op: the header's names of the wire's operators.
pub const OPS: [(&str, Alu); 6] = [
    ("NETDAM_SUM", Alu::Add),
    ("NETDAM_MIN", Alu::Min),
    ("NETDAM_MAX", Alu::Max),
    ("NETDAM_BAND", Alu::And),
    ("NETDAM_BOR", Alu::Or),
    ("NETDAM_BXOR", Alu::Xor),
];

fn listing<T: Copy>(table: &[(&str, T)], code: impl Fn(T) -> u8) -> String {
    let names: Vec<String> = table.iter().map(|(n, v)| format!("{n} ({})", code(*v))).collect();
    names.join(", ")
}

/// The dtype a C caller passed.
pub(crate) fn dtype(code: c_int) -> Result<Dtype, Error> {
    DTYPES
        .iter()
        .find(|(_, d)| *d as c_int == code)
        .map(|(_, d)| *d)
        .ok_or_else(|| {
            Error::arg(format!(
                "dtype {code} is not a netdam_dtype: use {}",
                listing(&DTYPES, |d| d as u8)
            ))
        })
}

/// The dtype and op a C caller passed, refusing a bitwise op on f32.
pub(crate) fn dtype_op(dtype_code: c_int, op_code: c_int) -> Result<(Dtype, Alu), Error> {
    let dtype = dtype(dtype_code)?;
    let (name, alu) = OPS.iter().find(|(_, a)| *a as c_int == op_code).ok_or_else(|| {
        Error::arg(format!(
            "op {op_code} is not a netdam_op: use {}",
            listing(&OPS, |a| a as u8)
        ))
    })?;
    if dtype == Dtype::F32 && alu.is_bitwise() {
        return Err(Error::arg(format!(
            "op {name} is bitwise: it is defined for the integer dtypes only, not NETDAM_F32; \
             use NETDAM_SUM, NETDAM_MIN or NETDAM_MAX"
        )));
    }
    Ok((dtype, *alu))
}

/// Bytes of `count` elements of `dtype`, as a length of this process.
pub(crate) fn vector_bytes(count: u64, dtype: Dtype) -> Result<usize, Error> {
    count
        .checked_mul(dtype.width() as u64)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| Error::arg(format!("count {count} x {} bytes overflows", dtype.width())))
}

/// A pointer argument that must not be NULL.
pub(crate) fn required<T>(p: *mut T, name: &str) -> Result<NonNull<T>, Error> {
    NonNull::new(p).ok_or_else(|| Error::null(name))
}

/// The handle behind `p`.
pub(crate) unsafe fn handle<'a, T>(p: *mut T, name: &str) -> Result<&'a mut T, Error> {
    // SAFETY: netdam.h: a handle is from its open function, not yet closed, used by one thread at a time.
    unsafe { p.as_mut() }.ok_or_else(|| Error::null(name))
}

/// The handle behind a const pointer.
pub(crate) unsafe fn handle_ref<'a, T>(p: *const T, name: &str) -> Result<&'a T, Error> {
    // SAFETY: as `handle`.
    unsafe { p.as_ref() }.ok_or_else(|| Error::null(name))
}

/// `len` bytes at `p`; NULL is allowed for none.
pub(crate) unsafe fn bytes<'a>(p: *const c_void, len: usize, name: &str) -> Result<&'a [u8], Error> {
    match (p.is_null(), len) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(Error::null(name)),
        // SAFETY: netdam.h: the caller's buffer holds `len` bytes.
        (false, _) => Ok(unsafe { std::slice::from_raw_parts(p.cast(), len) }),
    }
}

/// `len` writable bytes at `p`; NULL is allowed for none.
pub(crate) unsafe fn bytes_mut<'a>(p: *mut c_void, len: usize, name: &str) -> Result<&'a mut [u8], Error> {
    match (p.is_null(), len) {
        (_, 0) => Ok(&mut []),
        (true, _) => Err(Error::null(name)),
        // SAFETY: netdam.h: the caller's buffer holds `len` writable bytes.
        (false, _) => Ok(unsafe { std::slice::from_raw_parts_mut(p.cast(), len) }),
    }
}

/// A C string argument, as UTF-8.
pub(crate) unsafe fn c_str<'a>(p: *const c_char, name: &str) -> Result<&'a str, Error> {
    if p.is_null() {
        return Err(Error::null(name));
    }
    // SAFETY: netdam.h: a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| Error::arg(format!("{name} {s:?} is not UTF-8")))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::error::Status;

    /// Every `NAME = VALUE` of the header's enums, and its #defines of numbers.
    fn header_constants() -> BTreeMap<String, i64> {
        let h = include_str!("../include/netdam.h");
        let mut out = BTreeMap::new();
        for line in h.lines().map(str::trim) {
            let def = line
                .strip_prefix("#define ")
                .map(|d| d.split_whitespace().collect::<Vec<_>>());
            let (name, value) = match def.as_deref() {
                Some([name, value]) => (*name, *value),
                _ => match line.trim_end_matches(',').split_once(" = ") {
                    Some((name, value)) if name.starts_with("NETDAM_") => (name, value),
                    _ => continue,
                },
            };
            if let Ok(v) = value.parse() {
                out.insert(name.to_string(), v);
            }
        }
        out
    }

    #[test]
    fn header_and_library_agree_on_every_code() {
        let mut rust: BTreeMap<String, i64> = BTreeMap::new();
        rust.insert("NETDAM_API_VERSION".into(), API_VERSION as i64);
        for s in Status::ALL {
            rust.insert(s.name().into(), s as i64);
        }
        // The wire statuses the header names.
        rust.insert(
            "NETDAM_WIRE_MISMATCH".into(),
            netdam_common::wire::Status::Mismatch as i64,
        );
        for (name, d) in DTYPES {
            rust.insert(name.into(), d as i64);
        }
        for (name, a) in OPS {
            rust.insert(name.into(), a as i64);
        }
        assert_eq!(header_constants(), rust);
        // And the tables cover the wire's codes, once each.
        assert_eq!(DTYPES.map(|(_, d)| d).as_slice(), Dtype::ALL);
        assert_eq!(OPS.map(|(_, a)| a).as_slice(), Alu::ALL);
    }

    #[test]
    fn dtypes_and_ops_are_checked_with_what_is_right() {
        assert_eq!(dtype_op(5, 3).unwrap(), (Dtype::F32, Alu::Max));
        assert_eq!(dtype_op(1, 6).unwrap(), (Dtype::I32, Alu::Xor));
        let e = dtype_op(5, 4).unwrap_err();
        assert_eq!(e.status, Status::Arg);
        assert!(e.message.starts_with("op NETDAM_BAND is bitwise"), "{}", e.message);
        let e = dtype_op(0, 1).unwrap_err();
        assert!(
            e.message.contains("dtype 0 is not a netdam_dtype: use NETDAM_I32 (1)"),
            "{}",
            e.message
        );
        let e = dtype_op(1, 7).unwrap_err();
        assert!(e.message.contains("NETDAM_BXOR (6)"), "{}", e.message);
        assert!(vector_bytes(u64::MAX / 2, Dtype::U64).is_err());
        assert_eq!(vector_bytes(3, Dtype::I64).unwrap(), 24);
    }
}
