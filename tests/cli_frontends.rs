//! The terminal frontends through the real binary: `capstan ask` (live feed,
//! interactive approvals, exit codes, Ctrl-C), `capstan chat` (a REPL driven
//! through a stdin pipe) and `capstan workspace`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};

use common::Home;
use common::server::handbook;

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
    let mut child = home
        .capstan()
        .args(["ask", "--approve", "all", "-w"])
        .arg(ws.path())
        .arg("run `sleep 60`")
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
        if line.contains("run `sleep 60`: running") {
            break;
        }
    }
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
