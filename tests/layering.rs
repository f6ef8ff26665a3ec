//! The host crate's layering, as docs/ARCHITECTURE.md draws it: every module
//! imports only from modules ranked below it (or from inside itself). A new
//! upward import, or a cycle between two modules, fails here with the line
//! that does it.
//!
//! Read from the source: every `crate::a::b` path in host/src (in `use` lines
//! and inline), attributed to the module of the file it is in.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// Module prefixes from the top of the host to the bottom. A module may use
/// any module strictly below it; modules on one rank may not use each other.
const LAYERS: &[(&str, u32)] = &[
    ("frontends::cli", 100),
    ("frontends::server", 90),
    ("frontends::mcp", 85),
    ("run::app", 80),
    ("run::lease", 78),
    ("run::builder", 75),
    ("run::orchestrator", 70),
    ("run::dispatch", 65),
    ("run::model", 60),
    ("plugins::mcp_client", 55),
    ("plugins::registry", 50),
    ("plugins::runtime", 45),
    ("plugins::services", 40),
    ("plugins::context", 35),
    ("plugins::bindings", 30),
    ("config", 25),
    ("plugins::manifest", 20),
    ("plugins::bundled", 15),
    ("plugins::engine", 12),
    ("workspace_gate", 10),
    ("dirs", 5),
    ("term", 5),
    ("uri", 5),
];

/// Macros exported at the crate root (the terminal's print macros).
const ROOT_MACROS: &[&str] = &["outln", "errln", "out", "err"];

fn layer_of(module: &str) -> Option<(&'static str, u32)> {
    LAYERS
        .iter()
        .filter(|(prefix, _)| module == *prefix || module.starts_with(&format!("{prefix}::")))
        .max_by_key(|(prefix, _)| prefix.len())
        .copied()
}

/// `host/src/plugins/runtime/state.rs` -> `plugins::runtime::state`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("file under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts.join("::")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read host/src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module paths a line names through `crate::`, expanding one level of
/// `use crate::{a::b, c}` groups.
fn crate_paths(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let before = &rest[..at];
        rest = &rest[at + "crate::".len()..];
        // `$crate::` in macros and `capstan_x::crate::` do not occur; skip identifiers ending in crate.
        if before.ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let item = item.trim();
                if !item.is_empty() {
                    out.push(path_head(item));
                }
            }
            continue;
        }
        out.push(path_head(rest));
    }
    out
}

/// `plugins::registry::{A, B};` -> `plugins::registry`: the path up to the
/// first item that is not a lower-case module name.
fn path_head(text: &str) -> String {
    let mut parts = Vec::new();
    for part in text.split("::") {
        let name: String = part
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_lowercase()) {
            break;
        }
        let whole = name.len() == part.len();
        parts.push(name);
        if !whole {
            break;
        }
    }
    parts.join("::")
}

#[test]
fn host_modules_import_only_downward() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut unranked = Vec::new();
    let mut violations = Vec::new();
    let mut checked = 0;
    for file in &files {
        let module = module_of(&src, file);
        if module == "lib" || module == "main" {
            continue;
        }
        // A concern's folder (`run/mod.rs`) only declares its modules: it
        // ranks below everything, so any `crate::` path in it fails.
        let container = LAYERS
            .iter()
            .any(|(prefix, _)| prefix.starts_with(&format!("{module}::")));
        let (own_prefix, own_rank) = match layer_of(&module) {
            Some(layer) => layer,
            None if container => ("", 0),
            None => {
                unranked.push(module);
                continue;
            }
        };
        let text = std::fs::read_to_string(file).expect("read source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for target in crate_paths(code) {
                if target.is_empty() || ROOT_MACROS.contains(&target.as_str()) {
                    continue;
                }
                let Some((prefix, rank)) = layer_of(&target) else {
                    unranked.push(format!("{target} (used at {}:{})", file.display(), n + 1));
                    continue;
                };
                checked += 1;
                if prefix != own_prefix && rank >= own_rank {
                    violations.push(format!(
                        "{}:{}: `{module}` ({own_rank}) uses `crate::{target}` ({rank}): {}",
                        file.display(),
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        unranked.is_empty(),
        "modules missing from LAYERS in tests/layering.rs (give each a rank, and draw it in docs/ARCHITECTURE.md):\n{}",
        unranked.join("\n")
    );
    assert!(
        violations.is_empty(),
        "imports that go up or sideways (move the shared piece down a layer, or pass it in from above):\n{}",
        violations.join("\n")
    );
    assert!(
        checked > 150,
        "the check saw only {checked} crate paths: is it still reading host/src?"
    );
}

#[test]
fn the_path_reader_sees_groups_and_inline_paths() {
    assert_eq!(
        crate_paths("use crate::{run::app::App, config, term::Style};"),
        vec!["run::app", "config", "term"]
    );
    assert_eq!(
        crate_paths("let x = crate::plugins::registry::Problem { a: $crate::y };"),
        vec!["plugins::registry"]
    );
    assert_eq!(path_head("plugins::bindings as wit;"), "plugins::bindings");
}
