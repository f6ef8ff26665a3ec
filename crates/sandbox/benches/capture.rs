//! What capture costs: the same command written straight to the workspace
//! (no overlay: `write_quota_mb = 0`), through the write-quota overlay copied
//! back by init (every writing command's path before capture, with the
//! default 1 GiB quota: the "today's direct writes" issue 17 compares with,
//! still the path with `[changes] capture = false`), and captured (staged,
//! classified, previous versions kept, landed through the journal by
//! `capstan-changes`); then undo of 1,000 files. A command the policy judges
//! read-only (`true`) is run as the host runs it in capture mode: on a
//! read-only workspace, with no layer to capture. Median wall time of each
//! (the modes interleaved run by run), one Markdown table.
//!
//! Reproduce: `cargo bench -p capstan-sandbox --bench capture`
//! (`CAPSTAN_BENCH_PHASES=1` also prints where a captured run's time goes;
//! `CAPSTAN_BENCH_ONLY=10,000` runs the cases whose name contains it)
//! (`CAPSTAN_BENCH_N` runs per cell, default 9; the 200 MB and 10,000-file
//! rows use at most 3, or `CAPSTAN_BENCH_HEAVY_N`; `CAPSTAN_BENCH_LAUNCHER=<path>` runs another
//! launcher binary, to compare a saved build with this one in one sitting;
//! `CAPSTAN_BENCH_KEEP=1` leaves the workspaces behind, see `main`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use capstan_changes::{Conflicts, Origin, Retention, Store};
use capstan_sandbox::{Command, ExecSpec, run, set_launcher};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Direct,
    CopyBack,
    Capture,
}

struct Case {
    name: &'static str,
    /// Prepares the workspace (outside the timing).
    setup: fn(&Path),
    command: &'static str,
    heavy: bool,
}

fn none(_: &Path) {}

fn many(ws: &Path) {
    std::fs::create_dir_all(ws.join("d")).unwrap();
}

const CASES: &[Case] = &[
    Case {
        name: "`true`",
        setup: none,
        command: "true",
        heavy: false,
    },
    Case {
        name: "write 1 file",
        setup: none,
        command: "echo hello > one.txt",
        heavy: false,
    },
    Case {
        name: "write 10,000 small files",
        setup: many,
        command: "cd d && for i in $(seq 1 10000); do echo $i > f$i; done",
        heavy: true,
    },
    Case {
        name: "write a 200 MB file",
        setup: none,
        command: "head -c 209715200 /dev/urandom > big.bin",
        heavy: true,
    },
];

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

