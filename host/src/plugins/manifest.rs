//! Plugin manifests: which component serves which capability kinds, with what
//! permissions and limits.
//!
//! A manifest is a TOML file with `[[plugin]]` entries. The bundled plugins come
//! from `bundled.toml` inside the binary; users add or replace plugins in
//! `capstan.toml` in their config dir (a workspace's capstan.toml may not: see
//! the registry). Every entry is validated
//! on its own: one bad entry is reported with its file and field and the others
//! still load.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::plugins::engine::MAX_MEMORY_MB;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
#[derive(Default)]
pub enum WorkspaceAccess {
    #[default]
    None,
    Read,
    ReadWrite,
}

impl fmt::Display for WorkspaceAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Read => "read",
            Self::ReadWrite => "read-write",
        })
    }
}

/// Host services a plugin can import (the WIT interfaces of `capstan:plugin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostService {
    Events,
    Cancel,
    Exec,
    Index,
    Approval,
    Model,
}

impl HostService {
    pub const ALL: [HostService; 6] = [
        Self::Events,
        Self::Cancel,
        Self::Exec,
        Self::Index,
        Self::Approval,
        Self::Model,
    ];

    /// The WIT interface name, as it appears in a component's imports.
    pub fn interface(self) -> &'static str {
        match self {
            Self::Events => "events",
            Self::Cancel => "cancel",
            Self::Exec => "exec",
            Self::Index => "index",
            Self::Approval => "approval",
            Self::Model => "model",
        }
    }

    /// Services that carry no authority (reporting progress, asking whether the
    /// task was cancelled) are granted to every plugin.
    pub fn always_granted(self) -> bool {
        matches!(self, Self::Events | Self::Cancel)
    }
}

impl fmt::Display for HostService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.interface())
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Permissions {
    #[serde(default = "default_workspace")]
    pub workspace: WorkspaceAccess,
    #[serde(default)]
    pub host: BTreeSet<HostService>,
}

fn default_workspace() -> WorkspaceAccess {
    WorkspaceAccess::None
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    #[serde(default = "default_memory_mb")]
    pub memory_mb: u64,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Wasm instructions (roughly) a task may execute; unlimited when absent.
    #[serde(default)]
    pub fuel: Option<u64>,
}

fn default_memory_mb() -> u64 {
    64
}
fn default_timeout_ms() -> u64 {
    120_000
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_mb: default_memory_mb(),
            timeout_ms: default_timeout_ms(),
            fuel: None,
        }
    }
}

/// One `[[plugin]]` entry as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PluginEntry {
    pub name: String,
    #[serde(default = "default_version")]
    pub version: String,
    /// A path (relative to the manifest file) or `builtin:<name>`.
    pub component: String,
    /// Hex sha256 of the component file; required for files.
    #[serde(default)]
    pub sha256: Option<String>,
    /// Where `capstan plugins add oci://...` got the component, pinned by its
    /// manifest digest (`oci://REGISTRY/REPOSITORY@sha256:...`). Provenance for
    /// people: what runs is the local copy, checked against `sha256`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<String>,
    pub kinds: Vec<String>,
    #[serde(default)]
    pub permissions: Permissions,
    #[serde(default)]
    pub limits: Limits,
}

fn default_version() -> String {
    "0.0.0".into()
}

/// A manifest file. Unknown top-level sections are other parts of `capstan.toml`
/// (policy, models) and are not this module's business.
#[derive(Debug, Deserialize)]
struct ManifestFile {
    #[serde(default)]
    plugin: Vec<toml::Value>,
}

/// Where a component's bytes come from.
#[derive(Debug, Clone)]
pub enum ComponentSource {
    Builtin(String),
    File(PathBuf),
}

impl fmt::Display for ComponentSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Builtin(name) => write!(f, "builtin:{name}"),
            Self::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// A validated manifest entry.
#[derive(Debug, Clone)]
pub struct PluginSpec {
    pub entry: PluginEntry,
    pub source: ComponentSource,
    /// The manifest this entry came from, for error messages.
    pub origin: String,
}

/// A problem with one manifest entry (or a whole file), named precisely enough to
/// fix: the file, the entry and the field.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{origin}: {what}")]
pub struct ManifestError {
    pub origin: String,
    pub what: String,
}

