//! The REST + SSE API (`/v1/...`). Runs stream as Server-Sent Events: one SSE
//! event per envelope, `id` = seq (so `Last-Event-ID` resumes), `event` = the
//! envelope's `type`, `data` = the envelope as JSON (docs/EVENTS.md).

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::AppState;
use super::error::{ApiError, ErrorKind};
use super::guard::RunUser;
use super::runs::{RunManager, StartRun, Subscription};
use crate::plugins::services::approval::Via;
use capstan_protocol::{Envelope, PROTOCOL_VERSION};

/// A JSON body whose rejections are [`ApiError`]s naming the problem.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(json_rejection(rejection, state.max_body_bytes)),
        }
    }
}

fn json_rejection(rejection: JsonRejection, limit: usize) -> ApiError {
    let detail = rejection.body_text();
    match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            ErrorKind::TooLarge,
            format!(
                "the request body is larger than this server accepts ({limit} bytes); send a shorter message"
            ),
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
            ErrorKind::UnsupportedMediaType,
            "send the body as JSON with `Content-Type: application/json`",
        ),
        StatusCode::UNPROCESSABLE_ENTITY => ApiError::unprocessable(format!(
            "the JSON does not have the expected shape: {detail}; see GET /openapi.json"
        )),
        _ => ApiError::bad_request(format!("the body is not valid JSON: {detail}")),
    }
}

/// A query string whose rejections are [`ApiError`]s.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| ApiQuery(q.0))
            .map_err(|e: QueryRejection| {
                ApiError::bad_request(format!("bad query string: {}", e.body_text()))
            })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    session_id: Option<String>,
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Only events with a greater seq (as `Last-Event-ID`).
    after: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideBody {
    decision: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceBody {
    path: String,
}

const DEFAULT_LIMIT: usize = 50;

pub async fn health(State(state): State<AppState>) -> Json<Value> {
    Json(json!({
        "ok": true,
        "version": env!("CARGO_PKG_VERSION"),
        "protocol": PROTOCOL_VERSION,
        "approve": state.runs.app().broker.mode(),
        "model": state.runs.app().model.id(),
    }))
}

pub async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        super::openapi::text(),
    )
        .into_response()
}

/// `POST /v1/runs`: start a run; the response is its event stream.
pub async fn create_run(
    State(state): State<AppState>,
    user: Option<Extension<RunUser>>,
    ApiJson(body): ApiJson<StartRun>,
) -> Result<Response, ApiError> {
    let started = state
        .runs
        .start(body, user.map(|Extension(u)| u.quota))
        .await?;
    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("x-capstan-run-id", &started.run.run_id),
        ("x-capstan-session-id", &started.run.session_id),
    ] {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(name, v);
        }
    }
    Ok((headers, sse(started.events, None)).into_response())
}

/// `GET /v1/runs/{id}/events`: replay a run's events, then follow it live if
/// it is still running. Resumes after `Last-Event-ID` or `?after=`.
pub async fn run_events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> Result<Response, ApiError> {
    let last_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.trim().parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "Last-Event-ID {v:?} is not a sequence number; send the `id` of the last event you received"
                ))
            })
        })
        .transpose()?;
    let sub = state.runs.subscribe(&id)?;
    Ok(sse(sub, q.after.or(last_id)).into_response())
}

fn sse(
    sub: Subscription,
    after: Option<u64>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static> {
    let stream = sub
        .into_stream()
        .filter(move |env| std::future::ready(after.is_none_or(|a| env.seq > a)))
        .map(|env| Ok(sse_event(&env)));
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// The envelope as it is stored (same bytes as a replay from the store),
/// serialized once, straight to text.
fn sse_event(env: &Arc<Envelope>) -> SseEvent {
    let data = serde_json::to_string(env.as_ref()).unwrap_or_else(|_| "null".to_owned());
    SseEvent::default()
        .id(env.seq.to_string())
        .event(env.event.name())
        .data(data)
}

pub async fn get_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!(state.runs.run(&id)?)))
}

pub async fn list_runs(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<RunsQuery>,
) -> Result<Json<Value>, ApiError> {
    let runs = state
        .runs
        .runs(q.session_id.as_deref(), q.limit.unwrap_or(DEFAULT_LIMIT))?;
    Ok(Json(json!({ "runs": runs })))
}

pub async fn cancel_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    state.runs.cancel(&id)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"run_id": id, "status": "cancelling"})),
    ))
}

/// `POST /v1/approvals/{id}`: only a request that passed the doors (Host,
/// Origin, token) gets here; the credential it showed is recorded as `via`.
pub async fn decide_approval(
    State(state): State<AppState>,
    Extension(via): Extension<Via>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<DecideBody>,
) -> Result<Json<Value>, ApiError> {
    state
        .runs
        .decide(&id, RunManager::parse_decision(&body.decision)?, via)?;
    Ok(Json(
        json!({"approval_id": id, "decision": body.decision, "via": via.as_str()}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsQuery {
    limit: Option<usize>,
    /// Only sessions whose title or turns contain this text.
    q: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenameBody {
    title: String,
}

pub async fn list_sessions(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<SessionsQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    let sessions = match q.q.as_deref().map(str::trim) {
        Some(text) if !text.is_empty() => state.runs.search_sessions(text, limit)?,
        _ => state.runs.sessions(limit)?,
    };
    Ok(Json(json!({ "sessions": sessions })))
}

/// `PATCH /v1/sessions/{id}`: rename.
pub async fn rename_session(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<RenameBody>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!(state.runs.rename_session(&id, &body.title)?)))
}

/// `DELETE /v1/sessions/{id}`: the conversation goes; approvals stay for the audit.
pub async fn delete_session(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let removed = state.runs.delete_session(&id)?;
    Ok(Json(
        json!({"session_id": id, "deleted": true, "removed": removed}),
    ))
}

pub async fn get_session(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!(state.runs.session(&id)?)))
}

pub async fn session_turns(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({ "turns": state.runs.turns(&id)? })))
}

pub async fn session_runs(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<Limit>,
) -> Result<Json<Value>, ApiError> {
    let runs = state
        .runs
        .runs(Some(&id), q.limit.unwrap_or(DEFAULT_LIMIT))?;
    Ok(Json(json!({ "runs": runs })))
}

/// The registered workspaces, and the one `serve -w` gave as the default.
pub async fn list_workspaces(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({
        "workspaces": state.runs.workspaces()?,
        "default": state.runs.default_workspace(),
    })))
}

/// `GET /v1/workspaces/{id}/file?path=REL`: the citation viewer's read.
pub async fn workspace_file(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<super::files::FileQuery>,
) -> Result<Json<Value>, ApiError> {
    // Opening and reading a workspace path is blocking I/O (a slow disk, a
    // network mount): off the async workers, so one request never holds up
    // the others.
    let file = tokio::task::spawn_blocking(move || state.runs.workspace_file(&id, &q.path))
        .await
        .map_err(ApiError::internal)??;
    Ok(Json(json!(file)))
}

/// `POST /v1/workspaces`: selects a folder registered at the command line;
/// registering a new one is refused (403 naming `capstan workspace add`).
pub async fn add_workspace(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<WorkspaceBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let ws = state.runs.add_workspace(&body.path)?;
    Ok((StatusCode::OK, Json(json!(ws))))
}
