//! git: subcommands, and the config keys that make git run programs.

use super::args::{any_dynamic, has_flag, operands, surely_flag};
use super::{Cmd, Effect, options};
use crate::display;
use crate::gitconfig::{canonical_key, inert};
use crate::risk::Risk;
use crate::word::Arg;

/// Whether a `git -c key=value` setting is inert (see
/// [`crate::gitconfig::inert`]): the same allowlist as the repository's own
/// configuration. Everything else (pagers, editors, aliases, hooks,
/// fsmonitor, ssh commands, filters, credential helpers, includes, keys
/// this list does not know) is treated as arbitrary code.
pub(super) fn git_config_safe(kv: &str) -> bool {
    match kv.split_once('=') {
        Some((key, value)) => inert(&canonical_key(key), Some(value)),
        None => inert(&canonical_key(kv), None),
    }
}

/// `--config-env=key=ENVVAR` takes the value from a variable whose value
/// is not known: only keys inert whatever their value are safe.
fn git_config_env_safe(kv: &str) -> bool {
    let key = canonical_key(kv.split_once('=').map_or(kv, |(k, _)| k));
    ["sh -c x", "!sh", "/tmp/x", "ext::sh"]
        .iter()
        .all(|v| inert(&key, Some(v)))
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
                let safe = if t == "-c" {
                    git_config_safe(&kv.text)
                } else {
                    git_config_env_safe(&kv.text)
                };
                if kv.dynamic || !safe {
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
                if !git_config_env_safe(kv) {
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
    // A URL whose transport runs a program.
    if rest
        .iter()
        .any(|a| a.text.to_ascii_lowercase().contains("ext::"))
    {
        c.unknown("names a program for git to run for the transfer (`ext::`)");
        return;
    }
    // The subcommand's options that raise risk (program-naming transfer
    // options, `--output`, `--hard`, ...), in every spelling git's
    // parse-options accepts.
    let raised = options::apply(c, &format!("git {}", sub.text), rest);
    git_subcommand(c, sub.text.as_str(), rest, raised);
}

/// The rule for one subcommand. `raised` is the risk its options added
/// already (see `options.rs`); the rule adds what the subcommand itself
/// does.
fn git_subcommand(c: &mut Cmd<'_>, sub: &str, rest: &[Arg], raised: Risk) {
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
        // Their risky options (`--output`, `-O`, `-w`) are rows of
        // `options::RISKY_OPTIONS`.
        "log" | "show" | "diff" | "whatchanged" | "shortlog" | "diff-tree" | "diff-files"
        | "diff-index" | "range-diff" | "grep" | "hash-object" | "archive" => c.read_only(),
        "config" => git_config(c, rest),
        "branch" => {
            // Deleting, renaming, copying, upstream changes: rows.
            let lists = surely_flag(
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
            );
            if lists || operands(rest).is_empty() {
                c.read_only();
            } else if raised == Risk::ReadOnly {
                c.risk(Risk::Write, "creates a branch");
            }
        }
        "tag" => {
            if surely_flag(rest, &["-l", "--list", "-v", "--verify"]) || operands(rest).is_empty() {
                c.read_only();
            } else if raised == Risk::ReadOnly {
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
            Some("write") => c.risk(Risk::Write, "writes a reflog entry"),
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
        "reset" => c.risk(Risk::Write, "modifies the index or branch"),
        "checkout" | "switch" | "restore" => {
            let discards_paths = match sub {
                // `git checkout -- path` and `git checkout .` overwrite
                // uncommitted edits to those paths.
                "checkout" => rest
                    .iter()
                    .any(|a| a.dynamic || a.text == "--" || a.text == "."),
                // `git restore path` restores the working tree unless only
                // `--staged` is given.
                "restore" => !surely_flag(rest, &["--staged", "-S"]),
                _ => false,
            };
            if discards_paths {
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
        "rebase" => c.risk(Risk::Write, "rewrites history"),
        "apply" => {
            if surely_flag(rest, &["--check", "--stat", "--numstat", "--summary"]) {
                c.read_only();
            } else {
                c.write();
            }
        }
        "update-ref" | "symbolic-ref" => {
            if raised == Risk::ReadOnly {
                c.write()
            }
        }
        "bundle" => match first {
            Some("verify" | "list-heads") => c.read_only(),
            _ => c.write(),
        },
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
    if has_flag(rest, &["-e", "--edit"]) || rest.first().is_some_and(|a| a.text == "edit") {
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
