//! The embedded offline model answers (issue 15), through the real binary on
//! the example handbook: the fixed subset of the eval (bench/qa/eval.toml,
//! `test = true`) gets the fact, cites its file and stays short; a question the
//! handbook cannot answer gets a plain "the workspace does not say" with only
//! whole sentences of the handbook quoted; a follow-up in `capstan chat` under
//! a real pty is read with the previous question and the feed shows how.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::Home;
use serde::Deserialize;
use serde_json::Value;

/// An answer longer than this is a pasted passage, not an answer.
const MAX_ANSWER_CHARS: usize = 300;

#[derive(Deserialize)]
struct Eval {
    case: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    set: String,
    ask: String,
    #[serde(default)]
    before: Option<String>,
    #[serde(default)]
    fact: Vec<String>,
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    absent: bool,
    #[serde(default)]
    test: bool,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn subset() -> Vec<Case> {
    let eval: Eval =
        toml::from_str(&std::fs::read_to_string(repo().join("bench/qa/eval.toml")).unwrap())
            .unwrap();
    let cases: Vec<Case> = eval.case.into_iter().filter(|c| c.test).collect();
    assert!(
        cases.iter().all(|c| c.set == "handbook"),
        "the test subset runs on examples/handbook only"
    );
    cases
}

fn handbook() -> tempfile::TempDir {
    common::server::handbook()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// One `capstan ask --json`: (session id, answer text, cited paths, exit code).
fn ask_json(
    home: &Home,
    ws: &Path,
    question: &str,
    session: Option<&str>,
) -> (String, String, Vec<String>, Option<i32>) {
    let mut cmd = home.capstan();
    cmd.args(["ask", "--json", "-w"]).arg(ws);
    if let Some(s) = session {
        cmd.args(["--session", s]);
    }
    let out = cmd.arg(question).stdin(Stdio::null()).output().unwrap();
    let mut session_id = String::new();
    let mut answer = None;
    for line in text(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let event = if v.get("event").is_some() {
            &v["event"]
        } else {
            &v
        };
        match event["type"].as_str() {
            Some("run.started") => {
                session_id = event["session_id"].as_str().unwrap_or("").to_string()
            }
            Some("response.completed") => {
                let cited = event["citations"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["path"].as_str().unwrap().to_string())
                    .collect();
                answer = Some((event["text"].as_str().unwrap().to_string(), cited));
            }
            _ => {}
        }
    }
    let (answer, cited) = answer.unwrap_or_else(|| {
        panic!(
            "no response.completed for {question:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        )
    });
    (session_id, answer, cited, out.status.code())
}

#[test]
fn the_eval_subset_gets_the_fact_cites_its_file_and_stays_short() {
    let home = Home::new("");
    let ws = handbook();
    let cases: Vec<Case> = subset().into_iter().filter(|c| !c.absent).collect();
    assert!(
        cases.len() >= 6,
        "the subset has {} answerable cases",
        cases.len()
    );
    for case in cases {
        let session = case
            .before
            .as_deref()
            .map(|b| ask_json(&home, ws.path(), b, None).0);
        let (_, answer, cited, code) = ask_json(&home, ws.path(), &case.ask, session.as_deref());
        assert_eq!(code, Some(0), "{}: {answer}", case.ask);
        let lower = answer.to_lowercase();
        assert!(
            case.fact.iter().any(|f| lower.contains(&f.to_lowercase())),
            "{}: no {:?} in {answer}",
            case.ask,
            case.fact
        );
        let file = case.file.as_deref().unwrap();
        assert!(
            cited.iter().all(|c| c == file) && !cited.is_empty(),
            "{}: cites {cited:?}, not only {file}; answer: {answer}",
            case.ask
        );
        assert!(
            answer.chars().count() <= MAX_ANSWER_CHARS,
            "{}: {} chars: {answer}",
            case.ask,
            answer.chars().count()
        );
        assert!(
            !answer.contains("From "),
            "no pasted-passage header: {answer}"
        );
        // Whole sentences: every line ends at a citation marker or a quote's
        // end, never where the source file happened to wrap.
        for line in answer.lines().filter(|l| !l.trim().is_empty()) {
            assert!(
                line.ends_with(']') || line.ends_with('”'),
                "{}: a line broken mid-sentence: {line:?} in {answer}",
                case.ask
            );
        }
    }
}

/// The handbook's text with every run of whitespace made one space, so a
/// quoted sentence that was wrapped over lines is found.
fn handbook_text() -> String {
    let mut all = String::new();
    for f in [
        "README.md",
        "guides/releases.md",
        "ops/key-rotation.md",
        "ops/oncall.rst",
    ] {
        all.push_str(&std::fs::read_to_string(repo().join("examples/handbook").join(f)).unwrap());
        all.push('\n');
    }
    all.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn a_question_the_workspace_cannot_answer_gets_a_plain_no_and_whole_quotes_only() {
    let home = Home::new("");
    let ws = handbook();
    let case = subset()
        .into_iter()
        .find(|c| c.absent)
        .expect("the subset has a case the handbook cannot answer");
    let out = home
        .capstan()
        .args(["ask", "-w"])
        .arg(ws.path())
        .arg(&case.ask)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (answer, feed) = (text(&out.stdout), text(&out.stderr));
    // Three searches found nothing that answers: the run ends with retry-limit.
    assert_eq!(out.status.code(), Some(1), "{answer}{feed}");
    let first = answer.lines().next().unwrap_or("");
    assert!(
        first.starts_with("The workspace does not say: nothing in it answers")
            && first.contains(&case.ask)
            && first.contains("I searched it for"),
        "{answer}"
    );
    // Every closest passage is a whole sentence of the handbook, not a fragment.
    let source = handbook_text();
    let quoted: Vec<&str> = answer
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .map(|l| l.rsplit_once(" [").map(|(q, _)| q).unwrap_or(l))
        .collect();
    for q in &quoted {
        assert!(source.contains(q), "not a whole handbook sentence: {q:?}");
        assert!(q.ends_with(['.', '!', '?']), "not a whole sentence: {q:?}");
    }
    // The feed shows broadened queries in the words of the question, no stems.
    let asked: Vec<String> = case
        .ask
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric() && c != '-')
        .map(String::from)
        .collect();
    let searches: Vec<&str> = feed
        .lines()
        .filter_map(|l| l.strip_prefix("· searching the knowledge base for \""))
        .collect();
    assert_eq!(searches.len(), 3, "{feed}");
    for s in &searches[1..] {
        for word in s.trim_end_matches('"').split_whitespace() {
            assert!(
                word == "OR" || asked.contains(&word.to_string()),
                "`{word}` in the feed is not a word of the question: {feed}"
            );
        }
    }
}

/// `script` (util-linux) must exist: this test is about a real terminal.
fn script_bin() -> &'static str {
    let ok = Command::new("script")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "util-linux `script` is needed to run Capstan under a pty: apt-get install bsdutils"
    );
    "script"
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// `capstan chat` on a real pty: lines typed one at a time, each once the
/// terminal shows the previous run ended.
struct PtyChat {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    output: mpsc::Receiver<String>,
    seen: String,
}

impl PtyChat {
    fn start(home: &Home, ws: &Path) -> Self {
        let line = format!(
            "{} chat -w {}",
            shell_quote(env!("CARGO_BIN_EXE_capstan")),
            shell_quote(&ws.display().to_string())
        );
        let mut child = Command::new(script_bin())
            .args(["-q", "-e", "-c", &line, "/dev/null"])
            .env("CAPSTAN_HOME", home.path())
            .env_remove("CAPSTAN_CONFIG_DIR")
            .env_remove("CAPSTAN_DATA_DIR")
            .env_remove("CAPSTAN_CACHE_DIR")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 || tx.send(text(&buf[..n])).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            output: rx,
            seen: String::new(),
        }
    }

    fn send(&mut self, line: &str) {
        write!(self.stdin, "{line}\r").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Reads the terminal until `needle` has appeared `times` times in all.
    fn wait_for(&mut self, needle: &str, times: usize) {
        while self.seen.matches(needle).count() < times {
            let chunk = self
                .output
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|_| panic!("no `{needle}` ×{times} in: {}", self.seen));
            self.seen.push_str(&chunk);
        }
    }
}

#[test]
fn a_follow_up_in_chat_on_a_terminal_is_read_with_the_previous_question() {
    let home = Home::new("");
    let ws = handbook();
    let mut chat = PtyChat::start(&home, ws.path());
    chat.wait_for("/quit to leave", 1);
    chat.send("How often are signing keys rotated?");
    chat.wait_for("· completed:", 1);
    chat.send("And how long does the old one stay valid?");
    chat.wait_for("· completed:", 2);
    chat.send("/quit");
    let status = chat.child.wait().unwrap();
    let seen = chat.seen.replace('\r', "");
    assert_eq!(status.code(), Some(0), "{seen}");
    let (_, second) = seen
        .split_once("And how long does the old one stay valid?")
        .unwrap_or_else(|| panic!("the follow-up was not echoed: {seen}"));
    assert!(
        second.contains(
            "· follow-up \"And how long does the old one stay valid?\" read with the previous question"
        ),
        "{second}"
    );
    // The rewritten query stands alone: it carries the earlier subject.
    assert!(
        second.contains(
            "· searching the knowledge base for \"How long does the old one stay valid? (often signing keys rotated)\""
        ),
        "{second}"
    );
    assert!(
        second.contains("The old key stays valid for verification for 30 days after rotation. [1]"),
        "{second}"
    );
    assert!(second.contains("[1] ops/key-rotation.md"), "{second}");
    assert!(!second.contains("retry-limit"), "{second}");
}
