//! Builds the XDP program (netdam-ebpf) for bpfel-unknown-none with the
//! nightly toolchain and bpf-linker, into OUT_DIR/netdam-xdp.
//! `cargo xtask setup` installs what this needs.

use std::path::Path;

fn main() -> anyhow::Result<()> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")?;
    let ebpf_dir = Path::new(&manifest_dir).join("../netdam-ebpf");
    let common_dir = Path::new(&manifest_dir).join("../netdam-common");
    println!("cargo:rerun-if-changed={}", common_dir.display());
    let root_dir = ebpf_dir
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("non-UTF-8 path {}", ebpf_dir.display()))?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "netdam-ebpf",
            root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::Nightly,
    )
}
