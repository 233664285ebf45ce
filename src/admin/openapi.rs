//! `GET /admin/v1/openapi.json`: the OpenAPI 3.1 document of this API, generated from the handlers'
//! `#[utoipa::path]` annotations and the request and response types, so it cannot drift from the code.
//!
//! The document is public: it describes the API and holds no data.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{agents, audit, batch, keys, prompts, resources, templates};
use crate::error::Problem;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "hivegate admin API",
        description = "Manage agents, their API keys, and their registries of MCP resources, resource templates \
                       and prompts. Errors are `application/problem+json` (RFC 9457). Lists are paginated with \
                       `?limit=` (1 to 1000, default 100) and `?cursor=`; `nextCursor` is absent on the last page."
    ),
    paths(
        agents::create, agents::list, agents::get, agents::patch, agents::delete,
        keys::create, keys::list, keys::patch, keys::revoke,
        resources::put, resources::list, resources::content, resources::delete, batch::batch,
        templates::put, templates::list, templates::delete,
        prompts::put, prompts::list, prompts::get, prompts::delete,
        audit::list,
        audit::export,
    ),
    components(schemas(Problem)),
    modifiers(&SecuritySchemes, &CommonResponses),
    tags(
        (name = "agents", description = "Agents (operator only)"),
        (name = "keys", description = "An agent's API keys (operator only)"),
        (name = "resources", description = "An agent's resources (operator, or the agent's `registry` key)"),
        (name = "resource templates", description = "An agent's RFC 6570 resource templates"),
        (name = "prompts", description = "An agent's prompts, with MiniJinja message templates"),
        (name = "audit", description = "The audit log (operator only)"),
    )
)]
pub struct AdminApi;

/// `operator`: the operator token as a bearer token. `agentKey`: an agent key with scope `registry`.
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "operator",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.add_security_scheme(
            "agentKey",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new(crate::http::auth::KEY_HEADER))),
        );
    }
}

/// The answers any admin request may get besides its handler's own, all `application/problem+json`: from the
/// credential and rate-limit checks ([`super::access`], [`crate::guard`]), the database, and the layer every
/// request passes ([`crate::http::limits`]).
const COMMON_RESPONSES: [(&str, &str); 7] = [
    ("401", "No credentials, or unknown, revoked or expired ones (`WWW-Authenticate: Bearer`)"),
    ("403", "The credentials do not allow this request"),
    ("408", "The answer took longer than `http.request_timeout_ms`"),
    ("414", "The request target is longer than `limits.max_uri_bytes`"),
    ("429", "Rate limited (`Retry-After` in seconds, and the `RateLimit` fields)"),
    ("431", "The header fields are larger than `limits.max_header_bytes` together"),
    ("503", "The database is unavailable (`Retry-After`)"),
];

/// Adds [`COMMON_RESPONSES`] to every operation that does not describe them itself.
struct CommonResponses;

impl Modify for CommonResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
        let problem = ContentBuilder::new().schema(Some(Ref::from_schema_name("Problem"))).build();
        for item in openapi.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
                &mut item.head,
                &mut item.options,
                &mut item.trace,
            ];
            for operation in operations.into_iter().flatten() {
                for (status, description) in COMMON_RESPONSES {
                    operation.responses.responses.entry(status.to_owned()).or_insert_with(|| {
                        ResponseBuilder::new()
                            .description(description)
                            .content("application/problem+json", problem.clone())
                            .into()
                    });
                }
            }
        }
    }
}

/// Generated once; the document never changes while the process runs.
static DOCUMENT: LazyLock<String> =
    LazyLock::new(|| AdminApi::openapi().to_json().unwrap_or_else(|error| format!(r#"{{"error":"{error}"}}"#)));

/// The OpenAPI document.
pub async fn document() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_is_openapi_3_1_with_every_path() {
        let document: serde_json::Value = serde_json::from_str(&DOCUMENT).expect("json");
        assert!(document["openapi"].as_str().is_some_and(|v| v.starts_with("3.1")), "{}", document["openapi"]);
        let paths = document["paths"].as_object().expect("paths");
        for path in [
            "/admin/v1/agents",
            "/admin/v1/agents/{agent_id}",
            "/admin/v1/agents/{agent_id}/keys",
            "/admin/v1/agents/{agent_id}/keys/{key_id}",
            "/admin/v1/agents/{agent_id}/resources",
            "/admin/v1/agents/{agent_id}/resources/content",
            "/admin/v1/agents/{agent_id}/resources/batch",
            "/admin/v1/agents/{agent_id}/resource-templates",
            "/admin/v1/agents/{agent_id}/prompts",
            "/admin/v1/agents/{agent_id}/prompts/{name}",
            "/admin/v1/audit",
        ] {
            assert!(paths.contains_key(path), "{path} is missing");
        }
        for (path, item) in paths {
            let operations = item.as_object().expect("path item").iter();
            for (method, operation) in
                operations.filter(|(key, _)| ["get", "put", "post", "delete", "patch"].contains(&key.as_str()))
            {
                for (status, _) in COMMON_RESPONSES {
                    let response = &operation["responses"][status];
                    assert!(
                        response["content"]["application/problem+json"].is_object(),
                        "{method} {path} does not describe its {status}"
                    );
                }
            }
        }
        assert_eq!(
            paths["/admin/v1/agents"]["post"]["responses"]["409"]["description"], "An agent with this id exists",
            "an operation's own answers are kept"
        );
        assert!(document["components"]["securitySchemes"]["operator"].is_object());
        assert!(document["components"]["schemas"]["Agent"].is_object());
    }
}
