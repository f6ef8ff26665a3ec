//! `capstan plugins new|add|remove`: scaffold a plugin that builds against the
//! SDK, add a component to the user's capstan.toml (validated, shown, confirmed,
//! pinned by sha256), and take one out again. A component from an OCI registry
//! is pulled and its signature checked first (plugins_oci/), then added as
//! the file it was pulled to, its manifest digest pinned next to its sha256.
//!
//! The user's capstan.toml is edited as text: an added entry is appended, a removed
//! one is cut out line by line, so the rest of the file (comments, order, other
//! sections) stays exactly as the person wrote it. Either edit is re-parsed before
//! it is written, and the file is replaced atomically.

use std::collections::BTreeSet;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};

use super::GlobalArgs;
use crate::dirs::Dirs;
use crate::plugins::manifest::{
    self, ComponentSource, HostService, Limits, Permissions, PluginEntry, PluginSpec,
    WorkspaceAccess,
};
use crate::plugins::runtime::{Capacity, LoadedPlugin, Runtime};
use crate::{errln, outln};
use capstan_protocol::Risk;

/// The SDK crate, embedded so a scaffold builds without a checkout of Capstan.
const SDK_FILES: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        include_str!("../../../../plugins/sdk/Cargo.toml"),
    ),
    (
        "src/lib.rs",
        include_str!("../../../../plugins/sdk/src/lib.rs"),
    ),
    (
        "src/files.rs",
        include_str!("../../../../plugins/sdk/src/files.rs"),
    ),
    (
        "wit/capstan.wit",
        include_str!("../../../../plugins/sdk/wit/capstan.wit"),
    ),
];

/// The embedded SDK's version (its Cargo.toml).
fn sdk_version() -> &'static str {
    SDK_FILES[0]
        .1
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or("0.0.0")
}

/// Writes the embedded SDK under the data dir (once per version) and returns its path.
fn install_sdk(dirs: &Dirs) -> Result<PathBuf> {
    let dir = dirs
        .data
        .join("sdk")
        .join(format!("capstan-plugin-{}", sdk_version()));
    for (rel, text) in SDK_FILES {
        let path = dir.join(rel);
        if std::fs::read_to_string(&path).ok().as_deref() == Some(*text) {
            continue;
        }
        create_parent(&path)?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(dir)
}

fn is_plugin_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// `capstan plugins new NAME`.
pub fn new(
    global: &GlobalArgs,
    name: &str,
    dir: Option<&Path>,
    sdk: Option<&Path>,
) -> Result<ExitCode> {
    if !is_plugin_name(name) {
        bail!(
            "`{name}` is not a plugin name: use 1-64 characters of a-z, 0-9, '-' or '_', starting with a letter"
        );
    }
    let target = dir
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(name));
    if target.exists()
        && std::fs::read_dir(&target)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        bail!(
            "{} already exists and is not empty; choose another NAME or --dir",
            target.display()
        );
    }
    let sdk = match sdk {
        Some(path) => {
            let path = std::path::absolute(path)?;
            if !path.join("Cargo.toml").is_file() || !path.join("wit/capstan.wit").is_file() {
                bail!(
                    "--sdk {}: not the capstan-plugin SDK crate (no Cargo.toml and wit/capstan.wit there)",
                    path.display()
                );
            }
            path
        }
        None => install_sdk(&global.dirs()?)?,
    };
    let kind = name.replace('-', "_");
    let ty: String = kind
        .split('_')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect();
    let sdk_dep = toml::Value::String(sdk.display().to_string());
    let files = [
        (
            "Cargo.toml",
            format!(
                r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"

[lib]
crate-type = ["cdylib"]

[dependencies]
# The SDK bundles the WIT contract. Once capstan-plugin is on crates.io this line
# can read `capstan-plugin = "{ver}"`.
capstan-plugin = {{ path = {sdk_dep} }}
serde = {{ version = "1", features = ["derive"] }}
schemars = "1"

[profile.release]
opt-level = "s"
strip = "debuginfo"
"#,
                ver = sdk_version()
            ),
        ),
        (
            ".cargo/config.toml",
            "# Plugins are WASI preview 2 components.\n[build]\ntarget = \"wasm32-wasip2\"\n"
                .to_string(),
        ),
        (".gitignore", "/target\n".to_string()),
        (
            "src/lib.rs",
            format!(
                r#"//! `{kind}`: a Capstan capability plugin.

use capstan_plugin::{{CapabilityInfo, Plugin, Risk, Task, TaskError, TaskOutput, activity, op}};
use schemars::JsonSchema;
use serde::Deserialize;

/// Input of `greet`: its JSON Schema is derived from this type.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Greet {{
    /// Who to greet
    name: String,
}}

struct {ty};

impl Plugin for {ty} {{
    fn describe() -> CapabilityInfo {{
        CapabilityInfo {{
            kinds: vec!["{kind}".into()],
            operations: vec![op::<Greet>("greet", "Greet someone by name.", Risk::ReadOnly)],
        }}
    }}

    fn invoke(task: Task) -> Result<TaskOutput, TaskError> {{
        match task.operation.as_str() {{
            "greet" => {{
                let input: Greet = task.input()?;
                let message = format!("hello, {{}}", input.name);
                activity("{kind}.greeted", &message);
                Ok(TaskOutput::json(&message, &message))
            }}
            _ => Err(task.unknown_operation(&["greet"])),
        }}
    }}
}}

capstan_plugin::export!({ty});
"#
            ),
        ),
        (
            "README.md",
            format!(
                "# {name}\n\nA Capstan capability plugin (kind `{kind}`).\n\n\
                 ```sh\ncargo build --release          # target/wasm32-wasip2/release/{kind}.wasm\n\
                 capstan plugins add target/wasm32-wasip2/release/{kind}.wasm\n\
                 capstan invoke {kind} --input '{{\"name\": \"Ada\"}}'\n```\n"
            ),
        ),
    ];
    for (rel, text) in &files {
        let path = target.join(rel);
        create_parent(&path)?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    outln!(
        "created {} (kind `{kind}`, capstan-plugin {} from {})",
        target.display(),
        sdk_version(),
        sdk.display()
    );
    outln!("next:");
    outln!("  cd {} && cargo build --release", target.display());
    outln!("  capstan plugins add target/wasm32-wasip2/release/{kind}.wasm");
    Ok(ExitCode::SUCCESS)
}

