//! Command knowledge: what a single simple command does, given its expanded
//! argv.
//!
//! This module is a pure function of the argv. It does not recurse itself:
//! when a command runs another command (`sudo`, `xargs`, `find -exec`,
//! `sh -c`, ...) it returns an [`Effect::Run`] or [`Effect::Script`] and the
//! walker in `parse.rs` classifies that nested command in its own right.
//!
//! Invariants every rule must keep:
//! - Anything not positively known is [`Risk::Unknown`]; the table is an
//!   allow-list of understood behaviour, never a deny-list.
//! - A dynamic argument (see [`Arg::dynamic`]) may be *any* word. Checks
//!   that would raise the risk treat it as matching ([`has_flag`] and
//!   friends); checks that would lower the risk only accept static words.
//! - GNU tools accept options after operands, so flags are searched across
//!   all arguments up to `--`, not just at the front.

use crate::display;
use crate::risk::Risk;
use crate::word::Arg;

/// One consequence of running a command.
#[derive(Debug)]
pub(crate) enum Effect {
    /// The command itself carries this risk, for this reason.
    Risk(Risk, String),
    /// The command runs another command with this argv.
    Run { argv: Vec<Arg>, via: String },
    /// The command runs this text as a shell script.
    Script { text: String, via: String },
    /// The command runs a shell script read from its standard input.
    StdinScript { via: String },
    /// The command writes (or may write) a protected location; the reason
    /// names it. See `protect.rs`.
    Protected(String),
    /// The command name is not in the table. It is `unknown` unless the
    /// script defines a shell function of that name (whose body is then
    /// classified where it is defined).
    Unrecognised(String),
}

/// Directories whose programs are the system's, so that `/bin/rm` can be
/// looked up as `rm`. A program anywhere else (`./rm`, `/tmp/rm`,
/// `~/bin/rm`) may be a file the agent wrote, so its name proves nothing.
const SYSTEM_DIRS: &[&str] = &[
    "/bin/",
    "/sbin/",
    "/usr/bin/",
    "/usr/sbin/",
    "/usr/local/bin/",
    "/usr/local/sbin/",
    "/opt/homebrew/bin/",
];

/// Resolves the word in command position to the name looked up in the
/// table, or explains why it cannot be trusted.
pub(crate) fn program_name(word: &str) -> Result<&str, String> {
    if !word.contains('/') {
        return Ok(word);
    }
    for dir in SYSTEM_DIRS {
        if let Some(base) = word.strip_prefix(dir)
            && !base.is_empty()
            && !base.contains('/')
            && base != ".."
            && base != "."
        {
            return Ok(base);
        }
    }
    Err(format!(
        "`{}` runs a program by path outside the system directories, which could be anything",
        display::clip(word)
    ))
}

/// Names of shells whose `-c` string we parse as a script.
const POSIX_SHELLS: &[&str] = &["sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash"];

/// Interpreters that run arbitrary code given to them.
const INTERPRETERS: &[&str] = &[
    "python",
    "python2",
    "python3",
    "pypy",
    "pypy3",
    "node",
    "nodejs",
    "deno",
    "bun",
    "perl",
    "ruby",
    "php",
    "lua",
    "luajit",
    "Rscript",
    "R",
    "julia",
    "java",
    "osascript",
    "pwsh",
    "powershell",
    "tclsh",
    "wish",
    "expect",
    "irb",
    "ghci",
    "runghc",
    "swift",
    "dotnet",
    "erl",
    "elixir",
    "groovy",
    "scala",
    "kotlin",
    "fish",
    "csh",
    "tcsh",
    "ipython",
    "jshell",
];

/// Commands that only read, whatever their arguments (options that would
/// change that are handled by dedicated rules below, not here).
const READ_ONLY: &[&str] = &[
    "ls",
    "cat",
    "head",
    "tail",
    "grep",
    "egrep",
    "fgrep",
    "zgrep",
    "wc",
    "echo",
    "pwd",
    "true",
    "false",
    "stat",
    "du",
    "df",
    "which",
    "whereis",
    "type",
    "cut",
    "tr",
    "cmp",
    "diff",
    "diff3",
    "jq",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "whoami",
    "id",
    "groups",
    "uname",
    "nproc",
    "printenv",
    "seq",
    "sleep",
    "rev",
    "nl",
    "od",
    "hexdump",
    "base64",
    "base32",
    "md5sum",
    "sha1sum",
    "sha224sum",
    "sha256sum",
    "sha384sum",
    "sha512sum",
    "b2sum",
    "cksum",
    "sum",
    "column",
    "fold",
    "fmt",
    "paste",
    "join",
    "comm",
    "expand",
    "unexpand",
    "strings",
    "tac",
    "ps",
    "free",
    "uptime",
    "locale",
    "getconf",
    "cal",
    "expr",
    "numfmt",
    "cd",
    "pushd",
    "popd",
    "dirs",
    ":",
    "exit",
    "return",
    "break",
    "continue",
    "shift",
    "wait",
    "jobs",
    "times",
    "tty",
    "clear",
    "tput",
    "lsblk",
    "lscpu",
    "arch",
    "logname",
    "users",
    "who",
    "w",
    "zcat",
    "bzcat",
    "xzcat",
    "zstdcat",
    "look",
    "exa",
    "eza",
    "lsd",
    "nm",
    "objdump",
    "readelf",
    "size",
    "pgrep",
    "pidof",
    "shasum",
    "uuidgen",
    "tsort",
    "shellcheck",
    "tokei",
    "pr",
    "factor",
    "yes",
    "shopt",
    "umask",
    "ulimit",
    "hash",
    "help",
    "dircolors",
];

