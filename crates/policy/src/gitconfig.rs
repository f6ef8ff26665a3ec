//! Facts about the git repository a command runs in: which keys of its
//! configuration are not known to be harmless.
//!
//! git runs programs named in the repository's own configuration
//! (`core.fsmonitor` on `git status`, `diff.external` and
//! `diff.<driver>.textconv` on `git diff`/`git log -p`, `filter.<driver>.clean`
//! on `git status`, `tar.<format>.command` on `git archive`, ...) and reads
//! files and repositories it names (`core.worktree`, `include.path`,
//! `core.attributesFile`). Any earlier write or extracted archive can plant
//! such a key, so a repository whose configuration holds one makes every
//! `git` command `unknown` (see [`crate::Context`]).
//!
//! The rule fails closed: every key is a hazard unless it is on the
//! allowlist of [`inert`] keys (what `git init`, `git clone`, `git remote
//! add`, `git branch -u` and `git config user.name` write, and settings that
//! only hold data), compared as git compares keys (section and name
//! case-insensitive, subsection as written). The same allowlist decides
//! which `git -c` settings a command may carry. Beyond keys, a git
//! directory, `commondir` or `objects/info/alternates` outside the
//! workspace is a hazard, and so is a configuration file that cannot be
//! read or parsed like git would.
//!
//! Reading the files is the host's job ([`RepoFacts::scan`]); the classifier
//! only sees the resulting value and stays a pure function.
//! The host also runs every command with overrides that neutralise the keys
//! it can (`core.fsmonitor`, `core.hooksPath`, pagers, editors, ...); the
//! driver keys cannot be overridden without knowing their names, which is
//! why this scan exists.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Most include files followed from one repository's configuration.
const MAX_FILES: usize = 32;
/// Largest configuration file read; a bigger one is a hazard by itself.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// One configuration key not known to be harmless, or an indirection that
/// leaves the workspace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigHazard {
    /// The key as git names it (`core.fsmonitor`, `diff.x.textconv`), or a
    /// description of why the file could not be vetted.
    pub key: String,
    /// The file it was found in, relative to the workspace when inside it.
    pub file: String,
}

/// What the host found in the configuration of the repository a command
/// runs in. Empty when there is no repository or nothing in it runs code.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoFacts {
    /// Every key found that is not known to be harmless (and every
    /// indirection out of the workspace), in file order.
    pub hazards: Vec<ConfigHazard>,
}

impl RepoFacts {
    /// Finds the repository git would use for a command run in `cwd` (a
    /// directory inside `workspace`), looking no higher than `workspace`,
    /// and reads its configuration: `config` and `config.worktree` of the
    /// git directory (following a `.git` file's `gitdir:` and a worktree's
    /// `commondir`), the configuration of its submodules under `modules/`,
    /// and every file they include. A git directory, `commondir` or object
    /// alternate outside the workspace is a hazard of its own.
    ///
    /// Never fails: a file that exists but cannot be read or parsed is
    /// itself a hazard, since git may read it differently.
    pub fn scan(workspace: &Path, cwd: &Path) -> RepoFacts {
        let mut facts = RepoFacts::default();
        let Some(git_dir) = discover(workspace, cwd, &mut facts) else {
            return facts;
        };
        if !inside(workspace, &git_dir) {
            facts.push(
                "a git directory outside the workspace (a `.git` file's `gitdir:` or a symbolic link)",
                &git_dir,
                workspace,
            );
        }
        let mut files = vec![git_dir.join("config"), git_dir.join("config.worktree")];
        let mut object_dirs = vec![git_dir.join("objects")];
        if let Ok(common) = std::fs::read_to_string(git_dir.join("commondir")) {
            let common = resolve(&git_dir, common.trim());
            if !inside(workspace, &common) {
                facts.push(
                    "a `commondir` pointing outside the workspace",
                    &git_dir.join("commondir"),
                    workspace,
                );
            }
            files.push(common.join("config"));
            files.push(common.join("config.worktree"));
            object_dirs.push(common.join("objects"));
            collect_modules(&common.join("modules"), &mut files, 0);
        }
        for objects in object_dirs {
            let list = objects.join("info/alternates");
            if let Ok(text) = std::fs::read_to_string(&list) {
                let outside = text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .any(|l| !inside(workspace, &resolve(&objects, l.trim_matches('"'))));
                if outside {
                    facts.push(
                        "`objects/info/alternates` pointing outside the workspace",
                        &list,
                        workspace,
                    );
                }
            }
        }
        collect_modules(&git_dir.join("modules"), &mut files, 0);
        let mut seen: Vec<PathBuf> = Vec::new();
        while let Some(file) = files.pop() {
            if seen.contains(&file) {
                continue;
            }
            if seen.len() >= MAX_FILES {
                facts.push(
                    "too many included configuration files to vet",
                    &file,
                    workspace,
                );
                break;
            }
            seen.push(file.clone());
            scan_file(&file, workspace, &mut facts, &mut files);
        }
        facts
    }

