//! The HTTP machinery shared by the providers: sending with retries and timeouts, and
//! turning a response body into the crate's [`StreamEvent`] stream.
//!
//! Each provider only supplies the request body and a [`Decoder`] for its wire format.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::error::{body_excerpt, secs};
use crate::sse::{SseEvent, SseParser};
use crate::{EventStream, ModelError, StreamEvent, Usage};
use capstan_protocol::tokens_for_chars as estimate_chars;

/// How failed attempts are retried.
///
/// Only [retryable](ModelError::is_retryable) errors are retried, and only while no
/// text has reached the caller (a retry after that would duplicate output).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (so `2` means at most 3 requests).
    pub max_retries: u32,
    /// Delay before the first retry; doubled for each further one, up to `max_delay`.
    /// The actual delay is drawn uniformly from `[d/2, d]` so that many clients failing
    /// together do not retry in lockstep.
    pub base_delay: Duration,
    /// Cap on the doubled delay (before jitter).
    pub max_delay: Duration,
    /// A `retry-after` header longer than this is not waited for: the error is returned
    /// at once (a caller should not hang for minutes inside one request).
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 2,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The jittered delay before retry number `retry` (1-based).
    pub fn backoff(&self, retry: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1u32 << retry.saturating_sub(1).min(16))
            .min(self.max_delay);
        let half = exp / 2;
        half + exp.saturating_sub(half).mul_f64(fastrand::f64())
    }
}

/// Timeouts and retries of one provider.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpOptions {
    /// Connect + send + wait for the response headers. Local servers loading a model can
    /// be slow here, so the default is generous.
    pub timeout: Duration,
    /// Longest silence allowed between two body chunks (and before the first one).
    /// Anthropic sends `ping` events; OpenAI-compatible servers send nothing while a
    /// model thinks, so keep this above the longest expected pause.
    pub idle_timeout: Duration,
    /// When and how often a failed request is sent again.
    pub retry: RetryPolicy,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(120),
            retry: RetryPolicy::default(),
        }
    }
}

/// What a provider is configured with. `Debug` never shows the key.
#[derive(Clone, Default)]
pub struct ProviderSettings {
    /// For OpenAI-compatible servers, the URL that `/chat/completions` is appended to
    /// (`https://api.openai.com/v1`, `http://127.0.0.1:11434/v1` for Ollama). For
    /// Anthropic, the URL that `/v1/messages` is appended to (`https://api.anthropic.com`).
    pub base_url: String,
    /// The key itself (sent as a bearer token or `x-api-key`); `None` or empty sends none.
    pub api_key: Option<String>,
    /// Name of the env var the key came from, used only in error messages.
    pub key_env: Option<String>,
    /// Extra request headers (e.g. `OpenAI-Organization`, OpenRouter's `HTTP-Referer`).
    pub extra_headers: Vec<(String, String)>,
    /// Timeouts and retries.
    pub http: HttpOptions,
    /// Used when a [`crate::ChatRequest`] has an empty `model`.
    pub default_model: Option<String>,
    /// What [`crate::ModelProvider::id`] returns; defaults to the provider kind.
    pub id: Option<String>,
}

impl std::fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderSettings")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("key_env", &self.key_env)
            .field(
                "extra_headers",
                &self
                    .extra_headers
                    .iter()
                    .map(|(k, _)| k)
                    .collect::<Vec<_>>(),
            )
            .field("http", &self.http)
            .field("default_model", &self.default_model)
            .field("id", &self.id)
            .finish()
    }
}

