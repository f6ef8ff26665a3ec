//! A scripted model server for tests (feature `scripted`).
//!
//! An axum server on `127.0.0.1:0` that speaks both wire formats exactly as the real
//! APIs do: OpenAI Chat Completions (`POST /v1/chat/completions` and
//! `POST /chat/completions`) and Anthropic Messages (`POST /v1/messages`, plus
//! `POST /v1/messages/count_tokens`). Streaming requests (`"stream": true`) get SSE;
//! others get the non-streaming JSON object.
//!
//! Anthropic replies can end in a `tool_use` block ([`Reply::tool_call`]), so an agent
//! such as Claude Code can be made to call a tool.
//!
//! Each request is answered by the next queued [`Reply`]; when the queue is empty, by the
//! responder closure ([`ScriptedServer::set_responder`]); with neither, by a 400 saying
//! the script ran out. Every request is recorded ([`ScriptedServer::requests`]).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use capstan_models::scripted::{Reply, ScriptedServer};
//! let server = ScriptedServer::start().await?;
//! server.push(Reply::text(["Hel", "lo"]).with_usage(12, 2));
//! // point an OpenAI-compatible client at server.openai_base_url(),
//! // an Anthropic client at server.base_url().
//! # Ok(()) }
//! ```
//!
//! The server stops when the [`ScriptedServer`] is dropped; streams that were hanging
//! end then.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, header};
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// One scripted answer.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    /// Text pieces, each sent as one delta event.
    pub chunks: Vec<String>,
    /// `(input_tokens, output_tokens)`. `None` sends no usage at all (not even the
    /// Anthropic `usage` objects, which makes that stream non-conforming on purpose:
    /// it exists to test usage estimation).
    pub usage: Option<(u64, u64)>,
    /// Slept before each text chunk.
    pub delay_per_chunk: Duration,
    /// A non-2xx status answers with the wire format's JSON error body instead of a
    /// stream (e.g. 500 to test retries, 401 for auth errors, 429 with `retry-after`).
    pub status: Option<u16>,
    /// Message of the error body when `status` is set.
    pub error_message: Option<String>,
    /// Stall (keep the connection open, send nothing) after this many text chunks,
    /// until the client goes away or the server stops.
    pub hang_after: Option<usize>,
    /// End the body cleanly after this many text chunks, without the end-of-stream
    /// events (a server dying mid-answer).
    pub truncate_after: Option<usize>,
    /// Defaults: `stop` (OpenAI), `end_turn` (Anthropic).
    pub stop_reason: Option<String>,
    /// Extra response headers (e.g. `retry-after`).
    pub headers: Vec<(String, String)>,
    /// Sent verbatim as a 200 body instead of the generated stream (malformed-stream
    /// tests), with `raw_content_type` (default `text/event-stream`).
    pub raw_body: Option<String>,
    /// Content type of `raw_body`; `None`: `text/event-stream`.
    pub raw_content_type: Option<String>,
    /// Anthropic only: after the text, a `tool_use` block calling this tool
    /// (`name`, JSON `input`), and `stop_reason: tool_use`. An agent (Claude Code)
    /// then runs the tool and sends its `tool_result` in the next request.
    pub tool_use: Option<(String, Value)>,
}

impl Reply {
    /// A successful answer streamed as these chunks.
    pub fn text<I, S>(chunks: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            chunks: chunks.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// An error answer with this HTTP status.
    pub fn status(code: u16) -> Self {
        Self {
            status: Some(code),
            ..Self::default()
        }
    }

    /// A 200 `text/event-stream` answer with exactly this body.
    pub fn raw_sse(body: impl Into<String>) -> Self {
        Self {
            raw_body: Some(body.into()),
            ..Self::default()
        }
    }

    /// A 200 answer with exactly this body and content type.
    pub fn raw(content_type: impl Into<String>, body: impl Into<String>) -> Self {
        Self {
            raw_body: Some(body.into()),
            raw_content_type: Some(content_type.into()),
            ..Self::default()
        }
    }

    /// Reports these input and output token counts (sets [`Reply::usage`]).
    pub fn with_usage(mut self, input_tokens: u64, output_tokens: u64) -> Self {
        self.usage = Some((input_tokens, output_tokens));
        self
    }
    /// Sleeps `delay` before each text chunk.
    pub fn delay_per_chunk(mut self, delay: Duration) -> Self {
        self.delay_per_chunk = delay;
        self
    }
    /// Stalls after `chunks` text chunks (sets [`Reply::hang_after`]).
    pub fn hang_after(mut self, chunks: usize) -> Self {
        self.hang_after = Some(chunks);
        self
    }
    /// Ends the body after `chunks` text chunks (sets [`Reply::truncate_after`]).
    pub fn truncate_after(mut self, chunks: usize) -> Self {
        self.truncate_after = Some(chunks);
        self
    }
    /// Reports this stop reason instead of the wire's default.
    pub fn stop_reason(mut self, reason: impl Into<String>) -> Self {
        self.stop_reason = Some(reason.into());
        self
    }
    /// Adds a response header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
    /// A reply that calls a tool (Anthropic wire only; see [`Reply::tool_use`]).
    pub fn tool_call(name: impl Into<String>, input: Value) -> Self {
        Self {
            tool_use: Some((name.into(), input)),
            ..Self::default()
        }
    }
    /// The message of the error body (with [`Reply::status`]).
    pub fn error_message(mut self, message: impl Into<String>) -> Self {
        self.error_message = Some(message.into());
        self
    }
}

/// Which wire format a request came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI Chat Completions (`/v1/chat/completions` or `/chat/completions`).
    OpenAi,
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
}

