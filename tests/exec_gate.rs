//! terminal_exec through the real binary: the host's classifier, the policy and
//! approval gate, and the OS sandbox, end to end. The exhaustive adversarial
//! suites live beside the code they attack: crates/policy/tests/classifier.rs
//! (385 classifier cases) and crates/sandbox/tests/adversarial.rs (sandbox
//! escapes, network, secrets, process lifetimes, floods).
#![allow(clippy::unwrap_used, clippy::expect_used)]

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
    // The plugin's own record of the step names the risk as the host does.
    assert_eq!(run.result()["data"]["steps"][0]["risk"], "read_only");
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
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
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

/// A git repository in `ws` with one commit, an uncommitted change (so that
/// `git diff` has something to show), `.gitattributes` routing every file
/// through driver `x`, and `plant.sh`: the program every planted key names.
/// Run, it deletes `canary.txt` and creates `marker-<why>`.
fn planted_repo(ws: &Path) {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(ws)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .expect("git is needed for this test: install it (apt-get install git)");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q", "."]);
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    std::fs::write(ws.join(".gitattributes"), "* filter=x diff=x merge=x\n").unwrap();
    git(&["add", "a.txt", ".gitattributes"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-qm",
        "one",
    ]);
    std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(ws.join("canary.txt"), "alive").unwrap();
    let plant = ws.join("plant.sh");
    std::fs::write(
        &plant,
        format!(
            "#!/bin/sh\ntouch '{ws}/marker-'\"$1\"\nrm -f '{ws}/canary.txt'\ncat\n",
            ws = ws.display()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(ws.join("hooks")).unwrap();
    for hook in [
        "pre-commit",
        "post-commit",
        "post-checkout",
        "post-index-change",
    ] {
        let path = ws.join("hooks").join(hook);
        std::fs::write(&path, format!("#!/bin/sh\n'{}' hook\n", plant.display())).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&plant, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Every key of issue 13 item 7 (and the rest of its class), as the config
/// text that plants it and the key git names.
fn planted_keys(plant: &str, ws: &Path) -> Vec<(&'static str, String)> {
    let inc = ws.join("inc.cfg");
    vec![
        (
            "core.fsmonitor",
            format!("[core]\n\tfsmonitor = {plant} fsmonitor\n"),
        ),
        (
            "diff.external",
            format!("[diff]\n\texternal = {plant} external\n"),
        ),
        ("core.pager", format!("[core]\n\tpager = {plant} pager\n")),
        ("pager.log", format!("[pager]\n\tlog = {plant} pagerlog\n")),
        (
            "core.sshcommand",
            format!("[core]\n\tsshCommand = {plant} ssh\n"),
        ),
        (
            "core.hookspath",
            format!("[core]\n\thooksPath = {}\n", ws.join("hooks").display()),
        ),
        (
            "filter.x.clean",
            format!("[filter \"x\"]\n\tclean = {plant} clean\n"),
        ),
        (
            "filter.x.smudge",
            format!("[filter \"x\"]\n\tsmudge = {plant} smudge\n"),
        ),
        (
            "filter.x.process",
            format!("[filter \"x\"]\n\tprocess = {plant} process\n"),
        ),
        (
            "diff.x.textconv",
            format!("[diff \"x\"]\n\ttextconv = {plant} textconv\n"),
        ),
        (
            "diff.x.command",
            format!("[diff \"x\"]\n\tcommand = {plant} diffcommand\n"),
        ),
        (
            "merge.x.driver",
            format!("[merge \"x\"]\n\tdriver = {plant} merge\n"),
        ),
        (
            "credential.helper",
            format!("[credential]\n\thelper = !{plant} credential\n"),
        ),
        (
            "include.path",
            format!("[include]\n\tpath = {}\n", inc.display()),
        ),
        (
            "includeif.gitdir:/.path",
            format!("[includeIf \"gitdir:/\"]\n\tpath = {}\n", inc.display()),
        ),
        (
            "core.editor",
            format!("[core]\n\teditor = {plant} editor\n"),
        ),
        (
            "sequence.editor",
            format!("[sequence]\n\teditor = {plant} seqeditor\n"),
        ),
        (
            "gpg.program",
            format!("[gpg]\n\tprogram = {plant} gpg\n[log]\n\tshowSignature = true\n"),
        ),
        (
            "core.askpass",
            format!("[core]\n\taskPass = {plant} askpass\n"),
        ),
        ("alias.st", format!("[alias]\n\tst = !{plant} alias\n")),
        (
            "core.gitproxy",
            format!("[core]\n\tgitProxy = {plant} proxy\n"),
        ),
        (
            "interactive.difffilter",
            format!("[interactive]\n\tdiffFilter = {plant} difffilter\n"),
        ),
        (
            "remote.origin.uploadpack",
            format!(
                "[remote \"origin\"]\n\turl = {}\n\tuploadpack = {plant} uploadpack\n",
                ws.display()
            ),
        ),
    ]
}

const BASE_CONFIG: &str =
    "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n";

fn assert_nothing_ran(ws: &Path, what: &str) {
    assert!(
        ws.join("canary.txt").exists(),
        "{what}: the canary was deleted"
    );
    let markers: Vec<String> = std::fs::read_dir(ws)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("marker-"))
        .collect();
    assert!(markers.is_empty(), "{what}: planted code ran: {markers:?}");
}

/// Issue 13 item 7: read-only git ran programs named in the repository's
/// config. With any such key planted, `git status`, `git diff` and
/// `git log -p` ask under `cautious`, the approval names the key, and with
/// no approval nothing planted runs.
#[test]
fn git_asks_when_the_repository_config_names_a_program_and_runs_nothing_planted() {
    let home = Home::new("");
    let ws = tempfile::tempdir().unwrap();
    let ws = ws.path().canonicalize().unwrap();
    planted_repo(&ws);
    let plant = ws.join("plant.sh").display().to_string();
    std::fs::write(
        ws.join("inc.cfg"),
        format!("[core]\n\tfsmonitor = {plant} included\n"),
    )
    .unwrap();
    // Clean: read-only git runs without asking, inside the sandbox.
    let run = invoke(&home, &ws, "none", json!({"command": "git status --short"}));
    assert!(
        run.of_type("approval.requested").is_empty(),
        "{:?}",
        run.events
    );
    let step = run.of_type("terminal.step");
    assert_eq!(
        step[0]["exit_code"], 0,
        "git must run in the sandbox: {:?}",
        run.events
    );
    assert!(
        step[0]["output_tail"].as_str().unwrap().contains("a.txt"),
        "{step:?}"
    );
    for (key, text) in planted_keys(&plant, &ws) {
        std::fs::write(ws.join(".git/config"), format!("{BASE_CONFIG}{text}")).unwrap();
        for cmd in ["git status", "git diff", "git log -p"] {
            let run = invoke(&home, &ws, "none", json!({"command": cmd}));
            let what = format!("{key} / {cmd}");
            assert_eq!(
                run.result()["reason"],
                "denied",
                "{what}: {:?}",
                run.result()
            );
            let asked = run.of_type("approval.requested");
            assert_eq!(asked.len(), 1, "{what}: {:?}", run.events);
            assert_eq!(asked[0]["risk"], "unknown", "{what}");
            let reasons = asked[0]["reasons"].to_string();
            assert!(reasons.contains(&format!("`{key}`")), "{what}: {reasons}");
            assert!(run.of_type("terminal.step").is_empty(), "{what}");
            assert_nothing_ran(&ws, &what);
        }
    }
    // A `.git` file pointing elsewhere: its target's config is read too.
    std::fs::rename(ws.join(".git"), ws.join("store")).unwrap();
    std::fs::write(ws.join(".git"), "gitdir: store\n").unwrap();
    std::fs::write(
        ws.join("store/config"),
        format!("{BASE_CONFIG}[core]\n\tfsmonitor = {plant} gitfile\n"),
    )
    .unwrap();
    let run = invoke(&home, &ws, "none", json!({"command": "git status"}));
    let reasons = run.of_type("approval.requested")[0]["reasons"].to_string();
    assert!(
        reasons.contains("`core.fsmonitor` (in store/config)"),
        "{reasons}"
    );
    assert_nothing_ran(&ws, "gitdir file");
}

/// Defence in depth: even approved, git runs with the repository's
/// fsmonitor, hooks, pagers, editors and helpers switched off by the host.
/// The control step (the host's overrides removed by the command itself)
/// shows the planted config is live.
#[test]
fn approved_git_still_runs_no_fsmonitor_hook_pager_or_helper_from_the_repository() {
    let home = Home::new("");
    let ws = tempfile::tempdir().unwrap();
    let ws = ws.path().canonicalize().unwrap();
    planted_repo(&ws);
    let plant = ws.join("plant.sh").display().to_string();
    let neutralised = format!(
        "{BASE_CONFIG}\tfsmonitor = {plant} fsmonitor\n\tpager = {plant} pager\n\
         \thooksPath = {hooks}\n\teditor = {plant} editor\n\taskPass = {plant} askpass\n\
         \tsshCommand = {plant} ssh\n[pager]\n\tlog = {plant} pagerlog\n\
         [sequence]\n\teditor = {plant} seqeditor\n[credential]\n\thelper = !{plant} credential\n",
        hooks = ws.join("hooks").display()
    );
    std::fs::write(ws.join(".git/config"), neutralised).unwrap();
    std::fs::remove_file(ws.join(".gitattributes")).unwrap();
    for cmd in [
        "git status",
        "git diff",
        "git log -p",
        "git -c user.name=t -c user.email=t@t commit -qam two",
    ] {
        let run = invoke(&home, &ws, "all", json!({"command": cmd}));
        let step = run.of_type("terminal.step");
        assert_eq!(step.len(), 1, "{cmd}: {:?}", run.events);
        assert_eq!(step[0]["exit_code"], 0, "{cmd}: {step:?}");
        assert_nothing_ran(&ws, cmd);
    }
    // Control: without the host's overrides the planted fsmonitor runs.
    let run = invoke(
        &home,
        &ws,
        "all",
        json!({"command": "GIT_CONFIG_COUNT=0 git status"}),
    );
    assert_eq!(run.of_type("terminal.step").len(), 1, "{:?}", run.events);
    assert!(
        ws.join("marker-fsmonitor").exists(),
        "the control should have run the planted fsmonitor: {:?}",
        run.events
    );
}

/// The exec service with a plugin that asks for a stricter risk than the
/// host's classification (`min_risk`): the plugin can make a command ask,
/// never make it run. Driven through the real service and sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_asking_for_a_stricter_risk_makes_the_command_ask() {
    use capstan::plugins::bindings::{exec as wit, types::Risk as WitRisk};
    use capstan::plugins::context::{ExecService, HostServices, RunContext, TaskScope};
    use capstan::plugins::services::approval::{ApprovalBroker, ApproveMode};
    use capstan::plugins::services::exec::Exec;
    use capstan_policy::{Policy, Profile};
    use capstan_protocol::Event;
    use std::sync::Arc;

    capstan_sandbox::set_launcher(env!("CARGO_BIN_EXE_capstan"));
    let ws = workspace();
    let ws_path = ws.path().canonicalize().unwrap();
    let request = |min_risk| wit::ExecRequest {
        command: wit::Command::Shell("cat keep.txt".into()),
        cwd: String::new(),
        timeout_ms: None,
        output_limit: None,
        min_risk,
    };
    let scope_with = |rec: &common::Recorder| TaskScope {
        task_id: "t1".into(),
        plugin: "test".into(),
        run: RunContext::new(
            Some(ws_path.clone()),
            Arc::new(rec.clone()),
            HostServices::default(),
        ),
        resource_limit: Arc::default(),
    };
    let exec = |profile| {
        let broker =
            ApprovalBroker::new(ApproveMode::None, std::time::Duration::from_secs(5), None);
        Exec::new(
            Policy {
                profile,
                ..Policy::default()
            },
            Arc::new(broker),
        )
    };

    // `cat` is read_only: cautious runs it unasked...
    let rec = common::Recorder::default();
    let out = exec(Profile::Cautious)
        .run(&scope_with(&rec), request(None))
        .await
        .expect("cat runs");
    assert_eq!(out.stdout, "keep me");
    // ...but a plugin that says `network` makes it ask, and with no one
    // approving, nothing runs.
    let rec = common::Recorder::default();
    let err = exec(Profile::Cautious)
        .run(&scope_with(&rec), request(Some(WitRisk::Network)))
        .await
        .expect_err("the plugin's floor must make it ask");
    assert!(matches!(err, wit::ExecError::Denied(_)), "{err:?}");
    let events = rec.events();
    let asked = events
        .iter()
        .find_map(|e| match e {
            Event::ApprovalRequested { risk, reasons, .. } => {
                Some((risk.to_string(), reasons.clone()))
            }
            _ => None,
        })
        .expect("an approval was requested");
    assert_eq!(asked.0, "network");
    assert!(
        asked
            .1
            .iter()
            .any(|r| r == "the plugin asked to treat this as `network`"),
        "{:?}",
        asked.1
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::TerminalStep { .. })),
        "nothing may run"
    );
    // A floor the profile auto-runs anyway changes nothing; a floor below
    // the host's classification never lowers it.
    let rec = common::Recorder::default();
    let out = exec(Profile::Trusted)
        .run(&scope_with(&rec), request(Some(WitRisk::Write)))
        .await
        .expect("trusted auto-runs write");
    assert_eq!(out.risk, WitRisk::Write);
    let rec = common::Recorder::default();
    let err = exec(Profile::Cautious)
        .run(
            &scope_with(&rec),
            wit::ExecRequest {
                command: wit::Command::Shell("rm keep.txt".into()),
                ..request(Some(WitRisk::ReadOnly))
            },
        )
        .await
        .expect_err("a plugin cannot lower the risk of rm");
    assert!(matches!(err, wit::ExecError::Denied(_)), "{err:?}");
    assert!(ws.path().join("keep.txt").exists());
}

