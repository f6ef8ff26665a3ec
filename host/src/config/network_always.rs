//! "Always for this workspace": a person's `approved-always` on a connection
//! to a host no `[network]` rule names writes the proxy's suggested rule
//! into the user's capstan.toml,
//!
//! ```toml
//! [network.workspace."/home/me/project"]
//! allow = ["api.example.com"]
//! ```
//!
//! so the next run reads it like any other rule (`NetworkSection::policy_for`).
//! The file is edited with `toml_edit` (its comments, order and layout stay),
//! checked as the user's configuration before it is written, and replaced
//! atomically (a temporary file in the same directory, its mode kept, then a
//! rename), so a crash leaves the old file or the new one. Only the user's
//! own file is written, never a workspace's capstan.toml (a command can write
//! that one, and it must not widen its own network).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow, bail};

/// What writing the rule did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// The rule was added to the file.
    Added,
    /// The workspace's entry already had the rule; the file is untouched.
    AlreadyThere,
}

/// Rules this process wrote (workspace root, rule): a long-lived process
/// (`capstan serve`) read its configuration at start-up, so its later runs
/// add these to the workspace's policy (`NetworkSection::policy_for`) rather
/// than asking again for a host the person allowed always.
static WRITTEN: std::sync::Mutex<Vec<(PathBuf, String)>> = std::sync::Mutex::new(Vec::new());

/// The rules this process wrote for the workspace `root` (see [`WRITTEN`]).
pub fn written_for(root: &Path) -> Vec<String> {
    let written = WRITTEN.lock().unwrap_or_else(|e| e.into_inner());
    written
        .iter()
        .filter(|(r, _)| r == root)
        .map(|(_, rule)| rule.clone())
        .collect()
}

/// Adds `rule` to `[network.workspace."<root>"] allow` in `file` (the user's
/// capstan.toml; made when missing). An entry whose key names `root` another
/// way (`~/project`, a symlink) gets the rule; else a new entry is keyed by
/// `root`. Errors name the file and what is wrong. Once in the file, the
/// rule also applies to this process's later runs ([`written_for`]).
pub fn write_rule(file: &Path, root: &Path, rule: &str, home: Option<&Path>) -> Result<Written> {
    let written = write_rule_to_file(file, root, rule, home)?;
    let mut remembered = WRITTEN.lock().unwrap_or_else(|e| e.into_inner());
    let entry = (root.to_path_buf(), rule.to_owned());
    if !remembered.contains(&entry) {
        remembered.push(entry);
    }
    Ok(written)
}

fn write_rule_to_file(
    file: &Path,
    root: &Path,
    rule: &str,
    home: Option<&Path>,
) -> Result<Written> {
    capstan_egress::Policy::new(&[rule.to_owned()], &[], &[], false)
        .map_err(|e| anyhow!("{rule:?} is not a [network] rule: {e}"))?;
    let workspace_file = root.join("capstan.toml");
    // A symlinked capstan.toml (dotfiles) is edited where it lives.
    let target = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    if target == workspace_file || std::fs::canonicalize(&workspace_file).is_ok_and(|w| w == target)
    {
        bail!(
            "{} is the workspace's own capstan.toml; rules that widen a workspace's network \
             are written only to the user's file",
            target.display()
        );
    }
    let text = match std::fs::read_to_string(&target) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", target.display())),
    };
    let (new_text, written) = add_rule(&text, root, rule, home)
        .with_context(|| format!("cannot add {rule:?} to {}", target.display()))?;
    if written == Written::AlreadyThere {
        return Ok(written);
    }
    let problems = super::check::check_text(&new_text, &target, super::check::Scope::User);
    if let Some(p) = problems.first() {
        bail!(
            "adding {rule:?} would leave {} with a problem ({}); add it by hand under \
             [network.workspace.\"{}\"] allow",
            target.display(),
            p.message,
            root.display()
        );
    }
    replace_atomically(&target, new_text.as_bytes())?;
    Ok(written)
}

