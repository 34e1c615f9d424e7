//! What the `netdam` and `netdam-lab` commands share: logging, the async
//! runtime, and how an error becomes a message and an exit code.

use std::{future::Future, process::ExitCode};

use crate::ClientError;

/// Runs a command's future with `RUST_LOG` logging (info by default) on a
/// two-thread runtime, and turns its outcome into the exit code the README
/// documents: 0 ok, 1 error, 3 no answer, 4 refused (2, bad arguments, is
/// clap's).
pub fn run_to_exit(command: impl Future<Output = anyhow::Result<()>>) -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            let code = e.downcast_ref::<ClientError>().map_or(1, ClientError::exit_code);
            ExitCode::from(code as u8)
        }
    }
}

/// The error and its causes, joined by ": ", leaving out a cause whose
/// text the message already shows (errors that print their source too).
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !out.contains(&c) {
            out.push_str(": ");
            out.push_str(&c);
        }
    }
    out
}
