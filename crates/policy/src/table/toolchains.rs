//! Language toolchains and package managers.

use super::args::{any_dynamic, surely_flag};
use super::{Cmd, options};
use crate::risk::Risk;
use crate::word::Arg;
pub(super) fn cargo(c: &mut Cmd<'_>) {
    let args = c.args;
    // `--config` anywhere is a row of `options::RISKY_OPTIONS`.
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a.dynamic {
            c.unknown("has a subcommand or option that comes from a variable");
            return;
        }
        let t = a.text.as_str();
        if t.starts_with('+')
            || matches!(
                t,
                "-v" | "-vv"
                    | "-q"
                    | "--quiet"
                    | "--verbose"
                    | "--frozen"
                    | "--locked"
                    | "--offline"
            )
        {
            i += 1;
        } else if matches!(t, "--color" | "-Z" | "-C") {
            i += 2;
        } else if t.starts_with("--color=")
            || t.starts_with("-Z")
            || t.starts_with("-C")
            || t == "-vvv"
        {
            i += 1;
        } else if matches!(
            t,
            "--version" | "-V" | "--list" | "--help" | "-h" | "--explain"
        ) {
            c.read_only();
            return;
        } else if t.starts_with("--config") {
            // A row of `options.rs` has made it unknown; skip its value.
            i += if t.contains('=') { 1 } else { 2 };
        } else if t.starts_with('-') {
            // An option before the subcommand that is not known may take
            // a value and shift where the subcommand is.
            c.unknown(&format!(
                "has the option `{}` before its subcommand, which is not understood",
                crate::display::clip(t)
            ));
            return;
        } else {
            break;
        }
    }
    let rest = args.get(i + 1..).unwrap_or(&[]);
    match args.get(i).map(|a| a.text.as_str()) {
        None => c.read_only(),
        Some("metadata" | "tree") => {
            // Resolving dependencies may download the registry index.
            if surely_flag(args, &["--offline", "--frozen", "--no-deps"]) {
                c.read_only()
            } else {
                c.risk(
                    Risk::Network,
                    "may download the registry index to resolve dependencies (pass `--offline`)",
                )
            }
        }
        Some(
            "version" | "help" | "locate-project" | "pkgid" | "verify-project" | "read-manifest",
        ) => c.read_only(),
        Some("fmt") => {
            if surely_flag(rest, &["--check"]) {
                c.read_only()
            } else {
                c.risk(Risk::Write, "reformats source files")
            }
        }
        Some(
            "build" | "b" | "check" | "c" | "clippy" | "test" | "t" | "bench" | "run" | "r" | "doc"
            | "d" | "rustc" | "rustdoc" | "fix" | "new" | "init" | "package" | "remove" | "rm"
            | "nextest" | "llvm-cov" | "expand" | "miri",
        ) => {
            c.risk(
                Risk::Write,
                "builds and runs project code, writing the target directory",
            );
        }
        Some("clean") => c.risk(Risk::Delete, "deletes build artifacts"),
        Some("uninstall") => c.risk(Risk::Delete, "deletes installed binaries"),
        Some(
            "update" | "fetch" | "vendor" | "generate-lockfile" | "install" | "publish" | "login"
            | "logout" | "owner" | "yank" | "add" | "search" | "info",
        ) => c.network(),
        Some(_) => c.unknown("is not a known cargo subcommand (plugins can do anything)"),
    }
}

fn first_word(args: &[Arg]) -> Option<&Arg> {
    args.iter().find(|a| a.dynamic || !a.text.starts_with('-'))
}

