//! Start-up overhead of the sandbox: sandboxed `true` and `ls` against a plain
//! `sh -c` spawned with tokio, and against bubblewrap building the same
//! filesystem view (same read-only binds, /etc masks, workspace, tmpfs /tmp,
//! /dev, /proc, all namespaces). Prints a Markdown table.
//!
//! Reproduce: `cargo bench -p capstan-sandbox --features bench-whole-host`
//! (N defaults to 200; set `CAPSTAN_BENCH_N` to change it). Without the
//! feature, the "whole host read-only" row (the filesystem before the
//! allowlist) is left out. Needs `bwrap` (`apt-get install -y bubblewrap`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use capstan_sandbox::{Command, ExecSpec, SandboxMode, run, set_launcher};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Plain,
    Off,
    #[cfg(feature = "bench-whole-host")]
    WholeHost,
    Allowlist,
    AllowlistQuota,
    Bwrap,
}

impl Mode {
    fn all() -> Vec<Mode> {
        let mut v = vec![Mode::Plain, Mode::Off];
        #[cfg(feature = "bench-whole-host")]
        v.push(Mode::WholeHost);
        v.extend([Mode::Allowlist, Mode::AllowlistQuota, Mode::Bwrap]);
        v
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain sh -c (tokio::process)",
            Mode::Off => "sandbox off (launcher, no confinement)",
            #[cfg(feature = "bench-whole-host")]
            Mode::WholeHost => "required, whole host read-only (before)",
            Mode::Allowlist => "required, allowlist root, no write quota",
            Mode::AllowlistQuota => "required, allowlist root + write quota (default)",
            Mode::Bwrap => "bwrap, same binds",
        }
    }
}

/// The bubblewrap command building the same view as the sandbox's allowlist
/// root (the lists mirror crates/sandbox/src/view.rs).
fn bwrap(cmd: &str, ws: &Path) -> tokio::process::Command {
    let mut c = tokio::process::Command::new("bwrap");
    c.args(["--unshare-all", "--die-with-parent", "--new-session"]);
    c.args(["--tmpfs", "/"]);
    for dir in [
        "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
    ] {
        let p = Path::new(dir);
        match std::fs::symlink_metadata(p) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(p).unwrap();
                c.arg("--symlink").arg(target).arg(dir);
            }
            Ok(_) => {
                c.args(["--ro-bind", dir, dir]);
            }
            Err(_) => {}
        }
    }
    for secret in [
        "/etc/shadow",
        "/etc/shadow-",
        "/etc/gshadow",
        "/etc/gshadow-",
        "/etc/sudoers",
        "/etc/sudoers.d",
        "/etc/ssh",
        "/etc/ssl/private",
    ] {
        match std::fs::symlink_metadata(secret) {
            Ok(m) if m.is_dir() => {
                c.args(["--tmpfs", secret, "--remount-ro", secret]);
            }
            Ok(_) => {
                c.args(["--ro-bind", "/dev/null", secret]);
            }
            Err(_) => {}
        }
    }
    c.args(["--tmpfs", "/tmp", "--dev", "/dev", "--proc", "/proc"]);
    c.arg("--bind").arg(ws).arg(ws);
    c.arg("--chdir").arg(ws);
    c.args(["--", "/bin/bash", "--noprofile", "--norc", "-c", cmd]);
    c
}

async fn once(mode: Mode, cmd: &str, ws: &Path) -> Duration {
    let start = Instant::now();
    let spawned = match mode {
        Mode::Plain => {
            let mut c = tokio::process::Command::new("/bin/sh");
            c.arg("-c").arg(cmd).current_dir(ws);
            Some(c)
        }
        Mode::Bwrap => Some(bwrap(cmd, ws)),
        _ => None,
    };
    if let Some(mut c) = spawned {
        let out = c
            .env_clear()
            .env("PATH", capstan_sandbox::SANDBOX_PATH)
            .stdin(Stdio::null())
            .process_group(0)
            .output()
            .await
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        return start.elapsed();
    }
    let mut spec = ExecSpec::new(Command::Shell(cmd.into()), ws);
    spec.mode = if mode == Mode::Off {
        SandboxMode::Off
    } else {
        SandboxMode::Required
    };
    if mode != Mode::AllowlistQuota {
        spec.limits.workspace_write_quota = None;
    }
    #[cfg(feature = "bench-whole-host")]
    {
        spec.whole_host_view = mode == Mode::WholeHost;
    }
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert!(out.success(), "{out:?}");
    start.elapsed()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    // `cargo bench` passes `--bench`; a launcher start passes the launch flag.
    capstan_sandbox::maybe_run_launcher();
    set_launcher(env!("CARGO_BIN_EXE_capstan-sandbox-launcher"));
    assert!(
        std::process::Command::new("bwrap")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "bubblewrap is needed for the comparison: apt-get install -y bubblewrap"
    );
    let n: usize = std::env::var("CAPSTAN_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    for i in 0..20 {
        std::fs::write(ws_path.join(format!("file{i}.txt")), "x").unwrap();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();

    println!("Sandbox start-up overhead, N = {n} sequential runs per row\n");
    println!("| command | mode | p50 | p99 | added p50 | added p99 | p50 / bwrap |");
    println!("|---|---|---|---|---|---|---|");
    for cmd in ["true", "ls"] {
        let mut rows = Vec::new();
        for mode in Mode::all() {
            let mut samples: Vec<Duration> = rt.block_on(async {
                for _ in 0..10 {
                    once(mode, cmd, &ws_path).await; // warm-up
                }
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(once(mode, cmd, &ws_path).await);
                }
                v
            });
            samples.sort();
            rows.push((mode, percentile(&samples, 0.5), percentile(&samples, 0.99)));
        }
        let (_, b50, b99) = rows[0];
        let bwrap50 = rows
            .iter()
            .find(|(m, _, _)| *m == Mode::Bwrap)
            .map(|r| r.1)
            .unwrap_or(b50);
        for (mode, p50, p99) in rows {
            let added = |p: Duration, b: Duration| {
                if mode == Mode::Plain {
                    "-".to_owned()
                } else {
                    ms(p.saturating_sub(b))
                }
            };
            println!(
                "| `{cmd}` | {} | {} | {} | {} | {} | {:.2}x |",
                mode.name(),
                ms(p50),
                ms(p99),
                added(p50, b50),
                added(p99, b99),
                p50.as_secs_f64() / bwrap50.as_secs_f64()
            );
        }
    }
    println!(
        "\nReproduce: `cargo bench -p capstan-sandbox --features bench-whole-host` \
         (CAPSTAN_BENCH_N={n})"
    );
}