/// Commands that only delete.
const DELETE: &[&str] = &["rm", "rmdir", "unlink", "shred", "srm", "wipe"];

/// Commands whose purpose is talking to the network.
const NETWORK: &[&str] = &[
    "curl",
    "wget",
    "nc",
    "ncat",
    "netcat",
    "socat",
    "ssh",
    "scp",
    "sftp",
    "ftp",
    "tftp",
    "telnet",
    "ping",
    "ping6",
    "dig",
    "nslookup",
    "host",
    "traceroute",
    "tracepath",
    "mtr",
    "whois",
    "http",
    "https",
    "xh",
    "aria2c",
    "gh",
    "glab",
    "nmap",
    "ssh-keyscan",
    "kubectl",
    "aws",
    "gcloud",
    "az",
    "lftp",
    "mosh",
];

/// Commands that create or modify files and nothing worse.
const WRITE: &[&str] = &[
    "touch",
    "mkdir",
    "cp",
    "mv",
    "install",
    "ln",
    "chmod",
    "chown",
    "chgrp",
    "truncate",
    "patch",
    "mkfifo",
    "split",
    "csplit",
    "sponge",
    "rename",
    "make",
    "gmake",
    "cmake",
    "ninja",
    "meson",
    "gcc",
    "g++",
    "cc",
    "c++",
    "clang",
    "clang++",
    "javac",
    "zip",
    "gzip",
    "gunzip",
    "bzip2",
    "bunzip2",
    "xz",
    "unxz",
    "zstd",
    "unzstd",
    "lz4",
    "mktemp",
    "tsc",
    "prettier",
    "black",
    "ruff",
    "gofmt",
    "rustfmt",
    "clang-format",
    "mvn",
    "gradle",
    "ant",
    "pytest",
    "py.test",
    "jest",
    "vitest",
    "mocha",
    "tox",
    "nox",
    "phpunit",
    "rspec",
    "eslint",
    "rake",
];

/// Classifies one simple command. `argv[0]` must be static and non-empty;
/// the caller handles dynamic command names.
pub(crate) fn classify(argv: &[Arg]) -> Vec<Effect> {
    let mut c = Cmd::new(argv);
    let name = match program_name(&argv[0].text) {
        Ok(n) => n.to_owned(),
        Err(reason) => {
            c.out.push(Effect::Risk(Risk::Unknown, reason));
            return c.out;
        }
    };
    dispatch(&mut c, &name);
    // Unknown too: `sed -i` with a run-time argument is unknown, and an
    // allow rule for `sed` must still not cover a write to `.git/config`.
    if matches!(c.own_risk(), Risk::Write | Risk::Unknown) {
        protected_writes(&mut c, &name);
    }
    c.out
}

/// Commands whose operands are the files they write, so that an operand
/// only known at run time (`cp x "$D"`, `xargs sed -i`, `find -exec chmod`)
/// may be a protected file.
const FILE_WRITERS: &[&str] = &[
    "touch",
    "mkdir",
    "cp",
    "mv",
    "install",
    "ln",
    "chmod",
    "chown",
    "chgrp",
    "truncate",
    "patch",
    "mkfifo",
    "split",
    "csplit",
    "sponge",
    "rename",
    "tee",
    "sed",
    "dd",
    "tar",
    "bsdtar",
    "unzip",
    "rsync",
    "zip",
    "gzip",
    "gunzip",
    "bzip2",
    "bunzip2",
    "xz",
    "unxz",
    "zstd",
    "unzstd",
    "lz4",
    "sort",
    "uniq",
    "xxd",
    "iconv",
    "history",
    "find",
    "tree",
    "file",
    "prettier",
    "black",
    "ruff",
    "gofmt",
    "rustfmt",
    "clang-format",
    "cloc",
    "ptx",
    "less",
];

/// A write aimed at a protected location (see `protect.rs`) is worth more
/// than a write: it is `unknown` and asks in every profile.
fn protected_writes(c: &mut Cmd<'_>, name: &str) {
    let mut hits: Vec<String> = Vec::new();
    for a in c.args {
        let path = a.text.split_once('=').map_or(a.text.as_str(), |(_, v)| v);
        let from_expansion = a.text.contains('$') || a.text.contains('`');
        if !a.dynamic && crate::protect::protected_path(path) {
            hits.push(crate::protect::describe(path));
        } else if a.glob && !from_expansion && crate::protect::glob_may_be_protected(path) {
            hits.push(format!(
                "the pattern `{}` may match a protected file",
                display::clip(path)
            ));
        } else if a.dynamic && FILE_WRITERS.contains(&name) && (from_expansion || !a.glob) {
            hits.push(format!(
                "`{}` is only known at run time and may name a protected file",
                display::clip(&a.text)
            ));
        }
    }
    if hits.is_empty() {
        return;
    }
    c.risk(
        Risk::Unknown,
        "writes where it may touch a protected location (git internals, Capstan's config, shell start-up files, tool configuration or system files)",
    );
    for hit in hits {
        let reason = format!("`{}` writes: {hit}", c.shown);
        c.out.push(Effect::Protected(reason));
    }
}

