//! Third-party MPI all-reduce benchmarks, built with the system's MPI
//! compilers from their published source and read from their own output:
//! the OSU micro-benchmarks' `osu_allreduce` and the Intel MPI Benchmarks'
//! `IMB-MPI1 Allreduce` from a source directory the user unpacked (neither
//! is in a package registry this project reaches), and MPICH's
//! `perf/allredtrace` from Debian's mpich source package (`mpich_suite`)
//! when neither is given.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use thiserror::Error;

use crate::mpich_suite::{run_logged, MpichSuite, SuiteError};

#[derive(Debug, Error)]
pub enum BenchmarkError {
    #[error("{0} is not a directory")]
    NotADir(PathBuf),
    #[error(
        "{0} holds no OSU micro-benchmarks source (no configure beside an osu_allreduce.c below it): give the \
         directory the published osu-micro-benchmarks tarball unpacks to"
    )]
    NotOsu(PathBuf),
    #[error(
        "{0} holds no Intel MPI Benchmarks source (no Makefile with an IMB-MPI1 target): give the directory the \
         published mpi-benchmarks tarball unpacks to"
    )]
    NotImb(PathBuf),
    #[error(
        "{0} is configured in place, which keeps configure from building elsewhere: run `make distclean` there (the \
         bench builds in its own directory and leaves the source as it is)"
    )]
    ConfiguredInPlace(PathBuf),
    #[error(
        "{0} reduces only its own type: int reductions need IMB-MPI1 (-red_data_type) or OSU 7 (-T); leave out --int"
    )]
    NoIntType(String),
    #[error("no {what} in the benchmark's output:\n{output}")]
    Output { what: &'static str, output: String },
    #[error(transparent)]
    Suite(#[from] SuiteError),
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
}

/// Which benchmark, from where.
#[derive(Clone, Debug)]
pub enum Source {
    /// The OSU micro-benchmarks' source directory.
    Osu(PathBuf),
    /// The Intel MPI Benchmarks' source directory.
    Imb(PathBuf),
    /// MPICH's perf/allredtrace from the suite's cache directory.
    MpichTrace(PathBuf),
}

/// One size of a benchmark's table: its own figures.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Point {
    pub bytes: u64,
    /// The benchmark's average time per all-reduce over its ranks, us.
    pub avg_us: f64,
}

/// A built benchmark: the program and the arguments of one all-reduce sweep.
pub struct Program {
    pub source: Source,
    pub exe: PathBuf,
    /// The element type of its all-reduces (the library takes int, long,
    /// their unsigned kinds and float).
    pub datatype: &'static str,
    /// Its name and version where the build knows them (MPICH's package);
    /// OSU and IMB print theirs (`version_in`).
    pub version: Option<String>,
    /// Arguments of every run (OSU 7's `-T mpi_float`).
    extra_args: Vec<String>,
}

impl Program {
    /// Builds the benchmark of `source` under `build_dir` (the source
    /// directory is not written to).
    pub fn build(source: &Source, build_dir: &Path) -> Result<Program, BenchmarkError> {
        std::fs::create_dir_all(build_dir).map_err(io(format!("creating {}", build_dir.display())))?;
        match source {
            Source::Osu(src) => build_osu(src, build_dir),
            Source::Imb(src) => build_imb(src, build_dir),
            Source::MpichTrace(cache) => {
                let suite = MpichSuite::obtain(cache)?;
                let exe = suite.build(&["perf/allredtrace"])?.remove(0);
                Ok(Program {
                    source: source.clone(),
                    exe,
                    datatype: "MPI_DOUBLE",
                    version: Some(format!("MPICH {}", suite.version)),
                    extra_args: Vec::new(),
                })
            }
        }
    }

