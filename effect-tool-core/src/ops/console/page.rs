//! The console's pages: one HTML shell (the list at `/`, a record at `/record`), the standing
//! approvals' page (`/grants`, its own script beside the console's), the script and
//! its style sheet, compiled into the binary. They hold no data and are served without an
//! identity; the script reads everything from the API.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const HTML: &str = include_str!("page/index.html");
const SCRIPT: &str = include_str!("page/console.js");
const STYLE: &str = include_str!("page/console.css");
const GRANTS_HTML: &str = include_str!("page/grants.html");
const GRANTS_SCRIPT: &str = include_str!("page/grants.js");

/// No script but the console's own (none inline), requests only to this server, no framing, no
/// forms posted anywhere: what a page showing a model's inputs needs.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The routes of the pages (merged into [`super::Console::router`]).
pub(super) fn routes() -> axum::Router {
    axum::Router::new()
        .route("/", get(|| async { asset(HTML, "text/html; charset=utf-8") }))
        .route("/record", get(|| async { asset(HTML, "text/html; charset=utf-8") }))
        .route(
            "/console.js",
            get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/grants",
            get(|| async { asset(GRANTS_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/grants.js",
            get(|| async { asset(GRANTS_SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/console.css",
            get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
        )
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