struct Cmd<'a> {
    args: &'a [Arg],
    shown: String,
    out: Vec<Effect>,
}

impl<'a> Cmd<'a> {
    fn new(argv: &'a [Arg]) -> Self {
        let words: Vec<&str> = argv.iter().map(|a| a.text.as_str()).collect();
        Cmd {
            args: &argv[1..],
            shown: display::argv(&words),
            out: Vec::new(),
        }
    }

    fn risk(&mut self, risk: Risk, what: &str) {
        self.out
            .push(Effect::Risk(risk, format!("`{}` {what}", self.shown)));
    }

    fn read_only(&mut self) {
        self.risk(Risk::ReadOnly, "only reads");
    }

    fn write(&mut self) {
        self.risk(Risk::Write, "writes files");
    }

    fn delete(&mut self) {
        self.risk(Risk::Delete, "deletes files");
    }

    fn network(&mut self) {
        self.risk(Risk::Network, "reaches the network");
    }

    fn unknown(&mut self, what: &str) {
        self.risk(Risk::Unknown, what);
    }

    fn run(&mut self, argv: Vec<Arg>, via: &str) {
        if argv.is_empty() {
            return;
        }
        self.out.push(Effect::Run {
            argv,
            via: via.to_owned(),
        });
    }

    fn own_risk(&self) -> Risk {
        self.out
            .iter()
            .filter_map(|e| match e {
                Effect::Risk(r, _) => Some(*r),
                _ => None,
            })
            .max()
            .unwrap_or(Risk::ReadOnly)
    }
}

// ---------------------------------------------------------------------------
// Argument helpers.

/// The arguments that may still be options: those before a literal `--`.
fn opts(args: &[Arg]) -> &[Arg] {
    match args.iter().position(|a| a.is_static() && a.text == "--") {
        Some(i) => &args[..i],
        None => args,
    }
}

/// Whether any option is one of `names` (long names also match `--name=...`).
/// Pessimistic: a dynamic argument counts as a match.
fn has_flag(args: &[Arg], names: &[&str]) -> bool {
    opts(args).iter().any(|a| {
        a.dynamic
            || names.iter().any(|n| {
                a.text == *n
                    || (n.starts_with("--")
                        && a.text.strip_prefix(n).is_some_and(|r| r.starts_with('=')))
            })
    })
}

/// Whether any short-option cluster (`-xyz`) contains `c`. Pessimistic.
fn has_short(args: &[Arg], c: char) -> bool {
    opts(args).iter().any(|a| {
        a.dynamic
            || (a.text.starts_with('-') && !a.text.starts_with("--") && a.text[1..].contains(c))
    })
}

/// Like [`has_flag`] but only static words count: for checks that lower risk.
fn surely_flag(args: &[Arg], names: &[&str]) -> bool {
    opts(args)
        .iter()
        .any(|a| a.is_static() && names.contains(&a.text.as_str()))
}

fn any_dynamic(args: &[Arg]) -> bool {
    args.iter().any(|a| a.dynamic)
}

/// Operands: arguments that do not look like options (all of them after
/// `--`). Dynamic words are included since they may be operands.
fn operands(args: &[Arg]) -> Vec<&Arg> {
    let mut out = Vec::new();
    let mut after = false;
    for a in args {
        if after || a.dynamic {
            out.push(a);
        } else if a.text == "--" {
            after = true;
        } else if !a.text.starts_with('-') || a.text == "-" {
            out.push(a);
        }
    }
    out
}

/// Describes a command's options, for finding where the wrapped command or
/// first operand starts.
struct OptSpec {
    /// Short options taking a value (`-n 5` or `-n5`).
    short_val: &'static str,
    /// Short options without a value.
    short_flag: &'static str,
    /// Long options taking a value (`--name v` or `--name=v`), without `--`.
    long_val: &'static [&'static str],
    /// Long options without a value, without `--`.
    long_flag: &'static [&'static str],
}

