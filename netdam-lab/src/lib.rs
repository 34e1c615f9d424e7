//! The NetDAM lab: what tests, demonstrations and benchmarks need and a
//! node does not. The namespace testbed (`testbed`, with its XDP switch and
//! tc chaos element), the memory-wall bench (`memwall`), the all-reduce
//! sweep (`sweep`), MPI jobs on the testbed (`mpi`), MPICH's test suite
//! as a third-party MPI client (`mpich_suite`), third-party MPI
//! benchmarks built and read (`mpi_benchmarks`), machine CPU time
//! (`cpu`) and SVG plots (`plot`). Their
//! eBPF programs are an object of their own (netdam-lab-ebpf), so the
//! node's XDP object carries none of them.

pub mod cpu;
pub mod generator;
pub mod interrupt;
pub mod memwall;
pub mod mpi;
pub mod mpi_benchmarks;
pub mod mpich_suite;
pub mod plot;
pub mod sweep;
pub mod testbed;

/// The lab's eBPF object (netdam-lab-ebpf): `netdam_switch`, `netdam_pass`,
/// `netdam_chaos`, `netdam_drop`.
pub static NETDAM_LAB_XDP: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/netdam-lab-xdp"));

/// The `netdam` binary that serves the lab's nodes: NETDAM_BIN if set, else
/// the one beside this executable (cargo builds both into one directory).
pub fn netdam_bin() -> std::io::Result<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("NETDAM_BIN") {
        return Ok(p.into());
    }
    let beside = std::env::current_exe()?.with_file_name("netdam");
    match beside.is_file() {
        true => Ok(beside),
        false => Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "no netdam binary at {}: build it (`cargo xtask build`) or set NETDAM_BIN to it",
                beside.display()
            ),
        )),
    }
}