    fn push(&mut self, key: &str, file: &Path, workspace: &Path) {
        let shown = file
            .strip_prefix(workspace)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| file.to_path_buf());
        self.hazards.push(ConfigHazard {
            key: key.to_owned(),
            file: shown.to_string_lossy().into_owned(),
        });
    }
}

/// The git directory for `cwd`, as git's discovery would find it without
/// going above `workspace` (the host sets `GIT_CEILING_DIRECTORIES` so git
/// does not either). A directory that is itself a git directory (a bare
/// repository, or `.git`) counts too.
fn discover(workspace: &Path, cwd: &Path, facts: &mut RepoFacts) -> Option<PathBuf> {
    let mut dir = cwd.to_path_buf();
    loop {
        let dot_git = dir.join(".git");
        if dot_git.is_dir() {
            return Some(dot_git);
        }
        if dot_git.is_file() {
            return match std::fs::read_to_string(&dot_git) {
                Ok(text) => match text.trim().strip_prefix("gitdir:") {
                    Some(target) => Some(resolve(&dir, target.trim())),
                    None => {
                        facts.push("a `.git` file without `gitdir:`", &dot_git, workspace);
                        None
                    }
                },
                Err(_) => {
                    facts.push("an unreadable `.git` file", &dot_git, workspace);
                    None
                }
            };
        }
        if dir.join("HEAD").is_file()
            && dir.join("objects").is_dir()
            && dir.join("config").is_file()
        {
            return Some(dir);
        }
        if dir == workspace || !dir.starts_with(workspace) || !dir.pop() {
            return None;
        }
    }
}

/// Whether `path` is inside `workspace`, after resolving symbolic links
/// where the path exists (and `..` lexically where it does not).
fn inside(workspace: &Path, path: &Path) -> bool {
    fn lexical(p: &Path) -> PathBuf {
        let mut out = PathBuf::new();
        for c in p.components() {
            match c {
                std::path::Component::ParentDir => {
                    out.pop();
                }
                std::path::Component::CurDir => {}
                c => out.push(c),
            }
        }
        out
    }
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| lexical(p));
    real(path).starts_with(real(workspace))
}

fn resolve(base: &Path, target: &str) -> PathBuf {
    let p = Path::new(target);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// Submodule git directories (`modules/<name>/config`), nested ones too.
fn collect_modules(dir: &Path, files: &mut Vec<PathBuf>, depth: usize) {
    if depth > 4 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.push(path.join("config"));
            collect_modules(&path.join("modules"), files, depth + 1);
        }
    }
}

fn scan_file(file: &Path, workspace: &Path, facts: &mut RepoFacts, files: &mut Vec<PathBuf>) {
    let Ok(meta) = std::fs::metadata(file) else {
        // git ignores missing configuration and include files.
        return;
    };
    if meta.len() > MAX_FILE_BYTES {
        facts.push("a configuration file too large to vet", file, workspace);
        return;
    }
    let text = match std::fs::read(file) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => {
            facts.push("an unreadable configuration file", file, workspace);
            return;
        }
    };
    match parse(&text) {
        Ok(entries) => {
            for (key, value) in entries {
                if runs_code(&key, value.as_deref()) {
                    facts.push(&key, file, workspace);
                }
                if is_include(&key)
                    && let Some(v) = value
                {
                    let base = file.parent().unwrap_or(Path::new("/"));
                    let target = match v.strip_prefix("~/") {
                        Some(rest) => std::env::var_os("HOME")
                            .map(|h| PathBuf::from(h).join(rest))
                            .unwrap_or_else(|| base.join(rest)),
                        None => resolve(base, &v),
                    };
                    files.push(target);
                }
            }
        }
        Err(line) => facts.push(
            &format!("a line git may read differently (line {line})"),
            file,
            workspace,
        ),
    }
}

