//! The terminal frontends through the real binary: `capstan ask` (live feed,
//! interactive approvals, exit codes, Ctrl-C), `capstan chat` (a REPL driven
//! through a stdin pipe) and `capstan workspace`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};

use common::server::handbook;
use common::{Home, procs};

fn with_stdin(mut cmd: Command, input: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn store(home: &Home) -> capstan_store::Store {
    capstan_store::Store::open(home.path().join("data/capstan.db")).unwrap()
}

#[test]
fn ask_renders_the_plan_asks_for_approval_and_exits_by_outcome() {
    let home = Home::new("");
    let ws = handbook();
    let ask = |answer: &str| {
        let mut cmd = home.capstan();
        cmd.args(["ask", "--approve", "ask", "-w"])
            .arg(ws.path())
            .arg("run `make check`");
        with_stdin(cmd, answer)
    };
    let yes = ask("y\n");
    let err = text(&yes.stderr);
    assert_eq!(yes.status.code(), Some(0), "{err}");
    assert!(
        err.contains("? approval needed (write): make check"),
        "{err}"
    );
    assert!(
        err.contains("· plan:") && err.contains("[t1] run `make check` (pending)"),
        "{err}"
    );
    assert!(err.contains("approval: approved (by user)"), "{err}");
    assert!(err.contains("$ make check   (exit 0"), "{err}");
    assert!(err.contains("✓ [t1] run `make check` (completed)"), "{err}");
    assert!(
        err.contains("· completed:") && err.contains("tokens"),
        "{err}"
    );

    let no = ask("maybe\nn\n");
    let err = text(&no.stderr);
    assert_eq!(no.status.code(), Some(1), "{err}");
    assert!(err.contains("please answer y, n, a or b"), "{err}");
    assert!(err.contains("approval: denied (by user)"), "{err}");
    assert!(err.contains("· failed: "), "{err}");

    let abort = ask("b\n");
    let err = text(&abort.stderr);
    assert_eq!(abort.status.code(), Some(130), "{err}");
    assert!(err.contains("approval: aborted"), "{err}");
    assert!(err.contains("· cancelled:"), "{err}");

    // A question: the streamed answer on stdout, then its sources.
    let mut cmd = home.capstan();
    cmd.args(["ask", "-w"])
        .arg(ws.path())
        .arg("How do I rotate the signing keys?");
    let q = with_stdin(cmd, "");
    assert_eq!(q.status.code(), Some(0));
    assert!(text(&q.stdout).contains("minisign"), "{}", text(&q.stdout));
    assert!(
        text(&q.stdout).contains("\nSources:\n[1] ops/key-rotation.md"),
        "{}",
        text(&q.stdout)
    );
}

#[test]
fn ctrl_c_cancels_an_ask_cleanly() {
    let home = Home::new("");
    let ws = handbook();
    // Ten minutes: a sleep seen gone after the cancel was killed, not finished.
    let marker = "612.5";
    let mut child = home
        .capstan()
        .args(["ask", "--approve", "all", "-w"])
        .arg(ws.path())
        .arg(format!("run `sleep {marker}`"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "ended early: {seen}");
        seen.push_str(&line);
        if line.contains(&format!("run `sleep {marker}`: running")) {
            break;
        }
    }
    // The feed says running; Ctrl-C once the sandboxed sleep itself is there.
    let bound = std::time::Duration::from_secs(60);
    procs::wait_until("the sandboxed sleep to start", bound, || {
        !procs::with_argv(&["sleep", marker]).is_empty()
    });
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{seen}{rest}");
    assert!(rest.contains("cancelling"), "{rest}");
    assert!(rest.contains("· cancelled:"), "{rest}");
    let runs = store(&home).list_runs(None, 10).unwrap();
    assert_eq!(runs[0].status, capstan_store::RunStatus::Cancelled);
    // The sleep, its shell and any launcher carrying it died with the cancel.
    procs::wait_until("the cancelled command's processes to die", bound, || {
        procs::mentioning(marker).is_empty()
    });
}

/// `capstan chat` driven line by line, as a person would: each line is sent
/// once the feed shows what it answers.
struct Repl {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stderr: std::sync::mpsc::Receiver<String>,
    seen: String,
}

impl Repl {
    fn start(home: &Home, ws: &std::path::Path) -> Self {
        let mut child = home
            .capstan()
            .args(["chat", "-w"])
            .arg(ws)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let err = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).split(b'\n') {
                let Ok(line) = line else { break };
                if tx
                    .send(String::from_utf8_lossy(&line).into_owned())
                    .is_err()
                {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            stderr: rx,
            seen: String::new(),
        }
    }

    fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Reads the feed until a line contains `needle`.
    fn wait_for(&mut self, needle: &str) {
        loop {
            let line = self
                .stderr
                .recv_timeout(std::time::Duration::from_secs(120))
                .unwrap_or_else(|_| panic!("no `{needle}` in: {}", self.seen));
            self.seen.push_str(&line);
            self.seen.push('\n');
            if line.contains(needle) {
                return;
            }
        }
    }
}

#[test]
fn chat_is_a_repl_with_history_commands_approvals_and_cancel() {
    let home = Home::new("");
    let ws = handbook();
    let mut repl = Repl::start(&home, ws.path());
    repl.wait_for("(policy: cautious; registered at the next run)");
    repl.send("/help");
    repl.wait_for("/workspace [DIR]");
    repl.send("How do I rotate the signing keys?");
    repl.wait_for("· completed:");
    repl.send("/sessions");
    repl.wait_for("* ses_");
    repl.send("/workspace");
    repl.wait_for("(policy: cautious)");
    repl.send("run `make check`");
    repl.wait_for("? approval needed (write): make check");
    repl.send("y");
    repl.wait_for("approval: approved (by user)");
    repl.wait_for("· completed:");
    repl.send("/nonsense");
    repl.wait_for("unknown command `/nonsense`");
    repl.send("run `sleep 60`");
    repl.wait_for("run `sleep 60`: running");
    repl.send("/cancel");
    repl.wait_for("· cancelled:");
    repl.send("/quit");
    let out = repl.child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", repl.seen);
    assert!(
        text(&out.stdout).contains("minisign"),
        "{}",
        text(&out.stdout)
    );

    // One session with every turn, its workspace remembered.
    let store = store(&home);
    let sessions = store.list_sessions(10).unwrap();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let turns = store.recent_turns(&sessions[0].id, usize::MAX).unwrap();
    let users: Vec<&str> = turns
        .iter()
        .filter(|t| t.role == capstan_store::Role::User)
        .map(|t| t.content.as_str())
        .collect();
    assert_eq!(
        users,
        [
            "How do I rotate the signing keys?",
            "run `make check`",
            "run `sleep 60`"
        ]
    );
    let runs = store.list_runs(Some(&sessions[0].id), 10).unwrap();
    assert_eq!(runs[0].status, capstan_store::RunStatus::Cancelled);
    assert_eq!(runs[1].status, capstan_store::RunStatus::Completed);
    assert!(sessions[0].workspace_id.is_some());
}

#[test]
fn chat_takes_piped_input_with_answers_typed_ahead() {
    let home = Home::new("");
    let ws = handbook();
    let mut cmd = home.capstan();
    cmd.args(["chat", "-w"]).arg(ws.path());
    let out = with_stdin(cmd, "run `make check`\ny\n");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("approval: approved (by user)"), "{err}");
    assert!(err.contains("all checks passed"), "{err}");
}

