//! Shared harness of the privileged tests: the real XDP program loaded into
//! the real kernel, driven through BPF_PROG_TEST_RUN, and the namespace
//! testbed. Every test here needs root; `cargo xtask test` runs them.

pub mod progrun;

/// Fails the test with a clear message when not root.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!(
            "this test loads XDP programs and makes network namespaces: it needs root (run `sudo -E cargo xtask test`)"
        );
    }
}
