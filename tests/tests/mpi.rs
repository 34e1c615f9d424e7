//! Tier 3: libnetdam_mpi.so, the PMPI interposition library (docs/mpi.md),
//! under real OpenMPI jobs on a 4-node testbed, loaded with LD_PRELOAD into
//! a C program (tests/mpi/check.c) and an mpi4py script
//! (tests/mpi/allreduce_mpi4py.py). Every rank's input and result of every
//! call is held to the ring's defined result (`chain::ring_result`), the
//! library's counters (NETDAM_MPI_VERBOSE) to what should have gone through
//! NetDAM and what should not, and the nodes' counters to the chains that
//! ran; bad arguments get the MPI error the standard names, on every rank,
//! within a time limit.

use std::{
    collections::BTreeMap,
    ffi::OsStr,
    path::{Path, PathBuf},
    process::Output,
    sync::{Mutex, MutexGuard},
    time::Duration,
};

use netdam_common::{
    chain::{ring_chunk_elems, ring_result},
    wire::{Alu, Dtype, Status},
};
use netdam_lab::{
    interrupt::TempPath,
    mpi::{mpicc, output_within_retry, Mpirun, NetdamNodes, Preload},
    testbed::Testbed,
};
use netdam_tests::{netdam_bin, netdam_mpi_lib, require_root, temp_dir, unique_prefix, venv_python};
use netdam_user::stats::Stats;

const RKEY: u32 = 0x3D1;
const MEM: u64 = 64 << 10;
/// The scratch area at address 0 of every node: the sync area, then input,
/// output and cell parts of 12 KiB, each holding the cells of one round of
/// chunks of a group of 4 (4 x 342 i32, 4 x (16 + 1,368) bytes of cells):
/// 10,000 elements run as several rings.
const SCRATCH_LEN: u64 = 64 + 3 * 12288;
const MTU: u32 = 1500;
const NODES: usize = 4;
/// One element, a few, one past a round of chunks of 4 members (4 x 342 + 1), more than the scratch area holds.
const SIZES: &str = "1,7,1369,10000";
/// Every job ends well within this (the longest, the sweep, in about 10 s).
const LIMIT: Duration = Duration::from_secs(120);

/// One testbed of these tests at a time: the ranks of two MPI jobs would share 2 cores.
static ONE_BED: Mutex<()> = Mutex::new(());

/// Where rank i runs: in host `host`, with its node or with none configured.
#[derive(Clone, Copy)]
struct Rank {
    host: usize,
    node: bool,
}

/// One rank in each host, each with its node.
fn every_host() -> Vec<Rank> {
    (0..NODES).map(|host| Rank { host, node: true }).collect()
}

/// A 4-node testbed, every node served with a region holding the scratch
/// area and the others as peers, and what runs MPI jobs on it.
/// (Fields drop in this order: the nodes stop before the testbed goes.)
struct MpiBed {
    _nodes: NetdamNodes,
    mpirun: Mpirun,
    dir: TempPath,
    tb: Testbed,
    _one: MutexGuard<'static, ()>,
}

impl MpiBed {
    fn up() -> MpiBed {
        require_root();
        let one = ONE_BED.lock().unwrap_or_else(|e| e.into_inner());
        let tb = Testbed::up(&unique_prefix(), NODES, MTU).expect("testbed up");
        let nodes = NetdamNodes::serve(&tb, &netdam_bin(), RKEY, MEM, &[]).expect("netdam serve");
        let mpirun = Mpirun::new(&tb).expect("mpirun's agent");
        let dir = temp_dir(&format!("mpi-{}", tb.prefix));
        MpiBed {
            tb,
            _nodes: nodes,
            mpirun,
            dir,
            _one: one,
        }
    }

    /// tests/mpi/check.c, compiled.
    fn check_program(&self) -> PathBuf {
        let exe = self.dir.path().join("check");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi/check.c");
        mpicc(&[&src], &["-lm"], &exe).expect("mpicc tests/mpi/check.c");
        exe
    }

