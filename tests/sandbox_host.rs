//! The OS sandbox as the host uses it, through the real `capstan` binary:
//! `[sandbox]` in capstan.toml (read paths, write quota) reaching commands and
//! a limit failing the task with `resource-limit`; read paths that would expose
//! Capstan's own state refused; `capstan sandbox check` end to end; and a
//! running server whose binary file is replaced (a package upgrade) still
//! running commands; no task cgroup left by a caller killed mid-command.
//! The adversarial suite of the sandbox itself is
//! crates/sandbox/tests/adversarial.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;

use common::Home;
use serde_json::{Value, json};

fn invoke(home: &Home, ws: &Path, input: Value) -> (Option<i32>, Vec<Value>, String) {
    let out = home
        .capstan()
        .args([
            "invoke",
            "terminal_exec",
            "--json",
            "--approve",
            "all",
            "--workspace",
        ])
        .arg(ws)
        .args(["--input", &input.to_string()])
        .output()
        .unwrap();
    let events = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (
        out.status.code(),
        events,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn sandbox_settings_reach_commands_and_a_limit_fails_the_task_with_resource_limit() {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("table.csv"), "a,b\n").unwrap();
    let home = Home::new(&format!(
        "[sandbox]\nwrite_quota_mb = 1\nread = [\"{}\"]\n",
        data.path().display()
    ));
    let ws = tempfile::tempdir().unwrap();

    let (code, events, stderr) = invoke(
        &home,
        ws.path(),
        json!({"command": format!("cat {}/table.csv", data.path().display())}),
    );
    assert_eq!(code, Some(0), "{events:?} {stderr}");
    let result = events.last().unwrap();
    assert_eq!(result["data"]["steps"][0]["stdout"], "a,b\n", "{result}");

    let (code, events, stderr) = invoke(
        &home,
        ws.path(),
        json!({"command": "head -c 3000000 /dev/zero > big.bin"}),
    );
    assert_eq!(code, Some(1), "{events:?} {stderr}");
    let result = events.last().unwrap();
    assert_eq!(result["reason"], "resource-limit", "{result}");
    let message = result.to_string();
    assert!(message.contains("write quota"), "{message}");
    assert!(message.contains("write_quota_mb"), "{message}");
    // The command's step is still reported, and the quota held on disk.
    assert!(
        events.iter().any(|e| e["type"] == "terminal.step"),
        "{events:?}"
    );
    let written = std::fs::metadata(ws.path().join("big.bin")).unwrap().len();
    assert!(written <= 1 << 20, "{written} bytes reached the workspace");
}

#[test]
fn a_read_path_that_holds_capstans_own_state_is_refused() {
    let home = Home::new("");
    let config = format!("[sandbox]\nread = [\"{}\"]\n", home.path().display());
    std::fs::write(home.path().join("config/capstan.toml"), config).unwrap();
    let ws = tempfile::tempdir().unwrap();
    let (code, events, stderr) = invoke(&home, ws.path(), json!({"command": "true"}));
    assert_ne!(code, Some(0), "{events:?}");
    assert!(stderr.contains("[sandbox] read"), "{stderr}");
    assert!(stderr.contains("Capstan's own directory"), "{stderr}");
}

#[test]
fn sandbox_check_reports_the_view_and_identity_and_fails_without_seccomp() {
    let home = Home::new("");
    let out = home.capstan().args(["sandbox", "check"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for want in [
        "sandbox = \"required\": available",
        "identity:",
        "filesystem: new root",
        "memory cgroup",
        "id-mapped mounts",
    ] {
        assert!(text.contains(want), "{want} missing in:\n{text}");
    }
    let out = home
        .capstan()
        .args(["sandbox", "check"])
        .env(capstan_sandbox::UNAVAILABLE_ENV, "seccomp")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("UNAVAILABLE"), "{text}");
    assert!(text.contains("seccomp is unavailable"), "{text}");
}

/// A package upgrade replaces the binary under a running `capstan mcp`: the
/// next command still runs, in the sandbox, from the binary the server
/// started with.
#[test]
fn a_running_server_survives_replacing_its_binary() {
    let home = Home::new("");
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("keep.txt"), "keep me").unwrap();
    let bin_dir = tempfile::tempdir().unwrap();
    let bin = bin_dir.path().join("capstan");
    std::fs::copy(env!("CARGO_BIN_EXE_capstan"), &bin).unwrap();
    let mut child = std::process::Command::new(&bin)
        .env("CAPSTAN_HOME", home.path())
        .env_remove("CAPSTAN_CONFIG_DIR")
        .env_remove("CAPSTAN_DATA_DIR")
        .env_remove("CAPSTAN_CACHE_DIR")
        .args(["mcp", "--workspace"])
        .arg(ws.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = |v: Value| {
        stdin.write_all(v.to_string().as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    let mut reply_to = |id: i64| -> Value {
        loop {
            let line = lines.next().expect("the server closed stdout").unwrap();
            let v: Value = serde_json::from_str(&line).expect("only JSON-RPC on stdout");
            if v["id"] == id {
                return v;
            }
        }
    };
    send(
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}),
    );
    assert_eq!(reply_to(1)["result"]["serverInfo"]["name"], "capstan");
    send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let mut run = |id: i64, command: &str| -> Value {
        send(
            json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
            "name":"terminal_exec.run","arguments":{"command":command}}}),
        );
        let reply = reply_to(id);
        assert_ne!(reply["result"]["isError"], true, "{reply}");
        reply["result"]["structuredContent"]["data"]["steps"][0].clone()
    };
    let before = run(2, "cat keep.txt");
    assert_eq!(before["stdout"], "keep me", "{before}");
    assert_eq!(before["exit_code"], 0, "{before}");

    // Replace the file the way an upgrade does: a new file renamed over it.
    let new = bin_dir.path().join("capstan.new");
    std::fs::write(&new, "#!/bin/sh\necho this is not capstan\nexit 3\n").unwrap();
    std::fs::rename(&new, &bin).unwrap();
    let exe = std::fs::read_link(format!("/proc/{}/exe", child.id())).unwrap();
    assert!(
        exe.to_string_lossy().ends_with("(deleted)"),
        "the running binary should now be a deleted file: {exe:?}"
    );

    let after = run(3, "cat keep.txt");
    assert_eq!(after["stdout"], "keep me", "{after}");
    assert_eq!(after["exit_code"], 0, "{after}");
    // And with the file gone entirely.
    std::fs::remove_file(&bin).unwrap();
    let gone = run(4, "cat keep.txt");
    assert_eq!(gone["stdout"], "keep me", "{gone}");
    let _ = child.kill();
    let _ = child.wait();
}

