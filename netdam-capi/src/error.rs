//! The error model of netdam.h: a status code per call, the message and
//! the wire status of the calling thread's last failure, and the boundary
//! that turns a panic into NETDAM_ERR_INTERNAL instead of unwinding into C.

use std::{
    cell::RefCell,
    ffi::{c_char, c_int, CStr, CString},
    panic::{catch_unwind, AssertUnwindSafe},
    sync::Once,
};

use netdam_common::Status as WireStatus;
use netdam_user::{
    collective::{staged::StagedError, CollectiveError},
    controller::ControllerError,
    ClientError,
};

/// netdam_status.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok = 0,
    Arg = -1,
    Node = -2,
    Timeout = -3,
    Refused = -4,
    Group = -5,
    Range = -6,
    Io = -7,
    Internal = -8,
}

impl Status {
    pub const ALL: [Status; 9] = [
        Status::Ok,
        Status::Arg,
        Status::Node,
        Status::Timeout,
        Status::Refused,
        Status::Group,
        Status::Range,
        Status::Io,
        Status::Internal,
    ];

    /// The name netdam.h gives it.
    pub const fn name(self) -> &'static str {
        match self {
            Status::Ok => "NETDAM_OK",
            Status::Arg => "NETDAM_ERR_ARG",
            Status::Node => "NETDAM_ERR_NODE",
            Status::Timeout => "NETDAM_ERR_TIMEOUT",
            Status::Refused => "NETDAM_ERR_REFUSED",
            Status::Group => "NETDAM_ERR_GROUP",
            Status::Range => "NETDAM_ERR_RANGE",
            Status::Io => "NETDAM_ERR_IO",
            Status::Internal => "NETDAM_ERR_INTERNAL",
        }
    }

    /// What netdam_strerror says.
    const fn text(self) -> &'static CStr {
        match self {
            Status::Ok => c"no error",
            Status::Arg => c"invalid argument",
            Status::Node => c"the local node cannot be opened",
            Status::Timeout => c"no answer after every retry",
            Status::Refused => c"a node refused the request",
            Status::Group => c"invalid group",
            Status::Range => c"address range outside the memory or the scratch area",
            Status::Io => c"a system call failed",
            Status::Internal => c"internal error in libnetdam",
        }
    }
}

/// A failed call: its status, what a person reads, and the wire status of a refusal.
#[derive(Debug)]
pub struct Error {
    pub status: Status,
    pub wire: Option<WireStatus>,
    pub message: String,
}

impl Error {
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error {
            status,
            wire: None,
            message: message.into(),
        }
    }

    pub fn arg(message: impl Into<String>) -> Error {
        Error::new(Status::Arg, message)
    }

    /// The argument `name` is a null pointer.
    pub fn null(name: &str) -> Error {
        Error::arg(format!("{name} is NULL"))
    }

    /// The same error, its message behind `what` (what was being done).
    pub fn context(mut self, what: impl std::fmt::Display) -> Error {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

impl From<ClientError> for Error {
    fn from(e: ClientError) -> Error {
        let status = match &e {
            ClientError::Timeout { .. } => Status::Timeout,
            ClientError::Refused { status, .. } => return refused(*status, e.to_string()),
            ClientError::Usage { .. } => Status::Arg,
            // Something other than a NetDAM node answers on the port.
            ClientError::Malformed { .. } | ClientError::Io(_) | ClientError::AfXdp { .. } => Status::Io,
        };
        Error::new(status, e.to_string())
    }
}

impl From<CollectiveError> for Error {
    fn from(e: CollectiveError) -> Error {
        use CollectiveError as C;
        let status = match &e {
            C::GroupSize(_) | C::Duplicate(_) | C::NotMember { .. } => Status::Group,
            C::Layout(_) => Status::Range,
            C::Mtu { .. } => Status::Arg,
            C::Timeout { .. } | C::Incomplete { .. } => Status::Timeout,
            C::Refused { status, .. } => return refused(*status, e.to_string()),
            C::Stale { .. } => return refused(WireStatus::Stale, e.to_string()),
            C::NotReady { .. } => return refused(WireStatus::NotReady, e.to_string()),
            C::Mismatch { .. } => return refused(WireStatus::Mismatch, e.to_string()),
            C::PeerFailed { .. } => return refused(WireStatus::Stale, e.to_string()),
            C::Node(c) => controller_status(c),
            C::Io(..) => Status::Io,
        };
        Error::new(status, e.to_string())
    }
}

impl From<ControllerError> for Error {
    fn from(e: ControllerError) -> Error {
        Error::new(controller_status(&e), e.to_string())
    }
}

impl From<StagedError> for Error {
    fn from(e: StagedError) -> Error {
        use StagedError as S;
        let status = match e {
            S::Collective(c) => return c.into(),
            S::ScratchTooSmall { .. } | S::ScratchOutside { .. } | S::NoParts { .. } => Status::Range,
            S::Misaligned(_) | S::Length { .. } | S::Mismatch { .. } => Status::Arg,
            // The group sets the sync area at the scratch area: a bug if not.
            S::SyncElsewhere { .. } => Status::Internal,
        };
        Error::new(status, e.to_string())
    }
}

fn controller_status(e: &ControllerError) -> Status {
    match e {
        ControllerError::MemoryRange { .. } => Status::Range,
        _ => Status::Node,
    }
}

fn refused(wire: WireStatus, message: String) -> Error {
    Error {
        status: Status::Refused,
        wire: Some(wire),
        message,
    }
}

/// The calling thread's last failure, as C reads it.
struct Last {
    message: CString,
    wire: c_int,
}

thread_local! {
    static LAST: RefCell<Last> = RefCell::new(Last { message: CString::default(), wire: 0 });
    /// Where the last panic on this thread happened (the panic hook's note).
    static PANIC_AT: RefCell<Option<String>> = const { RefCell::new(None) };
    /// Whether this thread is inside `boundary`, which reports its panics.
    static INSIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn remember(e: &Error) {
    // Interior NULs would cut the message short: show them instead.
    let message = CString::new(e.message.replace('\0', "\\0")).expect("no NUL left");
    LAST.with(|l| {
        *l.borrow_mut() = Last {
            message,
            wire: e.wire.map_or(0, |w| w as c_int),
        }
    });
}

/// Once per process: logging when RUST_LOG asks for it, and a panic hook
/// that notes where a panic inside `boundary` happened instead of printing
/// it (the library writes nothing unless RUST_LOG asks); other panics are
/// the default hook's.
fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let logging = std::env::var_os("RUST_LOG").is_some();
        if logging {
            let _ = env_logger::try_init();
        }
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANIC_AT.with(|p| *p.borrow_mut() = info.location().map(|l| l.to_string()));
            if logging || !INSIDE.get() {
                default(info);
            }
        }));
    });
}