/// Writes to the files that configure code tools run on their own ask even
/// under `trusted` with allow rules that cover the commands, the approval
/// names the file, and without approval nothing is written.
#[test]
fn protected_files_ask_even_under_trusted_and_nothing_is_written() {
    let home = Home::new(
        "[policy]\nprofile = \"trusted\"\nallow = [\"echo\", \"tee\", \"cp\", \"mkdir\"]\n",
    );
    let ws = workspace();
    std::fs::create_dir_all(ws.path().join(".git/hooks")).unwrap();
    // An ordinary write runs unasked under these rules.
    let run = invoke(
        &home,
        ws.path(),
        "none",
        json!({"command": "echo x > notes.txt"}),
    );
    assert!(
        run.of_type("approval.requested").is_empty(),
        "{:?}",
        run.events
    );
    assert!(ws.path().join("notes.txt").exists());
    for (cmd, file) in [
        ("echo '[core] fsmonitor = x' >> .git/config", ".git/config"),
        ("cp keep.txt .git/hooks/pre-commit", ".git/hooks/pre-commit"),
        ("echo 'rm -rf ~' > .envrc", ".envrc"),
        (
            "mkdir -p .capstan && cp keep.txt .capstan/x.toml",
            ".capstan/x.toml",
        ),
        ("echo '[[plugin]]' | tee -a capstan.toml", "capstan.toml"),
    ] {
        let run = invoke(&home, ws.path(), "none", json!({"command": cmd}));
        assert_eq!(
            run.result()["reason"],
            "denied",
            "{cmd}: {:?}",
            run.result()
        );
        let asked = run.of_type("approval.requested");
        assert_eq!(asked.len(), 1, "{cmd}");
        let reasons = asked[0]["reasons"].to_string();
        assert!(reasons.contains(file), "{cmd}: {reasons}");
        assert!(run.of_type("terminal.step").is_empty(), "{cmd}");
        assert!(!ws.path().join(file).exists(), "{cmd} wrote {file}");
    }
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
    assert_eq!(
        row("Max file size")[..2],
        ["4294967296", "4294967296"],
        "{limits}"
    );
    assert_eq!(row("Max core file size")[..2], ["0", "0"], "{limits}");
}

