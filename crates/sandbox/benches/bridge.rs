//! What the sandbox's bridge hop costs: real `curl` downloads a file from a
//! local HTTP server through the egress proxy (a CONNECT tunnel), once on the
//! host straight to the proxy (TCP), once inside the sandbox, where its
//! connection goes to the bridge's forwarder in the command's network
//! namespace and from there to the proxy's Unix socket. The difference is
//! the forwarder's hop. Also the sandbox with the host's network, straight to
//! the server, for scale. Throughput is curl's own `speed_download`, so the
//! sandbox's start-up is not in it. Prints a Markdown table.
//!
//! Reproduce: `cargo bench -p capstan-sandbox --bench bridge`
//! (`CAPSTAN_BENCH_MB` changes the download size, default 200;
//! `CAPSTAN_BENCH_LAUNCHER` runs another build of the launcher, e.g. one
//! from before the forwarder spliced). Needs `curl`.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_macros)]

use std::time::Duration;

use capstan_egress::{Policy, Proxy, StaticResolver, bind_unix};
use capstan_sandbox::{Command, ExecSpec, Network, run, set_launcher};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Answers every request with `len` bytes.
async fn server(len: u64) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    let mut b = [0u8; 4096];
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&b[..n]),
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
                );
                if s.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b'x'; 256 * 1024];
                let mut left = len;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    if s.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n as u64;
                }
            });
        }
    });
    port
}

/// curl's download speed in MB/s (its last line of output).
fn speed(out: &str) -> f64 {
    let v: f64 = out
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no speed in curl's output: {out:?}"));
    v / (1 << 20) as f64
}

const CURL: &str = "curl -sS -f -m 120 -o /dev/null -w '%{speed_download}\\n'";

#[tokio::main]
async fn main() {
    match std::env::var("CAPSTAN_BENCH_LAUNCHER") {
        Ok(other) => set_launcher(other),
        Err(_) => set_launcher(env!("CARGO_BIN_EXE_capstan-sandbox-launcher")),
    }
    let mb: u64 = std::env::var("CAPSTAN_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let port = server(mb << 20).await;
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let ws = base.join("ws");
    std::fs::create_dir(&ws).unwrap();
    let socket = base.join("egress.sock");
    let policy = Policy::new(
        &[format!("bench.test:{port}"), format!("127.0.0.1:{port}")],
        &[],
        &[],
        false,
    )
    .unwrap();
    let proxy = Proxy::builder(policy)
        .resolver(StaticResolver::new().with("bench.test", &["127.0.0.1".parse().unwrap()]))
        .build();
    let cancel = CancellationToken::new();
    let (p, c) = (proxy.clone(), cancel.clone());
    let listener = bind_unix(&socket).unwrap();
    tokio::spawn(async move { p.serve_unix(listener, c).await });
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_port = tcp.local_addr().unwrap().port();
    let (p, c) = (proxy.clone(), cancel.clone());
    tokio::spawn(async move { p.serve_tcp(tcp, c).await });

    let url = format!("http://bench.test:{port}/big");
    let rows: [(&str, Option<Network>, String); 3] = [
        (
            "host curl, CONNECT to the proxy on TCP (no bridge)",
            None,
            format!("{CURL} --proxytunnel -x http://127.0.0.1:{proxy_port} {url}"),
        ),
        (
            "sandboxed curl, CONNECT through the bridge to the proxy's Unix socket",
            Some(Network::Proxy {
                socket: socket.clone(),
            }),
            format!("{CURL} --proxytunnel {url}"),
        ),
        (
            "sandboxed curl, host network, straight to the server (no proxy)",
            Some(Network::Full),
            format!("{CURL} http://127.0.0.1:{port}/big"),
        ),
    ];
    println!("| path | {mb} MB download with curl, MB/s (best of 3) |");
    println!("|---|---|");
    for (name, network, cmd) in rows {
        let mut best = 0.0f64;
        for _ in 0..3 {
            let out = match &network {
                None => {
                    let o = tokio::process::Command::new("sh")
                        .args(["-c", &cmd])
                        .output()
                        .await
                        .unwrap();
                    assert!(o.status.success(), "{o:?}");
                    String::from_utf8_lossy(&o.stdout).into_owned()
                }
                Some(net) => {
                    let mut spec = ExecSpec::new(Command::Shell(cmd.clone()), &ws);
                    spec.timeout = Duration::from_secs(180);
                    spec.set_network(net.clone());
                    let o = run(spec, CancellationToken::new()).await.unwrap();
                    assert!(o.success(), "{o:?}");
                    o.stdout.clone()
                }
            };
            best = best.max(speed(&out));
        }
        println!("| {name} | {best:.0} |");
    }
    cancel.cancel();
    println!();
    println!("reproduce: cargo bench -p capstan-sandbox --bench bridge");
}