    /// Runs `program` as rank i in host `ranks[i].host`, through a script
    /// that gives each rank its node's pin directory (or none), the scratch
    /// area, NETDAM_MPI_VERBOSE=1, `env`, and the library when `preload`.
    fn run(&self, ranks: &[Rank], preload: bool, env: &[(&str, &str)], program: &[&OsStr]) -> Output {
        let mut settings = vec![
            ("NETDAM_RKEY", RKEY.to_string()),
            ("NETDAM_SCRATCH_ADDR", "0".into()),
            ("NETDAM_SCRATCH_LEN", SCRATCH_LEN.to_string()),
            ("NETDAM_MPI_VERBOSE", "1".into()),
        ];
        settings.extend(env.iter().map(|(k, v)| (*k, v.to_string())));
        let pin_dirs: Vec<_> = ranks
            .iter()
            .map(|r| r.node.then_some(self.tb.hosts[r.host].pin_dir.as_path()))
            .collect();
        let lib = netdam_mpi_lib();
        let script = Preload::new(&pin_dirs, preload.then_some(lib.as_path()), &settings).expect("the rank script");
        let hosts: Vec<_> = ranks.iter().map(|r| self.tb.hosts[r.host].ip).collect();
        let mut cmd = self.mpirun.command(&self.tb, &hosts).expect("mpirun command");
        cmd.arg(script.path()).args(program);
        output_within_retry(&mut cmd, LIMIT).expect("mpirun within the limit")
    }

    /// Every node's CHAIN requests answered OK so far.
    fn chains(&self) -> Vec<u64> {
        self.tb
            .hosts
            .iter()
            .map(|h| {
                Stats::read_pinned(&h.pin_dir)
                    .expect("the node's counters")
                    .requests("CHAIN", Status::Ok)
            })
            .collect()
    }
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn succeeded(o: &Output) -> (String, String) {
    let (out, err) = text(o);
    assert!(o.status.success(), "mpirun failed ({}):\n{out}\n{err}", o.status);
    (out, err)
}

/// One rank's NETDAM_MPI_VERBOSE line: calls offloaded per collective,
/// calls left to MPI per reason, errors.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counters {
    offloaded: BTreeMap<String, u64>,
    fell_back: BTreeMap<String, u64>,
    errors: u64,
}

/// "name n, name n" into a map, without the zeros.
fn pairs(s: &str) -> BTreeMap<String, u64> {
    s.split(", ")
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.rsplit_once(' ').unwrap_or_else(|| panic!("{p:?}: not `name count`"));
            (
                k.to_string(),
                v.parse().unwrap_or_else(|_| panic!("{p:?}: not a count")),
            )
        })
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// Rank `rank`'s counters in `stderr`:
/// "netdam-mpi: rank R: offloaded N (allreduce a, ...), fell back M (reason m, ...), errors E".
fn counters(stderr: &str, rank: usize) -> Counters {
    let prefix = format!("netdam-mpi: rank {rank}: offloaded ");
    // Anywhere in a line: mpirun may glue another rank's unfinished line in front.
    let at = stderr
        .find(&prefix)
        .unwrap_or_else(|| panic!("no counters of rank {rank} in:\n{stderr}"));
    let line = stderr[at + prefix.len()..].lines().next().unwrap_or_default();
    let parse = || -> Option<Counters> {
        let (_, rest) = line.split_once(" (")?;
        let (offloaded, rest) = rest.split_once("), fell back ")?;
        let (_, rest) = rest.split_once(" (")?;
        let (fell_back, errors) = rest.split_once("), errors ")?;
        Some(Counters {
            offloaded: pairs(offloaded),
            fell_back: pairs(fell_back),
            errors: errors.trim().parse().ok()?,
        })
    };
    parse().unwrap_or_else(|| panic!("rank {rank}'s counters {line:?} are not in the expected form"))
}

/// One call of check.c as a rank recorded it.
#[derive(Debug)]
struct Record {
    collective: u32,
    ty: u32,
    op: u32,
    in_place: u32,
    color: u32,
    rank: u32,
    size: u32,
    count: u64,
    input: Vec<u8>,
    output: Vec<u8>,
}

