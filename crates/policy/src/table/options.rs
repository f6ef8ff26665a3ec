//! Options that raise a command's risk, as data, and the one rule that
//! decides whether a word spells one of them.
//!
//! Every option of a table entry that makes the command write, delete,
//! reach the network or run code is a row of [`RISKY_OPTIONS`]. The rows
//! are applied by [`apply`] (from `classify` for plain commands, from the
//! `git`, `pip` and `go` rules for their subcommands), and every word is
//! matched against them by [`spells`], which reads options the way GNU
//! `getopt_long`, git's parse-options and bash's builtins do:
//!
//! - a long option may be abbreviated to any prefix (`--compress-p`), with
//!   its value attached by `=` or in the next word; a prefix of several
//!   options counts as each of them, so the most dangerous wins. Only a
//!   *different* option spelled out in full (an entry's [`Syntax::exact`])
//!   is not an abbreviation;
//! - a short option counts anywhere inside a cluster (`-rp`, `-pr`), unless
//!   an earlier letter of the cluster takes a value (declared in
//!   [`Syntax::short_val`]), which makes the rest of the cluster that value;
//!   with nothing declared, every letter of the cluster is read;
//! - options are read across all arguments (GNU tools permute), up to a
//!   `--` that surely ends them: a `--` right after an option word may be
//!   that option's value, so the scan goes on past it;
//! - a word only known at run time may be any option.
//!
//! Risk is never lowered here: the rows only add risk to what the entry's
//! own rule says.

use super::Cmd;
use super::args::option_words;
use crate::risk::Risk;
use crate::word::Arg;

/// Whether a risky option takes a value, for generating its spellings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// A flag: `-w`, `--delete`.
    None,
    /// A required value: `-o FILE`, `-oFILE`, `--output=FILE`, `--output FILE`.
    Required,
    /// An optional value, only ever attached: `-O[pager]`, `--open-files-in-pager[=pager]`.
    Optional,
}

/// Options of one or more commands that raise their risk.
#[derive(Debug)]
pub struct RiskyOption {
    /// The commands (`sort`) or subcommands (`git log`) they belong to.
    pub commands: &'static [&'static str],
    /// Their canonical spellings: `-o`, `--output`.
    pub names: &'static [&'static str],
    /// Whether they take a value.
    pub value: Value,
    /// The risk they add.
    pub risk: Risk,
    /// What they do, for the reason.
    pub what: &'static str,
}

/// What a command's option syntax adds to the one matching rule.
#[derive(Clone, Copy, Debug, Default)]
pub struct Syntax {
    /// Short options that take a value: the rest of a cluster after one of
    /// them is its value, not more options. Only listed when known for
    /// sure; with none listed every letter of a cluster counts.
    pub short_val: &'static str,
    /// Long options (without `--`) that are strict prefixes of a risky one
    /// but are options of their own: spelled out in full they are not an
    /// abbreviation (`tar --checkpoint` is not `--checkpoint-action`).
    pub exact: &'static [&'static str],
}

const NO_VALUE: Value = Value::None;
const REQUIRED: Value = Value::Required;
const OPTIONAL: Value = Value::Optional;

/// Subcommands of git whose `--output` writes a file.
const GIT_OUTPUT: &[&str] = &[
    "git log",
    "git show",
    "git diff",
    "git whatchanged",
    "git shortlog",
    "git diff-tree",
    "git diff-files",
    "git diff-index",
    "git range-diff",
];

/// Subcommands of git that talk to another repository and take options
/// naming a program to run for the transfer.
const GIT_TRANSFER: &[&str] = &[
    "git clone",
    "git fetch",
    "git pull",
    "git push",
    "git ls-remote",
    "git archive",
    "git submodule",
];

macro_rules! row {
    ($cmds:expr, [$($n:expr),+ $(,)?], $value:expr, $risk:ident, $what:expr) => {
        RiskyOption {
            commands: $cmds,
            names: &[$($n),+],
            value: $value,
            risk: Risk::$risk,
            what: $what,
        }
    };
}

