//! Wrappers: commands that run another command (`sudo`, `env`, `xargs`, shells...).

use super::args::{OptSpec, operands, parse_opts, skip_opts};
use super::{Cmd, Effect};
use crate::display;
use crate::risk::Risk;
use crate::word::Arg;
pub(super) fn wrap_simple(c: &mut Cmd<'_>, name: &str, spec: &OptSpec) {
    match skip_opts(c.args, spec, name) {
        Ok(i) if i >= c.args.len() => c.read_only(),
        Ok(i) => {
            let inner = c.args[i..].to_vec();
            c.run(inner, name);
        }
        Err(reason) => c.unknown(&format!("cannot be analysed: {reason}")),
    }
}

pub(super) fn wrap_privileged(c: &mut Cmd<'_>, name: &str) {
    c.unknown("runs a command as another user");
    let spec = OptSpec {
        short_val: "CDghprtTUuRc",
        short_flag: "AbEHKklnPSVvBNLs",
        long_val: &[
            "close-from",
            "chdir",
            "group",
            "host",
            "prompt",
            "chroot",
            "role",
            "type",
            "command-timeout",
            "other-user",
            "user",
            "command",
        ],
        long_flag: &[
            "askpass",
            "background",
            "preserve-env",
            "set-home",
            "remove-timestamp",
            "reset-timestamp",
            "list",
            "non-interactive",
            "preserve-groups",
            "stdin",
            "version",
            "validate",
            "bell",
            "no-update",
            "login",
            "shell",
        ],
    };
    if let Ok(i) = skip_opts(c.args, &spec, name)
        && i < c.args.len()
    {
        let inner = c.args[i..].to_vec();
        c.run(inner, name);
    }
}

/// Environment variables that change which code runs or how, so setting
/// them turns even a read-only command into arbitrary code.
pub(crate) fn dangerous_env_var(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "PATH",
        "BASH_ENV",
        "ENV",
        "IFS",
        "SHELLOPTS",
        "BASHOPTS",
        "PS0",
        "PS1",
        "PS2",
        "PS3",
        "PS4",
        "PROMPT_COMMAND",
        "HISTFILE",
        "INPUTRC",
        "FPATH",
        "GLIBC_TUNABLES",
        "TERMINFO_DIRS",
        "TERMCAP",
        "XDG_CONFIG_DIRS",
        "LESSKEYIN",
        "LESSKEY_CONTENT",
        "GOFLAGS",
        "GOTOOLCHAIN",
        "GOROOT",
        "GOENV",
        "HOME",
        "XDG_CONFIG_HOME",
        "ZDOTDIR",
        "CDPATH",
        "GLOBIGNORE",
        "EDITOR",
        "VISUAL",
        "PAGER",
        "MANPAGER",
        "BROWSER",
        "LESSOPEN",
        "LESSCLOSE",
        "LESSKEY",
        "NODE_OPTIONS",
        "NODE_PATH",
        "PERL5OPT",
        "PERL5LIB",
        "PERLLIB",
        "RUBYOPT",
        "RUBYLIB",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "RUSTC",
        "RUSTDOC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTFLAGS",
        "RUSTDOCFLAGS",
        "CARGO_HOME",
        "CARGO_ENCODED_RUSTFLAGS",
        "SSH_ASKPASS",
        "SUDO_ASKPASS",
        "MAKEFLAGS",
        "CC",
        "CXX",
        "LD",
        "AR",
        "TMPDIR",
        "SHELL",
        "TERMINFO",
        "PKG_CONFIG_PATH",
        "GCONV_PATH",
        "HOSTALIASES",
        "LOCPATH",
        "NLSPATH",
        "MALLOC_CHECK_",
        "OPENSSL_CONF",
        "SSL_CERT_FILE",
        "CURL_HOME",
        "WGETRC",
        "NPM_CONFIG_PREFIX",
        "npm_config_script_shell",
        "PYTHONWARNINGS",
        "GIT_DIR",
    ];
    const PREFIXES: &[&str] = &[
        "LD_",
        "DYLD_",
        "PYTHON",
        "GIT_",
        "RUSTUP_",
        "PIP_",
        "YARN_",
        "DOCKER_",
        "CONTAINER_",
        "FZF_",
        // `BASH_ENV`, `BASH_CMDS` (the command hash table: `BASH_CMDS[ls]=/bin/rm`),
        // `BASH_ALIASES`, `BASH_FUNC_*`, `BASH_XTRACEFD`, `BASH_LOADABLES_PATH`, ...
        "BASH_",
        "NPM_CONFIG_",
        "npm_config_",
        "CARGO_TARGET_",
        "CARGO_BUILD_",
        "CARGO_REGISTRIES_",
        "CARGO_HTTP_",
        "CARGO_NET_",
    ];
    const SUFFIXES: &[&str] = &[
        "_PAGER",
        "_EDITOR",
        "_COMMAND",
        "_ASKPASS",
        "_PROXY",
        "_proxy",
        "_RUNNER",
        "_WRAPPER",
        "_LINKER",
        "_OPTIONS",
        // Tool configuration files (`RIPGREP_CONFIG_PATH` can set `--pre`).
        "_CONFIG_PATH",
        "_CONFIG_DIR",
        "_CONFIG_FILE",
    ];
    /// Benign variables under the prefixes above that agents commonly set.
    const BENIGN: &[&str] = &[
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_AUTHOR_DATE",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_COMMITTER_DATE",
        "GIT_TERMINAL_PROMPT",
        "GIT_PAGER_IN_USE",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_JOBS",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONHASHSEED",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "GIT_OPTIONAL_LOCKS",
    ];
    if BENIGN.contains(&name) {
        return false;
    }
    // `GIT_PAGER` and friends are covered by the suffix rule too, but the
    // blanket prefix rules matter more: when in doubt, it is dangerous.
    EXACT.contains(&name)
        || PREFIXES.iter().any(|p| name.starts_with(p))
        || SUFFIXES.iter().any(|s| name.ends_with(s))
}

