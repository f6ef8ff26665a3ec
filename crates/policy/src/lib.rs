//! Capstan's authoritative risk classification of shell commands, and the
//! workspace policy that turns a classification into a verdict.
//!
//! # Classification
//!
//! [`classify_shell`] parses a raw command line with a real bash parser
//! (`brush-parser`) and walks the whole syntax tree: lists, pipelines,
//! subshells, functions, control flow, command and process substitutions,
//! redirections, here-documents, and commands run by other commands
//! (`sudo`, `env`, `timeout`, `xargs`, `find -exec`, `sh -c`, `eval`,
//! `watch`, `parallel`, ...). Words are normalised before lookup, so
//! `'r''m'`, `\rm`, `"rm"`, `$'\x72m'`, `{rm,-rf,x}` and `/bin/rm` are all
//! `rm`. [`classify_argv`] does the same for an argv that is executed
//! without a shell.
//!
//! The result's [`Risk`] is the maximum over every part. Invariants:
//!
//! - **Unknown is the ceiling and the default.** Any command not in the
//!   built-in table, any interpreter, any command name that is not a literal
//!   word, any program run by a path outside the system directories
//!   (`./ls` may be a script the agent wrote), anything the parser rejects,
//!   and anything nested too deeply is [`Risk::Unknown`].
//! - **Dynamic words are assumed hostile.** An argument whose value is only
//!   known at run time (`$X`, `$(...)`) is treated as possibly being any
//!   option, so `git $SUB` is unknown and `sed "$OPTS" f` may be `-i`.
//! - **Options are read in every spelling.** Every option of a table entry
//!   that makes it write, delete, reach the network or run code is a row of
//!   one table, matched by one rule as `getopt_long`, git's parse-options
//!   and bash's builtins read options: a long option abbreviated to any
//!   prefix (a prefix of several counts as each, so the most dangerous
//!   wins), with its value after `=` or in the next word; a short option
//!   anywhere in a cluster (`-rp`), its value attached (`-p/bin/rm`); after
//!   operands; past a `--` that may be an option's value. A flag that lowers
//!   the risk (`git clean -n`) counts only spelled exactly, and not when a
//!   negation (`--no-dry-run`) or a run-time word could undo it.
//! - **Wrappers refuse what they do not know.** A command that runs another
//!   (`env`, `xargs`, `timeout`, `nice`, `stdbuf`, `exec`, `watch`, `find`,
//!   `fd`, `cargo`'s global options, `jobs -x`, ...) is unknown when given
//!   an option it does not know exactly (abbreviations included), since a
//!   wrong guess shifts where the wrapped command starts or misses what the
//!   option does (`xargs --process-slot-var=PATH`).
//! - **Configuration that runs code is code.** `git -c core.pager=...`,
//!   `GIT_PAGER=... git log`, `LD_PRELOAD=...`, `PATH=...`, and anything that
//!   changes or unsets such a variable are unknown. Every way bash assigns a
//!   variable named by a word counts as an assignment: `unset`, `env -i`/`-u`
//!   (in any cluster), `exec -c`, `read` and `mapfile` names and arrays,
//!   `printf -v`, `wait -p`, `getopts`, `declare`/`typeset`/`local`/`export`/
//!   `readonly` in every option form, `${VAR:=...}` and `${VAR=...}`
//!   (indirect `${!v:=...}` is unknown), `{VAR}>file` redirections, `for`
//!   loops. A name reference (`declare -n`, `typeset -n`, `local -n`, in any
//!   cluster) is unknown unless its target is a plain, static, unguarded
//!   name, and a `for` loop over a name reference must loop over such names.
//!   Guarded variables include `PATH`, `IFS`, `ENV`, every `BASH_*` (such as
//!   `BASH_ENV` and `BASH_CMDS`), `LD_*`, `GIT_*`, pagers, editors, prompts
//!   (`PS0`-`PS4`, `PROMPT_COMMAND`) and tool configuration variables.
//! - **Protected files are their own class.** A write naming `.git/`,
//!   `.envrc`, `.capstan/`, a `capstan.toml`, shell start-up files,
//!   `.cargo/config*`, ... (see [`protected_path`]), every `git config`
//!   write, a write whose target is only known at run time, a glob that may
//!   match one, and a write made from inside a protected directory are
//!   listed in [`Classification::protected`]; the policy asks for them in
//!   every profile and no allow rule covers them.
//! - **Data is never evaluated.** Bash evaluates arithmetic on variable
//!   values recursively, and a value holding `a[$(cmd)]` runs `cmd`. Any
//!   arithmetic context (`$(( ))`, `(( ))`, `let`, `declare -i`, array
//!   subscripts, `${x:offset}`, `${!x}`, `[[ a -eq b ]]`) that names a
//!   variable whose value may come from a file or a command (`read`,
//!   `mapfile`, `x=$(...)`, `for x in $(...)`, `getopts`, positional
//!   parameters, `REPLY`, `BASH_REMATCH`, ...), or contains a command
//!   substitution, is unknown. Values the command line computes itself
//!   (literals, arithmetic) are fine.
//! - **The repository's configuration is part of the command, and fails
//!   closed.** The host passes the keys of the git configuration that are
//!   not on an allowlist of inert keys ([`RepoFacts`], read by
//!   [`RepoFacts::scan`]; see [`gitconfig::inert`]) in a [`Context`], with a
//!   git directory, `commondir` or object alternates outside the workspace;
//!   with any present, every `git` command is unknown and the reason names
//!   the key. A repository as `git init`, `git clone`, `git remote add` and
//!   `git config user.name` leave it has none. `git -c` settings use the
//!   same allowlist.
//!
//! # Policy
//!
//! [`Policy`] maps a classification to a [`Verdict`] for a workspace
//! profile, with allow and deny prefix rules; see [`Policy::evaluate_shell`]
//! and, with a [`Context`], [`Policy::evaluate_shell_in`].
//!
//! # Assumptions and known limits
//!
//! - The runner executes command lines with **bash**. `((...))` is read as
//!   bash arithmetic; a POSIX `sh` would run it as nested subshells (the
//!   classifier analyses that reading too when the text is not valid
//!   arithmetic, but not for valid arithmetic such as `((reboot))`).
//! - Risk is about the command line, not the files it touches: `trusted`
//!   auto-runs writes and builds, and a write can plant code that a later
//!   build or test runs. Protected locations are caught when written by
//!   name, by a run-time name, by a glob or from a protected directory, but
//!   not when written indirectly (by extracting an archive, applying a
//!   patch, copying a directory, or through a symlink planted earlier). The
//!   sandbox remains the boundary.
//! - Configuration already present in the workspace other than git's
//!   (`.cargo/config.toml` runners, npm scripts, a project `.npmrc`) runs
//!   under commands classified by their usual risk. git's is read by the
//!   host for the repository found from the command's cwd only; a nested
//!   repository reached with `cd sub` or `git -C sub` is not scanned (the
//!   host's git overrides still apply there).
//! - Aliases and functions defined outside the command line (in the user's
//!   shell start-up files or git config) are not seen; the runner should
//!   start bash without start-up files.
//!
//! # Failure modes
//!
//! Classification never panics and never errs: problems become `unknown`
//! findings whose reasons say what went wrong. Input over 64 KiB, or nested
//! more than 48 brackets deep, is refused as unknown before parsing.

