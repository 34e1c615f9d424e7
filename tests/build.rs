//! Compiles the HLS port's engine (fpga-port/src) into the tests, so that
//! the differential fuzzer holds it to the reference model frame by frame
//! beside the XDP program.
fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fpga-port");
    for f in [
        "src/netdam_core.c",
        "src/netdam_alu.c",
        "include/netdam.h",
        "include/netdam_core.h",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    cc::Build::new()
        .std("c11")
        .include(root.join("include"))
        .file(root.join("src/netdam_core.c"))
        .file(root.join("src/netdam_alu.c"))
        .flag_if_supported("-Wno-unknown-pragmas")
        .warnings_into_errors(true)
        .compile("netdam_fpga");
}