    /// The same benchmark reducing MPI_INT instead of its own type (so that
    /// its figures compare with `bench allreduce`'s int32 ring).
    pub fn reducing_int(mut self) -> Result<Program, BenchmarkError> {
        self.extra_args = match &self.source {
            Source::Imb(_) => vec!["-red_data_type".into(), "int".into()],
            Source::Osu(_) if !self.extra_args.is_empty() => vec!["-T".into(), "mpi_int".into()],
            other => return Err(BenchmarkError::NoIntType(other.to_string())),
        };
        self.datatype = "MPI_INT";
        Ok(self)
    }

    /// Its arguments for a sweep from `min` to `max` bytes (powers of two)
    /// on `ranks` ranks; allredtrace has one size, one MPI_DOUBLE.
    pub fn args(&self, min: u64, max: u64, ranks: usize) -> Vec<String> {
        let mut args = match &self.source {
            Source::Osu(_) => vec!["-m".to_string(), format!("{min}:{max}")],
            Source::Imb(_) => vec![
                "Allreduce".into(),
                "-npmin".into(),
                ranks.to_string(),
                "-msglog".into(),
                format!("{}:{}", min.ilog2(), max.ilog2()),
            ],
            // A delay loop of one iteration between calls: the all-reduces alone.
            Source::MpichTrace(_) => vec!["-delaycount".into(), "1".into()],
        };
        args.extend(self.extra_args.iter().cloned());
        args
    }

    /// Its figures from its output.
    pub fn parse(&self, output: &str) -> Result<Vec<Point>, BenchmarkError> {
        match &self.source {
            Source::Osu(_) => parse_osu(output),
            Source::Imb(_) => parse_imb(output),
            Source::MpichTrace(_) => parse_allredtrace(output).map(|p| vec![p]),
        }
    }

    /// The benchmark's name and version as its output's header gives them:
    /// `# OSU MPI Allreduce Latency Test v7.4`, `#    Intel(R) MPI
    /// Benchmarks 2021.11, MPI-1 part`; else the build's.
    pub fn version_in(&self, output: &str) -> Option<String> {
        let found = match &self.source {
            Source::Osu(_) => output
                .lines()
                .find(|l| l.starts_with("# OSU MPI"))
                .and_then(|l| l.rsplit_once(" v"))
                .map(|(_, v)| format!("OSU {}", v.trim())),
            Source::Imb(_) => output
                .lines()
                .find_map(|l| l.split_once("Intel(R) MPI Benchmarks "))
                .and_then(|(_, rest)| rest.split([',', ' ']).next())
                .map(|v| format!("IMB {v}")),
            Source::MpichTrace(_) => None,
        };
        found.or_else(|| self.version.clone())
    }

    /// How long one run may take before it counts as hung: a sweep of
    /// osu_allreduce or IMB takes minutes here, allredtrace a second.
    pub fn run_limit(&self) -> Duration {
        match &self.source {
            Source::Osu(_) | Source::Imb(_) => Duration::from_secs(900),
            Source::MpichTrace(_) => Duration::from_secs(60),
        }
    }

    pub fn name(&self) -> &'static str {
        match &self.source {
            Source::Osu(_) => "osu_allreduce",
            Source::Imb(_) => "IMB-MPI1 Allreduce",
            Source::MpichTrace(_) => "MPICH perf/allredtrace",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Source::Osu(d) => write!(f, "osu_allreduce from {}", d.display()),
            Source::Imb(d) => write!(f, "IMB-MPI1 from {}", d.display()),
            Source::MpichTrace(c) => write!(f, "MPICH's perf/allredtrace (cache {})", c.display()),
        }
    }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchmarkError {
    let what = what.into();
    move |e| BenchmarkError::Io(what, e)
}

/// The first file named `name` below `dir` (depth first, sorted).
fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    if let Some(p) = entries
        .iter()
        .find(|p| p.file_name().is_some_and(|n| n == name) && p.is_file())
    {
        return Some(p.clone());
    }
    entries.iter().filter(|p| p.is_dir()).find_map(|d| find_file(d, name))
}

