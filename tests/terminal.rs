//! What reaches a terminal, through the real binary under a real pty
//! (util-linux `script`): escape sequences planted in a workspace file, in a
//! command's output and in a model's answer arrive inert; `--json` keeps them
//! exact; piped output carries no ANSI; a reader that goes away ends Capstan
//! quietly; a workspace's capstan.toml cannot widen what the user granted;
//! every approval decision, also from `capstan invoke`, is in the audit table.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Output, Stdio};

use capstan_models::scripted::{Reply, ScriptedServer};
use common::Home;
use serde_json::{Value, json};

/// Sequences a terminal acts on: a clipboard write (OSC 52), clear screen
/// (CSI 2J), a window title (OSC 0), an 8-bit CSI (C1) and a bidi override.
const PLANTED: &str = "rotate \x1b]52;c;cm0gLXJmIH4=\x07keys\x1b[2J now \x1b]0;pwned\x07 then \u{9b}31m and \u{202e}gnp.exe";

/// Bytes a terminal would act on: ESC, BEL, the UTF-8 forms of C1 CSI and of
/// the bidi override.
fn live_controls(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut found = Vec::new();
    for (what, needle) in [
        ("ESC", "\x1b"),
        ("BEL", "\x07"),
        ("C1 CSI", "\u{9b}"),
        ("RLO", "\u{202e}"),
    ] {
        if text.contains(needle) {
            found.push(what.to_string());
        }
    }
    found
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `script` must exist: these tests are about a real terminal.
fn script_bin() -> &'static str {
    let ok = Command::new("script")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "util-linux `script` is needed to run Capstan under a pty: apt-get install util-linux (bsdutils)"
    );
    "script"
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Run `cmd` (its program, args and env) on a fresh pty; returns the exit
/// status and everything the terminal received (stdout and stderr both).
fn in_pty(cmd: &Command) -> (Option<i32>, Vec<u8>) {
    let mut line = shell_quote(&cmd.get_program().to_string_lossy());
    for a in cmd.get_args() {
        line.push(' ');
        line.push_str(&shell_quote(&a.to_string_lossy()));
    }
    let mut pty = Command::new(script_bin());
    pty.args(["-q", "-e", "-c", &line, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => pty.env(k, v),
            None => pty.env_remove(k),
        };
    }
    let out = pty.output().unwrap();
    let mut all = out.stdout;
    all.extend_from_slice(&out.stderr);
    (out.status.code(), all)
}

fn planted_workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("keys.md"),
        format!("# Signing keys\n\nTo rotate the signing keys: {PLANTED}.\n"),
    )
    .unwrap();
    std::fs::write(
        ws.path().join("notes.md"),
        "# Notes\n\nQuotes \"like this\" & <id> tags stay text when you rotate keys.\n",
    )
    .unwrap();
    ws
}

#[test]
fn search_on_a_terminal_shows_planted_escapes_as_inert_text() {
    let home = Home::new("");
    let ws = planted_workspace();
    let mut cmd = home.capstan();
    cmd.args(["search", "rotate keys", "-w"]).arg(ws.path());
    let (code, screen) = in_pty(&cmd);
    let shown = text(&screen);
    assert_eq!(code, Some(0), "{shown}");
    assert!(
        live_controls(&screen).is_empty(),
        "{:?}: {shown}",
        live_controls(&screen)
    );
    // Visible, not acted on, not silently dropped.
    assert!(shown.contains("␛]52;c;cm0gLXJmIH4=␇"), "{shown}");
    assert!(
        shown.contains("<U+009B>31m") && shown.contains("<U+202E>gnp.exe"),
        "{shown}"
    );
    // Snippets are plain text: no tags, no entities, no bold.
    assert!(shown.contains("\"like this\" & <id>"), "{shown}");
    assert!(
        !shown.contains("<b>") && !shown.contains("&quot;"),
        "{shown}"
    );
}

