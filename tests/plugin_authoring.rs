//! Third-party plugins end to end, through the real binary and a real cargo:
//! `plugins new` scaffolds a project in a temp dir outside this repository that
//! builds against the SDK (the copy built into capstan), `plugins add` validates the
//! component, shows what it asks for, and writes a pinned entry only when
//! confirmed; `plugins remove` takes it out; `plugins add builtin:xlsx` registers
//! the shipped xlsx plugin.
#![allow(clippy::disallowed_macros)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Home;
use serde_json::Value;

/// The target dir host/build.rs builds the plugins in: the SDK's dependencies for
/// wasm32-wasip2 are compiled there already, so a scaffold builds in seconds.
fn plugin_target_dir() -> PathBuf {
    Path::new(capstan::plugins::bundled::PLUGIN_BUILD_DIR)
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// `cargo build --release --offline` of a plugin project: every dependency comes
/// from the local cache, none from this repository.
pub fn build_plugin(project: &Path) {
    let out = Command::new(env!("CARGO"))
        .current_dir(project)
        .args(["build", "--release", "--offline"])
        .env("CARGO_TARGET_DIR", plugin_target_dir())
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building {} failed:\n{}",
        project.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn text(out: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_scaffolded_plugin_builds_outside_the_repo_is_added_pinned_runs_and_is_removed() {
    let home = Home::new("# my own settings\n[policy]\nprofile = \"trusted\"\n");
    let projects = tempfile::tempdir().unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    assert!(!projects.path().starts_with(repo));
    let project = projects.path().join("greeter");

    let out = home
        .capstan()
        .args(["plugins", "new", "greeter", "--dir"])
        .arg(&project)
        .env_remove("CAPSTAN_PLUGIN_SDK")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("kind `greeter`"), "{stdout}");
    let manifest = std::fs::read_to_string(project.join("Cargo.toml")).unwrap();
    assert!(
        !manifest.contains(&repo.display().to_string()),
        "the scaffold points into the repo:\n{manifest}"
    );
    // A second scaffold into the same place is refused.
    let again = home
        .capstan()
        .args(["plugins", "new", "greeter", "--dir"])
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again).1.contains("not empty"), "{}", text(&again).1);

    build_plugin(&project);
    let wasm = plugin_target_dir().join("wasm32-wasip2/release/greeter.wasm");
    assert!(wasm.exists(), "{} missing", wasm.display());
    let sha = common::sha256_file(&wasm);

    // Not confirmed: nothing written.
    let before = std::fs::read_to_string(home.path().join("config/capstan.toml")).unwrap();
    let out = home
        .capstan()
        .args(["plugins", "add"])
        .arg(&wasm)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stdout.contains("greet (read-only)"), "{stdout}");
    assert!(stdout.contains("capstan:plugin@0.2.0"), "{stdout}");
    assert!(stderr.contains("--yes"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(home.path().join("config/capstan.toml")).unwrap(),
        before
    );

    let out = home
        .capstan()
        .args(["plugins", "add", "--yes"])
        .arg(&wasm)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let config = std::fs::read_to_string(home.path().join("config/capstan.toml")).unwrap();
    assert!(
        config.starts_with(&before),
        "the user's own lines were kept:\n{config}"
    );
    let parsed: toml::Table = toml::from_str(&config).unwrap();
    let entry = &parsed["plugin"].as_array().unwrap()[0];
    assert_eq!(entry["name"].as_str(), Some("greeter"));
    assert_eq!(entry["sha256"].as_str(), Some(sha.as_str()));
    assert_eq!(
        entry["kinds"].as_array().unwrap()[0].as_str(),
        Some("greeter")
    );
    assert_eq!(entry["permissions"]["workspace"].as_str(), Some("none"));
    assert_eq!(entry["permissions"]["host"].as_array().unwrap().len(), 0);
    // The pinned copy is what runs, whatever happens to the build output.
    let pinned = PathBuf::from(entry["component"].as_str().unwrap());
    assert!(pinned.starts_with(home.path()), "{}", pinned.display());
    assert_eq!(common::sha256_file(&pinned), sha);

    let out = home
        .capstan()
        .args(["invoke", "greeter", "--input", r#"{"name": "Ada"}"#])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).unwrap(),
        "hello, Ada"
    );
    // The derived schema's deny_unknown_fields is the plugin's own check too.
    let out = home
        .capstan()
        .args([
            "invoke",
            "greeter",
            "--input",
            r#"{"name": "Ada", "age": 3}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).1.contains("unknown field `age`"),
        "{}",
        text(&out).1
    );

    // Adding it twice is refused by name.
    let out = home
        .capstan()
        .args(["plugins", "add", "--yes"])
        .arg(&wasm)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).1.contains("plugins remove greeter"),
        "{}",
        text(&out).1
    );

    let out = home
        .capstan()
        .args(["plugins", "remove", "greeter"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    assert_eq!(
        std::fs::read_to_string(home.path().join("config/capstan.toml")).unwrap(),
        before
    );
    assert!(!pinned.exists(), "the pinned copy goes with its entry");
    let out = home
        .capstan()
        .args(["invoke", "greeter", "--input", r#"{"name": "Ada"}"#])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let out = home
        .capstan()
        .args(["plugins", "remove", "greeter"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).1.contains("no plugin `greeter`"),
        "{}",
        text(&out).1
    );
    let out = home
        .capstan()
        .args(["plugins", "remove", "docx"])
        .output()
        .unwrap();
    assert!(text(&out).1.contains("bundled plugin"), "{}", text(&out).1);
}

#[test]
fn builtin_xlsx_is_one_command_away() {
    let home = Home::new("");
    let out = home
        .capstan()
        .args(["plugins", "add", "builtin:xlsx", "--yes"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("workspace:     read-write"), "{stdout}");
    let out = home.capstan().args(["plugins", "check"]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("all 4 plugins loaded and valid"),
        "{stdout}"
    );

    let ws = tempfile::tempdir().unwrap();
    let out = home
        .capstan()
        .args([
            "invoke",
            "xlsx",
            "--operation",
            "create",
            "--approve",
            "all",
            "--workspace",
        ])
        .arg(ws.path())
        .args([
            "--input",
            r#"{"path": "t.xlsx", "sheets": [{"name": "S", "rows": [["a", 1]]}]}"#,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(ws.path().join("t.xlsx").exists());
}

#[test]
fn add_refuses_what_is_not_a_plugin_with_a_clear_error() {
    let home = Home::new("");
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"\0asm not really").unwrap();
    let out = home
        .capstan()
        .args(["plugins", "add", "--yes"])
        .arg(&junk)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).1.contains("not a valid WebAssembly component"),
        "{}",
        text(&out).1
    );
    let out = home
        .capstan()
        .args(["plugins", "add", "--yes"])
        .arg(common::built_component("future_major"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out)
            .1
            .contains("supports capstan:plugin 0.1.0 to 0.2.0"),
        "{}",
        text(&out).1
    );
    let out = home
        .capstan()
        .args(["plugins", "add", "builtin:nope", "--yes"])
        .output()
        .unwrap();
    assert!(text(&out).1.contains("builtins are:"), "{}", text(&out).1);
    assert!(
        std::fs::read_to_string(home.path().join("config/capstan.toml"))
            .unwrap()
            .is_empty()
    );
}

/// The block of docs/PLUGINS.md that follows `<!-- test: NAME -->`.
fn guide_block(guide: &str, name: &str) -> String {
    let marker = format!("<!-- test: {name} -->");
    let after = &guide[guide.find(&marker).expect("marker in the guide") + marker.len()..];
    let start = after.find("```").unwrap();
    let body = &after[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("\n```").unwrap() + 1].to_string()
}

#[test]
fn the_guides_plugin_builds_outside_the_repo_and_runs() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let guide = std::fs::read_to_string(repo.join("docs/PLUGINS.md")).unwrap();
    let lib = guide_block(&guide, "src/lib.rs");
    assert!(
        lib.lines().count() < 40,
        "the guide's plugin grew to {} lines",
        lib.lines().count()
    );
    let placeholder = r#"capstan-plugin = { path = "/path/to/capstan-plugin" }"#;
    let cargo = guide_block(&guide, "Cargo.toml");
    assert!(cargo.contains(placeholder), "{cargo}");
    // The SDK by path (as `plugins new --sdk` writes it); nothing else from the repo.
    let sdk = repo.join("plugins/sdk");
    let cargo = cargo.replace(
        placeholder,
        &format!(
            "capstan-plugin = {{ path = {:?} }}",
            sdk.display().to_string()
        ),
    );

    let dir = tempfile::tempdir().unwrap();
    assert!(!dir.path().starts_with(repo));
    let project = dir.path().join("wordcount");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::create_dir_all(project.join(".cargo")).unwrap();
    std::fs::write(project.join("Cargo.toml"), cargo).unwrap();
    std::fs::write(project.join("src/lib.rs"), lib).unwrap();
    std::fs::write(
        project.join(".cargo/config.toml"),
        "[build]\ntarget = \"wasm32-wasip2\"\n",
    )
    .unwrap();
    build_plugin(&project);
    let wasm = plugin_target_dir().join("wasm32-wasip2/release/wordcount.wasm");

    let home = Home::new("");
    let out = home
        .capstan()
        .args(["plugins", "add", "--workspace", "read", "--yes"])
        .arg(&wasm)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("todo.md"), "buy milk\nfix the roof today\n").unwrap();
    let out = home
        .capstan()
        .args(["invoke", "wordcount", "--workspace"])
        .arg(ws.path())
        .args(["--input", r#"{"path": "todo.md"}"#])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let data: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(data["words"], 6);
    let out = home
        .capstan()
        .args(["invoke", "wordcount", "--workspace"])
        .arg(ws.path())
        .args(["--input", r#"{"path": "../etc/passwd"}"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).1.contains("no `..`"), "{}", text(&out).1);
}
