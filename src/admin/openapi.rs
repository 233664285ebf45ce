//! `GET /admin/v1/openapi.json`: the OpenAPI 3.1 document of this API, generated from the handlers'
//! `#[utoipa::path]` annotations and the request and response types, so it cannot drift from the code.
//!
//! The document is public: it describes the API and holds no data.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{agents, audit, batch, keys, oauth_subjects, prompts, resources, templates};
use crate::error::Problem;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "hivegate admin API",
        description = "Manage agents, their API keys, and their registries of MCP resources, resource templates \
                       and prompts. Errors are `application/problem+json` (RFC 9457). Lists are paginated with \
                       `?limit=` (1 to 1000, default 100) and `?cursor=`; `nextCursor` is absent on the last page. No string \
                       may contain U+0000 (422). Each field has a size limit set by the server's configuration \
                       (`limits.max_*_bytes`): a value over it is refused with 413 naming the field and the limit."
    ),
    paths(
        agents::create, agents::list, agents::get, agents::patch, agents::delete,
        keys::create, keys::list, keys::patch, keys::revoke,
        oauth_subjects::put, oauth_subjects::list, oauth_subjects::get, oauth_subjects::delete,
        resources::put, resources::list, resources::content, resources::delete, batch::batch,
        templates::put, templates::list, templates::delete,
        prompts::put, prompts::list, prompts::get, prompts::delete,
        audit::list,
        audit::export,
    ),
    components(schemas(Problem)),
    servers((url = "/", description = "This hivegate (the document is served by the server it describes)")),
    modifiers(&SecuritySchemes, &FieldPatterns, &ParameterConstraints, &CommonResponses),
    tags(
        (name = "agents", description = "Agents (operator only)"),
        (name = "keys", description = "An agent's API keys (operator only)"),
        (name = "oauth subjects", description = "Subjects of the external authorization server granted on an agent, each as one of its keys (operator only)"),
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
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new(crate::http::auth::KEY_HEADER.as_str()))),
        );
    }
}

/// Not blank: at least one character that is not white space (as Rust's `char::is_whitespace` sees it).
pub const NON_BLANK: &str = r"[^\t\n\u000b\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]";

/// An absolute URI of RFC 3986 (`absolute-URI`: a scheme, no fragment; IP-literal hosts aside), as
/// [`crate::domain::ResourceUri`] takes it.
pub const ABSOLUTE_URI: &str = concat!(
    r"^[A-Za-z][A-Za-z0-9+.\-]*:",
    r"(?://(?:(?:[A-Za-z0-9\-._~!$&'()*+,;=:]|%[0-9A-Fa-f]{2})*@)?(?:[A-Za-z0-9\-._~!$&'()*+,;=]|%[0-9A-Fa-f]{2})*",
    r"(?::[0-9]*)?(?:/(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})*)*",
    r"|/(?:(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})+(?:/(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})*)*)?",
    r"|(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})+(?:/(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})*)*)?",
    r"(?:\?(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})*)?$",
);

/// A media type as [`super::resources::check_mime_type`] takes it: `type/subtype` (each with something
/// besides white space) before any `;parameters`, no control characters.
pub const MEDIA_TYPE: &str = concat!(
    r"^[ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*",
    r"[^\u0000-\u001f\u007f-\u009f \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000/;]",
    r"[^\u0000-\u001f\u007f-\u009f/;]*/[^\u0000-\u001f\u007f-\u009f;]*",
    r"[^\u0000-\u001f\u007f-\u009f \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000;]",
    r"[^\u0000-\u001f\u007f-\u009f;]*(?:;[^\u0000-\u001f\u007f-\u009f]*)?$",
);

/// The patterns of request fields, by schema and property: the server's checks of these values, which
/// utoipa's attributes cannot name as constants.
const FIELD_PATTERNS: [(&str, &str, &str); 8] = [
    ("CreateAgent", "name", NON_BLANK),
    ("PatchAgent", "name", NON_BLANK),
    ("ResourceBody", "uri", ABSOLUTE_URI),
    ("ResourceBody", "name", NON_BLANK),
    ("ResourceBody", "mimeType", MEDIA_TYPE),
    ("TemplateBody", "name", NON_BLANK),
    ("TemplateBody", "mimeType", MEDIA_TYPE),
    ("PromptArgument", "name", NON_BLANK),
];

/// Sets [`FIELD_PATTERNS`].
struct FieldPatterns;