/// Issue #41: a fresh set of evasions, written for this test (not taken from
/// the classifier's own tests), of the five kinds the attack studies found and
/// more. Under `--approve none` each must ask (then be denied) or be refused:
/// none may run unasked. Every one runs through the real binary, in a
/// workspace under a home directory with siblings, holding the files and the
/// repository configuration the evasion needs.
#[test]
fn fresh_evasions_of_every_kind_ask_or_are_refused_under_approve_none() {
    let home = Home::new("");
    let user = tempfile::tempdir().unwrap();
    for sibling in ["notes", "other-project", ".ssh"] {
        std::fs::create_dir_all(user.path().join(sibling)).unwrap();
    }
    let ws = user.path().join("projects/app");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("f.txt"), "b\na\n").unwrap();
    std::fs::write(ws.join("list"), "f.txt\n").unwrap();
    let git = |dir: &Path, args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&ws, &["init", "-q"]);
    git(&ws, &["config", "user.email", "dev@example.com"]);
    git(&ws, &["config", "user.name", "Dev"]);
    git(&ws, &["add", "f.txt"]);
    git(&ws, &["commit", "-qm", "one"]);
    // Repositories whose configuration runs a program, each in its own folder.
    let planted = [
        (
            "archive",
            "tar.tgz.command",
            "sh -c 'touch /tmp/pwned-archive'",
        ),
        ("alias", "alias.st", "!touch pwned-alias"),
        ("tool", "difftool.x.cmd", "touch pwned-tool"),
        ("ssh", "core.sshCommand", "touch pwned-ssh"),
        ("hook", "uploadpack.packObjectsHook", "touch pwned-hook"),
    ];
    for (dir, key, value) in planted {
        let repo = ws.join(dir);
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        git(&repo, &["config", key, value]);
    }
    // A `.git` file that points out of the workspace, at a sibling's repository.
    let outside = user.path().join("other-project");
    git(&outside, &["init", "-q"]);
    git(&outside, &["config", "core.pager", "touch pwned-outside"]);
    std::fs::create_dir_all(ws.join("linked")).unwrap();
    std::fs::write(
        ws.join("linked/.git"),
        format!("gitdir: {}\n", outside.join(".git").display()),
    )
    .unwrap();

    let evasions: &[(&str, &str)] = &[
        // 1. GNU long options abbreviated to a prefix (getopt_long, git's parse-options).
        (".", "sort --compress-prog=sh f.txt"),
        (".", "sort --compress-pro sh f.txt"),
        (".", "sort --comp=sh -S 1 f.txt"),
        (".", "sort --outp=out.txt f.txt"),
        (".", "sort --ou out.txt f.txt"),
        (".", "sed --in-pl s/a/b/ f.txt"),
        (".", "sed --in-place=.bak s/a/b/ f.txt"),
        (".", "git log --outp=out.txt"),
        (".", "git diff --outpu out.txt HEAD"),
        (".", "tar --checkpoint-act=exec=sh -cf /dev/null f.txt"),
        // 2. Flags inside short-option clusters and attached values.
        (".", "hash -rp /usr/bin/rm ls; ls f.txt"),
        (".", "hash -p/usr/bin/rm ls; ls f.txt"),
        (".", "sort -uo out.txt f.txt"),
        (".", "sort -ruoout.txt f.txt"),
        (".", "sed -ni s/a/b/ f.txt"),
        (".", "sed -Ei s/a/b/ f.txt"),
        (".", "git -ccore.pager=sh log"),
        (".", "less -oout.txt f.txt"),
        // 3. Indirect assignments to guarded variables.
        (".", "declare -n r=PATH; r=.; ls"),
        (".", "typeset -n r=PATH; r=.; ls"),
        (".", "declare -gn r=PATH; r=.; ls"),
        (".", "declare -rn r=PATH; ls"),
        (".", "f() { local -n r=PATH; r=.; ls; }; f"),
        (".", "printf -v PATH %s .; ls"),
        (".", "printf -vPATH %s .; ls"),
        (".", "getopts a PATH -a; ls"),
        (".", "mapfile -t PATH < list; ls"),
        (".", "read -r PATH < list; ls"),
        (".", "printf -v LD_PRELOAD %s ./x.so; export LD_PRELOAD; ls"),
        (
            ".",
            "declare -n r=GIT_PAGER; r=sh; export GIT_PAGER; git log",
        ),
        // 4. Options the table does not model, on commands that run commands.
        (".", "xargs --process-slot-var=PATH ls < list"),
        (".", "xargs --process-slot=PATH ls < list"),
        (".", "env -S'rm f.txt'"),
        (".", "env --split-string='rm f.txt'"),
        (".", "flock list -c 'rm f.txt'"),
        (".", "timeout --foreground 5 rm f.txt"),
        (".", "nice --adjustment=1 rm f.txt"),
        (".", "stdbuf --output=0 rm f.txt"),
        // 5. Repository configuration and indirections that run programs or
        // leave the workspace.
        ("archive", "git archive --format=tgz HEAD"),
        ("alias", "git st"),
        ("tool", "git difftool -y -t x"),
        ("ssh", "git status"),
        ("hook", "git log"),
        ("linked", "git log"),
        // And more: output files, interpreters, dynamic names.
        (".", "find . -fprint out.txt"),
        (".", "cat f.txt > /dev/tcp/127.0.0.1/9"),
        (".", "$(printf rm) f.txt"),
        (".", "awk 'BEGIN{system(\"rm f.txt\")}'"),
    ];
    let mut ran = Vec::new();
    for (dir, command) in evasions {
        let run = invoke(&home, &ws, "none", json!({"command": command, "cwd": dir}));
        if !run.of_type("terminal.step").is_empty() {
            ran.push(format!("{command} (in {dir})"));
            continue;
        }
        // Not run because it asked (and --approve none said no) or the policy
        // refused it: never because the invocation itself failed.
        let asked = !run.of_type("approval.requested").is_empty();
        assert!(
            asked || run.result()["reason"] == "denied",
            "{command} (in {dir}) neither ran, asked nor was denied: {:?}",
            run.events
        );
    }
    assert!(ran.is_empty(), "ran unasked under --approve none: {ran:#?}");
    assert_eq!(
        std::fs::read_to_string(ws.join("f.txt")).unwrap(),
        "b\na\n",
        "a workspace file changed"
    );
    let planted_files: Vec<_> = walk(&ws)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("pwned"))
        .collect();
    assert!(planted_files.is_empty(), "{planted_files:?}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}
