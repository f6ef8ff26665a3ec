//! The reference web chat in headless Chromium (Debian's chromium driven by
//! playwright-core, pinned in tests/npm/webchat, audited by axe-core).
//!
//! Two real servers: one on the offline model (a streamed answer with
//! citations and a feed that folds when the run ends, an approval answered
//! with the keyboard, a step trace, a run cancelled with Esc, sessions renamed,
//! searched, deleted and reopened, the 390 px and dark layouts), and one on a
//! scripted model server whose answer is Markdown laced with script tags,
//! onerror images, `javascript:` links and remote images (all inert: no
//! dialog, no request leaves the servers' origins), citing lines the side
//! viewer must show. Opened with the start-up URL (token in the query), the
//! page trades the token for an HttpOnly cookie. Screenshots land in
//! tests/artifacts/ (old ones removed first, so only this run's count).
//!
//! The file route the viewer reads is also driven directly: it refuses `..`,
//! absolute paths, symlinks pointing out, encoded slashes, unregistered
//! workspaces, and requests without the token or from a foreign Host/Origin.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;

use capstan_models::scripted::{Reply, ScriptedServer};
use common::Home;
use common::server::{Server, artifacts, handbook};
use serde_json::{Value, json};

/// The scripted model's final answer: real Markdown, and everything a hostile
/// model could try. Sent in pieces so the page renders it while it streams.
const HOSTILE_ANSWER: &[&str] = &[
    "## Rotating the signing keys\n\nRotate them with the script, then verify [1].\n\n",
    "```bash\n# rotate every key, then check\n./scripts/rotate-keys --all && echo \"done\"\n```\n\n",
    "| Step | Who | When |\n| --- | --- | --- |\n| Rotate | ops | monthly |\n",
    "| Verify | security | after each rotation |\n\n",
    "<script>window.__pwned = true; alert(\"script\")</script>\n\n",
    "<img src=x onerror=\"window.__pwned = true; alert('img')\">\n\n",
    "[a harmless link](javascript:window.__pwned=true;alert('js')) and [another](JaVaScRiPt:alert(1)) ",
    "and ![tracking pixel](http://127.0.0.1:9/pixel.png) and <a href=\"http://127.0.0.1:9/x\">a raw anchor</a>.\n\n",
    "See [the docs](https://docs.example.org/keys) and the [hostile notes](notes/hostile.md).\n\n",
    "Sources:\n[1] ops/key-rotation.md\n",
];

/// A workspace file with the same tricks; the viewer must show it as text.
const HOSTILE_FILE: &str = "# Notes\n<script>window.__pwned = true; alert('file')</script>\n\
<img src=x onerror=\"alert('file img')\">\n[click](javascript:alert('file link'))\n\
![pixel](http://127.0.0.1:9/file-pixel.png)\n";

fn scripted_model(rt: &tokio::runtime::Runtime) -> ScriptedServer {
    let server = rt.block_on(ScriptedServer::start()).unwrap();
    server.set_responder(|r| {
        let prompt = r.prompt_text();
        let step = |v: Value| Reply::text([v.to_string()]).with_usage(100, 20);
        if r.body.to_string().contains("json_schema") || prompt.contains("ONE JSON object") {
            if prompt.contains("Retrieved passages") {
                step(json!({"action": "answer", "reason": "the passages answer it"}))
            } else {
                step(json!({"action": "retrieve", "reason": "look it up", "query": "rotate signing keys"}))
            }
        } else {
            Reply::text(HOSTILE_ANSWER.iter().copied())
                .with_usage(300, 120)
                .delay_per_chunk(std::time::Duration::from_millis(120))
        }
    });
    server
}