fn check_dir(src: &Path) -> Result<PathBuf, BenchmarkError> {
    if !src.is_dir() {
        return Err(BenchmarkError::NotADir(src.to_path_buf()));
    }
    src.canonicalize().map_err(io(format!("resolving {}", src.display())))
}

/// OSU's own way: configure CC=mpicc in a directory of the bench's, then
/// make of osu_allreduce in the build directory that has it.
fn build_osu(src: &Path, build_dir: &Path) -> Result<Program, BenchmarkError> {
    let src = check_dir(src)?;
    if !src.join("configure").is_file() {
        return Err(BenchmarkError::NotOsu(src));
    }
    let source_file = find_file(&src, "osu_allreduce.c").ok_or_else(|| BenchmarkError::NotOsu(src.clone()))?;
    if src.join("config.status").exists() {
        return Err(BenchmarkError::ConfiguredInPlace(src));
    }
    let build = build_dir.join("osu");
    let log = build_dir.join("osu-build.log");
    let _ = std::fs::remove_file(&log);
    if !build.join("config.status").exists() {
        std::fs::create_dir_all(&build).map_err(io(format!("creating {}", build.display())))?;
        run_logged(
            Command::new(src.join("configure"))
                .current_dir(&build)
                .args(["CC=mpicc", "CXX=mpicxx"]),
            "configure of the OSU micro-benchmarks",
            &log,
        )?;
    }
    let rel = source_file
        .parent()
        .and_then(|p| p.strip_prefix(&src).ok())
        .unwrap_or(Path::new(""))
        .to_path_buf();
    let dir = build.join(&rel);
    run_logged(
        Command::new("make").current_dir(&dir).arg("osu_allreduce"),
        "make osu_allreduce",
        &log,
    )?;
    // OSU 7 reduces the type -T names (older ones always float): float, as before.
    let takes_type = ["osu_util.c", "osu_util_mpi.c"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(find_file(&src, f)?).ok())
        .any(|text| text.contains("mpi_float"));
    Ok(Program {
        source: Source::Osu(src),
        exe: dir.join("osu_allreduce"),
        datatype: "MPI_FLOAT",
        version: None,
        extra_args: match takes_type {
            true => vec!["-T".into(), "mpi_float".into()],
            false => Vec::new(),
        },
    })
}

/// IMB's own way: make IMB-MPI1 with the MPI compilers, in a copy of the
/// source (its makefiles build in place).
fn build_imb(src: &Path, build_dir: &Path) -> Result<Program, BenchmarkError> {
    let src = check_dir(src)?;
    let makefile = std::fs::read_to_string(src.join("Makefile")).unwrap_or_default();
    if !makefile.contains("IMB-MPI1") {
        return Err(BenchmarkError::NotImb(src));
    }
    let copy = build_dir.join("imb");
    let log = build_dir.join("imb-build.log");
    let _ = std::fs::remove_file(&log);
    if copy.exists() {
        std::fs::remove_dir_all(&copy).map_err(io(format!("removing {}", copy.display())))?;
    }
    run_logged(
        Command::new("cp").arg("-a").arg(&src).arg(&copy),
        "copying the IMB source",
        &log,
    )?;
    run_logged(
        Command::new("make")
            .current_dir(&copy)
            // IMB builds with -Werror and uses only MPI's C API; OpenMPI's
            // C++ bindings header, which mpi.h pulls in under C++, warns
            // (-Wcast-function-type) with g++ 12: leave it out.
            .args(["-j2", "IMB-MPI1", "CC=mpicc", "CXX=mpicxx -DOMPI_SKIP_MPICXX=1"]),
        "make IMB-MPI1 (C++: mpicxx needs g++)",
        &log,
    )?;
    Ok(Program {
        source: Source::Imb(src),
        exe: copy.join("IMB-MPI1"),
        datatype: "MPI_FLOAT",
        version: None,
        extra_args: Vec::new(),
    })
}