#[test]
fn search_json_keeps_planted_escapes_exact_and_escaped() {
    let home = Home::new("");
    let ws = planted_workspace();
    let out = home
        .capstan()
        .args(["search", "rotate keys", "--json", "-w"])
        .arg(ws.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        live_controls(&out.stdout).is_empty(),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stdout).contains("\\u001b]52;c;"),
        "{}",
        text(&out.stdout)
    );
    let data: Value = serde_json::from_slice(&out.stdout).unwrap();
    let snippets: Vec<&str> = data["passages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["snippet"].as_str())
        .collect();
    assert!(
        snippets
            .iter()
            .any(|s| s.contains("\x1b[2J") && s.contains("\u{9b}31m") && s.contains("\u{202e}gnp")),
        "the decoded JSON holds the planted bytes exactly: {snippets:?}"
    );
}

#[test]
fn piped_output_has_no_ansi_even_under_no_color_or_verbose() {
    let home = Home::new("");
    let ws = planted_workspace();
    for extra in [&[][..], &["-v"][..]] {
        let out = home
            .capstan()
            .args(["search", "rotate keys", "-w"])
            .arg(ws.path())
            .args(extra)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(!out.stdout.contains(&0x1b), "{}", text(&out.stdout));
        assert!(!out.stderr.contains(&0x1b), "{}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains("rotate"),
            "{}",
            text(&out.stdout)
        );
    }
}

#[test]
fn ask_passages_and_command_output_reach_the_terminal_inert() {
    let home = Home::new("");
    let ws = planted_workspace();
    // The offline model answers from the passages: the planted file is quoted.
    let mut cmd = home.capstan();
    cmd.args(["ask", "--approve", "none", "-w"])
        .arg(ws.path())
        .arg("How do I rotate the signing keys?");
    let (code, screen) = in_pty(&cmd);
    let shown = text(&screen);
    assert_eq!(code, Some(0), "{shown}");
    assert!(live_controls(&screen).is_empty(), "{shown}");
    assert!(shown.contains("␛[2J"), "{shown}");

    // A read-only command prints the planted file: its output tail is shown.
    let mut cmd = home.capstan();
    cmd.args(["ask", "--approve", "none", "-w"])
        .arg(ws.path())
        .arg("run `cat keys.md`");
    let (code, screen) = in_pty(&cmd);
    let shown = text(&screen);
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.contains("$ cat keys.md"), "{shown}");
    assert!(live_controls(&screen).is_empty(), "{shown}");
    assert!(
        shown.contains("│ To rotate the signing keys: rotate ␛]52;c;"),
        "{shown}"
    );

    // --json: the same run's events carry the output exactly.
    let out = home
        .capstan()
        .args(["ask", "--json", "--approve", "none", "-w"])
        .arg(ws.path())
        .arg("run `cat keys.md`")
        .output()
        .unwrap();
    assert!(
        live_controls(&out.stdout).is_empty(),
        "{}",
        text(&out.stdout)
    );
    let step = text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "terminal.step")
        .expect("a terminal.step event");
    assert!(
        step["output_tail"].as_str().unwrap().contains(PLANTED),
        "{step}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_answer_reaches_the_terminal_inert_and_json_keeps_it() {
    let server = ScriptedServer::start().await.unwrap();
    let answer = [
        "Here: ",
        "\x1b]52;c;ZWNobyBoaQ==\x07",
        "done\x1b[2J \u{202e}txt.exe",
    ];
    for _ in 0..2 {
        server.push(
            Reply::text([json!({"action": "answer", "reason": "chat"}).to_string()])
                .with_usage(10, 2),
        );
        server.push(Reply::text(answer).with_usage(10, 5));
    }
    let config = format!(
        "[model]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"scripted-model\"\napi_key_env = \"CAPSTAN_TEST_KEY\"\n",
        server.openai_base_url()
    );
    let home = Home::new(&config);
    let mut cmd = home.capstan();
    cmd.args(["ask", "--approve", "none", "say hi"])
        .env("CAPSTAN_TEST_KEY", "sk-test");
    let (code, screen) = tokio::task::spawn_blocking(move || in_pty(&cmd))
        .await
        .unwrap();
    let shown = text(&screen);
    assert_eq!(code, Some(0), "{shown}");
    assert!(live_controls(&screen).is_empty(), "{shown}");
    assert!(
        shown.contains("Here: ␛]52;c;ZWNobyBoaQ==␇done␛[2J <U+202E>txt.exe"),
        "{shown}"
    );

    let mut cmd = home.capstan();
    cmd.args(["ask", "--json", "--approve", "none", "say hi"])
        .env("CAPSTAN_TEST_KEY", "sk-test");
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        live_controls(&out.stdout).is_empty(),
        "{}",
        text(&out.stdout)
    );
    let completed = text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "response.completed")
        .expect("a response.completed event");
    assert_eq!(completed["text"], answer.concat());
}