pub(super) fn npm(c: &mut Cmd<'_>) {
    let args = c.args;
    if surely_flag(args, &["--version", "-v"]) && args.len() == 1 {
        c.read_only();
        return;
    }
    let Some(sub) = first_word(args) else {
        c.read_only();
        return;
    };
    if sub.dynamic {
        c.unknown("has a subcommand that comes from a variable");
        return;
    }
    match sub.text.as_str() {
        "ls" | "list" | "ll" | "la" | "help" | "root" | "bin" | "prefix" | "explain" | "why"
        | "query" | "fund" | "get" => c.read_only(),
        "view" | "info" | "show" | "v" => {
            c.risk(Risk::Network, "asks the package registry about a package")
        }
        "config" | "c" => {
            let action = args
                .iter()
                .skip_while(|a| !std::ptr::eq(*a, sub))
                .skip(1)
                .find(|a| a.dynamic || !a.text.starts_with('-'));
            if action
                .is_some_and(|a| a.is_static() && matches!(a.text.as_str(), "get" | "list" | "ls"))
            {
                c.read_only()
            } else {
                c.unknown("changes npm configuration")
            }
        }
        "run" | "run-script" | "rum" | "urn" | "test" | "t" | "tst" | "start" | "stop"
        | "restart" | "rebuild" | "rb" | "pack" | "init" | "create" | "link" | "ln" | "dedupe"
        | "prune" | "version" => {
            c.risk(Risk::Write, "runs package scripts or modifies the project")
        }
        "uninstall" | "remove" | "rm" | "r" | "un" | "unlink" => {
            c.risk(Risk::Delete, "removes packages")
        }
        "cache" => c.risk(Risk::Delete, "changes the package cache"),
        "exec" | "x" => c.unknown("downloads and runs a package, which can do anything"),
        "install" | "i" | "in" | "ins" | "inst" | "insta" | "instal" | "isnt" | "isnta"
        | "isntal" | "add" | "ci" | "clean-install" | "install-clean" | "install-ci-test"
        | "cit" | "install-test" | "it" | "update" | "up" | "upgrade" | "udpate" | "publish"
        | "unpublish" | "login" | "logout" | "adduser" | "dist-tag" | "deprecate" | "owner"
        | "access" | "team" | "token" | "ping" | "outdated" | "search" | "audit" | "doctor"
        | "whoami" | "repo" | "docs" | "bugs" => c.network(),
        _ => c.unknown("is not a known npm subcommand"),
    }
}

pub(super) fn yarn(c: &mut Cmd<'_>, name: &str) {
    let args = c.args;
    let Some(sub) = first_word(args) else {
        if args.is_empty() {
            c.risk(Risk::Network, "installs dependencies");
        } else if surely_flag(args, &["--version", "-v"]) {
            c.read_only();
        } else {
            c.unknown("has options that are not understood");
        }
        return;
    };
    if sub.dynamic {
        c.unknown("has a subcommand that comes from a variable");
        return;
    }
    match sub.text.as_str() {
        "list" | "ls" | "why" | "help" | "bin" | "root" | "licenses" => c.read_only(),
        "config" => {
            let action = args
                .iter()
                .skip_while(|a| !std::ptr::eq(*a, sub))
                .skip(1)
                .find(|a| a.dynamic || !a.text.starts_with('-'));
            match action {
                None => c.read_only(),
                Some(a)
                    if a.is_static() && matches!(a.text.as_str(), "get" | "list" | "current") =>
                {
                    c.read_only()
                }
                Some(_) => c.unknown("changes yarn configuration"),
            }
        }
        "info" | "view" => c.risk(Risk::Network, "asks the package registry about a package"),
        "install" | "i" | "add" | "upgrade" | "up" | "update" | "publish" | "login"
        | "outdated" | "audit" | "fetch" | "import" => c.network(),
        "remove" | "rm" | "uninstall" | "un" | "prune" => c.risk(Risk::Delete, "removes packages"),
        "dlx" | "exec" | "x" | "node" => c.unknown("runs arbitrary code"),
        // Anything else is a package.json script (`yarn test`, `pnpm build`).
        _ => {
            let _ = name;
            c.risk(Risk::Write, "runs package scripts");
        }
    }
}

pub(super) fn pip(c: &mut Cmd<'_>) {
    let Some(sub) = first_word(c.args) else {
        if surely_flag(c.args, &["--version", "-V"]) {
            c.read_only()
        } else {
            c.unknown("has options that are not understood")
        }
        return;
    };
    match sub.text.as_str() {
        _ if sub.dynamic => c.unknown("has a subcommand that comes from a variable"),
        "list" if options::apply(c, "pip list", c.args) > Risk::ReadOnly => {}
        "list" | "show" | "freeze" | "check" | "help" | "debug" | "inspect" | "hash" => {
            c.read_only()
        }
        "install" | "download" | "wheel" | "index" | "search" => c.network(),
        "uninstall" => c.risk(Risk::Delete, "removes packages"),
        "cache" | "config" => c.write(),
        _ => c.unknown("is not a known pip subcommand"),
    }
}