const ALLREDUCE: u32 = 1;
const REDUCE_SCATTER_BLOCK: u32 = 2;
const ALLGATHER: u32 = 3;
/// check.c's codes beyond NetDAM's dtypes (1 to 5) and ALU ops (1 to 6).
const T_UNSIGNED_LONG: u32 = 4;
const T_FLOAT: u32 = 5;
const T_DOUBLE: u32 = 6;
const T_CHAR: u32 = 7;
const O_PROD: u32 = 7;

fn read_records(path: &Path) -> Vec<Record> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let mut records = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let (in_bytes, out_bytes) = (u64_at(at + 40) as usize, u64_at(at + 48) as usize);
        let data = at + 56;
        records.push(Record {
            collective: u32_at(at),
            ty: u32_at(at + 4),
            op: u32_at(at + 8),
            in_place: u32_at(at + 12),
            color: u32_at(at + 16),
            rank: u32_at(at + 20),
            size: u32_at(at + 24),
            count: u64_at(at + 32),
            input: b[data..data + in_bytes].to_vec(),
            output: b[data + in_bytes..data + in_bytes + out_bytes].to_vec(),
        });
        at = data + in_bytes + out_bytes;
    }
    records
}

fn width(ty: u32) -> usize {
    match ty {
        T_DOUBLE => 8,
        T_CHAR => 1,
        t => Dtype::from_u8(t as u8).expect("a NetDAM dtype").width() as usize,
    }
}

/// Whether MPI's own result of a reduction can be held to the reference:
/// not for floats (MPI's order gives other bits), nor for MIN and MAX of
/// MPI_UNSIGNED_LONG, which OpenMPI 4.1.2 to 4.1.4 compare as signed
/// (open-mpi/ompi#10525; NetDAM's are unsigned, as the check of its
/// results shows).
fn mpi_checkable(ty: u32, op: u32) -> bool {
    !(ty == T_FLOAT || (ty == T_UNSIGNED_LONG && (op == 2 || op == 3)))
}

/// The reduction of `inputs` (one per member, in the communicator's rank
/// order): NetDAM's types and operators as the ring folds them; MPI_DOUBLE
/// sums (of whole numbers, exact in any order) and int products (any order
/// wraps alike) as MPI computes them. None for what MPI's own results
/// (`mpi_own`) cannot be held to (`mpi_checkable`).
fn reduction(ty: u32, op: u32, inputs: &[&[u8]], mpi_own: bool) -> Option<Vec<u8>> {
    if mpi_own && !mpi_checkable(ty, op) {
        return None;
    }
    let mut out = vec![0u8; inputs[0].len()];
    match (ty, op) {
        (T_DOUBLE, 1) => {
            for (i, o) in out.chunks_exact_mut(8).enumerate() {
                let x = |m: &[u8]| f64::from_le_bytes(m[i * 8..i * 8 + 8].try_into().unwrap());
                o.copy_from_slice(&inputs.iter().map(|m| x(m)).sum::<f64>().to_le_bytes());
            }
        }
        (1, O_PROD) => {
            for (i, o) in out.chunks_exact_mut(4).enumerate() {
                let x = |m: &[u8]| i32::from_le_bytes(m[i * 4..i * 4 + 4].try_into().unwrap());
                o.copy_from_slice(&inputs.iter().fold(1i32, |p, m| p.wrapping_mul(x(m))).to_le_bytes());
            }
        }
        (t, a) => {
            let dtype = Dtype::from_u8(t as u8).expect("a NetDAM dtype");
            let alu = Alu::from_u8(a as u8).expect("a NetDAM op");
            let e = ring_chunk_elems(MTU, inputs.len(), dtype.width());
            ring_result(dtype, alu, inputs, e, 0, &mut out);
        }
    }
    Some(out)
}