impl ProviderSettings {
    /// Settings for the server at `base_url`, with no key and default timeouts.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            ..Self::default()
        }
    }
    /// Sets [`ProviderSettings::api_key`].
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }
    /// Sets [`ProviderSettings::key_env`] (for error messages only; nothing is read).
    pub fn key_env(mut self, var: impl Into<String>) -> Self {
        self.key_env = Some(var.into());
        self
    }
    /// Adds one extra request header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.extra_headers.push((name.into(), value.into()));
        self
    }
    /// Sets [`ProviderSettings::http`].
    pub fn http(mut self, http: HttpOptions) -> Self {
        self.http = http;
        self
    }
    /// Sets [`ProviderSettings::default_model`].
    pub fn default_model(mut self, model: impl Into<String>) -> Self {
        self.default_model = Some(model.into());
        self
    }
    /// Sets [`ProviderSettings::id`].
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    pub(crate) fn trimmed_base_url(&self) -> Result<&str, ModelError> {
        let url = self.base_url.trim_end_matches('/');
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ModelError::Config(format!(
                "base_url {:?} must start with http:// or https://",
                self.base_url
            )));
        }
        Ok(url)
    }

    pub(crate) fn header_map(&self) -> Result<HeaderMap, ModelError> {
        let mut map = HeaderMap::new();
        for (name, value) in &self.extra_headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ModelError::Config(format!("invalid header name {name:?}")))?;
            let mut value = HeaderValue::from_str(value)
                .map_err(|_| ModelError::Config(format!("invalid value for header {name}")))?;
            // Extra headers may carry tokens: keep them out of debug output.
            value.set_sensitive(true);
            map.insert(name, value);
        }
        Ok(map)
    }
}

/// Everything needed to send one request, kept so it can be re-sent on retry.
pub(crate) struct Prepared {
    pub url: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Estimated input tokens, used if the server reports no usage.
    pub input_estimate: u64,
}

/// A client plus the policy that drives it; shared by every request of a provider.
pub(crate) struct Engine {
    client: reqwest::Client,
    pub opts: HttpOptions,
    pub provider: String,
    pub key_env: Option<String>,
}

impl Engine {
    pub fn new(settings: &ProviderSettings, provider: String) -> Result<Self, ModelError> {
        let base = settings.trimmed_base_url()?;
        let mut builder = reqwest::Client::builder()
            .connect_timeout(settings.http.timeout)
            .user_agent(concat!("capstan/", env!("CARGO_PKG_VERSION")));
        if is_loopback(base) {
            // A local model server must never be reached through a proxy from the env.
            builder = builder.no_proxy();
        }
        let client = builder.build().map_err(|e| {
            ModelError::Config(format!("cannot build the HTTP client: {}", chain(&e)))
        })?;
        Ok(Self {
            client,
            opts: settings.http.clone(),
            provider,
            key_env: settings.key_env.clone(),
        })
    }