#[test]
fn the_web_chat_renders_safely_cites_approves_by_keyboard_and_fits_a_phone() {
    let modules = common::npm_modules("webchat");
    vendored_files_are_the_pinned_releases(&modules);
    let script = modules.parent().unwrap().join("drive.mjs");
    let rt = tokio::runtime::Runtime::new().unwrap();

    let home = Home::new("");
    let ws = handbook();
    let unregistered = handbook();
    let server = Server::start(&home, &["-w", ws.path().to_str().unwrap()]);

    // SAFETY: set before the child starts, read only by it.
    unsafe { std::env::set_var("CAPSTAN_TEST_KEY", "sk-test-scripted") };
    let model = scripted_model(&rt);
    let md_home = Home::new(&format!(
        "[model]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"scripted-model\"\napi_key_env = \"CAPSTAN_TEST_KEY\"\n",
        model.openai_base_url()
    ));
    let md_ws = handbook();
    std::fs::create_dir_all(md_ws.path().join("notes")).unwrap();
    std::fs::write(md_ws.path().join("notes/hostile.md"), HOSTILE_FILE).unwrap();
    let md_server = Server::start(&md_home, &["-w", md_ws.path().to_str().unwrap()]);

    let shots = artifacts();
    let names = [
        "answer",
        "approval",
        "trace",
        "cancelled",
        "dark",
        "390-drawer",
        "390-dark",
        "markdown",
        "viewer",
        "hostile-file",
    ];
    for name in names {
        let _ = std::fs::remove_file(shots.join(format!("webchat-{name}.png")));
    }
    let out = Command::new("node")
        .arg(&script)
        .arg(&server.chat_url)
        .arg(ws.path())
        .arg(&shots)
        .arg(unregistered.path())
        .arg(&md_server.chat_url)
        .output()
        .expect("node is installed (bash tests/run installs it)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "drive.mjs failed: {stderr}");
    let s: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("drive.mjs printed no summary ({e}): {stderr}"));
    std::fs::write(
        shots.join("webchat-summary.json"),
        serde_json::to_string_pretty(&s).unwrap(),
    )
    .unwrap();

    // Nothing ran, popped up or left: no script error, no dialog, no request
    // beyond the two servers, nothing the policy had to stop.
    let errors: Vec<&str> = strings(&s["errors"])
        .into_iter()
        .filter(|e| !e.contains("403"))
        .collect();
    assert!(errors.is_empty(), "errors in the page: {errors:?}");
    assert_eq!(s["dialogs"], json!([]), "a dialog opened");
    assert_eq!(
        s["requests"],
        json!([]),
        "requests left the server's origin"
    );
    assert_eq!(
        s["cspViolations"],
        json!([]),
        "the policy had to stop something"
    );
    let csp = s["csp"].as_str().unwrap();
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "frame-ancestors 'none'",
        "require-trusted-types-for 'script'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }

    check_auth_and_keyboard(&s, &server, ws.path());
    check_offline_runs(&s);
    check_sessions(&s, ws.path());
    check_layouts(&s);
    check_markdown(&s, md_ws.path());

    for (name, violations) in s["audit"].as_object().unwrap() {
        let serious: Vec<&Value> = violations
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical")))
            .collect();
        assert!(
            serious.is_empty(),
            "axe-core ({name}): serious or critical violations: {serious:#?}"
        );
    }
    for name in names {
        let shot = shots.join(format!("webchat-{name}.png"));
        let size = std::fs::metadata(&shot)
            .unwrap_or_else(|_| panic!("no {name} screenshot from this run"))
            .len();
        assert!(size > 1000, "{name} screenshot is {size} bytes");
    }
    drop(model);
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect()
}

fn check_auth_and_keyboard(s: &Value, server: &Server, ws: &Path) {
    let auth = &s["auth"];
    assert_eq!(
        auth["url"],
        server.url("/"),
        "the token left the address bar"
    );
    let port = server.base.rsplit(':').next().unwrap();
    assert_eq!(
        auth["cookies"],
        json!([{"name": format!("capstan_token_{port}"), "httpOnly": true, "sameSite": "Strict"}])
    );
    assert_eq!(auth["scriptSeesCookie"], false);
    let refused = s["unregistered"].as_str().unwrap();
    assert!(
        refused.contains("capstan workspace add") && refused.contains("not registered"),
        "{refused}"
    );
    // `serve -w DIR` preselects DIR.
    assert_eq!(s["workspace"], ws.canonicalize().unwrap().to_str().unwrap());
    assert_eq!(s["profile"], "policy: cautious");
    assert_eq!(
        s["focusOnLoad"], "message",
        "the composer has focus on load"
    );
    assert_eq!(s["firstTab"], "Skip to the message box");
    assert_eq!(s["skipTarget"], "message");
    assert_eq!(s["shiftEnterKeepsText"], "How do I rotate\n");
}

