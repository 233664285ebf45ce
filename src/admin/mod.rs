//! The admin REST API under `/admin/v1`: agents, their keys, and their registries.
//!
//! Every handler is thin: its extractors authenticate and authorise (`access`), parse the body
//! (`extract`) and the page (`page`); the handler turns the body into domain values (400/422 on bad
//! input, nothing changes) and makes one store call, which commits the change with its event and audit
//! rows. Every error is `application/problem+json` ([`crate::error::ApiError`]).

use axum::Router;
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};

use crate::error::ApiError;
use crate::state::AppState;

/// Who is calling (operator token or agent key) and whether they may touch the path's agent.
pub mod access;
/// `/agents`: create, list, read, merge-patch, delete.
pub mod agents;
/// `/audit`: the audit log, newest first (operator only).
pub mod audit;
/// `/agents/{agent_id}/resources/batch`: many upserts and deletes in one transaction.
pub mod batch;
/// Create or replace, list, read and delete: the operations every registry collection shares.
pub mod collection;
/// Own extractors: JSON bodies, query strings and path parameters with problem+json errors.
pub mod extract;
/// `/agents/{agent_id}/keys`: create, list, merge-patch, revoke.
pub mod keys;
/// `/agents/{agent_id}/oauth-subjects`: subjects of the external authorization server granted as keys.
pub mod oauth_subjects;
/// `GET /openapi.json`: the generated OpenAPI 3.1 document.
pub mod openapi;
/// The declaration of an operator-only operation: its OpenAPI description, span and signature.
pub mod operation;
/// `?limit=&cursor=` and the `{"items", "nextCursor"}` page.
pub mod page;
/// `/agents/{agent_id}/prompts`.
pub mod prompts;
/// `/agents/{agent_id}/resources`: upsert, list, read with content, delete.
pub mod resources;
/// A deserializer over parsed JSON that never takes an array for an object.
pub mod strict;
/// `/agents/{agent_id}/resource-templates`.
pub mod templates;

/// The admin routes, to be nested under `/admin/v1`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/openapi.json", get(openapi::document))
        .route("/agents", post(agents::create).get(agents::list))
        .route("/audit", get(audit::list))
        .route("/audit/export", get(audit::export))
        .route("/agents/{agent_id}", get(agents::get).patch(agents::patch).delete(agents::delete))
        .route("/agents/{agent_id}/keys", post(keys::create).get(keys::list))
        .route("/agents/{agent_id}/keys/{key_id}", delete(keys::revoke).patch(keys::patch))
        .route("/agents/{agent_id}/oauth-subjects", get(oauth_subjects::list))
        .route(
            "/agents/{agent_id}/oauth-subjects/{subject}",
            put(oauth_subjects::put).get(oauth_subjects::get).delete(oauth_subjects::delete),
        )
        .route("/agents/{agent_id}/resources", put(resources::put).get(resources::list).delete(resources::delete))
        .route("/agents/{agent_id}/resources/content", get(resources::content))
        .route("/agents/{agent_id}/resources/batch", post(batch::batch))
        .route(
            "/agents/{agent_id}/resource-templates",
            put(templates::put).get(templates::list).delete(templates::delete),
        )
        .route("/agents/{agent_id}/prompts", get(prompts::list))
        .route("/agents/{agent_id}/prompts/{name}", put(prompts::put).get(prompts::get).delete(prompts::delete))
        .fallback(|| async { ApiError::no_route() })
        .layer(middleware::map_response(method_not_allowed_as_problem))
}

/// axum answers a known path with an unknown method 405 with `Allow` and an empty body; give it a
/// problem+json body like every other error, keeping `Allow`.
async fn method_not_allowed_as_problem(response: Response) -> Response {
    if response.status() != StatusCode::METHOD_NOT_ALLOWED || response.headers().contains_key(header::CONTENT_TYPE) {
        return response;
    }
    let mut problem = ApiError::MethodNotAllowed.into_response();
    if let Some(allow) = response.headers().get(header::ALLOW) {
        problem.headers_mut().insert(header::ALLOW, allow.clone());
    }
    problem
}