    /// Send until a 2xx response arrives, retrying as the policy allows. `attempt`
    /// counts requests sent for this call (shared with mid-stream retries), and
    /// `delay` is waited first (cancellably).
    pub async fn open(
        &self,
        p: &Prepared,
        cancel: &CancellationToken,
        attempt: &mut u32,
        mut delay: Option<Duration>,
    ) -> Result<reqwest::Response, ModelError> {
        loop {
            if let Some(d) = delay.take() {
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Err(ModelError::Cancelled),
                    _ = tokio::time::sleep(d) => {}
                }
            }
            *attempt += 1;
            let (err, retry_after) = match self.try_once(p, cancel).await {
                Ok(resp) => return Ok(resp),
                Err(failure) => failure,
            };
            if !err.is_retryable() || *attempt > self.opts.retry.max_retries {
                return Err(err);
            }
            let wait = match retry_after {
                Some(ra) if ra > self.opts.retry.max_retry_after => {
                    warn!(provider = %self.provider, retry_after = %secs(ra), "not waiting for a long retry-after");
                    return Err(err);
                }
                Some(ra) => ra,
                None => self.opts.retry.backoff(*attempt),
            };
            warn!(provider = %self.provider, attempt = *attempt, wait = %secs(wait), error = %err, "model request failed; retrying");
            delay = Some(wait);
        }
    }

    async fn try_once(
        &self,
        p: &Prepared,
        cancel: &CancellationToken,
    ) -> Result<reqwest::Response, (ModelError, Option<Duration>)> {
        let send = self
            .client
            .post(&p.url)
            .headers(p.headers.clone())
            .body(p.body.clone())
            .send();
        let timeout = self.opts.timeout;
        // Dropping `send` (on cancel or timeout) closes the connection.
        let resp = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err((ModelError::Cancelled, None)),
            r = tokio::time::timeout(timeout, send) => match r {
                Err(_) => {
                    return Err((ModelError::Unavailable(format!(
                        "no response from {} within {} (raise timeout_ms if the model is slow to start)",
                        p.url, secs(timeout)
                    )), None));
                }
                Ok(Err(e)) => return Err((send_error(&p.url, &e), None)),
                Ok(Ok(resp)) => resp,
            },
        };
        let status = resp.status();
        if status.is_success() {
            debug!(provider = %self.provider, url = %p.url, %status, "model response started");
            return Ok(resp);
        }
        let retry_after = retry_after(resp.headers());
        let body = read_limited(resp, 64 * 1024, timeout, cancel).await;
        let body_excerpt = body_excerpt(&body);
        let err = match status.as_u16() {
            s @ (401 | 403) => ModelError::Auth {
                status: s,
                provider: self.provider.clone(),
                key_env: self.key_env.clone(),
                body_excerpt,
            },
            s => ModelError::Http {
                status: s,
                body_excerpt,
            },
        };
        Err((err, retry_after))
    }
}

/// Read at most `limit` bytes of an error body; whatever arrived is kept on failure.
async fn read_limited(
    mut resp: reqwest::Response,
    limit: usize,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Vec<u8> {
    let mut buf = Vec::new();
    let read = async {
        while buf.len() < limit {
            match resp.chunk().await {
                Ok(Some(c)) => buf.extend_from_slice(&c[..c.len().min(limit - buf.len())]),
                _ => break,
            }
        }
    };
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = tokio::time::timeout(timeout, read) => {}
    }
    buf
}

/// `retry-after` in seconds (`retry-after-ms` first, as some OpenAI-compatible gateways
/// send). HTTP-date values are ignored: the jittered backoff is used instead.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let get = |name: &str| headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok();
    if let Some(ms) = get("retry-after-ms").filter(|v| v.is_finite() && *v >= 0.0) {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    get(RETRY_AFTER.as_str())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(Duration::from_secs_f64)
}

fn send_error(url: &str, e: &reqwest::Error) -> ModelError {
    let detail = chain(e);
    if e.is_connect() {
        ModelError::Unavailable(format!(
            "cannot connect to {url}: {detail} (is the server running, and is base_url right?)"
        ))
    } else if e.is_timeout() {
        ModelError::Unavailable(format!("timed out talking to {url}: {detail}"))
    } else {
        ModelError::Unavailable(format!("request to {url} failed: {detail}"))
    }
}

/// An error and its sources on one line (reqwest's own Display omits the cause).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(cause) = src {
        let c = cause.to_string();
        if !s.contains(&c) {
            s.push_str(": ");
            s.push_str(&c);
        }
        src = cause.source();
    }
    s
}

pub(crate) fn is_loopback(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host_port = rest.split('/').next().unwrap_or("");
    let host = if let Some(stripped) = host_port.strip_prefix('[') {
        stripped.split(']').next().unwrap_or("")
    } else {
        host_port.rsplit_once(':').map_or(host_port, |(h, _)| h)
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// What a wire-format decoder extracts from the provider's events.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Piece {
    Delta(String),
    /// Token counts; `None` leaves the previous value. Later values replace earlier ones
    /// (both providers report cumulative counts).
    Usage {
        input: Option<u64>,
        output: Option<u64>,
    },
    Stop(String),
    /// The provider's end-of-stream marker (`[DONE]`, `message_stop`).
    End,
}

/// One provider's wire format.
pub(crate) trait Decoder: Default + Send + 'static {
    /// One SSE event of a streaming response.
    fn on_event(&mut self, ev: SseEvent, out: &mut Vec<Piece>) -> Result<(), ModelError>;
    /// A whole non-streaming JSON response, for servers that ignore `stream: true`.
    fn on_json_body(
        &mut self,
        body: serde_json::Value,
        out: &mut Vec<Piece>,
    ) -> Result<(), ModelError>;
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Sse,
    Json,
}