/// What `plugins add` was asked.
pub struct AddArgs {
    pub source: String,
    /// Add an oci:// component whose signature could not be verified.
    pub allow_unverified: bool,
    /// Speak plain HTTP to an oci:// registry that is not on this machine.
    pub plain_http: bool,
    pub name: Option<String>,
    pub kinds: Vec<String>,
    pub workspace: Option<WorkspaceAccess>,
    pub yes: bool,
}

/// Workspace access the shipped-but-unregistered builtins need.
fn builtin_workspace(name: &str) -> WorkspaceAccess {
    match name {
        "xlsx" | "docx" => WorkspaceAccess::ReadWrite,
        "kb-retrieval" => WorkspaceAccess::Read,
        _ => WorkspaceAccess::None,
    }
}

fn risk_word(r: Risk) -> &'static str {
    match r {
        Risk::ReadOnly => "read-only",
        Risk::Write => "write",
        Risk::Delete => "delete",
        Risk::Network => "network",
        Risk::Unknown => "unknown",
    }
}

fn service_words(s: HostService) -> &'static str {
    match s {
        HostService::Events => "report activity and progress",
        HostService::Cancel => "see whether the task was cancelled",
        HostService::Exec => "run commands in the sandbox (each classified and gated by approval)",
        HostService::Index => "read and write the workspace's search index",
        HostService::Approval => "ask you to approve actions",
        HostService::Model => "call the model (not offered by this Capstan)",
    }
}

/// Where a component comes from and how the manifest entry names it.
pub(super) struct Source {
    pub(super) source: ComponentSource,
    /// The entry's `component` field: `builtin:NAME` or the pinned copy.
    pub(super) component_field: String,
    pub(super) sha256: Option<String>,
    pub(super) default_name: String,
}

/// `builtin:NAME` or a file, which is pinned on confirmation as a copy named
/// by its hash under the data dir.
pub(super) fn resolve_source(dirs: &Dirs, arg: &str) -> Result<Source> {
    if let Some(builtin) = arg.strip_prefix("builtin:") {
        if crate::plugins::bundled::component(builtin).is_none() {
            bail!(
                "no builtin component `{builtin}`; builtins are: {}",
                crate::plugins::bundled::names().join(", ")
            );
        }
        return Ok(Source {
            source: ComponentSource::Builtin(builtin.to_string()),
            component_field: arg.to_string(),
            sha256: None,
            default_name: builtin.to_string(),
        });
    }
    let path = std::path::absolute(arg)?;
    let bytes = std::fs::read(&path)
        .with_context(|| format!("cannot read the component {}", path.display()))?;
    let sha = crate::plugins::manifest::sha256_hex(&bytes);
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("plugin")
        .to_ascii_lowercase()
        .replace('_', "-");
    let kept = dirs
        .data
        .join("plugins")
        .join(format!("{stem}-{}.wasm", &sha[..16]));
    Ok(Source {
        source: ComponentSource::File(path),
        component_field: kept.display().to_string(),
        sha256: Some(sha),
        default_name: stem,
    })
}