/// A request as the server received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// Which endpoint it came to.
    pub wire: Wire,
    /// Path and query, e.g. `/v1/messages?beta=true`.
    pub path: String,
    /// Header names lowercase, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The parsed JSON body (`Value::Null` if it did not parse).
    pub body: Value,
    /// The body as received (lossy UTF-8).
    pub raw_body: String,
}

impl RecordedRequest {
    /// The first header of this (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body's `model`; empty when absent.
    pub fn model(&self) -> &str {
        self.body.get("model").and_then(Value::as_str).unwrap_or("")
    }

    /// Whether the body asks for a stream (`"stream": true`).
    pub fn is_stream(&self) -> bool {
        self.body
            .get("stream")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// `(role, text)` of every message, system prompt first (Anthropic's top-level
    /// `system` appears as role `system`). Content-block arrays are flattened to their
    /// text blocks.
    pub fn messages(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Some(system) = self.body.get("system") {
            out.push(("system".to_string(), content_text(system)));
        }
        for m in self
            .body
            .get("messages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let role = m
                .get("role")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            out.push((role, m.get("content").map(content_text).unwrap_or_default()));
        }
        out
    }

    /// All message text joined with newlines (to assert a prompt contained something).
    pub fn prompt_text(&self) -> String {
        self.messages()
            .into_iter()
            .map(|(_, t)| t)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Names of the tools the request offers (Anthropic and OpenAI shapes).
    pub fn tool_names(&self) -> Vec<String> {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| {
                t.get("name")
                    .or_else(|| t.pointer("/function/name"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .collect()
    }

    /// Text of every Anthropic `tool_result` block in the request, in order.
    pub fn tool_results(&self) -> Vec<String> {
        let mut out = Vec::new();
        for m in self
            .body
            .get("messages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for b in m
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if b.get("type").and_then(Value::as_str) == Some("tool_result") {
                    out.push(b.get("content").map(content_text).unwrap_or_default());
                }
            }
        }
        out
    }

    /// The text of the last `user` message; `None` when there is none.
    pub fn last_user_text(&self) -> Option<String> {
        self.messages()
            .into_iter()
            .rev()
            .find(|(r, _)| r == "user")
            .map(|(_, t)| t)
    }
}

fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Answers requests when the queue is empty.
pub type Responder = dyn Fn(&RecordedRequest) -> Reply + Send + Sync;

struct Shared {
    queue: Mutex<VecDeque<Reply>>,
    responder: Mutex<Option<Arc<Responder>>>,
    requests: Mutex<Vec<RecordedRequest>>,
    completed: AtomicUsize,
    aborted: AtomicUsize,
    seq: AtomicUsize,
    shutdown: CancellationToken,
}

/// The running server. Dropping it stops it.
pub struct ScriptedServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl ScriptedServer {
    /// Bind `127.0.0.1:0` and serve in the background (needs a tokio runtime).
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::new()),
            responder: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            completed: AtomicUsize::new(0),
            aborted: AtomicUsize::new(0),
            seq: AtomicUsize::new(0),
            shutdown: CancellationToken::new(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(openai_handler))
            .route("/chat/completions", post(openai_handler))
            .route("/v1/messages", post(anthropic_handler))
            .route("/v1/messages/count_tokens", post(count_tokens_handler))
            .with_state(shared.clone());
        let shutdown = shared.shutdown.clone();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await;
        });
        Ok(Self { addr, shared, task })
    }

