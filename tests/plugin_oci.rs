//! Plugins from an OCI registry: Debian's `docker-registry` (the CNCF distribution
//! registry), started by each test on 127.0.0.1 with a temp config. `plugins
//! publish` pushes a wasm OCI artifact, `plugins add oci://...` pins its manifest
//! digest; a component signed with a trusted key is accepted, one signed with
//! another key, an unsigned one and one whose bytes changed after signing are
//! refused unless the person passes --allow-unverified. Signatures are minisign
//! signatures (Debian's `minisign` makes and checks them on the other side) or
//! cosign key-pair signatures in cosign's `sha256-<hex>.sig` layout, made with
//! keys real cosign made (tests/fixtures/cosign) and checked by `openssl`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{Home, built_component};
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

const SIGNATURE_ANNOTATION: &str = "dev.capstan.plugin.minisign";

/// A registry on a free loopback port, stopped on drop.
struct Registry {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Registry {
    fn start() -> Self {
        Self::start_with("", "200", &[])
    }

    /// With `extra` appended to the registry's config (e.g. an `auth:`
    /// section; `{dir}` is its temp dir, where `files` are written first),
    /// ready once GET /v2/ answers `status`.
    fn start_with(extra: &str, status: &str, files: &[(&str, &str)]) -> Self {
        let bin = "/usr/bin/docker-registry";
        assert!(
            Path::new(bin).exists(),
            "{bin} is missing: run `bash tests/run` (it installs Debian's docker-registry)"
        );
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n\
                 storage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: {addr}\n{}",
                dir.path().join("data").display(),
                extra.replace("{dir}", &dir.path().display().to_string())
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new(bin)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let registry = Self {
            child,
            addr,
            _dir: dir,
        };
        common::procs::wait_until(
            "the registry to answer /v2/",
            Duration::from_secs(30),
            || {
                registry
                    .get_v2()
                    .is_some_and(|r| r.starts_with(&format!("HTTP/1.1 {status}")))
            },
        );
        registry
    }

    fn get_v2(&self) -> Option<String> {
        let mut s = TcpStream::connect(&self.addr).ok()?;
        write!(
            s,
            "GET /v2/ HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        Some(out)
    }

    fn url(&self, repo: &str) -> String {
        format!("oci://{}/{repo}", self.addr)
    }

    fn client(&self) -> Client {
        Client::new(ClientConfig {
            protocol: ClientProtocol::HttpsExcept(vec![self.addr.clone()]),
            ..Default::default()
        })
    }

    fn reference(&self, repo_tag: &str) -> Reference {
        format!("{}/{repo_tag}", self.addr).parse().unwrap()
    }

    /// The manifest and its digest, as the registry serves them.
    fn manifest(&self, repo_tag: &str) -> (OciImageManifest, String) {
        let reference = self.reference(repo_tag);
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            self.client()
                .pull_image_manifest(&reference, &RegistryAuth::Anonymous)
                .await
                .unwrap()
        })
    }

    /// Pushes `component` under `to`, with the manifest annotations (the
    /// signature) of `from`: what someone who controls the registry could do.
    fn push_with_annotations_of(&self, from: &str, to: &str, component: &Path) {
        let (manifest, _) = self.manifest(from);
        let annotations: BTreeMap<String, String> = manifest.annotations.unwrap();
        assert!(annotations.contains_key(SIGNATURE_ANNOTATION));
        let to = self.reference(to);
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            let layer = ImageLayer::new(
                std::fs::read(component).unwrap(),
                "application/wasm".into(),
                None,
            );
            let config = Config::new(
                b"{\"architecture\":\"wasm\",\"os\":\"wasip2\"}".to_vec(),
                "application/vnd.wasm.config.v0+json".into(),
                None,
            );
            let m =
                OciImageManifest::build(std::slice::from_ref(&layer), &config, Some(annotations));
            self.client()
                .push(&to, &[layer], config, &RegistryAuth::Anonymous, Some(m))
                .await
                .unwrap();
        });
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(home: &Home, args: &[&str]) -> (Option<i32>, String, String) {
    run_env(home, args, &[])
}