/// Load the component with every service granted, to learn what it asks for.
pub(super) async fn probe(
    dirs: &Dirs,
    name: &str,
    arg: &str,
    src: &Source,
) -> Result<LoadedPlugin> {
    let runtime = Runtime::new(
        dirs.component_cache(),
        vec![dirs.config.clone(), dirs.data.clone(), dirs.cache.clone()],
        Capacity::OneRun,
    )?;
    let probe = PluginSpec {
        entry: PluginEntry {
            name: name.to_string(),
            version: "0.0.0".into(),
            component: src.component_field.clone(),
            sha256: src.sha256.clone(),
            oci: None,
            kinds: vec![],
            permissions: Permissions {
                workspace: WorkspaceAccess::None,
                host: HostService::ALL.into_iter().collect(),
            },
            limits: Limits::default(),
        },
        source: src.source.clone(),
        origin: "plugins add".into(),
    };
    runtime
        .load_spec(probe)
        .await
        .map_err(|e| anyhow!("{arg}: {}", e.message))
}

/// Refuse a name already in the user's config, or a kind another plugin
/// (bundled or the user's) already serves.
fn check_clashes(config: &Path, name: &str, kinds: &[String]) -> Result<()> {
    let (bundled, _) = manifest::parse(crate::plugins::bundled::MANIFEST, "bundled manifest", None);
    let (user, _) = manifest::load_file(config);
    if user.iter().any(|s| s.entry.name == name) {
        bail!(
            "a plugin named `{name}` is already in {}; run `capstan plugins remove {name}` first, or pass --name",
            config.display()
        );
    }
    for spec in bundled.iter().chain(&user) {
        if spec.entry.name == name {
            continue;
        }
        if let Some(k) = kinds.iter().find(|k| spec.entry.kinds.contains(k)) {
            bail!(
                "kind `{k}` is already served by plugin `{}` ({}); pass --kind to add only other kinds",
                spec.entry.name,
                spec.origin
            );
        }
    }
    Ok(())
}

/// Where an oci:// component came from, for the entry and for people.
struct Provenance {
    /// `oci://REGISTRY/REPOSITORY@sha256:...`: the manifest it was pulled by.
    pinned: String,
    signature: String,
}

/// The `[[plugin]]` entry appended to the user's config.
fn manifest_entry(
    name: &str,
    src: &Source,
    oci: Option<&Provenance>,
    kinds: &[String],
    workspace: WorkspaceAccess,
    host: &BTreeSet<HostService>,
) -> String {
    let mut entry = String::from("\n[[plugin]]\n");
    entry.push_str(&format!(
        "name = {}\n",
        toml::Value::String(name.to_string())
    ));
    entry.push_str(&format!(
        "component = {}\n",
        toml::Value::String(src.component_field.clone())
    ));
    if let Some(sha) = &src.sha256 {
        entry.push_str(&format!("sha256 = \"{sha}\"\n"));
    }
    if let Some(oci) = oci {
        entry.push_str(&format!(
            "oci = {}\n",
            toml::Value::String(oci.pinned.clone())
        ));
    }
    let kinds_toml: Vec<String> = kinds
        .iter()
        .map(|k| toml::Value::String(k.clone()).to_string())
        .collect();
    entry.push_str(&format!("kinds = [{}]\n", kinds_toml.join(", ")));
    entry.push_str("[plugin.permissions]\n");
    entry.push_str(&format!("workspace = \"{workspace}\"\n"));
    let host_list: Vec<String> = host.iter().map(|s| format!("\"{s}\"")).collect();
    entry.push_str(&format!("host = [{}]\n", host_list.join(", ")));
    entry
}

