//! Builds the lab's eBPF programs (netdam-lab-ebpf) for bpfel-unknown-none
//! with the nightly toolchain and bpf-linker, into OUT_DIR/netdam-lab-xdp.

use std::path::Path;

fn main() -> anyhow::Result<()> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")?;
    let ebpf_dir = Path::new(&manifest_dir).join("../netdam-lab-ebpf");
    let common_dir = Path::new(&manifest_dir).join("../netdam-common");
    println!("cargo:rerun-if-changed={}", common_dir.display());
    let root_dir = ebpf_dir
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("non-UTF-8 path {}", ebpf_dir.display()))?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "netdam-lab-ebpf",
            root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::Nightly,
    )
}
