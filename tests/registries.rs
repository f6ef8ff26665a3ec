//! Real package tools through the egress proxy, against fake registries this
//! test starts on 127.0.0.1 (tests/registries/serve.py): `git clone` over
//! smart HTTP, `pip install` from a PEP 503 index, `npm install` from an npm
//! registry, `cargo fetch` from a sparse registry. Each runs as a
//! terminal_exec command of the real binary in a workspace: with the
//! registry's host in `[network] allow` it works and every connection is a
//! `network.connect` event; without it the connection is refused (or asked,
//! then refused), the registry sees nothing, and the command's output names
//! the rule to add, whatever the tool itself prints.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use common::Home;
use serde_json::{Value, json};

/// One fake registry (a child process); killed when dropped.
struct Registry {
    child: Child,
    port: u16,
    /// `GET /path` lines, one per request the registry answered.
    requests: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Registry {
    fn start(kind: &str) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/registries/serve.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .arg(kind)
            .arg(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3 runs the fake registries (installed by tests/run)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .strip_prefix("PORT ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("the {kind} registry did not start: {line:?}"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let log = requests.clone();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines() {
                let Ok(l) = l else { return };
                match l.strip_prefix("REQ ") {
                    Some(r) => log.lock().unwrap().push(r.to_owned()),
                    // Anything else is the registry's own trouble: show it.
                    None => eprintln_registry(&l),
                }
            }
        });
        Registry {
            child,
            port,
            requests,
            _dir: dir,
        }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    fn rule(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

#[allow(clippy::disallowed_macros)]
fn eprintln_registry(line: &str) {
    eprintln!("registry: {line}");
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A terminal_exec command through the real binary (`--approve none`); its
/// JSON events.
fn run(home: &Home, ws: &Path, cwd: &str, command: &str, env: &[(&str, &Path)]) -> Vec<Value> {
    let mut cmd = home.capstan();
    cmd.args([
        "invoke",
        "terminal_exec",
        "--json",
        "--approve",
        "none",
        "--workspace",
    ])
    .arg(ws)
    .args([
        "--input",
        &json!({ "command": command, "cwd": cwd }).to_string(),
    ]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

/// A home whose `[network]` allows the registry (and nothing else).
fn allowing(reg: &Registry, extra: &str) -> Home {
    Home::new(&format!(
        "[policy]\nprofile = \"trusted\"\n{extra}\n[network]\nallow = [\"{}\"]\n",
        reg.rule()
    ))
}

/// A home whose `[network]` does not name the registry: `ask = true` asks
/// (and `--approve none` refuses), otherwise the policy refuses.
fn not_allowing(ask: bool, extra: &str) -> Home {
    Home::new(&format!(
        "[policy]\nprofile = \"trusted\"\n{extra}\n[network]\nallow = [\"pypi.org\"]\nask = {ask}\n"
    ))
}

/// The command ran without asking, exited 0, and each of its connections is
/// an allowed `network.connect` event to the registry by its rule. Returns
/// the command's output.
fn assert_allowed(events: &[Value], reg: &Registry) -> String {
    assert!(
        of_type(events, "approval.requested").is_empty(),
        "{events:#?}"
    );
    let step = of_type(events, "terminal.step");
    assert_eq!(step.len(), 1, "{events:#?}");
    assert_eq!(step[0]["exit_code"], 0, "{events:#?}");
    let conns = of_type(events, "network.connect");
    assert!(!conns.is_empty(), "no network.connect event: {events:#?}");
    for c in &conns {
        assert_eq!(c["host"], "127.0.0.1", "{c}");
        assert_eq!(c["port"], reg.port, "{c}");
        assert_eq!(c["verdict"], "allowed", "{c}");
        assert_eq!(c["decided_by"], "policy", "{c}");
        assert_eq!(c["rule"], reg.rule(), "{c}");
    }
    assert!(
        conns.iter().any(|c| c["bytes_down"].as_u64().unwrap() > 0),
        "{conns:#?}"
    );
    step[0]["output_tail"].as_str().unwrap().to_owned()
}

/// The command failed, its connections were refused with the rule to add
/// (asked first when `asked`), its output names that rule, and the registry
/// saw nothing.
fn assert_refused(events: &[Value], reg: &Registry, asked: bool) {
    let add = format!("add \"{}\" to [network] allow", reg.rule());
    let asks = of_type(events, "approval.requested");
    if asked {
        assert!(!asks.is_empty(), "{events:#?}");
        for a in &asks {
            assert_eq!(a["action"], "network.connect", "{a}");
            assert_eq!(a["command"], format!("connect {}", reg.rule()), "{a}");
        }
    } else {
        assert!(asks.is_empty(), "{events:#?}");
    }
    let step = of_type(events, "terminal.step");
    assert_eq!(step.len(), 1, "{events:#?}");
    assert_ne!(step[0]["exit_code"], 0, "{events:#?}");
    let conns = of_type(events, "network.connect");
    assert!(!conns.is_empty(), "no network.connect event: {events:#?}");
    for c in &conns {
        assert_eq!(c["port"], reg.port, "{c}");
        assert_eq!(c["verdict"], "denied", "{c}");
        assert_eq!(c["decided_by"], if asked { "person" } else { "default" });
        assert!(c["reason"].as_str().unwrap().contains(&add), "{c}");
        assert_eq!(c["bytes_down"], 0, "{c}");
    }
    // The tool may print only "403": the host's note names the rule.
    let output = step[0]["output_tail"].as_str().unwrap();
    assert!(
        output.contains("capstan: the egress proxy refused a connection:") && output.contains(&add),
        "the output does not name the rule to add: {output}"
    );
    assert!(
        reg.requests().is_empty(),
        "a refused registry was reached: {:?}",
        reg.requests()
    );
}

#[test]
fn git_clones_from_an_allowed_smart_http_server_and_an_unlisted_one_is_asked_then_refused() {
    let reg = Registry::start("git");
    let command = format!("git clone -q http://127.0.0.1:{}/repo.git r", reg.port);

    let home = not_allowing(true, "");
    let ws = tempfile::tempdir().unwrap();
    assert_refused(&run(&home, ws.path(), ".", &command, &[]), &reg, true);
    assert!(!ws.path().join("r/README").exists());

    let home = allowing(&reg, "");
    let events = run(&home, ws.path(), ".", &command, &[]);
    assert_allowed(&events, &reg);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("r/README")).unwrap(),
        "served by the fake git server\n"
    );
    // Smart HTTP: the ref advertisement, then the pack.
    let requests = reg.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.contains("/repo.git/info/refs?service=git-upload-pack")),
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r == "POST /repo.git/git-upload-pack"),
        "{requests:?}"
    );
}

