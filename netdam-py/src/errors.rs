//! The module's exceptions and how the library's errors become them: the
//! message is always the library's own (it says what to do).

use netdam_common::Status;
use netdam_user::{controller::ControllerError, ClientError};
use pyo3::{
    create_exception,
    exceptions::{PyException, PyValueError},
    prelude::*,
};

create_exception!(
    netdam,
    Error,
    PyException,
    "Base of every error NetDAM reports: catch it for all of them."
);
create_exception!(
    netdam,
    TimeoutError,
    Error,
    "No answer in time: the node (or a member of the group) did not answer after every retry. \
     Is `netdam serve` running there, on that port, and reachable from this host?"
);
create_exception!(
    netdam,
    RefusedError,
    Error,
    "A node answered with a status other than OK. `.status` is its name in PROTOCOL.md \
     (e.g. \"BAD_KEY\", \"OUT_OF_BOUNDS\", \"FORBIDDEN\") and `.code` its number."
);
create_exception!(
    netdam,
    NodeError,
    Error,
    "This host's node cannot be opened or used: no `netdam serve` pinned its maps in the \
     pin directory, it is still starting, or an address lies outside its memory."
);

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("TimeoutError", py.get_type::<TimeoutError>())?;
    m.add("RefusedError", py.get_type::<RefusedError>())?;
    m.add("NodeError", py.get_type::<NodeError>())?;
    Ok(())
}

/// `netdam.RefusedError` with the status's name and code as attributes.
pub(crate) fn refused(py: Python<'_>, message: String, status: Status) -> PyErr {
    let err = RefusedError::new_err(message);
    let value = err.value(py);
    // Setting attributes on a fresh exception instance does not fail.
    let _ = value.setattr("status", status.name());
    let _ = value.setattr("code", status as u8);
    err
}

pub(crate) fn client_error(py: Python<'_>, e: ClientError) -> PyErr {
    let message = e.to_string();
    match e {
        ClientError::Timeout { .. } => TimeoutError::new_err(message),
        ClientError::Refused { status, .. } => refused(py, message, status),
        ClientError::Usage { .. } => PyValueError::new_err(message),
        ClientError::Malformed { .. } | ClientError::Io(_) | ClientError::AfXdp { .. } => Error::new_err(message),
    }
}

pub(crate) fn node_error(e: ControllerError) -> PyErr {
    match e {
        ControllerError::MemoryRange { .. } => PyValueError::new_err(e.to_string()),
        _ => NodeError::new_err(e.to_string()),
    }
}
