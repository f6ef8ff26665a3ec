//! Dispatch: the one match from a program name to its rule.

use super::args::{OptSpec, any_dynamic, operands, surely_flag};
use super::copying::{dd, rsync, tar};
use super::find::{fd, find, parallel, watch};
use super::git::git;
use super::text::{awk, sed};
use super::toolchains::{cargo, docker, go, npm, package_manager, pip, rustup, uv, yarn};
use super::wrappers::{
    dangerous_env_var, shell, trap, wrap_command, wrap_env, wrap_exec, wrap_nice, wrap_privileged,
    wrap_simple, wrap_time, wrap_timeout, wrap_xargs,
};
use super::{Cmd, DELETE, Effect, INTERPRETERS, NETWORK, POSIX_SHELLS, READ_ONLY, WRITE};
use crate::risk::Risk;
use crate::word::Arg;
pub(super) fn dispatch(c: &mut Cmd<'_>, name: &str) {
    let args = c.args;
    match name {
        // Wrappers that run another command.
        "sudo" | "doas" | "su" | "runuser" | "pkexec" => wrap_privileged(c, name),
        "env" => wrap_env(c),
        "nice" => wrap_nice(c),
        "nohup" | "setsid" => wrap_simple(
            c,
            name,
            &OptSpec {
                short_val: "",
                short_flag: "cfw",
                long_val: &[],
                long_flag: &["ctty", "fork", "wait"],
            },
        ),
        "timeout" => wrap_timeout(c),
        "time" => wrap_time(c),
        "stdbuf" => wrap_simple(
            c,
            name,
            &OptSpec {
                short_val: "ioe",
                short_flag: "",
                long_val: &["input", "output", "error"],
                long_flag: &[],
            },
        ),
        "ionice" => wrap_simple(
            c,
            name,
            &OptSpec {
                short_val: "cnpPu",
                short_flag: "t",
                long_val: &["class", "classdata", "pid", "pgid", "uid"],
                long_flag: &["ignore"],
            },
        ),
        "command" => wrap_command(c),
        "builtin" => c.run(args.to_vec(), "builtin"),
        "exec" => wrap_exec(c),
        "busybox" => c.run(args.to_vec(), "busybox"),
        "xargs" => wrap_xargs(c),
        "find" => find(c),
        "fd" | "fdfind" => fd(c),
        "watch" => watch(c),
        "parallel" => parallel(c),
        "eval" => {
            if any_dynamic(args) {
                c.unknown("evaluates text that comes from a variable");
            } else {
                let text = args
                    .iter()
                    .map(|a| a.text.as_str())
                    .collect::<Vec<_>>()
                    .join(" ");
                c.out.push(Effect::Script {
                    text,
                    via: "eval".into(),
                });
            }
        }
        "trap" => trap(c),
        "source" | "." => c.unknown("runs the commands in a file, which could be anything"),
        "alias" | "unalias" if args.is_empty() => c.read_only(),
        "alias" => c.unknown("defines an alias, which can make later commands run something else"),
        "enable" | "complete" | "compgen" | "bind" | "fc" | "coproc" => {
            c.unknown("is a shell builtin that can run or load arbitrary code")
        }
        "jobs" => jobs(c),
        "export" | "declare" | "typeset" | "local" | "readonly"
            if args.iter().any(|a| {
                a.text
                    .split_once('=')
                    .is_some_and(|(n, _)| dangerous_env_var(n.trim_end_matches('+')))
            }) =>
        {
            c.unknown("sets a variable that can make programs run other code");
        }
        "let" | "declare" | "typeset" | "local" | "export" | "readonly" | "read" | "unset"
        | "mapfile" | "readarray" | "printf" | "wait" | "test" | "[" | "set" => {
            // All of these may evaluate an argument as an arithmetic
            // expression or array subscript, where bash runs `$(...)`.
            if args.iter().any(|a| a.literal_code) {
                c.unknown("evaluates text containing a command substitution as an arithmetic expression or subscript, which runs it");
            } else {
                c.read_only();
            }
        }

        // Shells and interpreters.
        n if POSIX_SHELLS.contains(&n) => shell(c, n),
        n if INTERPRETERS.contains(&n)
            || n.starts_with("python3.")
            || n.starts_with("python2.") =>
        {
            if args.len() == 1 && surely_flag(args, &["--version", "-V", "-v", "version"]) {
                c.read_only();
            } else {
                c.unknown("runs an interpreter, which can do anything");
            }
        }
        "npx" | "bunx" | "pnpx" => c.unknown("downloads and runs a package, which can do anything"),

        // Tools whose risk depends on their arguments.
        "git" => git(c),
        "cargo" => cargo(c),
        "rustc" | "rustdoc" => {
            if rustc_only_prints(args) {
                c.read_only();
            } else {
                c.write();
            }
        }
        "npm" => npm(c),
        "yarn" | "pnpm" => yarn(c, name),
        "pip" | "pip3" => pip(c),
        "uv" => uv(c),
        "go" => go(c),
        "rustup" => rustup(c),
        "docker" | "podman" => docker(c),
        "apt" | "apt-get" | "aptitude" | "dnf" | "yum" | "pacman" | "apk" | "zypper" | "snap"
        | "brew" | "port" | "gem" | "bundle" | "conda" | "mamba" | "pipx" | "poetry" => {
            package_manager(c, name)
        }
        "apt-cache" => c.read_only(),
        "dpkg" | "rpm" => {
            if surely_flag(
                args,
                &[
                    "-l",
                    "-L",
                    "-s",
                    "-S",
                    "-p",
                    "-q",
                    "-qa",
                    "-qi",
                    "-ql",
                    "--list",
                    "--status",
                    "--search",
                    "--listfiles",
                    "--get-selections",
                    "--print-architecture",
                ],
            ) {
                c.read_only();
            } else {
                c.unknown("installs or changes system packages, running their scripts");
            }
        }
        "sed" => sed(c),
        "awk" | "gawk" | "mawk" | "nawk" => awk(c),
        // Their risky options are rows of `options::RISKY_OPTIONS`.
        "sort" | "tree" | "file" | "iconv" | "history" | "cloc" | "ag" | "rg" | "bat"
        | "batcat" => c.read_only(),
        "uniq" | "xxd" => {
            if operands(args).len() >= 2 {
                c.write();
            } else {
                c.read_only();
            }
        }
        "tee" => {
            let targets: Vec<&Arg> = operands(args);
            if targets
                .iter()
                .all(|a| a.is_static() && is_null_device(&a.text))
            {
                c.read_only();
            } else if targets
                .iter()
                .any(|a| a.is_static() && is_net_device(&a.text))
            {
                c.network();
            } else {
                c.write();
            }
        }
        "date" => {
            // `date MMDDhhmm[[CC]YY][.ss]` and `date -s` set the clock.
            let sets_clock = operands(args).iter().any(|a| {
                !a.text.is_empty() && a.text.chars().all(|ch| ch.is_ascii_digit() || ch == '.')
            });
            if sets_clock {
                c.unknown("sets the system clock");
            } else {
                c.read_only();
            }
        }
        "hostname" => {
            if operands(args).is_empty() {
                c.read_only()
            } else {
                c.unknown("changes the host name")
            }
        }
        "less" | "more" | "most" => {
            if args.iter().any(|a| a.dynamic || a.text.starts_with('+')) {
                c.unknown("is given start-up commands, which can run a shell");
            } else {
                c.read_only();
            }
        }
        "ptx" => {
            // `ptx [INPUT [OUTPUT]]` under `-G`; otherwise every operand is
            // an input, but that depends on options: assume a write.
            if operands(args).len() >= 2 {
                c.risk(Risk::Write, "may write its second operand");
            } else {
                c.read_only();
            }
        }
        "ack" => {
            if !surely_flag(args, &["--noenv"]) {
                c.unknown(
                    "reads a project `.ackrc`, which can name a pager program (pass `--noenv`)",
                );
            } else {
                c.read_only();
            }
        }
        "fzf" => {
            if args
                .iter()
                .any(|a| a.text.contains("execute") || a.text.contains("become"))
            {
                c.unknown("runs commands (`--preview`, `--bind`) or listens on a port");
            } else {
                c.read_only();
            }
        }
        "getent" => c.risk(
            Risk::Network,
            "looks names up through NSS, which may query DNS or directory servers",
        ),
        "dd" => dd(c),
        "tar" | "bsdtar" => tar(c),
        "unzip" => {
            if surely_flag(args, &["-l", "-t", "-v", "-Z", "-z"]) {
                c.read_only()
            } else {
                c.write()
            }
        }
        "rsync" => rsync(c),
        "ldd" => c.unknown("may execute the program it inspects"),
        "kill" | "pkill" | "killall" => {
            if surely_flag(args, &["-l", "-L", "--list"]) {
                c.read_only();
            } else {
                c.risk(Risk::Delete, "terminates processes");
            }
        }

        n if READ_ONLY.contains(&n) => c.read_only(),
        n if DELETE.contains(&n) => c.delete(),
        n if NETWORK.contains(&n) => c.network(),
        n if WRITE.contains(&n) => c.write(),
        _ => {
            let reason = format!(
                "`{}` is not a known command, so it could do anything",
                c.shown
            );
            c.out.push(Effect::Unrecognised(reason));
        }
    }
}

