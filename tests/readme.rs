//! The README, run as a new user would: every command of its `sh` code blocks, in
//! order, against the real binary with a fresh temp CAPSTAN_HOME (so the offline
//! model), a temp HOME, and output piped. The test reads README.md itself, so the two
//! cannot drift apart: a command added to the README is run here.
//!
//! A command fails the test when it
//! - exits non-zero and its comment does not say `exits N` with that N;
//! - prints `WARN` (warnings about the user's action are plain lines; logs need -v);
//! - prints an ANSI escape sequence (the output is a pipe, not a terminal);
//! - prints the same line twice (one feed renderer, no echoes).
//!
//! How a command runs, from what it is:
//! - most run to their end, with `y` lines on stdin (approvals as the README says:
//!   "approved by you"; commands that must not ask pass `--approve` themselves);
//! - long-running servers get a bounded life: `serve` is started (on a free port
//!   through CAPSTAN_PORT), must answer `GET /v1/health`, and stops on Ctrl-C;
//!   `serve --stdio`, `mcp` (stdio) and `chat` get one request on stdin, must answer
//!   it, and must exit 0 when stdin closes;
//! - `alias NAME=VALUE` lines are applied by the test to later commands;
//! - `cargo run --release -p capstan -- ARGS` runs the binary cargo built for this
//!   test with ARGS (building from a clean clone is what `.ci/run` checks);
//! - paths under `/tmp/` move into a temp dir (parallel runs must not share them);
//! - [`NOT_RUN`] lists the few commands not run, each with why.
//!
//! Every failing command is reported, not just the first.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Commands of the README this test does not run, and why.
const NOT_RUN: &[(&str, &str)] = &[(
    "bash tests/run",
    "it runs the whole test suite, this test included",
)];

/// Longest a command may take (the first question compiles the plugins).
const COMMAND_LIMIT: Duration = Duration::from_secs(300);
/// Longest a server may take to answer once started.
const READY_LIMIT: Duration = Duration::from_secs(120);

/// One command line of the README.
#[derive(Debug, Clone)]
struct Line {
    command: String,
    /// From `# ... exits N ...`; 0 otherwise.
    expect_exit: i32,
}

/// The command lines of every ```sh block, continuation lines joined, comments split off.
fn readme_commands(readme: &str) -> Vec<Line> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for raw in readme.lines() {
        let trimmed = raw.trim();
        if trimmed.starts_with("```") {
            in_sh = !in_sh && matches!(trimmed, "```sh" | "```bash" | "```shell");
            continue;
        }
        if !in_sh {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            pending.push_str(head.trim_end());
            pending.push(' ');
            continue;
        }
        let full = std::mem::take(&mut pending) + trimmed;
        if full.is_empty() || full.starts_with('#') {
            continue;
        }
        let (command, comment) = split_comment(&full);
        out.push(Line {
            command: command.trim().to_string(),
            expect_exit: expected_exit(comment),
        });
    }
    out
}

/// `(command, comment)`: a `#` after whitespace and outside quotes starts a comment.
fn split_comment(line: &str) -> (&str, &str) {
    let (mut single, mut double, mut escaped) = (false, false, false);
    let mut prev_space = true;
    for (i, c) in line.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' && !single {
            escaped = true;
        } else if c == '\'' && !double {
            single = !single;
        } else if c == '"' && !single {
            double = !double;
        } else if c == '#' && !single && !double && prev_space {
            return (&line[..i], &line[i + 1..]);
        }
        prev_space = c.is_whitespace();
    }
    (line, "")
}

