//! The proxy end to end: real sockets on 127.0.0.1 and a real Unix socket,
//! names resolved by an injected resolver. Every refusal is also checked on
//! the host side (the server that must not be reached saw no connection).
//!
//! Run: `cargo test --release -p capstan-egress --test proxy`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use capstan_egress::{
    Ask, ConnectionRecord, DecidedBy, Decision, Policy, Protocol, Proxy, Resolver, StaticResolver,
    Verdict, bind_unix,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};
use tokio_util::sync::CancellationToken;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A small HTTP/1.1 server on 127.0.0.1 that answers every request with a
/// line naming itself, the request line and the Host header, keeps
/// connections alive, and counts connections.
struct Server {
    port: u16,
    connections: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Server {
    async fn start(name: &'static str) -> Server {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (c, r) = (connections.clone(), requests.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                c.fetch_add(1, Ordering::SeqCst);
                let r = r.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        let Some(end) = read_until(&mut s, &mut buf, b"\r\n\r\n").await else {
                            return;
                        };
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        buf.drain(..end);
                        let line = head.lines().next().unwrap_or("").to_owned();
                        let header = |n: &str| {
                            head.lines()
                                .find_map(|l| {
                                    let (k, v) = l.split_once(':')?;
                                    k.eq_ignore_ascii_case(n).then(|| v.trim().to_owned())
                                })
                                .unwrap_or_default()
                        };
                        let mut body_len = 0;
                        if let Ok(n) = header("content-length").parse::<usize>() {
                            while buf.len() < n {
                                let mut b = [0u8; 4096];
                                let k = s.read(&mut b).await.unwrap_or(0);
                                if k == 0 {
                                    return;
                                }
                                buf.extend_from_slice(&b[..k]);
                            }
                            buf.drain(..n);
                            body_len = n;
                        } else if header("transfer-encoding").contains("chunked") {
                            let Some(end) = read_until(&mut s, &mut buf, b"0\r\n\r\n").await else {
                                return;
                            };
                            body_len = end;
                            buf.drain(..end);
                        }
                        r.lock()
                            .unwrap()
                            .push(format!("{line} host={} body={body_len}", header("host")));
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

/// Reads into `buf` until it holds `pat`; the index just past it.
async fn read_until<S: AsyncReadExt + Unpin>(
    s: &mut S,
    buf: &mut Vec<u8>,
    pat: &[u8],
) -> Option<usize> {
    loop {
        if let Some(i) = buf.windows(pat.len()).position(|w| w == pat) {
            return Some(i + pat.len());
        }
        let mut b = [0u8; 4096];
        let n = s.read(&mut b).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&b[..n]);
    }
}

/// One HTTP response: status line and body (Content-Length framing).
async fn read_response<S: AsyncReadExt + Unpin>(s: &mut S, buf: &mut Vec<u8>) -> (String, String) {
    let end = read_until(s, buf, b"\r\n\r\n")
        .await
        .expect("a response head");
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    buf.drain(..end);
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    while buf.len() < len {
        let mut b = [0u8; 4096];
        let n = s.read(&mut b).await.unwrap();
        assert!(n > 0, "the body ended early");
        buf.extend_from_slice(&b[..n]);
    }
    let body = String::from_utf8_lossy(&buf[..len]).into_owned();
    buf.drain(..len);
    (head.lines().next().unwrap_or("").to_owned(), body)
}

/// A proxy on a Unix socket in a private directory, recording every
/// connection.
struct Harness {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    records: Arc<Mutex<Vec<ConnectionRecord>>>,
    cancel: CancellationToken,
    proxy: Proxy,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Harness {
    fn start(policy: Policy, resolver: impl Resolver) -> Harness {
        Self::start_with(
            policy,
            resolver,
            None::<fn(Ask) -> std::future::Ready<Decision>>,
        )
    }

    fn start_with<H: capstan_egress::DecisionHook>(
        policy: Policy,
        resolver: impl Resolver,
        hook: Option<H>,
    ) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("egress.sock");
        let records = Arc::new(Mutex::new(Vec::new()));
        let r = records.clone();
        let mut b = Proxy::builder(policy)
            .resolver(resolver)
            .audit(move |rec: ConnectionRecord| r.lock().unwrap().push(rec));
        if let Some(h) = hook {
            b = b.hook(h);
        }
        let proxy = b.build();
        let listener = bind_unix(&socket).unwrap();
        let cancel = CancellationToken::new();
        let (p, c) = (proxy.clone(), cancel.clone());
        tokio::spawn(async move { p.serve_unix(listener, c).await });
        Harness {
            _dir: dir,
            socket,
            records,
            cancel,
            proxy,
        }
    }

    async fn client(&self) -> UnixStream {
        UnixStream::connect(&self.socket).await.unwrap()
    }

    /// Waits (bounded) until `n` records arrived: a record is sent when its
    /// connection ends, which may be just after the client saw the answer.
    async fn records(&self, n: usize) -> Vec<ConnectionRecord> {
        for _ in 0..200 {
            if self.records.lock().unwrap().len() >= n {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        self.records.lock().unwrap().clone()
    }

    /// `CONNECT target` on a new connection: the status line and the stream.
    async fn connect(&self, target: &str) -> (String, String, UnixStream) {
        let mut c = self.client().await;
        c.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut buf = Vec::new();
        let (status, body) = read_response(&mut c, &mut buf).await;
        assert!(buf.is_empty());
        (status, body, c)
    }
}

fn policy(allow: &[&str], deny: &[&str]) -> Policy {
    Policy::new(allow, deny, &[], false).unwrap()
}

#[tokio::test]
async fn an_allowed_name_is_reached_through_connect_and_audited() {
    let a = Server::start("a").await;
    let h = Harness::start(
        policy(
            &[
                &format!("allowed.test:{}", a.port),
                &format!("127.0.0.1:{}", a.port),
            ],
            &[],
        ),
        StaticResolver::new().with("allowed.test", &[ip("127.0.0.1")]),
    );
    let (status, _, mut c) = h.connect(&format!("allowed.test:{}", a.port)).await;
    assert_eq!(status, "HTTP/1.1 200 Connection established");
    c.write_all(b"GET /inside HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
        .await
        .unwrap();
    let (status, body) = read_response(&mut c, &mut Vec::new()).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(body, "a: GET /inside HTTP/1.1\n");
    drop(c);
    let recs = h.records(1).await;
    assert_eq!(recs.len(), 1, "{recs:?}");
    let r = &recs[0];
    assert_eq!((r.host.as_str(), r.port), ("allowed.test", a.port));
    assert_eq!(r.protocol, Protocol::Connect);
    assert_eq!(r.verdict, Verdict::Allowed);
    assert_eq!(r.decided_by, DecidedBy::Policy);
    assert_eq!(
        r.rule.as_deref(),
        Some(format!("allowed.test:{}", a.port).as_str())
    );
    assert_eq!(
        r.address,
        Some(format!("127.0.0.1:{}", a.port).parse().unwrap())
    );
    assert!(r.bytes_up >= 44 && r.bytes_down >= 40, "{r:?}");
}

#[tokio::test]
async fn names_resolving_to_special_addresses_are_refused_unless_the_address_is_named() {
    let a = Server::start("a").await;
    let p = a.port;
    let resolver = StaticResolver::new()
        .with("loop.test", &[ip("127.0.0.1")])
        .with("mapped.test", &[ip("::ffff:127.0.0.1")])
        .with("private.test", &[ip("10.1.2.3")])
        .with("meta.test", &[ip("169.254.169.254")])
        .with("cgnat.test", &[ip("100.64.0.7")])
        .with("ula.test", &[ip("fd00::1")]);
    let names = [
        "loop.test",
        "mapped.test",
        "private.test",
        "meta.test",
        "cgnat.test",
        "ula.test",
    ];
    let allow: Vec<String> = names.iter().map(|n| format!("{n}:{p}")).collect();
    let allow: Vec<&str> = allow.iter().map(String::as_str).collect();
    let h = Harness::start(policy(&allow, &[]), resolver);
    for (name, says) in [
        ("loop.test", "loopback"),
        ("mapped.test", "loopback"),
        ("private.test", "private"),
        ("meta.test", "metadata"),
        ("cgnat.test", "carrier-grade NAT"),
        ("ula.test", "private"),
    ] {
        let (status, body, _) = h.connect(&format!("{name}:{p}")).await;
        assert_eq!(status, "HTTP/1.1 403 Forbidden", "{name}");
        assert!(body.contains(says), "{name}: {body}");
        assert!(body.contains("to [network] allow"), "{body}");
    }
    assert_eq!(a.connections(), 0, "a refused name reached the server");
    let recs = h.records(names.len()).await;
    assert!(
        recs.iter()
            .all(|r| r.verdict == Verdict::Denied && r.address.is_none())
    );

    // Naming the address lets the same name through.
    let mut both = allow.clone();
    let named = format!("127.0.0.1:{p}");
    both.push(&named);
    h.proxy.set_policy(policy(&both, &[]));
    let (status, _, _) = h.connect(&format!("loop.test:{p}")).await;
    assert_eq!(status, "HTTP/1.1 200 Connection established");
}

#[tokio::test]
async fn ip_literals_need_an_address_rule_whatever_their_spelling() {
    let a = Server::start("a").await;
    let p = a.port;
    let h = Harness::start(policy(&["*", "*.test:*"], &[]), StaticResolver::new());
    for literal in [
        format!("127.0.0.1:{p}"),
        format!("2130706433:{p}"),
        format!("0x7f.1:{p}"),
        format!("[::1]:{p}"),
        format!("[::ffff:127.0.0.1]:{p}"),
    ] {
        let (status, body, _) = h.connect(&literal).await;
        assert_eq!(status, "HTTP/1.1 403 Forbidden", "{literal}");
        assert!(
            body.contains("not in the workspace's network allowlist"),
            "{body}"
        );
    }
    assert_eq!(a.connections(), 0);
    h.proxy
        .set_policy(policy(&[&format!("127.0.0.1:{p}")], &[]));
    let (status, _, _) = h.connect(&format!("2130706433:{p}")).await;
    assert_eq!(status, "HTTP/1.1 200 Connection established");
}

#[tokio::test]
async fn unlisted_and_denied_hosts_are_refused_with_the_rule_to_add() {
    let a = Server::start("a").await;
    let p = a.port;
    let h = Harness::start(
        policy(&["*.test:*", &format!("127.0.0.1:{p}")], &["bad.test"]),
        StaticResolver::new()
            .with("bad.test", &[ip("127.0.0.1")])
            .with("other.example", &[ip("127.0.0.1")]),
    );
    let (status, body, _) = h.connect("other.example:443").await;
    assert_eq!(status, "HTTP/1.1 403 Forbidden");
    assert!(
        body.contains("add \"other.example\" to [network] allow"),
        "{body}"
    );
    assert!(body.contains("set ask = true"), "{body}");
    let (status, body, _) = h.connect(&format!("other.example:{p}")).await;
    assert_eq!(status, "HTTP/1.1 403 Forbidden");
    assert!(
        body.contains(&format!("add \"other.example:{p}\"")),
        "{body}"
    );
    // Deny wins over `*.test:*`.
    let (status, body, _) = h.connect("bad.test:443").await;
    assert_eq!(status, "HTTP/1.1 403 Forbidden");
    assert!(body.contains("refused by the rule \"bad.test\""), "{body}");
    assert_eq!(a.connections(), 0);
    let recs = h.records(3).await;
    assert_eq!(recs.len(), 3);
    assert_eq!(recs[0].decided_by, DecidedBy::Default);
    assert_eq!(recs[2].rule.as_deref(), Some("bad.test"));
}

#[tokio::test]
async fn every_request_on_a_keep_alive_connection_is_decided_on_its_host() {
    let a = Server::start("a").await;
    let b = Server::start("b").await;
    let h = Harness::start(
        policy(
            &[
                &format!("a.test:{}", a.port),
                &format!("127.0.0.1:{}", a.port),
            ],
            &[],
        ),
        StaticResolver::new()
            .with("a.test", &[ip("127.0.0.1")])
            .with("b.test", &[ip("127.0.0.1")]),
    );
    let mut c = h.client().await;
    let mut buf = Vec::new();
    let url = |host: &str, port: u16, path: &str| format!("http://{host}:{port}{path}");
    // Two requests to the allowed host, one with a chunked body: one upstream
    // connection, Host taken from the URL.
    c.write_all(
        format!(
            "GET {} HTTP/1.1\r\nHost: b.test\r\nProxy-Connection: keep-alive\r\n\r\n",
            url("a.test", a.port, "/one")
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let (status, body) = read_response(&mut c, &mut buf).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(body, "a: GET /one HTTP/1.1\n");
    c.write_all(
        format!(
            "POST {} HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            url("a.test", a.port, "/two")
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let (status, body) = read_response(&mut c, &mut buf).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(body, "a: POST /two HTTP/1.1\n");
    assert_eq!(a.connections(), 1);
    {
        let reqs = a.requests.lock().unwrap();
        assert_eq!(
            reqs[0],
            format!("GET /one HTTP/1.1 host=a.test:{} body=0", a.port)
        );
        assert!(reqs[1].starts_with("POST /two HTTP/1.1"), "{reqs:?}");
        assert!(!reqs[1].ends_with("body=0"), "{reqs:?}");
    }
    // The third request on the same connection names another host: refused.
    c.write_all(
        format!(
            "GET {} HTTP/1.1\r\nHost: b.test\r\n\r\n",
            url("b.test", b.port, "/x")
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let (status, body) = read_response(&mut c, &mut buf).await;
    assert_eq!(status, "HTTP/1.1 403 Forbidden");
    assert!(body.contains(&format!("b.test:{}", b.port)), "{body}");
    assert_eq!(b.connections(), 0);
    // Smuggling-shaped framing is refused.
    let mut c = h.client().await;
    c.write_all(
        format!(
            "POST {} HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            url("a.test", a.port, "/s")
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let (status, _) = read_response(&mut c, &mut Vec::new()).await;
    assert_eq!(status, "HTTP/1.1 400 Bad Request");
    let recs = h.records(2).await;
    assert_eq!(
        recs.iter().filter(|r| r.protocol == Protocol::Http).count(),
        2,
        "{recs:?}"
    );
}

#[tokio::test]
async fn a_connect_tunnel_cannot_be_used_to_reach_a_second_host() {
    let a = Server::start("a").await;
    let b = Server::start("b").await;
    let h = Harness::start(
        policy(&[&format!("127.0.0.1:{}", a.port)], &[]),
        StaticResolver::new(),
    );
    let (status, _, mut c) = h.connect(&format!("127.0.0.1:{}", a.port)).await;
    assert_eq!(status, "HTTP/1.1 200 Connection established");
    // A second CONNECT inside the tunnel, and an absolute-form request: both
    // go to the tunnel's host, which answers them itself.
    c.write_all(
        format!(
            "CONNECT 127.0.0.1:{0} HTTP/1.1\r\nHost: 127.0.0.1:{0}\r\n\r\n",
            b.port
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    let (_, body) = read_response(&mut c, &mut buf).await;
    assert!(body.starts_with("a: CONNECT"), "{body}");
    c.write_all(format!("GET http://127.0.0.1:{}/ HTTP/1.1\r\n\r\n", b.port).as_bytes())
        .await
        .unwrap();
    let (_, body) = read_response(&mut c, &mut buf).await;
    assert!(body.starts_with("a: GET http://"), "{body}");
    assert_eq!(b.connections(), 0, "the tunnel reached a second host");
    assert_eq!(a.requests.lock().unwrap().len(), 2);
}

async fn socks_connect(c: &mut UnixStream, atyp: u8, addr: &[u8], port: u16, cmd: u8) -> u8 {
    c.write_all(&[5, 1, 0]).await.unwrap();
    let mut hello = [0u8; 2];
    c.read_exact(&mut hello).await.unwrap();
    assert_eq!(hello, [5, 0]);
    let mut req = vec![5, cmd, 0, atyp];
    req.extend_from_slice(addr);
    req.extend_from_slice(&port.to_be_bytes());
    c.write_all(&req).await.unwrap();
    let mut rep = [0u8; 10];
    c.read_exact(&mut rep).await.unwrap();
    rep[1]
}

#[tokio::test]
async fn socks5_resolves_names_itself_and_holds_literals_to_address_rules() {
    let a = Server::start("a").await;
    let p = a.port;
    let h = Harness::start(
        policy(&[&format!("a.test:{p}"), &format!("127.0.0.1:{p}")], &[]),
        StaticResolver::new().with("a.test", &[ip("127.0.0.1")]),
    );
    // A domain name: resolved by the proxy, allowed, and usable.
    let mut c = h.client().await;
    let mut name = vec![6u8];
    name.extend_from_slice(b"a.test");
    assert_eq!(socks_connect(&mut c, 3, &name, p, 1).await, 0);
    c.write_all(b"GET /s HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .await
        .unwrap();
    let (_, body) = read_response(&mut c, &mut Vec::new()).await;
    assert_eq!(body, "a: GET /s HTTP/1.1\n");
    // Another name on the same address: not allowed (code 2).
    let mut c = h.client().await;
    let mut name = vec![6u8];
    name.extend_from_slice(b"b.test");
    assert_eq!(socks_connect(&mut c, 3, &name, p, 1).await, 2);
    // An IP literal the client resolved itself needs an address rule: there
    // is one for port p, not for p+1.
    let mut c = h.client().await;
    assert_eq!(socks_connect(&mut c, 1, &[127, 0, 0, 1], p, 1).await, 0);
    let mut c = h.client().await;
    assert_eq!(
        socks_connect(&mut c, 1, &[127, 0, 0, 1], p.wrapping_add(1), 1).await,
        2
    );
    // UDP ASSOCIATE and BIND are not offered.
    let mut c = h.client().await;
    assert_eq!(socks_connect(&mut c, 1, &[127, 0, 0, 1], p, 3).await, 7);
    let mut c = h.client().await;
    assert_eq!(socks_connect(&mut c, 1, &[127, 0, 0, 1], p, 2).await, 7);
    let recs = h.records(4).await;
    assert!(recs.iter().all(|r| r.protocol == Protocol::Socks5));
    assert_eq!(a.connections(), 2);
}

#[tokio::test]
async fn unlisted_hosts_ask_and_the_answer_holds_as_long_as_it_says() {
    let a = Server::start("a").await;
    let p = a.port;
    let asked = Arc::new(Mutex::new(Vec::<Ask>::new()));
    let answers = Arc::new(Mutex::new(vec![
        Decision::Deny,
        Decision::Once,
        Decision::Session,
    ]));
    let (q, ans) = (asked.clone(), answers.clone());
    let hook = move |ask: Ask| {
        q.lock().unwrap().push(ask);
        let d = ans.lock().unwrap().remove(0);
        std::future::ready(d)
    };
    let mut pol = policy(&[&format!("127.0.0.1:{p}")], &[]);
    pol.ask = true;
    let h = Harness::start_with(
        pol,
        StaticResolver::new().with("new.test", &[ip("127.0.0.1")]),
        Some(hook),
    );
    let target = format!("new.test:{p}");
    let (status, body, _) = h.connect(&target).await;
    assert_eq!(status, "HTTP/1.1 403 Forbidden");
    assert!(body.contains("denied when asked"), "{body}");
    assert!(body.contains(&format!("add \"new.test:{p}\"")), "{body}");
    let (status, _, _) = h.connect(&target).await; // once
    assert_eq!(status, "HTTP/1.1 200 Connection established");
    let (status, _, _) = h.connect(&target).await; // session
    assert_eq!(status, "HTTP/1.1 200 Connection established");
    let (status, _, _) = h.connect(&target).await; // covered by the session grant
    assert_eq!(status, "HTTP/1.1 200 Connection established");
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 3, "the session grant must not ask again");
    assert_eq!(asked[0].host, "new.test");
    assert_eq!(asked[0].rule, format!("new.test:{p}"));
    let recs = h.records(4).await;
    let by: Vec<DecidedBy> = recs.iter().map(|r| r.decided_by).collect();
    assert!(by.contains(&DecidedBy::Session), "{by:?}");
    assert_eq!(by.iter().filter(|d| **d == DecidedBy::Person).count(), 3);
}

/// Answers a different address on every call, like a rebinding DNS server.
struct Rebinding {
    calls: AtomicUsize,
}

impl Resolver for Rebinding {
    fn resolve(&self, _host: &str) -> std::io::Result<Vec<IpAddr>> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(vec![if n == 0 {
            ip("127.0.0.1")
        } else {
            ip("10.9.9.9")
        }])
    }
}

#[tokio::test]
async fn the_proxy_connects_to_the_address_it_checked_and_resolves_once() {
    let a = Server::start("a").await;
    let p = a.port;
    let h = Harness::start(
        policy(
            &[&format!("rebind.test:{p}"), &format!("127.0.0.1:{p}")],
            &[],
        ),
        Rebinding {
            calls: AtomicUsize::new(0),
        },
    );
    let (status, _, _) = h.connect(&format!("rebind.test:{p}")).await;
    assert_eq!(status, "HTTP/1.1 200 Connection established");
    let recs = h.records(1).await;
    assert_eq!(
        recs[0].address,
        Some(format!("127.0.0.1:{p}").parse().unwrap())
    );
    assert_eq!(a.connections(), 1);
    // The next lookup answers a private address: refused, never connected.
    let (status, body, _) = h.connect(&format!("rebind.test:{p}")).await;
    assert_eq!(status, "HTTP/1.1 403 Forbidden");
    assert!(body.contains("10.9.9.9 is a private address"), "{body}");
}