/// Every option of a table entry that raises its risk.
pub const RISKY_OPTIONS: &[RiskyOption] = &[
    row!(
        &["sort"],
        ["--compress-program"],
        REQUIRED,
        Unknown,
        "runs a compression program"
    ),
    row!(
        &["sort"],
        ["-o", "--output"],
        REQUIRED,
        Write,
        "writes its output to a file"
    ),
    row!(
        &["mapfile", "readarray"],
        ["-C"],
        REQUIRED,
        Unknown,
        "runs a callback for each line"
    ),
    row!(
        &["hash"],
        ["-p"],
        REQUIRED,
        Unknown,
        "re-points a command name at another program"
    ),
    row!(
        &["tree"],
        ["-o"],
        REQUIRED,
        Write,
        "writes its output to a file"
    ),
    row!(
        &["tree"],
        ["-R"],
        NO_VALUE,
        Write,
        "writes an HTML listing into every directory"
    ),
    row!(
        &["file"],
        ["-C", "--compile"],
        NO_VALUE,
        Write,
        "compiles a magic file"
    ),
    row!(
        &["date"],
        ["-s", "--set"],
        REQUIRED,
        Unknown,
        "sets the system clock"
    ),
    row!(
        &["less"],
        ["-o", "-O", "--log-file", "--LOG-FILE"],
        REQUIRED,
        Write,
        "copies its input to a log file"
    ),
    row!(
        &["less"],
        ["-k", "--lesskey-file", "--lesskey-src", "--lesskey-content"],
        REQUIRED,
        Unknown,
        "reads key bindings and environment settings (such as `LESSOPEN`) that can run commands"
    ),
    row!(
        &["iconv"],
        ["-o", "--output"],
        REQUIRED,
        Write,
        "writes its output to a file"
    ),
    row!(
        &["history"],
        ["-w", "-a"],
        NO_VALUE,
        Write,
        "writes the history to a file"
    ),
    row!(
        &["cloc"],
        [
            "--extract-with",
            "--script-lang",
            "--force-lang-def",
            "--read-lang-def"
        ],
        REQUIRED,
        Unknown,
        "runs an extraction command or loads language definitions from a file"
    ),
    row!(
        &["cloc"],
        [
            "--out",
            "--report-file",
            "--sql",
            "--write-lang-def",
            "--write-lang-def-incl-dup",
            "--categorized",
            "--counted",
            "--ignored",
            "--found",
            "--unique",
        ],
        REQUIRED,
        Write,
        "writes a report file"
    ),
    row!(
        &["cloc"],
        ["--sql-append", "--sum-reports"],
        NO_VALUE,
        Write,
        "writes a report file"
    ),
    row!(
        &["ag", "ack"],
        ["--pager"],
        REQUIRED,
        Unknown,
        "runs a pager program"
    ),
    row!(
        &["fzf"],
        [
            "--preview",
            "--bind",
            "--with-shell",
            "--listen",
            "--listen-unsafe",
            "--history"
        ],
        REQUIRED,
        Unknown,
        "runs commands (`--preview`, `--bind`), writes a history file or listens on a port"
    ),
    row!(
        &["rg"],
        ["--pre", "--hostname-bin"],
        REQUIRED,
        Unknown,
        "runs a program (a preprocessor or a hostname helper)"
    ),
    row!(
        &["bat", "batcat"],
        ["--pager"],
        REQUIRED,
        Unknown,
        "runs a pager program"
    ),
    row!(
        &["tar", "bsdtar"],
        [
            "--to-command",
            "--use-compress-program",
            "-I",
            "--checkpoint-action",
            "--rsh-command",
            "--rmt-command",
            "--info-script",
            "--new-volume-script",
            "-F",
        ],
        REQUIRED,
        Unknown,
        "runs a helper program"
    ),
    row!(
        &["tar", "bsdtar"],
        ["--index-file", "--volno-file"],
        REQUIRED,
        Write,
        "writes a listing or volume number to a file"
    ),
    row!(
        &["rsync"],
        ["-e", "--rsh", "--rsync-path"],
        REQUIRED,
        Unknown,
        "runs a remote shell command"
    ),
    row!(
        &["diff3"],
        ["--diff-program"],
        REQUIRED,
        Unknown,
        "runs a diff program"
    ),
    row!(
        &["nm"],
        ["--plugin"],
        REQUIRED,
        Unknown,
        "loads a plugin library, which runs its code"
    ),
    row!(
        &["zstdcat"],
        ["-o"],
        REQUIRED,
        Write,
        "writes its output to a file"
    ),
    row!(
        &["zstdcat"],
        ["--rm"],
        NO_VALUE,
        Delete,
        "removes its input files"
    ),
    row!(
        &["xxd"],
        ["-r"],
        NO_VALUE,
        Write,
        "converts a dump back to binary, which may write a file"
    ),
    row!(
        &["cargo"],
        ["--config"],
        REQUIRED,
        Unknown,
        "overrides cargo configuration, which can set runners, wrappers or linkers"
    ),
    row!(
        &["pip", "pip3"],
        ["--python"],
        REQUIRED,
        Unknown,
        "runs another Python interpreter"
    ),
    row!(
        &["pip", "pip3"],
        ["--log", "--log-file", "--local-log"],
        REQUIRED,
        Write,
        "writes a log file"
    ),
    row!(
        &["pip list"],
        ["-o", "--outdated", "-u", "--uptodate"],
        NO_VALUE,
        Network,
        "asks the package index for newer versions"
    ),
    row!(
        &["go env"],
        ["-w", "-u", "--w", "--u"],
        NO_VALUE,
        Write,
        "changes go configuration"
    ),
    row!(
        &["npm"],
        [
            "--browser",
            "--viewer",
            "--editor",
            "--shell",
            "--script-shell",
            "--node-options",
            "--userconfig",
            "--globalconfig",
        ],
        REQUIRED,
        Unknown,
        "names a program or configuration file for npm, which can run anything"
    ),
    row!(
        &["rpm"],
        [
            "-E", "--eval", "-D", "--define", "--macros", "--rcfile", "--pipe", "--load"
        ],
        REQUIRED,
        Unknown,
        "evaluates macros or runs a pipe command, which can run shell commands"
    ),
    row!(
        &["docker", "podman"],
        [
            "-H",
            "--host",
            "-c",
            "--context",
            "--config",
            "--url",
            "--connection",
            "--identity"
        ],
        REQUIRED,
        Unknown,
        "talks to another container daemon or reads another client configuration, which can run helper programs"
    ),
    row!(
        &["podman"],
        ["-r", "--remote"],
        NO_VALUE,
        Unknown,
        "talks to a remote container service"
    ),
    // git subcommands.
    row!(
        GIT_OUTPUT,
        ["--output"],
        REQUIRED,
        Write,
        "writes its output to a file"
    ),
    row!(
        &["git grep"],
        ["-O", "--open-files-in-pager"],
        OPTIONAL,
        Unknown,
        "opens results with a pager program"
    ),
    row!(
        &["git hash-object"],
        ["-w"],
        NO_VALUE,
        Write,
        "writes an object into the repository"
    ),
    row!(
        &["git fsck"],
        ["--lost-found"],
        NO_VALUE,
        Write,
        "writes dangling objects into `.git/lost-found`"
    ),
    row!(
        &["git branch"],
        ["-d", "-D", "--delete"],
        NO_VALUE,
        Delete,
        "deletes branches"
    ),
    row!(
        &["git branch"],
        ["--edit-description"],
        NO_VALUE,
        Unknown,
        "opens an editor"
    ),
    row!(
        &["git branch"],
        [
            "-m",
            "-M",
            "-c",
            "-C",
            "--move",
            "--copy",
            "-f",
            "--force",
            "--track",
            "--no-track",
            "--unset-upstream",
            "--create-reflog",
        ],
        NO_VALUE,
        Write,
        "modifies branches"
    ),
    row!(
        &["git branch"],
        ["-u", "--set-upstream-to"],
        REQUIRED,
        Write,
        "modifies branches"
    ),
    row!(
        &["git tag"],
        ["-d", "--delete"],
        NO_VALUE,
        Delete,
        "deletes tags"
    ),
    row!(
        &["git tag"],
        ["-a", "-s", "-f", "--annotate", "--sign", "--force"],
        NO_VALUE,
        Write,
        "creates a tag"
    ),
    row!(
        &["git tag"],
        ["-m", "-F", "-u", "--message", "--file", "--local-user"],
        REQUIRED,
        Write,
        "creates a tag"
    ),
    row!(
        &["git rebase"],
        ["-i", "--interactive"],
        NO_VALUE,
        Unknown,
        "opens an editor during the rebase"
    ),
    row!(
        &["git rebase"],
        ["-x", "--exec"],
        REQUIRED,
        Unknown,
        "runs commands during the rebase"
    ),
    row!(
        &["git archive"],
        ["--remote", "--exec"],
        REQUIRED,
        Network,
        "fetches the archive from a remote"
    ),
    row!(
        &["git archive"],
        ["-o", "--output"],
        REQUIRED,
        Write,
        "writes the archive to a file"
    ),
    row!(
        &["git reset"],
        ["--hard", "--merge", "--keep"],
        NO_VALUE,
        Delete,
        "discards uncommitted changes"
    ),
    row!(
        &["git checkout", "git switch", "git restore"],
        ["-f", "--force", "--discard-changes"],
        NO_VALUE,
        Delete,
        "discards uncommitted changes"
    ),
    row!(
        &["git restore"],
        ["-W", "--worktree"],
        NO_VALUE,
        Delete,
        "discards uncommitted changes"
    ),
    row!(
        &["git update-ref", "git symbolic-ref"],
        ["-d", "--delete"],
        NO_VALUE,
        Delete,
        "deletes a ref"
    ),
    row!(
        &["git apply"],
        [
            "--apply",
            "--index",
            "--cached",
            "--3way",
            "--build-fake-ancestor"
        ],
        NO_VALUE,
        Write,
        "applies the patch"
    ),
    row!(
        GIT_TRANSFER,
        ["--upload-pack", "--receive-pack", "--exec", "--config"],
        REQUIRED,
        Unknown,
        "names a program or configuration for git to run for the transfer"
    ),
    row!(
        &["git clone", "git ls-remote"],
        ["-u"],
        REQUIRED,
        Unknown,
        "names a program for git to run for the transfer"
    ),
    row!(
        &["git clone", "git init"],
        ["-c", "--template", "--separate-git-dir"],
        REQUIRED,
        Unknown,
        "sets configuration, hooks or a git directory for the new repository, which can run programs"
    ),
];