async fn once(mode: Mode, case: &Case, base: &Path) -> Duration {
    // A fresh workspace per run, the old ones removed only when the bench is
    // over: on an ext4 without a journal (this VM's disk) the inode allocator
    // steps over every inode freed in the last half minute, one inode table
    // lookup each, so deleting the last run's 10,000 files made the next
    // run's file creations 0.1 to 2 s slower, at random.
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let ws = base.join(format!(
        "ws-{}",
        RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&ws).unwrap();
    (case.setup)(&ws);
    let (store, _) = Store::open(base.join("store"), Retention::default()).unwrap();
    let phases = std::env::var_os("CAPSTAN_BENCH_PHASES").is_some();
    // With phases, the command times itself (inside the sandbox) so that
    // the sandbox's own share (staging, copy-back) shows.
    let command = if phases {
        format!(
            "s=$(date +%s%N); ( {} ); e=$(date +%s%N); echo \"command itself $(( (e - s) / 1000000 )) ms\" >&2",
            case.command
        )
    } else {
        case.command.to_owned()
    };
    let mut spec = ExecSpec::new(Command::Shell(command), &ws);
    spec.timeout = Duration::from_secs(600);
    spec.limits.workspace_write_quota = match mode {
        Mode::Direct => None,
        _ => Some(1 << 30),
    };
    // As the host does: a command judged read-only gets a read-only
    // workspace and nothing to capture.
    let read_only = mode == Mode::Capture
        && capstan_policy::classify_shell(case.command).risk == capstan_policy::Risk::ReadOnly;
    spec.workspace_read_only = read_only;
    let staged = (mode == Mode::Capture && !read_only).then(|| store.new_staging().unwrap());
    spec.capture = staged.as_ref().map(|(_, d)| d.clone());
    let started = Instant::now();
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let ran = started.elapsed();
    if phases {
        let mode = match mode {
            Mode::Direct => "direct",
            Mode::CopyBack => "copy-back",
            Mode::Capture => "capture",
        };
        eprintln!(
            "{} ({mode}): {} ms in the sandbox, of which {} ms after the launcher (classify, cleanup), {}",
            case.name,
            ms(ran),
            ms(ran.saturating_sub(out.duration)),
            out.stderr.trim()
        );
    }
    if let Some((id, _)) = staged {
        let set = out.changes.unwrap();
        if !set.is_empty() {
            // As the host lands a set at once: the prepared record, not read back.
            let record = store.prepare(&id, &set, Origin::default()).unwrap();
            let prepared = started.elapsed();
            store.land_prepared(record).unwrap();
            if phases {
                eprintln!(
                    "{}: command in the sandbox (staging included) {} ms (of which the command {} ms), prepare {} ms, land {} ms",
                    case.name,
                    ms(ran),
                    ms(out.duration),
                    ms(prepared - ran),
                    ms(started.elapsed() - prepared)
                );
            }
        }
    }
    started.elapsed()
}

async fn undo_1000(base: &Path) -> Duration {
    let ws = base.join("ws");
    let _ = std::fs::remove_dir_all(&ws);
    std::fs::create_dir_all(ws.join("src")).unwrap();
    for i in 0..1000 {
        std::fs::write(
            ws.join(format!("src/f{i}.rs")),
            format!("// {i}\n").repeat(20),
        )
        .unwrap();
    }
    let (store, _) = Store::open(base.join("store"), Retention::default()).unwrap();
    let (id, dir) = store.new_staging().unwrap();
    let mut spec = ExecSpec::new(Command::Shell("rm -rf src".into()), &ws);
    spec.capture = Some(dir);
    let out = run(spec, CancellationToken::new()).await.unwrap();
    store
        .prepare(&id, &out.changes.unwrap(), Origin::default())
        .unwrap();
    store.land(&id).unwrap();
    let started = Instant::now();
    let r = store.undo(&id, Conflicts::Refuse).unwrap();
    assert!(r.done);
    started.elapsed()
}

fn main() {
    // CAPSTAN_BENCH_LAUNCHER: a saved launcher (with the bench binary built
    // beside it) measures an older build in the same sitting as this one.
    set_launcher(
        std::env::var_os("CAPSTAN_BENCH_LAUNCHER")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_capstan-sandbox-launcher").into()),
    );
    let n: usize = std::env::var("CAPSTAN_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(9);
    let heavy_n: usize = std::env::var("CAPSTAN_BENCH_HEAVY_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(n.min(3));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let base_dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(base_dir.path()).unwrap();
    // CAPSTAN_BENCH_KEEP: leave the workspaces for later removal. Removing
    // 10,000-file workspaces makes file creation on this VM's journal-less
    // ext4 slow for the next minutes (see `once`), which would fall on the
    // next bench run when two builds are compared one after the other.
    if std::env::var_os("CAPSTAN_BENCH_KEEP").is_some() {
        eprintln!("workspaces kept in {}", base_dir.keep().display());
    }
    println!(
        "| case | no overlay ms | quota overlay, copied back (before capture) ms | captured + landed ms | capture vs no overlay | capture vs copied back |"
    );
    println!("|---|---|---|---|---|---|");
    let only = std::env::var("CAPSTAN_BENCH_ONLY").unwrap_or_default();
    for case in CASES.iter().filter(|c| c.name.contains(only.as_str())) {
        let runs = if case.heavy { heavy_n } else { n };
        // Interleaved (direct, copy-back, capture, direct, ...) so that load
        // from other processes falls on the three modes alike.
        let modes = [Mode::Direct, Mode::CopyBack, Mode::Capture];
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(); modes.len()];
        for _ in 0..runs {
            for (i, mode) in modes.iter().enumerate() {
                times[i].push(rt.block_on(once(*mode, case, &base)));
            }
        }
        let cells: Vec<Duration> = times.into_iter().map(median).collect();
        println!(
            "| {} | {} | {} | {} | {:.2}x | {:.2}x |",
            case.name,
            ms(cells[0]),
            ms(cells[1]),
            ms(cells[2]),
            cells[2].as_secs_f64() / cells[0].as_secs_f64(),
            cells[2].as_secs_f64() / cells[1].as_secs_f64(),
        );
    }
    let undo: Vec<Duration> = (0..n).map(|_| rt.block_on(undo_1000(&base))).collect();
    println!();
    println!(
        "undo of 1,000 files (rm -rf src undone): median {} ms over {n} runs",
        ms(median(undo))
    );
    println!();
    println!("reproduce: cargo bench -p capstan-sandbox --bench capture (CAPSTAN_BENCH_N={n})");
}