/// osu_allreduce's table: a `# Size  Avg Latency(us) ...` header (columns
/// apart by two spaces or more; -f adds Min, Max, Iterations), then one
/// line per size; other lines (its title, `# Datatype: ...`) are passed over.
pub fn parse_osu(output: &str) -> Result<Vec<Point>, BenchmarkError> {
    let mut avg_col = None;
    let mut points = Vec::new();
    for line in output.lines() {
        if let Some(header) = line.strip_prefix('#') {
            let cols: Vec<&str> = header.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
            if cols.first() == Some(&"Size") {
                avg_col = cols.iter().position(|c| c.starts_with("Avg Latency"));
            }
            continue;
        }
        let Some(col) = avg_col else { continue };
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(bytes), Some(avg)) = (
            fields.first().and_then(|f| f.parse::<u64>().ok()),
            fields.get(col).and_then(|f| f.parse::<f64>().ok()),
        ) else {
            continue;
        };
        points.push(Point { bytes, avg_us: avg });
    }
    if points.is_empty() {
        return Err(BenchmarkError::Output {
            what: "`# Size  Avg Latency(us)` table",
            output: output.to_string(),
        });
    }
    Ok(points)
}

/// IMB-MPI1's Allreduce section: `# Benchmarking Allreduce`, `# #processes
/// = N`, a `#bytes #repetitions t_min[usec] t_max[usec] t_avg[usec]`
/// header, then one line per size. With several process counts, the
/// section of the most processes.
pub fn parse_imb(output: &str) -> Result<Vec<Point>, BenchmarkError> {
    let mut best: Option<(u64, Vec<Point>)> = None;
    let mut current: Option<(u64, Vec<Point>)> = None;
    let mut in_allreduce = false;
    let mut avg_col = None;
    let mut finish = |section: Option<(u64, Vec<Point>)>| {
        if let Some((n, pts)) = section.filter(|(_, p)| !p.is_empty()) {
            if best.as_ref().is_none_or(|(b, _)| n >= *b) {
                best = Some((n, pts));
            }
        }
    };
    for line in output.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("# Benchmarking ") {
            finish(current.take());
            in_allreduce = name.trim() == "Allreduce";
            avg_col = None;
            continue;
        }
        if !in_allreduce {
            continue;
        }
        if let Some(n) = t.strip_prefix("# #processes =") {
            current = Some((n.trim().parse().unwrap_or(0), Vec::new()));
            continue;
        }
        if t.starts_with("#bytes") {
            avg_col = t.split_whitespace().position(|c| c.starts_with("t_avg"));
            continue;
        }
        let (Some(col), Some((_, pts))) = (avg_col, current.as_mut()) else {
            continue;
        };
        let fields: Vec<&str> = t.split_whitespace().collect();
        if let (Some(bytes), Some(avg)) = (
            fields.first().and_then(|f| f.parse::<u64>().ok()),
            fields.get(col).and_then(|f| f.parse::<f64>().ok()),
        ) {
            pts.push(Point { bytes, avg_us: avg });
        }
    }
    finish(current.take());
    best.map(|(_, p)| p).ok_or_else(|| BenchmarkError::Output {
        what: "`# Benchmarking Allreduce` table",
        output: output.to_string(),
    })
}