#[test]
fn pip_installs_from_an_allowed_simple_index_and_an_unlisted_one_is_refused_naming_the_rule() {
    let reg = Registry::start("pypi");
    let command = format!(
        "pip install --no-cache-dir --disable-pip-version-check --target lib \
         --index-url http://127.0.0.1:{}/simple/ capstan-tiny",
        reg.port
    );

    let home = not_allowing(false, "");
    let ws = tempfile::tempdir().unwrap();
    assert_refused(&run(&home, ws.path(), ".", &command, &[]), &reg, false);

    let home = allowing(&reg, "");
    let output = assert_allowed(&run(&home, ws.path(), ".", &command, &[]), &reg);
    assert!(
        output.contains("Successfully installed capstan-tiny-1.0.0"),
        "{output}"
    );
    assert!(
        std::fs::read_to_string(ws.path().join("lib/capstan_tiny/__init__.py"))
            .unwrap()
            .contains("hello from the fake index")
    );
    let requests = reg.requests();
    assert!(
        requests.contains(&"GET /simple/capstan-tiny/".to_owned())
            && requests.contains(&"GET /files/capstan_tiny-1.0.0-py3-none-any.whl".to_owned()),
        "{requests:?}"
    );
}

#[test]
fn npm_installs_from_an_allowed_registry_and_an_unlisted_one_is_asked_then_refused() {
    let reg = Registry::start("npm");
    let command = format!(
        "npm install --no-audit --no-fund --no-update-notifier \
         --registry http://127.0.0.1:{}/ capstan-tiny",
        reg.port
    );

    let home = not_allowing(true, "");
    let ws = tempfile::tempdir().unwrap();
    assert_refused(&run(&home, ws.path(), ".", &command, &[]), &reg, true);

    let home = allowing(&reg, "");
    assert_allowed(&run(&home, ws.path(), ".", &command, &[]), &reg);
    assert!(
        std::fs::read_to_string(ws.path().join("node_modules/capstan-tiny/index.js"))
            .unwrap()
            .contains("hello from the fake registry")
    );
    let lock = std::fs::read_to_string(ws.path().join("package-lock.json")).unwrap();
    assert!(
        lock.contains(&format!(
            "http://127.0.0.1:{}/capstan-tiny/-/capstan-tiny-1.0.0.tgz",
            reg.port
        )),
        "{lock}"
    );
}

