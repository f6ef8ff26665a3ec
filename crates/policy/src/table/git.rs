//! git: subcommands, and the config keys that make git run programs.

use super::args::{any_dynamic, has_flag, has_short, operands, surely_flag};
use super::{Cmd, Effect};
use crate::display;
use crate::risk::Risk;
use crate::word::Arg;
/// `git -c` keys that cannot make git run another program. Everything else
/// (pagers, editors, aliases, hooks, fsmonitor, ssh commands, filters,
/// credential helpers, includes, ...) is treated as arbitrary code.
pub(super) fn git_config_safe(kv: &str) -> bool {
    let (key, value) = kv.split_once('=').unwrap_or((kv, "true"));
    let key = key.to_ascii_lowercase();
    const EXACT: &[&str] = &[
        "user.name",
        "user.email",
        "core.quotepath",
        "core.autocrlf",
        "core.safecrlf",
        "core.eol",
        "core.filemode",
        "core.ignorecase",
        "core.abbrev",
        "core.precomposeunicode",
        "init.defaultbranch",
        "diff.algorithm",
        "diff.renames",
        "diff.noprefix",
        "diff.mnemonicprefix",
        "diff.relative",
        "diff.context",
        "diff.interhunkcontext",
        "diff.colormoved",
        "diff.indentheuristic",
        "diff.statgraphwidth",
        "merge.conflictstyle",
        "merge.ff",
        "pull.rebase",
        "pull.ff",
        "rebase.autosquash",
        "rebase.autostash",
        "commit.gpgsign",
        "tag.gpgsign",
        "format.pretty",
        "i18n.commitencoding",
        "i18n.logoutputencoding",
        "status.short",
        "status.branch",
        "status.showuntrackedfiles",
        "grep.linenumber",
        "grep.patterntype",
        "grep.extendedregexp",
        "blame.date",
        "branch.sort",
        "tag.sort",
        "push.default",
        "push.autosetupremote",
        "log.date",
        "log.decorate",
        "log.follow",
        "log.abbrevcommit",
        "log.showroot",
        "gc.auto",
        "maintenance.auto",
        "fetch.prune",
        "help.autocorrect",
        "core.longpaths",
    ];
    if EXACT.contains(&key.as_str()) {
        // `help.autocorrect` with a command name would run it.
        return key != "help.autocorrect" || value.parse::<i64>().is_ok() || value == "never";
    }
    if key.starts_with("color.") || key.starts_with("advice.") || key.starts_with("column.") {
        return true;
    }
    let boolean = matches!(
        value.to_ascii_lowercase().as_str(),
        "true" | "false" | "yes" | "no" | "on" | "off" | "0" | "1" | ""
    );
    if key.starts_with("pager.") && boolean {
        return true;
    }
    key == "core.pager" && matches!(value, "cat" | "less" | "more" | "")
}

pub(super) fn git(c: &mut Cmd<'_>) {
    let args = c.args;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a.dynamic {
            c.unknown("has a subcommand or option that comes from a variable");
            return;
        }
        let t = a.text.as_str();
        match t {
            "-C" | "--git-dir" | "--work-tree" | "--namespace" | "--super-prefix" => {
                if matches!(t, "--git-dir" | "--work-tree") {
                    c.unknown(
                        "points git at another repository, whose configuration can run programs",
                    );
                    return;
                }
                i += 2;
                continue;
            }
            "-c" | "--config-env" => {
                let Some(kv) = args.get(i + 1) else {
                    c.unknown("has a `-c` without a value");
                    return;
                };
                if kv.dynamic || !git_config_safe(&kv.text) {
                    c.unknown(&format!(
                        "sets git config `{}`, which can make git run arbitrary programs",
                        display::clip(&kv.text)
                    ));
                    return;
                }
                i += 2;
                continue;
            }
            "-p"
            | "--paginate"
            | "-P"
            | "--no-pager"
            | "--no-replace-objects"
            | "--bare"
            | "--literal-pathspecs"
            | "--glob-pathspecs"
            | "--noglob-pathspecs"
            | "--icase-pathspecs"
            | "--no-optional-locks"
            | "--no-lazy-fetch"
            | "--no-advice" => {
                i += 1;
                continue;
            }
            "--version" | "-v" | "--help" | "-h" | "--exec-path" | "--html-path" | "--man-path"
            | "--info-path" => {
                c.read_only();
                return;
            }
            _ if t.starts_with("--config-env=") => {
                let kv = &t["--config-env=".len()..];
                if !git_config_safe(kv) {
                    c.unknown(&format!(
                        "sets git config `{}`, which can make git run arbitrary programs",
                        display::clip(kv)
                    ));
                    return;
                }
                i += 1;
                continue;
            }
            _ if t.starts_with("--git-dir=")
                || t.starts_with("--work-tree=")
                || t.starts_with("--exec-path=") =>
            {
                c.unknown(
                    "points git at other files, whose configuration or programs can run code",
                );
                return;
            }
            _ if t.starts_with("--namespace=")
                || t.starts_with("--super-prefix=")
                || t.starts_with("--list-cmds=")
                || t.starts_with("--attr-source=") =>
            {
                i += 1;
                continue;
            }
            _ if t.starts_with('-') => {
                c.unknown(&format!("option `{}` is not understood", display::clip(t)));
                return;
            }
            _ => break,
        }
    }
    let Some(sub) = args.get(i) else {
        c.read_only();
        return;
    };
    let rest = &args[i + 1..];
    // Transport options that name a program to run locally.
    let transfer = matches!(
        sub.text.as_str(),
        "clone" | "fetch" | "pull" | "push" | "ls-remote" | "archive" | "submodule"
    );
    let runs_program = |a: &Arg| {
        a.text.contains("ext::")
            || (transfer
                && (a.dynamic
                    || [
                        "--upload-pack",
                        "--receive-pack",
                        "--exec",
                        "--config",
                        "-u",
                    ]
                    .iter()
                    .any(|o| a.text == *o || a.text.starts_with(&format!("{o}=")))))
    };
    if rest.iter().any(runs_program) {
        c.unknown("names a program for git to run for the transfer");
        return;
    }
    git_subcommand(c, sub.text.as_str(), rest);
}