/// The text of a capstan.toml with `rule` in the workspace's allow list.
pub fn add_rule(
    text: &str,
    root: &Path,
    rule: &str,
    home: Option<&Path>,
) -> Result<(String, Written)> {
    let root_key = root.to_str().ok_or_else(|| {
        anyhow!(
            "the workspace path {} is not UTF-8, which capstan.toml cannot name",
            root.display()
        )
    })?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| anyhow!("it is not valid TOML: {e}"))?;
    let network = table_in(doc.as_table_mut(), "network", "[network]")?;
    let workspaces = table_in(network, "workspace", "[network.workspace]")?;
    let key = workspaces
        .iter()
        .map(|(k, _)| k.to_owned())
        .find(|k| super::network::same_root(Path::new(k), root, home))
        .unwrap_or_else(|| root_key.to_owned());
    let place = format!("[network.workspace.\"{key}\"]");
    let entry = workspaces
        .entry(&key)
        .or_insert_with(|| toml_edit::Item::Table(toml_edit::Table::new()))
        .as_table_like_mut()
        .ok_or_else(|| anyhow!("{place} is not a table"))?;
    let allow = match entry.get_mut("allow") {
        Some(item) => item
            .as_array_mut()
            .ok_or_else(|| anyhow!("`allow` in {place} is not a list of rules"))?,
        None => {
            entry.insert("allow", toml_edit::value(toml_edit::Array::new()));
            entry
                .get_mut("allow")
                .and_then(toml_edit::Item::as_array_mut)
                .ok_or_else(|| anyhow!("`allow` in {place} could not be made"))?
        }
    };
    if allow.iter().any(|v| v.as_str() == Some(rule)) {
        return Ok((text.to_owned(), Written::AlreadyThere));
    }
    allow.push(rule);
    Ok((doc.to_string(), Written::Added))
}

/// `parent.<key>` as a table, made (implicit: no header of its own) when
/// missing.
fn table_in<'a>(
    parent: &'a mut toml_edit::Table,
    key: &str,
    place: &str,
) -> Result<&'a mut toml_edit::Table> {
    let item = parent.entry(key).or_insert_with(|| {
        let mut t = toml_edit::Table::new();
        t.set_implicit(true);
        toml_edit::Item::Table(t)
    });
    if let Some(inline) = item.as_inline_table_mut() {
        // `network = { ... }`: rewritten as a table, keys kept.
        let table = std::mem::take(inline).into_table();
        *item = toml_edit::Item::Table(table);
    }
    item.as_table_mut()
        .ok_or_else(|| anyhow!("{place} is not a table"))
}