/// Option syntax of the commands in [`RISKY_OPTIONS`], where it is known
/// for sure; any other command's clusters are read letter by letter.
const SYNTAX: &[(&str, Syntax)] = &[
    (
        "sort",
        Syntax {
            short_val: "koStT",
            exact: &[],
        },
    ),
    (
        "mapfile",
        Syntax {
            short_val: "dnOsuCc",
            exact: &[],
        },
    ),
    (
        "readarray",
        Syntax {
            short_val: "dnOsuCc",
            exact: &[],
        },
    ),
    (
        "hash",
        Syntax {
            short_val: "p",
            exact: &[],
        },
    ),
    (
        "date",
        Syntax {
            short_val: "dfIrs",
            exact: &[],
        },
    ),
    (
        "iconv",
        Syntax {
            short_val: "fto",
            exact: &[],
        },
    ),
    (
        "history",
        Syntax {
            short_val: "d",
            exact: &[],
        },
    ),
    (
        "cloc",
        Syntax {
            short_val: "",
            exact: &["force-lang"],
        },
    ),
    (
        "tar",
        Syntax {
            short_val: "",
            exact: &["checkpoint"],
        },
    ),
    (
        "bsdtar",
        Syntax {
            short_val: "",
            exact: &["checkpoint"],
        },
    ),
    (
        "rsync",
        Syntax {
            short_val: "f",
            exact: &[],
        },
    ),
    (
        "npm",
        Syntax {
            short_val: "",
            exact: &["global"],
        },
    ),
    (
        "git rebase",
        Syntax {
            short_val: "sSXCx",
            exact: &[],
        },
    ),
    (
        "git tag",
        Syntax {
            short_val: "mFun",
            exact: &[],
        },
    ),
    (
        "git grep",
        Syntax {
            short_val: "efABCmO",
            exact: &[],
        },
    ),
];

