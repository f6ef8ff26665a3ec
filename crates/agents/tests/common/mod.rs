//! Helpers shared by this crate's tests: event capture, runner dependencies, the
//! pinned npm peer programs and isolated homes for them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use capstan_agents::event::EventKind;
use capstan_agents::runner::{Mode, RunnerDeps};
use capstan_agents::{AgentEvent, AgentsConfig, EventSink, ExecuteOptions, FixedGate};
use capstan_models::{ProviderConfig, ProviderKind};
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;

/// Every event of an execution, in emission order.
#[derive(Clone, Default)]
pub struct Events(pub Arc<Mutex<Vec<AgentEvent>>>);

impl Events {
    pub fn sink(&self) -> EventSink {
        let inner = self.0.clone();
        Arc::new(move |e| inner.lock().unwrap().push(e))
    }
    pub fn all(&self) -> Vec<AgentEvent> {
        self.0.lock().unwrap().clone()
    }
    pub fn types(&self) -> Vec<String> {
        self.all()
            .iter()
            .map(|e| {
                serde_json::to_value(e).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    }
    /// `elapsed_ms` of the first event matching `f`.
    pub fn at(&self, f: impl Fn(&EventKind) -> bool) -> u64 {
        self.all()
            .iter()
            .find(|e| f(&e.kind))
            .map(|e| e.elapsed_ms)
            .expect("event not found")
    }
    /// Index (emission order) of the first event matching `f`.
    pub fn index(&self, f: impl Fn(&EventKind) -> bool) -> usize {
        self.all()
            .iter()
            .position(|e| f(&e.kind))
            .expect("event not found")
    }
}

/// An OpenAI-compatible provider for the `cli` runtime, pointed at a scripted server.
pub fn cli_model(base_url: &str, model: &str) -> (Arc<dyn capstan_models::ModelProvider>, String) {
    let mut c = ProviderConfig::new(ProviderKind::OpenAi, model);
    c.base_url = Some(base_url.to_string());
    c.max_retries = 0;
    (capstan_models::build(&c).unwrap(), model.to_string())
}

pub fn deps(
    workspace: &Path,
    config: AgentsConfig,
    cli: Option<(Arc<dyn capstan_models::ModelProvider>, String)>,
) -> RunnerDeps {
    RunnerDeps {
        config,
        cli_model: cli,
        capstan_exe: None,
        workspace: workspace.to_path_buf(),
        mode: Mode::Cli,
        config_file: None,
    }
}

pub fn options(deps: RunnerDeps, events: &Events) -> ExecuteOptions {
    ExecuteOptions {
        strategy: None,
        runtime: None,
        budget_usd: None,
        timeout: None,
        max_parallel: None,
        retry_runtime: None,
        prices: capstan_models::PriceTable::defaults(),
        gate: Arc::new(FixedGate(false)),
        events: events.sink(),
        cancel: CancellationToken::new(),
        deps,
    }
}

/// Options for the `cli` runtime on a scripted OpenAI-compatible server (model
/// `gpt-4o`, so the price table applies), default agents config.
pub fn cli_options(workspace: &Path, base_url: &str, events: &Events) -> ExecuteOptions {
    options(
        deps(
            workspace,
            AgentsConfig::default(),
            Some(cli_model(base_url, "gpt-4o")),
        ),
        events,
    )
}

/// An executable from a pinned npm group under tests/npm (installed by `bash tests/run`).
pub fn npm_bin(group: &str, bin: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/npm")
        .join(group);
    let path = dir.join("node_modules/.bin").join(bin);
    assert!(
        path.exists(),
        "{} is not installed: run `bash tests/run` or `npm ci --prefix {}`",
        path.display(),
        dir.display()
    );
    path
}

/// HOME and XDG dirs inside a temp dir, so nothing of this machine's user config
/// reaches the peer program and nothing it writes leaks out.
pub struct IsolatedHome {
    pub dir: tempfile::TempDir,
}

impl IsolatedHome {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        for d in ["config", "data", "cache", "state"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        Self { dir }
    }
    pub fn env(&self) -> Vec<(String, String)> {
        let p = |s: &str| self.dir.path().join(s).display().to_string();
        vec![
            ("HOME".into(), self.dir.path().display().to_string()),
            ("XDG_CONFIG_HOME".into(), p("config")),
            ("XDG_DATA_HOME".into(), p("data")),
            ("XDG_CACHE_HOME".into(), p("cache")),
            ("XDG_STATE_HOME".into(), p("state")),
        ]
    }
}

/// Claude Code's config: the real CLI, offline, talking to `anthropic_base_url`.
pub fn claude_config(
    home: &IsolatedHome,
    anthropic_base_url: &str,
) -> capstan_agents::config::ClaudeConfig {
    let mut c = capstan_agents::config::ClaudeConfig {
        command: npm_bin("claude", "claude").display().to_string(),
        idle_timeout_secs: 60,
        ..Default::default()
    };
    c.env.extend(home.env());
    c.env
        .insert("ANTHROPIC_BASE_URL".into(), anthropic_base_url.into());
    c.env.insert(
        "ANTHROPIC_API_KEY".into(),
        "sk-ant-test-not-a-real-key".into(),
    );
    c.env.insert(
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
        "1".into(),
    );
    c
}

/// A real `opencode serve` on 127.0.0.1 with one provider, `scripted`, pointed at an
/// OpenAI-compatible server. Killed on drop.
pub struct OpenCodeServer {
    pub url: String,
    child: tokio::process::Child,
    _home: IsolatedHome,
}

impl OpenCodeServer {
    pub async fn start(openai_base_url: &str, models: &[&str], password: Option<&str>) -> Self {
        let home = IsolatedHome::new();
        let cfg_dir = home.dir.path().join("config/opencode");
        std::fs::create_dir_all(&cfg_dir).unwrap();
        let models: serde_json::Map<String, serde_json::Value> = models
            .iter()
            .map(|m| (m.to_string(), serde_json::json!({"name": m})))
            .collect();
        let config = serde_json::json!({
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": false,
            "share": "disabled",
            "provider": {"scripted": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Scripted",
                "options": {"baseURL": openai_base_url, "apiKey": "scripted-key"},
                "models": models,
            }},
        });
        std::fs::write(cfg_dir.join("opencode.json"), config.to_string()).unwrap();
        let mut cmd = tokio::process::Command::new(npm_bin("opencode", "opencode"));
        cmd.args(["serve", "--hostname", "127.0.0.1", "--port", "0"])
            .envs(home.env())
            .current_dir(home.dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        if let Some(p) = password {
            cmd.env("OPENCODE_SERVER_PASSWORD", p);
        }
        let mut child = cmd.spawn().unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let url = tokio::time::timeout(std::time::Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(i) = line.find("http://") {
                    return line[i..].trim().to_string();
                }
            }
            panic!("opencode serve exited without printing its address");
        })
        .await
        .expect("opencode serve did not start within 60 s");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self {
            url,
            child,
            _home: home,
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

/// Process ids whose working directory is `dir`: the peer program a runner started in
/// a test's own temporary workspace, and anything it spawned there. Zombies (already
/// dead, not yet reaped) have no working directory and are not counted.
pub fn processes_in(dir: &Path) -> Vec<u32> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            (std::fs::read_link(e.path().join("cwd")).ok()? == dir).then_some(pid)
        })
        .collect()
}