fn git_subcommand(c: &mut Cmd<'_>, sub: &str, rest: &[Arg]) {
    let first = rest
        .iter()
        .find(|a| a.dynamic || !a.text.starts_with('-'))
        .map(|a| a.text.as_str());
    let first_static = rest
        .first()
        .filter(|a| a.is_static())
        .map(|a| a.text.as_str());
    match sub {
        "status" | "rev-parse" | "ls-files" | "ls-tree" | "cat-file" | "rev-list" | "show-ref"
        | "for-each-ref" | "name-rev" | "describe" | "merge-base" | "count-objects"
        | "verify-commit" | "verify-tag" | "check-ignore" | "check-attr" | "check-ref-format"
        | "cherry" | "var" | "version" | "help" | "show-branch" | "fsck" | "blame" | "annotate"
        | "get-tar-commit-id" | "stripspace" | "column" | "check-mailmap" | "verify-pack"
        | "show-index" | "patch-id" => c.read_only(),
        "log" | "show" | "diff" | "whatchanged" | "shortlog" | "diff-tree" | "diff-files"
        | "diff-index" | "range-diff" => {
            if surely_flag(rest, &["--output"])
                || rest.iter().any(|a| a.text.starts_with("--output="))
            {
                c.risk(Risk::Write, "writes its output to a file");
            } else if any_dynamic(rest) {
                c.risk(
                    Risk::Write,
                    "may write a file (an argument from a variable could be `--output`)",
                );
            } else {
                c.read_only();
            }
        }
        "grep" => {
            if has_flag(rest, &["--open-files-in-pager"])
                || rest.iter().any(|a| a.dynamic || a.text.starts_with("-O"))
            {
                c.unknown("opens results with a pager program");
            } else {
                c.read_only();
            }
        }
        "hash-object" => {
            if has_flag(rest, &["-w"]) {
                c.write()
            } else {
                c.read_only()
            }
        }
        "config" => git_config(c, rest),
        "branch" => {
            if has_flag(rest, &["-d", "-D", "--delete"])
                || has_short(rest, 'd')
                || has_short(rest, 'D')
            {
                c.risk(Risk::Delete, "deletes branches");
            } else if has_flag(rest, &["--edit-description"]) {
                c.unknown("opens an editor");
            } else if has_flag(
                rest,
                &[
                    "-m",
                    "-M",
                    "-c",
                    "-C",
                    "--move",
                    "--copy",
                    "-u",
                    "--set-upstream-to",
                    "--unset-upstream",
                    "-f",
                    "--force",
                    "--track",
                    "--no-track",
                    "--create-reflog",
                ],
            ) {
                c.risk(Risk::Write, "modifies branches");
            } else if surely_flag(
                rest,
                &[
                    "-l",
                    "--list",
                    "-a",
                    "--all",
                    "-r",
                    "--remotes",
                    "--contains",
                    "--no-contains",
                    "--merged",
                    "--no-merged",
                    "--points-at",
                    "--show-current",
                    "-v",
                    "-vv",
                ],
            ) || operands(rest).is_empty()
            {
                c.read_only();
            } else {
                c.risk(Risk::Write, "creates a branch");
            }
        }
        "tag" => {
            if has_flag(rest, &["-d", "--delete"]) {
                c.risk(Risk::Delete, "deletes tags");
            } else if surely_flag(rest, &["-l", "--list", "-v", "--verify"])
                || operands(rest).is_empty() && !has_flag(rest, &["-a", "-s", "-f", "-m", "-F"])
            {
                c.read_only();
            } else {
                c.risk(Risk::Write, "creates a tag");
            }
        }
        "stash" => match first_static.or(first) {
            Some("list" | "show") => c.read_only(),
            Some("drop" | "clear") => c.risk(Risk::Delete, "discards stashed changes"),
            _ if rest.iter().any(|a| a.dynamic) => c.unknown("has a subcommand from a variable"),
            _ => c.risk(Risk::Write, "modifies the working tree"),
        },
        "worktree" => match first {
            Some("list") => c.read_only(),
            Some("remove" | "prune") => c.risk(Risk::Delete, "deletes worktrees"),
            Some("add" | "move" | "lock" | "unlock" | "repair") => c.write(),
            _ => c.unknown("has a subcommand that is not understood"),
        },
        "remote" => match first {
            None | Some("get-url") => c.read_only(),
            Some("show") => c.network(),
            Some("update" | "prune") => c.network(),
            Some("add" | "rename" | "remove" | "rm" | "set-url" | "set-head" | "set-branches") => {
                c.risk(Risk::Write, "changes remote configuration")
            }
            _ => c.unknown("has a subcommand that is not understood"),
        },
        "notes" => match first {
            None | Some("list" | "show") => c.read_only(),
            Some("remove" | "prune") => c.delete(),
            _ => c.write(),
        },
        "reflog" => match first {
            None | Some("show" | "exists") => c.read_only(),
            Some("expire" | "delete" | "drop") => c.risk(Risk::Delete, "deletes reflog entries"),
            _ => c.read_only(),
        },
        "submodule" => match first {
            None | Some("status" | "summary") => c.read_only(),
            Some("init" | "set-branch" | "set-url" | "absorbgitdirs") => c.write(),
            Some("deinit") => c.delete(),
            Some("update" | "add" | "sync") => c.network(),
            Some("foreach") => c.unknown("runs a shell command in every submodule"),
            _ => c.unknown("has a subcommand that is not understood"),
        },
        "bisect" => match first {
            Some("run") => c.unknown("runs a command at every bisection step"),
            Some("visualize" | "view") => c.unknown("opens a viewer program"),
            Some("log") => c.read_only(),
            _ => c.write(),
        },
        "reset" => {
            if has_flag(rest, &["--hard", "--merge", "--keep"]) {
                c.risk(Risk::Delete, "discards uncommitted changes");
            } else {
                c.risk(Risk::Write, "modifies the index or branch");
            }
        }
        "checkout" | "switch" | "restore" => {
            let discards_paths = match sub {
                // `git checkout -- path` and `git checkout .` overwrite
                // uncommitted edits to those paths.
                "checkout" => rest
                    .iter()
                    .any(|a| a.dynamic || a.text == "--" || a.text == "."),
                // `git restore path` restores the working tree unless only
                // `--staged` is given.
                "restore" => {
                    !surely_flag(rest, &["--staged", "-S"]) || has_flag(rest, &["--worktree", "-W"])
                }
                _ => false,
            };
            if discards_paths || has_flag(rest, &["-f", "--force", "--discard-changes"]) {
                c.risk(Risk::Delete, "discards uncommitted changes");
            } else {
                c.risk(Risk::Write, "modifies the working tree");
            }
        }
        "clean" => {
            if surely_flag(rest, &["-n", "--dry-run"]) {
                c.read_only();
            } else {
                c.risk(Risk::Delete, "deletes untracked files");
            }
        }
        "rm" => {
            if surely_flag(rest, &["-n", "--dry-run"]) {
                c.read_only();
            } else if surely_flag(rest, &["--cached"]) {
                c.risk(Risk::Write, "removes files from the index");
            } else {
                c.risk(Risk::Delete, "deletes tracked files");
            }
        }
        "rebase" => {
            if has_flag(rest, &["-x", "--exec"]) || has_flag(rest, &["-i", "--interactive"]) {
                c.unknown("runs commands or an editor during the rebase");
            } else {
                c.risk(Risk::Write, "rewrites history");
            }
        }
        "apply" => {
            if surely_flag(rest, &["--check", "--stat", "--numstat", "--summary"])
                && !has_flag(rest, &["--apply", "--index", "--cached"])
            {
                c.read_only();
            } else {
                c.write();
            }
        }
        "update-ref" | "symbolic-ref" => {
            if has_flag(rest, &["-d", "--delete"]) {
                c.delete()
            } else {
                c.write()
            }
        }
        "bundle" => match first {
            Some("verify" | "list-heads") => c.read_only(),
            _ => c.write(),
        },
        "archive" => {
            if has_flag(rest, &["--remote", "--exec"]) {
                c.network();
            } else if has_flag(rest, &["-o", "--output"]) {
                c.write();
            } else {
                c.read_only();
            }
        }
        "add" | "commit" | "merge" | "cherry-pick" | "revert" | "mv" | "am" | "init"
        | "commit-tree" | "update-index" | "gc" | "repack" | "replace" | "rerere"
        | "sparse-checkout" | "format-patch" | "maintenance" | "commit-graph"
        | "multi-pack-index" | "pack-refs" | "fast-import" | "read-tree" | "write-tree"
        | "checkout-index" | "merge-file" | "mktag" | "mktree" | "pack-objects" | "index-pack"
        | "unpack-objects" | "merge-tree" | "stage" => {
            c.risk(Risk::Write, "modifies the repository");
        }
        "prune" | "prune-packed" => c.risk(Risk::Delete, "deletes unreachable objects"),
        "push" => c.risk(Risk::Network, "uploads to a remote"),
        "clone" | "fetch" | "pull" | "ls-remote" | "fetch-pack" | "send-pack" | "request-pull"
        | "send-email" | "daemon" | "http-fetch" | "http-push" | "imap-send" => c.network(),
        _ => c.unknown("is not a known git subcommand (it may be an alias that runs anything)"),
    }
}