pub(super) fn wrap_env(c: &mut Cmd<'_>) {
    let spec = OptSpec {
        short_val: "uC",
        short_flag: "i0v",
        long_val: &["unset", "chdir"],
        long_flag: &[
            "ignore-environment",
            "null",
            "debug",
            "default-signal",
            "ignore-signal",
            "block-signal",
            "list-signal-handling",
        ],
    };
    let parsed = match parse_opts(c.args, &spec, "env") {
        Ok(p) => p,
        Err(reason) => {
            c.unknown(&format!("cannot be analysed: {reason}"));
            return;
        }
    };
    let mut i = parsed.end;
    // Every value of `-u` (in a cluster, attached or not, or `--unset`).
    let unsets_dangerous = parsed
        .values(&["u", "unset"])
        .any(|v| v.dynamic || dangerous_env_var(&v.text));
    // A lone `-` is the old spelling of `-i`.
    let clears = parsed.has(&["i", "ignore-environment"])
        || c.args
            .get(i)
            .is_some_and(|a| a.is_static() && a.text == "-");
    if clears || unsets_dangerous {
        c.unknown(
            "clears or unsets environment variables, dropping the host's safety settings for git",
        );
    }
    if clears && c.args.get(i).is_some_and(|a| a.text == "-") {
        i += 1;
    }
    while i < c.args.len() {
        let a = &c.args[i];
        if a.dynamic {
            c.unknown("runs a command or sets variables that come from a variable");
            return;
        }
        let Some((var, _)) = a.text.split_once('=') else {
            break;
        };
        if dangerous_env_var(var) {
            c.unknown(&format!(
                "sets `{var}`, which can make programs run other code"
            ));
        }
        i += 1;
    }
    if i >= c.args.len() {
        c.read_only();
    } else {
        let inner = c.args[i..].to_vec();
        c.run(inner, "env");
    }
}

pub(super) fn wrap_nice(c: &mut Cmd<'_>) {
    // `nice -5 cmd` is the historical form of `nice -n 5 cmd`.
    let skip = usize::from(c.args.first().is_some_and(|a| {
        a.is_static()
            && a.text.len() > 1
            && a.text.starts_with('-')
            && a.text[1..].parse::<i32>().is_ok()
    }));
    let spec = OptSpec {
        short_val: "n",
        short_flag: "",
        long_val: &["adjustment"],
        long_flag: &[],
    };
    match skip_opts(&c.args[skip..], &spec, "nice") {
        Ok(i) if skip + i >= c.args.len() => c.read_only(),
        Ok(i) => {
            let inner = c.args[skip + i..].to_vec();
            c.run(inner, "nice");
        }
        Err(reason) => c.unknown(&format!("cannot be analysed: {reason}")),
    }
}

