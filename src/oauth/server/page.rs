//! The consent page: server-rendered HTML, every value HTML-escaped (MiniJinja's auto-escaping of `.html`
//! templates), no script and no style, framed by nobody, posted only to this server (and, after consent,
//! redirected only to the client's registered redirect URI).

use std::sync::LazyLock;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use minijinja::Environment;
use serde::Serialize;

/// The page's template; `.html` turns MiniJinja's auto-escaping on.
const TEMPLATE_NAME: &str = "authorize.html";

const TEMPLATE: &str = r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>{{ title }} · hivegate</title>
</head>
<body>
<h1>{{ title }}</h1>
{% if message %}<p role="alert"><strong>{{ message }}</strong></p>
{% endif %}{% if form %}<p><strong>{{ form.client_name }}</strong> asks to read the MCP resources and prompts of agent
<code>{{ form.agent }}</code> on your behalf.</p>
<dl>
<dt>Client</dt><dd><code>{{ form.client_id }}</code></dd>
<dt>After you decide, your browser goes to</dt><dd><code>{{ form.redirect_uri }}</code></dd>
<dt>Resource</dt><dd><code>{{ form.resource }}</code></dd>
<dt>Scope</dt><dd><code>{{ form.scope }}</code></dd>
</dl>
<p>To allow it, paste an API key of agent <code>{{ form.agent }}</code> with scope <code>mcp</code>. The client never
sees the key: it gets tokens that work only while the key does. Revoking the key ends them.</p>
<form method="post" action="{{ action }}">
{% for field in form.hidden %}<input type="hidden" name="{{ field.0 }}" value="{{ field.1 }}">
{% endfor %}<p><label for="api_key">API key</label><br>
<input type="password" id="api_key" name="api_key" autocomplete="off" spellcheck="false" size="60"></p>
<p><button type="submit" name="decision" value="allow">Allow</button>
<button type="submit" name="decision" value="deny">Deny</button></p>
</form>
{% endif %}</body>
</html>
"#;

static PAGES: LazyLock<Environment<'static>> = LazyLock::new(|| {
    let mut environment = Environment::new();
    if let Err(error) = environment.add_template(TEMPLATE_NAME, TEMPLATE) {
        tracing::error!(%error, "the consent page's template does not compile");
    }
    environment
});

/// The consent form's content.
#[derive(Debug, Serialize)]
pub struct Form {
    pub client_name: String,
    pub client_id: String,
    pub redirect_uri: String,
    pub agent: String,
    pub resource: String,
    pub scope: String,
    /// The request's parameters and the form token, posted back as they are.
    pub hidden: Vec<(String, String)>,
}

#[derive(Serialize)]
struct Context<'a> {
    title: &'a str,
    message: Option<&'a str>,
    form: Option<&'a Form>,
    action: &'a str,
}

/// The page with `title`, an optional `message` and an optional consent `form`; `redirect_origin` is where
/// the form's answer may redirect to (the client's redirect URI's origin), for the page's policy.
pub fn render(
    status: StatusCode,
    title: &str,
    message: Option<&str>,
    form: Option<&Form>,
    redirect_origin: Option<&str>,
) -> Response {
    let context = Context { title, message, form, action: super::authorize::PATH };
    let body = PAGES.get_template(TEMPLATE_NAME).and_then(|template| template.render(&context));
    let body = match body {
        Ok(body) => body,
        Err(error) => {
            tracing::error!(%error, "the consent page could not be rendered");
            return (StatusCode::INTERNAL_SERVER_ERROR, "the consent page could not be rendered").into_response();
        }
    };
    // The form posts here, and the answer to it redirects to the client: both are allowed form targets.
    let form_action = match redirect_origin {
        Some(origin) => format!("'self' {origin}"),
        None => "'self'".to_owned(),
    };
    let policy = format!("default-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action {form_action}");
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_str(&policy).unwrap_or(HeaderValue::from_static("default-src 'none'; form-action 'self'")),
    );
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// An error page (no form).
pub fn error(status: StatusCode, message: &str) -> Response {
    render(status, "Authorization refused", Some(message), None, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_value_is_escaped() {
        let hostile = "<script>alert(1)</script>\"'&";
        let form = Form {
            client_name: hostile.to_owned(),
            client_id: hostile.to_owned(),
            redirect_uri: hostile.to_owned(),
            agent: "a".to_owned(),
            resource: hostile.to_owned(),
            scope: "mcp".to_owned(),
            hidden: vec![("state".to_owned(), hostile.to_owned())],
        };
        let response = render(StatusCode::OK, "Allow access", Some(hostile), Some(&form), Some("https://c.example"));
        let policy = response.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap_or("").to_owned();
        assert!(policy.contains("form-action 'self' https://c.example"), "{policy}");
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("a body");
        let body = String::from_utf8_lossy(&body);
        assert!(!body.contains("<script>"), "{body}");
        assert!(!body.contains("\"'&"), "{body}");
        assert!(body.contains("&lt;script&gt;"), "{body}");
    }
}