fn check_offline_runs(s: &Value) {
    let q = &s["question"];
    assert!(
        q["answer"].as_str().unwrap().to_lowercase().contains("key"),
        "{q}"
    );
    // At least one render while it streamed, and the final one.
    assert!(
        q["updates"].as_u64().unwrap() >= 2,
        "streamed in pieces: {q}"
    );
    assert!(
        strings(&q["citations"])
            .iter()
            .any(|c| c.starts_with("ops/key-rotation.md:")),
        "{q}"
    );
    assert!(
        strings(&q["feed"])
            .iter()
            .any(|m| m.contains("searched the knowledge base")),
        "{q}"
    );
    // The feed folds to one line when the run ends, and opens again on demand.
    assert_eq!(q["feedOpen"], false, "{q}");
    assert!(
        q["feedSummary"]
            .as_str()
            .unwrap()
            .starts_with("What Capstan did: "),
        "{q}"
    );
    assert_eq!(q["feedExpands"], true);
    assert!(q["status"].as_str().unwrap().contains("tokens"), "{q}");

    // The approval: by keyboard, each reason once, no buttons after.
    assert!(
        s["approvalPrompt"].as_str().unwrap().contains("make check"),
        "{s}"
    );
    let reasons = strings(&s["approvalReasons"]);
    let mut unique = reasons.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(reasons.len(), unique.len(), "a reason twice: {reasons:?}");
    assert_eq!(s["tabbedTo"], "Approve");
    assert!(
        s["decision"].as_str().unwrap().starts_with("approved"),
        "{s}"
    );
    assert_eq!(s["buttonsAfterDecision"], 0, "the buttons are gone");
    assert_eq!(s["taskBadge"], "completed");
    assert_eq!(s["traceVisibleBefore"], false, "the trace starts folded");
    let trace = &s["trace"];
    assert_eq!(trace["command"], "$ make check");
    // Approved by a person at `write` (cautious asks for it): the grant the
    // sandbox enforced is shown with the step (issue #41).
    assert_eq!(
        trace["grant"], "ran with: writable workspace, no network (granted by approval)",
        "{trace}"
    );
    assert!(
        trace["output"]
            .as_str()
            .unwrap()
            .contains("all checks passed"),
        "{trace}"
    );
    assert!(
        trace["outputFont"].as_str().unwrap().contains("monospace"),
        "{trace}"
    );
    assert_eq!(
        trace["outputTimes"], 1,
        "the output is shown once in the trace"
    );
    assert!(
        strings(&s["approvalFeed"])
            .iter()
            .any(|m| m.contains("make check")),
        "{s}"
    );

    let cancel = &s["cancel"];
    assert!(
        cancel["status"].as_str().unwrap().starts_with("cancelled"),
        "Esc cancelled the run: {s}"
    );
    assert_eq!(cancel["sendEnabled"], true);
    assert_eq!(cancel["cancelEnabled"], false);
}

fn check_sessions(s: &Value, ws: &Path) {
    assert_eq!(s["sessions"], 1, "three runs, one session");
    let name = ws.canonicalize().unwrap();
    let name = name.file_name().unwrap().to_str().unwrap();
    assert_eq!(s["sessionGroups"], json!([name]), "grouped by workspace");
    assert!(
        s["sessionTitle"]
            .as_str()
            .unwrap()
            .contains("How do I rotate the signing keys"),
        "the whole first question is the title: {s}"
    );
    assert!(s["sessionDate"].as_str().unwrap().starts_with("20"), "{s}");
    assert_eq!(s["searchHit"], "Where is the on-call guide?");
    assert_eq!(s["afterDelete"], json!(["Key rotation notes"]));
    let reopened = &s["reopened"];
    // The cancelled run left no answer turn: its replay still shows how it ended.
    assert_eq!(reopened["messages"], 6, "three questions, three outcomes");
    assert_eq!(reopened["feedsOpen"], 0, "replayed feeds are folded");
}

fn check_layouts(s: &Value) {
    let dark = s["darkBackground"].as_str().unwrap();
    assert_eq!(dark, "rgb(23, 24, 26)", "dark follows the system");
    assert_eq!(s["toggledTheme"], "light");
    assert_eq!(s["toggledBackground"], "rgb(251, 251, 250)");
    let phone = &s["phone"];
    for view in ["empty", "drawer", "session"] {
        let o = &phone[view];
        assert!(
            o["scrollWidth"].as_u64().unwrap() <= o["innerWidth"].as_u64().unwrap(),
            "horizontal overflow at 390 px ({view}): {o}"
        );
        assert_eq!(o["innerWidth"], 390, "{o}");
    }
    let composer = &phone["composer"];
    assert_eq!(composer["position"], "fixed", "{composer}");
    assert_eq!(
        composer["bottom"], composer["height"],
        "at the bottom: {composer}"
    );
    assert_eq!(phone["planBelowMessages"], true);
}

