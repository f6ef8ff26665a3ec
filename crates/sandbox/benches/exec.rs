//! Start-up overhead of the sandbox: sandboxed `true` and `ls` against a plain
//! `sh -c` spawned with tokio. Prints a Markdown table.
//!
//! Reproduce: `cargo bench -p capstan-sandbox` (N defaults to 200; set
//! `CAPSTAN_BENCH_N` to change it).

use std::process::Stdio;
use std::time::{Duration, Instant};

use capstan_sandbox::{Command, ExecSpec, SandboxMode, run, set_launcher};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Plain,
    Off,
    Required,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain sh -c (tokio::process)",
            Mode::Off => "sandbox off (launcher, no confinement)",
            Mode::Required => "sandbox required",
        }
    }
}

async fn once(mode: Mode, cmd: &str, ws: &std::path::Path) -> Duration {
    let start = Instant::now();
    match mode {
        Mode::Plain => {
            let out = tokio::process::Command::new("/bin/sh")
                .arg("-c")
                .arg(cmd)
                .current_dir(ws)
                .env_clear()
                .env("PATH", capstan_sandbox::SANDBOX_PATH)
                .stdin(Stdio::null())
                .process_group(0)
                .output()
                .await
                .unwrap();
            assert!(out.status.success());
        }
        Mode::Off | Mode::Required => {
            let mut spec = ExecSpec::new(Command::Shell(cmd.into()), ws);
            spec.mode = if mode == Mode::Off {
                SandboxMode::Off
            } else {
                SandboxMode::Required
            };
            let out = run(spec, CancellationToken::new()).await.unwrap();
            assert!(out.success(), "{out:?}");
        }
    }
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
    let n: usize = std::env::var("CAPSTAN_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let ws = tempfile::tempdir().unwrap();
    for i in 0..20 {
        std::fs::write(ws.path().join(format!("file{i}.txt")), "x").unwrap();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();

    println!("Sandbox start-up overhead, N = {n} sequential runs per row\n");
    println!("| command | mode | p50 | p99 | added p50 | added p99 |");
    println!("|---|---|---|---|---|---|");
    for cmd in ["true", "ls"] {
        let mut baseline = None;
        for mode in [Mode::Plain, Mode::Off, Mode::Required] {
            let mut samples: Vec<Duration> = rt.block_on(async {
                for _ in 0..10 {
                    once(mode, cmd, ws.path()).await; // warm-up
                }
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(once(mode, cmd, ws.path()).await);
                }
                v
            });
            samples.sort();
            let (p50, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
            let (a50, a99) = match baseline {
                None => {
                    baseline = Some((p50, p99));
                    ("-".to_owned(), "-".to_owned())
                }
                Some((b50, b99)) => (ms(p50.saturating_sub(b50)), ms(p99.saturating_sub(b99))),
            };
            println!(
                "| `{cmd}` | {} | {} | {} | {a50} | {a99} |",
                mode.name(),
                ms(p50),
                ms(p99)
            );
        }
    }
    println!("\nReproduce: `cargo bench -p capstan-sandbox`");
}