pub(super) fn uv(c: &mut Cmd<'_>) {
    let Some(sub) = first_word(c.args) else {
        c.read_only();
        return;
    };
    match sub.text.as_str() {
        _ if sub.dynamic => c.unknown("has a subcommand that comes from a variable"),
        "version" | "help" => c.read_only(),
        "pip" | "tree" | "add" | "sync" | "lock" | "tool" | "python" | "venv" | "init"
        | "remove" | "export" | "publish" | "build" => c.network(),
        "run" => c.unknown("runs arbitrary code"),
        _ => c.unknown("is not a known uv subcommand"),
    }
}

pub(super) fn go(c: &mut Cmd<'_>) {
    let Some(sub) = first_word(c.args) else {
        c.read_only();
        return;
    };
    match sub.text.as_str() {
        _ if sub.dynamic => c.unknown("has a subcommand that comes from a variable"),
        "version" | "help" => c.read_only(),
        "doc" | "list" => c.risk(Risk::Network, "may download modules to resolve packages"),
        "env" => {
            options::apply(c, "go env", c.args);
            c.read_only()
        }
        "build" | "test" | "vet" | "run" | "fmt" | "fix" => {
            c.risk(Risk::Write, "builds and runs project code")
        }
        "clean" => c.risk(Risk::Delete, "deletes build artifacts"),
        "get" | "install" | "mod" | "work" => c.network(),
        "generate" => c.unknown("runs commands named in source comments"),
        _ => c.unknown("is not a known go subcommand"),
    }
}

pub(super) fn rustup(c: &mut Cmd<'_>) {
    let args = c.args;
    let words: Vec<&str> = args
        .iter()
        .filter(|a| !a.text.starts_with('-'))
        .map(|a| a.text.as_str())
        .collect();
    if any_dynamic(args) {
        c.unknown("has arguments that come from a variable");
        return;
    }
    match words.as_slice() {
        [] => c.read_only(),
        ["show" | "which" | "help" | "doc", ..] => c.read_only(),
        ["toolchain" | "component" | "target", "list", ..] => c.read_only(),
        [
            "toolchain" | "component" | "target",
            "remove" | "uninstall",
            ..,
        ] => c.delete(),
        [
            "update" | "install" | "self" | "toolchain" | "component" | "target",
            ..,
        ] => c.network(),
        ["default" | "override" | "set", ..] => {
            c.risk(Risk::Write, "changes toolchain configuration")
        }
        ["run", ..] => c.unknown("runs an arbitrary command"),
        _ => c.unknown("is not a known rustup subcommand"),
    }
}

pub(super) fn docker(c: &mut Cmd<'_>) {
    let Some(sub) = first_word(c.args) else {
        c.read_only();
        return;
    };
    match sub.text.as_str() {
        _ if sub.dynamic => c.unknown("has a subcommand that comes from a variable"),
        "ps" | "images" | "inspect" | "logs" | "version" | "info" | "stats" | "top" | "history"
        | "port" | "diff" => c.read_only(),
        "pull" | "push" | "login" | "search" => c.network(),
        "rm" | "rmi" | "prune" => c.delete(),
        "stop" | "kill" | "restart" | "pause" | "unpause" | "tag" | "rename" => c.write(),
        _ => c.unknown(
            "controls containers, which can do anything (the container daemon runs as root)",
        ),
    }
}

pub(super) fn package_manager(c: &mut Cmd<'_>, name: &str) {
    let Some(sub) = first_word(c.args) else {
        if surely_flag(c.args, &["--version", "-v", "-V"]) {
            c.read_only()
        } else {
            c.unknown("has options that are not understood")
        }
        return;
    };
    match sub.text.as_str() {
        _ if sub.dynamic => c.unknown("has a subcommand that comes from a variable"),
        // These refresh package metadata from the network first.
        "list" | "info" | "show" | "search" | "home"
            if matches!(
                name,
                "dnf" | "yum" | "zypper" | "snap" | "brew" | "port" | "poetry"
            ) =>
        {
            c.risk(
                Risk::Network,
                "may refresh package metadata from the network",
            )
        }
        "list" | "info" | "show" | "policy" | "config" | "--version" | "version" | "help"
        | "env" | "which" => c.read_only(),
        "remove" | "uninstall" | "purge" | "autoremove" | "erase" => {
            c.risk(Risk::Delete, "removes packages")
        }
        "run" | "exec" => c.unknown(&format!("`{name} {}` runs arbitrary code", sub.text)),
        _ => c.risk(Risk::Network, "downloads or manages packages"),
    }
}