pub(super) fn wrap_timeout(c: &mut Cmd<'_>) {
    let spec = OptSpec {
        short_val: "sk",
        short_flag: "v",
        long_val: &["signal", "kill-after"],
        long_flag: &["preserve-status", "foreground", "verbose"],
    };
    match skip_opts(c.args, &spec, "timeout") {
        // The first operand is the duration; the command follows it.
        Ok(i) if i + 1 < c.args.len() => {
            let inner = c.args[i + 1..].to_vec();
            c.run(inner, "timeout");
        }
        Ok(_) => c.read_only(),
        Err(reason) => c.unknown(&format!("cannot be analysed: {reason}")),
    }
}

pub(super) fn wrap_time(c: &mut Cmd<'_>) {
    let spec = OptSpec {
        short_val: "fo",
        short_flag: "pavq",
        long_val: &["format", "output"],
        long_flag: &["portability", "append", "verbose", "quiet"],
    };
    // Only `time`'s own options count: `time grep -o x` is not `-o`.
    if let Ok(p) = parse_opts(c.args, &spec, "time")
        && p.has(&["o", "output"])
    {
        c.risk(Risk::Write, "writes its timings to a file");
    }
    wrap_simple(c, "time", &spec);
}

/// `exec [-cl] [-a name] command`: `-c` (in any cluster) empties the
/// environment.
pub(super) fn wrap_exec(c: &mut Cmd<'_>) {
    let spec = OptSpec {
        short_val: "a",
        short_flag: "cl",
        long_val: &[],
        long_flag: &[],
    };
    match parse_opts(c.args, &spec, "exec") {
        Ok(p) if p.has(&["c"]) => c.unknown(
            "runs a command with an empty environment, dropping the host's safety settings for git",
        ),
        Ok(p) if p.end >= c.args.len() => c.read_only(),
        Ok(p) => {
            let inner = c.args[p.end..].to_vec();
            c.run(inner, "exec");
        }
        Err(reason) => c.unknown(&format!("cannot be analysed: {reason}")),
    }
}

pub(super) fn wrap_command(c: &mut Cmd<'_>) {
    // `command [-p] -v name` looks a name up; a `-v` after the name belongs
    // to the command being run (`command rm -v x`).
    let lookup = c
        .args
        .iter()
        .take_while(|a| a.is_static() && a.text.starts_with('-'))
        .any(|a| a.text.starts_with('-') && (a.text.contains('v') || a.text.contains('V')));
    if lookup {
        c.risk(Risk::ReadOnly, "only looks a command up");
        return;
    }
    let spec = OptSpec {
        short_val: "",
        short_flag: "p",
        long_val: &[],
        long_flag: &[],
    };
    wrap_simple(c, "command", &spec);
}

