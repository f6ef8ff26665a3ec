//! A long-running `capstan serve` watches the workspaces it answers about
//! (inotify, host/src/plugins/services/index_watch.rs) instead of walking them
//! before every question: a question where nothing changed skips the walk, so
//! the watcher is all that tells the server a file came or went. Real server,
//! real HTTP on 127.0.0.1, real kb-retrieval component, offline model.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Home;
use common::server::{Server, handbook};
use common::sse::SseReader;
use serde_json::{Value, json};

/// Asks `question` in `ws` and returns the paths of the passages retrieval found
/// (in order; a run whose retrieval stays insufficient ends `run.failed`).
async fn retrieved(server: &Server, ws: &std::path::Path, question: &str) -> Vec<String> {
    let resp = server
        .client()
        .post(server.url("/v1/runs"))
        .json(&json!({"message": question, "workspace": ws}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    let mut events: Vec<Value> = Vec::new();
    SseReader::new(resp).rest(&mut events).await;
    let last = events.last().map(|e| e["type"].clone());
    assert!(
        last == Some(json!("run.completed")) || last == Some(json!("run.failed")),
        "{events:?}"
    );
    let mut paths: Vec<String> = events
        .iter()
        .filter(|e| e["type"] == "task.completed")
        .filter_map(|e| e["data"]["passages"].as_array())
        .flatten()
        .map(|p| p["path"].as_str().unwrap().to_string())
        .collect();
    paths.dedup();
    paths
}

#[tokio::test(flavor = "multi_thread")]
async fn files_added_and_deleted_after_a_question_show_in_the_next_ones() {
    let home = Home::new("");
    let ws = handbook();
    let root = std::fs::canonicalize(ws.path()).unwrap();
    let server = Server::start(&home, &["-w", root.to_str().unwrap()]);

    // The first question indexes the handbook and starts the watch.
    let first = retrieved(&server, &root, "How do I rotate the signing keys?").await;
    assert!(
        first.iter().any(|p| p == "ops/key-rotation.md"),
        "{first:?}"
    );
    // Asked again with nothing changed: the same passages (no walk, no refresh).
    let again = retrieved(&server, &root, "How do I rotate the signing keys?").await;
    assert_eq!(again, first);
    let question = "How do I run the zebrafinch quasar drill?";
    assert!(
        !retrieved(&server, &root, question)
            .await
            .iter()
            .any(|p| p.contains("zebrafinch")),
    );

    // A file added in a new directory after those questions is found by the next.
    std::fs::create_dir(root.join("drills")).unwrap();
    std::fs::write(
        root.join("drills/zebrafinch.md"),
        "# Zebrafinch quasar drill\n\nTo run the zebrafinch quasar drill, page the on-call \
         quasar lead and start the zebrafinch checklist.\n",
    )
    .unwrap();
    let found = retrieved(&server, &root, question).await;
    assert_eq!(
        found.first().map(String::as_str),
        Some("drills/zebrafinch.md"),
        "{found:?}"
    );

    // An edit to it is seen too: the new word is found in it.
    std::fs::write(
        root.join("drills/zebrafinch.md"),
        "# Zebrafinch quasar drill\n\nThe drill now starts with the marmoset beacon.\n",
    )
    .unwrap();
    let edited = retrieved(&server, &root, "When is the marmoset beacon used?").await;
    assert_eq!(
        edited.first().map(String::as_str),
        Some("drills/zebrafinch.md"),
        "{edited:?}"
    );

    // Deleted: gone from the next question's passages.
    std::fs::remove_file(root.join("drills/zebrafinch.md")).unwrap();
    let gone = retrieved(&server, &root, question).await;
    assert!(!gone.iter().any(|p| p.contains("zebrafinch")), "{gone:?}");
    // And the handbook is still there.
    let still = retrieved(&server, &root, "How do I rotate the signing keys?").await;
    assert!(
        still.iter().any(|p| p == "ops/key-rotation.md"),
        "{still:?}"
    );
}