fn is_include(key: &str) -> bool {
    key == "include.path" || (key.starts_with("includeif.") && key.ends_with(".path"))
}

/// Whether git may run a program, or read or write outside the repository,
/// because of this configuration key (section and name lowercased,
/// subsection as written; see [`canonical_key`]). `value` is `None` for a
/// key written without `=` (boolean true).
///
/// Fails closed: every key is a hazard unless [`inert`] knows it to be
/// harmless. A key git adds in a later version, or one this list does not
/// know, makes `git` `unknown` rather than running unasked.
pub fn runs_code(key: &str, value: Option<&str>) -> bool {
    !inert(key, value)
}

/// The key as git compares it: section and name lowercased, the
/// subsection (between them) as written.
pub fn canonical_key(key: &str) -> String {
    match (key.find('.'), key.rfind('.')) {
        (Some(a), Some(b)) if a < b => format!(
            "{}{}{}",
            key[..a].to_ascii_lowercase(),
            &key[a..b],
            key[b..].to_ascii_lowercase()
        ),
        _ => key.to_ascii_lowercase(),
    }
}

/// Keys without a subsection that only hold data for git's own logic: they
/// name no program, no file outside the repository, no other repository.
/// What `git init`, `git clone`, `git remote add`, `git branch -u`,
/// `git config user.name`, `git sparse-checkout` and `git maintenance`
/// write into a repository, and the common presentation settings.
const INERT: &[&str] = &[
    // `git init` (and `clone`) on every platform.
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    // Line endings and paths.
    "core.autocrlf",
    "core.safecrlf",
    "core.eol",
    "core.quotepath",
    "core.abbrev",
    "core.longpaths",
    "core.checkstat",
    "core.trustctime",
    "core.whitespace",
    "core.warnambiguousrefs",
    "core.protecthfs",
    "core.protectntfs",
    // Index and object storage tuning (`git sparse-checkout`, `git maintenance`).
    "core.sparsecheckout",
    "core.sparsecheckoutcone",
    "core.untrackedcache",
    "core.splitindex",
    "core.preloadindex",
    "core.commitgraph",
    "core.multipackindex",
    "core.compression",
    "core.loosecompression",
    "core.bigfilethreshold",
    "index.sparse",
    "index.version",
    "gc.auto",
    "maintenance.auto",
    "maintenance.strategy",
    "fetch.prune",
    "fetch.writecommitgraph",
    // Repository format extensions that only describe the data.
    "extensions.objectformat",
    "extensions.worktreeconfig",
    "extensions.refstorage",
    "extensions.preciousobjects",
    "extensions.noop",
    // Identity and defaults people set per repository.
    "user.name",
    "user.email",
    "user.useconfigonly",
    "init.defaultbranch",
    "pull.rebase",
    "pull.ff",
    "push.default",
    "push.autosetupremote",
    "merge.conflictstyle",
    "merge.ff",
    "rebase.autosquash",
    "rebase.autostash",
    "rerere.enabled",
    // Signing with the system's gpg (the program itself, `gpg.program`,
    // is not inert).
    "commit.gpgsign",
    "tag.gpgsign",
    // Presentation.
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
    "log.date",
    "log.decorate",
    "log.follow",
    "log.abbrevcommit",
    "log.showroot",
];

/// `remote.<name>.<key>` keys that only hold data. The URL is used by
/// network commands only, which ask anyway; a transport that runs a
/// program (`ext::`, `fd::`) is a hazard all the same.
const INERT_REMOTE: &[&str] = &[
    "url", "pushurl", "fetch", "push", "tagopt", "prune", "mirror",
];