/// Replaces `file` with `bytes`: a temporary file in the same directory
/// (same file system), synced, with the old file's mode, renamed over it.
fn replace_atomically(file: &Path, bytes: &[u8]) -> Result<()> {
    let dir: PathBuf = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".capstan.toml.")
        .tempfile_in(&dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    if let Ok(meta) = std::fs::metadata(file) {
        tmp.as_file()
            .set_permissions(meta.permissions())
            .with_context(|| {
                format!(
                    "cannot set the mode of a temporary file in {}",
                    dir.display()
                )
            })?;
    }
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .with_context(|| format!("cannot write a temporary file in {}", dir.display()))?;
    tmp.persist(file)
        .map_err(|e| anyhow!("cannot replace {}: {}", file.display(), e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = "/home/me/project";

    #[test]
    fn keeps_comments_and_adds_to_an_existing_entry() {
        let text = "# my settings\n[network]\nask = true # ask me\n\n\
                    [network.workspace.\"/home/me/project\"]\n# the registry\nallow = [\"crates.io\"]\n";
        let (out, w) = add_rule(text, Path::new(ROOT), "api.example.com", None).unwrap();
        assert_eq!(w, Written::Added);
        assert!(out.contains("# my settings"), "{out}");
        assert!(out.contains("ask = true # ask me"), "{out}");
        assert!(out.contains("# the registry"), "{out}");
        assert!(
            out.contains("allow = [\"crates.io\", \"api.example.com\"]"),
            "{out}"
        );
        let parsed: crate::config::Config = toml::from_str(&out).unwrap();
        let ws = &parsed.network.workspace[Path::new(ROOT)];
        assert_eq!(ws.allow, ["crates.io", "api.example.com"]);
    }

    #[test]
    fn makes_the_entry_when_missing() {
        let text = "# top\n[network]\nask = true\nallow = [\"crates.io\"]\n";
        let (out, w) = add_rule(text, Path::new(ROOT), "api.example.com:8443", None).unwrap();
        assert_eq!(w, Written::Added);
        assert!(
            out.starts_with("# top\n[network]\nask = true\nallow = [\"crates.io\"]\n"),
            "{out}"
        );
        assert!(
            out.contains(
                "[network.workspace.\"/home/me/project\"]\nallow = [\"api.example.com:8443\"]"
            ),
            "{out}"
        );
        // No empty `[network.workspace]` header.
        assert!(!out.contains("[network.workspace]"), "{out}");
        let parsed: crate::config::Config = toml::from_str(&out).unwrap();
        assert_eq!(parsed.network.allow, ["crates.io"]);
        assert_eq!(
            parsed.network.workspace[Path::new(ROOT)].allow,
            ["api.example.com:8443"]
        );
        // An empty file gets the entry alone.
        let (out, _) = add_rule("", Path::new(ROOT), "a.example", None).unwrap();
        assert_eq!(
            out,
            "[network.workspace.\"/home/me/project\"]\nallow = [\"a.example\"]\n"
        );
    }

    #[test]
    fn does_not_duplicate_a_rule() {
        let text = "[network.workspace.\"/home/me/project\"]\nallow = [\"a.example\"]\n";
        let (out, w) = add_rule(text, Path::new(ROOT), "a.example", None).unwrap();
        assert_eq!(w, Written::AlreadyThere);
        assert_eq!(out, text);
    }

    #[test]
    fn an_entry_naming_the_root_through_home_gets_the_rule() {
        let text = "[network.workspace.\"~/project\"]\nallow = [\"a.example\"]\n";
        let (out, _) = add_rule(
            text,
            Path::new(ROOT),
            "b.example",
            Some(Path::new("/home/me")),
        )
        .unwrap();
        assert_eq!(
            out,
            "[network.workspace.\"~/project\"]\nallow = [\"a.example\", \"b.example\"]\n"
        );
    }

    #[test]
    fn refuses_a_shape_it_cannot_edit() {
        let err = add_rule("network = 3\n", Path::new(ROOT), "a.example", None).unwrap_err();
        assert!(
            err.to_string().contains("[network] is not a table"),
            "{err}"
        );
        let err = add_rule(
            "[network.workspace.\"/home/me/project\"]\nallow = \"a.example\"\n",
            Path::new(ROOT),
            "b.example",
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("not a list of rules"), "{err}");
        let err = add_rule("[network\n", Path::new(ROOT), "a.example", None).unwrap_err();
        assert!(err.to_string().contains("not valid TOML"), "{err}");
    }

    #[test]
    fn writes_atomically_keeping_the_mode_and_never_the_workspace_file() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("capstan.toml");
        std::fs::write(&file, "# mine\n[network]\nask = true\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        assert_eq!(
            write_rule(&file, &ws, "a.example", None).unwrap(),
            Written::Added
        );
        assert_eq!(
            write_rule(&file, &ws, "a.example", None).unwrap(),
            Written::AlreadyThere
        );
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with("# mine\n[network]\nask = true\n"),
            "{text}"
        );
        assert!(text.contains("allow = [\"a.example\"]"), "{text}");
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        // Nothing left behind but the file and the workspace.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);

        // The workspace's own file is never the target.
        let own = ws.join("capstan.toml");
        std::fs::write(&own, "").unwrap();
        let err = write_rule(&own, &ws, "a.example", None).unwrap_err();
        assert!(
            err.to_string().contains("workspace's own capstan.toml"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&own).unwrap(), "");

        // A file that cannot be written names itself (its "directory" is a
        // file: fails for root too).
        let not_dir = dir.path().join("plain");
        std::fs::write(&not_dir, "").unwrap();
        let err = write_rule(&not_dir.join("capstan.toml"), &ws, "a.example", None).unwrap_err();
        assert!(err.to_string().contains("plain/capstan.toml"), "{err:#}");
    }
}