/// What every member of one call must have got, in its rank order; None where unchecked.
fn expected(members: &[&Record], mpi_own: bool) -> Vec<Option<Vec<u8>>> {
    let first = members[0];
    let inputs: Vec<&[u8]> = members.iter().map(|r| &r.input[..]).collect();
    match first.collective {
        ALLREDUCE => vec![reduction(first.ty, first.op, &inputs, mpi_own); members.len()],
        REDUCE_SCATTER_BLOCK => {
            let whole = reduction(first.ty, first.op, &inputs, mpi_own);
            let block = first.count as usize * width(first.ty);
            (0..members.len())
                .map(|r| whole.as_ref().map(|w| w[r * block..(r + 1) * block].to_vec()))
                .collect()
        }
        ALLGATHER => vec![Some(inputs.concat()); members.len()],
        c => panic!("collective {c} in a record"),
    }
}

/// Checks every call of a sweep (`records[world rank]`): each member's
/// result against what it must be (`mpi_own`: all computed by MPI). Returns
/// the results checked.
fn check_sweep(records: &[Vec<Record>], mpi_own: bool) -> usize {
    let calls = records[0].len();
    assert!(calls > 0, "no records");
    for (r, recs) in records.iter().enumerate() {
        assert_eq!(
            recs.len(),
            calls,
            "rank {r} recorded {} calls, rank 0 {calls}",
            recs.len()
        );
    }
    let mut checked = 0;
    for j in 0..calls {
        let mut comms: BTreeMap<u32, Vec<&Record>> = BTreeMap::new();
        for recs in records {
            comms.entry(recs[j].color).or_default().push(&recs[j]);
        }
        for (color, mut members) in comms {
            members.sort_by_key(|r| r.rank);
            let f = members[0];
            let what = format!(
                "call {j} (collective {}, type {}, op {}, in place {}, count {}, color {color})",
                f.collective, f.ty, f.op, f.in_place, f.count
            );
            assert!(
                members.iter().enumerate().all(|(i, r)| r.rank as usize == i
                    && r.size as usize == members.len()
                    && (r.collective, r.ty, r.op, r.in_place, r.count)
                        == (f.collective, f.ty, f.op, f.in_place, f.count)),
                "{what}: the members' records disagree"
            );
            for (rank, (m, want)) in members.iter().zip(expected(&members, mpi_own)).enumerate() {
                let Some(want) = want else { continue };
                let w = width(f.ty);
                if let Some(i) = (0..want.len() / w).find(|&i| m.output[i * w..(i + 1) * w] != want[i * w..(i + 1) * w])
                {
                    panic!(
                        "{what}, rank {rank}: element {i} is {:02x?}, it must be {:02x?}",
                        &m.output[i * w..(i + 1) * w],
                        &want[i * w..(i + 1) * w]
                    );
                }
                checked += 1;
            }
        }
    }
    checked
}

/// How a call of check.c's sweep must go when MPI_COMM_WORLD's ranks form a
/// group: on NetDAM (Ok, the collective's counter name) or to MPI (Err, the reason).
fn route(r: &Record) -> Result<&'static str, &'static str> {
    if r.color >= 2 {
        return Err("subset");
    }
    match (r.collective, r.ty, r.op) {
        (ALLGATHER, T_CHAR, _) if !r.count.is_multiple_of(4) => Err("dtype"),
        (ALLGATHER, _, _) => Ok("allgather"),
        (_, T_DOUBLE, _) => Err("dtype"),
        (_, _, O_PROD) => Err("op"),
        (ALLREDUCE, _, _) => Ok("allreduce"),
        _ => Ok("reduce_scatter_block"),
    }
}

/// The counters a rank must show for `records`, every call routed by `route`.
fn expected_counters(records: &[Record], route: impl Fn(&Record) -> Result<&'static str, &'static str>) -> Counters {
    let mut c = Counters::default();
    for r in records {
        let (map, name) = match route(r) {
            Ok(n) => (&mut c.offloaded, n),
            Err(n) => (&mut c.fell_back, n),
        };
        *map.entry(name.to_string()).or_default() += 1;
    }
    c
}

