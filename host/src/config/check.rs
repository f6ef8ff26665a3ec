//! Checking a `capstan.toml` before anything uses it: TOML syntax, keys nobody
//! reads (a typo such as `[modle]` would otherwise be ignored without a word), and
//! the shape of every section. Each problem names the file, the line and a fix,
//! with the nearest known key when one is close.
//!
//! Two kinds of file: the user's own (`<config dir>/capstan.toml`, every section)
//! and a workspace's (only `[[plugin]]` and `[[mcp_server]]`, whose entries the
//! registry then refuses with a warning: a workspace cannot add plugins or servers). A broken user file stops every command that reads it; a broken
//! workspace file stops runs in that workspace ([`check_workspace`]).

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::Config;
use crate::config::McpServerEntry;
use crate::plugins::manifest::PluginEntry;

/// Top-level keys of the user's capstan.toml.
pub const USER_KEYS: &[&str] = &[
    "model",
    "run",
    "prices",
    "approval",
    "policy",
    "agents",
    "index",
    "sandbox",
    "network",
    "server",
    "changes",
    "store",
    "plugin",
    "mcp_server",
];

/// Top-level keys a workspace's capstan.toml may hold (well-formed, but refused by
/// the registry: see `registry::refuse_workspace_plugins`).
pub const WORKSPACE_KEYS: &[&str] = &["plugin", "mcp_server"];

/// Which capstan.toml a text is.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    User,
    /// A workspace's file; `user_file` is where user-only sections belong.
    Workspace {
        user_file: &'a Path,
    },
}

/// One problem in a capstan.toml.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConfigError {
    pub file: PathBuf,
    /// 1-based, when the problem has a place.
    pub line: Option<usize>,
    pub message: String,
    pub fix: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        write!(f, ": {}\n  fix: {}", self.message, self.fix)
    }
}

/// Several problems as one error, one per paragraph.
#[derive(Debug)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl std::error::Error for ConfigErrors {}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// The file's problems; a missing file has none (every setting has a default).
pub fn check_file(path: &Path, scope: Scope<'_>) -> Vec<ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => check_text(&text, path, scope),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
        Err(e) => vec![ConfigError {
            file: path.to_path_buf(),
            line: None,
            message: format!("cannot read: {e}"),
            fix: "make the file readable, or remove it".into(),
        }],
    }
}

/// A workspace's capstan.toml, for a run about to start there: its problems as one
/// error that stops the run.
pub fn check_workspace(root: &Path, user_file: &Path) -> Result<(), ConfigErrors> {
    let errors = check_file(&root.join("capstan.toml"), Scope::Workspace { user_file });
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ConfigErrors(errors))
    }
}

/// The entries the plugin and MCP loaders read, typed, so their mistakes have a line.
#[derive(Deserialize)]
struct Entries {
    #[serde(default)]
    #[allow(dead_code)] // Deserialized for its errors only.
    plugin: Vec<PluginEntry>,
    #[serde(default)]
    #[allow(dead_code)]
    mcp_server: Vec<McpServerEntry>,
}

pub fn check_text(text: &str, file: &Path, scope: Scope<'_>) -> Vec<ConfigError> {
    let at = |line: Option<usize>, message: String, fix: String| ConfigError {
        file: file.to_path_buf(),
        line,
        message,
        fix,
    };
    let table: toml::Table = match toml::from_str(text) {
        Ok(t) => t,
        Err(e) => {
            return vec![at(
                line_of_span(text, e.span()),
                format!("not valid TOML: {}", e.message().trim()),
                "correct the syntax on that line (strings in double quotes, one [section] \
                 per name); `capstan init` writes a commented example"
                    .into(),
            )];
        }
    };
    let mut errors = Vec::new();
    let allowed = match scope {
        Scope::User => USER_KEYS,
        Scope::Workspace { .. } => WORKSPACE_KEYS,
    };
    for (key, value) in &table {
        if allowed.contains(&key.as_str()) {
            continue;
        }
        let shown = shape(key, value);
        let line = line_of_key(text, key);
        let error = match scope {
            Scope::Workspace { user_file } if key == "network" && names_a_secret(value) => at(
                line,
                "a workspace's capstan.toml cannot supply or name a secret \
                 ([[network.credential]], value_env, value_file): a checked-out folder must \
                 not choose which of your secrets a command's requests carry"
                    .into(),
                format!(
                    "remove it here; put [[network.credential]] in your own {} if you want it",
                    user_file.display()
                ),
            ),
            Scope::Workspace { user_file } if USER_KEYS.contains(&key.as_str()) => at(
                line,
                format!(
                    "`{shown}` is not read from a workspace's capstan.toml (a checked-out folder \
                     must not choose your model, budget, policy or sandbox)"
                ),
                format!("move it to your own {}", user_file.display()),
            ),
            _ => at(
                line,
                format!("unknown key `{shown}`"),
                match nearest(key, allowed) {
                    Some(near) => format!("did you mean `{}`?", shape(near, value)),
                    None => format!("remove it; the known keys are: {}", allowed.join(", ")),
                },
            ),
        };
        errors.push(error);
    }
    if !errors.is_empty() {
        return errors;
    }
    if matches!(scope, Scope::User)
        && let Err(e) = toml::from_str::<Config>(text)
    {
        errors.push(serde_error(text, file, &e));
    }
    if let Err(e) = toml::from_str::<Entries>(text) {
        errors.push(serde_error(text, file, &e));
    }
    errors
}

