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
//!   that would raise the risk treat it as matching ([`args::has_flag`]
//!   and friends); checks that would lower the risk only accept static words.
//! - GNU tools accept options after operands, so flags are searched across
//!   all arguments up to `--`, not just at the front.
//!
//! - Options that raise risk are data: every one is a row of
//!   [`options::RISKY_OPTIONS`], matched in every spelling the program
//!   accepts (abbreviated long options, letters inside short clusters,
//!   attached values) by the one rule in [`options::spells`].
//! - A wrapper (a command that runs another command) refuses any option it
//!   does not know, exactly spelled: guessing wrong would shift where the
//!   wrapped command starts, or miss what the option does.
//!
//! `dispatch.rs` maps a program name to its rule; the rules for a family of
//! programs live in one file each: [`wrappers`] (commands that run commands),
//! [`find`], [`text`] (`sed`, `awk`), [`git`], [`toolchains`], [`copying`];
//! [`args`] holds the option parsing they share.

mod args;
mod copying;
mod dispatch;
mod find;
mod git;
pub(crate) mod options;
mod text;
mod toolchains;
mod wrappers;

use dispatch::dispatch;

pub(crate) use wrappers::dangerous_env_var;

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
    // The options that raise this command's risk, in every spelling.
    options::apply(&mut c, &name, argv.get(1..).unwrap_or(&[]));
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

    /// The command only reads, unless something already found says more
    /// (an option of [`options::RISKY_OPTIONS`]).
    fn read_only(&mut self) {
        if !self.out.iter().any(|e| matches!(e, Effect::Risk(..))) {
            self.risk(Risk::ReadOnly, "only reads");
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_paths() {
        assert_eq!(program_name("/bin/rm"), Ok("rm"));
        assert_eq!(program_name("/usr/bin/curl"), Ok("curl"));
        assert!(program_name("./rm").is_err());
        assert!(program_name("/tmp/ls").is_err());
        assert!(program_name("/bin/../tmp/ls").is_err());
    }
}
