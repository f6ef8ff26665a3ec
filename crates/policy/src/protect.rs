//! Protected locations: files that configure code which tools run on their
//! own, so that writing one turns a later harmless-looking command into
//! arbitrary code.
//!
//! Examples: `core.fsmonitor` in `.git/config` runs on `git status`; a hook
//! in `.git/hooks/` runs on `git commit`; direnv runs `.envrc` on `cd`;
//! `.capstan/` and the workspace's `capstan.toml` configure Capstan itself;
//! a project `.npmrc` or `.cargo/config.toml` changes what npm and cargo run.
//!
//! A write that names such a location is its own class: the verdict asks in
//! every profile, even `trusted`, and no allow rule covers it (see
//! [`crate::Policy`]). Deny rules still win.

/// Why a path is protected, for the approval text.
const WHAT: &str = "a protected file that configures code tools run on their own (git config and hooks, direnv, Capstan's own config, shell start-up files, tool configuration) or a system location";

/// Path components that are protected wherever they appear in a path.
/// Compared case-insensitively: on macOS `.GIT/config` is `.git/config`.
///
/// `.gitattributes` and `.gitmodules` are here because they choose which
/// configured filter, diff and merge drivers run and from where submodules
/// are fetched; `.npmrc`/`.yarnrc*` because npm and yarn read a project's
/// copy on every command (it can set `script-shell`, `node-options`, `git`).
const NAMES: &[&str] = &[
    ".git",
    ".capstan",
    ".envrc",
    ".gitconfig",
    ".gitmodules",
    ".gitattributes",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    ".inputrc",
    ".ssh",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".husky",
    ".vscode",
    ".pre-commit-config.yaml",
];

/// File names protected as the last component of a path: the workspace's
/// Capstan configuration.
const FILES: &[&str] = &["capstan.toml"];

/// System locations: outside the workspace, and never a command's business.
const SYSTEM: &[&str] = &[
    "/etc/", "/dev/", "/proc/", "/sys/", "/boot/", "/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/",
];

/// The reason text for a protected path.
pub(crate) fn describe(path: &str) -> String {
    format!("`{}` is {WHAT}", crate::display::clip(path))
}

/// Whether writing `path` (as written in a command, relative to the
/// command's directory, or absolute) writes a protected location.
pub fn protected_path(path: &str) -> bool {
    let p = path.trim_start_matches("./");
    let lower = p.to_ascii_lowercase();
    let components: Vec<&str> = lower.split('/').collect();
    if components.iter().any(|c| NAMES.contains(c)) {
        return true;
    }
    if components.last().is_some_and(|c| FILES.contains(c)) {
        return true;
    }
    if components
        .windows(2)
        .any(|w| w[0] == ".cargo" && w[1].starts_with("config"))
    {
        return true;
    }
    if p.starts_with('~') {
        return true;
    }
    SYSTEM.iter().any(|s| lower.starts_with(s))
}

/// Whether a glob pattern (as bash expands it, without `dotglob`) could
/// name a protected location. A leading `.` must be matched literally, so
/// `*.sh` never reaches `.git/`, but `*.toml` reaches `capstan.toml`.
pub(crate) fn glob_may_be_protected(pattern: &str) -> bool {
    if protected_path(pattern) {
        return true;
    }
    let lower = pattern.trim_start_matches("./").to_ascii_lowercase();
    let components: Vec<&str> = lower.split('/').collect();
    let last = components.len().saturating_sub(1);
    components.iter().enumerate().any(|(i, c)| {
        NAMES.iter().any(|n| glob_match(c, n))
            || (i == last && FILES.iter().any(|n| glob_match(c, n)))
            || (*c == "**")
    })
}

/// Minimal bash glob matching of one path component: `*`, `?`, `[...]`.
/// A name starting with `.` is only matched by a pattern starting with `.`.
fn glob_match(pattern: &str, name: &str) -> bool {
    if name.starts_with('.') && !pattern.starts_with('.') {
        return false;
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    matches_from(&p, &n)
}

fn matches_from(p: &[char], n: &[char]) -> bool {
    match p.first() {
        None => n.is_empty(),
        Some('*') => (0..=n.len()).any(|k| matches_from(&p[1..], &n[k..])),
        Some('?') => !n.is_empty() && matches_from(&p[1..], &n[1..]),
        Some('[') => match p.iter().position(|&c| c == ']') {
            // A class matches one character; which ones is not worth
            // working out: assume it matches.
            Some(end) if end > 1 => !n.is_empty() && matches_from(&p[end + 1..], &n[1..]),
            _ => !n.is_empty() && n[0] == '[' && matches_from(&p[1..], &n[1..]),
        },
        Some(c) => !n.is_empty() && n[0] == *c && matches_from(&p[1..], &n[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_locations() {
        for p in [
            ".git/config",
            "./.git/hooks/pre-commit",
            "sub/.git/config",
            ".GIT/config",
            ".envrc",
            ".capstan/policy.toml",
            "capstan.toml",
            "../capstan.toml",
            ".cargo/config.toml",
            "~/.bashrc",
            "/etc/passwd",
        ] {
            assert!(protected_path(p), "{p}");
        }
        for p in [
            "src/main.rs",
            "git/config",
            "capstan.toml.bak",
            "docs/envrc",
        ] {
            assert!(!protected_path(p), "{p}");
        }
    }

    #[test]
    fn globs() {
        assert!(glob_may_be_protected("*.toml"));
        assert!(glob_may_be_protected(".g*/config"));
        assert!(glob_may_be_protected(".*"));
        assert!(glob_may_be_protected("**/x"));
        assert!(!glob_may_be_protected("*.sh"));
        assert!(!glob_may_be_protected("src/*.rs"));
        // `*` matches `capstan.toml` in the workspace root.
        assert!(glob_may_be_protected("*"));
    }
}