/// Largest non-streaming JSON body accepted.
const MAX_JSON_BODY: usize = 16 * 1024 * 1024;

/// Send `p` (with retries) and return the event stream once the response has started.
pub(crate) async fn start<D: Decoder>(
    engine: Arc<Engine>,
    p: Prepared,
    cancel: CancellationToken,
) -> Result<EventStream, ModelError> {
    let mut attempt = 0;
    let resp = engine.open(&p, &cancel, &mut attempt, None).await?;
    let mut driver = Driver::<D> {
        engine,
        prepared: p,
        cancel,
        attempt,
        body: None,
        mode: Mode::Sse,
        parser: SseParser::new(),
        decoder: D::default(),
        json_buf: Vec::new(),
        sse_events: Vec::new(),
        pieces: Vec::new(),
        queue: VecDeque::new(),
        pending_error: None,
        input_tokens: None,
        output_tokens: None,
        stop: None,
        output_chars: 0,
        streamed_text: false,
        finished: false,
    };
    driver.attach(resp)?;
    Ok(futures::stream::unfold(driver, |mut d| async move {
        let item = d.next().await?;
        Some((item, d))
    })
    .boxed())
}

/// The state machine behind one stream. Dropping it drops the response body, which
/// closes the connection: that is how a dropped stream stops the HTTP request.
struct Driver<D> {
    engine: Arc<Engine>,
    prepared: Prepared,
    cancel: CancellationToken,
    attempt: u32,
    body: Option<ByteStream>,
    mode: Mode,
    parser: SseParser,
    decoder: D,
    json_buf: Vec<u8>,
    sse_events: Vec<SseEvent>,
    pieces: Vec<Piece>,
    /// Events decoded but not yet handed out.
    queue: VecDeque<StreamEvent>,
    /// An error found after some queued events: handed out once the queue is empty.
    pending_error: Option<ModelError>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    stop: Option<String>,
    output_chars: usize,
    /// A `Delta` reached the caller: from here on, no retry.
    streamed_text: bool,
    finished: bool,
}

impl<D: Decoder> Driver<D> {
    fn attach(&mut self, resp: reqwest::Response) -> Result<(), ModelError> {
        let content_type = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        self.mode = if content_type.is_empty() || content_type.starts_with("text/event-stream") {
            Mode::Sse
        } else if content_type.starts_with("application/json") {
            Mode::Json
        } else {
            return Err(ModelError::Protocol(format!(
                "{} answered with content-type {content_type:?}, expected text/event-stream",
                self.prepared.url
            )));
        };
        self.body = Some(resp.bytes_stream().boxed());
        self.parser = SseParser::new();
        self.decoder = D::default();
        self.json_buf.clear();
        self.input_tokens = None;
        self.output_tokens = None;
        self.stop = None;
        self.output_chars = 0;
        Ok(())
    }