/// Returns the index of the first operand after the options described by
/// `spec`, or a reason if the options cannot be understood. Unknown options
/// are refused rather than guessed at, since guessing wrong shifts where
/// the wrapped command starts.
fn skip_opts(args: &[Arg], spec: &OptSpec, who: &str) -> Result<usize, String> {
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a.dynamic {
            return Err(format!("the options of `{who}` come from a variable"));
        }
        let t = a.text.as_str();
        if t == "--" {
            return Ok(i + 1);
        }
        if let Some(long) = t.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, _)) => (n, true),
                None => (long, false),
            };
            if spec.long_val.contains(&name) {
                i += if inline { 1 } else { 2 };
                continue;
            }
            if spec.long_flag.contains(&name) && !inline {
                i += 1;
                continue;
            }
            return Err(format!(
                "`{who}` option `{}` is not understood",
                display::clip(t)
            ));
        }
        if t.len() > 1 && t.starts_with('-') {
            let chars: Vec<char> = t[1..].chars().collect();
            let mut j = 0;
            let mut consumed_next = false;
            while j < chars.len() {
                let ch = chars[j];
                if spec.short_val.contains(ch) {
                    if j + 1 == chars.len() {
                        consumed_next = true;
                    }
                    break;
                }
                if !spec.short_flag.contains(ch) {
                    return Err(format!(
                        "`{who}` option `{}` is not understood",
                        display::clip(t)
                    ));
                }
                j += 1;
            }
            i += if consumed_next { 2 } else { 1 };
            continue;
        }
        return Ok(i);
    }
    Ok(args.len())
}

// ---------------------------------------------------------------------------
// Dispatch.

