//! A new user's first hour, through the real binary: a fast and visible first
//! question, several Capstan processes on one workspace, examples that are safe to
//! paste, config that can be found and checked, and files recognised by content.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A child mode of this test binary talks to its parent on stdout.
#![allow(clippy::disallowed_macros)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Home;
use common::server::{Server, handbook};
use serde_json::{Value, json};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn run(mut cmd: Command) -> Output {
    cmd.stdin(Stdio::null()).output().unwrap()
}

/// Fails the test on anything that looks like a leaked lock or a crash.
fn assert_clean(what: &str, out: &str) {
    for bad in ["LockBusy", "Lockfile", "IndexWriter", "panicked", "error:"] {
        assert!(!out.contains(bad), "{what} printed `{bad}`:\n{out}");
    }
}

/// `script` gives a command a pseudo-terminal (util-linux; the chat and progress
/// tests need a real terminal, not a pipe).
fn script() -> Command {
    let found = Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "`script` (util-linux) is missing: apt-get install bsdutils (tests/run installs it)"
    );
    Command::new("script")
}

/// A shell command line for `script -c`, every word single-quoted.
fn shell_line(home: &Home, args: &[&str]) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let mut line = format!(
        "env CAPSTAN_HOME={} {}",
        quote(&home.path().display().to_string()),
        quote(env!("CARGO_BIN_EXE_capstan"))
    );
    for a in args {
        line.push(' ');
        line.push_str(&quote(a));
    }
    line
}

// ---------------------------------------------------------------------------
// The first question: a visible "preparing" line, and only what the run needs.

fn compiled(home: &Home) -> Vec<String> {
    let dir = home.path().join("cache/components");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".cwasm"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn the_bundled_plugins_need_no_compiling_and_a_plugin_file_says_it_is_preparing() {
    let ws = handbook();
    let ask = |home: &Home, message: &str| {
        let mut cmd = home.capstan();
        cmd.args(["ask", "--approve", "all", "-w"])
            .arg(ws.path())
            .arg(message);
        run(cmd)
    };

    // The bundled plugins were compiled when the binary was built: a fresh
    // home answers and runs commands without compiling; what each run used is
    // written to the cache, only that.
    let home = Home::new("");
    let first = ask(&home, "How do I rotate the signing keys?");
    let err = text(&first.stderr);
    assert_eq!(first.status.code(), Some(0), "{err}");
    assert!(!err.contains("preparing capabilities"), "{err}");
    assert!(text(&first.stdout).contains("rotate"), "no answer");
    assert_eq!(compiled(&home).len(), 1, "{:?}", compiled(&home));
    let act = ask(&home, "run `ls ops`");
    let err = text(&act.stderr);
    assert_eq!(act.status.code(), Some(0), "{err}");
    assert!(!err.contains("preparing capabilities"), "{err}");
    assert_eq!(compiled(&home).len(), 2, "{:?}", compiled(&home));

    // A plugin from a file (here the same retrieval component, replacing the
    // bundled entry) is compiled on first use with a visible line, and only it.
    let entry = common::plugin_entry(
        "kb-retrieval",
        "kb_retrieval",
        &["local_kb_retrieval"],
        "[plugin.permissions]\nworkspace = \"read\"\nhost = [\"index\", \"events\", \"cancel\"]\n\
         [plugin.limits]\nmemory_mb = 256\ntimeout_ms = 600000\n",
    );
    let home = Home::new(&entry);
    let first = ask(&home, "How do I rotate the signing keys?");
    let err = text(&first.stderr);
    assert_eq!(first.status.code(), Some(0), "{err}");
    assert!(
        err.contains("preparing capabilities (first run): compiling kb-retrieval (1/1)"),
        "{err}"
    );
    assert!(err.contains("kb-retrieval ready in"), "{err}");
    assert!(
        !err.contains("terminal-exec") && !err.contains("docx"),
        "{err}"
    );
    assert!(text(&first.stdout).contains("rotate"), "no answer");
    assert_eq!(compiled(&home).len(), 1, "{:?}", compiled(&home));

    // Cached now: no preparing line.
    let again = ask(&home, "How do I rotate the signing keys?");
    let err = text(&again.stderr);
    assert_eq!(again.status.code(), Some(0), "{err}");
    assert!(!err.contains("preparing capabilities"), "{err}");
    assert_eq!(compiled(&home).len(), 1);
}

// ---------------------------------------------------------------------------
// Three processes on one workspace.

/// `capstan chat` under a pseudo-terminal, driven line by line.
struct Chat {
    child: Child,
    output: std::sync::mpsc::Receiver<String>,
    seen: String,
}

impl Chat {
    fn start(home: &Home, ws: &Path) -> Chat {
        let line = shell_line(
            home,
            &["chat", "--approve", "all", "-w", &ws.display().to_string()],
        );
        let mut child = script()
            .args(["-qfec", &line, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 || tx.send(text(&buf[..n])).is_err() {
                    break;
                }
            }
        });
        Chat {
            child,
            output: rx,
            seen: String::new(),
        }
    }

    fn say(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(format!("{line}\r").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Waits until the transcript after `from` contains `want` (60 s at most).
    fn wait_for(&mut self, from: usize, want: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.seen[from..].contains(want) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                Ok(chunk) => self.seen.push_str(&chunk),
                Err(_) => panic!("chat never printed {want:?}:\n{}", self.seen),
            }
        }
        self.seen[from..].to_string()
    }
}

