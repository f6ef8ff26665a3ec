//! `[[mcp_server]]` command servers run in the OS sandbox (issue #18): a real
//! `capstan` binary starts a real MCP server (tests/npm/mcp-servers/probe.mjs,
//! run by node) through the sandbox launcher and calls its tools. Confined by
//! default, it cannot read the user's `$HOME` (a temporary one holding a
//! secret), see the workspace, write outside its private `/tmp`, reach a
//! 127.0.0.1 server or see Capstan's API keys; `workspace = "read"` lets it
//! read but not write, `"write"` write; a `network` allowlist lets it reach
//! exactly that host through its own egress proxy, every connection a
//! `network.connect` event; `sandbox = false` runs it unconfined and `plugins
//! list` says so; a sandbox that cannot be set up fails closed, naming the
//! server; bad entries are refused with what to write.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use common::Home;
use serde_json::{Value, json};

const SECRET: &str = "the-users-own-secret-4711";
const API_KEY: &str = "sk-ant-test-key-that-must-not-leak";

fn servers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/npm/mcp-servers")
        .canonicalize()
        .unwrap()
}

/// The user's capstan.toml: the probe server, readable where its script is
/// (unless `extra` says `read` or `sandbox = false` itself), with `extra`
/// lines added to its entry.
fn config(extra: &str) -> String {
    let dir = servers_dir();
    let read = if extra.contains("read =") || extra.contains("sandbox = false") {
        String::new()
    } else {
        format!("read = [{:?}]\n", dir.display().to_string())
    };
    format!(
        "[[mcp_server]]\nname = \"probe\"\ncommand = \"node\"\nargs = [{script:?}]\n{read}risk = \"read_only\"\n{extra}\n",
        script = dir.join("probe.mjs").display().to_string(),
    )
}

/// Everything the test needs: Capstan's home, the user's `$HOME` (with a
/// secret file) and a workspace (with a file of its own).
struct Setup {
    home: Home,
    user_home: tempfile::TempDir,
    ws: tempfile::TempDir,
}

impl Setup {
    fn new(extra: &str) -> Self {
        let user_home = tempfile::tempdir().unwrap();
        std::fs::write(user_home.path().join("secret.txt"), SECRET).unwrap();
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("notes.txt"), "workspace notes").unwrap();
        Setup {
            home: Home::new(&config(extra)),
            user_home,
            ws,
        }
    }

    fn capstan(&self) -> std::process::Command {
        let mut cmd = self.home.capstan();
        cmd.env("HOME", self.user_home.path())
            .env("ANTHROPIC_API_KEY", API_KEY);
        cmd
    }

    /// `capstan invoke mcp:probe/<tool> --json`: its events and result.
    fn invoke(&self, tool: &str, input: Value) -> Vec<Value> {
        let out = self
            .capstan()
            .args(["invoke", &format!("mcp:probe/{tool}"), "--json"])
            .args(["--approve", "all", "--workspace"])
            .arg(self.ws.path())
            .args(["--input", &input.to_string()])
            .output()
            .unwrap();
        let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        assert!(
            lines.iter().any(|l| l["type"] == "result"),
            "no result: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        lines
    }

    /// The text the tool answered (the call must succeed: the probe reports
    /// what failed inside as text).
    fn answer(&self, tool: &str, input: Value) -> String {
        let lines = self.invoke(tool, input);
        let result = lines.iter().find(|l| l["type"] == "result").unwrap();
        assert_eq!(result["ok"], true, "{lines:?}");
        result["data"]["text"][0].as_str().unwrap().to_string()
    }

    fn read(&self, path: &Path) -> String {
        self.answer("read", json!({ "path": path }))
    }

    fn write(&self, path: &Path) -> String {
        self.answer("write", json!({ "path": path }))
    }

    fn plugins_list(&self) -> String {
        let out = self.capstan().args(["plugins", "list"]).output().unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

/// A one-answer-per-connection HTTP server on 127.0.0.1; returns its port
/// and how many connections it accepted.
fn server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n",
            );
        }
    });
    (port, seen)
}