fn dispatch(c: &mut Cmd<'_>, name: &str) {
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

fn is_null_device(path: &str) -> bool {
    matches!(
        path,
        "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty"
    ) || path
        .strip_prefix("/dev/fd/")
        .is_some_and(|n| n.parse::<u32>().is_ok())
}

fn is_net_device(path: &str) -> bool {
    path.starts_with("/dev/tcp/") || path.starts_with("/dev/udp/")
}

// ---------------------------------------------------------------------------
// Wrappers.

fn wrap_simple(c: &mut Cmd<'_>, name: &str, spec: &OptSpec) {
    match skip_opts(c.args, spec, name) {
        Ok(i) if i >= c.args.len() => c.read_only(),
        Ok(i) => {
            let inner = c.args[i..].to_vec();
            c.run(inner, name);
        }
        Err(reason) => c.unknown(&format!("cannot be analysed: {reason}")),
    }
}

fn wrap_privileged(c: &mut Cmd<'_>, name: &str) {
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
        "PS4",
        "PROMPT_COMMAND",
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
        "BASH_FUNC",
    ];
    const PREFIXES: &[&str] = &[
        "LD_",
        "DYLD_",
        "PYTHON",
        "GIT_",
        "BASH_FUNC_",
        "NPM_CONFIG_",
        "npm_config_",
        "CARGO_TARGET_",
        "CARGO_BUILD_",
        "CARGO_REGISTRIES_",
        "CARGO_HTTP_",
        "CARGO_NET_",
    ];
    const SUFFIXES: &[&str] = &[
        "_PAGER", "_EDITOR", "_COMMAND", "_ASKPASS", "_PROXY", "_proxy", "_RUNNER", "_WRAPPER",
        "_LINKER", "_OPTIONS",
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

fn wrap_env(c: &mut Cmd<'_>) {
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
    let mut i = match skip_opts(c.args, &spec, "env") {
        Ok(i) => i,
        Err(reason) => {
            c.unknown(&format!("cannot be analysed: {reason}"));
            return;
        }
    };
    let own = &c.args[..i];
    let unsets_dangerous = own
        .windows(2)
        .any(|w| (w[0].text == "-u" || w[0].text == "--unset") && dangerous_env_var(&w[1].text))
        || own.iter().any(|a| {
            a.text
                .strip_prefix("--unset=")
                .or_else(|| a.text.strip_prefix("-u").filter(|v| !v.is_empty()))
                .is_some_and(dangerous_env_var)
        });
    if has_flag(own, &["-i", "--ignore-environment"]) || has_short(own, 'i') || unsets_dangerous {
        c.unknown(
            "clears or unsets environment variables, dropping the host's safety settings for git",
        );
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

fn wrap_nice(c: &mut Cmd<'_>) {
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

fn wrap_timeout(c: &mut Cmd<'_>) {
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

fn wrap_time(c: &mut Cmd<'_>) {
    let spec = OptSpec {
        short_val: "fo",
        short_flag: "pavq",
        long_val: &["format", "output"],
        long_flag: &["portability", "append", "verbose", "quiet"],
    };
    // Only `time`'s own options count: `time grep -o x` is not `-o`.
    if let Ok(i) = skip_opts(c.args, &spec, "time")
        && has_flag(&c.args[..i], &["-o", "--output"])
    {
        c.risk(Risk::Write, "writes its timings to a file");
    }
    wrap_simple(c, "time", &spec);
}

fn wrap_command(c: &mut Cmd<'_>) {
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

fn wrap_xargs(c: &mut Cmd<'_>) {
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
                "arg-file" | "delimiter" | "max-args" | "max-procs" | "max-chars"
                | "process-slot-var" => {
                    if value.is_none() {
                        i += 1;
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

fn trap(c: &mut Cmd<'_>) {
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

fn shell(c: &mut Cmd<'_>, name: &str) {
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
            i += 1;
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

// ---------------------------------------------------------------------------
// find and friends.

fn find(c: &mut Cmd<'_>) {
    let args = c.args;
    if any_dynamic(args) {
        c.unknown("has arguments from a variable, which could be `-delete` or `-exec`");
        return;
    }
    let mut i = 0;
    let mut risk = Risk::ReadOnly;
    let mut runs: Vec<Vec<Arg>> = Vec::new();
    while i < args.len() {
        let t = args[i].text.as_str();
        match t {
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                let start = i + 1;
                let Some(end) = args[start..]
                    .iter()
                    .position(|a| a.text == ";" || a.text == "+")
                else {
                    c.unknown("has an `-exec` without a terminating `;` or `+`");
                    return;
                };
                let mut inner: Vec<Arg> = args[start..start + end].to_vec();
                for a in &mut inner {
                    if a.text.contains("{}") {
                        a.dynamic = true;
                    }
                }
                if inner.is_empty() {
                    c.unknown("has an empty `-exec`");
                    return;
                }
                runs.push(inner);
                i = start + end + 1;
                continue;
            }
            "-delete" => {
                risk = risk.max(Risk::Delete);
            }
            "-fprint" | "-fprint0" | "-fprintf" | "-fls" => {
                risk = risk.max(Risk::Write);
            }
            _ => {}
        }
        i += 1;
    }
    match risk {
        Risk::Delete => c.risk(Risk::Delete, "deletes the files it finds"),
        Risk::Write => c.risk(Risk::Write, "writes its results to a file"),
        _ => c.read_only(),
    }
    for inner in runs {
        c.run(inner, "find -exec");
    }
}

fn fd(c: &mut Cmd<'_>) {
    let args = c.args;
    if let Some(pos) = args.iter().position(|a| {
        a.dynamic || matches!(a.text.as_str(), "-x" | "--exec" | "-X" | "--exec-batch")
    }) {
        if args[pos].dynamic {
            c.unknown("has arguments from a variable, which could be `--exec`");
            return;
        }
        c.read_only();
        let rest = &args[pos + 1..];
        let end = rest
            .iter()
            .position(|a| a.text == ";")
            .unwrap_or(rest.len());
        let mut inner: Vec<Arg> = rest[..end].to_vec();
        for a in &mut inner {
            if a.text.contains('{') {
                a.dynamic = true;
            }
        }
        if inner.is_empty() {
            c.unknown("has an empty `--exec`");
        } else {
            c.run(inner, "fd --exec");
        }
    } else {
        c.read_only();
    }
}

fn watch(c: &mut Cmd<'_>) {
    let spec = OptSpec {
        short_val: "nq",
        short_flag: "dtbegcxpwr",
        long_val: &["interval", "equexit", "differences"],
        long_flag: &[
            "differences",
            "no-title",
            "beep",
            "errexit",
            "chgexit",
            "color",
            "no-color",
            "exec",
            "precise",
            "no-wrap",
            "no-rerun",
        ],
    };
    match skip_opts(c.args, &spec, "watch") {
        Ok(i) if i < c.args.len() => {
            if has_flag(&c.args[..i], &["-x", "--exec"]) || has_short(&c.args[..i], 'x') {
                let inner = c.args[i..].to_vec();
                c.run(inner, "watch");
            } else if any_dynamic(&c.args[i..]) {
                c.unknown("runs a command that comes from a variable");
            } else {
                let text = c.args[i..]
                    .iter()
                    .map(|a| a.text.as_str())
                    .collect::<Vec<_>>()
                    .join(" ");
                c.out.push(Effect::Script {
                    text,
                    via: "watch".into(),
                });
            }
        }
        Ok(_) => c.unknown("has no command"),
        Err(reason) => c.unknown(&format!("cannot be analysed: {reason}")),
    }
}

fn parallel(c: &mut Cmd<'_>) {
    let args = c.args;
    if args
        .first()
        .is_none_or(|a| a.dynamic || a.text.starts_with('-'))
    {
        c.unknown("options of `parallel` are not analysed, and without a command it runs lines from its input");
        return;
    }
    let end = args
        .iter()
        .position(|a| a.text.starts_with(":::"))
        .unwrap_or(args.len());
    if any_dynamic(&args[..end]) {
        c.unknown("runs a command that comes from a variable");
        return;
    }
    let text = args[..end]
        .iter()
        .map(|a| a.text.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    c.out.push(Effect::Script {
        text,
        via: "parallel".into(),
    });
}

// ---------------------------------------------------------------------------
// Text processors with embedded languages.

fn sed(c: &mut Cmd<'_>) {
    let args = c.args;
    if any_dynamic(opts(args)) {
        c.unknown(
            "has arguments from a variable, which could be `-i` or a script that runs commands",
        );
        return;
    }
    let mut scripts: Vec<String> = Vec::new();
    let mut in_place = false;
    let mut script_file = false;
    let mut first_operand: Option<usize> = None;
    let mut i = 0;
    let mut end_of_opts = false;
    while i < args.len() {
        let t = args[i].text.as_str();
        if end_of_opts || !t.starts_with('-') || t == "-" {
            if first_operand.is_none() {
                first_operand = Some(i);
            }
            i += 1;
            continue;
        }
        if t == "--" {
            end_of_opts = true;
            i += 1;
            continue;
        }
        if let Some(long) = t.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (long, None),
            };
            match name {
                "in-place" => in_place = true,
                "expression" => match value {
                    Some(v) => scripts.push(v),
                    None => {
                        scripts.push(args.get(i + 1).map(|a| a.text.clone()).unwrap_or_default());
                        i += 1;
                    }
                },
                "file" => script_file = true,
                "line-length" if value.is_none() => i += 1,
                "quiet" | "silent" | "regexp-extended" | "separate" | "unbuffered"
                | "null-data" | "zero-terminated" | "posix" | "debug" | "sandbox"
                | "follow-symlinks" | "binary" | "line-length" | "help" | "version" => {}
                _ => {
                    c.unknown(&format!("option `{}` is not understood", display::clip(t)));
                    return;
                }
            }
            i += 1;
            continue;
        }
        let chars: Vec<char> = t[1..].chars().collect();
        let mut j = 0;
        while j < chars.len() {
            match chars[j] {
                'n' | 'E' | 'r' | 's' | 'u' | 'z' | 'b' => {}
                'i' => {
                    in_place = true;
                    break; // the rest of the cluster is the backup suffix
                }
                'e' | 'f' | 'l' => {
                    let rest: String = chars[j + 1..].iter().collect();
                    let value = if rest.is_empty() {
                        i += 1;
                        args.get(i).map(|a| a.text.clone()).unwrap_or_default()
                    } else {
                        rest
                    };
                    match chars[j] {
                        'e' => scripts.push(value),
                        'f' => script_file = true,
                        _ => {}
                    }
                    break;
                }
                other => {
                    c.unknown(&format!("option `-{other}` is not understood"));
                    return;
                }
            }
            j += 1;
        }
        i += 1;
    }
    if script_file {
        c.unknown("runs a sed script from a file, which may run commands");
        return;
    }
    if scripts.is_empty() {
        match first_operand {
            Some(idx) if args[idx].dynamic => {
                c.unknown("runs a sed script that comes from a variable");
                return;
            }
            Some(idx) => scripts.push(args[idx].text.clone()),
            None => {
                c.unknown("has no script");
                return;
            }
        }
    }
    let mut risk = if in_place {
        Risk::Write
    } else {
        Risk::ReadOnly
    };
    for s in &scripts {
        match sed_script_risk(s) {
            Ok(r) => risk = risk.max(r),
            Err(why) => {
                c.unknown(&why);
                return;
            }
        }
    }
    match risk {
        Risk::ReadOnly => c.read_only(),
        _ if in_place => c.risk(Risk::Write, "edits files in place"),
        _ => c.risk(risk, "writes files from its script"),
    }
}

/// Walks a sed script just far enough to find the commands that write
/// files (`w`, `W`, `s///w`) or run programs (`e`, `s///e`). Anything it
/// does not understand is an error, i.e. `unknown`.
pub(crate) fn sed_script_risk(script: &str) -> Result<Risk, String> {
    let s: Vec<char> = script.chars().collect();
    let mut i = 0;
    let mut risk = Risk::ReadOnly;
    let err = |what: &str| Err(format!("sed script {what}, so it may run commands"));
    let to_eol = |i: &mut usize| {
        while *i < s.len() && s[*i] != '\n' {
            *i += 1;
        }
    };
    // Reads a filename argument (to end of line) and returns it.
    let filename = |i: &mut usize| -> String {
        while *i < s.len() && s[*i] == ' ' {
            *i += 1;
        }
        let start = *i;
        while *i < s.len() && s[*i] != '\n' {
            *i += 1;
        }
        s[start..*i].iter().collect()
    };
    let write_risk = |f: &str| {
        if is_null_device(f.trim()) {
            Risk::ReadOnly
        } else {
            Risk::Write
        }
    };
    // Skips a delimited regex/replacement part starting after the delimiter.
    let delimited = |i: &mut usize, d: char| -> bool {
        while *i < s.len() {
            if s[*i] == '\\' {
                *i += 2;
                continue;
            }
            if s[*i] == d {
                *i += 1;
                return true;
            }
            if s[*i] == '\n' && d != '\n' {
                return false;
            }
            *i += 1;
        }
        false
    };
    while i < s.len() {
        let ch = s[i];
        if ch.is_whitespace() || ch == ';' {
            i += 1;
            continue;
        }
        // Addresses.
        loop {
            if i < s.len() && (s[i].is_ascii_digit() || s[i] == '$' || s[i] == '~' || s[i] == '+') {
                while i < s.len()
                    && (s[i].is_ascii_digit() || s[i] == '$' || s[i] == '~' || s[i] == '+')
                {
                    i += 1;
                }
            } else if i < s.len() && s[i] == '/' {
                i += 1;
                if !delimited(&mut i, '/') {
                    return err("has an unterminated address");
                }
                while i < s.len() && (s[i] == 'I' || s[i] == 'M') {
                    i += 1;
                }
            } else if i + 1 < s.len() && s[i] == '\\' {
                let d = s[i + 1];
                i += 2;
                if !delimited(&mut i, d) {
                    return err("has an unterminated address");
                }
                while i < s.len() && (s[i] == 'I' || s[i] == 'M') {
                    i += 1;
                }
            } else {
                break;
            }
            if i < s.len() && s[i] == ',' {
                i += 1;
                continue;
            }
            break;
        }
        while i < s.len() && (s[i] == ' ' || s[i] == '!') {
            i += 1;
        }
        if i >= s.len() {
            break;
        }
        let cmd = s[i];
        i += 1;
        match cmd {
            '{' | '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x'
            | 'z' | 'F' => {}
            'l' | 'L' | 'q' | 'Q' => {
                while i < s.len() && (s[i].is_ascii_digit() || s[i] == ' ') {
                    i += 1;
                }
            }
            '#' | ':' => to_eol(&mut i),
            'b' | 't' | 'T' | 'v' => {
                while i < s.len() && s[i] != ';' && s[i] != '\n' && s[i] != '}' {
                    i += 1;
                }
            }
            'a' | 'i' | 'c' => {
                // Text runs to the end of the line; `\` continues it.
                while i < s.len() && s[i] != '\n' {
                    if s[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            'r' | 'R' => {
                filename(&mut i);
            }
            'w' | 'W' => {
                let f = filename(&mut i);
                risk = risk.max(write_risk(&f));
            }
            'e' => return err("uses the `e` command, which runs a shell command"),
            's' | 'y' => {
                let Some(&d) = s.get(i) else {
                    return err("is truncated");
                };
                if d == '\\' || d == '\n' {
                    return err("uses an unusual delimiter");
                }
                i += 1;
                if !delimited(&mut i, d) || !delimited(&mut i, d) {
                    return err("has an unterminated `s` or `y` command");
                }
                if cmd == 's' {
                    while i < s.len() {
                        match s[i] {
                            'g' | 'p' | 'i' | 'I' | 'm' | 'M' | '0'..='9' => i += 1,
                            'e' => {
                                return err(
                                    "uses the `e` flag, which runs the result as a command",
                                );
                            }
                            'w' => {
                                i += 1;
                                let f = filename(&mut i);
                                risk = risk.max(write_risk(&f));
                            }
                            _ => break,
                        }
                    }
                }
            }
            _ => return err(&format!("has a command `{cmd}` that is not understood")),
        }
    }
    Ok(risk)
}

fn awk(c: &mut Cmd<'_>) {
    let args = c.args;
    let mut i = 0;
    let mut program: Option<&Arg> = None;
    while i < args.len() {
        let a = &args[i];
        if a.dynamic {
            c.unknown("has a program or options that come from a variable");
            return;
        }
        let t = a.text.as_str();
        match t {
            "-F" | "-v" => i += 2,
            "--" => {
                program = args.get(i + 1);
                break;
            }
            _ if t.starts_with("-F") || t.starts_with("-v") => i += 1,
            "-f" | "--file" | "-i" | "--include" | "-l" | "--load" | "-E" | "--exec" => {
                c.unknown("loads awk code or extensions from a file");
                return;
            }
            "-e" | "--source" => {
                program = args.get(i + 1);
                break;
            }
            _ if t.starts_with('-') && t.len() > 1 => {
                c.unknown(&format!("option `{}` is not understood", display::clip(t)));
                return;
            }
            _ => {
                program = Some(a);
                break;
            }
        }
    }
    match program {
        None => c.unknown("has no program"),
        Some(p) if p.dynamic => c.unknown("runs a program that comes from a variable"),
        Some(p) => {
            let text = &p.text;
            if text.contains("system")
                || text.contains('>')
                || text.contains('|')
                || text.contains('@')
            {
                c.unknown(
                    "has a program that may run commands or write files (`system`, `|` or `>`)",
                );
            } else {
                c.read_only();
            }
        }
    }
}

// ---------------------------------------------------------------------------
// git.

/// `git -c` keys that cannot make git run another program. Everything else
/// (pagers, editors, aliases, hooks, fsmonitor, ssh commands, filters,
/// credential helpers, includes, ...) is treated as arbitrary code.
fn git_config_safe(kv: &str) -> bool {
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

fn git(c: &mut Cmd<'_>) {
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

// ---------------------------------------------------------------------------
// Language toolchains and package managers.

fn cargo(c: &mut Cmd<'_>) {
    let args = c.args;
    if has_flag(args, &["--config"]) || args.iter().any(|a| a.text.starts_with("--config=")) {
        c.unknown("overrides cargo configuration, which can set runners, wrappers or linkers");
        return;
    }
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
        } else if matches!(t, "--version" | "-V" | "--list" | "--help" | "-h") {
            c.read_only();
            return;
        } else if t.starts_with('-') {
            i += 1;
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

fn npm(c: &mut Cmd<'_>) {
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
            if surely_flag(args, &["get", "list", "ls"]) {
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

fn yarn(c: &mut Cmd<'_>, name: &str) {
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
        "list" | "ls" | "why" | "help" | "bin" | "root" | "licenses" | "config" => c.read_only(),
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

fn pip(c: &mut Cmd<'_>) {
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
        "list" if has_flag(c.args, &["-o", "--outdated", "-u", "--uptodate"]) => {
            c.risk(Risk::Network, "asks the package index for newer versions")
        }
        "list" | "show" | "freeze" | "check" | "help" | "debug" | "inspect" | "hash" => {
            c.read_only()
        }
        "install" | "download" | "wheel" | "index" | "search" => c.network(),
        "uninstall" => c.risk(Risk::Delete, "removes packages"),
        "cache" | "config" => c.write(),
        _ => c.unknown("is not a known pip subcommand"),
    }
}

fn uv(c: &mut Cmd<'_>) {
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

fn go(c: &mut Cmd<'_>) {
    let Some(sub) = first_word(c.args) else {
        c.read_only();
        return;
    };
    match sub.text.as_str() {
        _ if sub.dynamic => c.unknown("has a subcommand that comes from a variable"),
        "version" | "help" => c.read_only(),
        "doc" | "list" => c.risk(Risk::Network, "may download modules to resolve packages"),
        "env" => {
            if has_flag(c.args, &["-w", "-u"]) {
                c.risk(Risk::Write, "changes go configuration")
            } else {
                c.read_only()
            }
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

fn rustup(c: &mut Cmd<'_>) {
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

fn docker(c: &mut Cmd<'_>) {
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

fn package_manager(c: &mut Cmd<'_>, name: &str) {
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

// ---------------------------------------------------------------------------
// Copying tools.

fn dd(c: &mut Cmd<'_>) {
    let mut risk = Risk::ReadOnly;
    for a in c.args {
        if a.dynamic {
            c.unknown("has operands that come from a variable");
            return;
        }
        if let Some(target) = a.text.strip_prefix("of=") {
            if is_null_device(target) {
                continue;
            }
            if is_net_device(target) {
                risk = risk.max(Risk::Network);
            } else if target.starts_with("/dev/") {
                c.unknown("writes to a device, which can destroy a disk");
                return;
            } else {
                risk = risk.max(Risk::Write);
            }
        }
    }
    match risk {
        Risk::ReadOnly => c.read_only(),
        Risk::Network => c.network(),
        _ => c.write(),
    }
}

fn tar(c: &mut Cmd<'_>) {
    let args = c.args;
    if has_flag(
        args,
        &[
            "--to-command",
            "--use-compress-program",
            "-I",
            "--checkpoint-action",
            "--rsh-command",
            "--info-script",
            "--new-volume-script",
            "-F",
        ],
    ) {
        c.unknown("runs a helper program");
        return;
    }
    // The first argument may be a bundled mode without a dash (`tar xzf`).
    let mode: String = args
        .iter()
        .filter(|a| !a.text.starts_with("--"))
        .take(1)
        .chain(
            args.iter()
                .filter(|a| a.text.starts_with('-') && !a.text.starts_with("--")),
        )
        .map(|a| a.text.trim_start_matches('-').to_owned())
        .collect();
    let long = |n: &str| surely_flag(args, &[n]);
    if mode.contains('t') || long("--list") {
        if mode.contains('x') || mode.contains('c') || mode.contains('r') || mode.contains('u') {
            c.write();
        } else {
            c.read_only();
        }
    } else if args
        .iter()
        .any(|a| a.text.contains("--remove-files") || a.text.contains("--delete"))
    {
        c.delete();
    } else {
        c.write();
    }
}

fn rsync(c: &mut Cmd<'_>) {
    let args = c.args;
    if has_flag(args, &["--rsh", "--rsync-path"]) || has_short(args, 'e') {
        c.unknown("runs a remote shell command");
        return;
    }
    let remote = operands(args).iter().any(|a| {
        a.dynamic || a.text.starts_with("rsync://") || {
            let before_slash = a.text.split('/').next().unwrap_or("");
            before_slash.contains(':')
        }
    });
    if remote {
        c.network();
    }
    if args
        .iter()
        .any(|a| a.text.starts_with("--delete") || a.text == "--remove-source-files")
    {
        c.delete();
    } else if !remote {
        c.write();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sed_scripts() {
        assert_eq!(sed_script_risk("s/a/b/g"), Ok(Risk::ReadOnly));
        assert_eq!(sed_script_risk("1,5p;$d"), Ok(Risk::ReadOnly));
        assert_eq!(sed_script_risk("/x/w out.txt"), Ok(Risk::Write));
        assert_eq!(sed_script_risk("s/a/b/w out"), Ok(Risk::Write));
        assert!(sed_script_risk("1e rm -rf x").is_err());
        assert!(sed_script_risk("s/.*/rm x/e").is_err());
        assert!(sed_script_risk("s|a|w|g").is_ok());
    }

    #[test]
    fn program_paths() {
        assert_eq!(program_name("/bin/rm"), Ok("rm"));
        assert_eq!(program_name("/usr/bin/curl"), Ok("curl"));
        assert!(program_name("./rm").is_err());
        assert!(program_name("/tmp/ls").is_err());
        assert!(program_name("/bin/../tmp/ls").is_err());
    }

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