#![warn(missing_docs)]

mod display;
pub mod gitconfig;
mod parse;
mod policy;
mod protect;
mod risk;
mod table;
mod vars;
mod word;

use serde::{Deserialize, Serialize};

pub use gitconfig::{ConfigHazard, RepoFacts};
pub use policy::{Evaluation, Policy, PolicyError, Profile, SandboxMode, Verdict};
pub use protect::protected_path;
pub use risk::{Risk, effective_risk};
/// The table's risk-raising options, for tests that generate their
/// spellings; not a stable interface.
#[doc(hidden)]
pub use table::options::{RISKY_OPTIONS, RiskyOption, Syntax, Value as OptionValue, syntax};

/// What the host knows about where a command will run, beyond its text.
/// The classifier stays a pure function of the command and this value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Context {
    /// The command's working directory relative to the workspace root
    /// (`""` or `"."` for the root). Writes made from inside a protected
    /// directory (`.git/`, `.capstan/`) are protected writes.
    #[serde(default)]
    pub cwd: String,
    /// Keys of the repository's git configuration that run programs
    /// (computed by the host with [`RepoFacts::scan`]). When there are any,
    /// every `git` command is `unknown`.
    #[serde(default)]
    pub repo: RepoFacts,
}

/// One simple command found in a command line, including commands nested
/// in substitutions, scripts and wrappers (`sudo rm x` yields both
/// `sudo rm x` and `rm x`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandInfo {
    /// The words after quote removal and brace expansion. Words with a
    /// run-time value show their source text (e.g. `$HOME`); see `dynamic`.
    pub argv: Vec<String>,
    /// The program name used for lookup: `argv[0]`, or its basename for a
    /// program in a system directory (`/usr/bin/git` → `git`).
    pub name: String,
    /// The risk of this command by itself, not counting commands it runs
    /// (those have entries of their own).
    pub risk: Risk,
    /// Some word's value is only known at run time, so `argv` is not exact.
    pub dynamic: bool,
    /// What ran this command, if it was nested (`sudo`, `sh -c`, `$(...)`,
    /// `xargs`, `find -exec`, `function f`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