/// The option syntax known for a command (or `git` subcommand).
pub fn syntax(command: &str) -> Syntax {
    SYNTAX
        .iter()
        .find(|(c, _)| *c == command)
        .map(|(_, s)| *s)
        .unwrap_or_default()
}

/// The one rule: whether `word` may spell the option `name` of a command
/// with this `syntax` (see the module docs).
pub(super) fn spells(word: &Arg, name: &str, syntax: &Syntax) -> bool {
    if word.dynamic {
        return true;
    }
    let t = word.text.as_str();
    if let Some(long) = name.strip_prefix("--") {
        let Some(given) = t.strip_prefix("--") else {
            return false;
        };
        let given = given.split_once('=').map_or(given, |(n, _)| n);
        if given.is_empty() {
            return false;
        }
        if given == long {
            return true;
        }
        !syntax.exact.contains(&given) && long.starts_with(given)
    } else if let Some(letter) = short_letter(name) {
        let Some(cluster) = t.strip_prefix('-') else {
            return false;
        };
        if cluster.is_empty() || cluster.starts_with('-') {
            return false;
        }
        for ch in cluster.chars() {
            if ch == letter {
                return true;
            }
            if syntax.short_val.contains(ch) {
                return false;
            }
        }
        false
    } else {
        t == name || t.strip_prefix(name).is_some_and(|r| r.starts_with('='))
    }
}

