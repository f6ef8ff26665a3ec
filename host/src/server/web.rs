//! The reference web chat: three static files compiled into the binary, so
//! `cargo build` is the only build step. They hold no data; the page talks to
//! the API with the token from its URL fragment (`/#token=...`), which never
//! reaches the server's logs.

use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

const INDEX: &str = include_str!("web/index.html");
const APP_JS: &str = include_str!("web/app.js");
const STYLE_CSS: &str = include_str!("web/style.css");

pub async fn index() -> Response {
    page(INDEX, "text/html; charset=utf-8")
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