#[test]
fn the_configs_profile_holds_for_every_workspace_without_its_own() {
    // The user locks everything in capstan.toml; a folder first used by `ask`
    // is registered on the way and must stay under that profile, then and later.
    let home = Home::new("[policy]\nprofile = \"locked\"\n");
    let ws = handbook();
    let dir = ws.path().to_str().unwrap();
    let ask = |msg: &str| {
        let out = home
            .capstan()
            .args(["ask", "--approve", "all", "-w", dir, msg])
            .output()
            .unwrap();
        (out.status.code(), text(&out.stderr))
    };
    for round in ["first", "registered"] {
        let (code, err) = ask("run `touch locked.txt`");
        assert_ne!(code, Some(0), "{round}: {err}");
        assert!(err.contains("locked"), "{round}: {err}");
        assert!(!ws.path().join("locked.txt").exists(), "{round}: {err}");
    }
    let list = home.capstan().args(["workspace", "list"]).output().unwrap();
    let list = text(&list.stdout);
    assert!(
        list.contains("policy: locked") && list.contains("(config)"),
        "{list}"
    );

    // A profile chosen for the folder wins over the config's, and `config`
    // hands the folder back to the config.
    let add = |profile: &str| {
        let out = home
            .capstan()
            .args(["workspace", "add", dir, "--profile", profile])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    assert!(add("trusted").contains("(workspace)"));
    let (code, err) = ask("run `touch chosen.txt`");
    assert_eq!(code, Some(0), "{err}");
    assert!(ws.path().join("chosen.txt").exists(), "{err}");
    assert!(add("config").contains("policy: locked"));
    let (code, err) = ask("run `touch again.txt`");
    assert_ne!(code, Some(0), "{err}");
    assert!(!ws.path().join("again.txt").exists(), "{err}");
}

#[test]
fn workspace_add_list_use_remove() {
    let home = Home::new("");
    let ws = handbook();
    let run = |args: &[&str]| {
        let out = home.capstan().args(args).output().unwrap();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let dir = ws.path().to_str().unwrap();
    let (code, out, err) = run(&[
        "workspace",
        "add",
        dir,
        "--profile",
        "trusted",
        "--name",
        "book",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("book") && out.contains("policy: trusted"),
        "{out}"
    );
    let (_, list, _) = run(&["workspace", "list"]);
    assert!(
        list.contains("policy: trusted") && list.contains("0 session(s)"),
        "{list}"
    );

    // A session to bind: a question without a workspace.
    let (code, _, err) = run(&["ask", "hello there"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = run(&["workspace", "use", dir]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("now uses") && out.contains("policy: trusted"),
        "{out}"
    );
    let (_, list, _) = run(&["workspace", "list"]);
    assert!(list.contains("1 session(s)"), "{list}");
    // The trusted profile runs a write command without asking.
    let session = store(&home).list_sessions(1).unwrap()[0].id.clone();
    let (code, _, err) = run(&[
        "ask",
        "--approve",
        "none",
        "--session",
        &session,
        "run `make check`",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("approval needed"), "{err}");

    let (code, out, _) = run(&["workspace", "remove", dir]);
    assert_eq!(code, Some(0));
    assert!(out.contains("folder is untouched"), "{out}");
    assert!(ws.path().join("Makefile").exists());
    let (code, _, err) = run(&["workspace", "remove", dir]);
    assert_eq!(code, Some(2));
    assert!(err.contains("capstan workspace list"), "{err}");
    let (code, _, err) = run(&["workspace", "add", "/no/such/dir"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("/no/such/dir"), "{err}");
}

#[test]
fn approve_for_this_session_covers_that_command_in_that_session_only() {
    let home = Home::new("");
    let ws = handbook();
    let mut repl = Repl::start(&home, ws.path());
    repl.send("run `make check`");
    repl.wait_for("? approval needed (write): make check");
    repl.send("a");
    repl.wait_for("approval: approved-for-session (by user)");
    repl.wait_for("· completed:");
    // The same command again: the grant answers, nobody is asked.
    let before = repl.seen.len();
    repl.send("run `make check`");
    repl.wait_for("approval: approved (by user)");
    repl.wait_for("· completed:");
    let second = repl.seen[before..].to_string();
    assert!(!second.contains("? approval needed"), "{second}");
    // Another command is not covered by that grant.
    repl.send("run `touch granted.txt`");
    repl.wait_for("? approval needed (write): touch granted.txt");
    repl.send("n");
    repl.wait_for("approval: denied (by user)");
    repl.send("/quit");
    let out = repl.child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", repl.seen);
    assert!(!ws.path().join("granted.txt").exists());

    // A new session starts without the grant.
    let mut repl = Repl::start(&home, ws.path());
    repl.send("run `make check`");
    repl.wait_for("? approval needed (write): make check");
    repl.send("n");
    repl.wait_for("approval: denied (by user)");
    repl.send("/quit");
    let out = repl.child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", repl.seen);

    // The audit trail has each decision, oldest first.
    let decisions: Vec<(String, String, String)> = store(&home)
        .list_approvals(None, 10)
        .unwrap()
        .into_iter()
        .map(|a| {
            (
                a.command,
                a.decision.as_str().to_string(),
                a.decided_by.as_str().to_string(),
            )
        })
        .collect();
    let s = |c: &str, d: &str, b: &str| (c.to_string(), d.to_string(), b.to_string());
    assert_eq!(
        decisions,
        [
            s("make check", "approved-for-session", "user"),
            s("make check", "approved", "user"),
            s("touch granted.txt", "denied", "user"),
            s("make check", "denied", "user"),
        ]
    );
}

#[test]
fn an_approval_nobody_answers_expires_as_denied() {
    // The expiry is the behaviour under test; nobody answers, so no load makes the
    // command run, only the expiry come later.
    let home = Home::new("[approval]\ntimeout_secs = 1\n");
    let ws = handbook();
    let mut repl = Repl::start(&home, ws.path());
    repl.send("run `touch expired.txt`");
    repl.wait_for("? approval needed (write): touch expired.txt");
    repl.wait_for("approval: expired (by policy)");
    repl.wait_for("nobody answered the approval in time");
    repl.wait_for("· failed: `touch expired.txt` (write): nobody answered");
    repl.send("/quit");
    let out = repl.child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", repl.seen);
    assert!(!ws.path().join("expired.txt").exists());
    let approvals = store(&home).list_approvals(None, 10).unwrap();
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(approvals[0].decision, capstan_store::Decision::Expired);
    assert_eq!(approvals[0].decided_by, capstan_store::DecidedBy::Policy);
}

/// `capstan` with no Capstan variables and HOME/XDG pointing into `user_home`, so the
/// platform defaults would land there if an override were ignored.
fn bare_capstan(user_home: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_capstan"));
    for var in [
        "CAPSTAN_HOME",
        "CAPSTAN_CONFIG_DIR",
        "CAPSTAN_DATA_DIR",
        "CAPSTAN_CACHE_DIR",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_CACHE_HOME",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("HOME", user_home);
    cmd
}

fn files_under(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| {
                if e.path().is_dir() {
                    files_under(&e.path())
                } else {
                    1
                }
            })
            .sum()
    })
}

#[test]
fn home_and_dir_overrides_put_config_data_and_cache_where_they_say() {
    let user_home = tempfile::tempdir().unwrap();
    let ws = handbook();
    // A config only these tests write: `plugins check` names its plugin entry, so a
    // report naming it proves which capstan.toml was read.
    let config_text = "[[plugin]]\nname = \"override-marker\"\ncomponent = \"/nonexistent/override-marker.wasm\"\nsha256 = \"00\"\nkinds = [\"override-marker\"]\n";
    let check_reads_config = |cmd: &mut Command| {
        let out = cmd.args(["plugins", "check"]).output().unwrap();
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(err.contains("override-marker"), "{err}");
    };
    let ask_writes_state = |cmd: &mut Command| {
        let out = cmd
            .args(["ask", "-w"])
            .arg(ws.path())
            .arg("How do I rotate the signing keys?")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    };

    // --home: all three under one directory.
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("config")).unwrap();
    std::fs::write(home.path().join("config/capstan.toml"), config_text).unwrap();
    check_reads_config(
        bare_capstan(user_home.path())
            .arg("--home")
            .arg(home.path()),
    );
    ask_writes_state(
        bare_capstan(user_home.path())
            .arg("--home")
            .arg(home.path()),
    );
    assert!(home.path().join("data/capstan.db").exists());
    assert!(
        files_under(&home.path().join("cache")) > 0,
        "nothing cached"
    );

    // The three variables, each its own place.
    let (config, data, cache) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    std::fs::write(config.path().join("capstan.toml"), config_text).unwrap();
    let with_vars = || {
        let mut cmd = bare_capstan(user_home.path());
        cmd.env("CAPSTAN_CONFIG_DIR", config.path())
            .env("CAPSTAN_DATA_DIR", data.path())
            .env("CAPSTAN_CACHE_DIR", cache.path());
        cmd
    };
    check_reads_config(&mut with_vars());
    ask_writes_state(&mut with_vars());
    assert!(data.path().join("capstan.db").exists());
    assert!(files_under(cache.path()) > 0, "nothing cached");
    assert_eq!(files_under(config.path()), 1, "only the config file");

    // Nothing landed in the platform's default places.
    assert_eq!(files_under(user_home.path()), 0);
}

#[test]
fn capstans_own_state_inside_the_workspace_is_refused() {
    // A plugin that could rewrite Capstan's database, manifests or compiled components
    // would own the host: a workspace holding them is refused before any plugin runs.
    let ws = handbook();
    let home = Home::new("");
    let out = home
        .capstan()
        .env("CAPSTAN_DATA_DIR", ws.path().join(".capstan-data"))
        .args(["invoke", "local_kb_retrieval", "-w"])
        .arg(ws.path())
        .args(["-o", "search", "-i", r#"{"query":"keys"}"#])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("overlaps Capstan's own directory") && err.contains(".capstan-data"),
        "{err}"
    );
}

#[test]
fn sandbox_check_reports_what_this_kernel_offers() {
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["sandbox", "check"])
        .output()
        .unwrap();
    let report = text(&out.stdout);
    // Asked independently of Capstan's probes: the kernel's Landlock ABI version
    // (landlock_create_ruleset, syscall 444 on every architecture, with
    // LANDLOCK_CREATE_RULESET_VERSION) and its list of seccomp actions.
    let abi = Command::new("python3")
        .args([
            "-c",
            "import ctypes; print(ctypes.CDLL(None).syscall(444, None, 0, 1))",
        ])
        .output()
        .expect("python3 is needed (bash tests/run installs it)");
    let abi = text(&abi.stdout).trim().to_string();
    let actions =
        std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail").unwrap_or_default();
    assert!(
        abi.parse::<i32>().is_ok_and(|v| v > 0) && actions.contains("errno"),
        "this test needs a kernel with Landlock and seccomp (Landlock ABI: {abi:?}, seccomp actions: {actions:?})"
    );
    assert_eq!(out.status.code(), Some(0), "{report}");
    let row = |name: &str| {
        report
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} row in {report}"))
            .to_string()
    };
    assert!(
        row("Landlock").contains(&format!("yes (ABI {abi})")),
        "{report}"
    );
    assert!(row("seccomp").contains("yes"), "{report}");
    assert!(
        report.contains("sandbox = \"required\": available"),
        "{report}"
    );
}
