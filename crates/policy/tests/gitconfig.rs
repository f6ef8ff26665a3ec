//! Issue 41, class 5: the repository's git configuration fails closed.
//! Every key is a hazard unless it is known to be inert, keys compare as
//! git compares them, and `.git` indirections that leave the workspace are
//! hazards too; an ordinary repository stays clean, so read-only git stays
//! read-only there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use capstan_policy::Risk::{ReadOnly, Unknown};
use capstan_policy::gitconfig::{parse, runs_code};
use capstan_policy::{Context, RepoFacts, classify_shell_in};

fn hazards(text: &str) -> Vec<String> {
    parse(text)
        .unwrap()
        .into_iter()
        .filter(|(k, v)| runs_code(k, v.as_deref()))
        .map(|(k, _)| k)
        .collect()
}

/// What `git init`, `git remote add origin URL`, `git config user.*`,
/// `git branch --set-upstream-to` and `git config pull.rebase` write, on
/// Linux, macOS and Windows, plus VS Code's branch key.
const NORMAL: &str = "[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = false
\tlogallrefupdates = true
\tignorecase = true
\tprecomposeunicode = true
\tsymlinks = false
[remote \"origin\"]
\turl = https://github.com/example/repo.git
\tfetch = +refs/heads/*:refs/remotes/origin/*
[branch \"main\"]
\tremote = origin
\tmerge = refs/heads/main
\tvscode-merge-base = origin/main
[user]
\tname = A U Thor
\temail = author@example.com
[pull]
\trebase = false
[init]
\tdefaultBranch = main
[extensions]
\tobjectFormat = sha256
\tworktreeConfig = true
[submodule \"lib\"]
\turl = https://github.com/example/lib.git
\tactive = true
[color]
\tui = auto
[alias]
\tst = status
";

#[test]
fn a_normal_repository_config_is_not_a_hazard() {
    assert_eq!(hazards(NORMAL), Vec::<String>::new());
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join(".git/objects")).unwrap();
    std::fs::write(root.join(".git/config"), NORMAL).unwrap();
    let facts = RepoFacts::scan(&root, &root);
    assert_eq!(facts, RepoFacts::default());
    let ctx = Context {
        cwd: String::new(),
        repo: facts,
    };
    for cmd in ["git status", "git log --oneline -5", "git diff HEAD~1"] {
        assert_eq!(classify_shell_in(cmd, &ctx).risk, ReadOnly, "{cmd}");
    }
}

/// The same, with the configuration a real git writes (skipped when git is
/// not installed).
#[test]
fn a_repository_made_by_git_is_not_a_hazard() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(&root)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
    };
    let Ok(out) = git(&["init", "-q", "-b", "main", "."]) else {
        eprintln!("git is not installed: skipped");
        return;
    };
    assert!(out.status.success(), "{out:?}");
    for args in [
        &[
            "remote",
            "add",
            "origin",
            "https://github.com/example/repo.git",
        ][..],
        &["config", "user.name", "A U Thor"],
        &["config", "user.email", "author@example.com"],
        &["config", "branch.main.remote", "origin"],
        &["config", "branch.main.merge", "refs/heads/main"],
        &["config", "pull.rebase", "false"],
    ] {
        assert!(git(args).unwrap().status.success(), "git {args:?}");
    }
    let facts = RepoFacts::scan(&root, &root);
    assert_eq!(
        facts,
        RepoFacts::default(),
        "{}",
        std::fs::read_to_string(root.join(".git/config")).unwrap()
    );
}

#[test]
fn every_key_not_known_to_be_inert_is_a_hazard() {
    for (text, key) in [
        ("[tar \"tgz\"]\n\tcommand = sh -c x", "tar.tgz.command"),
        ("[Tar \"tgz\"]\n\tCOMMAND = sh -c x", "tar.tgz.command"),
        ("[core]\n\tworktree = /", "core.worktree"),
        ("[CORE]\n\tWorkTree = ../..", "core.worktree"),
        ("[core]\n\tsshCommand = ./s", "core.sshcommand"),
        ("[core]\n\tgitProxy = ./p", "core.gitproxy"),
        (
            "[core]\n\talternateRefsCommand = ./a",
            "core.alternaterefscommand",
        ),
        (
            "[core]\n\tattributesFile = /etc/attrs",
            "core.attributesfile",
        ),
        (
            "[core]\n\tattributesFile = ../../attrs",
            "core.attributesfile",
        ),
        ("[core]\n\texcludesFile = ~/ignore", "core.excludesfile"),
        ("[core]\n\tpager = sh -c x", "core.pager"),
        ("[core]\n\thooksPath = h", "core.hookspath"),
        ("[alias]\n\tx = !rm -rf y", "alias.x"),
        ("[mergetool \"m\"]\n\tcmd = ./m", "mergetool.m.cmd"),
        ("[difftool \"d\"]\n\tcmd = ./d", "difftool.d.cmd"),
        ("[man \"v\"]\n\tcmd = ./v", "man.v.cmd"),
        ("[browser \"b\"]\n\tcmd = ./b", "browser.b.cmd"),
        (
            "[uploadpack]\n\tpackObjectsHook = ./h",
            "uploadpack.packobjectshook",
        ),
        ("[remote \"o\"]\n\tuploadpack = ./u", "remote.o.uploadpack"),
        (
            "[remote \"o\"]\n\treceivepack = ./r",
            "remote.o.receivepack",
        ),
        ("[remote \"o\"]\n\turl = ext::sh -c x", "remote.o.url"),
        ("[remote \"o\"]\n\tpromisor = true", "remote.o.promisor"),
        ("[gpg]\n\tprogram = ./g", "gpg.program"),
        ("[gpg \"ssh\"]\n\tprogram = ./g", "gpg.ssh.program"),
        ("[gpg]\n\tformat = ssh", "gpg.format"),
        ("[include]\n\tpath = x.cfg", "include.path"),
        (
            "[includeIf \"gitdir:/\"]\n\tpath = x.cfg",
            "includeif.gitdir:/.path",
        ),
        ("[submodule \"s\"]\n\tupdate = !sh", "submodule.s.update"),
        ("[pager]\n\tlog = ./p", "pager.log"),
        ("[help]\n\tautocorrect = ./x", "help.autocorrect"),
        (
            "[filter \"lfs\"]\n\tclean = git-lfs clean -- %f",
            "filter.lfs.clean",
        ),
        (
            "[extensions]\n\tpartialClone = origin",
            "extensions.partialclone",
        ),
        ("[frobnicate]\n\twidget = 1", "frobnicate.widget"),
        (
            "[url \"ext::sh\"]\n\tinsteadOf = https://",
            "url.ext::sh.insteadof",
        ),
        ("[log]\n\tshowSignature = true", "log.showsignature"),
    ] {
        assert_eq!(hazards(text), [key], "{text}");
    }
    // Inside the workspace, the path keys are inert.
    assert_eq!(
        hazards("[core]\n\tattributesFile = .gitattributes-extra\n\texcludesFile = ignore/list"),
        Vec::<String>::new()
    );
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn keys(facts: &RepoFacts) -> Vec<String> {
    facts.hazards.iter().map(|h| h.key.clone()).collect()
}

#[test]
fn git_directories_and_objects_outside_the_workspace_are_hazards() {
    let outside = tempfile::tempdir().unwrap();
    let out = outside.path().canonicalize().unwrap();
    write(&out.join("real/config"), NORMAL);
    write(&out.join("real/HEAD"), "ref: refs/heads/main\n");

    // A `.git` file whose `gitdir:` leaves the workspace.
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    write(
        &root.join(".git"),
        &format!("gitdir: {}\n", out.join("real").display()),
    );
    let facts = RepoFacts::scan(&root, &root);
    assert!(
        keys(&facts)
            .iter()
            .any(|k| k.contains("outside the workspace")),
        "{facts:?}"
    );
    // ... also when spelled relative.
    let rel = format!(
        "gitdir: ../{}/real\n",
        out.file_name().unwrap().to_string_lossy()
    );
    write(&root.join(".git"), &rel);
    assert!(!RepoFacts::scan(&root, &root).hazards.is_empty());

    // A worktree's `commondir` leaving the workspace.
    let ws2 = tempfile::tempdir().unwrap();
    let root2 = ws2.path().canonicalize().unwrap();
    write(&root2.join(".git/config"), NORMAL);
    write(
        &root2.join(".git/commondir"),
        &format!("{}\n", out.join("real").display()),
    );
    let facts = RepoFacts::scan(&root2, &root2);
    assert!(
        keys(&facts).iter().any(|k| k.contains("commondir")),
        "{facts:?}"
    );

    // Objects borrowed from outside the workspace.
    let ws3 = tempfile::tempdir().unwrap();
    let root3 = ws3.path().canonicalize().unwrap();
    write(&root3.join(".git/config"), NORMAL);
    write(
        &root3.join(".git/objects/info/alternates"),
        &format!("{}\n", out.join("real/objects").display()),
    );
    let facts = RepoFacts::scan(&root3, &root3);
    assert!(
        keys(&facts).iter().any(|k| k.contains("alternates")),
        "{facts:?}"
    );
    let ctx = Context {
        cwd: String::new(),
        repo: facts,
    };
    assert_eq!(classify_shell_in("git status", &ctx).risk, Unknown);

    // The same indirections inside the workspace are fine.
    let ws4 = tempfile::tempdir().unwrap();
    let root4 = ws4.path().canonicalize().unwrap();
    write(&root4.join("store/config"), NORMAL);
    write(
        &root4.join("store/objects/info/alternates"),
        "../../other/objects\n",
    );
    write(&root4.join(".git"), "gitdir: store\n");
    assert_eq!(RepoFacts::scan(&root4, &root4), RepoFacts::default());
}

#[test]
fn planted_keys_make_git_unknown_and_name_the_key() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    write(
        &root.join(".git/config"),
        &format!("{NORMAL}[tar \"tgz\"]\n\tcommand = ./evil.sh\n"),
    );
    let ctx = Context {
        cwd: String::new(),
        repo: RepoFacts::scan(&root, &root),
    };
    let c = classify_shell_in("git archive --format=tgz HEAD", &ctx);
    assert_eq!(c.risk, Unknown);
    assert!(
        c.reasons.iter().any(|r| r.contains("`tar.tgz.command`")),
        "{:?}",
        c.reasons
    );
}