    /// Start with a responder already set.
    pub async fn with_responder(
        f: impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let s = Self::start().await?;
        s.set_responder(f);
        Ok(s)
    }

    /// Queue a reply (answered in FIFO order, before the responder is asked).
    pub fn push(&self, reply: Reply) -> &Self {
        self.shared.queue.lock().push_back(reply);
        self
    }

    /// Sets the closure that answers requests when no reply is queued.
    pub fn set_responder(&self, f: impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static) {
        *self.shared.responder.lock() = Some(Arc::new(f));
    }

    /// The address it listens on (127.0.0.1, an ephemeral port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`: the base URL for an Anthropic client.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT/v1`: the base URL for an OpenAI-compatible client.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().clone()
    }

    /// How many requests arrived so far.
    pub fn request_count(&self) -> usize {
        self.shared.requests.lock().len()
    }

    /// Replies still queued.
    pub fn pending_replies(&self) -> usize {
        self.shared.queue.lock().len()
    }

    /// Streamed bodies the server wrote to the end.
    pub fn completed_streams(&self) -> usize {
        self.shared.completed.load(Ordering::SeqCst)
    }

    /// Streamed bodies dropped before their end: the client disconnected (or the server
    /// stopped) mid-stream.
    pub fn aborted_streams(&self) -> usize {
        self.shared.aborted.load(Ordering::SeqCst)
    }

    /// Wait until at least `n` streams were aborted; `false` on timeout.
    pub async fn wait_for_aborted(&self, n: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.aborted_streams() < n {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
        self.task.abort();
    }
}

impl std::fmt::Debug for ScriptedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

async fn openai_handler(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let req = record(&s, Wire::OpenAi, &uri, &headers, &body);
    let reply = next_reply(&s, &req);
    respond(&s, &req, reply)
}

async fn anthropic_handler(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let req = record(&s, Wire::Anthropic, &uri, &headers, &body);
    let reply = next_reply(&s, &req);
    respond(&s, &req, reply)
}

/// Claude Code asks for token counts; answer with the usual chars/4 estimate.
async fn count_tokens_handler(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let req = record(&s, Wire::Anthropic, &uri, &headers, &body);
    let tokens = crate::estimate_tokens(&req.prompt_text());
    json_response(StatusCode::OK, &json!({"input_tokens": tokens}), &[])
}

fn record(s: &Shared, wire: Wire, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> RecordedRequest {
    let raw_body = String::from_utf8_lossy(body).into_owned();
    let req = RecordedRequest {
        wire,
        path: uri
            .path_and_query()
            .map_or_else(|| uri.path().to_string(), |p| p.to_string()),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: serde_json::from_str(&raw_body).unwrap_or(Value::Null),
        raw_body,
    };
    s.requests.lock().push(req.clone());
    req
}

fn next_reply(s: &Shared, req: &RecordedRequest) -> Reply {
    if let Some(r) = s.queue.lock().pop_front() {
        return r;
    }
    let responder = s.responder.lock().clone();
    match responder {
        Some(f) => f(req),
        None => Reply::status(400)
            .error_message("scripted server: no reply queued and no responder set"),
    }
}

fn respond(s: &Arc<Shared>, req: &RecordedRequest, reply: Reply) -> Response {
    let n = s.seq.fetch_add(1, Ordering::SeqCst) + 1;
    if let Some(code) = reply.status.filter(|c| !(200..300).contains(c)) {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let message = reply
            .error_message
            .clone()
            .unwrap_or_else(|| format!("scripted error {code}"));
        let body = match req.wire {
            Wire::OpenAi => {
                json!({"error": {"message": message, "type": openai_error_type(code), "param": null, "code": null}})
            }
            Wire::Anthropic => {
                json!({"type": "error", "error": {"type": anthropic_error_type(code), "message": message}})
            }
        };
        return json_response(status, &body, &reply.headers);
    }
    if let Some(raw) = reply.raw_body.clone() {
        let frames = VecDeque::from([Frame::Data(Duration::ZERO, Bytes::from(raw))]);
        let mut resp = sse_response(s, frames, &reply.headers);
        if let Some(ct) = reply
            .raw_content_type
            .as_deref()
            .and_then(|ct| HeaderValue::from_str(ct).ok())
        {
            resp.headers_mut().insert(header::CONTENT_TYPE, ct);
        }
        return resp;
    }
    let model = match req.model() {
        "" => "scripted".to_string(),
        m => m.to_string(),
    };
    match (req.wire, req.is_stream()) {
        (Wire::OpenAi, true) => {
            let include_usage = req
                .body
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            sse_response(
                s,
                openai_frames(&reply, &model, n, include_usage),
                &reply.headers,
            )
        }
        (Wire::Anthropic, true) => {
            sse_response(s, anthropic_frames(&reply, &model, n), &reply.headers)
        }
        (Wire::OpenAi, false) => json_response(
            StatusCode::OK,
            &openai_message(&reply, &model, n),
            &reply.headers,
        ),
        (Wire::Anthropic, false) => json_response(
            StatusCode::OK,
            &anthropic_message(&reply, &model, n),
            &reply.headers,
        ),
    }
}

fn openai_error_type(code: u16) -> &'static str {
    match code {
        401 | 403 => "invalid_request_error",
        429 => "rate_limit_exceeded",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    }
}

