//! The AG-UI endpoint driven by the official AG-UI TypeScript client
//! (`@ag-ui/client` 1.0.0's `HttpAgent`, pinned in tests/npm/agui): a run's
//! events arrive and pass the client's own verification and schema checks, an
//! approval interrupt round-trips through `resume`, and `abortRun` cancels the
//! Capstan run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::Home;
use common::server::{Server, handbook};
use serde_json::Value;

#[test]
fn the_official_agui_client_runs_answers_an_interrupt_and_aborts() {
    let modules = common::npm_modules("agui");
    let script = modules.parent().unwrap().join("drive.mjs");
    let home = Home::new("");
    let ws = handbook();
    let server = Server::start(&home, &["-w", ws.path().to_str().unwrap()]);
    let out = Command::new("node")
        .env("CAPSTAN_TOKEN", server.token.as_deref().unwrap())
        .arg(&script)
        .arg(&server.base)
        .arg(ws.path())
        .output()
        .expect("node is installed (bash tests/run installs it)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "drive.mjs failed: {stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("drive.mjs printed no summary ({e}): {stderr}"));
    assert_eq!(summary["deviations"], serde_json::json!([]), "{stderr}");

    let q = &summary["question"];
    let types: Vec<&str> = q["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(types.first(), Some(&"RUN_STARTED"), "{types:?}");
    assert_eq!(types.last(), Some(&"RUN_FINISHED"), "{types:?}");
    for want in [
        "STEP_STARTED",
        "STEP_FINISHED",
        "ACTIVITY_SNAPSHOT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "CUSTOM",
    ] {
        assert!(types.contains(&want), "no {want} in {types:?}");
    }
    assert!(
        q["answer"].as_str().unwrap().to_lowercase().contains("key"),
        "{q}"
    );
    assert!(
        q["activityTypes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "capstan.activity")
    );
    let feed = q["feed"].as_array().unwrap();
    assert!(
        feed.iter()
            .any(|m| m.as_str().unwrap().contains("knowledge base")),
        "{feed:?}"
    );
    assert!(
        q["citations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "ops/key-rotation.md"),
        "{q}"
    );
    assert_eq!(q["finished"]["outcome"]["type"], "success");
    assert_eq!(q["finished"]["usage"][0]["model"], "capstan-offline");

    let a = &summary["approval"];
    let interrupt = &a["interrupt"];
    assert_eq!(interrupt["type"], "RUN_FINISHED");
    assert_eq!(interrupt["outcome"]["type"], "interrupt", "{a}");
    let asked = &interrupt["outcome"]["interrupts"][0];
    assert_eq!(asked["metadata"]["capstan"]["command"], "make check");
    assert_eq!(asked["metadata"]["capstan"]["risk"], "write");
    assert_eq!(a["pendingAfterResume"], 0);
    assert_eq!(a["secondTypes"][0], "RUN_STARTED");
    let task = &a["plan"]["tasks"][0];
    assert_eq!(task["status"], "completed", "{a}");
    assert_eq!(task["steps"][0]["exitCode"], 0);
    assert!(
        task["steps"][0]["output"]
            .as_str()
            .unwrap()
            .contains("all checks passed")
    );
    assert!(
        a["toolResults"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.as_str().unwrap().contains("ran 1 command")),
        "{a}"
    );
    assert_eq!(a["finished"]["outcome"]["type"], "success");

    // abortRun dropped the stream; the server cancelled the Capstan run.
    let run_id = summary["abort"]["capstanRunId"].as_str().unwrap();
    let status = wait_until_ended(&server, run_id);
    assert_eq!(status, "cancelled");
}

fn wait_until_ended(server: &Server, run_id: &str) -> String {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        for _ in 0..600 {
            let run: Value = server
                .client()
                .get(server.url(&format!("/v1/runs/{run_id}")))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if run["status"] != "running" {
                return run["status"].as_str().unwrap().to_string();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("run {run_id} still running after the client aborted");
    })
}