/// check.c's sweep on `ranks` with or without the library: the records of every rank.
fn sweep(bed: &MpiBed, ranks: &[Rank], preload: bool, sizes: &str) -> (Vec<Vec<Record>>, String) {
    let exe = bed.check_program();
    let out_dir = bed.dir.path().join(if preload { "with" } else { "without" });
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir).unwrap();
    let o = bed.run(
        ranks,
        preload,
        &[("NETDAM_MIN_BYTES", "0")],
        &[
            exe.as_os_str(),
            OsStr::new("sweep"),
            out_dir.as_os_str(),
            OsStr::new(sizes),
        ],
    );
    let (_, err) = succeeded(&o);
    let records = (0..ranks.len())
        .map(|r| read_records(&out_dir.join(format!("rank-{r}.bin"))))
        .collect();
    (records, err)
}

#[test]
fn every_type_and_operator_through_netdam_is_bit_exact_and_plain_mpi_agrees_on_integers() {
    let bed = MpiBed::up();
    let before = bed.chains();
    let (records, stderr) = sweep(&bed, &every_host(), true, SIZES);
    let checked = check_sweep(&records, false);
    for (rank, recs) in records.iter().enumerate() {
        assert_eq!(
            counters(&stderr, rank),
            expected_counters(recs, route),
            "rank {rank}: what went through NetDAM and what to MPI\n{stderr}"
        );
    }
    let after = bed.chains();
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!(
            a > b,
            "node {i} answered no CHAIN: NetDAM was not used ({b} before, {a} after)"
        );
    }
    eprintln!("{checked} results checked; CHAIN requests per node: {after:?}");

    // The same program without the library: MPI's own results, the same for integers.
    let (plain, stderr) = sweep(&bed, &every_host(), false, SIZES);
    check_sweep(&plain, true);
    assert!(
        !stderr.contains("netdam-mpi"),
        "the library ran without LD_PRELOAD:\n{stderr}"
    );
    for (rank, (with, without)) in records.iter().zip(&plain).enumerate() {
        for (j, (a, b)) in with.iter().zip(without).enumerate() {
            if mpi_checkable(a.ty, a.op) {
                assert!(
                    a.output == b.output,
                    "rank {rank}, call {j}: MPI's integer result differs from NetDAM's"
                );
            }
        }
    }
    assert_eq!(bed.chains(), after, "no CHAIN without the library");
}

/// A sweep where MPI_COMM_WORLD cannot form a group: every call goes to MPI for `reason`, with MPI's results.
fn every_call_to_mpi(ranks: &[Rank], reason: &'static str) {
    let bed = MpiBed::up();
    let before = bed.chains();
    let (records, stderr) = sweep(&bed, ranks, true, "1,1377");
    check_sweep(&records, true);
    for (rank, recs) in records.iter().enumerate() {
        assert_eq!(
            counters(&stderr, rank),
            expected_counters(recs, |_| Err(reason)),
            "rank {rank}\n{stderr}"
        );
    }
    assert_eq!(bed.chains(), before, "no CHAIN when every call goes to MPI");
}

#[test]
fn a_rank_without_a_node_leaves_every_call_to_mpi() {
    let mut ranks = every_host();
    ranks[3].node = false;
    every_call_to_mpi(&ranks, "no-node");
}

#[test]
fn two_ranks_on_one_node_leave_every_call_to_mpi() {
    let ranks = [0, 0, 1, 2].map(|host| Rank { host, node: true });
    every_call_to_mpi(&ranks, "shared-node");
}

/// Ranks whose counts, types or operators differ: without an agreement
/// before the call, the ring's call word finds it (MISMATCH on every rank)
/// and the ranks then agree which argument differs; with
/// NETDAM_MPI_CHECK_ARGS=1 they agree before every call. Every rank gets
/// the standard error class either way.
#[test]
fn counts_types_and_operators_that_differ_fail_on_every_rank_with_the_standard_error() {
    let bed = MpiBed::up();
    let exe = bed.check_program();
    for check_args in ["0", "1"] {
        let o = bed.run(
            &every_host(),
            true,
            &[("NETDAM_MIN_BYTES", "64"), ("NETDAM_MPI_CHECK_ARGS", check_args)],
            &[exe.as_os_str(), OsStr::new("mismatch")],
        );
        errors_of_the_mismatch(&o, check_args);
    }
}

