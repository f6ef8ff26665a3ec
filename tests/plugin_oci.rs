//! Plugins from an OCI registry: Debian's `docker-registry` (the CNCF distribution
//! registry), started by each test on 127.0.0.1 with a temp config. `plugins
//! publish` pushes a wasm OCI artifact, `plugins add oci://...` pins its manifest
//! digest; a component signed with a trusted key is accepted, one signed with
//! another key, an unsigned one and one whose bytes changed after signing are
//! refused unless the person passes --allow-unverified. Signatures are minisign
//! signatures: Debian's `minisign` makes and checks them on the other side.
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
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n\
                 storage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: {addr}\n",
                dir.path().join("data").display()
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
                    .is_some_and(|r| r.starts_with("HTTP/1.1 200"))
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
    let out = home.capstan().args(args).output().unwrap();
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