impl Drop for Chat {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A run through `capstan serve`: the whole SSE stream as text.
async fn serve_run(server: &Server, ws: &Path, message: &str) -> String {
    let resp = server
        .client()
        .post(server.url("/v1/runs"))
        .json(&json!({"message": message, "workspace": ws}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_chat_and_a_loop_of_ask_and_search_share_one_workspace() {
    let home = Home::new("");
    let ws = handbook();
    // Compile once up front so the three processes do not all compile at once.
    let warm = run({
        let mut c = home.capstan();
        c.args(["index", "-w"]).arg(ws.path());
        c
    });
    assert!(warm.status.success(), "{}", text(&warm.stderr));

    let server = Server::start(&home, &["-w", &ws.path().display().to_string()]);
    let mut chat = Chat::start(&home, ws.path());

    // Each round changes the workspace, so every process's refresh has something to
    // write, and they contend for the index's writer.
    let rounds = 4;
    for round in 0..rounds {
        let note =
            format!("# Round {round}\n\nThe rotation drill number {round} uses the spare HSM.\n");
        std::fs::write(ws.path().join(format!("ops/round-{round}.md")), note).unwrap();

        let from = chat.seen.len();
        chat.say(&format!("How is rotation drill number {round} run?"));
        let served = serve_run(&server, ws.path(), "How do I rotate the signing keys?");
        let cli = tokio::task::spawn_blocking({
            let (home_dir, ws_dir) = (home.path().to_path_buf(), ws.path().to_path_buf());
            move || {
                let capstan = || {
                    let mut c = Command::new(env!("CARGO_BIN_EXE_capstan"));
                    c.env("CAPSTAN_HOME", &home_dir).stdin(Stdio::null());
                    c
                };
                let ask = capstan()
                    .args(["ask", "--approve", "none", "-w"])
                    .arg(&ws_dir)
                    .arg("Who owns the signing keys?")
                    .output()
                    .unwrap();
                let search = capstan()
                    .args(["search", "-w"])
                    .arg(&ws_dir)
                    .arg("spare HSM drill")
                    .output()
                    .unwrap();
                (ask, search)
            }
        });
        let (served, cli) = tokio::join!(served, cli);
        let (ask, search) = cli.unwrap();

        assert!(
            served.contains("run.completed"),
            "serve, round {round}:\n{served}"
        );
        assert!(
            !served.contains("LockBusy"),
            "serve, round {round}:\n{served}"
        );
        for (what, out) in [("ask", &ask), ("search", &search)] {
            let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
            assert_eq!(out.status.code(), Some(0), "{what}, round {round}:\n{all}");
            assert_clean(what, &all);
        }
        assert!(
            text(&search.stdout).contains("ops/round-"),
            "search round {round}: {}",
            text(&search.stdout)
        );
        let said = chat.wait_for(from, "· completed");
        assert_clean("chat", &said);
    }
    // The index holds every round's file: nothing was lost to a busy writer for good.
    let search = run({
        let mut c = home.capstan();
        c.args(["search", "--json", "-n", "20", "-w"])
            .arg(ws.path())
            .arg("rotation drill spare HSM");
        c
    });
    let data: Value = serde_json::from_slice(&search.stdout).unwrap();
    for round in 0..rounds {
        let path = format!("ops/round-{round}.md");
        assert!(
            data["passages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["path"] == path.as_str()),
            "{path} missing: {data}"
        );
    }
}

const HOLD_WRITER: &str = "CAPSTAN_TEST_HOLD_WRITER";

#[test]
fn a_refresh_that_finds_another_process_writing_searches_the_last_commit() {
    // As a child process (see `writer_holder`): hold the index's writer until stdin closes.
    if let Ok(dir) = std::env::var(HOLD_WRITER) {
        let ix = capstan_index::WorkspaceIndex::open(Path::new(&dir), Default::default()).unwrap();
        // A pending change takes the writer (and its lock) until commit.
        ix.remove_file("nothing/at/all.md").unwrap();
        println!("holding");
        let _ = std::io::stdin().read(&mut [0u8; 1]);
        return;
    }
    let home = Home::new("");
    let ws = handbook();
    let index = run({
        let mut c = home.capstan();
        c.args(["index", "-w"]).arg(ws.path());
        c
    });
    assert!(index.status.success(), "{}", text(&index.stderr));
    // Another process holds the index's writer lock (as a long refresh does).
    let dir = std::fs::read_dir(home.path().join("data/indexes"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let mut holder = writer_holder(&dir);
    std::fs::write(
        ws.path().join("ops/new.md"),
        "# New\n\nA brand new runbook.\n",
    )
    .unwrap();
    let out = run({
        let mut c = home.capstan();
        c.args(["search", "-w"]).arg(ws.path()).arg("signing keys");
        c
    });
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_clean("search", &err);
    assert_eq!(
        err.matches("searching the last committed index").count(),
        1,
        "{err}"
    );
    assert!(err.contains("another Capstan process is updating"), "{err}");
    assert!(text(&out.stdout).contains("key-rotation.md"));
    drop(holder.stdin.take());
    holder.wait().unwrap();
    // Free again: the next search indexes the new file.
    let out = run({
        let mut c = home.capstan();
        c.args(["search", "-w"])
            .arg(ws.path())
            .arg("brand new runbook");
        c
    });
    assert!(
        text(&out.stdout).contains("ops/new.md"),
        "{}",
        text(&out.stdout)
    );
    assert!(!text(&out.stderr).contains("last committed"));
}

/// Holds the writer lock of the index in `dir` the way another process's refresh
/// does: this test binary, re-run as a child that opens a writer and waits.
fn writer_holder(dir: &Path) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_refresh_that_finds_another_process_writing_searches_the_last_commit",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOLD_WRITER, dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    while !line.contains("holding") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the holder exited");
    }
    child
}

// ---------------------------------------------------------------------------
// Examples that are safe to paste.

/// The backtick spans that a shell would run: those outside single quotes.
fn unquoted_backticks(line: &str) -> bool {
    let mut single = false;
    for c in line.chars() {
        match c {
            '\'' => single = !single,
            '`' if !single => return true,
            _ => {}
        }
    }
    false
}

fn help_pages(path: &mut Vec<String>, pages: &mut Vec<(String, String)>) {
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(path.iter())
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "capstan {path:?} --help failed");
    let help = text(&out.stdout);
    let subcommands: Vec<String> = help
        .split("\nCommands:\n")
        .nth(1)
        .map(|rest| {
            rest.lines()
                .take_while(|l| l.starts_with("  "))
                // A wrapped description continues further in.
                .filter(|l| !l.starts_with("   "))
                .filter_map(|l| l.split_whitespace().next())
                .filter(|c| *c != "help")
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    pages.push((path.join(" "), help));
    for sub in subcommands {
        path.push(sub);
        help_pages(path, pages);
        path.pop();
    }
}

#[test]
fn every_example_in_help_and_the_readme_single_quotes_its_backticks() {
    let mut pages = Vec::new();
    help_pages(&mut Vec::new(), &mut pages);
    assert!(pages.len() > 20, "found only {} help pages", pages.len());
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let mut in_code = false;
    let mut readme_commands = String::new();
    for line in readme.lines() {
        if line.starts_with("```") {
            in_code = line.trim() == "```sh" || line.trim() == "```bash";
            continue;
        }
        if in_code && !line.trim_start().starts_with('#') {
            readme_commands.push_str(line);
            readme_commands.push('\n');
        }
    }
    pages.push(("README.md".into(), readme_commands));
    let mut commands = 0;
    for (page, help) in &pages {
        for line in help.lines() {
            let l = line.trim_start();
            if !(l.starts_with("capstan ") || l.starts_with("cargo ") || l.starts_with("claude ")) {
                continue;
            }
            commands += 1;
            // A `#` comment after the command is prose.
            let command = l.split("  #").next().unwrap_or(l);
            assert!(
                !unquoted_backticks(command),
                "`{page}` has an example whose backticks the shell would run: {l}"
            );
        }
    }
    assert!(commands > 15, "found only {commands} example commands");
    // The check itself.
    assert!(unquoted_backticks(r#"capstan ask "run `cargo test`""#));
    assert!(!unquoted_backticks("capstan ask 'run `cargo test`'"));
}

// ---------------------------------------------------------------------------
// Config you can find and check.

#[test]
fn help_and_config_path_say_where_config_lives() {
    let home = Home::new("");
    let file = home.path().join("config/capstan.toml");
    let help = run({
        let mut c = home.capstan();
        c.arg("--help");
        c
    });
    assert!(
        text(&help.stdout).contains(&format!("Config file: {}", file.display())),
        "{}",
        text(&help.stdout)
    );
    let path = run({
        let mut c = home.capstan();
        c.args(["config", "path", "--json"]);
        c
    });
    let v: Value = serde_json::from_slice(&path.stdout).unwrap();
    assert_eq!(v["config_file"], file.display().to_string());
    assert_eq!(v["config_file_exists"], true);
    assert_eq!(
        v["data_dir"],
        home.path().join("data").display().to_string()
    );
}

#[test]
fn init_writes_a_commented_config_that_checks_and_never_overwrites() {
    let home = Home::new("");
    let file = home.path().join("config/capstan.toml");
    std::fs::remove_file(&file).unwrap();
    let init = || {
        run({
            let mut c = home.capstan();
            c.arg("init");
            c
        })
    };
    let first = init();
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(written.contains("# [model]") && written.contains("# [[mcp_server]]"));
    // Uncommenting a section gives a valid config: the template teaches real keys.
    let uncommented: String = written
        .lines()
        .filter_map(|l| l.strip_prefix("# "))
        .filter(|l| {
            [
                "[run]",
                "budget_usd",
                "max_retrievals",
                "[index]",
                "analyzer",
            ]
            .iter()
            .any(|k| l.starts_with(k))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&file, &uncommented).unwrap();
    let check = run({
        let mut c = home.capstan();
        c.args(["config", "check"]);
        c
    });
    assert_eq!(
        check.status.code(),
        Some(0),
        "{uncommented}\n{}",
        text(&check.stderr)
    );
    let show = run({
        let mut c = home.capstan();
        c.args(["config", "show", "--json"]);
        c
    });
    let shown: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(shown["run"]["budget_usd"], 0.5, "{shown}");

    let again = init();
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again.stderr).contains("already exists"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), uncommented);
}

#[test]
fn a_typo_in_capstan_toml_is_an_error_with_the_line_and_the_nearest_key() {
    let home = Home::new("[run]\nbudget_usd = 1.0\n\n[modle]\nkind = \"offline\"\n");
    let file = home.path().join("config/capstan.toml");
    let check = run({
        let mut c = home.capstan();
        c.args(["config", "check"]);
        c
    });
    let err = text(&check.stderr);
    assert_eq!(check.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{}:4: unknown key `[modle]`", file.display())),
        "{err}"
    );
    assert!(err.contains("fix: did you mean `[model]`?"), "{err}");
    let json = run({
        let mut c = home.capstan();
        c.args(["config", "check", "--json"]);
        c
    });
    let v: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["problems"][0]["line"], 4);

    // Every command that reads the file stops on it.
    let ws = handbook();
    let ask = run({
        let mut c = home.capstan();
        c.args(["ask", "-w"]).arg(ws.path()).arg("keys?");
        c
    });
    assert_eq!(ask.status.code(), Some(2));
    assert!(text(&ask.stderr).contains("did you mean `[model]`?"));
}

#[test]
fn a_broken_workspace_capstan_toml_stops_runs_there_and_is_not_indexed() {
    let home = Home::new("");
    let ws = handbook();
    let file = ws.path().canonicalize().unwrap().join("capstan.toml");
    std::fs::write(&file, "[[plugin]]\nname = \"x\"\ncomponent = \"x.wasm\"\nkinds = [\"x\"]\n\n[policy]\nprofile = \"trusted\"\n").unwrap();
    for args in [
        vec!["ask", "How do I rotate the signing keys?"],
        vec!["search", "rotate"],
        vec!["index"],
    ] {
        let out = run({
            let mut c = home.capstan();
            c.args(&args[..1]).arg("-w").arg(ws.path()).args(&args[1..]);
            c
        });
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!("{}:6:", file.display())) && err.contains("[policy]"),
            "{args:?}: {err}"
        );
        assert!(err.contains("fix: move it to your own"), "{err}");
        assert!(text(&out.stdout).is_empty(), "{args:?} answered anyway");
    }
    assert!(
        !home.path().join("data/indexes").exists()
            || std::fs::read_dir(home.path().join("data/indexes"))
                .unwrap()
                .next()
                .is_none(),
        "the workspace was indexed"
    );
    let check = run({
        let mut c = home.capstan();
        c.args(["config", "check", "-w"]).arg(ws.path());
        c
    });
    assert_eq!(check.status.code(), Some(1));
}

#[test]
fn doctor_checks_everything_and_names_each_fix() {
    let home = Home::new("");
    let doctor = |home: &Home| {
        run({
            let mut c = home.capstan();
            c.args(["doctor", "--json"]);
            c
        })
    };
    let out = doctor(&home);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let areas: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["area"].as_str().unwrap())
        .collect();
    for area in ["toolchain", "sandbox", "config", "model", "plugins", "mcp"] {
        assert!(areas.contains(&area), "no {area} in {v}");
    }
    assert_eq!(out.status.code(), Some(0), "{v}");
    let plugins = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["area"] == "plugins")
        .unwrap();
    assert_eq!(
        plugins["message"],
        "3 loaded: kb-retrieval, terminal-exec, docx"
    );

    // A model nobody answers for, and a key variable that is not set.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let home = Home::new(&format!(
        "[model]\nkind = \"openai\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\n"
    ));
    let out = doctor(&home);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let model = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["area"] == "model")
        .unwrap();
    assert_eq!(model["status"], "fail", "{model}");
    assert!(
        model["message"]
            .as_str()
            .unwrap()
            .contains("cannot connect")
    );
    assert!(model["fix"].as_str().unwrap().contains("base_url"));
    let home = Home::new(
        "[model]\nkind = \"anthropic\"\nmodel = \"m\"\napi_key_env = \"CAPSTAN_TEST_NO_SUCH_KEY\"\n",
    );
    let out = doctor(&home);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let model = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["area"] == "model")
        .unwrap();
    assert!(
        model["fix"]
            .as_str()
            .unwrap()
            .contains("export CAPSTAN_TEST_NO_SUCH_KEY"),
        "{model}"
    );
    // Text output: one line per check, the fix under it.
    let text_out = run({
        let mut c = home.capstan();
        c.arg("doctor");
        c
    });
    let t = text(&text_out.stdout);
    assert!(t.contains("FAIL model") && t.contains("fix: export"), "{t}");
}