pub(super) fn is_null_device(path: &str) -> bool {
    matches!(
        path,
        "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty"
    ) || path
        .strip_prefix("/dev/fd/")
        .is_some_and(|n| n.parse::<u32>().is_ok())
}

pub(super) fn is_net_device(path: &str) -> bool {
    path.starts_with("/dev/tcp/") || path.starts_with("/dev/udp/")
}

/// `jobs -x command [args]` runs the command (with job specs replaced by
/// process ids); any other `jobs` only lists jobs.
fn jobs(c: &mut Cmd<'_>) {
    let args = c.args;
    let mut i = 0;
    let mut execute = false;
    while let Some(a) = args.get(i) {
        if a.dynamic {
            c.unknown("has options that come from a variable, which could be `-x`");
            return;
        }
        if a.text == "--" {
            i += 1;
            break;
        }
        if a.text.len() < 2 || !a.text.starts_with('-') {
            break;
        }
        execute |= a.text.contains('x');
        i += 1;
    }
    if execute {
        c.run(args[i..].to_vec(), "jobs -x");
    } else {
        c.read_only();
    }
}

/// `rustc -V`, `rustc --version --verbose` and `rustc --print <info>` only
/// print; anything else (an input file, `--print` of what a compilation
/// produces, ...) compiles.
fn rustc_only_prints(args: &[Arg]) -> bool {
    const INFO: &[&str] = &[
        "sysroot",
        "cfg",
        "target-list",
        "target-cpus",
        "target-features",
        "host-tuple",
        "target-libdir",
        "split-debuginfo",
        "code-models",
        "relocation-models",
        "tls-models",
        "stack-protector-strategies",
        "calling-conventions",
        "all-target-specs-json",
        "target-spec-json",
        "deployment-target",
        "supported-crate-types",
    ];
    if args.is_empty() {
        return false;
    }
    let mut i = 0;
    while let Some(a) = args.get(i) {
        if !a.is_static() {
            return false;
        }
        match a.text.as_str() {
            "--version" | "-V" | "-vV" | "-Vv" | "--verbose" | "-v" => {}
            "--print" => match args.get(i + 1) {
                Some(v) if v.is_static() && INFO.contains(&v.text.as_str()) => i += 1,
                _ => return false,
            },
            t => match t.strip_prefix("--print=") {
                Some(v) if INFO.contains(&v) => {}
                _ => return false,
            },
        }
        i += 1;
    }
    true
}
