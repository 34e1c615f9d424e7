//! Removing what a lab process made when it is interrupted (SIGINT,
//! SIGTERM): testbeds (their namespaces, pins and whatever still runs in
//! them) and temporary files (`TempPath`) register an action while they live; the first
//! signal runs the live ones, newest first, and ends the process with
//! 128 + the signal's number, as a shell reports a process the signal
//! killed. Without `clean_up_on_signals` the signals keep their default
//! action and the actions never run (drops do the work then).

use std::{
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex, MutexGuard, OnceLock,
    },
};

use signal_hook::{
    consts::{SIGINT, SIGTERM},
    iterator::Signals,
};

type Action = Box<dyn FnOnce() + Send>;

/// The live actions, oldest first.
static ACTIONS: Mutex<Vec<(u64, Action)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

fn actions() -> MutexGuard<'static, Vec<(u64, Action)>> {
    ACTIONS.lock().unwrap_or_else(|e| e.into_inner())
}

/// An action that runs if the process is interrupted while this lives;
/// dropping it forgets the action (its owner's drop cleans up then).
#[derive(Debug)]
#[must_use = "the action is forgotten when this is dropped"]
pub struct OnInterrupt(u64);

impl OnInterrupt {
    pub fn register(action: impl FnOnce() + Send + 'static) -> OnInterrupt {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        actions().push((id, Box::new(action)));
        OnInterrupt(id)
    }
}

impl Drop for OnInterrupt {
    fn drop(&mut self) {
        // Waits while an interruption runs the actions: the process ends
        // after them, and the owner must not clean up at the same time.
        actions().retain(|(id, _)| *id != self.0);
    }
}

/// A temporary file or directory of the process's own: removed on drop and
/// if the process is interrupted while it lives.
#[derive(Debug)]
pub struct TempPath {
    path: PathBuf,
    _on_interrupt: OnInterrupt,
}

impl TempPath {
    /// Takes charge of `path` (which need not exist yet).
    pub fn new(path: PathBuf) -> TempPath {
        let p = path.clone();
        TempPath {
            path,
            _on_interrupt: OnInterrupt::register(move || remove(&p)),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        remove(&self.path);
    }
}

fn remove(path: &Path) {
    if path.is_dir() {
        let _ = std::fs::remove_dir_all(path);
    } else {
        let _ = std::fs::remove_file(path);
    }
}

/// From now on, SIGINT and SIGTERM run the registered actions and end the
/// process (`program` names it in the one line said on stderr). Once per
/// process; later calls do nothing.
pub fn clean_up_on_signals(program: &'static str) -> std::io::Result<()> {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    let mut signals = Signals::new([SIGINT, SIGTERM])?;
    let _ = INSTALLED.set(());
    std::thread::Builder::new().name("interrupt".into()).spawn(move || {
        if let Some(signal) = signals.forever().next() {
            let name = if signal == SIGINT { "SIGINT" } else { "SIGTERM" };
            eprintln!("{program}: {name}: removing the testbeds and files it made, then exiting");
            let mut live = actions();
            while let Some((_, action)) = live.pop() {
                action();
            }
            std::process::exit(128 + signal);
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn dropped_actions_are_forgotten_and_live_ones_kept() {
        let ran = Arc::new(AtomicU64::new(0));
        let r = ran.clone();
        let kept = OnInterrupt::register(move || {
            r.fetch_add(1, Ordering::Relaxed);
        });
        let r = ran.clone();
        drop(OnInterrupt::register(move || {
            r.fetch_add(10, Ordering::Relaxed);
        }));
        // Run what an interruption would run, of this test's actions only.
        let mine: Vec<Action> = {
            let mut live = actions();
            let (mine, others): (Vec<_>, Vec<_>) = live.drain(..).partition(|(id, _)| *id == kept.0);
            *live = others;
            mine.into_iter().map(|(_, a)| a).collect()
        };
        assert_eq!(mine.len(), 1, "the dropped action is gone, the live one is there");
        mine.into_iter().for_each(|a| a());
        assert_eq!(ran.load(Ordering::Relaxed), 1);
    }
}