fn git_config(c: &mut Cmd<'_>, rest: &[Arg]) {
    if any_dynamic(rest) {
        c.unknown("has arguments from a variable");
        return;
    }
    let reading = surely_flag(
        rest,
        &[
            "--get",
            "--get-all",
            "--get-regexp",
            "--get-urlmatch",
            "-l",
            "--list",
            "--get-color",
            "--get-colorbool",
            "--show-origin",
            "--show-scope",
        ],
    ) || matches!(rest.first().map(|a| a.text.as_str()), Some("get" | "list"));
    if reading
        && !has_flag(
            rest,
            &[
                "--add",
                "--unset",
                "--unset-all",
                "--replace-all",
                "--rename-section",
                "--remove-section",
                "-e",
                "--edit",
            ],
        )
    {
        c.read_only();
        return;
    }
    if surely_flag(rest, &["-e", "--edit"]) || rest.first().is_some_and(|a| a.text == "edit") {
        c.unknown("opens an editor");
        return;
    }
    if has_flag(rest, &["--global", "--system", "-f", "--file", "--blob"]) {
        c.unknown("changes git configuration outside the repository");
        protect_git_config(c);
        return;
    }
    if has_flag(
        rest,
        &[
            "--unset",
            "--unset-all",
            "--remove-section",
            "--rename-section",
        ],
    ) || rest.first().is_some_and(|a| {
        matches!(
            a.text.as_str(),
            "unset" | "remove-section" | "rename-section"
        )
    }) {
        protect_git_config(c);
        return;
    }
    let ops: Vec<&Arg> = operands(rest);
    let ops: Vec<&Arg> = if ops.first().is_some_and(|a| a.text == "set") {
        ops[1..].to_vec()
    } else {
        ops
    };
    match ops.as_slice() {
        [] => c.unknown("has no key"),
        [key] => {
            let _ = key;
            c.read_only();
        }
        [key, value, ..] => {
            let kv = format!("{}={}", key.text, value.text);
            if !git_config_safe(&kv) {
                c.unknown(&format!(
                    "sets git config `{}`, which can make git run arbitrary programs",
                    display::clip(&key.text)
                ));
            }
            protect_git_config(c);
        }
    }
}

/// Every `git config` write changes `.git/config`, a protected file
/// whatever the key: the approval must name it (see `protect.rs`).
fn protect_git_config(c: &mut Cmd<'_>) {
    c.unknown("changes the repository's git configuration");
    let reason = format!(
        "`{}` writes: {}",
        c.shown,
        crate::protect::describe(".git/config")
    );
    c.out.push(Effect::Protected(reason));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_config_keys() {
        assert!(git_config_safe("color.ui=always"));
        assert!(git_config_safe("core.pager=cat"));
        assert!(!git_config_safe("core.pager=sh -c x"));
        assert!(!git_config_safe("alias.x=!rm -rf /"));
        assert!(!git_config_safe("core.fsmonitor=x"));
        assert!(!git_config_safe("core.hooksPath=x"));
    }
}