fn check_markdown(s: &Value, ws: &Path) {
    let md = &s["md"];
    assert_eq!(md["headingWhileStreaming"], true, "rendered as it streams");
    assert_eq!(md["heading"], "Rotating the signing keys");
    assert_eq!(md["codeLang"], "bash");
    assert!(
        md["codeText"]
            .as_str()
            .unwrap()
            .contains("./scripts/rotate-keys --all"),
        "{md}"
    );
    assert!(md["highlighted"].as_u64().unwrap() > 0, "highlighted: {md}");
    assert_eq!(md["tableHeader"], json!(["Step", "Who", "When"]));
    assert_eq!(
        md["tableCells"],
        json!([
            "Rotate",
            "ops",
            "monthly",
            "Verify",
            "security",
            "after each rotation"
        ])
    );
    // Inert: no element that runs or loads, no handler, no script-bearing link.
    assert_eq!(md["scripts"], 0, "{md}");
    assert_eq!(md["handlers"], 0, "{md}");
    assert_eq!(md["pwned"], false);
    for href in strings(&md["hrefs"]) {
        assert!(
            href == "#" || href.starts_with("https://docs.example.org/"),
            "a link the page should not have made: {href}"
        );
    }
    let text = md["shownAsText"].as_str().unwrap();
    assert!(
        text.contains("<script>window.__pwned"),
        "raw HTML is shown as text: {text}"
    );
    assert!(text.contains("image: tracking pixel"), "{text}");
    let external = &md["external"][0];
    assert_eq!(external["target"], "_blank");
    assert_eq!(external["rel"], "noopener noreferrer nofollow");
    assert_eq!(
        external["host"], "↗ docs.example.org",
        "marked with its host"
    );
    // Citations: `[n]` markers link, the answer's own Sources list is gone.
    assert_eq!(md["markers"], json!(["[1]"]));
    assert!(!text.contains("Sources:"), "{text}");
    let citations = strings(&md["citations"]);
    assert_eq!(citations.len(), 1, "{citations:?}");
    assert_eq!(
        md["copiedCode"],
        "# rotate every key, then check\n./scripts/rotate-keys --all && echo \"done\""
    );
    assert!(
        md["copiedAnswer"]
            .as_str()
            .unwrap()
            .starts_with("## Rotating the signing keys"),
        "{md}"
    );

    // The viewer shows exactly the cited lines of the cited file.
    let label = citations[0].split(" — ").next().unwrap();
    let (path, lines) = label.rsplit_once(':').unwrap();
    let (start, end) = lines.split_once('–').unwrap_or((lines, lines));
    let (start, end): (usize, usize) = (start.parse().unwrap(), end.parse().unwrap());
    let file = std::fs::read_to_string(ws.join(path)).unwrap();
    let expected: Vec<Value> = file
        .lines()
        .enumerate()
        .skip(start - 1)
        .take(end - start + 1)
        .map(|(i, l)| json!({"n": i + 1, "text": if l.is_empty() { " " } else { l }}))
        .collect();
    let viewer = &md["viewer"];
    assert_eq!(viewer["title"], label);
    assert_eq!(viewer["cited"], json!(expected), "the cited lines");
    assert_eq!(viewer["focus"], "viewer-title");
    assert_eq!(md["viewerClosed"], true, "Esc closes the viewer");
    assert_eq!(md["listOpens"], label);
    // The hostile file is text, line for line.
    let hostile = &md["hostileFile"];
    let shown: Vec<&str> = strings(&hostile["text"]);
    assert_eq!(shown, HOSTILE_FILE.lines().collect::<Vec<_>>());
    assert_eq!(hostile["elements"], 0);
}

/// The vendored renderer, sanitiser and highlighter are byte for byte the
/// releases pinned in tests/npm/webchat/package-lock.json.
fn vendored_files_are_the_pinned_releases(modules: &Path) {
    let vendor = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/frontends/server/web/vendor");
    for (ours, theirs) in [
        ("marked.umd.js", "marked/lib/marked.umd.js"),
        ("LICENSE-marked", "marked/LICENSE"),
        ("purify.min.js", "dompurify/dist/purify.min.js"),
        ("LICENSE-dompurify", "dompurify/LICENSE"),
        (
            "highlight.min.js",
            "@highlightjs/cdn-assets/highlight.min.js",
        ),
        ("LICENSE-highlightjs", "@highlightjs/cdn-assets/LICENSE"),
    ] {
        assert!(
            std::fs::read(vendor.join(ours)).unwrap()
                == std::fs::read(modules.join(theirs)).unwrap(),
            "host/src/frontends/server/web/vendor/{ours} differs from the pinned npm release {theirs}; \
             copy it again (see host/src/frontends/server/web/vendor/README.md)"
        );
    }
}