/// A caller killed with -9 while its command runs leaves nothing of the task
/// behind: its launcher notices, ends the command and removes the task's
/// cgroups itself (there is no caller left to do it).
#[test]
fn a_caller_killed_mid_command_leaves_no_task_cgroup() {
    let home = Home::new("");
    let ws = tempfile::tempdir().unwrap();
    let mut child = home
        .capstan()
        .args(["invoke", "terminal_exec", "--approve", "all", "--workspace"])
        .arg(ws.path())
        .args(["--input", &json!({"command": "sleep 60"}).to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let prefix = format!("capstan-sandbox-{}-", child.id());
    let populated = |dirs: &[std::path::PathBuf]| {
        dirs.iter().any(|d| {
            std::fs::read_to_string(d.join("cgroup.procs")).is_ok_and(|p| !p.trim().is_empty())
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let dirs = loop {
        let dirs = task_cgroups(&prefix);
        if populated(&dirs) {
            break dirs;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            // Without task cgroups (not root, no delegated subtree) there is
            // nothing to leave behind.
            assert!(
                dirs.is_empty() && !is_root(),
                "the command never ran in its task cgroups: {dirs:?}"
            );
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    loop {
        let left = task_cgroups(&prefix);
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left behind by the killed caller's task (it had {dirs:?}): {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    })
}

/// Every cgroup directory under /sys/fs/cgroup whose name starts with `prefix`.
fn task_cgroups(prefix: &str) -> Vec<std::path::PathBuf> {
    fn walk(dir: &Path, prefix: &str, depth: usize, found: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if e.file_name().to_string_lossy().starts_with(prefix) {
                found.push(e.path());
            } else if depth > 0 {
                walk(&e.path(), prefix, depth - 1, found);
            }
        }
    }
    let mut found = Vec::new();
    walk(Path::new("/sys/fs/cgroup"), prefix, 6, &mut found);
    found.sort();
    found
}

/// Commands' launchers are forked from a zygote the caller made at start-up
/// (capstan_sandbox::prefork_launcher), not executed anew: the zygote keeps none
/// of the caller's environment or streams and leads its own process group, each
/// launcher leads its own; and a caller killed with -9 takes the zygote, the
/// launcher and the command with it.
#[test]
fn launchers_come_from_a_zygote_that_holds_nothing_of_the_caller_and_dies_with_it() {
    let home = Home::new("");
    let ws = tempfile::tempdir().unwrap();
    let mut child = home
        .capstan()
        .env("CAPSTAN_TEST_SECRET", "do-not-copy-me")
        .args(["invoke", "terminal_exec", "--approve", "all", "--workspace"])
        .arg(ws.path())
        .args(["--input", &json!({"command": "sleep 60"}).to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let caller = child.id() as i32;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // The zygote is the caller's child; the launcher the zygote's; the command
    // below the launcher (its namespace's init, then `sleep`).
    let (zygote, launcher) = loop {
        let zygote = children(caller)
            .into_iter()
            .find(|&z| !children(z).is_empty());
        if let Some(z) = zygote {
            let launcher = children(z)[0];
            if descendants(launcher).iter().any(|&p| comm(p) == "sleep") {
                break (z, launcher);
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no zygote with a launcher running `sleep` under {caller}: {:?}",
            descendants(caller)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let exe = |pid: i32| std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert_eq!(
        exe(zygote),
        exe(caller),
        "the zygote is a fork, not another program"
    );
    assert_eq!(exe(launcher), exe(caller));
    assert_eq!(comm(zygote), "capstan-zygote");
    assert_eq!(comm(launcher), "capstan-launch");
    let caller_env = std::fs::read(format!("/proc/{caller}/environ")).unwrap();
    assert!(caller_env.windows(14).any(|w| w == b"do-not-copy-me"));
    for pid in [zygote, launcher] {
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        // The start-up block may remain, wiped to NULs.
        assert!(
            env.iter().all(|&b| b == 0),
            "{pid} kept an environment: {:?}",
            String::from_utf8_lossy(&env)
        );
        assert_eq!(pgrp(pid), pid, "{pid} should lead its own process group");
    }
    for fd in 0..3 {
        let target = std::fs::read_link(format!("/proc/{zygote}/fd/{fd}")).unwrap();
        assert_eq!(target, Path::new("/dev/null"), "the zygote's fd {fd}");
    }

    let task = descendants(caller);
    child.kill().unwrap();
    child.wait().unwrap();
    loop {
        let alive: Vec<i32> = task.iter().copied().filter(|&p| running(p)).collect();
        if alive.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left running after the caller was killed: {:?}",
            alive.iter().map(|&p| (p, comm(p))).collect::<Vec<_>>()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The children of every thread of `pid`.
fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for task in tasks.flatten() {
        let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        found.extend(
            list.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    found
}

fn descendants(pid: i32) -> Vec<i32> {
    let mut all = Vec::new();
    let mut next = children(pid);
    while let Some(p) = next.pop() {
        all.push(p);
        next.extend(children(p));
    }
    all
}

/// `/proc/PID/stat` fields after the command name (which may hold spaces).
fn stat_fields(pid: i32) -> Vec<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

fn pgrp(pid: i32) -> i32 {
    stat_fields(pid)[2].parse().unwrap()
}

/// Alive and not a zombie waiting for a parent that does not reap.
fn running(pid: i32) -> bool {
    stat_fields(pid).first().is_some_and(|state| state != "Z")
}

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Issue #42: Capstan's own state is in no command's view wherever its home
/// is. Under `/opt` (a directory the view binds whole) a command of one
/// workspace could read the store and another workspace's kept versions; now
/// the home's config, data and cache are covered in every view, and they are
/// the owner's only on disk (directories 0700, the store 0600).
#[test]
fn capstans_state_is_hidden_from_commands_even_under_a_bound_system_directory() {
    use std::os::unix::fs::PermissionsExt as _;
    let opt = tempfile::Builder::new()
        .prefix("capstan-home-")
        .tempdir_in("/opt")
        .unwrap();
    let home = Home { dir: opt };
    std::fs::create_dir_all(home.path().join("config")).unwrap();
    std::fs::write(home.path().join("config/capstan.toml"), "").unwrap();
    let user = tempfile::tempdir().unwrap();
    let ws = user.path().join("projects/app");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(user.path().join("projects/other")).unwrap();
    std::fs::write(ws.join("f.txt"), "x").unwrap();
    // A first run makes the store.
    let (code, _, err) = invoke(&home, &ws, json!({"command": "true"}));
    assert_eq!(code, Some(0), "{err}");
    let data = home.path().join("data");
    let db = std::fs::read_dir(&data)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "db"))
        .expect("a store file in the data dir");
    assert_eq!(
        std::fs::metadata(&db).unwrap().permissions().mode() & 0o777,
        0o600,
        "{}",
        db.display()
    );
    assert_eq!(
        std::fs::metadata(&data).unwrap().permissions().mode() & 0o777,
        0o700
    );

    let root = home.path().display().to_string();
    let probe = format!(
        "ls -A {root}; ls -A {root}/data 2>&1; head -c 15 {} 2>&1; cat {root}/config/capstan.toml 2>&1; echo probed",
        db.display()
    );
    let (code, events, err) = invoke(&home, &ws, json!({"command": probe}));
    let step = events
        .iter()
        .find(|e| e["type"] == "terminal.step")
        .unwrap_or_else(|| panic!("no step: {events:?} {err}"));
    let out = step["output_tail"].as_str().unwrap();
    assert!(out.contains("probed"), "{out}");
    assert!(
        !out.contains("SQLite format"),
        "the store was readable: {out}"
    );
    assert!(
        out.contains(&format!(
            "ls: cannot open directory '{root}/data': Permission denied"
        )),
        "the data dir was listed: {out}"
    );
    let name = db.file_name().unwrap().to_str().unwrap();
    assert!(
        !out.lines().any(|l| l.trim() == name),
        "the store is listed: {out}"
    );
    assert_eq!(code, Some(0));
}
