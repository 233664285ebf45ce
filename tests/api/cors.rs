//! CORS on the MCP endpoint and the metadata documents: for allowed origins only, preflights answered
//! before any credential, rate limit or lockout.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{Api, Backend, spawn_app_with};

both!(cors_for_allowed_origins_only);

const ALLOWED: &str = "https://app.example.com";
const REFUSED: &str = "https://evil.example.com";

fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response.headers().get(name).map(|value| value.to_str().unwrap().to_owned())
}

/// Asserts no CORS field at all, and `Vary: Origin`.
fn assert_no_cors(response: &reqwest::Response) {
    for (name, _) in response.headers() {
        assert!(!name.as_str().starts_with("access-control-"), "{name} sent to a refused origin");
    }
    assert_eq!(header(response, "vary").as_deref(), Some("Origin"));
}

async fn cors_for_allowed_origins_only(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        config.mcp.allowed_origins = vec![ALLOWED.to_owned()];
        config.oauth.mode = hivegate::oauth::config::Mode::External;
        config.oauth.issuer = Some("https://idp.example.com".to_owned());
        // Two failed authentications lock the address out.
        config.rate_limits.failed_auth_attempts = 2;
        config.rate_limits.failed_auth_window_secs = 600;
    })
    .await;
    app.create_agent("bot").await;
    let key = app.issue_key("bot", &["mcp"]).await.key;
    let preflight = |origin: &str, path: &str| {
        app.anon(Method::OPTIONS, path)
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "authorization, content-type, mcp-protocol-version")
    };

    // The preflight of an allowed origin: 204, the origin echoed, the lists of the contract.
    for path in ["/bot/mcp", "/.well-known/oauth-protected-resource/bot/mcp"] {
        let response = preflight(ALLOWED, path).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NO_CONTENT, "{path}");
        assert_eq!(header(&response, "access-control-allow-origin").as_deref(), Some(ALLOWED));
        assert_eq!(header(&response, "vary").as_deref(), Some("Origin"));
        let allowed = header(&response, "access-control-allow-headers").unwrap().to_ascii_lowercase();
        for name in [
            "content-type",
            "accept",
            "authorization",
            "x-agent-api-key",
            "mcp-protocol-version",
            "mcp-session-id",
            "mcp-method",
            "mcp-name",
            "last-event-id",
        ] {
            assert!(allowed.split(", ").any(|allowed| allowed == name), "{name} in {allowed}");
        }
        assert!(header(&response, "access-control-allow-methods").unwrap().contains("POST"));
        // A refused origin's preflight gets nothing.
        let response = preflight(REFUSED, path).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{path}");
        assert_no_cors(&response);
    }

    // An actual request from the allowed origin: answered with the origin echoed and the exposed fields.
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "browser", "version": "1"}}});
    let response = app
        .with_key(Method::POST, "/bot/mcp", &key)
        .header("origin", ALLOWED)
        .header("accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "access-control-allow-origin").as_deref(), Some(ALLOWED));
    let exposed = header(&response, "access-control-expose-headers").unwrap().to_ascii_lowercase();
    for name in ["mcp-session-id", "www-authenticate", "retry-after", "ratelimit", "ratelimit-policy"] {
        assert!(exposed.split(", ").any(|exposed| exposed == name), "{name} in {exposed}");
    }
    assert!(response.headers().contains_key("mcp-session-id"));
    // A 401 to the allowed origin is readable too (the browser client needs its challenge).
    let response = app.anon(Method::POST, "/bot/mcp").header("origin", ALLOWED).json(&initialize).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(header(&response, "access-control-allow-origin").as_deref(), Some(ALLOWED));
    assert!(header(&response, "www-authenticate").unwrap().contains("resource_metadata="));
    // The metadata document, to the allowed origin and to another.
    let path = "/.well-known/oauth-protected-resource/bot/mcp";
    let response = app.anon(Method::GET, path).header("origin", ALLOWED).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "access-control-allow-origin").as_deref(), Some(ALLOWED));
    let response = app.anon(Method::GET, path).header("origin", REFUSED).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_no_cors(&response);

    // The refused origin's actual request: 403 from the origin check, and nothing for the browser.
    let response =
        app.with_key(Method::POST, "/bot/mcp", &key).header("origin", REFUSED).json(&initialize).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_no_cors(&response);

    // Locked out by failed authentications, the address still gets its preflights answered.
    for _ in 0..3 {
        let response = app.with_key(Method::POST, "/bot/mcp", "bak_wrong").json(&initialize).send().await.unwrap();
        assert_ne!(response.status(), StatusCode::OK);
    }
    let response = app.with_key(Method::POST, "/bot/mcp", &key).json(&initialize).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let response = preflight(ALLOWED, "/bot/mcp").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_eq!(header(&response, "access-control-allow-origin").as_deref(), Some(ALLOWED));
}
