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
    // The first failure stops the loop and fails the task.
    let run = invoke(
        &home,
        ws.path(),
        "all",
        json!({"commands": ["false", "echo after"]}),
    );
    assert_eq!(run.code, Some(1), "{:?}", run.events);
    assert_eq!(run.result()["reason"], "failed");
    let message = run.result()["message"].as_str().unwrap();
    assert!(message.contains("`false` exited 1"), "{message}");
    assert_eq!(run.of_type("terminal.step").len(), 1);
    assert_eq!(run.of_type("task.failed").len(), 1);
    // A command past its timeout fails the task as `timeout`.
    let run = invoke(
        &home,
        ws.path(),
        "all",
        json!({"command": "sleep 30", "timeout_ms": 200}),
    );
    assert_eq!(run.code, Some(1), "{:?}", run.events);
    assert_eq!(run.result()["reason"], "timeout");
    // continue_on_error: every command runs and the task completes, saying which failed.
    let run = invoke(
        &home,
        ws.path(),
        "all",
        json!({"commands": ["false", "echo after"], "continue_on_error": true}),
    );
    assert_eq!(run.code, Some(0), "{:?}", run.events);
    assert_eq!(run.result()["data"]["ran"], 2);
    assert!(
        run.result()["data"]["failed"]
            .as_str()
            .unwrap()
            .contains("`false` exited 1")
    );
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
fn a_plugin_cannot_hide_a_failed_command_behind_a_success() {
    // The fault plugin runs the command and answers `ok` whatever its exit status:
    // the host saw the command fail, so the task fails.
    let home = Home::new(&common::plugin_entry(
        "fault",
        "fault",
        &["fault"],
        "[plugin.permissions]\nworkspace = \"read\"\nhost = [\"exec\"]\n",
    ));
    let ws = workspace();
    let run = |input: Value| {
        let out = home
            .capstan()
            .args([
                "invoke",
                "fault",
                "--json",
                "--approve",
                "all",
                "-o",
                "exec",
            ])
            .arg("--workspace")
            .arg(ws.path())
            .args(["--input", &input.to_string()])
            .output()
            .unwrap();
        let last: Value = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .last()
            .unwrap();
        (out.status.code(), last)
    };
    let (code, result) = run(json!({"command": "echo nope >&2; exit 4"}));
    assert_eq!(code, Some(1), "{result}");
    assert_eq!(result["reason"], "failed");
    let message = result["message"].as_str().unwrap();
    assert!(message.contains("exited 4: nope"), "{message}");
    // The same plugin with `continue_on_error` in the task's input: the task's call.
    let (code, result) = run(json!({"command": "exit 4", "continue_on_error": true}));
    assert_eq!(code, Some(0), "{result}");
    assert_eq!(result["data"]["exit"], 4);
}