pub(super) fn wrap_xargs(c: &mut Cmd<'_>) {
    let args = c.args;
    let mut replace: Option<String> = None;
    let mut i = 0;
    // Options end at the first operand, which starts the command: its own
    // options (`xargs sed -i ...`) must be left alone.
    while i < args.len() {
        let a = &args[i];
        if a.dynamic {
            c.unknown("has options or a command that come from a variable");
            return;
        }
        let t = a.text.as_str();
        if t == "--" {
            i += 1;
            break;
        }
        if !t.starts_with('-') || t == "-" {
            break;
        }
        if let Some(long) = t.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            match name {
                // Optional values, attached with `=` only.
                "replace" => replace = Some(value.unwrap_or("{}").to_owned()),
                "eof" | "max-lines" => {}
                "arg-file" | "delimiter" | "max-args" | "max-procs" | "max-chars" => {
                    if value.is_none() {
                        i += 1;
                    }
                }
                // Sets a variable in the command's environment.
                "process-slot-var" => {
                    let var = match value {
                        Some(v) => Some(Arg::literal(v)),
                        None => {
                            i += 1;
                            args.get(i).cloned()
                        }
                    };
                    match var {
                        Some(v) if v.is_static() && !dangerous_env_var(&v.text) => {}
                        _ => {
                            c.unknown(&format!(
                                "sets `{}` for the command it runs (`--process-slot-var`), which can make it run other code",
                                var.map_or_else(String::new, |v| display::clip(&v.text))
                            ));
                            return;
                        }
                    }
                }
                "null" | "no-run-if-empty" | "verbose" | "interactive" | "exit" | "open-tty"
                | "show-limits" => {}
                _ => {
                    c.unknown(&format!("option `{}` is not understood", display::clip(t)));
                    return;
                }
            }
            i += 1;
            continue;
        }
        let chars: Vec<char> = t[1..].chars().collect();
        for (j, &ch) in chars.iter().enumerate() {
            let rest: String = chars[j + 1..].iter().collect();
            match ch {
                '0' | 'r' | 't' | 'p' | 'x' | 'o' => continue,
                // Optional values, attached only.
                'i' => replace = Some(if rest.is_empty() { "{}".into() } else { rest }),
                'e' | 'l' => {}
                'a' | 'd' | 'E' | 'I' | 'L' | 'n' | 'P' | 's' => {
                    let value = if rest.is_empty() {
                        i += 1;
                        match args.get(i) {
                            Some(v) => v.text.clone(),
                            None => String::new(),
                        }
                    } else {
                        rest
                    };
                    if ch == 'I' {
                        replace = Some(value);
                    }
                }
                _ => {
                    c.unknown(&format!("option `-{ch}` is not understood"));
                    return;
                }
            }
            break;
        }
        i += 1;
    }
    let mut inner: Vec<Arg> = args[i.min(args.len())..].to_vec();
    if inner.is_empty() {
        inner.push(Arg::literal("echo"));
    }
    // The words read from standard input become arguments: they are
    // unknown to us, and with a replacement string they land in place.
    match replace {
        Some(r) if !r.is_empty() => {
            for a in &mut inner {
                if a.text.contains(&r) {
                    a.dynamic = true;
                }
            }
        }
        _ => inner.push(Arg {
            text: "<stdin>".into(),
            dynamic: true,
            glob: false,
            literal_code: false,
        }),
    }
    c.run(inner, "xargs");
}

pub(super) fn trap(c: &mut Cmd<'_>) {
    let ops = operands(c.args);
    match ops.first() {
        None => c.read_only(),
        Some(a) if a.dynamic => c.unknown("installs a handler that comes from a variable"),
        Some(a) if ops.len() == 1 || a.text == "-" || a.text.is_empty() => c.read_only(),
        Some(a) => {
            let text = a.text.clone();
            c.out.push(Effect::Script {
                text,
                via: "trap".into(),
            });
        }
    }
}

pub(super) fn shell(c: &mut Cmd<'_>, name: &str) {
    let args = c.args;
    let mut i = 0;
    let mut command_string = false;
    let mut reads_stdin = false;
    while i < args.len() {
        let a = &args[i];
        if a.dynamic {
            c.unknown("is given options or a script that come from a variable");
            return;
        }
        let t = a.text.as_str();
        if t == "--" {
            i += 1;
            break;
        }
        if t == "-o" || t == "+o" || t == "-O" || t == "+O" || t == "--rcfile" || t == "--init-file"
        {
            if t.ends_with("file") {
                c.unknown("reads a start-up file, which could run anything");
                return;
            }
            i += 2;
            continue;
        }
        if t.starts_with("--") {
            if !matches!(
                t,
                "--norc"
                    | "--noprofile"
                    | "--login"
                    | "--posix"
                    | "--noediting"
                    | "--restricted"
                    | "--verbose"
            ) {
                c.unknown(&format!("option `{}` is not understood", display::clip(t)));
                return;
            }
            i += 1;
            continue;
        }
        if (t.starts_with('-') || t.starts_with('+')) && t.len() > 1 {
            if t.contains('c') {
                command_string = true;
            }
            if t.contains('s') {
                reads_stdin = true;
            }
            // `-o name` and `-O name` take the next word, in a cluster too
            // (`bash -eo pipefail -c ...`).
            i += 1 + t[1..].chars().filter(|ch| matches!(ch, 'o' | 'O')).count();
            continue;
        }
        break;
    }
    if command_string {
        match args.get(i) {
            Some(script) if script.dynamic => c.unknown("runs a script that comes from a variable"),
            Some(script) => {
                let text = script.text.clone();
                c.out.push(Effect::Script {
                    text,
                    via: format!("{name} -c"),
                });
            }
            None => c.unknown("has `-c` but no script"),
        }
    } else if reads_stdin || i >= args.len() {
        c.out.push(Effect::StdinScript {
            via: name.to_owned(),
        });
    } else {
        let file = args[i].text.clone();
        c.unknown(&format!(
            "runs the script `{}`, which could do anything",
            display::clip(&file)
        ));
    }
}