fn short_letter(name: &str) -> Option<char> {
    let mut chars = name.strip_prefix('-')?.chars();
    let c = chars.next()?;
    (chars.next().is_none() && c != '-').then_some(c)
}

/// Whether any of `args` may spell one of `names` for a command with this
/// syntax: the rule of [`spells`] over the words that may be options.
pub(super) fn any_spells(args: &[Arg], names: &[&str], syntax: &Syntax) -> bool {
    option_words(args)
        .iter()
        .any(|a| names.iter().any(|n| spells(a, n, syntax)))
}

/// Applies every row of [`RISKY_OPTIONS`] for `command` to its arguments,
/// adding the risk of each option present. Returns the highest risk added
/// (`ReadOnly` when none is present).
pub(super) fn apply(c: &mut Cmd<'_>, command: &str, args: &[Arg]) -> Risk {
    let syntax = syntax(command);
    let mut risk = Risk::ReadOnly;
    for row in RISKY_OPTIONS
        .iter()
        .filter(|r| r.commands.contains(&command))
    {
        if let Some(word) = option_words(args)
            .iter()
            .find(|a| row.names.iter().any(|n| spells(a, n, &syntax)))
        {
            let shown = if word.dynamic {
                format!(
                    "may be given an option that {}: `{}` is only known at run time",
                    row.what,
                    crate::display::clip(&word.text),
                )
            } else {
                format!(
                    "{}: `{}` spells `{}`",
                    row.what,
                    crate::display::clip(&word.text),
                    row.names.join("`/`")
                )
            };
            c.risk(row.risk, &shown);
            risk = risk.max(row.risk);
        }
    }
    risk
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(t: &str) -> Arg {
        Arg::literal(t)
    }

    #[test]
    fn spellings_of_one_option() {
        let none = Syntax::default();
        for t in [
            "--compress-program=sh",
            "--compress-p",
            "--compress",
            "--c=sh",
            "--compress-program",
        ] {
            assert!(spells(&w(t), "--compress-program", &none), "{t}");
        }
        for t in [
            "--compress-programs",
            "-compress-program",
            "--",
            "--x",
            "compress",
        ] {
            assert!(!spells(&w(t), "--compress-program", &none), "{t}");
        }
        for t in ["-o", "-ro", "-or", "-ofile", "-rofile"] {
            assert!(spells(&w(t), "-o", &none), "{t}");
        }
        let sort = syntax("sort");
        assert!(spells(&w("-ro"), "-o", &sort));
        assert!(
            !spells(&w("-to"), "-o", &sort),
            "`-t` takes `o` as its value"
        );
        let tar = syntax("tar");
        assert!(!spells(&w("--checkpoint=10"), "--checkpoint-action", &tar));
        assert!(spells(
            &w("--checkpoint-a=exec=sh"),
            "--checkpoint-action",
            &tar
        ));
        let mut dynamic = w("$X");
        dynamic.dynamic = true;
        assert!(spells(&dynamic, "-o", &none));
    }

    #[test]
    fn every_row_is_well_formed() {
        for row in RISKY_OPTIONS {
            assert!(row.risk > Risk::ReadOnly, "{row:?}");
            for n in row.names {
                assert!(n.starts_with('-') && n.len() >= 2, "{row:?}");
            }
        }
    }
}
