//! Dispatch: the one match from a program name to its rule.

use super::args::{OptSpec, any_dynamic, has_flag, has_short, operands, surely_flag};
use super::copying::{dd, rsync, tar};
use super::find::{fd, find, parallel, watch};
use super::git::git;
use super::text::{awk, sed};
use super::toolchains::{cargo, docker, go, npm, package_manager, pip, rustup, uv, yarn};
use super::wrappers::{
    dangerous_env_var, shell, trap, wrap_command, wrap_env, wrap_nice, wrap_privileged,
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
        "exec" if args.first().is_some_and(|a| {
            a.dynamic || (a.text.starts_with('-') && a.text.len() > 1 && a.text[1..].contains('c'))
        }) =>
        {
            c.unknown("runs a command with an empty environment, dropping the host's safety settings for git")
        }
        "exec" => wrap_simple(
            c,
            name,
            &OptSpec {
                short_val: "a",
                short_flag: "cl",
                long_val: &[],
                long_flag: &[],
            },
        ),
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
        "mapfile" | "readarray" if has_flag(args, &["-C"]) => {
            c.unknown("runs a callback for each line")
        }
        "hash" if has_flag(args, &["-p"]) => {
            c.unknown("re-points a command name at another program")
        }
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
            } else if name == "printf" && (has_flag(args, &["-v"])) {
                c.risk(Risk::ReadOnly, "only sets a shell variable");
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
            if surely_flag(args, &["--version", "-V", "--print", "-vV"]) {
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
        "sort" => {
            if has_flag(args, &["--compress-program"]) {
                c.unknown("runs a compression program");
            } else if has_flag(args, &["-o", "--output"]) || has_short(args, 'o') {
                c.write();
            } else {
                c.read_only();
            }
        }
        "uniq" | "xxd" => {
            if operands(args).len() >= 2 || (name == "xxd" && has_short(args, 'r')) {
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
        "tree" => {
            if has_flag(args, &["-o"]) {
                c.write()
            } else {
                c.read_only()
            }
        }
        "file" => {
            if has_flag(args, &["-C", "--compile"]) {
                c.write()
            } else {
                c.read_only()
            }
        }
        "date" => {
            // `date MMDDhhmm[[CC]YY][.ss]` and `date -s` set the clock.
            let sets_clock = operands(args).iter().any(|a| {
                !a.text.is_empty() && a.text.chars().all(|ch| ch.is_ascii_digit() || ch == '.')
            });
            if has_flag(args, &["-s", "--set"]) || sets_clock {
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
            } else if name == "less"
                && (has_flag(args, &["--log-file", "--LOG-FILE"])
                    || has_short(args, 'o')
                    || has_short(args, 'O'))
            {
                c.risk(Risk::Write, "copies its input to a log file (`-o`)");
            } else {
                c.read_only();
            }
        }
        "iconv" => {
            if has_flag(args, &["-o", "--output"]) || has_short(args, 'o') {
                c.risk(Risk::Write, "writes its output to a file (`-o`)");
            } else {
                c.read_only();
            }
        }
        "history" => {
            // `-w`/`-a` write the history file named by the operand; `-r`
            // and `-n` only read, `-c`/`-d`/`-s` change the in-memory list.
            if has_short(args, 'w') || has_short(args, 'a') {
                c.risk(Risk::Write, "writes the history to a file");
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
        "cloc" => {
            if has_flag(args, &["--extract-with", "--script-lang", "--force-lang-def", "--read-lang-def"]) {
                c.unknown("runs an extraction command or loads language definitions from a file");
            } else if has_flag(
                args,
                &[
                    "--out",
                    "--report-file",
                    "--sql",
                    "--sql-append",
                    "--write-lang-def",
                    "--write-lang-def-incl-dup",
                    "--categorized",
                    "--counted",
                    "--ignored",
                    "--found",
                    "--unique",
                    "--sum-reports",
                ],
            ) {
                c.risk(Risk::Write, "writes a report file");
            } else {
                c.read_only();
            }
        }
        "ag" | "ack" => {
            if has_flag(args, &["--pager"]) {
                c.unknown("runs a pager program");
            } else if name == "ack" && !surely_flag(args, &["--noenv"]) {
                c.unknown("reads a project `.ackrc`, which can name a pager program (pass `--noenv`)");
            } else {
                c.read_only();
            }
        }
        "fzf" => {
            if has_flag(args, &["--preview", "--bind", "--with-shell", "--listen", "--listen-unsafe", "--history"])
                || args.iter().any(|a| a.text.contains("execute") || a.text.contains("become"))
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
        "rg" => {
            if has_flag(args, &["--pre"]) {
                c.unknown("runs a preprocessor command on every file");
            } else {
                c.read_only();
            }
        }
        "bat" | "batcat" => {
            if has_flag(args, &["--pager"]) {
                c.unknown("runs a pager command")
            } else {
                c.read_only()
            }
        }
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