/// Parse a manifest's text. Returns the valid entries and one error per invalid
/// entry; a file that is not TOML at all is a single error.
pub fn parse(
    text: &str,
    origin: &str,
    base_dir: Option<&Path>,
) -> (Vec<PluginSpec>, Vec<ManifestError>) {
    let err = |what: String| ManifestError {
        origin: origin.to_string(),
        what,
    };
    let file: ManifestFile = match toml::from_str(text) {
        Ok(f) => f,
        Err(e) => {
            return (
                vec![],
                vec![err(format!("not a valid manifest: {}", e.message().trim()))],
            );
        }
    };
    let mut specs = Vec::new();
    let mut errors = Vec::new();
    for (i, raw) in file.plugin.into_iter().enumerate() {
        let label = raw
            .get("name")
            .and_then(|n| n.as_str())
            .map(|n| format!("plugin `{n}`"))
            .unwrap_or_else(|| format!("plugin #{}", i + 1));
        let entry: PluginEntry = match raw.try_into() {
            Ok(e) => e,
            Err(e) => {
                errors.push(err(format!("{label}: {}", e.message().trim())));
                continue;
            }
        };
        match validate(entry, base_dir) {
            Ok((entry, source)) => specs.push(PluginSpec {
                entry,
                source,
                origin: origin.to_string(),
            }),
            Err(what) => errors.push(err(format!("{label}: {what}"))),
        }
    }
    (specs, errors)
}

/// Read and parse a manifest file; a missing file is no error (no plugins).
pub fn load_file(path: &Path) -> (Vec<PluginSpec>, Vec<ManifestError>) {
    let origin = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&text, &origin, path.parent()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (vec![], vec![]),
        Err(e) => (
            vec![],
            vec![ManifestError {
                origin,
                what: format!("cannot read: {e}"),
            }],
        ),
    }
}

/// How each `[[plugin]]` entry of a manifest file is named in messages
/// (`hello`, or `#2` when it has no name), without validating the entries. A
/// missing or unreadable file has none; a file that is not TOML names none
/// either (its other readers report it).
pub fn entry_labels(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return vec![];
    };
    entry_labels_of(&text)
}

/// [`entry_labels`] of a manifest's text.
pub fn entry_labels_of(text: &str) -> Vec<String> {
    let Ok(file) = toml::from_str::<ManifestFile>(text) else {
        return vec![];
    };
    file.plugin
        .iter()
        .enumerate()
        .map(|(i, raw)| {
            raw.get("name")
                .and_then(|n| n.as_str())
                .map(|n| format!("`{n}`"))
                .unwrap_or_else(|| format!("#{}", i + 1))
        })
        .collect()
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// Kinds may also carry a namespace (`mcp:server/tool`).
fn is_kind(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_:./".contains(c))
}

fn validate(
    entry: PluginEntry,
    base_dir: Option<&Path>,
) -> Result<(PluginEntry, ComponentSource), String> {
    if !is_name(&entry.name) {
        return Err(format!(
            "field `name`: {:?} must be 1-64 characters of a-z, 0-9, '-' or '_'",
            entry.name
        ));
    }
    if entry.kinds.is_empty() {
        return Err("field `kinds`: list at least one capability kind the plugin serves".into());
    }
    if let Some(bad) = entry.kinds.iter().find(|k| !is_kind(k)) {
        return Err(format!(
            "field `kinds`: {bad:?} is not a valid kind (letters, digits, - _ : . /)"
        ));
    }
    let limits = &entry.limits;
    if limits.memory_mb == 0 || limits.memory_mb > MAX_MEMORY_MB {
        return Err(format!(
            "field `limits.memory_mb`: {} is outside 1..={MAX_MEMORY_MB}",
            limits.memory_mb
        ));
    }
    if limits.timeout_ms == 0 {
        return Err("field `limits.timeout_ms`: must be at least 1".into());
    }
    if limits.fuel == Some(0) {
        return Err(
            "field `limits.fuel`: 0 would stop every call; omit it for no fuel limit".into(),
        );
    }
    if let Some(sha) = &entry.sha256
        && (sha.len() != 64 || !sha.chars().all(|c| c.is_ascii_hexdigit()))
    {
        return Err(
            "field `sha256`: must be 64 hex digits (run `sha256sum` on the component)".into(),
        );
    }
    if let Some(oci) = &entry.oci {
        let pinned = oci
            .strip_prefix("oci://")
            .and_then(|r| r.rsplit_once("@sha256:"))
            .is_some_and(|(name, hex)| {
                name.contains('/') && hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit())
            });
        if !pinned {
            return Err(format!(
                "field `oci`: {oci:?} must be oci://REGISTRY/REPOSITORY@sha256:<64 hex digits> \
                 (what `capstan plugins add oci://...` writes); fix it or delete the line"
            ));
        }
    }
    let source = if let Some(name) = entry.component.strip_prefix("builtin:") {
        ComponentSource::Builtin(name.to_string())
    } else {
        if entry.sha256.is_none() {
            return Err(format!(
                "field `sha256`: required for component file {:?}; add sha256 = \"<output of sha256sum>\"",
                entry.component
            ));
        }
        let path = Path::new(&entry.component);
        let path = match base_dir {
            Some(base) if path.is_relative() => base.join(path),
            _ => path.to_path_buf(),
        };
        ComponentSource::File(path)
    };
    Ok((entry, source))
}