/// One contribution to the overall risk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// The risk this part carries.
    pub risk: Risk,
    /// Human-readable explanation, naming the offending command or word.
    pub reason: String,
    /// Index into [`Classification::commands`] of the command this finding
    /// belongs to. `None` for parts no allow rule may cover: redirections,
    /// assignments, dynamic command names, parse failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<usize>,
}

/// The classification of a whole command line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Classification {
    /// The maximum risk over all parts.
    pub risk: Risk,
    /// Every finding's reason, deduplicated, in the order found.
    pub reasons: Vec<String>,
    /// Every simple command found, in the order found.
    pub commands: Vec<CommandInfo>,
    /// The structured findings behind `risk` and `reasons`.
    pub findings: Vec<Finding>,
    /// The command line contains nothing to run (blank or only comments).
    /// Such a classification is `unknown` and the policy refuses it.
    #[serde(default)]
    pub empty: bool,
    /// Why the top-level command line failed to parse, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parse_error: Option<String>,
    /// Protected locations the command writes (or may write), each with
    /// the reason: see [`protected_path`]. When not empty, the policy asks
    /// in every profile and no allow rule covers the command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protected: Vec<String>,
}

impl Classification {
    fn from_analysis(a: parse::Analysis) -> Self {
        let mut findings = a.findings;
        let empty = a.nodes == 0 && findings.is_empty() && a.parse_error.is_none();
        if empty {
            findings.push(Finding {
                risk: Risk::Unknown,
                reason: "the command is empty: there is nothing to run".into(),
                command: None,
            });
        }
        let risk = findings
            .iter()
            .map(|f| f.risk)
            .max()
            .unwrap_or(Risk::ReadOnly);
        let mut reasons: Vec<String> = Vec::new();
        for f in &findings {
            if !reasons.contains(&f.reason) {
                reasons.push(f.reason.clone());
            }
        }
        Classification {
            risk,
            reasons,
            commands: a.commands,
            findings,
            empty,
            parse_error: a.parse_error,
            protected: a.protected,
        }
    }
}

/// Classifies a raw command line as a shell (bash) would run it.
///
/// Never fails: unparseable, oversized or empty input is [`Risk::Unknown`]
/// with a reason. The runner should execute the command with bash (or a
/// POSIX shell, whose syntax bash's parser accepts a superset of).
pub fn classify_shell(command: &str) -> Classification {
    classify_shell_in(command, &Context::default())
}

/// [`classify_shell`] for a command run in a known place: see [`Context`].
pub fn classify_shell_in(command: &str, context: &Context) -> Classification {
    Classification::from_analysis(parse::analyze_shell(command, context))
}

/// Classifies an argv executed directly, without a shell: no word is
/// expanded, but `argv[0]` may itself be a shell or wrapper (`sh -c ...`,
/// `sudo ...`), which is analysed as usual. An empty argv is unknown.
pub fn classify_argv(argv: &[String]) -> Classification {
    classify_argv_in(argv, &Context::default())
}

/// [`classify_argv`] for a command run in a known place: see [`Context`].
pub fn classify_argv_in(argv: &[String], context: &Context) -> Classification {
    if argv.is_empty() {
        return Classification::from_analysis(parse::Analysis::default());
    }
    Classification::from_analysis(parse::analyze_argv(argv, context))
}