    async fn next(&mut self) -> Option<Result<StreamEvent, ModelError>> {
        loop {
            if self.finished && self.queue.is_empty() && self.pending_error.is_none() {
                return None;
            }
            if self.cancel.is_cancelled() {
                return Some(Err(self.fail(ModelError::Cancelled)));
            }
            if let Some(ev) = self.queue.pop_front() {
                if matches!(ev, StreamEvent::Delta(_)) {
                    self.streamed_text = true;
                }
                return Some(Ok(ev));
            }
            let err = match self.pending_error.take() {
                Some(e) => e,
                None => match self.pump().await {
                    Ok(()) => continue,
                    Err(e) => e,
                },
            };
            let err = self.enrich(err);
            let policy = &self.engine.opts.retry;
            if err.is_retryable() && !self.streamed_text && self.attempt <= policy.max_retries {
                let wait = policy.backoff(self.attempt);
                warn!(provider = %self.engine.provider, attempt = self.attempt, wait = %secs(wait), error = %err,
                    "model stream failed before any text; retrying");
                self.body = None;
                let engine = self.engine.clone();
                let opened = engine
                    .open(&self.prepared, &self.cancel, &mut self.attempt, Some(wait))
                    .await
                    .and_then(|resp| self.attach(resp));
                match opened {
                    Ok(()) => continue,
                    Err(e) => return Some(Err(self.fail(e))),
                }
            }
            return Some(Err(self.fail(err)));
        }
    }

    /// Auth errors decoded from the stream do not know the provider's key variable.
    fn enrich(&self, e: ModelError) -> ModelError {
        match e {
            ModelError::Auth {
                status,
                body_excerpt,
                ..
            } => ModelError::Auth {
                status,
                provider: self.engine.provider.clone(),
                key_env: self.engine.key_env.clone(),
                body_excerpt,
            },
            other => other,
        }
    }

    fn fail(&mut self, e: ModelError) -> ModelError {
        self.finished = true;
        self.body = None;
        self.queue.clear();
        self.pending_error = None;
        e
    }

    /// Read one body chunk and queue what it yields.
    async fn pump(&mut self) -> Result<(), ModelError> {
        let Some(body) = self.body.as_mut() else {
            return Err(ModelError::Protocol("stream read after it ended".into()));
        };
        let idle = self.engine.opts.idle_timeout;
        let chunk = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return Err(ModelError::Cancelled),
            r = tokio::time::timeout(idle, body.next()) => match r {
                Err(_) => return Err(ModelError::Unavailable(format!(
                    "{} sent nothing for {} (idle timeout)", self.prepared.url, secs(idle)
                ))),
                Ok(Some(Err(e))) => return Err(ModelError::Unavailable(format!(
                    "the connection to {} broke mid-stream: {}", self.prepared.url, chain(&e)
                ))),
                Ok(Some(Ok(c))) => Some(c),
                Ok(None) => None,
            },
        };
        let mut pieces = std::mem::take(&mut self.pieces);
        pieces.clear();
        let result = self.decode(chunk.as_deref(), &mut pieces);
        let mut ended = false;
        for piece in pieces.drain(..) {
            match piece {
                Piece::Delta(t) if t.is_empty() => {}
                Piece::Delta(t) => {
                    self.output_chars += t.chars().count();
                    self.queue.push_back(StreamEvent::Delta(t));
                }
                Piece::Usage { input, output } => {
                    self.input_tokens = input.or(self.input_tokens);
                    self.output_tokens = output.or(self.output_tokens);
                }
                Piece::Stop(s) => self.stop = Some(s),
                Piece::End => {
                    ended = true;
                    break;
                }
            }
        }
        self.pieces = pieces;
        if let Err(e) = result {
            self.pending_error = Some(e);
            return Ok(());
        }
        if !ended && chunk.is_none() {
            // The body ended without the end marker. A stop reason means the answer is
            // complete and only the marker is missing (some servers omit `[DONE]`);
            // otherwise the answer was cut off.
            if self.stop.is_some() {
                debug!(provider = %self.engine.provider, "stream ended without an end marker after a stop reason");
                ended = true;
            } else {
                self.pending_error = Some(ModelError::Unavailable(format!(
                    "{} closed the stream before the answer was complete",
                    self.prepared.url
                )));
                self.body = None;
                return Ok(());
            }
        }
        if ended {
            let usage = Usage {
                input_tokens: self.input_tokens.unwrap_or(self.prepared.input_estimate),
                output_tokens: self
                    .output_tokens
                    .unwrap_or_else(|| estimate_chars(self.output_chars)),
                estimated: self.input_tokens.is_none() || self.output_tokens.is_none(),
                cost_usd: None,
            };
            self.queue.push_back(StreamEvent::Usage(usage));
            self.queue.push_back(StreamEvent::Done {
                stop_reason: self.stop.take(),
            });
            self.finished = true;
            // Stop reading: anything after the end marker is irrelevant.
            self.body = None;
        }
        Ok(())
    }

    /// Decode one chunk (`None` = end of body) into pieces.
    fn decode(&mut self, chunk: Option<&[u8]>, pieces: &mut Vec<Piece>) -> Result<(), ModelError> {
        match self.mode {
            Mode::Sse => {
                let mut events = std::mem::take(&mut self.sse_events);
                events.clear();
                // Events parsed before a framing error are still decoded, in order.
                let framing = match chunk {
                    Some(c) => self.parser.feed(c, &mut events),
                    None => self.parser.finish(&mut events),
                };
                let mut result = Ok(());
                for ev in events.drain(..) {
                    result = self.decoder.on_event(ev, pieces);
                    if result.is_err() || pieces.last() == Some(&Piece::End) {
                        break;
                    }
                }
                events.clear();
                self.sse_events = events;
                if pieces.last() == Some(&Piece::End) {
                    return result;
                }
                result.and(framing)
            }
            Mode::Json => match chunk {
                Some(c) => {
                    if self.json_buf.len() + c.len() > MAX_JSON_BODY {
                        return Err(ModelError::Protocol(format!(
                            "the JSON response is larger than {MAX_JSON_BODY} bytes"
                        )));
                    }
                    self.json_buf.extend_from_slice(c);
                    Ok(())
                }
                None => {
                    let value: serde_json::Value =
                        serde_json::from_slice(&self.json_buf).map_err(|e| {
                            ModelError::Protocol(format!("the JSON response does not parse: {e}"))
                        })?;
                    self.decoder.on_json_body(value, pieces)?;
                    pieces.push(Piece::End);
                    Ok(())
                }
            },
        }
    }
}

