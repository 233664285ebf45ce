//! `GET /.well-known/oauth-authorization-server`: Authorization Server Metadata (RFC 8414), with the
//! issuer `http.public_url` and every endpoint under `/oauth/`.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::state::AppState;

pub const PATH: &str = "/.well-known/oauth-authorization-server";

pub async fn handler(State(state): State<AppState>) -> Response {
    let Some(server) = state.oauth_server.as_ref() else {
        return axum::http::StatusCode::NOT_FOUND.into_response();
    };
    let issuer = &server.issuer;
    let body = json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}{}", super::authorize::PATH),
        "token_endpoint": format!("{issuer}{}", super::token::PATH),
        "registration_endpoint": format!("{issuer}{}", super::REGISTER_PATH),
        "revocation_endpoint": format!("{issuer}{}", super::token::REVOKE_PATH),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
        "revocation_endpoint_auth_methods_supported": ["none"],
        "scopes_supported": [super::SCOPE],
        "client_id_metadata_document_supported": true,
        "authorization_response_iss_parameter_supported": true,
    });
    let mut response = axum::Json(body).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=300"));
    response
}
