//! `capstan serve` as a child process on 127.0.0.1, for the HTTP, AG-UI and
//! web chat tests; and a workspace copied from examples/handbook.

// Test harness output: the children's stderr passed through for debugging.
#![allow(clippy::disallowed_macros)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use super::Home;

pub struct Server {
    pub child: Child,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// The token every API request needs (`None` with `--no-token`): the
    /// one passed with `--token`, else the one the server made and printed.
    pub token: Option<String>,
    /// The web chat URL printed at start-up (`http://.../?token=...`).
    pub chat_url: String,
}

impl Server {
    /// Start `capstan serve --port 0` with extra arguments; waits for the
    /// address line on stdout and the web chat URL (with its token) on stderr.
    /// Its stderr is passed through to the test's.
    pub fn start(home: &Home, args: &[&str]) -> Server {
        let mut child = home
            .capstan()
            .args(["serve", "--port", "0"])
            .args(args)
            .env_remove("CAPSTAN_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("capstan serve printed {line:?}"))
            .to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                eprintln!("{line}");
                if let Some(url) = line.strip_prefix("capstan serve: web chat at ") {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let chat_url = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("capstan serve printed no web chat URL on stderr");
        let given = args
            .iter()
            .position(|a| *a == "--token")
            .map(|i| args[i + 1].to_string());
        let token = if args.contains(&"--no-token") {
            None
        } else {
            Some(given.unwrap_or_else(|| {
                chat_url
                    .split_once("?token=")
                    .map(|(_, t)| t.to_string())
                    .unwrap_or_else(|| panic!("no token in the start-up URL {chat_url}"))
            }))
        };
        Server {
            child,
            base,
            token,
            chat_url,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `POST /agui` with `body` (a `RunAgentInput`): the AG-UI events it
    /// streams, to the end.
    pub async fn agui(&self, body: serde_json::Value) -> Vec<serde_json::Value> {
        let resp = self
            .client()
            .post(self.url("/agui"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
        let mut events = Vec::new();
        super::sse::SseReader::new(resp).rest(&mut events).await;
        events
    }

    /// An HTTP client that sends the server's token on every request.
    /// `GET path` with the token: the JSON body (panics on a non-JSON answer).
    pub async fn get_json(&self, path: &str) -> serde_json::Value {
        self.client()
            .get(self.url(path))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub fn client(&self) -> reqwest::Client {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(t) = &self.token {
            headers.insert(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {t}").parse().unwrap(),
            );
        }
        reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A private copy of examples/handbook (commands may write into it).
pub fn handbook() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/handbook"),
        dir.path(),
    );
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target: PathBuf = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Where tests put screenshots and logs (gitignored).
pub fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}
