//! What the egress proxy costs: a 100 MB download and 200 small requests from
//! a local HTTP server, direct and through the proxy (plain-HTTP forwarding
//! and a CONNECT tunnel, over the proxy's Unix socket as the sandbox bridge
//! uses it). Prints a Markdown table.
//!
//! A second table does the same over TLS (a local HTTPS server with a test
//! CA): direct, a blind CONNECT tunnel (TLS end to end), and a CONNECT to a
//! host with a brokered credential (the proxy terminates TLS with the
//! workspace CA, sets the header, and talks TLS to the server itself). Every
//! small request there is a new connection with its TLS handshakes.
//!
//! Between the Unix socket and the server's TCP socket the proxy splices
//! (`splice(2)`, see crates/egress/src/splice.rs). With the `bench-copy`
//! feature each proxy row is followed by the same path through a proxy that
//! copies through user space, as it does for TLS it terminates.
//!
//! Rows are measured in interleaved rounds (every row once per round), so a
//! slow stretch of a shared machine hits all rows alike. Throughput is the
//! best round; the CPU column is the whole process's CPU time (server, proxy
//! and client together) per 100 MB in the median round: the proxy's own
//! cost per byte, whatever the machine's core count lets the three overlap.
//!
//! On 2 cores an unpaced download keeps the server and the client busy on
//! one core each, so any third party (the proxy) takes time from them:
//! `CAPSTAN_BENCH_LINE_MBPS=10000` paces the server to a 10 Gbit/s link,
//! as a download from outside the machine arrives, and shows what the
//! proxy costs below that.
//!
//! Reproduce: `cargo bench -p capstan-egress --bench throughput --features bench-copy`
//! (`CAPSTAN_BENCH_MB`, `CAPSTAN_BENCH_N` and `CAPSTAN_BENCH_ROUNDS` change
//! the download size, the request count and the rounds; `CAPSTAN_BENCH_ONLY=text` measures only the direct rows and
//! those whose name contains `text`, e.g. under `perf record`).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_macros)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_egress::{Ca, Credential, Policy, Proxy, Secret, bind_unix, certs_from_pem};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio_util::sync::CancellationToken;

/// Serves `GET /big` (`big` bytes) and `GET /small` (2 bytes), keep-alive;
/// over TLS with `tls`.
async fn server(big: u64, tls: Option<tokio_rustls::TlsAcceptor>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let _ = s.set_nodelay(true);
            let tls = tls.clone();
            tokio::spawn(async move {
                match tls {
                    Some(a) => {
                        if let Ok(t) = a.accept(s).await {
                            serve_conn(t, big).await
                        }
                    }
                    None => serve_conn(s, big).await,
                }
            });
        }
    });
    port
}

async fn serve_conn<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, big: u64) {
    let chunk = vec![b'x'; 256 * 1024];
    let mut buf = Vec::new();
    loop {
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut b = [0u8; 4096];
            match s.read(&mut b).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&b[..n]),
            }
        };
        let big_req = buf[..end].windows(4).any(|w| w == b"/big");
        buf.drain(..end);
        let len = if big_req { big } else { 2 };
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n");
        if s.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let mut left = len;
        let start = tokio::time::Instant::now();
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            if s.write_all(&chunk[..n]).await.is_err() {
                return;
            }
            left -= n as u64;
            // Paced to a line rate: the bytes sent so far may not be ahead of
            // it by more than a millisecond.
            if let Some(rate) = line_rate() {
                let due = start + Duration::from_secs_f64((len - left) as f64 / rate);
                if due > tokio::time::Instant::now() + Duration::from_millis(1) {
                    tokio::time::sleep_until(due).await;
                }
            }
        }
        // Over TLS the last records may wait in the session until a flush.
        if s.flush().await.is_err() {
            return;
        }
    }
}

