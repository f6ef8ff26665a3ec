//! Brokered credentials end to end: `curl` through the proxy (its TCP
//! listener) to HTTPS servers on 127.0.0.1 with test CAs, names resolved by an
//! injected resolver. The servers record the headers they received and echo
//! them back, so the tests see both what reached the host and what reached
//! the command.
//!
//! Run: `cargo test --release -p capstan-egress --test credential`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use capstan_egress::{
    Ca, ConnectionRecord, Credential, Policy, Protocol, Proxy, Secret, StaticResolver, Verdict,
    certs_from_pem,
};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const SECRET: &str = "ghp_brokered-S3CRET-0123456789";

/// A test CA and a server certificate it signed for `name`.
struct TestPki {
    ca_pem: String,
    cert: CertificateDer<'static>,
    key: Vec<u8>,
}

fn pki(name: &str) -> TestPki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("test upstream CA for {name}"),
    );
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![name.to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    TestPki {
        ca_pem: ca_cert.pem(),
        cert: cert.der().clone(),
        key: key.serialize_der(),
    }
}

/// An HTTPS (or plain, with `pki: None`) server on 127.0.0.1 that records
/// every request head and answers with the head as its body and the
/// Authorization value it got in `X-Echo-Authorization`.
struct Upstream {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Upstream {
    async fn start(pki: Option<&TestPki>) -> Upstream {
        let acceptor = pki.map(|p| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let cfg = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(
                    vec![p.cert.clone()],
                    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(p.key.clone())),
                )
                .unwrap();
            tokio_rustls::TlsAcceptor::from(Arc::new(cfg))
        });
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let h = heads.clone();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let (h, acceptor) = (h.clone(), acceptor.clone());
                tokio::spawn(async move {
                    match acceptor {
                        Some(a) => {
                            if let Ok(tls) = a.accept(s).await {
                                echo(tls, h).await;
                            }
                        }
                        None => echo(s, h).await,
                    }
                });
            }
        });
        Upstream { port, heads }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

async fn echo<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, heads: Arc<Mutex<Vec<String>>>) {
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
        heads.lock().unwrap().push(head.clone());
        let auth = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("authorization")
                    .then(|| v.trim().to_owned())
            })
            .unwrap_or_default();
        let resp = format!(
            "HTTP/1.1 200 OK\r\nX-Echo-Authorization: {auth}\r\nContent-Length: {}\r\n\r\n{head}",
            head.len()
        );
        if s.write_all(resp.as_bytes()).await.is_err() || s.flush().await.is_err() {
            return;
        }
    }
}