/// Show what the person is about to trust.
#[allow(clippy::too_many_arguments)]
fn show(
    name: &str,
    arg: &str,
    src: &Source,
    oci: Option<&Provenance>,
    loaded: &LoadedPlugin,
    kinds: &[String],
    workspace: WorkspaceAccess,
    host: &BTreeSet<HostService>,
) {
    outln!(
        "plugin `{name}`: {arg} (capstan:plugin@{}{})",
        loaded.wit_version,
        src.sha256
            .as_deref()
            .map(|s| format!(", sha256 {s}"))
            .unwrap_or_default()
    );
    if let Some(oci) = oci {
        outln!("  from:          {}", oci.pinned);
        outln!("  signature:     {}", oci.signature);
    }
    outln!("  kinds:         {}", kinds.join(", "));
    for op in &loaded.operations {
        outln!(
            "  operation:     {} ({}): {}",
            op.name,
            risk_word(op.risk),
            op.description
        );
    }
    outln!(
        "  workspace:     {workspace}{}",
        if workspace == WorkspaceAccess::None && !arg.starts_with("builtin:") {
            " (pass --workspace read or read-write to let it see your files)"
        } else {
            ""
        }
    );
    if host.is_empty() {
        outln!("  host services: none beyond activity, progress and cancellation");
    } else {
        for s in host {
            outln!("  host service:  {s}: {}", service_words(*s));
        }
    }
    outln!("  limits:        64 MiB memory, 120000 ms per task (edit [plugin.limits] to change)");
}

/// `None` when the person confirmed (or passed --yes); otherwise the exit
/// code to stop with.
fn confirm(yes: bool, config: &Path) -> Result<Option<ExitCode>> {
    if yes {
        return Ok(None);
    }
    if !std::io::stdin().is_terminal() {
        errln!("not added: confirm with --yes (nothing asked, since stdin is not a terminal)");
        return Ok(Some(ExitCode::from(2)));
    }
    crate::out!("Add it to {}? [y/N] ", config.display());
    std::io::stdout().flush().ok();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    if !matches!(line.trim(), "y" | "Y" | "yes") {
        errln!("not added");
        return Ok(Some(ExitCode::from(1)));
    }
    Ok(None)
}

/// Append the entry, check that the whole file still parses with it, copy
/// the component to the path the entry pins, then write the config.
fn write_entry(
    config: &Path,
    name: &str,
    entry: &str,
    src: &Source,
    loaded: &LoadedPlugin,
) -> Result<()> {
    let old = match std::fs::read_to_string(config) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(anyhow!("cannot read {}: {e}", config.display())),
    };
    let mut text = old;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(entry);
    let (specs, errors) = manifest::parse(&text, &config.display().to_string(), config.parent());
    if let Some(e) = errors.first() {
        bail!("the new entry would not be valid: {e}");
    }
    if !specs.iter().any(|s| s.entry.name == name) {
        bail!(
            "the new entry for `{name}` did not parse back; {} left unchanged",
            config.display()
        );
    }
    // The copy the entry pins, so rebuilding the source file later does not
    // silently change what runs (the sha256 would refuse it anyway).
    if let ComponentSource::File(original) = &loaded.spec.source {
        let kept = Path::new(&src.component_field);
        create_parent(kept)?;
        std::fs::copy(original, kept)
            .with_context(|| format!("copying the component to {}", kept.display()))?;
        if crate::plugins::manifest::sha256_hex(&std::fs::read(kept)?) != loaded.sha256 {
            let _ = std::fs::remove_file(kept);
            bail!(
                "{} changed while it was being added; try again",
                original.display()
            );
        }
    }
    write_config(config, &text)
}