/// Parse one JSON payload of a stream, with a Protocol error that shows the payload.
pub(crate) fn parse_json(data: &str) -> Result<serde_json::Value, ModelError> {
    serde_json::from_str(data).map_err(|e| {
        ModelError::Protocol(format!(
            "invalid JSON in a stream event ({e}): {}",
            crate::error::shorten(data, 200)
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped_and_jittered() {
        let p = RetryPolicy {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(350),
            ..RetryPolicy::default()
        };
        for _ in 0..100 {
            let d1 = p.backoff(1);
            assert!(
                d1 >= Duration::from_millis(50) && d1 <= Duration::from_millis(100),
                "{d1:?}"
            );
            let d2 = p.backoff(2);
            assert!(
                d2 >= Duration::from_millis(100) && d2 <= Duration::from_millis(200),
                "{d2:?}"
            );
            let d9 = p.backoff(40);
            assert!(
                d9 >= Duration::from_millis(175) && d9 <= Duration::from_millis(350),
                "{d9:?}"
            );
        }
    }

    #[test]
    fn retry_after_header_forms() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(150)));
        let mut h = HeaderMap::new();
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn loopback_detection() {
        assert!(is_loopback("http://127.0.0.1:11434/v1"));
        assert!(is_loopback("http://localhost:8080"));
        assert!(is_loopback("http://[::1]:8080/v1"));
        assert!(!is_loopback("https://api.openai.com/v1"));
        assert!(!is_loopback("http://10.0.0.5:8000"));
    }

    #[test]
    fn settings_debug_redacts_the_key() {
        let s = ProviderSettings::new("http://x").api_key("sk-secret");
        assert!(!format!("{s:?}").contains("sk-secret"));
    }
}