/// Lines of the feed that appear more than once.
fn repeated_lines(feed: &str) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    feed.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !seen.insert(l.to_string()))
        .map(String::from)
        .collect()
}

fn ask_with_stdin(home: &Home, args: &[&str], ws: &std::path::Path, stdin: &str) -> Output {
    use std::io::Write;
    let mut child = home
        .capstan()
        .args(["ask", "-w"])
        .arg(ws)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn the_feed_says_each_thing_once_in_plain_words() {
    let home = Home::new("");
    let ws = common::server::handbook();
    // An approved command: approval, output and outcome each shown once.
    let out = ask_with_stdin(
        &home,
        &["--approve", "ask", "run `make check`"],
        ws.path(),
        "y\n",
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(repeated_lines(&err), Vec::<String>::new(), "{err}");
    assert_eq!(err.matches("all checks passed").count(), 1, "{err}");
    assert_eq!(err.matches("approved").count(), 1, "{err}");

    // A question: passages counted once, sources once (after the answer).
    let out = ask_with_stdin(&home, &["How do I rotate the signing keys?"], ws.path(), "");
    let (err, answer) = (text(&out.stderr), text(&out.stdout));
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.matches("passages").count(), 1, "{err}");
    assert_eq!(
        (answer.clone() + &err).matches("Sources:").count(),
        1,
        "{answer}{err}"
    );
    assert!(!err.contains("· sources"), "{err}");

    // No terminal and no --approve: a denial says why, not "by flag"; a
    // failed run says its reason once, in words.
    let out = ask_with_stdin(&home, &["run `make check`"], ws.path(), "");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("approval: denied (nobody to ask: stdin is not a terminal; pass --approve ask or --approve all)"),
        "{err}"
    );
    assert!(!err.contains("by flag"), "{err}");
    assert!(
        !err.contains("failed (failed)") && !err.contains("run failed: failed"),
        "{err}"
    );
    assert_eq!(repeated_lines(&err), Vec::<String>::new(), "{err}");

    // `invoke` speaks the same feed: an exit status in words, no Debug text.
    let out = home
        .capstan()
        .args(["invoke", "terminal_exec", "--approve", "all", "--workspace"])
        .arg(ws.path())
        .args(["--input", r#"{"command":"make check"}"#])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("$ make check   (exit 0,"), "{err}");
    assert!(!err.contains("Some("), "{err}");
    assert_eq!(repeated_lines(&err), Vec::<String>::new(), "{err}");
    assert!(!err.contains("WARN"), "{err}");

    // A run an earlier process left running is housekeeping, not news for
    // an unrelated command: it is marked, silently. (`index`, not `search`:
    // a search of a current index answers without opening the store.)
    let left = {
        let store = store(&home);
        let session = store.create_session("left behind", None).unwrap();
        store.start_run(&session.id, "m").unwrap().id
    };
    let out = home
        .capstan()
        .args(["index", "-w"])
        .arg(ws.path())
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        !err.contains("interrupted") && !err.contains("WARN"),
        "{err}"
    );
    let run = store(&home).get_run(&left).unwrap().unwrap();
    assert_eq!(run.status, capstan_store::RunStatus::Interrupted);
}

/// Run `capstan ARGS` with its stdout's reader already gone.
fn with_stdout_closed(cmd: &mut Command) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

#[test]
fn a_reader_that_goes_away_ends_capstan_quietly() {
    let home = Home::new("");
    let ws = planted_workspace();
    // The reader is gone before the first write: exactly the SIGPIPE path.
    for args in [
        &["search", "rotate keys", "-w"][..],
        &[
            "ask",
            "--approve",
            "none",
            "How do I rotate the keys?",
            "-w",
        ][..],
        &[
            "invoke",
            "local_kb_retrieval",
            "--operation",
            "search",
            "--input",
            r#"{"query":"keys"}"#,
            "-w",
        ][..],
    ] {
        let out = with_stdout_closed(home.capstan().args(args).arg(ws.path()));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // As a user types it: `… 2>&1 | head -1` on every kind of command.
    let bin = env!("CARGO_BIN_EXE_capstan");
    let ws_arg = ws.path().display().to_string();
    for args in [
        vec!["search", "rotate keys", "-n", "50", "-w", &ws_arg],
        vec![
            "ask",
            "--approve",
            "none",
            "How do I rotate the keys?",
            "-w",
            &ws_arg,
        ],
        vec!["plugins", "list"],
        vec!["workspace", "list"],
        vec!["--help"],
    ] {
        let quoted: Vec<String> = args.iter().map(|a| shell_quote(a)).collect();
        let line = format!(
            "{} {} 2>&1 | head -1; exit ${{PIPESTATUS[0]}}",
            shell_quote(bin),
            quoted.join(" ")
        );
        let out = with_home(&home, Command::new("bash").args(["-c", &line]));
        let all = text(&out.stdout) + &text(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(0) | Some(141)),
            "{args:?}: {:?} {all}",
            out.status
        );
        assert!(!all.contains("panicked"), "{args:?}: {all}");
        assert_eq!(text(&out.stdout).lines().count(), 1, "{args:?}: {all}");
    }
}

fn store(home: &Home) -> capstan_store::Store {
    capstan_store::Store::open(home.path().join("data/capstan.db")).unwrap()
}

#[test]
fn a_workspace_capstan_toml_cannot_replace_or_add_plugins() {
    let home = Home::new("");
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("keep.txt"), "keep me").unwrap();
    // What a sandboxed command could write: terminal-exec replaced with every
    // host service and a day-long timeout, and a new plugin.
    let widening = format!(
        "[[plugin]]\nname = \"terminal-exec\"\ncomponent = \"builtin:terminal-exec\"\nkinds = [\"terminal_exec\"]\n\
         [plugin.permissions]\nworkspace = \"read-write\"\nhost = [\"exec\", \"model\", \"approval\", \"index\"]\n\
         [plugin.limits]\ntimeout_ms = 86400000\nmemory_mb = 1024\n\n{}",
        common::plugin_entry("hello", "hello", &["echo"], "")
    );
    std::fs::write(ws.path().join("capstan.toml"), widening).unwrap();

    let out = home
        .capstan()
        .args(["plugins", "list", "--json", "--workspace"])
        .arg(ws.path())
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let plugins = list["plugins"].as_array().unwrap();
    let names: Vec<&str> = plugins
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["kb-retrieval", "terminal-exec", "docx"]);
    let exec = &plugins[1];
    assert_eq!(exec["origin"], "bundled manifest");
    assert_eq!(exec["limits"]["timeout_ms"], 900000);
    assert_eq!(
        exec["permissions"]["host"],
        json!(["events", "cancel", "exec"])
    );
    assert_eq!(exec["permissions"]["workspace"], "none");

    // A task says so in one plain line naming the file, the entries and
    // where to move them; nothing of the workspace's entries is used.
    let out = home
        .capstan()
        .args(["invoke", "echo", "--approve", "none", "--workspace"])
        .arg(ws.path())
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let warning: Vec<&str> = err.lines().filter(|l| l.starts_with("warning: ")).collect();
    assert_eq!(warning.len(), 1, "{err}");
    let user_toml = home.path().join("config/capstan.toml");
    for part in [
        ws.path().join("capstan.toml").display().to_string(),
        "[[plugin]] `terminal-exec`, `hello` ignored".to_string(),
        format!(
            "move the entry to your own capstan.toml ({})",
            user_toml.display()
        ),
    ] {
        assert!(warning[0].contains(&part), "{part}: {err}");
    }
    assert!(
        err.contains("unsupported-capability") || err.contains("no capability serves kind `echo`"),
        "{err}"
    );
    assert!(!err.contains("WARN"), "{err}");

    // The same entry in the user's own file is obeyed (the advice works).
    std::fs::rename(ws.path().join("capstan.toml"), &user_toml).unwrap();
    let out = home
        .capstan()
        .args(["invoke", "echo", "--input", r#"{"ok":1}"#])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn every_decision_on_a_command_is_in_the_approvals_table() {
    let home = Home::new("[policy]\ndeny = [\"rm -rf\"]\n");
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("keep.txt"), "keep me").unwrap();
    let invoke = |approve: &str, commands: Value| {
        home.capstan()
            .args([
                "invoke",
                "terminal_exec",
                "--approve",
                approve,
                "--workspace",
            ])
            .arg(ws.path())
            .args([
                "--input",
                &json!({"commands": commands, "continue_on_error": true}).to_string(),
            ])
            .output()
            .unwrap()
    };
    // Allowed by the profile, approved by the flag, denied by the flag.
    let granted = invoke("all", json!(["cat keep.txt", "touch made.txt"]));
    assert!(granted.status.success(), "{}", text(&granted.stderr));
    let refused = invoke("none", json!(["rm keep.txt"]));
    let refused_policy = invoke("all", json!(["rm -rf sub"]));
    for out in [&granted, &refused, &refused_policy] {
        let err = text(&out.stderr);
        assert!(
            !err.contains("cannot record") && !err.contains("not be recorded"),
            "{err}"
        );
    }
    assert!(ws.path().join("made.txt").exists());
    assert!(ws.path().join("keep.txt").exists());

    let approvals = store(&home).list_approvals(None, 100).unwrap();
    let rows: Vec<(String, String, String)> = approvals
        .iter()
        .map(|a| {
            (
                a.command.clone(),
                a.decision.as_str().to_string(),
                a.decided_by.as_str().to_string(),
            )
        })
        .collect();
    for expected in [
        ("cat keep.txt", "approved", "policy"),
        ("touch made.txt", "approved", "flag"),
        ("rm keep.txt", "denied", "flag"),
        ("rm -rf sub", "denied", "policy"),
    ] {
        let expected = (
            expected.0.to_string(),
            expected.1.to_string(),
            expected.2.to_string(),
        );
        assert!(
            rows.contains(&expected),
            "{expected:?} missing from {rows:?}"
        );
    }
    // Each one belongs to a recorded run of `capstan invoke`.
    let store = store(&home);
    for a in &approvals {
        let run = store
            .get_run(&a.run_id)
            .unwrap()
            .expect("the approval's run");
        assert_eq!(run.model, "invoke");
        assert_ne!(run.status, capstan_store::RunStatus::Running);
    }
}

/// Run any program (a shell pipeline) with this home's environment.
fn with_home(home: &Home, cmd: &mut Command) -> Output {
    cmd.env("CAPSTAN_HOME", home.path())
        .env_remove("CAPSTAN_CONFIG_DIR")
        .env_remove("CAPSTAN_DATA_DIR")
        .env_remove("CAPSTAN_CACHE_DIR")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}
