//! Facts about the git repository a command runs in: which keys of its
//! configuration make git run a program.
//!
//! git runs programs named in the repository's own configuration
//! (`core.fsmonitor` on `git status`, `diff.external` and
//! `diff.<driver>.textconv` on `git diff`/`git log -p`, `filter.<driver>.clean`
//! on `git status`, ...). Any earlier write or extracted archive can plant
//! such a key, so a repository whose configuration holds one makes every
//! `git` command `unknown` (see [`crate::Context`]).
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

/// One configuration key that makes git run a program.
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
    /// Every key found that makes git run a program, in file order.
    pub hazards: Vec<ConfigHazard>,
}

impl RepoFacts {
    /// Finds the repository git would use for a command run in `cwd` (a
    /// directory inside `workspace`), looking no higher than `workspace`,
    /// and reads its configuration: `config` and `config.worktree` of the
    /// git directory (following a `.git` file's `gitdir:` and a worktree's
    /// `commondir`), the configuration of its submodules under `modules/`,
    /// and every file they include.
    ///
    /// Never fails: a file that exists but cannot be read or parsed is
    /// itself a hazard, since git may read it differently.
    pub fn scan(workspace: &Path, cwd: &Path) -> RepoFacts {
        let mut facts = RepoFacts::default();
        let Some(git_dir) = discover(workspace, cwd, &mut facts) else {
            return facts;
        };
        let mut files = vec![git_dir.join("config"), git_dir.join("config.worktree")];
        if let Ok(common) = std::fs::read_to_string(git_dir.join("commondir")) {
            let common = resolve(&git_dir, common.trim());
            files.push(common.join("config"));
            files.push(common.join("config.worktree"));
            collect_modules(&common.join("modules"), &mut files, 0);
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

/// Whether a configuration key (section and name lowercased, subsection as
/// written) makes git run a program, or pulls in another file. `value` is
/// `None` for a key written without `=` (boolean true).
pub fn runs_code(key: &str, value: Option<&str>) -> bool {
    const EXACT: &[&str] = &[
        "core.fsmonitor",
        "core.pager",
        "core.editor",
        "core.sshcommand",
        "core.hookspath",
        "core.askpass",
        "core.gitproxy",
        "core.alternaterefscommand",
        "diff.external",
        "sequence.editor",
        "credential.helper",
        "gpg.program",
        "include.path",
        "uploadpack.packobjectshook",
        "interactive.difffilter",
        "web.browser",
        "help.browser",
        "man.viewer",
        "imap.tunnel",
        "sendemail.smtpserver",
        "sendemail.sendmailcmd",
        "ssh.variant",
        "protocol.allow",
    ];
    // `section.<anything>.name`: the subsection names a driver, tool, URL
    // or condition, which the attacker chooses.
    const PER_SUBSECTION: &[(&str, &str)] = &[
        ("diff", "textconv"),
        ("diff", "command"),
        ("filter", "clean"),
        ("filter", "smudge"),
        ("filter", "process"),
        ("merge", "driver"),
        ("credential", "helper"),
        ("gpg", "program"),
        ("gpg", "defaultkeycommand"),
        ("includeif", "path"),
        ("remote", "uploadpack"),
        ("remote", "receivepack"),
        ("remote", "vcs"),
        ("difftool", "cmd"),
        ("mergetool", "cmd"),
        ("man", "cmd"),
        ("man", "path"),
        ("browser", "cmd"),
        ("browser", "path"),
        ("trailer", "command"),
        ("trailer", "cmd"),
        ("protocol", "allow"),
        ("url", "insteadof"),
        ("url", "pushinsteadof"),
    ];
    let (section, rest) = key.split_once('.').unwrap_or((key, ""));
    let name = rest.rsplit('.').next().unwrap_or(rest);
    let has_sub = rest.contains('.');
    if EXACT.contains(&key) {
        return match key {
            // Values that run nothing.
            "core.fsmonitor" => !matches!(
                value.map(str::to_ascii_lowercase).as_deref(),
                Some("false" | "no" | "off" | "0" | "")
            ),
            "core.pager" => !matches!(value, Some("cat" | "less" | "more" | "")),
            _ => true,
        };
    }
    if has_sub
        && PER_SUBSECTION
            .iter()
            .any(|(s, n)| *s == section && *n == name)
    {
        return true;
    }
    match section {
        // `alias.x = !cmd` and `submodule.x.update = !cmd` run a shell.
        "alias" | "submodule" => value.is_some_and(|v| v.trim_start().starts_with('!')),
        // `pager.<cmd> = <program>`; a boolean only turns the pager on.
        "pager" => value.is_some_and(|v| {
            !matches!(
                v.to_ascii_lowercase().as_str(),
                "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0" | ""
            )
        }),
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