fn anthropic_error_type(code: u16) -> &'static str {
    match code {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

enum Frame {
    Data(Duration, Bytes),
    Hang,
}

/// Text chunks with the reply's hang/truncate cut applied: `(chunks to send, then hang?,
/// then the end events?)`.
fn cut(reply: &Reply) -> (&[String], bool, bool) {
    let n = reply.chunks.len();
    if let Some(h) = reply.hang_after.filter(|h| *h <= n)
        && reply.truncate_after.is_none_or(|t| h <= t)
    {
        return (&reply.chunks[..h], true, false);
    }
    if let Some(t) = reply.truncate_after.filter(|t| *t <= n) {
        return (&reply.chunks[..t], false, false);
    }
    (&reply.chunks, false, true)
}

fn openai_frames(reply: &Reply, model: &str, n: usize, include_usage: bool) -> VecDeque<Frame> {
    let id = format!("chatcmpl-scripted{n}");
    let created = unix_now();
    let chunk = |delta: Value, finish: Value| {
        let mut v = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_scripted",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if include_usage {
            // With include_usage, OpenAI sends `usage: null` on every chunk but the last.
            v["usage"] = Value::Null;
        }
        sse_data(None, &v)
    };
    let (chunks, hang, end) = cut(reply);
    let mut frames = VecDeque::new();
    frames.push_back(Frame::Data(
        Duration::ZERO,
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
    ));
    for text in chunks {
        frames.push_back(Frame::Data(
            reply.delay_per_chunk,
            chunk(json!({"content": text}), Value::Null),
        ));
    }
    if hang {
        frames.push_back(Frame::Hang);
    }
    if !end {
        return frames;
    }
    let stop = reply.stop_reason.as_deref().unwrap_or("stop");
    frames.push_back(Frame::Data(Duration::ZERO, chunk(json!({}), json!(stop))));
    if let (true, Some((input, output))) = (include_usage, reply.usage) {
        let usage = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_scripted",
            "choices": [],
            "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output},
        });
        frames.push_back(Frame::Data(Duration::ZERO, sse_data(None, &usage)));
    }
    frames.push_back(Frame::Data(
        Duration::ZERO,
        Bytes::from_static(b"data: [DONE]\n\n"),
    ));
    frames
}

fn anthropic_frames(reply: &Reply, model: &str, n: usize) -> VecDeque<Frame> {
    let mut message = json!({
        "id": format!("msg_scripted{n:020}"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": null,
        "stop_sequence": null,
    });
    if let Some((input, output)) = reply.usage {
        message["usage"] = json!({
            "input_tokens": input,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": output.min(1),
        });
    }
    let (chunks, hang, end) = cut(reply);
    let ev = |name: &str, v: Value| Frame::Data(Duration::ZERO, sse_data(Some(name), &v));
    let mut frames = VecDeque::new();
    frames.push_back(ev(
        "message_start",
        json!({"type": "message_start", "message": message}),
    ));
    frames.push_back(ev(
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ));
    frames.push_back(ev("ping", json!({"type": "ping"})));
    for text in chunks {
        let data = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}});
        frames.push_back(Frame::Data(
            reply.delay_per_chunk,
            sse_data(Some("content_block_delta"), &data),
        ));
    }
    if hang {
        frames.push_back(Frame::Hang);
    }
    if !end {
        return frames;
    }
    frames.push_back(ev(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    if let Some((name, input)) = &reply.tool_use {
        // As the API streams it: the block with an empty input, then the input JSON in
        // pieces (`input_json_delta`), then the stop.
        frames.push_back(ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {
                "type": "tool_use", "id": format!("toolu_scripted{n:020}"), "name": name, "input": {},
            }}),
        ));
        let text = input.to_string();
        let mid = text
            .char_indices()
            .nth(text.chars().count() / 2)
            .map_or(0, |(i, _)| i);
        for part in [&text[..mid], &text[mid..]] {
            frames.push_back(ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": part}}),
            ));
        }
        frames.push_back(ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ));
    }
    let default_stop = if reply.tool_use.is_some() {
        "tool_use"
    } else {
        "end_turn"
    };
    let stop = reply.stop_reason.as_deref().unwrap_or(default_stop);
    let mut delta =
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}});
    if let Some((_, output)) = reply.usage {
        delta["usage"] = json!({"output_tokens": output});
    }
    frames.push_back(ev("message_delta", delta));
    frames.push_back(ev("message_stop", json!({"type": "message_stop"})));
    frames
}