fn run_env(home: &Home, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut cmd = home.capstan();
    cmd.env_remove("COSIGN_PASSWORD")
        .env_remove("CAPSTAN_REGISTRY_USER")
        .env_remove("CAPSTAN_REGISTRY_PASSWORD");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn entries(home: &Home) -> Vec<toml::Table> {
    let text = std::fs::read_to_string(home.path().join("config/capstan.toml")).unwrap();
    let parsed: toml::Table = toml::from_str(&text).unwrap();
    parsed
        .get("plugin")
        .and_then(|p| p.as_array())
        .map(|a| a.iter().map(|e| e.as_table().unwrap().clone()).collect())
        .unwrap_or_default()
}

/// Nothing was added: no entry, no component copy.
fn assert_nothing_added(home: &Home) {
    assert!(entries(home).is_empty(), "an entry was written");
    let store = home.path().join("data/plugins");
    let copies: Vec<_> = std::fs::read_dir(&store)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(copies.is_empty(), "component copies left: {copies:?}");
}

/// A key pair made by `capstan plugins keygen` under `dir`: (secret, public).
fn keygen(home: &Home, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let out = dir.join(name);
    let (code, stdout, err) = run(home, &["plugins", "keygen", out.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stdout}{err}");
    let secret = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub"));
    assert!(secret.exists() && public.exists(), "{stdout}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777,
        0o600,
        "the secret key is readable by others"
    );
    (secret, public)
}

fn trust(home: &Home, public: &Path) {
    let (code, out, err) = run(home, &["plugins", "trust", public.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("trusted key"), "{out}");
}

fn publish(home: &Home, component: &Path, target: &str, extra: &[&str]) -> String {
    let mut args = vec!["plugins", "publish", component.to_str().unwrap(), target];
    args.extend_from_slice(extra);
    let (code, out, err) = run(home, &args);
    assert_eq!(code, Some(0), "{out}{err}");
    out
}

fn minisign(args: &[&str]) -> std::process::Output {
    let bin = "/usr/bin/minisign";
    assert!(
        Path::new(bin).exists(),
        "{bin} is missing: run `bash tests/run` (it installs Debian's minisign)"
    );
    let out = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "minisign {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn a_signed_component_is_added_pinned_by_digest_and_runs() {
    let registry = Registry::start();
    let hello = built_component("hello");
    let publisher = Home::new("");
    let keys = tempfile::tempdir().unwrap();
    let (alice_key, alice_pub) = keygen(&publisher, keys.path(), "alice");

    let tagged = registry.url("plugins/hello:1.0");
    let out = publish(
        &publisher,
        &hello,
        &tagged,
        &["--key", alice_key.to_str().unwrap()],
    );
    let (manifest, digest) = registry.manifest("plugins/hello:1.0");
    let pinned = format!("{}@{digest}", registry.url("plugins/hello"));
    assert!(
        out.contains(&pinned) && out.contains("signed by key"),
        "{out}"
    );
    // The wasm OCI artifact layout: one application/wasm layer, the wasm config.
    assert_eq!(
        manifest.config.media_type,
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(manifest.layers.len(), 1);
    assert_eq!(manifest.layers[0].media_type, "application/wasm");
    assert_eq!(
        manifest.layers[0].digest,
        format!("sha256:{}", common::sha256_file(&hello))
    );

    // A user who trusts alice adds it: manifest digest and sha256 pinned.
    let user = Home::new("");
    trust(&user, &alice_pub);
    let (code, out, err) = run(&user, &["plugins", "add", &tagged, "--yes"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("signed by trusted key"), "{out}");
    assert!(out.contains(&format!("from:          {pinned}")), "{out}");
    let all = entries(&user);
    let entry = &all[0];
    assert_eq!(entry["name"].as_str(), Some("hello"));
    assert_eq!(entry["oci"].as_str(), Some(pinned.as_str()));
    assert_eq!(
        entry["sha256"].as_str().unwrap(),
        common::sha256_file(&hello)
    );
    let copy = PathBuf::from(entry["component"].as_str().unwrap());
    assert!(
        copy.starts_with(user.path().join("data/plugins")),
        "{copy:?}"
    );

    // Moving the tag to other bytes changes nothing that was installed.
    publish(
        &publisher,
        &built_component("fault"),
        &tagged,
        &["--key", alice_key.to_str().unwrap()],
    );
    assert_ne!(registry.manifest("plugins/hello:1.0").1, digest);
    let (code, out, err) = run(&user, &["invoke", "echo", "--input", r#"{"a": 1}"#]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap(),
        serde_json::json!({"a": 1})
    );
    let (code, out, err) = run(&user, &["plugins", "list"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("from:       {pinned}")), "{out}");

    // The pinned reference itself adds the same component.
    let again = Home::new("");
    trust(&again, &alice_pub);
    let (code, out, err) = run(&again, &["plugins", "add", &pinned, "--yes"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let all = entries(&again);
    assert_eq!(all[0]["oci"].as_str(), Some(pinned.as_str()));
    assert_eq!(
        all[0]["sha256"].as_str().unwrap(),
        common::sha256_file(&hello)
    );
}

#[test]
fn unsigned_untrusted_or_changed_components_are_refused_unless_allowed() {
    let registry = Registry::start();
    let hello = built_component("hello");
    let publisher = Home::new("");
    let keys = tempfile::tempdir().unwrap();
    let (alice_key, alice_pub) = keygen(&publisher, keys.path(), "alice");
    let (mallory_key, _) = keygen(&publisher, keys.path(), "mallory");
    publish(
        &publisher,
        &hello,
        &registry.url("plugins/hello:alice"),
        &["--key", alice_key.to_str().unwrap()],
    );

    // Signed by a key the user does not trust.
    let other = registry.url("plugins/hello:mallory");
    publish(
        &publisher,
        &hello,
        &other,
        &["--key", mallory_key.to_str().unwrap()],
    );
    let user = Home::new("");
    trust(&user, &alice_pub);
    let (code, _, err) = run(&user, &["plugins", "add", &other, "--yes"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("not among your trusted keys") && err.contains("trusted-keys"),
        "{err}"
    );
    assert!(
        err.contains("Refused") && err.contains("--allow-unverified"),
        "{err}"
    );
    assert_nothing_added(&user);
    let (code, out, err) = run(
        &user,
        &["plugins", "add", &other, "--yes", "--allow-unverified"],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        err.contains("adding it anyway (--allow-unverified)"),
        "{err}"
    );
    assert!(out.contains("NOT VERIFIED"), "{out}");
    assert_eq!(entries(&user).len(), 1);

    // Unsigned.
    let unsigned = registry.url("plugins/hello:unsigned");
    let out = publish(&publisher, &hello, &unsigned, &[]);
    assert!(out.contains("unsigned"), "{out}");
    let user = Home::new("");
    trust(&user, &alice_pub);
    let (code, _, err) = run(&user, &["plugins", "add", &unsigned, "--yes"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("not signed") && err.contains("--allow-unverified"),
        "{err}"
    );
    assert_nothing_added(&user);

    // Alice's signature of hello, over other bytes.
    registry.push_with_annotations_of(
        "plugins/hello:alice",
        "plugins/hello:tampered",
        &built_component("fault"),
    );
    let (code, _, err) = run(
        &user,
        &[
            "plugins",
            "add",
            &registry.url("plugins/hello:tampered"),
            "--yes",
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("does not match its bytes") && err.contains("--allow-unverified"),
        "{err}"
    );
    assert_nothing_added(&user);

    // The untampered one is accepted by the same user: the refusals above were
    // about the components, not the setup.
    let (code, out, err) = run(
        &user,
        &[
            "plugins",
            "add",
            &registry.url("plugins/hello:alice"),
            "--yes",
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");

    // Plain HTTP only on this machine: `127.1` is 127.0.0.1 to the URL parser
    // but not a name Capstan takes for loopback, so it speaks TLS to it, which
    // the plain-HTTP registry cannot answer, until --plain-http says otherwise.
    let port = registry.addr.rsplit(':').next().unwrap();
    let by_other_name = format!("oci://127.1:{port}/plugins/hello:alice");
    let user = Home::new("");
    trust(&user, &alice_pub);
    let (code, _, err) = run(&user, &["plugins", "add", &by_other_name, "--yes"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("https://") && err.contains("pass --plain-http only"),
        "{err}"
    );
    assert_nothing_added(&user);
    let (code, out, err) = run(
        &user,
        &["plugins", "add", &by_other_name, "--yes", "--plain-http"],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("signed by trusted key"), "{out}");

    // A reference without a registry host is refused before any network use,
    // and the oci-only flags are refused for other sources.
    let (code, _, err) = run(&user, &["plugins", "add", "oci://hello:1.0", "--yes"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("names no registry"), "{err}");
    let (code, _, err) = run(
        &user,
        &[
            "plugins",
            "add",
            hello.to_str().unwrap(),
            "--allow-unverified",
        ],
    );
    assert_eq!(code, Some(2));
    assert!(err.contains("are for oci:// sources"), "{err}");
}

#[test]
fn minisign_made_keys_and_signatures_work_both_ways() {
    let registry = Registry::start();
    let work = tempfile::tempdir().unwrap();
    // A copy, so minisign's files do not land next to the build's output.
    let hello = work.path().join("hello.wasm");
    std::fs::copy(built_component("hello"), &hello).unwrap();
    let m_pub = work.path().join("m.pub");
    let m_key = work.path().join("m.key");
    let w = |p: &Path| p.to_str().unwrap().to_string();
    // -W: no password, so nothing waits for a terminal.
    minisign(&["-G", "-W", "-p", &w(&m_pub), "-s", &w(&m_key)]);
    let sig = work.path().join("hello.wasm.minisig");
    minisign(&["-S", "-s", &w(&m_key), "-m", &w(&hello), "-x", &w(&sig)]);

    // Signed by the minisign tool, attached with --signature.
    let publisher = Home::new("");
    let detached = registry.url("plugins/hello:detached");
    publish(&publisher, &hello, &detached, &["--signature", &w(&sig)]);
    // The minisign crate does not read the unencrypted secret keys minisign 0.11
    // writes (their checksum differs): refused with the way round it.
    let (code, _, err) = run(
        &publisher,
        &[
            "plugins",
            "publish",
            &w(&hello),
            &registry.url("plugins/hello:minisign-key"),
            "--key",
            &w(&m_key),
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--signature"), "{err}");

    let key_id = std::fs::read_to_string(&m_pub)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string();
    let user = Home::new("");
    trust(&user, &m_pub);
    let (code, out, err) = run(&user, &["plugins", "add", &detached, "--yes"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains(&format!("signed by trusted key {key_id}")),
        "{out}"
    );

    // And the minisign tool verifies what capstan signed with its own key.
    let (alice_key, alice_pub) = keygen(&publisher, work.path(), "alice");
    publish(
        &publisher,
        &hello,
        &registry.url("plugins/hello:alice"),
        &["--key", &w(&alice_key)],
    );
    let (manifest, _) = registry.manifest("plugins/hello:alice");
    let from_registry = work.path().join("from-registry.minisig");
    use base64::Engine as _;
    let text = base64::engine::general_purpose::STANDARD
        .decode(&manifest.annotations.unwrap()[SIGNATURE_ANNOTATION])
        .unwrap();
    std::fs::write(&from_registry, text).unwrap();
    minisign(&[
        "-V",
        "-p",
        &w(&alice_pub),
        "-m",
        &w(&hello),
        "-x",
        &w(&from_registry),
    ]);
}

fn cosign_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/cosign")
        .join(name)
}

impl Registry {
    fn block_on<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Runtime::new().unwrap().block_on(f)
    }

    fn blob(&self, repo_tag: &str, layer: &oci_client::manifest::OciDescriptor) -> Vec<u8> {
        let reference = self.reference(repo_tag);
        let mut out = Vec::new();
        self.block_on(self.client().pull_blob(&reference, layer, &mut out))
            .unwrap();
        out
    }

    /// Puts `manifest` under `repo_tag` (its blobs must be in the repository).
    fn put_manifest(&self, repo_tag: &str, manifest: OciImageManifest) {
        let reference = self.reference(repo_tag);
        self.block_on(async {
            let client = self.client();
            // oci-client pushes only after it has a token (anonymous here).
            client
                .store_auth_if_needed(reference.resolve_registry(), &RegistryAuth::Anonymous)
                .await;
            client.push_manifest(&reference, &manifest.into()).await
        })
        .unwrap();
    }

    fn push_blob(&self, repo: &str, data: &[u8]) -> String {
        let digest = format!("sha256:{}", sha256_hex(data));
        let reference = self.reference(&format!("{repo}:x"));
        self.block_on(async {
            let client = self.client();
            client
                .store_auth_if_needed(reference.resolve_registry(), &RegistryAuth::Anonymous)
                .await;
            client.push_blob(&reference, data.to_vec(), &digest).await
        })
        .unwrap();
        digest
    }
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(data))
}

fn sig_tag(digest: &str) -> String {
    format!("{}.sig", digest.replace(':', "-"))
}

/// `openssl dgst -sha256 -verify` of a DER ECDSA signature: a verifier that
/// shares no code with Capstan.
fn openssl_verifies(public: &Path, payload: &[u8], signature_b64: &str) -> bool {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let (p, s) = (dir.path().join("payload"), dir.path().join("sig.der"));
    std::fs::write(&p, payload).unwrap();
    std::fs::write(
        &s,
        base64::engine::general_purpose::STANDARD
            .decode(signature_b64)
            .unwrap(),
    )
    .unwrap();
    let out = Command::new("openssl")
        .args(["dgst", "-sha256", "-verify"])
        .arg(public)
        .arg("-signature")
        .arg(&s)
        .arg(&p)
        .output()
        .expect("openssl is missing: run `bash tests/run` (Debian's openssl)");
    out.status.success()
}

#[test]
fn cosign_signatures_are_made_and_checked_as_cosign_does() {
    let registry = Registry::start();
    let hello = built_component("hello");
    let publisher = Home::new("");
    let key = cosign_fixture("cosign-hello.key");
    let key_pub = cosign_fixture("cosign-hello.pub");
    let w = |p: &Path| p.to_str().unwrap().to_string();
    let tagged = registry.url("plugins/hello:cosign");

    // The key is cosign's, so publish needs its password, where cosign reads it.
    let (hello_s, key_s) = (w(&hello), w(&key));
    let args: [&str; 6] = ["plugins", "publish", &hello_s, &tagged, "--key", &key_s];
    let (code, _, err) = run_env(&publisher, &args, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("set COSIGN_PASSWORD"), "{err}");
    let (code, _, err) = run_env(&publisher, &args, &[("COSIGN_PASSWORD", "nope")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("does not open this cosign key"), "{err}");
    let (code, out, err) = run_env(&publisher, &args, &[("COSIGN_PASSWORD", "hello")]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("signed by key cosign:"), "{out}");

    // The layout cosign writes: the tag sha256-<hex>.sig in the same repository,
    // a simple-signing payload layer naming the manifest digest, the DER
    // signature base64 in its annotation; openssl verifies it with cosign.pub.
    let (manifest, digest) = registry.manifest("plugins/hello:cosign");
    assert!(
        !manifest
            .annotations
            .unwrap_or_default()
            .contains_key(SIGNATURE_ANNOTATION),
        "a cosign-signed manifest carries no minisign annotation"
    );
    let sig_at = format!("plugins/hello:{}", sig_tag(&digest));
    let (sig_manifest, _) = registry.manifest(&sig_at);
    assert_eq!(
        sig_manifest.media_type.as_deref(),
        Some("application/vnd.oci.image.manifest.v1+json")
    );
    assert_eq!(
        sig_manifest.config.media_type,
        "application/vnd.oci.image.config.v1+json"
    );
    let [layer] = sig_manifest.layers.as_slice() else {
        panic!("{:?}", sig_manifest.layers)
    };
    assert_eq!(
        layer.media_type,
        "application/vnd.dev.cosign.simplesigning.v1+json"
    );
    let signature =
        layer.annotations.as_ref().unwrap()["dev.cosignproject.cosign/signature"].clone();
    let payload = registry.blob(&sig_at, layer);
    assert_eq!(
        String::from_utf8(payload.clone()).unwrap(),
        format!(
            r#"{{"critical":{{"identity":{{"docker-reference":"{}/plugins/hello"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"cosign container image signature"}},"optional":null}}"#,
            registry.addr
        )
    );
    assert!(openssl_verifies(&key_pub, &payload, &signature));
    assert!(!openssl_verifies(
        &cosign_fixture("cosign-empty.pub"),
        &payload,
        &signature
    ));

    // Trusting cosign.pub accepts it; the digest is pinned as for minisign.
    let user = Home::new("");
    trust(&user, &key_pub);
    let trusted = std::fs::read_to_string(user.path().join("config/trusted-keys")).unwrap();
    assert!(trusted.starts_with("MFkw"), "{trusted}");
    let (code, out, err) = run(&user, &["plugins", "add", &tagged, "--yes"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("signed by trusted key cosign:") && out.contains("cosign signature"),
        "{out}"
    );
    let pinned = format!("{}@{digest}", registry.url("plugins/hello"));
    assert_eq!(entries(&user)[0]["oci"].as_str(), Some(pinned.as_str()));

    // Signed with a key the user does not trust (another real cosign key).
    let other_user = Home::new("");
    trust(&other_user, &cosign_fixture("cosign-empty.pub"));
    let (code, _, err) = run(&other_user, &["plugins", "add", &tagged, "--yes"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("none by a key among your trusted keys")
            && err.contains("capstan plugins trust cosign.pub")
            && err.contains("--allow-unverified"),
        "{err}"
    );
    assert_nothing_added(&other_user);

    // Unsigned: no .sig tag at all.
    let unsigned = registry.url("plugins/hello:unsigned");
    publish(&publisher, &built_component("fault"), &unsigned, &[]);
    let user = Home::new("");
    trust(&user, &key_pub);
    let (code, _, err) = run(&user, &["plugins", "add", &unsigned, "--yes"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("not signed") && err.contains("cosign sign --key"),
        "{err}"
    );
    assert_nothing_added(&user);

    // The valid signature of hello, copied to the .sig tag of other bytes
    // (what a registry operator could do): refused, naming both digests.
    let (_, unsigned_digest) = registry.manifest("plugins/hello:unsigned");
    let moved_at = format!("plugins/hello:{}", sig_tag(&unsigned_digest));
    registry.put_manifest(&moved_at, sig_manifest.clone());
    let (code, _, err) = run(&user, &["plugins", "add", &unsigned, "--yes"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("is not for this component")
            && err.contains(&format!(
                "for manifest {digest}, not this one ({unsigned_digest})"
            ))
            && err.contains("--allow-unverified"),
        "{err}"
    );
    assert_nothing_added(&user);

    // The payload edited to name the other bytes, the signature kept: it no
    // longer verifies with any trusted key.
    let edited = String::from_utf8(payload.clone())
        .unwrap()
        .replace(&digest, &unsigned_digest);
    let edited_digest = registry.push_blob("plugins/hello", edited.as_bytes());
    let mut forged = sig_manifest.clone();
    forged.layers[0].digest = edited_digest;
    forged.layers[0].size = edited.len() as i64;
    registry.put_manifest(&moved_at, forged);
    let (code, _, err) = run(&user, &["plugins", "add", &unsigned, "--yes"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("none by a key among your trusted keys") && err.contains("payload changed"),
        "{err}"
    );
    assert_nothing_added(&user);
    // --allow-unverified takes it anyway, saying so.
    let (code, out, err) = run(
        &user,
        &["plugins", "add", &unsigned, "--yes", "--allow-unverified"],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("NOT VERIFIED"), "{out}");

    // Signing again keeps earlier signatures of the same manifest, as cosign
    // does: the same signature twice is one layer, a second signer's is added.
    // (The config's `created` has one-second resolution, so a publish in
    // another second makes a new manifest with a .sig of its own.)
    let (code, out, err) = run_env(&publisher, &args, &[("COSIGN_PASSWORD", "hello")]);
    assert_eq!(code, Some(0), "{out}{err}");
    let (_, again) = registry.manifest("plugins/hello:cosign");
    let layers = |d: &str| {
        registry
            .manifest(&format!("plugins/hello:{}", sig_tag(d)))
            .0
            .layers
            .len()
    };
    assert_eq!(layers(&again), 1);
    let empty_key = w(&cosign_fixture("cosign-empty.key"));
    let (code, out, err) = run_env(
        &publisher,
        &["plugins", "publish", &hello_s, &tagged, "--key", &empty_key],
        &[("COSIGN_PASSWORD", "")],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let (_, latest) = registry.manifest("plugins/hello:cosign");
    assert_eq!(layers(&latest), if latest == again { 2 } else { 1 });
}

#[test]
fn cosign_keys_from_keygen_and_what_trust_refuses() {
    let registry = Registry::start();
    let hello = built_component("hello");
    let home = Home::new("");
    let keys = tempfile::tempdir().unwrap();
    let out = keys.path().join("team");
    let w = |p: &Path| p.to_str().unwrap().to_string();

    let (code, _, err) = run(
        &home,
        &["plugins", "keygen", &w(&out), "--format", "cosign"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("set COSIGN_PASSWORD"), "{err}");
    let (code, stdout, err) = run_env(
        &home,
        &[
            "plugins",
            "keygen",
            &w(&out),
            "--format",
            "cosign",
            "--trust",
        ],
        &[("COSIGN_PASSWORD", "s3cret")],
    );
    assert_eq!(code, Some(0), "{stdout}{err}");
    let secret = keys.path().join("team.key");
    let public = keys.path().join("team.pub");
    let text = std::fs::read_to_string(&secret).unwrap();
    assert!(
        text.starts_with("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----"),
        "{text}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // openssl reads the public key as an EC P-256 SPKI, as it reads cosign.pub.
    let shown = Command::new("openssl")
        .args(["pkey", "-pubin", "-noout", "-text", "-in"])
        .arg(&public)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("NIST CURVE: P-256") || shown.contains("prime256v1"),
        "{shown}"
    );

    let tagged = registry.url("plugins/hello:team");
    // cosign.pub where the secret key belongs: said so, nothing pushed.
    let (code, _, err) = run(
        &home,
        &[
            "plugins",
            "publish",
            &w(&hello),
            &tagged,
            "--key",
            &w(&public),
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is a public key"), "{err}");
    let (code, stdout, err) = run_env(
        &home,
        &[
            "plugins",
            "publish",
            &w(&hello),
            &tagged,
            "--key",
            &w(&secret),
        ],
        &[("COSIGN_PASSWORD", "s3cret")],
    );
    assert_eq!(code, Some(0), "{stdout}{err}");
    let (code, stdout, err) = run(&home, &["plugins", "add", &tagged, "--yes"]);
    assert_eq!(code, Some(0), "{stdout}{err}");
    assert!(stdout.contains("cosign signature"), "{stdout}");
    // And the signature is one openssl accepts with the .pub keygen wrote.
    let (_, digest) = registry.manifest("plugins/hello:team");
    let sig_at = format!("plugins/hello:{}", sig_tag(&digest));
    let (m, _) = registry.manifest(&sig_at);
    let payload = registry.blob(&sig_at, &m.layers[0]);
    let sig = &m.layers[0].annotations.as_ref().unwrap()["dev.cosignproject.cosign/signature"];
    assert!(openssl_verifies(&public, &payload, sig));

    // A PEM key Capstan cannot verify, and a file that is no key, are refused
    // by name; nothing is written to trusted-keys.
    let fresh = Home::new("");
    let ed = keys.path().join("ed25519.pub");
    std::fs::write(
        &ed,
        "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n",
    )
    .unwrap();
    let (code, _, err) = run(&fresh, &["plugins", "trust", &w(&ed)]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not an ECDSA P-256 public key"), "{err}");
    let (code, _, err) = run(&fresh, &["plugins", "trust", &w(&secret)]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not a public key Capstan knows"), "{err}");
    assert!(!fresh.path().join("config/trusted-keys").exists());
}

#[test]
fn registry_logins_come_from_the_environment_or_dockers_config() {
    // docker-registry's htpasswd auth (bcrypt, user bob, password pw1) answers
    // Basic auth over plain HTTP on 127.0.0.1.
    let registry = Registry::start_with(
        "auth:\n  htpasswd:\n    realm: capstan-test\n    path: {dir}/htpasswd\n",
        "401",
        &[(
            "htpasswd",
            "bob:$2b$04$70lWLNEOYWh3id2gDEoV.e/ThKUxYWwDeC2MNbXtUGmXgxWZfg6Lu\n",
        )],
    );
    let hello = built_component("hello");
    let w = |p: &Path| p.to_str().unwrap().to_string();
    let (hello_s, key_s) = (w(&hello), w(&cosign_fixture("cosign-hello.key")));
    let tagged = registry.url("plugins/hello:private");
    let publish_args: [&str; 6] = ["plugins", "publish", &hello_s, &tagged, "--key", &key_s];
    let home = Home::new("");
    let no_docker = tempfile::tempdir().unwrap();
    let no_docker_s = w(no_docker.path());
    let base = [
        ("COSIGN_PASSWORD", "hello"),
        ("DOCKER_CONFIG", no_docker_s.as_str()),
    ];

    // Anonymous: refused, saying where credentials come from.
    let (code, _, err) = run_env(&home, &publish_args, &base);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("found no credentials") && err.contains("CAPSTAN_REGISTRY_USER"),
        "{err}"
    );
    // Wrong password: refused, naming the source, never the password.
    let mut env = base.to_vec();
    env.extend([
        ("CAPSTAN_REGISTRY_USER", "bob"),
        ("CAPSTAN_REGISTRY_PASSWORD", "hunter2-wrong"),
    ]);
    let (code, out, err) = run_env(&home, &publish_args, &env);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("refused the credentials from CAPSTAN_REGISTRY_USER"),
        "{err}"
    );
    assert!(!format!("{out}{err}").contains("hunter2"), "{out}{err}");
    // Only one of the two: refused before any network use.
    let (code, _, err) = run_env(
        &home,
        &publish_args,
        &[
            ("COSIGN_PASSWORD", "hello"),
            ("CAPSTAN_REGISTRY_USER", "bob"),
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("set both"), "{err}");

    // The right ones: pushed, cosign signature included.
    let mut env = base.to_vec();
    env.extend([
        ("CAPSTAN_REGISTRY_USER", "bob"),
        ("CAPSTAN_REGISTRY_PASSWORD", "pw1"),
    ]);
    let (code, out, err) = run_env(&home, &publish_args, &env);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(!format!("{out}{err}").contains("pw1"), "{out}{err}");

    // `add` with the `auths` entry `docker login` writes.
    let docker = tempfile::tempdir().unwrap();
    use base64::Engine as _;
    let config = serde_json::json!({"auths": {registry.addr.clone(): {
        "auth": base64::engine::general_purpose::STANDARD.encode("bob:pw1")
    }}});
    std::fs::write(docker.path().join("config.json"), config.to_string()).unwrap();
    let docker_s = w(docker.path());
    let user = Home::new("");
    trust(&user, &cosign_fixture("cosign-hello.pub"));
    let (code, out, err) = run_env(
        &user,
        &["plugins", "add", &tagged, "--yes"],
        &[("DOCKER_CONFIG", docker_s.as_str())],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("cosign signature"), "{out}");
    assert!(!format!("{out}{err}").contains("pw1"), "{out}{err}");
    // Without it, the same add is refused.
    let user = Home::new("");
    trust(&user, &cosign_fixture("cosign-hello.pub"));
    let (code, _, err) = run_env(
        &user,
        &["plugins", "add", &tagged, "--yes"],
        &[("DOCKER_CONFIG", no_docker_s.as_str())],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("docker login"), "{err}");
    assert_nothing_added(&user);
}