impl Modify for FieldPatterns {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::RefOr;
        use utoipa::openapi::schema::Schema;
        let Some(components) = openapi.components.as_mut() else { return };
        for (schema, property, pattern) in FIELD_PATTERNS {
            let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(schema) else { continue };
            if let Some(RefOr::T(Schema::Object(field))) = object.properties.get_mut(property) {
                field.pattern = Some(pattern.to_owned());
            }
        }
    }
}

/// An agent id ([`crate::domain::AgentId`]).
const AGENT_ID: &str = "^[a-z0-9][a-z0-9_-]{0,62}$";
/// An RFC 3339 date-time as the audit filters take it (days up to 28, so that every match is a real date).
const RFC3339: &str = concat!(
    r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])[Tt ]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?",
    r"([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
);
/// A prompt name ([`crate::domain::PromptName`]).
const PROMPT_NAME: &str = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$";

/// The constraints of the parameters every operation shares, set where they are named: `agent_id` and
/// `name` (a prompt's) in paths, `limit` (1 to [`super::page::MAX_LIMIT`]) and the `uri`/`uriTemplate` an
/// operation requires in queries.
struct ParameterConstraints;

impl Modify for ParameterConstraints {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::schema::{Object, Schema, SchemaType, Type};
        use utoipa::openapi::{ObjectBuilder, RefOr};
        let constrained = |name: &str| -> Option<Object> {
            let string = ObjectBuilder::new().schema_type(SchemaType::Type(Type::String));
            match name {
                "agent_id" => Some(string.pattern(Some(AGENT_ID)).build()),
                "name" => Some(string.pattern(Some(PROMPT_NAME)).build()),
                "uri" => Some(string.pattern(Some(ABSOLUTE_URI)).max_length(Some(2048)).build()),
                "uriTemplate" => Some(string.min_length(Some(1)).build()),
                // A granted subject: no control character (its size limit is configuration: 413).
                "subject" => Some(string.pattern(Some(r"^[^\u0000-\u001f\u007f-\u009f]+$")).build()),
                // The audit filters: empty is the same as absent.
                "agent" => Some(string.pattern(Some(format!("^$|{AGENT_ID}"))).build()),
                "since" | "until" => Some(string.pattern(Some(format!("^$|{RFC3339}"))).build()),
                "limit" => Some(
                    ObjectBuilder::new()
                        .schema_type(SchemaType::Type(Type::Integer))
                        .minimum(Some(1))
                        .maximum(Some(super::page::MAX_LIMIT))
                        .build(),
                ),
                _ => None,
            }
        };
        for item in openapi.paths.paths.values_mut() {
            for operation in operations(item) {
                for parameter in operation.parameters.iter_mut().flatten() {
                    if let Some(schema) = constrained(&parameter.name) {
                        parameter.schema = Some(RefOr::T(Schema::Object(schema)));
                    }
                }
            }
        }
    }
}

/// Every operation of a path item.
fn operations(item: &mut utoipa::openapi::PathItem) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.patch,
        &mut item.head,
        &mut item.options,
        &mut item.trace,
    ]
    .into_iter()
    .flatten()
}

/// The answers any admin request may get besides its handler's own, all `application/problem+json`: from the
/// credential and rate-limit checks ([`super::access`], [`crate::guard`]), the parsing of the request
/// ([`super::extract`], [`super::page`]), the database, and the layer every request passes
/// ([`crate::http::request_limits`]).
const COMMON_RESPONSES: [(&str, &str); 8] = [
    (
        "400",
        "A malformed query string or path, a parameter given twice, a `limit` that is not an integer, or a \
             cursor not issued for this list",
    ),
    ("401", "No credentials, or unknown, revoked or expired ones (`WWW-Authenticate: Bearer`)"),
    ("403", "The credentials do not allow this request"),
    ("408", "The answer took longer than `http.request_timeout_ms`"),
    ("414", "The request target is longer than `limits.max_uri_bytes`"),
    (
        "429",
        "Rate limited, or the client's address is locked out after failed authentications (`Retry-After` \
             in seconds, and the `RateLimit` fields)",
    ),
    ("431", "The header fields are larger than `limits.max_header_bytes` together"),
    ("503", "The database is unavailable (`Retry-After`)"),
];

/// The answers of an operation on one agent (`/agents/{agent_id}/...`).
const AGENT_RESPONSES: [(&str, &str); 1] = [("404", "No such agent")];

