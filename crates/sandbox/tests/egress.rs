//! `Network::Proxy`: the command's network namespace is bridged to a real
//! egress proxy (crates/egress) on a Unix socket, and nothing else leaves it.
//! Real curl, git and python inside the sandbox; servers on the host's
//! 127.0.0.1 that count what reaches them.
//!
//! Run: `cargo test --release -p capstan-sandbox --test egress`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use capstan_egress::{
    ConnectionRecord, Policy, Protocol, Proxy, StaticResolver, Verdict, bind_unix,
};
use capstan_sandbox::{
    Command, ExecOutcome, ExecSpec, Network, PROXY_PORT, SandboxError, SandboxMode, run,
    set_launcher,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| set_launcher(env!("CARGO_BIN_EXE_capstan-sandbox-launcher")));
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// An HTTP/1.1 server on the host's 127.0.0.1: answers every request with
/// `<name>: <request line>`, keeps connections alive, counts connections.
struct Server {
    port: u16,
    connections: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Server {
    async fn start(name: &'static str) -> Server {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (c, r) = (connections.clone(), requests.clone());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                let r = r.clone();
                tokio::spawn(async move {
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
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        buf.drain(..end);
                        let line = head.lines().next().unwrap_or("").to_owned();
                        r.lock().unwrap().push(line.clone());
                        let body = format!("{name}: {line}\n");
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if s.write_all(resp.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Server {
            port,
            connections,
            requests,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// A proxy on a Unix socket, a workspace, and what the proxy recorded.
struct Fixture {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    socket: PathBuf,
    records: Arc<Mutex<Vec<ConnectionRecord>>>,
    cancel: CancellationToken,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Fixture {
    fn new(policy: Policy, resolver: StaticResolver) -> Fixture {
        setup();
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let ws = base.join("ws");
        std::fs::create_dir(&ws).unwrap();
        let socket = base.join("egress.sock");
        let records = Arc::new(Mutex::new(Vec::new()));
        let r = records.clone();
        let proxy = Proxy::builder(policy)
            .resolver(resolver)
            .audit(move |rec: ConnectionRecord| r.lock().unwrap().push(rec))
            .build();
        let listener = bind_unix(&socket).unwrap();
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move { proxy.serve_unix(listener, c).await });
        Fixture {
            _dir: dir,
            ws,
            socket,
            records,
            cancel,
        }
    }

    fn spec(&self, cmd: &str) -> ExecSpec {
        let mut spec = ExecSpec::new(Command::Shell(cmd.into()), &self.ws);
        spec.timeout = Duration::from_secs(60);
        spec.set_network(Network::Proxy {
            socket: self.socket.clone(),
        });
        spec
    }

    async fn sh(&self, cmd: &str) -> ExecOutcome {
        run(self.spec(cmd), CancellationToken::new())
            .await
            .unwrap_or_else(|e| panic!("run({cmd:?}) failed: {e}"))
    }

    /// The records, once `n` have arrived (a record is sent when its
    /// connection has ended, just after the command saw the answer).
    async fn records(&self, n: usize) -> Vec<ConnectionRecord> {
        for _ in 0..300 {
            if self.records.lock().unwrap().len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.records.lock().unwrap().clone()
    }
}

fn policy(allow: &[&str]) -> Policy {
    Policy::new(allow, &[], &[], false).unwrap()
}

fn require_tool(bin: &str, package: &str) {
    let found = ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(bin).exists());
    assert!(
        found,
        "`{bin}` is not installed; this test drives it: `apt-get install -y {package}` \
         (or run `bash tests/run`, which installs it)"
    );
}

#[tokio::test]
async fn curl_reaches_an_allowed_host_by_http_connect_and_socks_and_every_connection_is_recorded() {
    require_tool("curl", "curl");
    let a = Server::start("a").await;
    let p = a.port;
    let f = Fixture::new(
        // 127.0.0.1 is loopback: the address needs a rule of its own.
        policy(&[&format!("allowed.test:{p}"), &format!("127.0.0.1:{p}")]),
        StaticResolver::new().with("allowed.test", &[ip("127.0.0.1")]),
    );
    let out = f
        .sh(&format!(
            "curl -sS -f -m 20 http://allowed.test:{p}/plain && \
             curl -sS -f -m 20 --proxytunnel http://allowed.test:{p}/tunnel && \
             curl -sS -f -m 20 --proxy \"$ALL_PROXY\" http://allowed.test:{p}/socks"
        ))
        .await;
    assert!(out.success(), "{out:?}");
    assert_eq!(
        out.stdout,
        "a: GET /plain HTTP/1.1\na: GET /tunnel HTTP/1.1\na: GET /socks HTTP/1.1\n"
    );
    let recs = f.records(3).await;
    let protocols: Vec<Protocol> = recs.iter().map(|r| r.protocol).collect();
    assert_eq!(
        protocols,
        [Protocol::Http, Protocol::Connect, Protocol::Socks5],
        "{recs:?}"
    );
    for r in &recs {
        assert_eq!(r.verdict, Verdict::Allowed, "{r:?}");
        assert_eq!((r.host.as_str(), r.port), ("allowed.test", p));
        assert!(r.bytes_up > 0 && r.bytes_down > 0, "{r:?}");
    }
}

#[tokio::test]
async fn denied_hosts_get_a_403_naming_the_rule_and_nothing_reaches_them() {
    require_tool("curl", "curl");
    let b = Server::start("b").await;
    let p = b.port;
    let f = Fixture::new(
        policy(&["allowed.test"]),
        StaticResolver::new()
            .with("denied.test", &[ip("127.0.0.1")])
            .with("allowed.test", &[ip("127.0.0.1")]),
    );
    let out = f
        .sh(&format!(
            "curl -sS -m 20 -w '%{{http_code}}\\n' http://denied.test:{p}/; \
             curl -sS -m 20 -w '%{{http_code}}\\n' http://127.0.0.1:{p}/; \
             curl -sS -m 20 -p http://denied.test:{p}/ || echo tunnel refused"
        ))
        .await;
    assert!(
        out.stdout
            .contains(&format!("add \"denied.test:{p}\" to [network] allow")),
        "{out:?}"
    );
    assert!(
        out.stdout
            .contains(&format!("add \"127.0.0.1:{p}\" to [network] allow")),
        "{out:?}"
    );
    assert_eq!(out.stdout.matches("403\n").count(), 2, "{out:?}");
    assert!(out.stdout.contains("tunnel refused"), "{out:?}");
    assert!(out.stderr.contains("403"), "{out:?}");
    assert_eq!(b.connections(), 0, "a denied host was reached");
    let recs = f.records(3).await;
    assert_eq!(recs.len(), 3, "{recs:?}");
    assert!(recs.iter().all(|r| r.verdict == Verdict::Denied));
}

#[tokio::test]
async fn bypassing_the_proxy_reaches_nothing_not_even_dns() {
    require_tool("curl", "curl");
    require_tool("nc", "netcat-openbsd");
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let pl = l.local_addr().unwrap().port();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let pu = udp.local_addr().unwrap().port();
    let f = Fixture::new(
        policy(&[&format!("127.0.0.1:{pl}"), "*"]),
        StaticResolver::new(),
    );
    let cases: Vec<(&str, String)> = vec![
        ("curl --noproxy", format!("curl --noproxy '*' -sS -m 3 http://127.0.0.1:{pl}/")),
        ("curl without proxy variables", format!("env -u http_proxy -u HTTP_PROXY -u ALL_PROXY -u all_proxy curl -sS -m 3 http://127.0.0.1:{pl}/")),
        (
            "python tcp",
            format!("python3 -c \"import socket; socket.create_connection(('127.0.0.1',{pl}),3)\""),
        ),
        ("bash /dev/tcp", format!("bash -c 'echo x > /dev/tcp/127.0.0.1/{pl}'")),
        ("nc", format!("echo x | nc -w 2 127.0.0.1 {pl}")),
        (
            "name resolution",
            "python3 -c \"import socket; socket.getaddrinfo('example.com', 443)\"".into(),
        ),
        ("getent", "getent hosts example.com".into()),
        (
            "raw socket",
            "python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)\""
                .into(),
        ),
        (
            "packet socket",
            "python3 -c \"import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\"".into(),
        ),
        (
            "netlink socket",
            "python3 -c \"import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)\"".into(),
        ),
        (
            "a listener of its own",
            "python3 -c \"import socket; s=socket.socket(); s.bind(('127.0.0.1', 8080)); s.listen()\"".into(),
        ),
    ];
    let mut problems = Vec::new();
    for (name, cmd) in &cases {
        let out = f.sh(cmd).await;
        if out.success() {
            problems.push(format!("{name}: succeeded: {out:?}"));
        }
    }
    // UDP has no failure to observe at the sender: the host's listener is
    // the judge. A DNS-shaped query, by python and by nc.
    let dns = "python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); \
               [s.sendto(b'\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x07example\\x03com\\x00\\x00\\x01\\x00\\x01', ('127.0.0.1', PORT)) for _ in range(3)]\"; \
               echo query | nc -u -w 1 127.0.0.1 PORT; true"
        .replace("PORT", &pu.to_string());
    let out = f.sh(&dns).await;
    assert!(out.exit_code.is_some(), "{out:?}");
    let mut buf = [0u8; 512];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "a UDP datagram from the sandbox reached the host"
    );
    assert!(
        l.accept().is_err(),
        "a TCP connection from the sandbox reached the host"
    );
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(
        f.records(0).await.is_empty(),
        "nothing should have gone through the proxy"
    );
}

#[tokio::test]
async fn a_tunnel_through_the_bridge_cannot_reach_a_second_host() {
    let a = Server::start("a").await;
    let b = Server::start("b").await;
    let f = Fixture::new(
        policy(&[&format!("127.0.0.1:{}", a.port)]),
        StaticResolver::new(),
    );
    let script = format!(
        r#"
import socket
s = socket.create_connection(("127.0.0.1", {proxy}), 10)
s.sendall(b"CONNECT 127.0.0.1:{a} HTTP/1.1\r\nHost: 127.0.0.1:{a}\r\n\r\n")
print(s.recv(4096).decode().splitlines()[0])
s.sendall(b"CONNECT 127.0.0.1:{b} HTTP/1.1\r\nHost: 127.0.0.1:{b}\r\n\r\n")
print(s.recv(4096).decode().split("\r\n\r\n", 1)[1], end="")
"#,
        proxy = PROXY_PORT,
        a = a.port,
        b = b.port
    );
    std::fs::write(f.ws.join("tunnel.py"), script).unwrap();
    let out = f.sh("python3 tunnel.py").await;
    assert!(out.success(), "{out:?}");
    assert_eq!(
        out.stdout,
        format!(
            "HTTP/1.1 200 Connection established\na: CONNECT 127.0.0.1:{} HTTP/1.1\n",
            b.port
        )
    );
    assert_eq!(b.connections(), 0, "the tunnel reached a second host");
    assert_eq!(a.requests.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn git_clones_over_http_through_the_proxy() {
    require_tool("git", "git");
    // A bare repository served by a dumb-HTTP static server on the host.
    let srv = tempfile::tempdir().unwrap();
    let git = |args: &[&str], dir: &Path| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    let src = srv.path().join("src");
    std::fs::create_dir(&src).unwrap();
    git(&["init", "-q", "-b", "main"], &src);
    std::fs::write(src.join("hello.txt"), "through the proxy\n").unwrap();
    git(&["add", "."], &src);
    git(&["commit", "-q", "-m", "one"], &src);
    git(&["clone", "-q", "--bare", "src", "repo.git"], srv.path());
    git(&["update-server-info"], &srv.path().join("repo.git"));
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let p = l.local_addr().unwrap().port();
    let root = srv.path().to_path_buf();
    std::thread::spawn(move || serve_files(l, root));
    let f = Fixture::new(
        policy(&[&format!("repo.test:{p}"), &format!("127.0.0.1:{p}")]),
        StaticResolver::new().with("repo.test", &[ip("127.0.0.1")]),
    );
    let out = f
        .sh(&format!(
            "GIT_CONFIG_GLOBAL=/dev/null git clone -q http://repo.test:{p}/repo.git clone && cat clone/hello.txt"
        ))
        .await;
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, "through the proxy\n");
    assert!(f.ws.join("clone/.git").is_dir());
    let recs = f.records(1).await;
    assert!(
        recs.iter()
            .all(|r| r.host == "repo.test" && r.verdict == Verdict::Allowed),
        "{recs:?}"
    );
}

/// A static file server (enough for git's dumb HTTP protocol).
fn serve_files(l: std::net::TcpListener, root: PathBuf) {
    use std::io::{BufRead as _, Write as _};
    for conn in l.incoming() {
        let Ok(s) = conn else { return };
        let root = root.clone();
        std::thread::spawn(move || {
            let mut reader = std::io::BufReader::new(s.try_clone().unwrap());
            let mut w = s;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                }
                let path = path.split('?').next().unwrap_or("/");
                let file = root.join(path.trim_start_matches('/'));
                let ok = !path.contains("..") && file.is_file();
                let body = if ok {
                    std::fs::read(&file).unwrap()
                } else {
                    b"not found".to_vec()
                };
                let status = if ok { "200 OK" } else { "404 Not Found" };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                if w.write_all(head.as_bytes())
                    .and_then(|()| w.write_all(&body))
                    .is_err()
                {
                    return;
                }
            }
        });
    }
}

#[tokio::test]
async fn the_command_sees_the_proxy_variables_and_nothing_bypasses_them() {
    let f = Fixture::new(policy(&[]), StaticResolver::new());
    let mut spec = f.spec("env | sort");
    // A caller's variable cannot point the tools elsewhere.
    spec.env
        .push(("HTTPS_PROXY".into(), "http://10.0.0.1:8080".into()));
    let out = run(spec, CancellationToken::new()).await.unwrap();
    assert!(out.success(), "{out:?}");
    let http = format!("http://127.0.0.1:{PROXY_PORT}");
    for line in [
        format!("HTTP_PROXY={http}"),
        format!("HTTPS_PROXY={http}"),
        format!("http_proxy={http}"),
        format!("https_proxy={http}"),
        format!("ALL_PROXY=socks5h://127.0.0.1:{PROXY_PORT}"),
        "NO_PROXY=".into(),
        "no_proxy=".into(),
        format!("npm_config_proxy={http}"),
        format!("npm_config_https_proxy={http}"),
        format!("PIP_PROXY={http}"),
        format!("CARGO_HTTP_PROXY={http}"),
    ] {
        assert!(
            out.stdout.lines().any(|l| l == line),
            "missing {line}: {}",
            out.stdout
        );
    }
    assert!(!out.stdout.contains("10.0.0.1"), "{}", out.stdout);
}

#[tokio::test]
async fn a_proxy_that_cannot_be_enforced_refuses_the_command() {
    let f = Fixture::new(policy(&[]), StaticResolver::new());
    let marker = f.ws.join("ran");
    // Sandbox off: nothing would keep the command to the proxy.
    let mut spec = f.spec(&format!("touch {}", marker.display()));
    spec.mode = SandboxMode::Off;
    let err = run(spec, CancellationToken::new()).await.unwrap_err();
    assert!(matches!(err, SandboxError::Unsupported { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("cannot be enforced without the sandbox"),
        "{err}"
    );
    // No proxy listening at the socket path.
    let mut spec = f.spec(&format!("touch {}", marker.display()));
    spec.set_network(Network::Proxy {
        socket: f.ws.join("missing.sock"),
    });
    let err = run(spec, CancellationToken::new()).await.unwrap_err();
    assert!(err.to_string().contains("is not a socket"), "{err}");
    // A socket nobody serves any more: the bridge's check fails the start.
    let dead = f.ws.join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
    let mut spec = f.spec(&format!("touch {}", marker.display()));
    spec.set_network(Network::Proxy { socket: dead });
    let err = run(spec, CancellationToken::new()).await.unwrap_err();
    assert!(err.to_string().contains("proxy does not answer"), "{err}");
    assert!(!marker.exists(), "the command ran");
}
