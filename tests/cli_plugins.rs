//! `capstan plugins` and `capstan invoke` through the real binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Home, plugin_entry};
use serde_json::Value;

#[test]
fn plugins_check_passes_on_the_bundled_set_and_lists_them() {
    let home = Home::new("");
    let out = home.capstan().args(["plugins", "check"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("all 3 plugins loaded and valid"));

    let out = home
        .capstan()
        .args(["plugins", "list", "--json"])
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["kb-retrieval", "terminal-exec", "docx"]);
    assert_eq!(list["plugins"][0]["permissions"]["workspace"], "read");
}

#[test]
fn plugins_check_names_the_file_and_field_and_exits_non_zero() {
    let manifest = plugin_entry("hello", "hello", &["echo"], "")
        + "[[plugin]]\nname = \"bad\"\ncomponent = \"builtin:docx\"\nkinds = [\"x\"]\n[plugin.limits]\nmemory_mb = 0\n";
    let home = Home::new(&manifest);
    let out = home.capstan().args(["plugins", "check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("capstan.toml: plugin `bad`: field `limits.memory_mb`"),
        "{stderr}"
    );
    // The good entry still loaded.
    assert!(String::from_utf8_lossy(&out.stdout).contains("hello"));
}

#[test]
fn an_oci_field_must_pin_a_manifest_digest() {
    let good = format!(
        "oci://127.0.0.1:5000/plugins/hello@sha256:{}",
        "a".repeat(64)
    );
    let home = Home::new(&plugin_entry(
        "hello",
        "hello",
        &["echo"],
        &format!("oci = {good:?}"),
    ));
    let out = home.capstan().args(["plugins", "check"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for bad in [
        "oci://127.0.0.1:5000/plugins/hello:1.0".to_string(),
        format!("127.0.0.1:5000/plugins/hello@sha256:{}", "a".repeat(64)),
        format!(
            "oci://127.0.0.1:5000/plugins/hello@sha256:{}",
            "a".repeat(63)
        ),
    ] {
        let home = Home::new(&plugin_entry(
            "hello",
            "hello",
            &["echo"],
            &format!("oci = {bad:?}"),
        ));
        let out = home.capstan().args(["plugins", "check"]).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{bad} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("plugin `hello`: field `oci`") && stderr.contains("@sha256:<64 hex"),
            "{stderr}"
        );
    }
}

#[test]
fn invoke_runs_a_task_and_exit_codes_tell_success_from_failure() {
    let home = Home::new(&plugin_entry("hello", "hello", &["echo"], ""));
    let out = home
        .capstan()
        .args(["invoke", "echo", "--input", r#"{"a":[1,2]}"#])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(data, serde_json::json!({"a": [1, 2]}));

    let out = home
        .capstan()
        .args(["invoke", "writer", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let last: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(last["reason"], "unsupported-legacy-capability");

    let out = home
        .capstan()
        .args(["invoke", "echo", "--input", "{not json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--input is not valid JSON"));

    let out = home
        .capstan()
        .args(["invoke", "echo", "--workspace", "/no/such/dir"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/no/such/dir") && err.contains("existing directory"),
        "{err}"
    );
}
