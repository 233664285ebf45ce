//! Rendering: the MiniJinja environment of the console's templates, the headers every page carries, the
//! embedded assets, and the one mapping of errors to pages.
//!
//! Templates end in `.html`, so MiniJinja escapes every value written into them (autoescape); nothing is
//! marked safe. Pages carry a Content-Security-Policy that allows scripts and styles from this origin only
//! (no inline script or style), forms posting to this origin only, and no framing.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use minijinja::{Environment, Value, context};
use sha2::{Digest, Sha256};

use super::auth::Console;
use crate::error::ApiError;

/// Every console page's policy: this origin's script and style files, images from this origin, `fetch` to
/// this origin (the live page), forms to this origin, no framing, no `<base>`.
pub const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                          connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The console's templates, compiled once.
static TEMPLATES: LazyLock<Environment<'static>> = LazyLock::new(|| {
    let mut env = Environment::new();
    for (name, source) in [
        ("base.html", include_str!("templates/base.html")),
        ("sign_in.html", include_str!("templates/sign_in.html")),
        ("error.html", include_str!("templates/error.html")),
        ("overview.html", include_str!("templates/overview.html")),
        ("agents.html", include_str!("templates/agents.html")),
        ("agent.html", include_str!("templates/agent.html")),
        ("key_created.html", include_str!("templates/key_created.html")),
        ("registry.html", include_str!("templates/registry.html")),
        ("resource.html", include_str!("templates/resource.html")),
        ("template.html", include_str!("templates/template.html")),
        ("prompt.html", include_str!("templates/prompt.html")),
        ("forms.html", include_str!("templates/forms.html")),
        ("live.html", include_str!("templates/live.html")),
        ("live_streams.html", include_str!("templates/live_streams.html")),
        ("audit.html", include_str!("templates/audit.html")),
    ] {
        // The templates are part of the binary: one that does not compile fails every test that renders it.
        if let Err(error) = env.add_template(name, source) {
            tracing::error!(template = name, %error, "a console template does not compile");
        }
    }
    env
});

/// An embedded file: its bytes, type and the hashed name it is served under.
struct Asset {
    name: String,
    bytes: &'static [u8],
    content_type: &'static str,
}

impl Asset {
    fn new(stem: &str, extension: &str, bytes: &'static [u8], content_type: &'static str) -> Self {
        let hash = hex::encode(&Sha256::digest(bytes)[..6]);
        Self { name: format!("{stem}.{hash}.{extension}"), bytes, content_type }
    }
}

/// The stylesheet and the script, named by their content's hash so that they can be cached for a year.
static ASSETS: LazyLock<[Asset; 2]> = LazyLock::new(|| {
    [
        Asset::new("console", "css", include_bytes!("assets/console.css"), "text/css; charset=utf-8"),
        Asset::new("console", "js", include_bytes!("assets/console.js"), "text/javascript; charset=utf-8"),
    ]
});

/// `GET /console/assets/{file}`.
pub async fn asset(Path(file): Path<String>) -> Response {
    let Some(asset) = ASSETS.iter().find(|asset| asset.name == file) else {
        return render_status(StatusCode::NOT_FOUND, "error.html", context! { message => "no such file" });
    };
    (
        [
            (header::CONTENT_TYPE, asset.content_type),
            (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        asset.bytes,
    )
        .into_response()
}

/// `GET /console`: to `/console/`.
pub async fn to_index() -> Redirect {
    Redirect::permanent("/console/")
}

/// What every page's layout needs: the asset paths, and who is signed in with their CSRF token.
fn base(console: Option<&Console>) -> Value {
    let css = format!("/console/assets/{}", ASSETS[0].name);
    let js = format!("/console/assets/{}", ASSETS[1].name);
    match console {
        Some(console) => context! {
            css, js,
            csrf => console.session.csrf.clone(),
            is_operator => console.session.principal.is_operator(),
            own_agent => console.own_agent().map(|agent| agent.to_string()),
        },
        None => context! { css, js },
    }
}

/// A page of a signed-in console, 200.
pub fn page(console: &Console, template: &str, values: Value) -> Response {
    render(StatusCode::OK, template, context! { ..values, ..base(Some(console)) })
}

/// A page without a session (sign-in, errors before one), with this status.
pub fn render_status(status: StatusCode, template: &str, values: Value) -> Response {
    render(status, template, context! { ..values, ..base(None) })
}

fn render(status: StatusCode, template: &str, values: Value) -> Response {
    let rendered = TEMPLATES.get_template(template).and_then(|t| t.render(values));
    match rendered {
        Ok(html) => html_response(status, html),
        Err(error) => {
            tracing::error!(template, %error, "a console page did not render");
            html_response(StatusCode::INTERNAL_SERVER_ERROR, "<!DOCTYPE html><title>error</title>internal error".into())
        }
    }
}

/// Renders a template to a string (a fragment the live page fetches).
pub fn fragment(template: &str, values: Value) -> Response {
    render(StatusCode::OK, template, values)
}

fn html_response(status: StatusCode, html: String) -> Response {
    let mut response = (status, html).into_response();
    secure(&mut response);
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    response
}

/// The headers of every console answer but an asset's: the policy, no sniffing, no referrer, no caching
/// (pages show secrets once and per-session tokens).
pub fn secure(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// The same headers on every console answer that has not set its own (redirects, errors of extractors),
/// as a layer of the console's routes; an asset keeps its long cache.
pub async fn secure_every(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.entry(name).or_insert(HeaderValue::from_static(value));
    }
    response
}

/// Why a console request did not get its page.
#[derive(Debug)]
pub enum ConsoleError {
    /// No session, or it ended: to the sign-in page.
    SignIn,
    /// A change without this session's CSRF token.
    Csrf,
    /// What the admin API would have answered; shown as a page with the same status.
    Api(ApiError),
}

impl From<ApiError> for ConsoleError {
    fn from(error: ApiError) -> Self {
        ConsoleError::Api(error)
    }
}

impl From<crate::store::StoreError> for ConsoleError {
    fn from(error: crate::store::StoreError) -> Self {
        ConsoleError::Api(error.into())
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        match self {
            ConsoleError::SignIn => {
                let mut response = Redirect::to("/console/sign-in").into_response();
                secure(&mut response);
                response
            }
            ConsoleError::Csrf => render_status(
                StatusCode::FORBIDDEN,
                "error.html",
                context! { message => "the form's CSRF token is missing or not this session's: reload the page and try again" },
            ),
            ConsoleError::Api(error) => {
                let status = error.status();
                let message = if status.is_server_error() {
                    tracing::error!(%error, "console request failed");
                    "the server could not do this now; see its log".to_owned()
                } else {
                    error.to_string()
                };
                render_status(status, "error.html", context! { message })
            }
        }
    }
}

/// A console handler's result.
pub type Result<T> = std::result::Result<T, ConsoleError>;
