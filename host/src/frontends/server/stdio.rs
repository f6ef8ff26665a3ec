//! `capstan serve --stdio`: JSON-RPC 2.0 over stdin and stdout, one message a
//! line, for a frontend that spawns the binary. Requests are answered in
//! order of completion; a run's events arrive as `run.event` notifications
//! (params = the envelope), after the `run.start` response. Logs go to stderr,
//! so stdout carries protocol only. At end of input, runs in flight are
//! cancelled and recorded before the process exits.
//!
//! Written on serde_json rather than a JSON-RPC crate: the server side of
//! JSON-RPC over lines is one dispatch function, and the crates (jsonrpsee)
//! bring a transport stack this does not need.

use std::sync::Arc;

use anyhow::Result;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::error::{ApiError, ErrorKind};
use super::runs::{RunManager, StartRun};
use crate::plugins::services::approval::Via;
use capstan_protocol::PROTOCOL_VERSION;

/// The longest request line accepted.
const MAX_LINE_BYTES: usize = 1024 * 1024;

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;

const METHODS: &[&str] = &[
    "server.info",
    "run.start",
    "run.cancel",
    "run.get",
    "run.events",
    "approval.decide",
    "sessions.list",
    "session.turns",
    "runs.list",
    "workspaces.list",
    "workspace.add",
];

pub async fn serve_stdio(runs: Arc<RunManager>) -> Result<()> {
    let (out, mut out_rx) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(msg) = out_rx.recv().await {
            let mut line = msg.to_string();
            line.push('\n');
            if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        if line.len() > MAX_LINE_BYTES {
            let _ = out.send(error(
                Value::Null,
                INVALID_REQUEST,
                &format!("request is larger than {MAX_LINE_BYTES} bytes; send a shorter message"),
            ));
            continue;
        }
        let runs = runs.clone();
        let out = out.clone();
        // Each request on its own task: a slow one (run.start loads plugins)
        // does not hold up a cancel or an approval behind it.
        tokio::spawn(async move {
            if let Some(reply) = handle_line(&runs, &line, &out).await {
                let _ = out.send(reply);
            }
        });
    }
    runs.cancel_all();
    runs.wait_idle().await;
    drop(out);
    let _ = writer.await;
    Ok(())
}

async fn handle_line(runs: &Arc<RunManager>, line: &str, out: &Out) -> Option<Value> {
    let msg: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => {
            return Some(error(
                Value::Null,
                PARSE_ERROR,
                &format!("not JSON ({e}); send one JSON-RPC 2.0 object per line"),
            ));
        }
    };
    match msg {
        Value::Array(batch) if !batch.is_empty() => {
            let mut replies = Vec::new();
            for m in batch {
                if let Some(r) = handle(runs, m, out).await {
                    replies.push(r);
                }
            }
            (!replies.is_empty()).then_some(Value::Array(replies))
        }
        Value::Array(_) => Some(error(Value::Null, INVALID_REQUEST, "empty batch")),
        m => handle(runs, m, out).await,
    }
}

type Out = mpsc::UnboundedSender<Value>;

async fn handle(runs: &Arc<RunManager>, msg: Value, out: &Out) -> Option<Value> {
    let id = msg.get("id").cloned();
    let reply_id = id.clone().unwrap_or(Value::Null);
    if msg.get("jsonrpc") != Some(&json!("2.0")) {
        return Some(error(
            reply_id,
            INVALID_REQUEST,
            "not a JSON-RPC 2.0 request: add \"jsonrpc\": \"2.0\"",
        ));
    }
    let Some(method) = msg.get("method").and_then(Value::as_str) else {
        return Some(error(
            reply_id,
            INVALID_REQUEST,
            "the request has no \"method\" string",
        ));
    };
    let params = msg.get("params").cloned().unwrap_or(json!({}));
    let result = call(runs, method, params, out, id.as_ref()).await;
    // A notification (no id) gets no reply, not even an error.
    id.as_ref()?;
    Some(match result {
        Ok(None) => return None,
        Ok(Some(value)) => ok(reply_id, value),
        Err(Failure::Method) => error(
            reply_id,
            METHOD_NOT_FOUND,
            &format!("no method `{method}`; methods: {}", METHODS.join(", ")),
        ),
        Err(Failure::Api(e)) => {
            let mut reply = error(reply_id, e.rpc_code(), &e.message);
            reply["error"]["data"] = json!({"kind": e.code()});
            reply
        }
    })
}