#[test]
fn completions_print_a_script_for_each_shell() {
    let home = Home::new("");
    for (shell, marker) in [
        ("bash", "_capstan()"),
        ("zsh", "#compdef capstan"),
        ("fish", "complete -c capstan"),
    ] {
        let out = run({
            let mut c = home.capstan();
            c.args(["completions", shell]);
            c
        });
        assert!(out.status.success());
        let script = text(&out.stdout);
        assert!(
            script.contains(marker),
            "{shell}: {}",
            &script[..script.len().min(300)]
        );
        assert!(script.contains("doctor"), "{shell} misses subcommands");
    }
    let bad = run({
        let mut c = home.capstan();
        c.args(["completions", "tcsh"]);
        c
    });
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn listings_have_json_and_plugins_list_shows_mcp_servers_with_their_tools() {
    // A real MCP server: another `capstan mcp`, with its own home.
    let inner = Home::new("");
    let inner_ws = tempfile::tempdir().unwrap();
    let home = Home::new(&format!(
        "[[mcp_server]]\nname = \"inner\"\ncommand = {:?}\nargs = [\"mcp\", \"--workspace\", {:?}]\nenv = {{ CAPSTAN_HOME = {:?} }}\nrisk = \"read_only\"\n\
         # capstan mcp runs its own sandbox, which cannot nest in another\nsandbox = false\n",
        env!("CARGO_BIN_EXE_capstan"),
        inner_ws.path().display().to_string(),
        inner.path().display().to_string(),
    ));
    let list = run({
        let mut c = home.capstan();
        c.args(["plugins", "list", "--json"]);
        c
    });
    assert!(list.status.success(), "{}", text(&list.stderr));
    let v: Value = serde_json::from_slice(&list.stdout).unwrap();
    let server = &v["mcp_servers"][0];
    assert_eq!(server["name"], "inner", "{v}");
    assert_eq!(server["status"], "ok", "{v}");
    let kinds: Vec<&str> = server["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"mcp:inner/terminal_exec.run"), "{kinds:?}");
    let plain = run({
        let mut c = home.capstan();
        c.args(["plugins", "list"]);
        c
    });
    let out = text(&plain.stdout);
    assert!(
        out.contains("mcp server inner [ok]")
            && out.contains("mcp:inner/local_kb_retrieval.search"),
        "{out}"
    );

    let ws = tempfile::tempdir().unwrap();
    let add = run({
        let mut c = home.capstan();
        c.args(["workspace", "add", "--profile", "trusted"])
            .arg(ws.path());
        c
    });
    assert!(add.status.success());
    let list = run({
        let mut c = home.capstan();
        c.args(["workspace", "list", "--json"]);
        c
    });
    let v: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(v["workspaces"][0]["profile"], "trusted");
    assert_eq!(
        v["workspaces"][0]["root"],
        ws.path().canonicalize().unwrap().display().to_string()
    );
    let sandbox = run({
        let mut c = home.capstan();
        c.args(["sandbox", "check", "--json"]);
        c
    });
    let v: Value = serde_json::from_slice(&sandbox.stdout).unwrap();
    assert!(v["sandbox_available"].is_boolean(), "{v}");
}

// ---------------------------------------------------------------------------
// Files recognised by content; skips counted by reason; index progress.

#[test]
fn files_without_an_extension_are_indexed_by_content_and_skips_are_counted_by_reason() {
    let home = Home::new("");
    let ws = tempfile::tempdir().unwrap();
    let w = |name: &str, bytes: &[u8]| {
        let path = ws.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    };
    w("doc/copyright", b"Format: machine-readable\n\nFiles: *\nCopyright: 2024 Zebra Authors\nLicense: permissive zebra terms\n");
    w("doc/GPL-2", b"GNU GENERAL PUBLIC LICENSE\nVersion 2, June 1991\n\nThe licenses for most software are designed to take away your freedom to share and change it.\n");
    w("doc/Apache-2.0", b"Apache License\nVersion 2.0, January 2004\n\nTERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION\n");
    w("bin/tool", b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00binary");
    w("img/logo.png", b"\x89PNG\r\n\x1a\nnot really");
    w(".env", b"TOKEN=do-not-index-me\n");
    w("notes.md", b"# Notes\n\nPlain notes.\n");
    let out = run({
        let mut c = home.capstan();
        c.args(["index", "-w"]).arg(ws.path());
        c
    });
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("4 parsed") && stdout.contains("3 skipped (2 binary, 1 private)"),
        "{stdout}"
    );
    for (query, path) in [
        ("zebra authors", "doc/copyright"),
        ("freedom to share", "doc/GPL-2"),
        ("reproduction distribution", "doc/Apache-2.0"),
    ] {
        let s = run({
            let mut c = home.capstan();
            c.args(["search", "--json", "-w"]).arg(ws.path()).arg(query);
            c
        });
        let v: Value = serde_json::from_slice(&s.stdout).unwrap();
        assert_eq!(v["passages"][0]["path"], path, "{query}: {v}");
    }
    let secret = run({
        let mut c = home.capstan();
        c.args(["search", "--json", "-w"])
            .arg(ws.path())
            .arg("TOKEN do-not-index-me");
        c
    });
    let v: Value = serde_json::from_slice(&secret.stdout).unwrap();
    assert!(
        v["passages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["path"] != ".env"),
        "{v}"
    );
    // The task's data counts by reason too.
    let invoke = run({
        let mut c = home.capstan();
        c.args([
            "invoke",
            "local_kb_retrieval",
            "-o",
            "index",
            "-i",
            "{}",
            "-w",
        ])
        .arg(ws.path());
        c
    });
    let stdout = text(&invoke.stdout);
    assert!(
        stdout.contains("\"binary\": 2") || stdout.contains("\"binary\":2"),
        "{stdout}"
    );
}

#[test]
fn index_progress_on_a_terminal_shows_bytes_rate_and_eta() {
    let home = Home::new("");
    let ws = tempfile::tempdir().unwrap();
    // Enough files that the bar draws while it works.
    let para =
        "Rotation keeps the signing keys fresh; the on-call engineer runs the drill. ".repeat(40);
    for i in 0..400 {
        std::fs::write(
            ws.path().join(format!("page-{i}.md")),
            format!("# Page {i}\n\n{para}\n"),
        )
        .unwrap();
    }
    let line = shell_line(&home, &["index", "-w", &ws.path().display().to_string()]);
    let out = script()
        .args(["-qfec", &line, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let t = text(&out.stdout);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("ETA"), "{t}");
    assert!(t.contains("/s"), "no rate: {t}");
    assert!(t.contains("KiB") || t.contains("MiB"), "no bytes: {t}");
    assert!(t.contains("/400 files"), "no file count: {t}");
    assert!(t.contains("400 files: 400 parsed"), "{t}");
}