/// `branch.<name>.<key>` keys that only hold data (`vscode-merge-base` is
/// written by VS Code into every repository it switches branches in).
const INERT_BRANCH: &[&str] = &[
    "remote",
    "pushremote",
    "merge",
    "rebase",
    "description",
    "vscode-merge-base",
];

/// `submodule.<name>.<key>` keys that only hold data (`update` only with
/// the values that run no command, checked below).
const INERT_SUBMODULE: &[&str] = &[
    "url",
    "active",
    "branch",
    "ignore",
    "fetchrecursesubmodules",
];

fn boolean(value: Option<&str>) -> bool {
    match value {
        None => true,
        Some(v) => matches!(
            v.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0" | ""
        ),
    }
}

/// A URL git fetches over a transport that runs a program.
fn runs_transport(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        let v = v.trim_start().to_ascii_lowercase();
        v.starts_with("ext::") || v.starts_with("fd::")
    })
}

/// A path value that stays inside the repository: relative, without `..`,
/// not from the home directory.
fn path_inside(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        !v.is_empty()
            && !v.starts_with(['/', '~', '\\'])
            && !v.contains(':')
            && !v.split(['/', '\\']).any(|c| c == "..")
    })
}

/// Whether a key (see [`canonical_key`]) with this value is known to be
/// harmless: it names no program and no file or repository outside the
/// one the command runs in. The allowlist behind [`runs_code`] and behind
/// which `git -c` settings a command may carry.
pub fn inert(key: &str, value: Option<&str>) -> bool {
    let (section, rest) = key.split_once('.').unwrap_or((key, ""));
    let (sub, name) = match rest.rsplit_once('.') {
        Some((sub, name)) => (Some(sub), name),
        None => (None, rest),
    };
    match (section, sub) {
        ("color" | "advice" | "column", _) => true,
        // `pager.<cmd> = true` only turns the pager on; a value names one.
        ("pager", None) => boolean(value),
        // An alias only runs a shell with `!`; otherwise it runs a git
        // subcommand, and `git <alias>` is unknown to the classifier.
        ("alias", None) => !value.is_some_and(|v| v.trim_start().starts_with('!')),
        ("remote", Some(_)) => INERT_REMOTE.contains(&name) && !runs_transport(value),
        ("branch", Some(_)) => INERT_BRANCH.contains(&name),
        ("submodule", Some(_)) => {
            (INERT_SUBMODULE.contains(&name) && !runs_transport(value))
                || (name == "update"
                    && matches!(value, Some("checkout" | "rebase" | "merge" | "none")))
        }
        ("core", None) => match name {
            "fsmonitor" => matches!(
                value.map(str::to_ascii_lowercase).as_deref(),
                Some("false" | "no" | "off" | "0" | "")
            ),
            "pager" => matches!(value, Some("cat" | "less" | "more" | "")),
            "attributesfile" | "excludesfile" => path_inside(value),
            _ => INERT.contains(&key),
        },
        // `help.autocorrect` with a command name would run it.
        ("help", None) if name == "autocorrect" => {
            value.is_some_and(|v| v.parse::<i64>().is_ok() || v == "never" || v == "0")
        }
        (_, None) => INERT.contains(&key),
        _ => false,
    }
}