/// The answers of an operation that takes query parameters.
const QUERY_RESPONSES: [(&str, &str); 1] =
    [("422", "A query parameter out of range (e.g. `limit` outside 1 to 1000), invalid, or missing")];

/// The answers of an operation that takes a body.
const BODY_RESPONSES: [(&str, &str); 4] = [
    ("400", "The body is not JSON, or a value has the wrong JSON type"),
    ("409", "The change would take the agent over one of its count quotas"),
    (
        "413",
        "The body is larger than `limits.max_body_bytes`, a field is over its `limits.max_*_bytes` (named \
             in `detail`), or the change would take the agent over its byte quota",
    ),
    ("422", "A value is invalid, a field is unknown or missing"),
];

/// Adds [`COMMON_RESPONSES`] to every operation, and the answers of its kind ([`AGENT_RESPONSES`],
/// [`QUERY_RESPONSES`], [`BODY_RESPONSES`]), where it does not describe them itself.
struct CommonResponses;

impl Modify for CommonResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::path::ParameterIn;
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
        let problem = ContentBuilder::new().schema(Some(Ref::from_schema_name("Problem"))).build();
        for (path, item) in openapi.paths.paths.iter_mut() {
            let on_agent = path.contains("{agent_id}");
            for operation in operations(item) {
                let has_query = operation.parameters.iter().flatten().any(|p| p.parameter_in == ParameterIn::Query);
                let has_body = operation.request_body.is_some();
                let kinds = [
                    (true, &COMMON_RESPONSES[..]),
                    (on_agent, &AGENT_RESPONSES[..]),
                    (has_query, &QUERY_RESPONSES[..]),
                    (has_body, &BODY_RESPONSES[..]),
                ];
                let responses = kinds.into_iter().filter(|(applies, _)| *applies).flat_map(|(_, list)| list);
                for (status, description) in responses {
                    operation.responses.responses.entry((*status).to_owned()).or_insert_with(|| {
                        ResponseBuilder::new()
                            .description(*description)
                            .content("application/problem+json", problem.clone())
                            .into()
                    });
                }
            }
        }
    }
}

/// Standard base64 with padding, as [`crate::domain::content::validate_base64`] takes it: the unused bits of
/// the last character are zero.
const BASE64: &str = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$";

/// The rules of request bodies that utoipa's attributes cannot state, set on the generated JSON: a resource
/// has exactly one of `text` and `blob` (a `null` one counts as absent) and a blob is base64; a batch deletes
/// absolute URIs, each once; annotations are
/// MCP's (`audience`, `priority`, `lastModified`, nothing else); a prompt message's content is an MCP content
/// block of a known `type`.
fn refine(document: &mut serde_json::Value) {
    use serde_json::json;
    let schemas = &mut document["components"]["schemas"];
    let resource = &mut schemas["ResourceBody"];
    resource["properties"]["blob"]["pattern"] = json!(BASE64);
    resource["oneOf"] = json!([
        {"required": ["text"], "properties": {"text": {"type": "string"}}},
        {"required": ["blob"], "properties": {"blob": {"type": "string"}}},
    ]);
    let annotations = json!({
        "description": "MCP annotations.",
        "type": ["object", "null"],
        "additionalProperties": false,
        "properties": {
            "audience": {"type": "array", "items": {"enum": ["user", "assistant"]}},
            "priority": {"type": "number", "minimum": 0, "maximum": 1},
            "lastModified": {"type": "string", "pattern": RFC3339},
        },
    });
    schemas["BatchBody"]["properties"]["delete"]["items"] =
        json!({"type": "string", "pattern": ABSOLUTE_URI, "maxLength": 2048});
    schemas["BatchBody"]["properties"]["delete"]["uniqueItems"] = json!(true);
    for body in ["ResourceBody", "TemplateBody"] {
        schemas[body]["properties"]["annotations"] = annotations.clone();
    }
    schemas["PromptMessage"]["properties"]["content"] = json!({
        "description": "An MCP content block; its texts (and a resource's or link's `uri`) are MiniJinja \
                        templates rendered with the prompt's arguments.",
        "type": "object",
        "required": ["type"],
        "properties": {"type": {"enum": ["text", "image", "audio", "resource_link", "resource"]}},
    });
}

/// Generated once; the document never changes while the process runs.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    let mut document = serde_json::to_value(AdminApi::openapi()).unwrap_or_default();
    refine(&mut document);
    document.to_string()
});

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