/// The Rust toolchain this test was built with (its `bin` holds cargo and
/// rustc), made readable in the sandbox by `[sandbox] read`.
fn toolchain() -> PathBuf {
    let cargo = std::fs::canonicalize(env!("CARGO")).unwrap();
    cargo.parent().unwrap().parent().unwrap().to_path_buf()
}

#[test]
fn cargo_fetches_from_an_allowed_sparse_registry_and_an_unlisted_one_is_refused_naming_the_rule() {
    let reg = Registry::start("cargo");
    let ws = tempfile::tempdir().unwrap();
    let krate = ws.path().join("crate");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    std::fs::create_dir_all(krate.join(".cargo")).unwrap();
    std::fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"uses-tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\ncapstan-tiny = { version = \"0.1\", registry = \"fake\" }\n",
    )
    .unwrap();
    std::fs::write(krate.join("src/lib.rs"), "").unwrap();
    std::fs::write(
        krate.join(".cargo/config.toml"),
        format!(
            "[registries.fake]\nindex = \"sparse+http://127.0.0.1:{}/index/\"\n",
            reg.port
        ),
    )
    .unwrap();
    // How a user gives commands their toolchain: the toolchain readable,
    // PATH and CARGO_HOME passed through (CARGO_HOME in the workspace, so
    // the registry cache outlives the command).
    let toolchain = toolchain();
    let path = std::env::join_paths(
        std::iter::once(toolchain.join("bin"))
            .chain(capstan_sandbox::SANDBOX_PATH.split(':').map(PathBuf::from)),
    )
    .unwrap();
    let cargo_home = ws.path().join(".cargo-home");
    let extra = format!(
        "env_allow = [\"PATH\", \"CARGO_HOME\"]\n\n[sandbox]\nread = [{:?}]\n",
        toolchain.display().to_string()
    );
    let env: [(&str, &Path); 2] = [("PATH", Path::new(&path)), ("CARGO_HOME", &cargo_home)];

    let home = not_allowing(false, &extra);
    let events = run(&home, ws.path(), "crate", "cargo fetch", &env);
    assert_refused(&events, &reg, false);
    assert!(!krate.join("Cargo.lock").exists());

    let home = allowing(&reg, &extra);
    let output = assert_allowed(&run(&home, ws.path(), "crate", "cargo fetch", &env), &reg);
    assert!(
        output.contains("Downloaded capstan-tiny v0.1.0 (registry `fake`)"),
        "{output}"
    );
    let lock = std::fs::read_to_string(krate.join("Cargo.lock")).unwrap();
    assert!(lock.contains("name = \"capstan-tiny\""), "{lock}");
    // The .crate landed in the CARGO_HOME the command was given.
    let cache = cargo_home.join("registry/cache");
    let crates: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .map(|d| d.path().join("capstan-tiny-0.1.0.crate"))
        .filter(|p| p.exists())
        .collect();
    assert_eq!(
        crates.len(),
        1,
        "no capstan-tiny-0.1.0.crate under {cache:?}"
    );
    let requests = reg.requests();
    for want in [
        "GET /index/config.json",
        "GET /index/ca/ps/capstan-tiny",
        "GET /api/v1/crates/capstan-tiny/0.1.0/download",
    ] {
        assert!(requests.contains(&want.to_owned()), "{want}: {requests:?}");
    }
}