/// `exits N` in a comment.
fn expected_exit(comment: &str) -> i32 {
    comment
        .split("exits ")
        .nth(1)
        .and_then(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .unwrap_or(0)
}

/// How a command is run.
#[derive(Debug, PartialEq)]
enum Life {
    /// Runs to its end.
    Exits,
    /// An HTTP server: must answer `GET /v1/health`, then stops on Ctrl-C.
    Http,
    /// Reads stdin: gets `send`, must print `answer`, then exits when stdin closes.
    Stdin {
        send: &'static str,
        answer: &'static str,
    },
}

const MCP_INITIALIZE: &str = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"readme-test\",\"version\":\"0\"}}}\n";
const SERVER_INFO: &str = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server.info\"}\n";

fn life(words: &[&str]) -> Life {
    let has = |w: &str| words.contains(&w);
    if !words.first().is_some_and(|w| w.ends_with("capstan")) {
        return Life::Exits;
    }
    match words.get(1).copied() {
        Some("serve") if has("--stdio") => Life::Stdin {
            send: SERVER_INFO,
            answer: "\"protocol\"",
        },
        Some("serve") => Life::Http,
        Some("mcp") if !has("--listen") => Life::Stdin {
            send: MCP_INITIALIZE,
            answer: "\"serverInfo\"",
        },
        Some("chat") => Life::Stdin {
            send: "/help\n",
            answer: "/workspace",
        },
        _ => Life::Exits,
    }
}

/// A child's stdout and stderr, collected as they come.
struct Captured {
    child: Child,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl Captured {
    fn spawn(mut cmd: Command) -> Self {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so stopping it reaches whatever it started.
            .process_group(0);
        let mut child = cmd.spawn().expect("bash runs");
        let pump = |mut from: Box<dyn Read + Send>| {
            let buf = Arc::new(Mutex::new(Vec::new()));
            let into = buf.clone();
            std::thread::spawn(move || {
                let mut chunk = [0u8; 8192];
                while let Ok(n) = from.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    into.lock().unwrap().extend_from_slice(&chunk[..n]);
                }
            });
            buf
        };
        let stdout = pump(Box::new(child.stdout.take().unwrap()));
        let stderr = pump(Box::new(child.stderr.take().unwrap()));
        Self {
            child,
            stdout,
            stderr,
        }
    }

    fn text(&self) -> (String, String) {
        (
            String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned(),
            String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned(),
        )
    }

    fn send(&mut self, input: &str) {
        if let Some(stdin) = self.child.stdin.as_mut() {
            let _ = stdin.write_all(input.as_bytes());
        }
    }

    fn close_stdin(&mut self) {
        self.child.stdin.take();
    }

    /// Polls until `f` holds over (stdout, stderr) or `limit` passes.
    fn wait_for(&self, limit: Duration, f: impl Fn(&str, &str) -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            let (out, err) = self.text();
            if f(&out, &err) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// The exit status once the process ends, or `None` after `limit` (then it is killed).
    fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                // Let the pumps drain what the process printed last.
                std::thread::sleep(Duration::from_millis(100));
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.signal("KILL");
        let _ = self.child.wait();
        None
    }

    fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([
                format!("-{sig}"),
                "--".into(),
                format!("-{}", self.child.id()),
            ])
            .status();
    }
}

/// A `GET` on 127.0.0.1 with nothing but std: the status line.
/// The API token the README's `serve` runs with (through CAPSTAN_TOKEN).
const README_TOKEN: &str = "readme-test-token-0123456789abcdef";

fn http_status(addr: &str, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {README_TOKEN}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines().next().map(str::to_string)
}

/// The problems in what a command printed.
fn output_problems(stdout: &str, stderr: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, text) in [("stdout", stdout), ("stderr", stderr)] {
        if text.contains("WARN") {
            problems.push(format!("`WARN` on {name}"));
        }
        if text.contains('\u{1b}') {
            problems.push(format!("an ANSI escape sequence on piped {name}"));
        }
    }
    let mut seen = std::collections::HashSet::new();
    for line in stdout.lines().chain(stderr.lines()) {
        let line = line.trim();
        // Blank lines, separators (`---`, `===`) and the fields of pretty-printed
        // JSON data (two passages from one file) may repeat.
        if !line.chars().any(char::is_alphanumeric) || line.starts_with('"') {
            continue;
        }
        if !seen.insert(line) {
            problems.push(format!("printed twice: {line:?}"));
        }
    }
    problems
}

