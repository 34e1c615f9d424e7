//! A client of libnetdam_mpi that nobody here wrote: MPICH's own
//! collective tests (`test/mpi/coll` of Debian's mpich source package,
//! fetched through apt during the test and cached, see
//! `netdam_lab::mpich_suite`), built unmodified with the system's mpicc,
//! each run on a 4-node testbed twice: with OpenMPI alone, then with
//! libnetdam_mpi preloaded into every rank. Both runs must print the
//! suite's " No Errors"; with the library, its counts
//! (NETDAM_MPI_VERBOSE=1) must show all-reduces offloaded to NetDAM where
//! the test makes any the library takes, so that a library doing nothing
//! cannot pass.

use std::{net::Ipv4Addr, path::Path, time::Duration};

use netdam_lab::{
    mpi::{output_within_retry, Mpirun, NetdamNodes, OffloadCounts, Preload},
    mpich_suite::{MpichSuite, DEFAULT_CACHE, NO_ERRORS},
    testbed::Testbed,
};
use netdam_tests::{netdam_bin, netdam_mpi_lib, require_root, unique_prefix};

const NODES: usize = 4;
const RKEY: u32 = 0x5C7E;
/// Each node's memory, all of it the collective's scratch area.
const MEM: u64 = 4 << 20;
/// One run of one program (they take a second or two here), tried twice
/// if it hangs (as mpirun's launch does now and then).
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// A program of the suite, its arguments (as its testlist gives them).
struct SuiteTest {
    name: &'static str,
    args: &'static [&'static str],
    /// Whether the library must take some of its calls (else it only has
    /// to stay out of the way: user-defined operators, say).
    taken: bool,
}

/// The suite's tests of the collectives the library takes calls of
/// (MPI_Allreduce of int, long, their unsigned kinds and float with SUM,
/// MIN, MAX and the bitwise ops; MPI_Reduce_scatter_block; MPI_Allgather),
/// on MPI_COMM_WORLD and the other communicators MTestGetIntracomm makes,
/// in place and not; and one whose calls it must leave to MPI.
const TESTS: &[SuiteTest] = &[
    SuiteTest {
        name: "coll/allred",
        args: &["-count=10"],
        taken: true,
    },
    SuiteTest {
        name: "coll/allred2",
        args: &[],
        taken: true,
    },
    SuiteTest {
        name: "coll/allred5",
        args: &[],
        taken: true,
    },
    SuiteTest {
        name: "coll/op_coll",
        args: &[],
        taken: true,
    },
    SuiteTest {
        name: "coll/red_scat_block",
        args: &[],
        taken: true,
    },
    SuiteTest {
        name: "coll/red_scat_block2",
        args: &[],
        taken: false,
    },
    SuiteTest {
        name: "coll/allgather2",
        args: &[],
        taken: true,
    },
    SuiteTest {
        name: "coll/allgather3",
        args: &[],
        taken: true,
    },
];

#[test]
fn mpich_collective_tests_pass_alone_and_through_netdam() {
    require_root();
    let suite =
        MpichSuite::obtain(Path::new(DEFAULT_CACHE)).expect("MPICH's test suite from Debian's mpich source package");
    let names: Vec<&str> = TESTS.iter().map(|t| t.name).collect();
    let programs = suite.build(&names).expect("build MPICH's tests with mpicc");
    eprintln!("MPICH test suite {} in {}", suite.version, suite.dir.display());
    let tb = Testbed::up(&unique_prefix(), NODES, 1500).expect("testbed");
    let group: Vec<Ipv4Addr> = tb.hosts.iter().map(|h| h.ip).collect();
    let nodes = NetdamNodes::serve(&tb, &netdam_bin(), RKEY, MEM, &[]).expect("serve every host");
    let mut settings = nodes.settings();
    settings.push(("NETDAM_MPI_VERBOSE", "1".into()));
    let preload = Preload::of_hosts(&tb, &group, &netdam_mpi_lib(), &settings).expect("the preload script");
    let mpirun = Mpirun::new(&tb).expect("mpirun's agent");
    for (t, program) in TESTS.iter().zip(&programs) {
        let what = format!("{} {}", t.name, t.args.join(" "));
        for with_library in [false, true] {
            let mut cmd = mpirun.command(&tb, &group).expect("mpirun");
            if with_library {
                cmd.arg(preload.path());
            }
            cmd.arg(program).args(t.args);
            let how = if with_library {
                "with libnetdam_mpi"
            } else {
                "with OpenMPI alone"
            };
            let out = output_within_retry(&mut cmd, RUN_LIMIT).unwrap_or_else(|e| panic!("{what} {how}: {e}"));
            let (stdout, stderr) = (
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
            assert!(
                out.status.success() && stdout.lines().any(|l| l == NO_ERRORS),
                "{what} {how}: {}\n{stdout}{stderr}",
                out.status
            );
            if !with_library {
                eprintln!("{what}: No Errors with OpenMPI alone");
                continue;
            }
            let counts = OffloadCounts::parse(&stderr)
                .unwrap_or_else(|| panic!("{what}: libnetdam_mpi printed no counts (not loaded?)\n{stderr}"));
            assert_eq!(
                counts.ranks, NODES as u32,
                "{what}: libnetdam_mpi's counts from some ranks only:\n{stderr}"
            );
            assert!(
                counts.offloaded > 0 || !t.taken,
                "{what}: libnetdam_mpi took none of its calls ({counts:?}):\n{stderr}"
            );
            eprintln!(
                "{what}: No Errors with libnetdam_mpi, {} call(s) taken, {} left to MPI",
                counts.offloaded, counts.fallen_back
            );
        }
    }
}