/// Whether a `[network]` table mentions a credential anywhere (keys
/// `credential`, `value_env`, `value_file`, at any depth).
fn names_a_secret(value: &toml::Value) -> bool {
    match value {
        toml::Value::Table(t) => t.iter().any(|(k, v)| {
            matches!(k.as_str(), "credential" | "value_env" | "value_file") || names_a_secret(v)
        }),
        toml::Value::Array(a) => a.iter().any(names_a_secret),
        _ => false,
    }
}

/// A typed-parse error, with the line and, for an unknown name, the nearest known one.
fn serde_error(text: &str, file: &Path, e: &toml::de::Error) -> ConfigError {
    let message = e.message().trim().to_string();
    // serde names the unknown word first, then the expected ones, all in backticks:
    // "unknown field `modle`, expected one of `kind`, `model`".
    let quoted: Vec<&str> = message.split('`').skip(1).step_by(2).collect();
    let fix = match quoted.split_first() {
        Some((unknown, expected))
            if message.starts_with("unknown field") || message.starts_with("unknown variant") =>
        {
            match nearest(unknown, expected) {
                Some(near) => format!("did you mean `{near}`?"),
                None => format!("use one of: {}", expected.join(", ")),
            }
        }
        _ => "correct the value on that line; `capstan init` writes a commented example".into(),
    };
    ConfigError {
        file: file.to_path_buf(),
        line: line_of_span(text, e.span()),
        message,
        fix,
    }
}

/// How a top-level key is written: `[name]`, `[[name]]` or `name`.
fn shape(key: &str, value: &toml::Value) -> String {
    match value {
        toml::Value::Table(_) => format!("[{key}]"),
        toml::Value::Array(items) if items.iter().all(|v| v.is_table()) && !items.is_empty() => {
            format!("[[{key}]]")
        }
        _ => key.to_string(),
    }
}

/// The closest of `known` to `word`, if it is close enough to be a typo.
fn nearest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(&word, k), *k))
        .filter(|(d, k)| *d <= 2usize.max(k.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn line_of_span(text: &str, span: Option<std::ops::Range<usize>>) -> Option<usize> {
    let start = span?.start.min(text.len());
    Some(text[..start].matches('\n').count() + 1)
}

/// The first line that opens `key` as a table (`[key]`, `[key.sub]`, `[[key]]`) or
/// assigns it (`key = ...`).
fn line_of_key(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|line| {
            let l = line.trim_start();
            let header = l.trim_start_matches('[').trim_start();
            if l.starts_with('[') {
                header
                    .strip_prefix(key)
                    .is_some_and(|rest| rest.trim_start().starts_with([']', '.']))
            } else {
                l.strip_prefix(key)
                    .is_some_and(|rest| rest.trim_start().starts_with(['=', '.']))
            }
        })
        .map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Vec<ConfigError> {
        check_text(text, Path::new("/c/capstan.toml"), Scope::User)
    }

    #[test]
    fn a_misspelt_section_names_the_line_and_the_nearest_key() {
        let errors = user("[run]\nbudget_usd = 1.0\n\n[modle]\nkind = \"offline\"\n");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].line, Some(4));
        assert_eq!(errors[0].message, "unknown key `[modle]`");
        assert_eq!(errors[0].fix, "did you mean `[model]`?");
        assert_eq!(
            errors[0].to_string(),
            "/c/capstan.toml:4: unknown key `[modle]`\n  fix: did you mean `[model]`?"
        );
    }

    #[test]
    fn a_misspelt_field_inside_a_section_is_caught_with_a_suggestion() {
        let errors = user("[run]\nbudget_usdd = 1.0\n");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].line, Some(2), "{errors:?}");
        assert!(errors[0].message.contains("budget_usdd"), "{errors:?}");
        assert_eq!(errors[0].fix, "did you mean `budget_usd`?");
        // Far from anything: the choices instead.
        let errors = user("[index]\nanalyzer = \"klingon\"\n");
        assert!(errors[0].fix.contains("simple"), "{errors:?}");
    }

    #[test]
    fn syntax_errors_have_a_line_and_good_files_have_no_errors() {
        let errors = user("[run]\nbudget_usd = \n");
        assert_eq!(errors[0].line, Some(2), "{errors:?}");
        assert!(errors[0].message.starts_with("not valid TOML"));
        assert!(user("").is_empty());
        assert!(
            user("[model]\nkind = \"offline\"\n[run]\nbudget_usd = 0.5\n[[plugin]]\nname = \"x\"\ncomponent = \"x.wasm\"\nkinds = [\"x\"]\n")
                .is_empty()
        );
    }

    #[test]
    fn a_workspace_file_holds_plugins_only() {
        let ws = |text: &str| {
            check_text(
                text,
                Path::new("/w/capstan.toml"),
                Scope::Workspace {
                    user_file: Path::new("/c/capstan.toml"),
                },
            )
        };
        let errors = ws("[model]\nkind = \"anthropic\"\n");
        assert_eq!(errors.len(), 1);
        assert!(errors[0].fix.contains("/c/capstan.toml"), "{errors:?}");
        let errors = ws("[[plugn]]\nname = \"x\"\n");
        assert_eq!(errors[0].fix, "did you mean `[[plugin]]`?");
        let errors =
            ws("[[plugin]]\nname = \"x\"\ncomponent = \"x.wasm\"\nkinds = [\"x\"]\nlimts = {}\n");
        assert!(errors[0].line.is_some(), "{errors:?}");
        assert_eq!(errors[0].fix, "did you mean `limits`?", "{errors:?}");
        let errors = ws(
            "[[network.credential]]\nhost = \"api.github.com\"\nheader = \"Authorization\"\nvalue_env = \"GITHUB_TOKEN\"\n",
        );
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].message.contains("cannot supply or name a secret"),
            "{errors:?}"
        );
        assert_eq!(errors[0].line, Some(1), "{errors:?}");
    }
}