#[test]
fn the_file_route_stays_inside_registered_workspaces_behind_the_doors() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let home = Home::new("");
    let ws = handbook();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "the secret\n").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        ws.path().join("leak.txt"),
    )
    .unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("ops/out")).unwrap();
    let server = Server::start(&home, &["-w", ws.path().to_str().unwrap()]);
    let client = server.client();
    let bare = reqwest::Client::new();
    rt.block_on(async {
        let list: Value = client
            .get(server.url("/v1/workspaces"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let root = ws.path().canonicalize().unwrap();
        assert_eq!(list["default"], root.to_str().unwrap());
        let id = list["workspaces"][0]["id"].as_str().unwrap().to_string();
        let url = |path: &str| format!("{}/v1/workspaces/{id}/file?path={path}", server.base);

        let ok: Value = client
            .get(url("ops/key-rotation.md"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let expected: Vec<String> = std::fs::read_to_string(root.join("ops/key-rotation.md"))
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        assert_eq!(ok["lines"], json!(expected));
        assert_eq!(ok["path"], "ops/key-rotation.md");

        let secret_abs = outside.path().join("secret.txt");
        let secret_abs = secret_abs.to_str().unwrap();
        for (path, status, says) in [
            ("..%2F..%2Fetc%2Fpasswd", 400, "contains `..`"),
            ("ops/..%2F..%2Fsecret.txt", 400, "contains `..`"),
            ("%2Fetc%2Fpasswd", 400, "is absolute"),
            (secret_abs, 400, "is absolute"),
            ("leak.txt", 403, "outside the workspace"),
            ("ops/out/secret.txt", 403, "outside the workspace"),
            ("ops%252F..%252F..%252Fsecret.txt", 404, "no file"),
            ("ops", 422, "not a regular file"),
        ] {
            let resp = client.get(url(path)).send().await.unwrap();
            assert_eq!(resp.status().as_u16(), status, "{path}");
            let body: Value = resp.json().await.unwrap();
            let message = body["error"]["message"].as_str().unwrap();
            assert!(message.contains(says), "{path}: {message}");
            assert!(!message.contains("the secret"), "{message}");
        }
        // An unknown workspace id, or one spelt as a path, is not a door.
        for bad in ["ws_nope", "..%2F..%2Fetc"] {
            let resp = client
                .get(format!(
                    "{}/v1/workspaces/{bad}/file?path=passwd",
                    server.base
                ))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), 404, "{bad}");
        }
        // The doors: no token, a rebinding Host, a foreign Origin.
        let resp = bare.get(url("ops/key-rotation.md")).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 401);
        let resp = client
            .get(url("ops/key-rotation.md"))
            .header("Host", "evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 421);
        let resp = client
            .get(url("ops/key-rotation.md"))
            .header("Origin", "http://evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 403);
    });
}

#[test]
fn sessions_are_renamed_and_deleted_over_http_and_a_running_one_is_kept() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let home = Home::new("");
    let ws = handbook();
    let server = Server::start(&home, &["-w", ws.path().to_str().unwrap()]);
    let client = server.client();
    rt.block_on(async {
        let run = client
            .post(server.url("/v1/runs"))
            .json(&json!({"message": "run `sleep 60`"}))
            .send()
            .await
            .unwrap();
        assert_eq!(run.status().as_u16(), 200);
        let header = |name: &str| run.headers()[name].to_str().unwrap().to_string();
        let (run_id, session) = (header("x-capstan-run-id"), header("x-capstan-session-id"));
        let session_url = server.url(&format!("/v1/sessions/{session}"));
        // In flight: deleting is refused and says what to do.
        let busy = client.delete(&session_url).send().await.unwrap();
        assert_eq!(busy.status().as_u16(), 409);
        let body: Value = busy.json().await.unwrap();
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("cancel"),
            "{body}"
        );
        client
            .post(server.url(&format!("/v1/runs/{run_id}/cancel")))
            .send()
            .await
            .unwrap();
        let events = run.text().await.unwrap();
        assert!(events.contains("run.cancelled"), "{events}");

        for (title, status) in [("   ", 400), (&*"x".repeat(201), 400)] {
            let resp = client
                .patch(&session_url)
                .json(&json!({"title": title}))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), status, "{title:?}");
        }
        let renamed: Value = client
            .patch(&session_url)
            .json(&json!({"title": "  Sleep\n test  "}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(renamed["title"], "Sleep test");
        let found: Value = client
            .get(server.url("/v1/sessions?q=sleep"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(found["sessions"][0]["id"], session.as_str());

        let deleted: Value = client
            .delete(&session_url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(deleted["deleted"], true, "{deleted}");
        // The run is deleted, or kept for the audit trail when its command's
        // policy verdict was recorded before the cancel arrived: never both, never neither.
        let runs = &deleted["removed"];
        assert_eq!(
            runs["runs"].as_u64().unwrap() + runs["audited_runs_kept"].as_u64().unwrap(),
            1,
            "{deleted}"
        );
        assert_eq!(deleted["removed"]["turns"], 1, "{deleted}");
        let gone = client.get(&session_url).send().await.unwrap();
        assert_eq!(gone.status().as_u16(), 404);
        let again = client.delete(&session_url).send().await.unwrap();
        assert_eq!(again.status().as_u16(), 404);
    });
}

/// The change cards and Undo in the browser, and the HTTP routes behind them:
/// a command edits two files and deletes a third; the card shows the diffs;
/// Undo restores every byte. Run again, a person edits one file: Undo is
/// refused naming it, "Undo the others" restores the rest and keeps the
/// person's words. The routes refuse a second undo, contradictory options,
/// unknown sets and foreign origins.
#[test]
fn the_web_chat_shows_changes_and_undoes_them_without_clobbering_a_persons_edit() {
    let modules = common::npm_modules("webchat");
    let script = modules.parent().unwrap().join("undo.mjs");
    let home = Home::new("");
    let ws = handbook();
    let server = Server::start(&home, &["-w", ws.path().to_str().unwrap()]);
    let original = |p: &str| std::fs::read(ws.path().join(p)).unwrap();
    let files = [
        "ops/key-rotation.md",
        "guides/releases.md",
        "ops/oncall.rst",
    ];
    let before: Vec<Vec<u8>> = files.iter().map(|p| original(p)).collect();

    let shots = artifacts();
    for name in ["applied", "refused", "refused-dark", "390-dark", "failure"] {
        let _ = std::fs::remove_file(shots.join(format!("webchat-changes-{name}.png")));
    }
    let out = Command::new("node")
        .arg(&script)
        .arg(&server.chat_url)
        .arg(ws.path())
        .arg(&shots)
        .output()
        .expect("node is installed (bash tests/run installs it)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "undo.mjs failed: {stderr}");
    let s: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("undo.mjs printed no summary ({e}): {stderr}"));
    assert_eq!(
        s["errors"].as_array().map(|e| e
            .iter()
            .filter(|x| !x.as_str().unwrap_or("").contains("409"))
            .count()),
        Some(0),
        "errors in the page: {s}"
    );
    assert_eq!(s["dialogs"], json!([]));

    // The first card: three paths, a diff with the edit, an Undo button.
    let first = &s["first"];
    assert!(
        first["title"].as_str().unwrap().contains("3 paths"),
        "{first}"
    );
    let listed = strings(&first["files"]).join("\n");
    assert!(listed.contains("modified ops/key-rotation.md"), "{listed}");
    assert!(listed.contains("modified guides/releases.md"), "{listed}");
    assert!(listed.contains("deleted ops/oncall.rst"), "{listed}");
    assert!(
        strings(&first["diffs"])
            .iter()
            .any(|d| d.contains("+") && d.contains("THE ")),
        "{first}"
    );
    assert_eq!(first["buttons"], json!(["Undo"]));
    assert!(
        s["firstUndo"]["status"]
            .as_str()
            .unwrap()
            .starts_with("undone: 3 path(s)"),
        "{s}"
    );
    assert!(
        s["firstUndo"]["title"]
            .as_str()
            .unwrap()
            .starts_with("Changes undone"),
        "{s}"
    );
    assert_eq!(
        s["firstUndo"]["buttons"],
        json!([]),
        "Undo is still offered"
    );

    // The second card: the person's file was refused by name, the other restored.
    let refused = s["refused"]["status"].as_str().unwrap();
    assert!(refused.contains("guides/releases.md"), "{refused}");
    assert!(
        refused.contains("“Undo the others” restores the rest"),
        "the page should speak of its buttons, not request fields: {refused}"
    );
    let others = s["others"]["status"].as_str().unwrap();
    assert!(
        others.contains("left as they are: guides/releases.md"),
        "{others}"
    );
    assert_eq!(
        original("ops/key-rotation.md"),
        before[0],
        "not restored byte for byte"
    );
    assert_eq!(
        original("ops/oncall.rst"),
        before[2],
        "the deleted file is not back"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("guides/releases.md")).unwrap(),
        "the person's own words\n",
        "undo clobbered the person's edit"
    );
    assert_eq!(s["phone"]["cards"], json!(2), "{s}");
    assert_eq!(
        s["phone"]["undoButtons"],
        json!(0),
        "a replayed session offers Undo for sets already undone: {s}"
    );
    assert_eq!(s["phone"]["undoneTitles"], json!(2), "{s}");
    assert_eq!(
        s["phone"]["overflow"],
        json!(0),
        "the phone scrolls sideways"
    );
    for name in ["applied", "refused", "refused-dark", "390-dark"] {
        let len = std::fs::metadata(shots.join(format!("webchat-changes-{name}.png")))
            .unwrap_or_else(|_| panic!("no {name} screenshot"))
            .len();
        assert!(len > 1000, "{name} screenshot is {len} bytes");
    }

    // The routes themselves.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = server.client();
        let runs: Value = client
            .get(server.url("/v1/runs"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let mut sets = Vec::new();
        for run in runs["runs"].as_array().unwrap() {
            let id = run["id"].as_str().unwrap();
            let body: Value = client
                .get(server.url(&format!("/v1/runs/{id}/changes")))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(body["run_id"], id);
            for set in body["change_sets"].as_array().unwrap() {
                sets.push(set.clone());
            }
        }
        assert_eq!(sets.len(), 2, "{sets:#?}");
        for set in &sets {
            assert_eq!(set["state"], "undone", "{set}");
            assert!(set["files"].as_array().unwrap().len() >= 2, "{set}");
        }
        let id = sets[0]["change_set"].as_str().unwrap();
        let undo = |body: Value, id: String| {
            let client = client.clone();
            let url = server.url(&format!("/v1/changes/{id}/undo"));
            async move {
                let r = client.post(url).json(&body).send().await.unwrap();
                (r.status().as_u16(), r.text().await.unwrap())
            }
        };
        let (status, text) = undo(json!({}), id.to_string()).await;
        assert_eq!(status, 409, "a second undo: {text}");
        let (status, text) =
            undo(json!({"force": true, "keep_changed": true}), id.to_string()).await;
        assert_eq!(status, 400, "{text}");
        assert!(text.contains("exclude each other"), "{text}");
        let (status, text) = undo(json!({"everything": true}), id.to_string()).await;
        assert_eq!(status, 422, "an unknown field: {text}");
        assert!(text.contains("unknown field `everything`"), "{text}");
        let (status, _) = undo(json!({}), "no-such-set".into()).await;
        assert_eq!(status, 404);
        let (status, text) = undo(json!({}), "..%2F..%2Fetc".into()).await;
        assert_eq!(status, 400, "{text}");
        let foreign = client
            .post(server.url(&format!("/v1/changes/{id}/undo")))
            .header("Origin", "http://evil.example")
            .json(&json!({"force": true}))
            .send()
            .await
            .unwrap();
        assert_eq!(foreign.status().as_u16(), 403);
        let anonymous = reqwest::Client::new()
            .post(server.url(&format!("/v1/changes/{id}/undo")))
            .json(&json!({"force": true}))
            .send()
            .await
            .unwrap();
        assert_eq!(anonymous.status().as_u16(), 401);
    });
    assert_eq!(
        std::fs::read_to_string(ws.path().join("guides/releases.md")).unwrap(),
        "the person's own words\n",
        "a refused request changed the workspace"
    );
}

/// A run whose tools answered with images: the reference "everything"
/// server's PNG and a hostile server's SVG with a script, a "PNG" whose data
/// breaks out of an attribute, HTML posing as an image and a resource link.
/// The real images are shown with the answer (and again when the session is
/// replayed on a phone); the rest is named as kept, never loaded.
#[test]
fn the_web_chat_shows_tool_images_and_names_what_it_will_not_load() {
    let modules = common::npm_modules("webchat");
    let script = modules.parent().unwrap().join("media.mjs");
    let everything = common::npm_bin("mcp-servers", "mcp-server-everything");
    let media = common::npm_modules("mcp-servers")
        .parent()
        .unwrap()
        .join("media.mjs");
    // Sandboxed, the servers read their files from tests/npm/mcp-servers.
    let servers = media.parent().unwrap().canonicalize().unwrap();
    let read = format!("read = [{:?}]", servers.display().to_string());
    let home = Home::new(&format!(
        "[[mcp_server]]\nname = \"every\"\ncommand = {everything:?}\nrisk = \"read_only\"\n{read}\n\n\
         [[mcp_server]]\nname = \"media\"\ncommand = \"node\"\nargs = [{media:?}]\nrisk = \"read_only\"\n{read}\n"
    ));
    let ws = handbook();
    let server = Server::start(&home, &["-w", ws.path().to_str().unwrap()]);
    let shots = artifacts();
    for name in ["desktop", "dark", "390-dark", "failure"] {
        let _ = std::fs::remove_file(shots.join(format!("webchat-media-{name}.png")));
    }
    let out = Command::new("node")
        .arg(&script)
        .arg(&server.chat_url)
        .arg(&shots)
        .output()
        .expect("node is installed (bash tests/run installs it)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "media.mjs failed: {stderr}");
    let s: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("media.mjs printed no summary ({e}): {stderr}"));
    assert_eq!(s["errors"], json!([]), "{s}");
    assert_eq!(s["dialogs"], json!([]), "{s}");
    assert_eq!(s["pwned"], false);
    let origin = server.url("");
    let origin = origin.trim_end_matches('/');
    assert!(
        s["requests"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o == origin),
        "a request left the server's origin: {s}"
    );

    for view in [&s["desktop"], &s["phone"]] {
        let images = view["images"].as_array().unwrap();
        assert_eq!(
            images.len(),
            2,
            "the tiny image and the red PNG only: {view}"
        );
        for img in images {
            assert_eq!(img["type"], "data:image/png", "{img}");
            assert!(img["width"].as_u64().unwrap() > 0, "not decoded: {img}");
            assert_eq!(img["attributes"], json!(["src", "alt"]), "{img}");
        }
        let mut captions = strings(&view["captions"]);
        captions.sort_unstable();
        assert_eq!(
            captions,
            ["from mcp:every/get-tiny-image", "from mcp:media/pictures"]
        );
        let notes = strings(&view["notes"]).join("\n");
        for what in [
            "image content (image/svg+xml)",
            "image content (image/png)",
            "image content (text/html)",
            "link file:///etc/passwd",
        ] {
            assert!(notes.contains(what), "{what} not named: {notes}");
        }
    }
    assert!(
        s["phone"]["overflow"].as_i64().unwrap() <= 0,
        "the phone scrolls sideways: {s}"
    );
}

/// A one-answer-per-connection HTTP server on 127.0.0.1 (its port), and how
/// many connections reached it.
fn hello_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read as _, Write as _};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = hits.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n",
            );
        }
    });
    (port, hits)
}