/// Runs `f` at the API boundary: its value, or `failed(error)` with the
/// error remembered for netdam_last_error; a panic is NETDAM_ERR_INTERNAL.
pub fn boundary<T>(failed: impl FnOnce(&Error) -> T, f: impl FnOnce() -> Result<T, Error>) -> T {
    init();
    let outer = INSIDE.replace(true);
    let result = catch_unwind(AssertUnwindSafe(f));
    INSIDE.set(outer);
    let e = match result {
        Ok(Ok(v)) => return v,
        Ok(Err(e)) => e,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            let at = PANIC_AT.with(|p| p.borrow_mut().take()).unwrap_or_default();
            Error::new(
                Status::Internal,
                format!("a bug in libnetdam (please report it): panicked at {at}: {what}"),
            )
        }
    };
    remember(&e);
    failed(&e)
}

/// `boundary` for a call that returns a netdam_status.
pub fn call(f: impl FnOnce() -> Result<(), Error>) -> c_int {
    boundary(|e| e.status as c_int, || f().map(|()| Status::Ok as c_int))
}

#[no_mangle]
pub extern "C" fn netdam_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().message.as_ptr())
}

#[no_mangle]
pub extern "C" fn netdam_last_wire_status() -> c_int {
    LAST.with(|l| l.borrow().wire)
}

#[no_mangle]
pub extern "C" fn netdam_strerror(status: c_int) -> *const c_char {
    Status::ALL
        .iter()
        .find(|s| **s as c_int == status)
        .map_or(c"unknown netdam_status", |s| s.text())
        .as_ptr()
}

#[no_mangle]
pub extern "C" fn netdam_version() -> *const c_char {
    const VERSION: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => panic!("the version has no NUL"),
    };
    VERSION.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> (String, c_int) {
        // SAFETY: netdam_last_error returns a NUL-terminated string that lives until the next failure.
        let m = unsafe { CStr::from_ptr(netdam_last_error()) };
        (m.to_string_lossy().into_owned(), netdam_last_wire_status())
    }

    #[test]
    fn failures_are_remembered_per_thread_and_panics_caught() {
        assert_eq!(last(), (String::new(), 0), "nothing failed yet");
        assert_eq!(call(|| Err(Error::null("out"))), Status::Arg as c_int);
        assert_eq!(last(), ("out is NULL".into(), 0));
        assert_eq!(call(|| Ok(())), 0);
        assert_eq!(last().0, "out is NULL", "a success leaves the last failure");
        assert_eq!(
            call(|| Err(refused(WireStatus::BadKey, "refused".into()))),
            Status::Refused as c_int
        );
        assert_eq!(last(), ("refused".into(), 4));
        std::thread::spawn(|| assert_eq!(last(), (String::new(), 0), "another thread's"))
            .join()
            .unwrap();
        assert_eq!(call(|| panic!("boom {}", 7)), Status::Internal as c_int);
        let (m, wire) = last();
        assert!(
            m.starts_with("a bug in libnetdam") && m.contains("error.rs") && m.ends_with("boom 7"),
            "{m}"
        );
        assert_eq!(wire, 0);
        assert_eq!(boundary(|_| 9u32, || Err(Error::arg("x\0y"))), 9);
        assert_eq!(last().0, "x\\0y");
    }

    #[test]
    fn every_status_has_its_own_text() {
        let texts: std::collections::HashSet<_> = Status::ALL.iter().map(|s| netdam_strerror(*s as c_int)).collect();
        assert_eq!(texts.len(), Status::ALL.len());
        // SAFETY: static C strings.
        let unknown = unsafe { CStr::from_ptr(netdam_strerror(-99)) };
        assert_eq!(unknown, c"unknown netdam_status");
        let v = unsafe { CStr::from_ptr(netdam_version()) };
        assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}