fn seen(counter: &std::sync::atomic::AtomicUsize) -> usize {
    counter.load(std::sync::atomic::Ordering::SeqCst)
}

fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

#[test]
fn a_sandboxed_server_sees_neither_home_nor_workspace_and_reaches_no_host() {
    let s = Setup::new("");
    let (port, hits) = server();

    // Its own tools work: the server runs.
    let secret = s.read(&s.user_home.path().join("secret.txt"));
    assert!(secret.starts_with("error:"), "{secret}");
    assert!(!secret.contains(SECRET));
    let notes = s.read(&s.ws.path().join("notes.txt"));
    assert!(notes.starts_with("error:"), "{notes}");
    // Not even /etc's secrets.
    assert!(s.read(Path::new("/etc/shadow")).starts_with("error:"));

    // Writes outside its private /tmp fail, and nothing appears on the host.
    for target in [
        s.user_home.path().join("planted"),
        s.ws.path().join("planted"),
    ] {
        let answer = s.write(&target);
        assert!(answer.starts_with("error:"), "{target:?}: {answer}");
        assert!(!target.exists(), "{target:?}");
    }
    // Its /tmp is its own: what it writes there never reaches the host's.
    let host_tmp = std::env::temp_dir().join(format!("capstan-mcp-probe-{}", std::process::id()));
    assert_eq!(s.write(&host_tmp), "ok: written");
    assert!(!host_tmp.exists());

    // No network: neither directly nor through a proxy (it has none).
    let answer = s.answer(
        "connect",
        json!({ "url": format!("http://127.0.0.1:{port}/") }),
    );
    assert!(answer.contains("direct: error"), "{answer}");
    assert!(answer.contains("proxy: no proxy"), "{answer}");
    assert_eq!(seen(&hits), 0);

    // Capstan's environment (model API keys) stays outside.
    let env = s.answer("env", json!({}));
    assert!(!env.contains("ANTHROPIC_API_KEY"), "{env}");
    assert!(env.contains("HOME"), "{env}");

    let list = s.plugins_list();
    assert!(
        list.contains("sandboxed; workspace: none; network: none"),
        "{list}"
    );
}

/// `[sandbox]`'s limits hold for MCP servers as for commands: its `/tmp`
/// (which holds its `HOME`) is `tmp_mb` large.
#[test]
fn the_sandbox_sections_limits_apply_to_a_server() {
    let s = Setup::new("");
    let s = Setup {
        home: Home::new(&format!("[sandbox]\ntmp_mb = 2\n\n{}", config(""))),
        ..s
    };
    let write = |bytes: u64| s.answer("write", json!({ "path": "/tmp/fill", "bytes": bytes }));
    assert_eq!(write(512 << 10), "ok: written");
    let answer = write(4 << 20);
    assert!(
        answer.starts_with("error:") && answer.contains("ENOSPC"),
        "{answer}"
    );
}

#[test]
fn workspace_read_lets_it_read_but_not_write_and_write_lets_it_write() {
    let s = Setup::new("workspace = \"read\"");
    assert_eq!(
        s.read(&s.ws.path().join("notes.txt")),
        "ok: workspace notes"
    );
    let target = s.ws.path().join("planted");
    let answer = s.write(&target);
    assert!(answer.starts_with("error:"), "{answer}");
    assert!(!target.exists());
    // Still not the user's home.
    assert!(
        s.read(&s.user_home.path().join("secret.txt"))
            .starts_with("error:")
    );
    assert!(s.plugins_list().contains("workspace: read"));

    let s = Setup::new("workspace = \"write\"");
    let target = s.ws.path().join("written");
    assert_eq!(s.write(&target), "ok: written");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "written by probe"
    );
    assert!(
        s.read(&s.user_home.path().join("secret.txt"))
            .starts_with("error:")
    );
}

