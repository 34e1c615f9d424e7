//! numpy arrays as NetDAM vectors: the element type from the array's dtype,
//! the operator from its name, and the little-endian bytes of the wire.

use netdam_common::wire::{Alu, Dtype};
use numpy::{
    dtype, BorrowError, Element, PyArray1, PyArrayDescr, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods,
    PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::{
    buffer::PyUntypedBuffer,
    exceptions::{PyTypeError, PyValueError},
    prelude::*,
};

/// What the module says when an array's dtype is not one of NetDAM's.
pub(crate) const DTYPES: &str = "int32, uint32, int64, uint64 or float32 (native byte order)";

/// The element types of the wire that numpy has, as Rust types: plain
/// numbers, every bit pattern a value, so their memory is their bytes.
pub(crate) trait Elem: Element + Copy + Default + Send + Sync {}
impl Elem for i32 {}
impl Elem for u32 {}
impl Elem for i64 {}
impl Elem for u64 {}
impl Elem for f32 {}

fn as_bytes<T: Elem>(s: &[T]) -> &[u8] {
    // SAFETY: an Elem is a plain number without padding; the bytes are
    // those of the slice, borrowed as long as it is.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), std::mem::size_of_val(s)) }
}

fn as_bytes_mut<T: Elem>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`, and any bytes written are some Elem value.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), std::mem::size_of_val(s)) }
}

/// Runs `$body` with `$t` the Rust type of `$dtype`.
macro_rules! with_elem {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            netdam_common::wire::Dtype::I32 => {
                type $t = i32;
                $body
            }
            netdam_common::wire::Dtype::U32 => {
                type $t = u32;
                $body
            }
            netdam_common::wire::Dtype::I64 => {
                type $t = i64;
                $body
            }
            netdam_common::wire::Dtype::U64 => {
                type $t = u64;
                $body
            }
            netdam_common::wire::Dtype::F32 => {
                type $t = f32;
                $body
            }
        }
    };
}

/// The reduction operator named `op` (MPI's names), for elements of `dtype`.
pub(crate) fn parse_op(op: &str, dtype: Dtype) -> PyResult<Alu> {
    let alu = match op {
        "sum" => Alu::Add,
        "min" => Alu::Min,
        "max" => Alu::Max,
        "band" => Alu::And,
        "bor" => Alu::Or,
        "bxor" => Alu::Xor,
        _ => {
            return Err(PyValueError::new_err(format!(
                "op {op:?} is not one of \"sum\", \"min\", \"max\", \"band\", \"bor\", \"bxor\""
            )))
        }
    };
    if alu.is_bitwise() && dtype == Dtype::F32 {
        return Err(PyTypeError::new_err(format!(
            "op {op:?} is bitwise: it is defined for int32, uint32, int64 and uint64 arrays, not float32; \
             use \"sum\", \"min\" or \"max\" on float32"
        )));
    }
    Ok(alu)
}

/// The wire's dtype that numpy dtype `d` is, if any.
pub(crate) fn wire_dtype(d: &Bound<'_, PyArrayDescr>) -> Option<Dtype> {
    let py = d.py();
    Dtype::ALL
        .iter()
        .copied()
        .find(|&t| with_elem!(t, T => d.is_equiv_to(&dtype::<T>(py))))
}

/// `obj` as a C-contiguous numpy array of a NetDAM dtype; `what` names the
/// argument in the messages.
pub(crate) fn vector<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<(Bound<'py, PyUntypedArray>, Dtype)> {
    let a = obj.cast::<PyUntypedArray>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be a numpy array of {DTYPES}, not {}",
            obj.get_type().name().map_or_else(|_| "?".into(), |n| n.to_string())
        ))
    })?;
    let d = a.dtype();
    let Some(dt) = wire_dtype(&d) else {
        return Err(PyTypeError::new_err(format!(
            "{what} has dtype {d}: NetDAM vectors are {DTYPES}; convert with {what}.astype(...)"
        )));
    };
    if !a.is_c_contiguous() {
        return Err(PyValueError::new_err(format!(
            "{what} is not C-contiguous (a slice with a step, a transpose?): NetDAM sends one run of \
             elements; pass numpy.ascontiguousarray({what})"
        )));
    }
    if a.len() == 0 {
        return Err(PyValueError::new_err(format!(
            "{what} is empty: give at least one element"
        )));
    }
    Ok((a.clone(), dt))
}

/// Runs `f` on the bytes of a vector checked by `vector` (no copy; numpy's
/// own memory is the wire's little-endian vector on this little-endian host).
pub(crate) fn with_bytes<R>(
    a: &Bound<'_, PyUntypedArray>,
    dt: Dtype,
    what: &str,
    f: impl FnOnce(&[u8]) -> PyResult<R>,
) -> PyResult<R> {
    with_elem!(dt, T => {
        let typed = a.cast::<PyArrayDyn<T>>()?.try_readonly().map_err(|e| borrow_error(what, e))?;
        f(as_bytes(typed.as_slice()?))
    })
}

/// `with_bytes`, writable: `f` may change the array's elements.
pub(crate) fn with_bytes_mut<R>(
    a: &Bound<'_, PyUntypedArray>,
    dt: Dtype,
    what: &str,
    f: impl FnOnce(&mut [u8]) -> PyResult<R>,
) -> PyResult<R> {
    with_elem!(dt, T => {
        let mut typed = a.cast::<PyArrayDyn<T>>()?.try_readwrite().map_err(|e| borrow_error(what, e))?;
        f(as_bytes_mut(typed.as_slice_mut()?))
    })
}

fn borrow_error(what: &str, e: BorrowError) -> PyErr {
    match e {
        BorrowError::NotWriteable => PyValueError::new_err(format!(
            "{what} is read-only: give a writable array (numpy's flags.writeable)"
        )),
        _ => PyValueError::new_err(format!(
            "{what} shares memory with the other array of the call (or is in use by another thread): \
             give arrays that do not overlap"
        )),
    }
}

/// A new array of `dt` holding the little-endian `bytes`, shaped like `like`.
pub(crate) fn from_le_bytes<'py>(
    py: Python<'py>,
    dt: Dtype,
    bytes: &[u8],
    like: &Bound<'py, PyUntypedArray>,
) -> PyResult<Bound<'py, PyAny>> {
    with_elem!(dt, T => {
        let mut v = vec![T::default(); bytes.len() / dt.width() as usize];
        as_bytes_mut(&mut v).copy_from_slice(bytes);
        PyArray1::from_vec(py, v).into_any().call_method1("reshape", (like.shape().to_vec(),))
    })
}

/// Runs `f` on the bytes of a C-contiguous buffer (bytes, bytearray,
/// memoryview, a numpy array of any dtype), without a copy.
pub(crate) fn with_buffer<R>(obj: &Bound<'_, PyAny>, what: &str, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    let buf = contiguous(obj, what)?;
    // SAFETY: the buffer is exported (held by `buf` until `f` returns) and
    // C-contiguous, so its `len_bytes` bytes from `buf_ptr` are one readable
    // run. Python code that changes them from another thread while `f` runs
    // without the GIL races, as with any buffer numpy hands to C.
    let bytes = unsafe { std::slice::from_raw_parts(buf.buf_ptr().cast::<u8>(), buf.len_bytes()) };
    Ok(f(bytes))
}

/// `obj` as a writable C-contiguous buffer, to be filled by `fill`.
pub(crate) fn writable_buffer(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<PyUntypedBuffer> {
    let buf = contiguous(obj, what)?;
    if buf.readonly() {
        return Err(PyTypeError::new_err(format!(
            "{what} is read-only: give a writable buffer (a bytearray, a numpy array)"
        )));
    }
    Ok(buf)
}

/// Copies `data`, of the buffer's size, into a buffer from `writable_buffer`.
pub(crate) fn fill(_gil: Python<'_>, buf: &PyUntypedBuffer, data: &[u8]) {
    assert_eq!(buf.len_bytes(), data.len(), "filled with what its size asked for");
    // SAFETY: a writable, C-contiguous export of `data.len()` bytes, held by
    // `buf`; the GIL is held, and `data` is our own memory.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf.buf_ptr().cast::<u8>(), data.len()) };
}

fn contiguous(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<PyUntypedBuffer> {
    let buf = PyUntypedBuffer::get(obj).map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must support the buffer protocol (bytes, bytearray, memoryview, a numpy array), not {}",
            obj.get_type().name().map_or_else(|_| "?".into(), |n| n.to_string())
        ))
    })?;
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err(format!(
            "{what} is not C-contiguous: pass numpy.ascontiguousarray({what}) or bytes({what})"
        )));
    }
    Ok(buf)
}