/// The proxy on TCP 127.0.0.1, recording every connection.
struct Harness {
    port: u16,
    records: Arc<Mutex<Vec<ConnectionRecord>>>,
    cancel: CancellationToken,
    bundle: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Harness {
    /// `names` resolve to 127.0.0.1 and are allowed on `ports`; `upstream_ca`
    /// is what the proxy trusts for credential hosts besides the system.
    async fn start(
        names: &[&str],
        ports: &[u16],
        credentials: Vec<Credential>,
        upstream_ca: Option<&str>,
    ) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let ca = Arc::new(Ca::create(&dir.path().join("ca")).unwrap());
        let bundle = ca.write_bundle(None).unwrap();
        let mut allow = Vec::new();
        let mut resolver = StaticResolver::new();
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        for n in names {
            resolver = resolver.with(n, &[lo]);
            for p in ports {
                allow.push(format!("{n}:{p}"));
            }
        }
        for p in ports {
            allow.push(format!("127.0.0.1:{p}"));
        }
        let allow: Vec<&str> = allow.iter().map(String::as_str).collect();
        let records = Arc::new(Mutex::new(Vec::new()));
        let r = records.clone();
        let mut b = Proxy::builder(Policy::new(&allow, &[], &[], false).unwrap())
            .resolver(resolver)
            .audit(move |rec: ConnectionRecord| r.lock().unwrap().push(rec))
            .credentials(ca.clone(), credentials);
        if let Some(pem) = upstream_ca {
            b = b.upstream_ca(certs_from_pem(pem).unwrap());
        }
        let proxy = b.build();
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move { proxy.serve_tcp(l, c).await });
        Harness {
            port,
            records,
            cancel,
            bundle,
            _dir: dir,
        }
    }

    async fn records(&self, n: usize) -> Vec<ConnectionRecord> {
        for _ in 0..300 {
            if self.records.lock().unwrap().len() >= n {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        self.records.lock().unwrap().clone()
    }
}

struct Curl {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `curl -v` through `proxy` (a URL), trusting `cacert`, with the command's
/// own Authorization header. Runs off the runtime's threads.
async fn curl(proxy: String, cacert: &Path, url: String) -> Curl {
    curl_all(proxy, cacert, vec![url]).await
}

/// `curl` with several URLs: one connection, reused (keep-alive).
async fn curl_all(proxy: String, cacert: &Path, urls: Vec<String>) -> Curl {
    let cacert = cacert.to_owned();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new("curl")
            .args([
                "-sS",
                "-v",
                "--max-time",
                "20",
                "--proxy",
                &proxy,
                "--cacert",
            ])
            .arg(&cacert)
            .args(["-H", "Authorization: Bearer the-commands-own-value"])
            .args(&urls)
            .env_remove("SSL_CERT_FILE")
            .env_remove("CURL_CA_BUNDLE")
            .env("NO_PROXY", "")
            .env("no_proxy", "")
            .output()
            .expect("curl runs (tests/run installs it)");
        Curl {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
}

fn cred(host: &str, port: u16) -> Credential {
    Credential::new(
        host,
        "Authorization",
        Secret::new(format!("Bearer {SECRET}")).unwrap(),
    )
    .unwrap()
    .on_port(port)
}

fn authorization_lines(head: &str) -> Vec<&str> {
    head.lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("authorization:"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_credential_reaches_the_host_and_never_the_command() {
    let test = pki("api.test");
    let up = Upstream::start(Some(&test)).await;
    let h = Harness::start(
        &["api.test"],
        &[up.port],
        vec![cred("api.test", up.port)],
        Some(&test.ca_pem),
    )
    .await;

    for proxy in [
        format!("http://127.0.0.1:{}", h.port),
        format!("socks5h://127.0.0.1:{}", h.port),
    ] {
        let url = format!("https://api.test:{}/repos?per_page=1", up.port);
        let out = curl(proxy.clone(), &h.bundle, url).await;
        assert_eq!(out.code, 0, "{proxy}: {}", out.stderr);
        // The host got the brokered value, once, and not the command's.
        let heads = up.heads();
        let head = heads.last().unwrap();
        assert!(
            head.starts_with("GET /repos?per_page=1 HTTP/1.1\r\n"),
            "{head}"
        );
        assert_eq!(
            authorization_lines(head),
            vec![format!("Authorization: Bearer {SECRET}")],
            "{head}"
        );
        assert!(!head.contains("the-commands-own-value"), "{head}");
        assert!(
            head.contains(&format!("Host: api.test:{}\r\n", up.port)),
            "{head}"
        );
        // The command saw the Capstan CA's leaf, and never the secret, though
        // the host echoed it in a header and in the body.
        assert!(
            out.stderr.contains("Capstan workspace CA"),
            "{}",
            out.stderr
        );
        for seen in [&out.stdout, &out.stderr] {
            assert!(
                !seen.contains(SECRET),
                "the secret reached the command: {seen}"
            );
        }
        assert!(
            out.stdout.contains("\r\nAuthorization: ******"),
            "{}",
            out.stdout
        );
    }
    assert_eq!(up.heads().len(), 2);

    // Every request of a keep-alive connection gets it, not only the first.
    let url = |p: &str| format!("https://api.test:{}/{p}", up.port);
    let out = curl_all(
        format!("http://127.0.0.1:{}", h.port),
        &h.bundle,
        vec![url("one"), url("two"), url("three")],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("Re-using existing"), "{}", out.stderr);
    let heads = up.heads();
    assert_eq!(heads.len(), 5);
    for head in &heads[2..] {
        assert_eq!(
            authorization_lines(head),
            vec![format!("Authorization: Bearer {SECRET}")],
            "{head}"
        );
    }
    assert!(!out.stdout.contains(SECRET) && !out.stderr.contains(SECRET));

    let recs = h.records(3).await;
    assert_eq!(recs.len(), 3, "{recs:?}");
    assert_eq!(recs[0].protocol, Protocol::Connect);
    assert_eq!(recs[1].protocol, Protocol::Socks5);
    for r in &recs {
        assert_eq!(r.verdict, Verdict::Allowed);
        assert_eq!(r.credential.as_deref(), Some("Authorization"), "{r:?}");
        assert_eq!(r.reason, None, "{r:?}");
        let json = serde_json::to_string(r).unwrap();
        assert!(!json.contains(SECRET), "{json}");
        assert!(json.contains("\"credential\":\"Authorization\""), "{json}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_a_credential_is_tunnelled_blind() {
    let brokered = pki("api.test");
    let other = pki("other.test");
    let api = Upstream::start(Some(&brokered)).await;
    let up = Upstream::start(Some(&other)).await;
    let h = Harness::start(
        &["api.test", "other.test"],
        &[api.port, up.port],
        vec![cred("api.test", api.port)],
        Some(&brokered.ca_pem),
    )
    .await;
    let proxy = format!("http://127.0.0.1:{}", h.port);
    let url = format!("https://other.test:{}/", up.port);

    // Trusting only the Capstan CA fails: the certificate is the host's own.
    let out = curl(proxy.clone(), &h.bundle, url.clone()).await;
    assert_eq!(
        out.code, 60,
        "curl: certificate problem expected: {}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("Capstan workspace CA"),
        "{}",
        out.stderr
    );

    // Trusting the host's own CA works, and the host gets the command's
    // header untouched.
    let dir = tempfile::tempdir().unwrap();
    let own = dir.path().join("other-ca.pem");
    std::fs::write(&own, &other.ca_pem).unwrap();
    let out = curl(proxy, &own, url).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("test upstream CA for other.test"),
        "{}",
        out.stderr
    );
    let heads = up.heads();
    assert_eq!(heads.len(), 1, "the failed handshake sent no request");
    assert_eq!(
        authorization_lines(&heads[0]),
        vec!["Authorization: Bearer the-commands-own-value"]
    );
    assert!(api.heads().is_empty());
    let recs = h.records(2).await;
    assert!(recs.iter().all(|r| r.credential.is_none()), "{recs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_credential_host_gets_nothing_and_the_record_says_why() {
    let test = pki("api.test");
    let up = Upstream::start(Some(&test)).await;
    // The proxy is not told about the test CA: the host is not trusted.
    let h = Harness::start(
        &["api.test"],
        &[up.port],
        vec![cred("api.test", up.port)],
        None,
    )
    .await;
    let out = curl(
        format!("http://127.0.0.1:{}", h.port),
        &h.bundle,
        format!("https://api.test:{}/", up.port),
    )
    .await;
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("502"), "{}", out.stderr);
    assert!(up.heads().is_empty(), "no request reached the host");
    let recs = h.records(1).await;
    assert_eq!(recs.len(), 1, "{recs:?}");
    let reason = recs[0].reason.as_deref().unwrap_or("");
    assert!(
        reason.contains("is not trusted") && reason.contains("credential was not sent"),
        "{reason}"
    );
    assert_eq!(recs[0].credential, None);
    assert!(!out.stderr.contains(SECRET) && !out.stdout.contains(SECRET));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_is_never_sent_over_plain_http() {
    let up = Upstream::start(None).await;
    let h = Harness::start(
        &["api.test"],
        &[up.port],
        vec![cred("api.test", up.port)],
        None,
    )
    .await;
    let out = curl(
        format!("http://127.0.0.1:{}", h.port),
        &h.bundle,
        format!("http://api.test:{}/plain", up.port),
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let heads = up.heads();
    assert_eq!(heads.len(), 1);
    assert!(!heads[0].contains(SECRET), "{}", heads[0]);
    let recs = h.records(1).await;
    assert_eq!(recs[0].protocol, Protocol::Http);
    assert_eq!(recs[0].credential, None);
    let reason = recs[0].reason.as_deref().unwrap_or("");
    assert!(reason.contains("credential was not sent"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_does_not_trust_the_workspace_ca_sends_nothing() {
    let test = pki("api.test");
    let up = Upstream::start(Some(&test)).await;
    let h = Harness::start(
        &["api.test"],
        &[up.port],
        vec![cred("api.test", up.port)],
        Some(&test.ca_pem),
    )
    .await;
    // The command trusts the host's real CA only: the proxy's leaf fails its
    // check, so no request is made.
    let dir = tempfile::tempdir().unwrap();
    let own = dir.path().join("api-ca.pem");
    std::fs::write(&own, &test.ca_pem).unwrap();
    let out = curl(
        format!("http://127.0.0.1:{}", h.port),
        &own,
        format!("https://api.test:{}/", up.port),
    )
    .await;
    assert_eq!(out.code, 60, "{}", out.stderr);
    assert!(up.heads().is_empty());
    let recs = h.records(1).await;
    let reason = recs[0].reason.as_deref().unwrap_or("");
    assert!(reason.contains("must trust the workspace CA"), "{reason}");
    assert_eq!(recs[0].credential, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_does_not_allow_a_host_the_policy_refuses() {
    let test = pki("api.test");
    let up = Upstream::start(Some(&test)).await;
    // Only another port is allowed: the credential's host and port are not.
    let h = Harness::start(
        &["api.test"],
        &[up.port.wrapping_add(1)],
        vec![cred("api.test", up.port)],
        Some(&test.ca_pem),
    )
    .await;
    let out = curl(
        format!("http://127.0.0.1:{}", h.port),
        &h.bundle,
        format!("https://api.test:{}/", up.port),
    )
    .await;
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("403"), "{}", out.stderr);
    assert!(up.heads().is_empty());
    let recs = h.records(1).await;
    assert_eq!(recs[0].verdict, Verdict::Denied, "{recs:?}");
    assert_eq!(recs[0].credential, None);
}