fn openai_message(reply: &Reply, model: &str, n: usize) -> Value {
    let mut v = json!({
        "id": format!("chatcmpl-scripted{n}"),
        "object": "chat.completion",
        "created": unix_now(),
        "model": model,
        "system_fingerprint": "fp_scripted",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": reply.chunks.concat(), "refusal": null},
            "logprobs": null,
            "finish_reason": reply.stop_reason.as_deref().unwrap_or("stop"),
        }],
    });
    if let Some((input, output)) = reply.usage {
        v["usage"] = json!({"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output});
    }
    v
}

fn anthropic_message(reply: &Reply, model: &str, n: usize) -> Value {
    let mut v = json!({
        "id": format!("msg_scripted{n:020}"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": reply.chunks.concat()}],
        "stop_reason": reply.stop_reason.as_deref().unwrap_or(if reply.tool_use.is_some() { "tool_use" } else { "end_turn" }),
        "stop_sequence": null,
    });
    if let Some((name, input)) = &reply.tool_use
        && let Some(content) = v["content"].as_array_mut()
    {
        content.push(json!({"type": "tool_use", "id": format!("toolu_scripted{n:020}"), "name": name, "input": input}));
    }
    if let Some((input, output)) = reply.usage {
        v["usage"] = json!({
            "input_tokens": input,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": output,
        });
    }
    v
}

fn sse_data(event: Option<&str>, v: &Value) -> Bytes {
    let mut s = String::new();
    if let Some(e) = event {
        s.push_str("event: ");
        s.push_str(e);
        s.push('\n');
    }
    s.push_str("data: ");
    s.push_str(&v.to_string());
    s.push_str("\n\n");
    Bytes::from(s)
}

fn with_headers(mut resp: Response, extra: &[(String, String)]) -> Response {
    for (k, v) in extra {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            resp.headers_mut().insert(k, v);
        }
    }
    resp
}

fn json_response(status: StatusCode, v: &Value, extra: &[(String, String)]) -> Response {
    let mut resp = Response::new(Body::from(v.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    with_headers(resp, extra)
}

/// Counts how a streamed body ended, for [`ScriptedServer::aborted_streams`].
struct StreamGuard {
    shared: Arc<Shared>,
    finished: bool,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let counter = if self.finished {
            &self.shared.completed
        } else {
            &self.shared.aborted
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

fn sse_response(s: &Arc<Shared>, frames: VecDeque<Frame>, extra: &[(String, String)]) -> Response {
    struct St {
        frames: VecDeque<Frame>,
        shutdown: CancellationToken,
        guard: StreamGuard,
    }
    let st = St {
        frames,
        shutdown: s.shutdown.clone(),
        guard: StreamGuard {
            shared: s.clone(),
            finished: false,
        },
    };
    // hyper drops this stream when the client disconnects, which the guard records.
    let body = futures::stream::unfold(st, |mut st| async move {
        match st.frames.pop_front() {
            Some(Frame::Data(delay, bytes)) => {
                if !delay.is_zero() {
                    tokio::select! {
                        _ = st.shutdown.cancelled() => return None,
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
                Some((Ok::<_, Infallible>(bytes), st))
            }
            Some(Frame::Hang) => {
                st.shutdown.cancelled().await;
                None
            }
            None => {
                st.guard.finished = true;
                drop(st); // the guard records a completed stream
                None
            }
        }
    });
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    with_headers(resp, extra)
}
