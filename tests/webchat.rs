//! The reference web chat in headless Chromium (Debian's chromium driven by
//! playwright-core, pinned in tests/npm/webchat): a streamed answer with
//! citations and an activity feed, an approval answered in the page, a step
//! trace expanded in the plan panel, and a run cancelled with the button.
//! Opened with the start-up URL (token in the query), the page trades the
//! token for an HttpOnly cookie; a folder nobody registered is refused with
//! advice. Screenshots land in tests/artifacts/ (old ones removed first, so
//! only this run's count).

mod common;

use std::process::Command;

use common::Home;
use common::server::{Server, artifacts, handbook};
use serde_json::Value;

#[test]
fn the_web_chat_streams_approves_traces_and_cancels() {
    let modules = common::npm_modules("webchat");
    let script = modules.parent().unwrap().join("drive.mjs");
    let home = Home::new("");
    let ws = handbook();
    let unregistered = handbook();
    let server = Server::start(&home, &["-w", ws.path().to_str().unwrap()]);
    let shots = artifacts();
    let names = ["answer", "approval", "trace", "cancelled"];
    for name in names {
        let _ = std::fs::remove_file(shots.join(format!("webchat-{name}.png")));
    }
    let out = Command::new("node")
        .arg(&script)
        .arg(&server.chat_url)
        .arg(ws.path())
        .arg(&shots)
        .arg(unregistered.path())
        .output()
        .expect("node is installed (bash tests/run installs it)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "drive.mjs failed: {stderr}");
    let s: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("drive.mjs printed no summary ({e}): {stderr}"));
    // The console logs the refused folder's 403; nothing else may fail.
    let errors: Vec<&str> = s["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .filter(|e| !e.contains("403"))
        .collect();
    assert!(errors.is_empty(), "errors in the page: {errors:?}");

    let auth = &s["auth"];
    assert_eq!(
        auth["url"],
        server.url("/"),
        "the token left the address bar"
    );
    let port = server.base.rsplit(':').next().unwrap();
    assert_eq!(
        auth["cookies"],
        serde_json::json!([{"name": format!("capstan_token_{port}"), "httpOnly": true, "sameSite": "Strict"}])
    );
    assert_eq!(auth["scriptSeesCookie"], false);
    let refused = s["unregistered"].as_str().unwrap();
    assert!(
        refused.contains("capstan workspace add") && refused.contains("not registered"),
        "{refused}"
    );

    let ws_root = ws.path().canonicalize().unwrap();
    assert_eq!(s["workspace"], ws_root.to_str().unwrap());
    assert_eq!(s["profile"], "policy: cautious");

    let q = &s["question"];
    assert!(
        q["answer"].as_str().unwrap().to_lowercase().contains("key"),
        "{q}"
    );
    // The answer arrived in pieces, not at once.
    assert!(q["updates"].as_u64().unwrap() > 2, "{q}");
    assert!(
        q["citations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c.as_str().unwrap().starts_with("ops/key-rotation.md")),
        "{q}"
    );
    let feed = q["feed"].as_array().unwrap();
    assert!(
        feed.iter()
            .any(|m| m.as_str().unwrap().contains("searched the knowledge base")),
        "{feed:?}"
    );
    assert!(q["status"].as_str().unwrap().contains("tokens"), "{q}");

    assert!(
        s["approvalPrompt"].as_str().unwrap().contains("make check"),
        "{s}"
    );
    assert!(
        s["decision"].as_str().unwrap().starts_with("approved"),
        "{s}"
    );
    assert_eq!(s["taskBadge"], "completed");
    assert_eq!(s["traceVisibleBefore"], false, "the trace starts folded");
    assert_eq!(s["trace"]["command"], "$ make check");
    assert!(
        s["trace"]["output"]
            .as_str()
            .unwrap()
            .contains("all checks passed"),
        "{s}"
    );
    assert!(
        s["approvalFeed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m.as_str().unwrap().contains("make check")),
        "{s}"
    );

    assert!(
        s["cancel"]["status"]
            .as_str()
            .unwrap()
            .starts_with("cancelled"),
        "{s}"
    );
    assert_eq!(s["cancel"]["sendEnabled"], true);
    assert_eq!(s["cancel"]["cancelEnabled"], false);
    assert_eq!(s["sessions"], 1, "three runs, one session");
    for name in names {
        let shot = shots.join(format!("webchat-{name}.png"));
        let size = std::fs::metadata(&shot)
            .unwrap_or_else(|_| panic!("no {name} screenshot from this run"))
            .len();
        assert!(size > 1000, "{name} screenshot is {size} bytes");
    }
}
