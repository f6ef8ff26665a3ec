//! The reference web chat: three static files compiled into the binary, so
//! `cargo build` is the only build step. They hold no data and load without
//! the token. Opened as `/?token=...` (the start-up URL), the page comes with
//! an HttpOnly SameSite=Strict cookie holding the token; the page's script
//! then drops the token from the address bar and its API calls carry the
//! cookie, which no script can read and no other site's request carries.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::AppState;
use super::error::ApiError;

const INDEX: &str = include_str!("web/index.html");
const APP_JS: &str = include_str!("web/app.js");
const STYLE_CSS: &str = include_str!("web/style.css");

#[derive(Deserialize)]
pub struct IndexQuery {
    token: Option<String>,
}

pub async fn index(
    State(state): State<AppState>,
    query: Result<Query<IndexQuery>, QueryRejection>,
) -> Response {
    let mut resp = page(INDEX, "text/html; charset=utf-8");
    let given = query.ok().and_then(|q| q.0.token);
    // A wrong token gets the page without a cookie: its first API call then
    // shows the 401 advice.
    if let Some(cookie) = given.and_then(|t| state.doors.cookie_for(&t)) {
        resp.headers_mut().insert(header::SET_COOKIE, cookie);
        // The token is in this URL: keep it out of caches and referrers.
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        resp.headers_mut().insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
    }
    resp
}

pub async fn asset(Path(file): Path<String>) -> Result<Response, ApiError> {
    match file.as_str() {
        "app.js" => Ok(page(APP_JS, "text/javascript; charset=utf-8")),
        "style.css" => Ok(page(STYLE_CSS, "text/css; charset=utf-8")),
        _ => Err(ApiError::not_found(format!(
            "no asset `{file}`; the web chat has /assets/app.js and /assets/style.css"
        ))),
    }
}

fn page(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; connect-src 'self'; img-src 'self' data:",
            ),
        ],
        body,
    )
        .into_response()
}