/// `capstan plugins add PATH|builtin:NAME|oci://...`.
pub async fn add(global: &GlobalArgs, args: AddArgs) -> Result<ExitCode> {
    let dirs = global.dirs()?;
    let config = dirs.user_config_file();
    let is_oci = args.source.starts_with("oci://");
    if !is_oci && (args.allow_unverified || args.plain_http) {
        bail!(
            "--allow-unverified and --plain-http are for oci:// sources; `{}` is not one",
            args.source
        );
    }
    // Pulled and verified first (or refused), then added as the file it was
    // pulled to; the temp file lives as long as `pulled`.
    let pulled = if is_oci {
        Some(
            super::plugins_oci::pull(&dirs, &args.source, args.allow_unverified, args.plain_http)
                .await?,
        )
    } else {
        None
    };
    let src = match &pulled {
        Some(p) => resolve_source(&dirs, &p.file.display().to_string())?,
        None => resolve_source(&dirs, &args.source)?,
    };
    let provenance = pulled.as_ref().map(|p| Provenance {
        pinned: p.pinned.clone(),
        signature: p.signature.clone(),
    });
    let name = args.name.clone().unwrap_or(src.default_name.clone());
    if !is_plugin_name(&name) {
        bail!(
            "`{name}` is not a plugin name; pass --name with 1-64 characters of a-z, 0-9, '-' or '_'"
        );
    }
    let loaded = probe(&dirs, &name, &args.source, &src).await?;
    let kinds = if args.kinds.is_empty() {
        loaded.kinds.clone()
    } else {
        if let Some(k) = args.kinds.iter().find(|k| !loaded.kinds.contains(k)) {
            bail!(
                "--kind {k}: the component serves only {}",
                loaded.kinds.join(", ")
            );
        }
        args.kinds.clone()
    };
    let workspace = args.workspace.unwrap_or(match &args.source {
        s if s.starts_with("builtin:") => builtin_workspace(&name),
        _ => WorkspaceAccess::None,
    });
    let host: BTreeSet<HostService> = loaded
        .imports
        .iter()
        .copied()
        .filter(|s| !s.always_granted())
        .collect();
    check_clashes(&config, &name, &kinds)?;
    let entry = manifest_entry(&name, &src, provenance.as_ref(), &kinds, workspace, &host);
    show(
        &name,
        &args.source,
        &src,
        provenance.as_ref(),
        &loaded,
        &kinds,
        workspace,
        &host,
    );
    if let Some(stop) = confirm(args.yes, &config)? {
        return Ok(stop);
    }
    write_entry(&config, &name, &entry, &src, &loaded)?;
    outln!("added `{name}` to {}", config.display());
    Ok(ExitCode::SUCCESS)
}

fn write_config(path: &Path, text: &str) -> Result<()> {
    let dir = path.parent().context("the config file has no directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path)
        .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    Ok(())
}

/// Cuts the `index`-th `[[plugin]]` block (header, keys and its `[plugin.*]` tables).
fn cut_block(text: &str, index: usize) -> Option<String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let header = |l: &str| l.trim_start().starts_with('[');
    let is_plugin = |l: &str| {
        let t = l.trim_start();
        t.starts_with("[[plugin]]") || t.starts_with("[[ plugin ]]")
    };
    let start = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| is_plugin(l))
        .nth(index)?
        .0;
    let mut end = start + 1;
    while end < lines.len() {
        let t = lines[end].trim_start();
        if header(t) && !t.starts_with("[plugin.") {
            break;
        }
        end += 1;
    }
    let mut out: String = lines[..start].concat();
    // Drop a blank line left before the block.
    if out.ends_with("\n\n") {
        out.pop();
    }
    out.push_str(&lines[end..].concat());
    Some(out)
}

/// `capstan plugins remove NAME`.
pub fn remove(global: &GlobalArgs, name: &str) -> Result<ExitCode> {
    let dirs = global.dirs()?;
    let config = dirs.user_config_file();
    let text = std::fs::read_to_string(&config).unwrap_or_default();
    let labels = manifest::entry_labels(&config);
    let wanted = format!("`{name}`");
    let Some(index) = labels.iter().position(|l| *l == wanted) else {
        let (bundled, _) =
            manifest::parse(crate::plugins::bundled::MANIFEST, "bundled manifest", None);
        if bundled.iter().any(|s| s.entry.name == name) {
            bail!(
                "`{name}` is a bundled plugin, not an entry in {}; bundled plugins cannot be removed \
                 (an entry with the same name in your capstan.toml replaces one)",
                config.display()
            );
        }
        bail!(
            "no plugin `{name}` in {}{}",
            config.display(),
            if labels.is_empty() {
                String::new()
            } else {
                format!("; it has {}", labels.join(", "))
            }
        );
    };
    let (before, _) = manifest::parse(&text, "", config.parent());
    let new_text = cut_block(&text, index).ok_or_else(|| {
        anyhow!(
            "cannot find the `[[plugin]]` block of `{name}` in {}",
            config.display()
        )
    })?;
    let after = manifest::entry_labels_of(&new_text);
    let mut expected = labels.clone();
    expected.remove(index);
    if after != expected {
        bail!(
            "{} has a layout this command cannot edit safely; remove the `{name}` entry by hand",
            config.display()
        );
    }
    write_config(&config, &new_text)?;
    // A component copy `plugins add` made goes with its entry.
    let store = dirs.data.join("plugins");
    for spec in before.iter().filter(|s| s.entry.name == name) {
        if let ComponentSource::File(path) = &spec.source
            && path.parent() == Some(store.as_path())
        {
            let _ = std::fs::remove_file(path);
        }
    }
    outln!("removed `{name}` from {}", config.display());
    Ok(ExitCode::SUCCESS)
}

/// Creates the directory `path` goes in.
fn create_parent(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    Ok(())
}