/// The lower-case hex SHA-256 of `bytes`: how manifests pin a component.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_manifest_is_valid() {
        let (specs, errors) = parse(include_str!("bundled.toml"), "bundled", None);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(specs.len(), 3);
    }

    #[test]
    fn each_bad_entry_is_reported_with_its_field_and_the_rest_load() {
        let text = r#"
            [[plugin]]
            name = "good"
            component = "good.wasm"
            sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
            kinds = ["good"]

            [[plugin]]
            name = "no-sha"
            component = "x.wasm"
            kinds = ["x"]

            [[plugin]]
            name = "typo"
            component = "builtin:docx"
            kinds = ["y"]
            [plugin.permissions]
            workspace = "write"

            [[plugin]]
            name = "big"
            component = "builtin:docx"
            kinds = ["z"]
            [plugin.limits]
            memory_mb = 99999
        "#;
        let (specs, errors) = parse(text, "capstan.toml", Some(Path::new("/base")));
        assert_eq!(specs.len(), 1);
        assert!(
            matches!(&specs[0].source, ComponentSource::File(p) if p == Path::new("/base/good.wasm"))
        );
        let msgs: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(msgs.len(), 3, "{msgs:?}");
        assert!(
            msgs[0].contains("plugin `no-sha`") && msgs[0].contains("sha256"),
            "{}",
            msgs[0]
        );
        assert!(
            msgs[1].contains("plugin `typo`") && msgs[1].contains("write"),
            "{}",
            msgs[1]
        );
        assert!(msgs[2].contains("memory_mb"), "{}", msgs[2]);
        assert!(msgs.iter().all(|m| m.starts_with("capstan.toml: ")));
    }

    #[test]
    fn an_oci_field_must_pin_a_manifest_digest() {
        let entry = |oci: &str| {
            format!(
                "[[plugin]]\nname = \"p\"\ncomponent = \"p.wasm\"\nsha256 = \"{}\"\n\
                 oci = \"{oci}\"\nkinds = [\"p\"]\n",
                "0".repeat(64)
            )
        };
        let good = format!("oci://127.0.0.1:5000/plugins/p@sha256:{}", "a".repeat(64));
        let (specs, errors) = parse(&entry(&good), "capstan.toml", None);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(specs[0].entry.oci.as_deref(), Some(good.as_str()));
        for bad in [
            "oci://127.0.0.1:5000/plugins/p:1.0".to_string(),
            format!("127.0.0.1:5000/plugins/p@sha256:{}", "a".repeat(64)),
            format!("oci://127.0.0.1:5000/plugins/p@sha256:{}", "a".repeat(63)),
        ] {
            let (specs, errors) = parse(&entry(&bad), "capstan.toml", None);
            assert!(specs.is_empty(), "{bad} was accepted");
            assert!(
                errors[0].to_string().contains("field `oci`"),
                "{}",
                errors[0]
            );
        }
    }

    #[test]
    fn unknown_fields_and_services_are_named() {
        let text = r#"
            [[plugin]]
            name = "p"
            component = "builtin:p"
            kinds = ["p"]
            colour = "blue"

            [[plugin]]
            name = "q"
            component = "builtin:q"
            kinds = ["q"]
            [plugin.permissions]
            host = ["exec", "filesystem"]
        "#;
        let (_, errors) = parse(text, "m.toml", None);
        let msgs: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert!(msgs[0].contains("colour"), "{}", msgs[0]);
        assert!(msgs[1].contains("filesystem"), "{}", msgs[1]);
    }

    #[test]
    fn not_toml_is_one_clear_error() {
        let (specs, errors) = parse("[[plugin]\nname=", "broken.toml", None);
        assert!(specs.is_empty());
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0]
                .to_string()
                .starts_with("broken.toml: not a valid manifest")
        );
    }
}
