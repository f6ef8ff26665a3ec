//! Plugins from an OCI registry: Debian's `docker-registry` (the CNCF distribution
//! registry), started by the test on 127.0.0.1 with a temp config. `plugins publish`
//! pushes a wasm OCI artifact, `plugins add oci://...` pins its digest; a component
//! signed with a trusted key is accepted, one signed with another key, an unsigned
//! one and one whose bytes changed after signing are refused unless the person
//! passes --allow-unsigned.
#![allow(clippy::disallowed_macros)]

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{Home, built_component};
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

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
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: {addr}\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new(bin)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let registry = Self {
            child,
            addr,
            _dir: dir,
        };
        common::procs::wait_until("the registry to answer /v2/", Duration::from_secs(30), || {
            registry.get_v2().is_some_and(|r| r.starts_with("HTTP/1.1 200"))
        });
        registry
    }

    fn get_v2(&self) -> Option<String> {
        let mut s = TcpStream::connect(&self.addr).ok()?;
        write!(s, "GET /v2/ HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", self.addr).ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        Some(out)
    }

    fn url(&self, repo: &str) -> String {
        format!("oci://{}/{repo}", self.addr)
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

fn config_entry(home: &Home) -> toml::Table {
    let text = std::fs::read_to_string(home.path().join("config/capstan.toml")).unwrap();
    let parsed: toml::Table = toml::from_str(&text).unwrap();
    parsed["plugin"].as_array().unwrap()[0]
        .as_table()
        .unwrap()
        .clone()
}

#[test]
fn publish_and_add_from_a_real_registry_with_signatures() {
    let registry = Registry::start();
    let hello = built_component("hello");
    let hello_path = hello.display().to_string();
    let publisher = Home::new("");
    let keys = tempfile::tempdir().unwrap();
    let alice = keys.path().join("alice");
    let mallory = keys.path().join("mallory");
    for k in [&alice, &mallory] {
        let (code, _, err) = run(&publisher, &["plugins", "keygen", k.to_str().unwrap()]);
        assert_eq!(code, Some(0), "{err}");
    }
    let alice_key = alice.with_extension("key").display().to_string();
    let mallory_key = mallory.with_extension("key").display().to_string();

    // Signed by alice.
    let signed = registry.url("plugins/hello:1.0");
    let (code, out, err) = run(
        &publisher,
        &["plugins", "publish", &hello_path, &signed, "--key", &alice_key],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("@sha256:") && out.contains("signed"), "{out}");

    // A user who trusts alice adds it: digest and sha256 pinned, and it runs.
    let user = Home::new("");
    let (code, _, err) = run(
        &user,
        &["plugins", "trust", alice.with_extension("pub").to_str().unwrap()],
    );
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = run(&user, &["plugins", "add", &signed, "--yes"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("signed by trusted key"), "{out}");
    let entry = config_entry(&user);
    let digest = pull_digest(&registry, "plugins/hello:1.0");
    assert_eq!(
        entry["oci"].as_str().unwrap(),
        format!("{}@{digest}", registry.url("plugins/hello"))
    );
    assert_eq!(
        entry["sha256"].as_str().unwrap(),
        common::sha256_file(&hello)
    );
    assert_eq!(entry["name"].as_str(), Some("hello"));
    let (code, out, err) = run(&user, &["invoke", "echo", "--input", r#"{"a": 1}"#]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap(),
        serde_json::json!({"a": 1})
    );

    // Signed by a key the user does not trust: refused, unless --allow-unsigned.
    let other = registry.url("plugins/hello:mallory");
    let (code, _, err) = run(
        &publisher,
        &["plugins", "publish", &hello_path, &other, "--key", &mallory_key],
    );
    assert_eq!(code, Some(0), "{err}");
    let fresh = Home::new("");
    run(&fresh, &["plugins", "trust", alice.with_extension("pub").to_str().unwrap()]);
    let (code, _, err) = run(&fresh, &["plugins", "add", &other, "--yes"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("which is not in") && err.contains("trusted-keys"), "{err}");
    assert!(!fresh.path().join("config/capstan.toml").exists() || config_is_empty(&fresh));
    let (code, out, err) = run(
        &fresh,
        &["plugins", "add", &other, "--yes", "--allow-unsigned"],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(err.contains("adding it anyway"), "{err}");

    // Unsigned: refused.
    let unsigned = registry.url("plugins/hello:unsigned");
    let (code, _, err) = run(&publisher, &["plugins", "publish", &hello_path, &unsigned]);
    assert_eq!(code, Some(0), "{err}");
    let fresh = Home::new("");
    let (code, _, err) = run(&fresh, &["plugins", "add", &unsigned, "--yes"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("is not signed"), "{err}");

    // Alice's signature over hello, on other bytes: refused.
    let tampered = "plugins/hello:tampered";
    push_with_annotations_of(&registry, "plugins/hello:1.0", tampered, &built_component("fault"));
    let fresh = Home::new("");
    run(&fresh, &["plugins", "trust", alice.with_extension("pub").to_str().unwrap()]);
    let (code, _, err) = run(&fresh, &["plugins", "add", &registry.url(tampered), "--yes"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("signature does not match its bytes"), "{err}");
    assert!(config_is_empty(&fresh));
}

fn config_is_empty(home: &Home) -> bool {
    std::fs::read_to_string(home.path().join("config/capstan.toml"))
        .map(|t| !t.contains("[[plugin]]"))
        .unwrap_or(true)
}

fn client(registry: &Registry) -> Client {
    Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(vec![registry.addr.clone()]),
        ..Default::default()
    })
}

fn pull_digest(registry: &Registry, repo_tag: &str) -> String {
    let reference: Reference = format!("{}/{repo_tag}", registry.addr).parse().unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        client(registry)
            .pull_image_manifest(&reference, &RegistryAuth::Anonymous)
            .await
            .unwrap()
            .1
    })
}

/// Pushes `component` under `to`, with the manifest annotations (the signature)
/// of `from`: what an attacker who controls the registry could do.
fn push_with_annotations_of(registry: &Registry, from: &str, to: &str, component: &Path) {
    let from: Reference = format!("{}/{from}", registry.addr).parse().unwrap();
    let to: Reference = format!("{}/{to}", registry.addr).parse().unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let c = client(registry);
        let (manifest, _) = c
            .pull_image_manifest(&from, &RegistryAuth::Anonymous)
            .await
            .unwrap();
        let annotations: BTreeMap<String, String> = manifest.annotations.unwrap();
        assert!(annotations.contains_key("dev.capstan.plugin.signature.ed25519"));
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
        let m = OciImageManifest::build(std::slice::from_ref(&layer), &config, Some(annotations));
        c.push(&to, &[layer], config, &RegistryAuth::Anonymous, Some(m))
            .await
            .unwrap();
    });
}