/// MPICH's allredtrace: `For delay count D, time is T` (seconds for its
/// 100 all-reduces of one MPI_DOUBLE, each followed by the delay loop).
pub fn parse_allredtrace(output: &str) -> Result<Point, BenchmarkError> {
    const CALLS: f64 = 100.0;
    output
        .lines()
        .find_map(|l| l.trim().strip_prefix("For delay count ")?.split_once(", time is "))
        .and_then(|(_, t)| t.trim().parse::<f64>().ok())
        .map(|secs| Point {
            bytes: 8,
            avg_us: secs / CALLS * 1e6,
        })
        .ok_or_else(|| BenchmarkError::Output {
            what: "`For delay count D, time is T` line",
            output: output.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(bytes: u64, avg_us: f64) -> Point {
        Point { bytes, avg_us }
    }

    #[test]
    fn osu_table_with_and_without_full_columns() {
        let plain =
            "# OSU MPI Allreduce Latency Test v5.8\n# Size       Avg Latency(us)\n4                      12.50\n\
                     8                      13.25\n1048576              900.00\n";
        assert_eq!(
            parse_osu(plain).unwrap(),
            vec![p(4, 12.5), p(8, 13.25), p(1048576, 900.0)]
        );
        let full = "# OSU MPI Allreduce Latency Test v7.4\n# Datatype: MPI_FLOAT.\n\
                    # Size       Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations\n\
                    4                       1.81              1.50              2.10        1000\n\
                    16                      2.00              1.90              2.40        1000\n";
        assert_eq!(parse_osu(full).unwrap(), vec![p(4, 1.81), p(16, 2.0)]);
        // An MPI warning between the lines is passed over; no table is an error.
        let noisy = "# Size       Avg Latency(us)\n[host:123] some warning\n64   3.5\n";
        assert_eq!(parse_osu(noisy).unwrap(), vec![p(64, 3.5)]);
        assert!(matches!(
            parse_osu("mpirun: not found\n"),
            Err(BenchmarkError::Output { .. })
        ));
    }

    #[test]
    fn imb_allreduce_section_of_the_most_processes() {
        let out = "#----------------------------------------------------------------\n\
                   # Benchmarking Allreduce \n# #processes = 2 \n# ( 2 additional processes waiting in MPI_Barrier)\n\
                   #----------------------------------------------------------------\n\
                   \x20      #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]\n\
                   \x20           0         1000         0.03         0.04         0.03\n\
                   \x20           4         1000         9.00         9.50         9.25\n\n\
                   #----------------------------------------------------------------\n\
                   # Benchmarking Allreduce \n# #processes = 4 \n\
                   #----------------------------------------------------------------\n\
                   \x20      #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]\n\
                   \x20           0         1000         0.04         0.05         0.04\n\
                   \x20           4         1000        20.10        22.30        21.20\n\
                   \x20        1024          640        40.00        44.00        42.00\n\n\n\
                   # All processes entering MPI_Finalize\n";
        assert_eq!(parse_imb(out).unwrap(), vec![p(0, 0.04), p(4, 21.2), p(1024, 42.0)]);
        // Another benchmark's table is not taken for Allreduce's.
        let other =
            "# Benchmarking Reduce \n# #processes = 4 \n  #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]\n\
                     4 1000 1.0 2.0 1.5\n";
        assert!(matches!(parse_imb(other), Err(BenchmarkError::Output { .. })));
    }

    #[test]
    fn versions_from_the_headers() {
        let osu = Program {
            source: Source::Osu(PathBuf::from("/src")),
            exe: PathBuf::new(),
            datatype: "MPI_FLOAT",
            version: None,
            extra_args: Vec::new(),
        };
        let header = "\n# OSU MPI Allreduce Latency Test v7.4\n# Datatype: MPI_FLOAT.\n";
        assert_eq!(osu.version_in(header).as_deref(), Some("OSU 7.4"));
        assert_eq!(osu.version_in("4 1.0\n"), None);
        let imb = Program {
            source: Source::Imb(PathBuf::from("/src")),
            ..osu
        };
        let header = "#----\n#    Intel(R) MPI Benchmarks 2021.11, MPI-1 part\n#----\n";
        assert_eq!(imb.version_in(header).as_deref(), Some("IMB 2021.11"));
    }

    #[test]
    fn allredtrace_time_per_call() {
        let pt = parse_allredtrace("For delay count 1, time is 2.500000e-03\n").unwrap();
        assert_eq!(pt.bytes, 8);
        assert!((pt.avg_us - 25.0).abs() < 1e-9);
        assert!(parse_allredtrace("nothing\n").is_err());
    }
}
