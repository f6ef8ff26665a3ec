//! local_kb_retrieval through the real binary: parsing inside the sandboxed
//! component, the host's tantivy index, incremental refresh and citations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::Home;
use serde_json::{Value, json};

fn kb(home: &Home, ws: &Path, op: &str, input: Value) -> (Value, String) {
    let out = home
        .capstan()
        .args([
            "invoke",
            "local_kb_retrieval",
            "--json",
            "--operation",
            op,
            "--workspace",
        ])
        .arg(ws)
        .args(["--input", &input.to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let result: Value = serde_json::from_str(stdout.lines().last().unwrap_or("{}")).unwrap();
    assert_eq!(
        result["ok"],
        true,
        "{op} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (result["data"].clone(), stdout)
}

fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::create_dir_all(ws.join("docs")).unwrap();
    std::fs::create_dir_all(ws.join("build")).unwrap();
    std::fs::write(
        ws.join("docs/deploy.md"),
        "# Deploying\n\nIntro line.\n\n## Blue-green switch\n\nThe load balancer flips traffic to the green pool\nafter health checks pass.\n\n## Rollback\n\nPoint the balancer back at blue.\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("notes.txt"),
        "The quarterly audit happens in March.\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("page.html"),
        "<html><body><h1>Pager</h1><p>The pager rota rotates weekly.</p></body></html>",
    )
    .unwrap();
    std::fs::write(ws.join(".gitignore"), "build/\n*.secret.md\n").unwrap();
    std::fs::write(
        ws.join("build/generated.md"),
        "# Ignored\n\nzebra crossing generated\n",
    )
    .unwrap();
    std::fs::write(ws.join("hidden.secret.md"), "# Secret\n\nzebra password\n").unwrap();
    std::fs::write(
        ws.join("broken.docx"),
        b"PK\x03\x04 this is not really a zip",
    )
    .unwrap();
    std::fs::write(
        ws.join("bad-utf8.md"),
        b"# Odd\n\nlatin1 caf\xe9 bytes here\n",
    )
    .unwrap();
    dir
}

#[test]
fn indexes_and_searches_with_exact_citations() {
    let home = Home::new("");
    let ws = fixture();
    let (data, _) = kb(
        &home,
        ws.path(),
        "search",
        json!({"query": "when does traffic flip to the green pool"}),
    );
    let top = &data["passages"][0];
    assert_eq!(top["path"], "docs/deploy.md");
    assert_eq!(top["heading"], "Deploying > Blue-green switch");
    assert_eq!(
        (top["line_start"].as_u64(), top["line_end"].as_u64()),
        (Some(7), Some(8))
    );
    assert!(top["snippet"].as_str().unwrap().contains("<b>"), "{top}");
    assert_eq!(data["sufficient"], true);
    let (data, _) = kb(&home, ws.path(), "search", json!({"query": "pager rota"}));
    assert_eq!(data["passages"][0]["path"], "page.html");
}

#[test]
fn gitignore_is_respected_and_malformed_files_are_warned_and_skipped() {
    let home = Home::new("");
    let ws = fixture();
    let (data, stdout) = kb(&home, ws.path(), "index", json!({}));
    assert!(
        stdout.contains("broken.docx"),
        "no warning for the broken docx: {stdout}"
    );
    assert!(
        data["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("broken.docx"))
    );
    let (data, _) = kb(&home, ws.path(), "search", json!({"query": "zebra"}));
    assert_eq!(
        data["passages"],
        json!([]),
        "ignored files were indexed: {data}"
    );
    let (data, _) = kb(&home, ws.path(), "search", json!({"query": "latin1 bytes"}));
    assert_eq!(
        data["passages"][0]["path"], "bad-utf8.md",
        "invalid UTF-8 is read lossily"
    );
}

#[test]
fn reindex_after_edit_delete_and_rename_touches_only_what_changed() {
    let home = Home::new("");
    let ws = fixture();
    let (first, _) = kb(&home, ws.path(), "index", json!({}));
    assert_eq!(first["unchanged"], 0);
    let parsed_first = first["parsed"].as_u64().unwrap();
    assert!(parsed_first >= 4, "{first}");

    let (again, _) = kb(&home, ws.path(), "index", json!({}));
    assert_eq!(again["parsed"], 0, "nothing changed: {again}");

    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(
        ws.path().join("notes.txt"),
        "The quarterly audit moved to April.\n",
    )
    .unwrap();
    std::fs::remove_file(ws.path().join("page.html")).unwrap();
    std::fs::rename(
        ws.path().join("docs/deploy.md"),
        ws.path().join("docs/release.md"),
    )
    .unwrap();
    let (delta, _) = kb(&home, ws.path(), "index", json!({}));
    assert_eq!(
        delta["parsed"], 2,
        "the edited and the renamed file: {delta}"
    );
    assert_eq!(
        delta["removed"], 2,
        "the deleted and the renamed-away file: {delta}"
    );

    let (data, _) = kb(
        &home,
        ws.path(),
        "search",
        json!({"query": "quarterly audit"}),
    );
    assert!(
        data["passages"][0]["text"]
            .as_str()
            .unwrap()
            .contains("April")
    );
    let (data, _) = kb(
        &home,
        ws.path(),
        "search",
        json!({"query": "balancer green pool"}),
    );
    assert_eq!(data["passages"][0]["path"], "docs/release.md");
    let (data, _) = kb(&home, ws.path(), "search", json!({"query": "pager rota"}));
    assert!(
        data["passages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["path"] != "page.html")
    );
}

#[test]
fn a_symlink_out_of_the_workspace_is_not_followed() {
    let home = Home::new("");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(
        outside.path().join("leak.md"),
        "# Leak\n\nplatypus secret outside\n",
    )
    .unwrap();
    let ws = fixture();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("outside-dir")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("leak.md"), ws.path().join("leak.md")).unwrap();
    let (data, _) = kb(&home, ws.path(), "search", json!({"query": "platypus"}));
    assert_eq!(data["passages"], json!([]), "{data}");
}

#[test]
fn the_index_lives_in_capstans_data_dir_and_the_workspace_is_untouched() {
    let home = Home::new("");
    let ws = fixture();
    let before: Vec<_> = walk(ws.path());
    kb(&home, ws.path(), "index", json!({}));
    assert_eq!(walk(ws.path()), before, "indexing wrote into the workspace");
    assert!(home.path().join("data/indexes").read_dir().unwrap().count() == 1);
}

fn walk(dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push((
                e.path().display().to_string(),
                e.metadata().map(|m| m.len()).unwrap_or(0),
            ));
        }
    }
    out.sort();
    out
}

#[test]
fn the_analyzer_comes_from_capstan_toml_and_changing_it_rebuilds_the_index() {
    let home = Home::new("[index]\nanalyzer = \"simple\"\n");
    let ws = fixture();
    let paths = |data: &Value| -> Vec<String> {
        data["passages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["path"].as_str().unwrap().to_string())
            .collect()
    };
    // "simple" matches exact words only: "rotate" is not "rotates".
    let (data, _) = kb(&home, ws.path(), "search", json!({"query": "rotate"}));
    assert!(!paths(&data).contains(&"page.html".to_string()), "{data}");
    let (data, _) = kb(&home, ws.path(), "search", json!({"query": "rotates"}));
    assert_eq!(paths(&data)[0], "page.html");

    // English stems both to one word; the old index is rebuilt, not misread.
    std::fs::write(
        home.dir.path().join("config/capstan.toml"),
        "[index]\nanalyzer = \"english\"\n",
    )
    .unwrap();
    let (data, _) = kb(&home, ws.path(), "search", json!({"query": "rotate"}));
    assert_eq!(paths(&data)[0], "page.html", "{data}");

    // A misspelt analyzer is a clear error naming the file and the choices.
    std::fs::write(
        home.dir.path().join("config/capstan.toml"),
        "[index]\nanalyzer = \"klingon\"\n",
    )
    .unwrap();
    let out = home
        .capstan()
        .args(["search", "--workspace"])
        .arg(ws.path())
        .arg("rotate")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("capstan.toml") && stderr.contains("klingon") && stderr.contains("simple"),
        "{stderr}"
    );
}

/// `capstan search --json` in `ws`.
fn search(home: &Home, ws: &Path, query: &str) -> Value {
    let out = home
        .capstan()
        .args(["search", "--json", "--workspace"])
        .arg(ws)
        .arg(query)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "search failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn paths(data: &Value) -> Vec<&str> {
    data["passages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect()
}

/// A search refreshes the index only when the host's own walk (the plugin's
/// walk, run natively) shows a change: none after nothing changed (`index`
/// is null: the plugin never walked), and every kind of change (an edit
/// that keeps the size, a new file, a deleted one) still seen by the next
/// search. What .gitignore leaves out changes nothing; a file the refresh
/// reads and then skips (binary content under a name that says nothing)
/// keeps every search refreshing, as before.
#[test]
fn search_refreshes_only_when_the_workspace_changed() {
    let home = Home::new("");
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let put = |rel: &str, text: &str| {
        let path = ws.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    put(".gitignore", "build/\n");
    put("docs/audit.md", "# Audit\n\nThe audit is in March.\n");
    put("docs/pager.md", "# Pager\n\nThe pager rota is weekly.\n");

    let first = search(&home, ws, "audit");
    // The two notes and the .gitignore (text the index keeps too).
    assert_eq!(first["index"]["parsed"], 3, "{first}");
    assert_eq!(paths(&first), ["docs/audit.md"]);
    let unchanged = search(&home, ws, "audit");
    assert!(
        unchanged["index"].is_null(),
        "refreshed for nothing: {unchanged}"
    );
    assert_eq!(paths(&unchanged), ["docs/audit.md"]);

    // The same size, another word: only the modification time tells.
    std::thread::sleep(std::time::Duration::from_millis(20));
    put("docs/audit.md", "# Audit\n\nThe audit is in April.\n");
    let edited = search(&home, ws, "april");
    assert_eq!(edited["index"]["parsed"], 1, "{edited}");
    assert_eq!(paths(&edited), ["docs/audit.md"]);

    put(
        "docs/oncall.md",
        "# Oncall\n\nThe oncall swap is on Monday.\n",
    );
    let added = search(&home, ws, "oncall swap");
    assert_eq!(added["index"]["parsed"], 1, "{added}");
    assert_eq!(paths(&added), ["docs/oncall.md"]);

    std::fs::remove_file(ws.join("docs/pager.md")).unwrap();
    let removed = search(&home, ws, "pager rota");
    assert_eq!(removed["index"]["removed"], 1, "{removed}");
    assert!(paths(&removed).is_empty(), "{removed}");

    // What the refresh ignores is no change.
    put("build/out.md", "# Generated\n\nzebra\n");
    let ignored = search(&home, ws, "zebra");
    assert!(ignored["index"].is_null(), "{ignored}");
    assert!(paths(&ignored).is_empty());

    // Read, found binary, skipped: never in the index, so never current.
    std::fs::write(ws.join("blob"), b"\x00\x01\x02binary\xff\xfe").unwrap();
    for _ in 0..2 {
        let sniffed = search(&home, ws, "audit");
        assert!(sniffed["index"].is_object(), "{sniffed}");
        assert_eq!(sniffed["index"]["parsed"], 0, "{sniffed}");
    }
}