/// The network approval in the page: a command reaches a host no
/// `[network]` rule names, the card offers "Always for this workspace" with
/// the rule, the person clicks it, the command gets through, the rule lands
/// in the user's capstan.toml (never the workspace's), the task's trace
/// shows the connection, and the next run in the same server needs no
/// approval.
#[test]
fn the_web_chat_allows_a_host_always_for_the_workspace_and_writes_the_rule() {
    let modules = common::npm_modules("webchat");
    let script = modules.parent().unwrap().join("always.mjs");
    let (port, hits) = hello_server();
    let rule = format!("127.0.0.1:{port}");
    let config = "[policy]\nprofile = \"trusted\"\n\n[network]\nask = true\n";
    let home = Home::new(config);
    let file = home.path().join("config/capstan.toml");
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    let server = Server::start(&home, &["-w", root.to_str().unwrap()]);

    let shots = artifacts();
    for name in ["asked", "always", "again", "failure"] {
        let _ = std::fs::remove_file(shots.join(format!("webchat-network-{name}.png")));
    }
    let out = Command::new("node")
        .arg(&script)
        .arg(&server.chat_url)
        .arg(format!("curl -sS -f -m 20 http://127.0.0.1:{port}/"))
        .arg(&shots)
        .output()
        .expect("node is installed (bash tests/run installs it)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "always.mjs failed: {stderr}");
    let s: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("always.mjs printed no summary ({e}): {stderr}"));
    assert_eq!(s["errors"], json!([]), "errors in the page: {s}");
    assert_eq!(s["dialogs"], json!([]));

    // The card: the connection, the rule, the four answers.
    let card = &s["card"];
    assert_eq!(card["command"], format!("connect {rule}"), "{card}");
    assert_eq!(
        card["buttons"],
        json!([
            "Approve",
            "Always this session",
            format!("Always for this workspace ({rule})"),
            "Deny"
        ]),
        "{card}"
    );
    assert!(
        strings(&card["reasons"])
            .iter()
            .any(|r| r.contains(&format!("add \"{rule}\" to [network] allow"))),
        "{card}"
    );
    assert!(
        s["decision"]
            .as_str()
            .unwrap()
            .starts_with("approved-always (by user"),
        "{s}"
    );

    // The command got through; the trace shows the connection it made.
    assert!(
        strings(&s["trace"]["output"])
            .iter()
            .any(|o| o.contains("hello")),
        "{s}"
    );
    let allowed = format!("network: {rule} allowed (person, rule {rule})");
    assert!(
        strings(&s["trace"]["notes"])
            .iter()
            .any(|n| n.starts_with(&allowed)),
        "no `{allowed}` line in the trace: {s}"
    );

    // The rule is in the user's file, under the workspace, the rest kept.
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with(config), "{text}");
    assert!(
        text.contains(&format!(
            "[network.workspace.\"{}\"]\nallow = [\"{rule}\"]",
            root.display()
        )),
        "{text}"
    );
    assert!(!ws.path().join("capstan.toml").exists());

    // The next run in the same server: no card, allowed by the rule.
    assert_eq!(s["again"]["cards"], json!(0), "asked again: {s}");
    let by_policy = format!("network: {rule} allowed (policy, rule {rule})");
    assert!(
        strings(&s["again"]["trace"]["notes"])
            .iter()
            .any(|n| n.starts_with(&by_policy)),
        "no `{by_policy}` line in the trace: {s}"
    );
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 2);

    for name in ["asked", "always", "again"] {
        let len = std::fs::metadata(shots.join(format!("webchat-network-{name}.png")))
            .unwrap_or_else(|_| panic!("no {name} screenshot"))
            .len();
        assert!(len > 1000, "{name} screenshot is {len} bytes");
    }
}