#[test]
fn a_network_allowlist_reaches_exactly_its_hosts_through_the_proxy_with_an_event_each() {
    let (allowed, allowed_hits) = server();
    let (other, other_hits) = server();
    let s = Setup::new(&format!("network = [\"127.0.0.1:{allowed}\"]"));

    let events = s.invoke(
        "connect",
        json!({ "url": format!("http://127.0.0.1:{allowed}/") }),
    );
    let result = events.iter().find(|l| l["type"] == "result").unwrap();
    let answer = result["data"]["text"][0].as_str().unwrap();
    // Only the proxy leads out of its network namespace.
    assert!(answer.contains("direct: error"), "{answer}");
    assert!(answer.contains("proxy: 200 hello"), "{answer}");
    assert_eq!(seen(&allowed_hits), 1);
    let conns = of_type(&events, "network.connect");
    assert_eq!(conns.len(), 1, "{events:?}");
    assert_eq!(conns[0]["host"], "127.0.0.1");
    assert_eq!(conns[0]["port"], allowed);
    assert_eq!(conns[0]["verdict"], "allowed");
    assert_eq!(conns[0]["rule"], format!("127.0.0.1:{allowed}"));

    let events = s.invoke(
        "connect",
        json!({ "url": format!("http://127.0.0.1:{other}/") }),
    );
    let result = events.iter().find(|l| l["type"] == "result").unwrap();
    let answer = result["data"]["text"][0].as_str().unwrap();
    assert!(!answer.contains("200 hello"), "{answer}");
    assert_eq!(seen(&other_hits), 0);
    let conns = of_type(&events, "network.connect");
    assert_eq!(conns.len(), 1, "{events:?}");
    assert_eq!(conns[0]["port"], other);
    assert_eq!(conns[0]["verdict"], "denied");
    assert!(
        conns[0]["reason"]
            .as_str()
            .unwrap()
            .contains("`network` in its [[mcp_server]] entry"),
        "{conns:?}"
    );

    let list = s.plugins_list();
    assert!(
        list.contains(&format!(
            "network: 127.0.0.1:{allowed} (through the egress proxy)"
        )),
        "{list}"
    );
}

#[test]
fn sandbox_false_runs_it_unconfined_and_plugins_list_says_so() {
    let s = Setup::new("sandbox = false");
    let secret = s.read(&s.user_home.path().join("secret.txt"));
    assert_eq!(secret, format!("ok: {SECRET}"));
    let list = s.plugins_list();
    assert!(list.contains("NOT sandboxed (sandbox = false)"), "{list}");
}

#[test]
fn a_sandbox_that_cannot_be_set_up_fails_closed_naming_the_server() {
    let s = Setup::new("");
    let out = s
        .capstan()
        // The sandbox's test hook: Landlock treated as missing.
        .env("CAPSTAN_SANDBOX_UNAVAILABLE", "landlock")
        .args(["invoke", "mcp:probe/read", "--json", "--approve", "all"])
        .args(["--workspace"])
        .arg(s.ws.path())
        .args([
            "--input",
            &json!({ "path": s.user_home.path().join("secret.txt") }).to_string(),
        ])
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{all}");
    assert!(!all.contains(SECRET), "{all}");
    assert!(
        all.contains("the OS sandbox for MCP server `probe` cannot be set up"),
        "{all}"
    );
    assert!(all.contains("sandbox = false"), "{all}");
    assert!(all.contains("Landlock"), "{all}");
}

#[test]
fn bad_sandbox_keys_are_refused_with_what_to_write() {
    for (extra, expect) in [
        ("workspace = \"all\"", "unknown variant `all`"),
        (
            "sandbox = false\nnetwork = [\"example.com\"]",
            "remove `sandbox = false` to confine the server",
        ),
        ("network = [\"exa mple.com:99999\"]", "`network`:"),
        ("network_presets = [\"nope\"]", "no such preset"),
        ("read = [\"relative/dir\"]", "must be an absolute path"),
    ] {
        let s = Setup::new(extra);
        let list = s.plugins_list();
        assert!(list.contains(expect), "{extra}: {list}");
        assert!(list.contains("probe") || list.contains("#1"), "{list}");
    }
}