enum Failure {
    Method,
    Api(ApiError),
}

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Self {
        Failure::Api(e)
    }
}

fn params<T: DeserializeOwned>(method: &str, value: Value) -> Result<T, ApiError> {
    serde_json::from_value(value).map_err(|e| {
        ApiError::new(
            ErrorKind::BadRequest,
            format!("bad params for `{method}`: {e}"),
        )
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunId {
    run_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionId {
    session_id: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ListParams {
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Decide {
    approval_id: String,
    decision: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkspacePath {
    path: String,
}

async fn call(
    runs: &Arc<RunManager>,
    method: &str,
    p: Value,
    out: &Out,
    id: Option<&Value>,
) -> Result<Option<Value>, Failure> {
    let limit = |l: Option<usize>| l.unwrap_or(50);
    Ok(Some(match method {
        "server.info" => json!({
            "name": "capstan",
            "version": env!("CARGO_PKG_VERSION"),
            "protocol": PROTOCOL_VERSION,
            "methods": METHODS,
            "approve": runs.app().broker.mode(),
        }),
        "run.start" => {
            let req: StartRun = params(method, p)?;
            let started = runs.start(req, None).await?;
            let result =
                json!({"run_id": started.run.run_id, "session_id": started.run.session_id});
            // The response goes out before the first `run.event`, so a client
            // knows the run id of every notification it reads.
            if let Some(id) = id {
                let _ = out.send(ok(id.clone(), result));
            }
            forward_events(started.events, out.clone());
            return Ok(None);
        }
        "run.cancel" => {
            let RunId { run_id } = params(method, p)?;
            runs.cancel(&run_id)?;
            json!({"run_id": run_id, "status": "cancelling"})
        }
        "run.get" => {
            let RunId { run_id } = params(method, p)?;
            json!(runs.run(&run_id)?)
        }
        "run.events" => {
            let RunId { run_id } = params(method, p)?;
            let sub = runs.subscribe(&run_id)?;
            json!({"events": sub.backlog.iter().map(|e| json!(e.as_ref())).collect::<Vec<_>>()})
        }
        "approval.decide" => {
            let d: Decide = params(method, p)?;
            runs.decide(
                &d.approval_id,
                RunManager::parse_decision(&d.decision)?,
                Via::Stdio,
            )?;
            json!({"approval_id": d.approval_id, "decision": d.decision})
        }
        "sessions.list" => {
            let l: ListParams = params(method, p)?;
            json!({"sessions": runs.sessions(limit(l.limit))?})
        }
        "session.turns" => {
            let SessionId { session_id } = params(method, p)?;
            json!({"turns": runs.turns(&session_id)?})
        }
        "runs.list" => {
            let l: ListParams = params(method, p)?;
            json!({"runs": runs.runs(l.session_id.as_deref(), limit(l.limit))?})
        }
        "workspaces.list" => json!({"workspaces": runs.workspaces()?}),
        "workspace.add" => {
            let WorkspacePath { path } = params(method, p)?;
            json!(runs.add_workspace(&path)?)
        }
        _ => return Err(Failure::Method),
    }))
}

fn forward_events(sub: super::runs::Subscription, out: Out) {
    use futures::StreamExt;
    tokio::spawn(async move {
        let mut events = std::pin::pin!(sub.into_stream());
        while let Some(env) = events.next().await {
            let note = json!({"jsonrpc": "2.0", "method": "run.event", "params": env.as_ref()});
            if out.send(note).is_err() {
                break;
            }
        }
    });
}

fn ok(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}
