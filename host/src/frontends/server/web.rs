//! The reference web chat: static files compiled into the binary, so
//! `cargo build` is the only build step. They hold no data and load without
//! the token. Opened as `/?token=...` (the start-up URL), the page comes with
//! an HttpOnly SameSite=Strict cookie holding the token; the page's script
//! then drops the token from the address bar and its API calls carry the
//! cookie, which no script can read and no other site's request carries.
//!
//! Model output and workspace text are untrusted. The page renders Markdown
//! with vendored, pinned releases of marked (parser), DOMPurify (sanitiser)
//! and highlight.js (code colours); see `web/vendor/README.md` for why these
//! and how they are pinned. Every response carries a strict
//! Content-Security-Policy as a second wall: scripts and styles only from this
//! server (no inline script, no `eval`), no remote images, fonts, frames or
//! connections, the page never framed (no clickjacking of the approval
//! buttons), and Trusted Types, so no string reaches an HTML sink except
//! through DOMPurify's policy.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::AppState;
use super::error::ApiError;

const INDEX: &str = include_str!("web/index.html");

/// `/assets/{name}`: the page's own files.
const ASSETS: &[(&str, &str, &str)] = &[
    ("app.js", JS, include_str!("web/app.js")),
    ("markdown.js", JS, include_str!("web/markdown.js")),
    ("theme.js", JS, include_str!("web/theme.js")),
    ("style.css", CSS, include_str!("web/style.css")),
];

/// `/assets/vendor/{name}`: third-party files, byte for byte as published
/// (tests/webchat.rs compares them with the pinned npm packages).
const VENDOR: &[(&str, &str, &str)] = &[
    (
        "marked.umd.js",
        JS,
        include_str!("web/vendor/marked.umd.js"),
    ),
    (
        "purify.min.js",
        JS,
        include_str!("web/vendor/purify.min.js"),
    ),
    (
        "highlight.min.js",
        JS,
        include_str!("web/vendor/highlight.min.js"),
    ),
];

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// The policy on every page response. `img-src data:` is for the blank
/// favicon and the raster images a tool answered with (app.js `showMedia`:
/// PNG, JPEG, GIF or WebP, base64, bounded); Markdown images are never turned
/// into `<img>` (see markdown.js), and this keeps a slip from loading a
/// remote one.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'; require-trusted-types-for 'script'; \
     trusted-types dompurify";

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
    }
    resp
}

pub async fn asset(Path(file): Path<String>) -> Result<Response, ApiError> {
    lookup(ASSETS, &file, "/assets/")
}

pub async fn vendor_asset(Path(file): Path<String>) -> Result<Response, ApiError> {
    lookup(VENDOR, &file, "/assets/vendor/")
}

fn lookup(
    table: &[(&str, &'static str, &'static str)],
    file: &str,
    prefix: &str,
) -> Result<Response, ApiError> {
    match table.iter().find(|(name, _, _)| *name == file) {
        Some((_, content_type, body)) => Ok(page(body, content_type)),
        None => {
            let known: Vec<String> = table
                .iter()
                .map(|(name, _, _)| format!("{prefix}{name}"))
                .collect();
            Err(ApiError::not_found(format!(
                "no asset `{file}`; the web chat has {}",
                known.join(", ")
            )))
        }
    }
}

fn page(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::X_FRAME_OPTIONS, "DENY"),
            // Links in answers lead to other sites: they learn nothing of this one.
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}