/// What `check mismatch` must print and count on every rank.
fn errors_of_the_mismatch(o: &Output, check_args: &str) {
    let (out, err) = succeeded(o);
    for rank in 0..NODES {
        for line in [
            "counts differ: MPI_ERR_COUNT",
            "types differ: MPI_ERR_TYPE",
            "operators differ: MPI_ERR_OP",
            "2 elements after them: right",
            "64 elements after them: right",
        ] {
            assert!(
                out.contains(&format!("rank {rank}: {line}")),
                "NETDAM_MPI_CHECK_ARGS={check_args}, rank {rank}: no `{line}`:\n{out}\n{err}"
            );
        }
        let c = counters(&err, rank);
        assert_eq!(
            (c.offloaded, c.fell_back, c.errors),
            (
                BTreeMap::from([("allreduce".to_string(), 1)]),
                BTreeMap::from([("small".to_string(), 1)]),
                3
            ),
            "rank {rank}: 64 ints on NetDAM, 2 to MPI (below NETDAM_MIN_BYTES), 3 errors\n{err}"
        );
    }
}

#[test]
fn a_rank_that_never_joins_fails_the_others_with_mpi_err_other_and_one_message() {
    let bed = MpiBed::up();
    let exe = bed.check_program();
    let o = bed.run(
        &every_host(),
        true,
        &[("NETDAM_MIN_BYTES", "0"), ("NETDAM_PATIENCE_MS", "1000")],
        &[exe.as_os_str(), OsStr::new("stall")],
    );
    let (out, err) = succeeded(&o);
    for rank in 0..NODES - 1 {
        let line = format!("rank {rank}: without the last rank: MPI_ERR_OTHER");
        assert_eq!(
            out.matches(&line).count(),
            2,
            "rank {rank}: twice `{line}`:\n{out}\n{err}"
        );
        let said = format!("netdam-mpi: rank {rank}: a NetDAM all-reduce failed");
        assert_eq!(
            err.matches(&said).count(),
            1,
            "rank {rank}: the failure said once:\n{err}"
        );
        assert_eq!(counters(&err, rank).errors, 2, "{err}");
    }
    // The nodes were left at different generations; the next job starts them from one.
    let (records, stderr) = sweep(&bed, &every_host(), true, "1377");
    check_sweep(&records, false);
    for (rank, recs) in records.iter().enumerate() {
        assert_eq!(
            counters(&stderr, rank),
            expected_counters(recs, route),
            "rank {rank}\n{stderr}"
        );
    }
}

#[test]
fn mpi4py_allreduce_on_numpy_arrays_is_bit_exact_with_the_ring() {
    let python = venv_python();
    let bed = MpiBed::up();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi/allreduce_mpi4py.py");
    let (e4, e8) = (ring_chunk_elems(MTU, NODES, 4), ring_chunk_elems(MTU, NODES, 8));
    let before = bed.chains();
    let o = bed.run(
        &every_host(),
        true,
        &[("NETDAM_MIN_BYTES", "0")],
        &[
            python.as_os_str(),
            script.as_os_str(),
            OsStr::new(&e4.to_string()),
            OsStr::new(&e8.to_string()),
            OsStr::new("1,1000,10000"),
        ],
    );
    let (out, err) = succeeded(&o);
    for rank in 0..NODES {
        assert!(
            out.contains(&format!("mpi4py rank {rank}: 168 cases, 0 wrong")),
            "rank {rank}:\n{out}\n{err}"
        );
        // 3 sizes x 2 placements x 27 NetDAM cases; float64 and mpi4py's own calls aside.
        let c = counters(&err, rank);
        assert!(
            c.offloaded.get("allreduce").copied().unwrap_or(0) >= 162,
            "rank {rank}: {c:?}\n{err}"
        );
    }
    assert!(
        bed.chains().iter().zip(&before).all(|(a, b)| a > b),
        "every node ran chains"
    );
}