/// The tail of an output, for the failure report.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n      ")
}

struct Tour {
    /// The working directory: the repository's examples and the built binary at
    /// target/release/capstan, as after the README's build command.
    dir: tempfile::TempDir,
    home: tempfile::TempDir,
    user_home: tempfile::TempDir,
    scratch: tempfile::TempDir,
    extra_path: Vec<PathBuf>,
}

impl Tour {
    fn new(uses_claude: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        copy_dir(&repo.join("examples"), &dir.path().join("examples"));
        std::fs::create_dir_all(dir.path().join("target/release")).unwrap();
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_capstan"),
            dir.path().join("target/release/capstan"),
        )
        .unwrap();
        let mut extra_path = Vec::new();
        if uses_claude {
            extra_path.push(
                common::npm_bin("claude", "claude")
                    .parent()
                    .unwrap()
                    .to_path_buf(),
            );
        }
        Self {
            dir,
            home: tempfile::tempdir().unwrap(),
            user_home: tempfile::tempdir().unwrap(),
            scratch: tempfile::tempdir().unwrap(),
            extra_path,
        }
    }

    fn command(&self, script: &str) -> Command {
        let mut cmd = Command::new("bash");
        cmd.args(["-c", script]).current_dir(self.dir.path());
        for var in [
            "CAPSTAN_CONFIG_DIR",
            "CAPSTAN_DATA_DIR",
            "CAPSTAN_CACHE_DIR",
            "CAPSTAN_TOKEN",
            "NO_COLOR",
            "CLICOLOR",
            "CLICOLOR_FORCE",
            "RUST_LOG",
            "XDG_CONFIG_HOME",
            "XDG_DATA_HOME",
            "XDG_CACHE_HOME",
        ] {
            cmd.env_remove(var);
        }
        let mut path: Vec<PathBuf> = self.extra_path.clone();
        path.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        cmd.env("PATH", std::env::join_paths(path).unwrap())
            .env("CAPSTAN_HOME", self.home.path())
            .env("HOME", self.user_home.path())
            // A terminal that could show colours: only the pipe says not to.
            .env("TERM", "xterm-256color")
            // `serve` without --port: any free port, so parallel runs do not collide.
            .env("CAPSTAN_PORT", "0")
            // `serve` needs a token on every API route; a known one lets the
            // health check below authenticate as any API client would.
            .env("CAPSTAN_TOKEN", README_TOKEN)
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
        cmd
    }

    /// Runs one README command; `Err` says what went wrong.
    fn run(&self, command: &str, expect_exit: i32) -> Result<(), String> {
        let words: Vec<&str> = command.split_whitespace().collect();
        let life = life(&words);
        let script = if life == Life::Exits {
            command.to_string()
        } else {
            // The shell becomes the server: signals and exit status are its own.
            format!("exec {command}")
        };
        let mut p = Captured::spawn(self.command(&script));
        let mut problems = Vec::new();
        let status = match life {
            Life::Exits => {
                p.send(&"y\n".repeat(8));
                p.close_stdin();
                p.wait_exit(COMMAND_LIMIT)
            }
            Life::Http => {
                let addr = listen_addr(&p);
                match addr.as_deref().and_then(|a| http_status(a, "/v1/health")) {
                    Some(line) if line.contains(" 200 ") => {}
                    other => problems.push(format!(
                        "did not answer GET /v1/health (address {addr:?}, status line {other:?})"
                    )),
                }
                p.signal("INT");
                p.wait_exit(Duration::from_secs(30))
            }
            Life::Stdin { send, answer } => {
                p.send(send);
                if !p.wait_for(READY_LIMIT, |out, err| {
                    out.contains(answer) || err.contains(answer)
                }) {
                    problems.push(format!("did not answer {:?} with {answer}", send.trim()));
                }
                p.close_stdin();
                p.wait_exit(Duration::from_secs(30))
            }
        };
        let (stdout, stderr) = p.text();
        match status {
            None => problems.push("did not end in time (killed)".into()),
            Some(s) if s.code() == Some(expect_exit) => {}
            Some(s) => problems.push(format!(
                "{s}, the README expects {}",
                if expect_exit == 0 {
                    "success".to_string()
                } else {
                    format!("exit {expect_exit}")
                }
            )),
        }
        problems.extend(output_problems(&stdout, &stderr));
        if problems.is_empty() {
            return Ok(());
        }
        Err(format!(
            "{}\n    stdout:\n      {}\n    stderr:\n      {}",
            problems.join("\n    "),
            tail(&stdout),
            tail(&stderr)
        ))
    }
}