/// The server's line rate in bytes/s (`CAPSTAN_BENCH_LINE_MBPS`, megabits
/// per second, as links are rated); `None`: as fast as it can.
fn line_rate() -> Option<f64> {
    std::env::var("CAPSTAN_BENCH_LINE_MBPS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .map(|mbit| mbit * 1e6 / 8.0)
}

/// Sends one GET and reads the whole response; returns the body length.
async fn get<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, target: &str) -> u64 {
    s.write_all(format!("GET {target} HTTP/1.1\r\nHost: bench.test\r\n\r\n").as_bytes())
        .await
        .unwrap();
    s.flush().await.unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).await.unwrap();
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let len: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut left = len;
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        let n = s.read(&mut buf[..want]).await.unwrap();
        assert!(n > 0);
        left -= n as u64;
    }
    len
}

#[derive(Clone, Copy)]
enum Path {
    Direct,
    Forward,
    Tunnel,
    /// A CONNECT tunnel with the client on TCP: splice then moves pages both
    /// ways, where a Unix socket's write side copies them.
    TunnelTcp,
}

impl Path {
    fn name(self, copy: bool) -> &'static str {
        match (self, copy) {
            (Path::Direct, _) => "direct (TCP to the server)",
            (Path::Forward, false) => "proxy, plain-HTTP forwarding (Unix socket), splice",
            (Path::Forward, true) => "proxy, plain-HTTP forwarding (Unix socket), user-space copy",
            (Path::Tunnel, false) => "proxy, CONNECT tunnel (Unix socket), splice",
            (Path::Tunnel, true) => "proxy, CONNECT tunnel (Unix socket), user-space copy",
            (Path::TunnelTcp, false) => "proxy, CONNECT tunnel (TCP), splice",
            (Path::TunnelTcp, true) => "proxy, CONNECT tunnel (TCP), user-space copy",
        }
    }
}

/// The proxy paths to measure: spliced, and copied with `bench-copy`.
fn variants() -> &'static [bool] {
    if cfg!(feature = "bench-copy") {
        &[false, true]
    } else {
        &[false]
    }
}

/// Whether to measure the row `name`: all rows, or with
/// `CAPSTAN_BENCH_ONLY=text` the direct ones and those whose name contains
/// `text` (to profile one path).
fn selected(name: &str) -> bool {
    match std::env::var("CAPSTAN_BENCH_ONLY") {
        Ok(only) => name.starts_with("direct") || name.contains(&only),
        Err(_) => true,
    }
}

/// Where a proxy listens.
#[derive(Clone)]
struct Via {
    unix: std::path::PathBuf,
    tcp: std::net::SocketAddr,
}

/// Serves `proxy` on a new Unix socket in `dir` and on TCP, copying through
/// user space when `copy` (with the `bench-copy` feature).
async fn serve(
    builder: capstan_egress::ProxyBuilder,
    copy: bool,
    dir: &std::path::Path,
    cancel: &CancellationToken,
) -> Via {
    #[cfg(feature = "bench-copy")]
    let builder = if copy { builder.copy_relay() } else { builder };
    #[cfg(not(feature = "bench-copy"))]
    let _ = copy;
    let proxy = builder.build();
    let socket = dir.join(if copy { "copy.sock" } else { "splice.sock" });
    let listener = bind_unix(&socket).unwrap();
    let (p, c) = (proxy.clone(), cancel.clone());
    tokio::spawn(async move { p.serve_unix(listener, c).await });
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let c = cancel.clone();
    tokio::spawn(async move { proxy.serve_tcp(tcp, c).await });
    Via {
        unix: socket,
        tcp: addr,
    }
}

enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// A fresh connection ready for `GET target`: the target to send.
async fn open(path: Path, port: u16, via: &Via, what: &str) -> (Conn, String) {
    let socket = via.unix.as_path();
    match path {
        Path::Direct => {
            let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            s.set_nodelay(true).unwrap();
            (Conn::Tcp(s), what.to_owned())
        }
        Path::Forward => (
            Conn::Unix(UnixStream::connect(socket).await.unwrap()),
            format!("http://bench.test:{port}{what}"),
        ),
        Path::Tunnel => {
            let mut s = UnixStream::connect(socket).await.unwrap();
            s.write_all(format!("CONNECT bench.test:{port} HTTP/1.1\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                s.read_exact(&mut b).await.unwrap();
                head.push(b[0]);
            }
            assert!(head.starts_with(b"HTTP/1.1 200"));
            (Conn::Unix(s), what.to_owned())
        }
        Path::TunnelTcp => {
            let mut s = TcpStream::connect(via.tcp).await.unwrap();
            s.set_nodelay(true).unwrap();
            s.write_all(format!("CONNECT bench.test:{port} HTTP/1.1\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                s.read_exact(&mut b).await.unwrap();
                head.push(b[0]);
            }
            assert!(head.starts_with(b"HTTP/1.1 200"));
            (Conn::Tcp(s), what.to_owned())
        }
    }
}

async fn fetch(path: Path, port: u16, via: &Via, what: &str) -> u64 {
    let (conn, target) = open(path, port, via, what).await;
    match conn {
        Conn::Tcp(mut s) => get(&mut s, &target).await,
        Conn::Unix(mut s) => get(&mut s, &target).await,
    }
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU time of this process (every thread: server, proxy and client).
fn cpu() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// What the rounds measured for one row.
#[derive(Default)]
struct Stat {
    /// MB/s of each download.
    rates: Vec<f64>,
    /// Process CPU per 100 MB of each download.
    cpus: Vec<Duration>,
    /// Each small request.
    times: Vec<Duration>,
}

impl Stat {
    fn download(&mut self, bytes: u64, wall: Duration, cpu: Duration) {
        let mb = bytes as f64 / (1 << 20) as f64;
        self.rates.push(mb / wall.as_secs_f64());
        self.cpus.push(cpu.mul_f64(100.0 / mb));
    }

    fn best(&self) -> f64 {
        self.rates.iter().copied().fold(0.0, f64::max)
    }

    fn cpu(&mut self) -> Duration {
        pct(&mut self.cpus, 0.5)
    }
}

/// Measures every row in `rounds` interleaved rounds (so a slow stretch of
/// the machine hits all rows alike): per row and round, one download of
/// `big` bytes, then its share of `n` small requests, each on a connection
/// of its own, so the proxy decides every one (the cost a command pays per
/// request). `fetch(row, target)` returns the body's length.
async fn measure<R, F, Fut>(rows: &[R], rounds: usize, n: usize, big: u64, fetch: F) -> Vec<Stat>
where
    F: Fn(&R, &'static str) -> Fut,
    Fut: std::future::Future<Output = u64>,
{
    let mut stats: Vec<Stat> = rows.iter().map(|_| Stat::default()).collect();
    for row in rows {
        fetch(row, "/small").await; // warm-up
    }
    for _ in 0..rounds {
        for (row, st) in rows.iter().zip(stats.iter_mut()) {
            let (t, c) = (Instant::now(), cpu());
            assert_eq!(fetch(row, "/big").await, big);
            st.download(big, t.elapsed(), cpu() - c);
            for _ in 0..n.div_ceil(rounds) {
                let t = Instant::now();
                fetch(row, "/small").await;
                st.times.push(t.elapsed());
            }
        }
    }
    stats
}

/// Prints one row per stat, each proxy row compared with the first (direct).
fn print_rows(names: &[&str], stats: &mut [Stat]) {
    let (direct_rate, direct_cpu) = (stats[0].best(), stats[0].cpu());
    let direct_p50 = pct(&mut stats[0].times, 0.5);
    for (i, (name, st)) in names.iter().zip(stats.iter_mut()).enumerate() {
        let (best, cpu) = (st.best(), st.cpu());
        let (p50, p99) = (pct(&mut st.times, 0.5), pct(&mut st.times, 0.99));
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        if i == 0 {
            println!(
                "| {name} | {best:.0} | {:.0} ms | {:.0} µs | {:.0} µs |",
                ms(cpu),
                us(p50),
                us(p99)
            );
        } else {
            println!(
                "| {name} | {best:.0} ({:+.1}%) | {:.0} ms ({:+.0} ms) | {:.0} µs ({:+.0} µs) | {:.0} µs |",
                (best / direct_rate - 1.0) * 100.0,
                ms(cpu),
                ms(cpu) - ms(direct_cpu),
                us(p50),
                us(p50) - us(direct_p50),
                us(p99)
            );
        }
    }
}

#[tokio::main]
async fn main() {
    let mb: u64 = env_or("CAPSTAN_BENCH_MB", 100);
    let n: usize = env_or("CAPSTAN_BENCH_N", 200);
    let rounds: usize = env_or("CAPSTAN_BENCH_ROUNDS", 5).max(1);
    let big = mb << 20;
    let port = server(big, None).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = Policy::new(
        &[format!("bench.test:{port}"), format!("127.0.0.1:{port}")],
        &[],
        &[],
        false,
    )
    .unwrap();
    let builder = || {
        Proxy::builder(policy.clone()).resolver(
            capstan_egress::StaticResolver::new()
                .with("bench.test", &["127.0.0.1".parse().unwrap()]),
        )
    };
    let cancel = CancellationToken::new();
    let mut sockets = Vec::new();
    for &copy in variants() {
        sockets.push((copy, serve(builder(), copy, dir.path(), &cancel).await));
    }

    println!(
        "| path | {mb} MB download, MB/s (best of {rounds}) | CPU per 100 MB | {n} small requests, p50 | p99 |"
    );
    println!("|---|---|---|---|---|");
    let mut rows = vec![(Path::Direct, false, sockets[0].1.clone())];
    for path in [Path::Forward, Path::Tunnel, Path::TunnelTcp] {
        for (copy, socket) in &sockets {
            rows.push((path, *copy, socket.clone()));
        }
    }
    rows.retain(|(path, copy, _)| selected(path.name(*copy)));
    let mut stats = measure(&rows, rounds, n, big, |(path, _, via), what| {
        let (path, via) = (*path, via.clone());
        async move { fetch(path, port, &via, what).await }
    })
    .await;
    let names: Vec<&str> = rows.iter().map(|(p, copy, _)| p.name(*copy)).collect();
    print_rows(&names, &mut stats);
    println!();
    tls_table(big, mb, n, rounds).await;
    cancel.cancel();
    println!();
    println!(
        "reproduce: cargo bench -p capstan-egress --bench throughput{}",
        if cfg!(feature = "bench-copy") {
            " --features bench-copy"
        } else {
            ""
        }
    );
}

#[derive(Clone, Copy, PartialEq)]
enum TlsPath {
    Direct,
    Blind,
    Brokered,
}

impl TlsPath {
    fn name(self, copy: bool) -> &'static str {
        match (self, copy) {
            (TlsPath::Direct, _) => "direct TLS (TCP to the server)",
            (TlsPath::Blind, false) => {
                "proxy, CONNECT tunnel, TLS end to end (no credential), splice"
            }
            (TlsPath::Blind, true) => {
                "proxy, CONNECT tunnel, TLS end to end (no credential), user-space copy"
            }
            (TlsPath::Brokered, _) => "proxy, CONNECT with a brokered credential (TLS terminated)",
        }
    }
}

fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs_from_pem(ca_pem).unwrap() {
        roots.add(c).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// A new TLS connection to `host:port` on `path`, then `GET what`.
#[allow(clippy::too_many_arguments)]
async fn tls_fetch(
    path: TlsPath,
    port: u16,
    socket: &std::path::Path,
    host: &str,
    server_ca: &Arc<rustls::ClientConfig>,
    capstan_ca: &Arc<rustls::ClientConfig>,
    what: &str,
) -> u64 {
    let name = ServerName::try_from(host.to_owned()).unwrap();
    let (cfg, conn) = match path {
        TlsPath::Direct => {
            let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            s.set_nodelay(true).unwrap();
            (server_ca, Conn::Tcp(s))
        }
        TlsPath::Blind | TlsPath::Brokered => {
            let mut s = UnixStream::connect(socket).await.unwrap();
            s.write_all(format!("CONNECT {host}:{port} HTTP/1.1\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                s.read_exact(&mut b).await.unwrap();
                head.push(b[0]);
            }
            assert!(head.starts_with(b"HTTP/1.1 200"));
            let cfg = if path == TlsPath::Brokered {
                capstan_ca
            } else {
                server_ca
            };
            (cfg, Conn::Unix(s))
        }
    };
    let connector = tokio_rustls::TlsConnector::from(cfg.clone());
    match conn {
        Conn::Tcp(s) => get(&mut connector.connect(name, s).await.unwrap(), what).await,
        Conn::Unix(s) => get(&mut connector.connect(name, s).await.unwrap(), what).await,
    }
}

async fn tls_table(big: u64, mb: u64, n: usize, rounds: usize) {
    // A test CA and a certificate for both names the server answers as.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_pem = ca_params.self_signed(&ca_key).unwrap().pem();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["api.test".into(), "plain.test".into()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server_cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    let port = server(
        big,
        Some(tokio_rustls::TlsAcceptor::from(Arc::new(server_cfg))),
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let ca = Arc::new(Ca::create(&dir.path().join("ca")).unwrap());
    let lo = ["127.0.0.1".parse().unwrap()];
    let policy = Policy::new(
        &[
            format!("api.test:{port}"),
            format!("plain.test:{port}"),
            format!("127.0.0.1:{port}"),
        ],
        &[],
        &[],
        false,
    )
    .unwrap();
    let cred = Credential::new(
        "api.test",
        "Authorization",
        Secret::new("Bearer bench-token-0123456789").unwrap(),
    )
    .unwrap()
    .on_port(port);
    let builder = || {
        Proxy::builder(policy.clone())
            .resolver(
                capstan_egress::StaticResolver::new()
                    .with("api.test", &lo)
                    .with("plain.test", &lo),
            )
            .credentials(ca.clone(), vec![cred.clone()])
            .upstream_ca(certs_from_pem(&ca_pem).unwrap())
    };
    let cancel = CancellationToken::new();
    let mut sockets = Vec::new();
    for &copy in variants() {
        sockets.push((copy, serve(builder(), copy, dir.path(), &cancel).await.unix));
    }
    let server_ca = client_config(&ca_pem);
    let capstan_ca = client_config(ca.cert_pem());

    println!(
        "| TLS path | {mb} MB download, MB/s (best of {rounds}) | CPU per 100 MB | {n} small requests (new connection each), p50 | p99 |"
    );
    println!("|---|---|---|---|---|");
    let mut rows = vec![(TlsPath::Direct, false, sockets[0].1.clone())];
    for (copy, socket) in &sockets {
        rows.push((TlsPath::Blind, *copy, socket.clone()));
    }
    rows.push((TlsPath::Brokered, false, sockets[0].1.clone()));
    rows.retain(|(path, copy, _)| selected(path.name(*copy)));
    let fetch = |path: TlsPath, socket: &std::path::PathBuf, what: &'static str| {
        let host = if path == TlsPath::Brokered {
            "api.test"
        } else {
            "plain.test"
        };
        let socket = socket.clone();
        let (server_ca, capstan_ca) = (server_ca.clone(), capstan_ca.clone());
        async move { tls_fetch(path, port, &socket, host, &server_ca, &capstan_ca, what).await }
    };
    let mut stats = measure(&rows, rounds, n, big, |(path, _, socket), what| {
        fetch(*path, socket, what)
    })
    .await;
    let names: Vec<&str> = rows.iter().map(|(p, copy, _)| p.name(*copy)).collect();
    print_rows(&names, &mut stats);
    cancel.cancel();
}
