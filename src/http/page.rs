//! The two HTML pages: the landing page at `GET /`, which says where everything is, and the API reference
//! at [`REFERENCE_PATH`], Swagger UI over `/admin/v1/openapi.json`.
//!
//! Swagger UI's files are embedded in the binary (`utoipa-swagger-ui`, vendored) and its configuration
//! points at our own document only, with the online validator turned off: neither page loads anything from
//! another origin, and each answer's `Content-Security-Policy` says so to the browser.
//!
//! [`REFERENCE_PATH`]: crate::http::page::REFERENCE_PATH

use std::sync::{Arc, LazyLock};

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use utoipa_swagger_ui::Config;

use crate::error::ApiError;

/// Where the API reference is served; `admin` is a reserved agent id, so no MCP endpoint can sit here.
pub const REFERENCE_PATH: &str = "/admin/docs/";

/// Where the OpenAPI document is served.
pub const DOCUMENT_PATH: &str = "/admin/v1/openapi.json";

/// The landing page: no script, no style, nothing from elsewhere.
const LANDING_POLICY: &str = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Swagger UI: its own scripts and styles (it sets inline styles on its elements), its embedded icons, and
/// requests for the document to this origin only.
const REFERENCE_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                                img-src 'self' data:; font-src 'self' data:; connect-src 'self'; \
                                base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET /`: where the console, the API reference, health and the MCP endpoints are. `with_admin` is
/// whether this listener serves the admin API (and so the reference).
pub fn landing(with_admin: bool) -> Response {
    let reference = if with_admin {
        format!(
            "<li><a href=\"{REFERENCE_PATH}\">API reference</a> of the admin API (its OpenAPI document: \
             <a href=\"{DOCUMENT_PATH}\">{DOCUMENT_PATH}</a>)</li>\n"
        )
    } else {
        "<li>The admin API, its reference and the console are served on the operator listener.</li>\n".to_owned()
    };
    let body = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>hivegate</title>\n\
         </head>\n<body>\n<h1>hivegate {version}</h1>\n\
         <p>A multi-tenant MCP gateway: each agent's resources, resource templates and prompts, served over MCP.</p>\n\
         <ul>\n\
         <li>MCP endpoint of an agent: <code>/{{agent_id}}/mcp</code> (Streamable HTTP; send its key as \
         <code>X-Agent-API-Key</code> or <code>Authorization: Bearer</code>)</li>\n\
         {reference}\
         {console}\
         <li>Health: <a href=\"/healthz\">/healthz</a> (alive) and <a href=\"/readyz\">/readyz</a> (database \
         reachable)</li>\n\
         </ul>\n</body>\n</html>\n",
        version = env!("CARGO_PKG_VERSION"),
        console = if with_admin { "<li><a href=\"/console/\">Console</a></li>\n" } else { "" },
    );
    html(body.into_bytes(), LANDING_POLICY)
}

/// Swagger UI's configuration: our document, no online validator.
static REFERENCE_CONFIG: LazyLock<Arc<Config<'static>>> =
    LazyLock::new(|| Arc::new(Config::new([DOCUMENT_PATH]).validator_url("none")));

/// `GET /admin/docs/`: Swagger UI's page.
pub async fn reference_index() -> Response {
    reference_file("")
}

/// `GET /admin/docs/{*file}`: one of Swagger UI's files.
pub async fn reference_asset(Path(file): Path<String>) -> Response {
    reference_file(&file)
}

/// `GET /admin/docs`: to the page, whose relative links need the trailing slash.
pub async fn reference_redirect() -> Response {
    (StatusCode::PERMANENT_REDIRECT, [(header::LOCATION, REFERENCE_PATH)]).into_response()
}

fn reference_file(file: &str) -> Response {
    match utoipa_swagger_ui::serve(file, REFERENCE_CONFIG.clone()) {
        Ok(Some(found)) => {
            let content_type = HeaderValue::from_str(&found.content_type)
                .unwrap_or(HeaderValue::from_static("application/octet-stream"));
            let mut response = with_policy(found.bytes.into_owned(), REFERENCE_POLICY);
            response.headers_mut().insert(header::CONTENT_TYPE, content_type);
            response
        }
        Ok(None) => ApiError::NotFound(format!("the API reference has no file {file:?}")).into_response(),
        Err(error) => ApiError::Internal(format!("the API reference's {file:?}: {error}")).into_response(),
    }
}

fn html(body: Vec<u8>, policy: &'static str) -> Response {
    let mut response = with_policy(body, policy);
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    response
}

/// An answer with `body`, the Content-Security-Policy `policy`, and no sniffing of its type.
fn with_policy(body: Vec<u8>, policy: &'static str) -> Response {
    let headers = [
        (header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(policy)),
        (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
    ];
    (headers, body).into_response()
}