/// The address `serve` prints (`listening on http://ADDR`).
fn listen_addr(p: &Captured) -> Option<String> {
    let find = |out: &str| {
        out.lines().find_map(|l| {
            let rest = &l[l.find("http://")? + "http://".len()..];
            Some(rest.trim_end_matches('/').trim().to_string())
        })
    };
    p.wait_for(READY_LIMIT, |out, _| find(out).is_some());
    find(&p.text().0)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn every_readme_command_runs_clean() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let lines = readme_commands(&readme);
    assert!(
        lines.len() >= 10,
        "found only {} commands in README.md: did its code blocks change language?",
        lines.len()
    );
    for (skipped, why) in NOT_RUN {
        assert!(
            lines.iter().any(|l| l.command == *skipped),
            "`{skipped}` ({why}) is no longer in README.md: update NOT_RUN"
        );
    }
    let tour = Tour::new(lines.iter().any(|l| l.command.starts_with("claude ")));
    let scratch = format!("{}/", tour.scratch.path().display());
    let mut aliases: Vec<(String, String)> = Vec::new();
    let mut failures = Vec::new();
    let mut ran = 0;
    for line in &lines {
        if NOT_RUN.iter().any(|(c, _)| *c == line.command) {
            continue;
        }
        if let Some(def) = line.command.strip_prefix("alias ") {
            let (name, value) = def.split_once('=').expect("alias NAME=VALUE");
            aliases.push((name.to_string(), value.trim_matches('\'').to_string()));
            continue;
        }
        let mut command = line
            .command
            .replace(
                "cargo run --release -p capstan --",
                "./target/release/capstan",
            )
            .replace("/tmp/", &scratch);
        for (name, value) in &aliases {
            if let Some(rest) = command.strip_prefix(&format!("{name} ")) {
                command = format!("{value} {rest}");
            }
        }
        ran += 1;
        if let Err(why) = tour.run(&command, line.expect_exit) {
            failures.push(format!("`{}`:\n    {why}", line.command));
        }
    }
    assert!(ran >= 10, "ran only {ran} commands");
    assert!(
        failures.is_empty(),
        "{} of {ran} README commands failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn the_readme_parser_reads_comments_quotes_and_expected_exits() {
    let lines = readme_commands(
        "text\n```sh\n# a comment\ncapstan ask 'a # b' \"c # d\"   # exits 2 on purpose\nnext \\\n  --flag\n```\n```toml\n[model]\n```\n",
    );
    let got: Vec<(&str, i32)> = lines
        .iter()
        .map(|l| (l.command.as_str(), l.expect_exit))
        .collect();
    assert_eq!(
        got,
        [("capstan ask 'a # b' \"c # d\"", 2), ("next --flag", 0)]
    );
    assert_eq!(
        life(&["capstan", "serve", "--stdio"]),
        Life::Stdin {
            send: SERVER_INFO,
            answer: "\"protocol\""
        }
    );
    assert_eq!(life(&["capstan", "serve", "-w", "x"]), Life::Http);
    assert_eq!(life(&["capstan", "mcp", "--listen", "x"]), Life::Exits);
    assert_eq!(life(&["claude", "mcp", "list"]), Life::Exits);
    assert_eq!(
        output_problems("a line\n\n---\n---\n\"k\": 1,\n\"k\": 1,\na line\n", ""),
        ["printed twice: \"a line\""]
    );
}
