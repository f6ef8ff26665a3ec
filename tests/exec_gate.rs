//! terminal_exec through the real binary: the host's classifier, the policy and
//! approval gate, and the OS sandbox, end to end. The exhaustive adversarial
//! suites live beside the code they attack: crates/policy/tests/classifier.rs
//! (265 classifier cases) and crates/sandbox/tests/adversarial.rs (sandbox
//! escapes, network, secrets, process lifetimes, floods).

mod common;

use std::path::Path;

use common::Home;
use serde_json::{Value, json};

struct Run {
    code: Option<i32>,
    events: Vec<Value>,
}

impl Run {
    fn result(&self) -> &Value {
        self.events.last().unwrap()
    }
    fn of_type(&self, t: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["type"] == t).collect()
    }
}

fn invoke(home: &Home, ws: &Path, approve: &str, input: Value) -> Run {
    let out = home
        .capstan()
        .args([
            "invoke",
            "terminal_exec",
            "--json",
            "--approve",
            approve,
            "--workspace",
        ])
        .arg(ws)
        .args(["--input", &input.to_string()])
        .env("AWS_SECRET_ACCESS_KEY", "capstan-test-secret")
        .output()
        .unwrap();
    let events = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    Run {
        code: out.status.code(),
        events,
    }
}

fn workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("keep.txt"), "keep me").unwrap();
    ws
}

#[test]
fn read_only_commands_run_without_approval_and_report_a_terminal_step() {
    let home = Home::new("");
    let ws = workspace();
    let run = invoke(&home, ws.path(), "none", json!({"command": "cat keep.txt"}));
    assert_eq!(run.code, Some(0), "{:?}", run.events);
    assert!(run.of_type("approval.requested").is_empty());
    let step = run.of_type("terminal.step")[0];
    assert_eq!(step["risk"], "read_only");
    assert_eq!(step["exit_code"], 0);
    assert_eq!(run.result()["data"]["steps"][0]["stdout"], "keep me");
}

#[test]
fn a_delete_without_approval_is_denied_and_nothing_runs() {
    let home = Home::new("");
    let ws = workspace();
    let run = invoke(
        &home,
        ws.path(),
        "none",
        json!({"command": "rm -f keep.txt"}),
    );
    assert_eq!(run.code, Some(1));
    assert_eq!(run.result()["reason"], "denied");
    let asked = run.of_type("approval.requested");
    assert_eq!(asked[0]["risk"], "delete");
    assert!(run.of_type("approval.decided")[0]["decision"] == "denied");
    assert!(ws.path().join("keep.txt").exists());
    assert!(run.of_type("terminal.step").is_empty());
}

#[test]
fn approved_commands_still_cannot_leave_the_workspace_or_reach_the_network() {
    let home = Home::new("");
    let ws = workspace();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("escaped.txt");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let cmds = [
        format!("echo x > {}", target.display()),
        format!(
            "ln -s {} link && echo x > link/escaped.txt",
            outside.path().display()
        ),
        format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}'"),
        format!("python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}))\""),
    ];
    for cmd in &cmds {
        let run = invoke(&home, ws.path(), "all", json!({"command": cmd}));
        let step = run.of_type("terminal.step");
        assert!(!step.is_empty(), "{cmd} did not run: {:?}", run.events);
        assert_ne!(step[0]["exit_code"], 0, "{cmd} succeeded");
    }
    assert!(!target.exists(), "a write escaped the workspace");
    assert!(listener.accept().is_err(), "the network was reached");
}

#[test]
fn host_secrets_are_not_in_the_command_environment() {
    let home = Home::new("");
    let ws = workspace();
    let run = invoke(&home, ws.path(), "all", json!({"command": "env"}));
    let out = run.result()["data"]["steps"][0]["stdout"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(out.contains("PATH="), "{out}");
    assert!(!out.contains("capstan-test-secret"), "{out}");
    assert!(!out.contains("CAPSTAN_HOME"), "{out}");
}

#[test]
fn deny_rules_and_the_locked_profile_hold_even_with_approve_all() {
    let home = Home::new("[policy]\ndeny = [\"git push\"]\n");
    let ws = workspace();
    for cmd in [
        "echo ok && git push origin main",
        "sh -c 'git push'",
        "env GIT_DIR=x git push",
    ] {
        let run = invoke(&home, ws.path(), "all", json!({"command": cmd}));
        assert_eq!(
            run.result()["reason"],
            "denied",
            "{cmd}: {:?}",
            run.result()
        );
        assert!(run.of_type("terminal.step").is_empty());
    }
    let locked = Home::new("[policy]\nprofile = \"locked\"\n");
    let run = invoke(&locked, ws.path(), "all", json!({"command": "ls"}));
    assert_eq!(run.result()["reason"], "denied");
}

#[test]
fn the_loop_stops_at_the_first_failing_command_unless_told_otherwise() {
    let home = Home::new("");
    let ws = workspace();
    let run = invoke(
        &home,
        ws.path(),
        "all",
        json!({"commands": ["false", "echo after"]}),
    );
    assert_eq!(run.code, Some(0));
    assert_eq!(run.result()["data"]["ran"], 1);
    let run = invoke(
        &home,
        ws.path(),
        "all",
        json!({"commands": ["false", "echo after"], "continue_on_error": true}),
    );
    assert_eq!(run.result()["data"]["ran"], 2);
}

#[test]
fn exec_without_a_workspace_is_refused() {
    let home = Home::new("");
    let out = home
        .capstan()
        .args([
            "invoke",
            "terminal_exec",
            "--json",
            "--approve",
            "all",
            "--input",
            r#"{"command":"ls"}"#,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("workspace.required"), "{text}");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn commands_run_with_no_new_privs_seccomp_and_the_default_rlimits() {
    // Read back from inside the command, as the kernel reports it for that process.
    let home = Home::new("");
    let ws = workspace();
    let run = invoke(
        &home,
        ws.path(),
        "none",
        json!({"command": "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status"}),
    );
    assert_eq!(run.code, Some(0), "{:?}", run.events);
    let status = run.result()["data"]["steps"][0]["stdout"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    // 2: a seccomp filter is installed.
    assert!(status.contains("Seccomp:\t2"), "{status}");

    let run = invoke(
        &home,
        ws.path(),
        "none",
        json!({"command": "cat /proc/self/limits"}),
    );
    assert_eq!(run.code, Some(0), "{:?}", run.events);
    let limits = run.result()["data"]["steps"][0]["stdout"]
        .as_str()
        .unwrap()
        .to_string();
    let row = |name: &str| -> Vec<String> {
        limits
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {limits}"))[name.len()..]
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    // The sandbox's defaults: files up to 4 GiB, no core dumps (soft and hard).
    assert_eq!(row("Max file size")[..2], ["4294967296", "4294967296"], "{limits}");
    assert_eq!(row("Max core file size")[..2], ["0", "0"], "{limits}");
}