/// Parses git configuration text into `(key, value)` pairs with the key as
/// `section[.subsection].name`, section and name lowercased. Returns the
/// 1-based number of the first line it does not understand.
pub fn parse(text: &str) -> Result<Vec<(String, Option<String>)>, usize> {
    let mut out = Vec::new();
    let mut section: Option<String> = None;
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let lineno = i + 1;
        let mut line = lines[i].trim_start().to_owned();
        i += 1;
        loop {
            line = line.trim_start().to_owned();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                break;
            }
            if line.starts_with('[') {
                let (name, rest) = section_header(&line).ok_or(lineno)?;
                section = Some(name);
                // git accepts a key on the same line as its section header.
                line = rest;
                continue;
            }
            let Some(sec) = &section else {
                return Err(lineno);
            };
            let name_len = line
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .unwrap_or(line.len());
            if name_len == 0 || !line.as_bytes()[0].is_ascii_alphabetic() {
                return Err(lineno);
            }
            let name = line[..name_len].to_ascii_lowercase();
            let after = line[name_len..].trim_start();
            let key = format!("{sec}.{name}");
            if after.is_empty() || after.starts_with('#') || after.starts_with(';') {
                out.push((key, None));
                break;
            }
            let Some(raw) = after.strip_prefix('=') else {
                return Err(lineno);
            };
            // A value may continue on the next line after a trailing `\`.
            let mut raw = raw.to_owned();
            while value_continues(&raw) && i < lines.len() {
                raw.pop();
                raw.push_str(lines[i]);
                i += 1;
            }
            out.push((key, Some(value(&raw).ok_or(lineno)?)));
            break;
        }
    }
    Ok(out)
}

/// `[section]`, `[section "subsection"]` or the old `[section.subsection]`;
/// returns the dotted name and the text after `]`.
fn section_header(line: &str) -> Option<(String, String)> {
    let body = &line[1..];
    let name_end = body.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))?;
    let name = body[..name_end].to_ascii_lowercase();
    if name.is_empty() {
        return None;
    }
    let rest = &body[name_end..];
    if let Some(rest) = rest.strip_prefix(']') {
        return Some((name, rest.to_owned()));
    }
    let rest = rest.trim_start().strip_prefix('"')?;
    let mut sub = String::new();
    let mut chars = rest.char_indices();
    while let Some((idx, c)) = chars.next() {
        match c {
            '\\' => sub.push(chars.next()?.1),
            '"' => {
                let after = rest[idx + 1..].strip_prefix(']')?;
                return Some((format!("{name}.{sub}"), after.to_owned()));
            }
            '\n' => return None,
            c => sub.push(c),
        }
    }
    None
}

fn value_continues(raw: &str) -> bool {
    let trailing = raw.chars().rev().take_while(|&c| c == '\\').count();
    trailing % 2 == 1
}

/// A value with quotes, escapes and trailing comments handled as git does.
fn value(raw: &str) -> Option<String> {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = raw.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'b' => {
                    out.pop();
                }
                c @ ('"' | '\\') => out.push(c),
                _ => return None,
            },
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    if quoted {
        return None;
    }
    Some(out.trim_end().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> Vec<String> {
        parse(text)
            .unwrap()
            .into_iter()
            .filter(|(k, v)| runs_code(k, v.as_deref()))
            .map(|(k, _)| k)
            .collect()
    }

    #[test]
    fn finds_keys_that_run_programs() {
        let text = "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = rm -f u.txt; echo\n\
                    [diff \"Ev\"]\n  textconv = ./x.sh\n[alias]\n  st = status\n  x = !sh\n\
                    [core] pager = less\n[pager]\n  log = ./p.sh\n  diff = true\n\
                    [includeIf \"gitdir:/x/\"]\n  path = other\n[remote \"o\"]\n url = u\n";
        assert_eq!(
            keys(text),
            [
                "core.fsmonitor",
                "diff.Ev.textconv",
                "alias.x",
                "pager.log",
                "includeif.gitdir:/x/.path",
            ]
        );
    }

    #[test]
    fn tricky_syntax_is_read_like_git_or_refused() {
        assert_eq!(keys("[core]fsmonitor=x"), ["core.fsmonitor"]);
        assert_eq!(keys("[CORE]\nFSMonitor = \"a\\\"b\""), ["core.fsmonitor"]);
        assert_eq!(keys("[core.x]\n"), Vec::<String>::new());
        assert_eq!(keys("[core]\n fsmonitor = false"), Vec::<String>::new());
        assert_eq!(keys("[core]\n fsmonitor = a\\\nb"), ["core.fsmonitor"]);
        assert!(parse("fsmonitor = x").is_err());
        assert!(parse("[core]\n fsmonitor = \"open").is_err());
        assert!(parse("[core\n").is_err());
    }
}
