//! `/agents/{agent_id}/keys`: create, list, merge-patch (name, own rate limit) and revoke an agent's API keys
//! (operator only).
//!
//! The plain key exists only in the answer that creates it; the store keeps its digest.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::access::ManagedAgent;
use super::agents::{RateLimitBody, check_rate_limit};
use super::extract::{JsonBody, PathParams, merge_patch};
use super::operation::operation;
use super::page::{Page, PageQuery};
use crate::domain::limits::Field;
use crate::domain::model::{Actor, KeyPatch, KeyRecord, NewKey, RateLimit};
use crate::domain::time::Timestamp;
use crate::domain::{AgentId, ApiKey, Scope};
use crate::error::{ApiError, Problem};
use crate::registry::cursor::ListKind;
use crate::state::AppState;
use crate::store::StoreError;

/// A new key. Scopes default to `["mcp"]`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateKey {
    #[schema(example = "ci")]
    pub name: Option<String>,
    /// `mcp` (read over MCP) and/or `registry` (manage the agent's registry through this API).
    #[schema(min_items = 1)]
    pub scopes: Option<Vec<Scope>>,
    /// RFC 3339, in the future.
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    /// The key's own request budget, instead of `rate_limits.key_*` from the configuration.
    pub rate_limit: Option<RateLimit>,
}

merge_patch! {
    /// A JSON merge-patch (RFC 7396) of a key: absent fields stay, `null` clears.
    #[derive(Debug, Deserialize, utoipa::ToSchema)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct PatchKey {
        #[schema(value_type = Option<String>)]
        pub name: String,
        /// Merged into the key's own limit (members not given stay); `null` goes back to the configured one.
        #[schema(value_type = Option<RateLimitBody>)]
        pub rate_limit: RateLimitBody,
    }
}

impl PatchKey {
    fn into_patch(self) -> Result<KeyPatch, ApiError> {
        let rate_limit = match self.rate_limit {
            Some(Some(body)) => Some(Some(body.into_patch()?)),
            Some(None) => Some(None),
            None => None,
        };
        Ok(KeyPatch { name: self.name, rate_limit })
    }
}

/// The created key, with the plain `key`, shown this once.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedKey {
    pub id: String,
    pub name: Option<String>,
    /// The first 12 characters of the key.
    pub prefix: String,
    pub scopes: Vec<Scope>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// `bak_...`: store it now, it is never shown again.
    pub key: String,
}

impl CreateKey {
    /// The validated scopes (duplicates collapsed, order kept) and expiry.
    fn check(&self, now: Timestamp) -> Result<(Vec<Scope>, Option<Timestamp>), ApiError> {
        let scopes = match &self.scopes {
            None => vec![Scope::Mcp],
            Some(list) if list.is_empty() => {
                return Err(ApiError::Unprocessable("scopes must name at least one of mcp, registry".to_owned()));
            }
            Some(list) => list.iter().fold(Vec::new(), |mut unique, scope| {
                if !unique.contains(scope) {
                    unique.push(*scope);
                }
                unique
            }),
        };
        let expires_at = match &self.expires_at {
            None => None,
            Some(raw) => {
                let at = Timestamp::parse_rfc3339(raw).ok_or_else(|| {
                    ApiError::Unprocessable(format!("expiresAt {raw:?} is not an RFC 3339 date-time"))
                })?;
                if at <= now {
                    return Err(ApiError::Unprocessable("expiresAt must be in the future".to_owned()));
                }
                Some(at)
            }
        };
        self.rate_limit.as_ref().map(check_rate_limit).transpose()?;
        Ok((scopes, expires_at))
    }
}

operation! {
    /// Create a key for the agent.
    post "/admin/v1/agents/{agent_id}/keys" as "createKey", tag "keys", request_body = CreateKey,
        params(("agent_id" = String, Path)),
        ok((status = 201, description = "Created; `key` is shown only here", body = CreatedKey)),
        refused(404 "No such agent", 422 "Unknown scope, empty scopes, expiry in the past, a rate limit of 0");
    in "admin.create_key" for access;
    pub async fn create(state, access: ManagedAgent, JsonBody(body): JsonBody<CreateKey>) -> Response {
        let created = create_key(&state, &access.agent.id, body, &access.actor).await?;
        // The answer holds the only copy of the key: no cache may keep it.
        Ok((StatusCode::CREATED, [(axum::http::header::CACHE_CONTROL, "no-store")], Json(created)).into_response())
    }
}

operation! {
    /// List the agent's keys (never the keys themselves), ordered by creation.
    get "/admin/v1/agents/{agent_id}/keys" as "listKeys", tag "keys", params(("agent_id" = String, Path)) paged,
        ok((status = 200, description = "A page of keys", body = Page<KeyRecord>)), refused(404 "No such agent");
    in "admin.list_keys" for access;
    pub async fn list(state, access: ManagedAgent, page: PageQuery) -> Json<Page<KeyRecord>> {
        let agent = &access.agent.id;
        let fetch = async |after: Option<&str>, limit| state.store.list_keys(agent, after, limit).await;
        Ok(Json(page.load(&state, ListKind::Keys, agent.as_str(), fetch, |k| k.id.clone()).await?))
    }
}

operation! {
    /// Change a key's name or own rate limit (JSON merge-patch); applies from its next request on every replica.
    patch "/admin/v1/agents/{agent_id}/keys/{key_id}" as "patchKey", tag "keys", request_body = PatchKey,
        params(("agent_id" = String, Path), ("key_id" = String, Path)),
        ok((status = 200, description = "The changed key", body = KeyRecord)),
        refused(404 "No such agent or key",
                409 "The key is revoked: it keeps the name and limit it was revoked with",
                422 "Invalid values");
    in "admin.patch_key" for access;
    pub async fn patch(
        state, access: ManagedAgent, path: PathParams, JsonBody(body): JsonBody<PatchKey>,
    ) -> Json<KeyRecord> {
        let key_id = path.get("key_id")?;
        Ok(Json(patch_key(&state, &access.agent.id, key_id, body, &access.actor).await?))
    }
}

operation! {
    /// Revoke a key: it is refused from the next request on, on every replica.
    delete "/admin/v1/agents/{agent_id}/keys/{key_id}" as "revokeKey", tag "keys",
        params(("agent_id" = String, Path), ("key_id" = String, Path)),
        ok((status = 204, description = "Revoked")), refused(404 "No such agent or key");
    in "admin.revoke_key" for access;
    pub async fn revoke(state, access: ManagedAgent, path: PathParams) -> StatusCode {
        revoke_key(&state, &access.agent.id, path.get("key_id")?, &access.actor).await?;
        Ok(StatusCode::NO_CONTENT)
    }
}

/// Validates a new key, generates it and commits its digest with the audit row: `POST .../keys` and the
/// console. The answer holds the only copy of the plain key.
pub async fn create_key(
    state: &AppState,
    agent: &AgentId,
    body: CreateKey,
    actor: &Actor,
) -> Result<CreatedKey, ApiError> {
    let (scopes, expires_at) = body.check(Timestamp::now())?;
    state.config.limits.fields().text(Field::Name, "name", body.name.as_deref())?;
    let key = ApiKey::generate();
    let new = NewKey {
        id: uuid::Uuid::now_v7().to_string(),
        agent_id: agent.clone(),
        name: body.name,
        prefix: key.display_prefix(),
        digest: state.hasher.digest(key.expose()).to_hex(),
        scopes,
        expires_at,
        rate_limit: body.rate_limit,
    };
    let record = state.store.create_key(&new, actor).await.map_err(|error| match error {
        StoreError::NotFound => ApiError::NotFound("the agent does not exist".to_owned()),
        other => other.into(),
    })?;
    tracing::info!(key_id = %record.id, "key created");
    Ok(CreatedKey {
        id: record.id,
        name: record.name,
        prefix: record.prefix,
        scopes: record.scopes,
        created_at: record.created_at,
        expires_at: record.expires_at,
        rate_limit: record.rate_limit,
        key: key.expose().to_owned(),
    })
}

/// Validates a merge-patch of a key and commits it: `PATCH .../keys/{key_id}` and the console.
pub async fn patch_key(
    state: &AppState,
    agent: &AgentId,
    key_id: &str,
    body: PatchKey,
    actor: &Actor,
) -> Result<KeyRecord, ApiError> {
    if let Some(Some(name)) = &body.name {
        state.config.limits.fields().text(Field::Name, "name", Some(name))?;
    }
    let patch = body.into_patch()?;
    state.store.update_key(agent, key_id, &patch, actor).await.map_err(|error| match error {
        StoreError::Conflict => ApiError::Conflict(format!("key {key_id:?} is revoked; a revoked key cannot change")),
        other => key_missing(other, key_id),
    })
}

/// Revokes a key, on every replica from its next request: `DELETE .../keys/{key_id}` and the console.
pub async fn revoke_key(state: &AppState, agent: &AgentId, key_id: &str, actor: &Actor) -> Result<(), ApiError> {
    state.store.revoke_key(agent, key_id, actor).await.map_err(|error| key_missing(error, key_id))
}

/// The store's `NotFound` for a key of the path's agent as a 404 naming it.
fn key_missing(error: StoreError, key_id: &str) -> ApiError {
    match error {
        StoreError::NotFound => ApiError::NotFound(format!("key {key_id:?} does not exist")),
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::extract::body_status;

    fn check(json: &str) -> Result<(Vec<Scope>, Option<Timestamp>), StatusCode> {
        body_status(json, |body: CreateKey| body.check(Timestamp::now()))
    }

    #[test]
    fn scopes() {
        assert_eq!(check("{}").map(|(s, _)| s), Ok(vec![Scope::Mcp]));
        assert_eq!(
            check(r#"{"scopes": ["registry", "mcp", "registry"]}"#).map(|(s, _)| s),
            Ok(vec![Scope::Registry, Scope::Mcp])
        );
        assert_eq!(check(r#"{"scopes": []}"#), Err(StatusCode::UNPROCESSABLE_ENTITY));
        assert_eq!(check(r#"{"scopes": ["admin"]}"#), Err(StatusCode::UNPROCESSABLE_ENTITY));
        assert_eq!(check(r#"{"scopes": "mcp"}"#), Err(StatusCode::BAD_REQUEST));
        assert_eq!(check(r#"{"key": "bak_x"}"#), Err(StatusCode::UNPROCESSABLE_ENTITY));
    }

    #[test]
    fn own_rate_limit() {
        assert!(check(r#"{"rateLimit": {"requestsPerSecond": 5, "burst": 10, "shared": true}}"#).is_ok());
        assert_eq!(
            check(r#"{"rateLimit": {"requestsPerSecond": 0, "burst": 1}}"#),
            Err(StatusCode::UNPROCESSABLE_ENTITY)
        );
        assert_eq!(check(r#"{"rateLimit": {"burst": 1}}"#), Err(StatusCode::UNPROCESSABLE_ENTITY));
    }

    #[test]
    fn expiry() {
        assert!(check(r#"{"expiresAt": "2999-01-01T00:00:00Z"}"#).is_ok_and(|(_, at)| at.is_some()));
        assert_eq!(check(r#"{"expiresAt": "2000-01-01T00:00:00Z"}"#), Err(StatusCode::UNPROCESSABLE_ENTITY));
        assert_eq!(check(r#"{"expiresAt": "tomorrow"}"#), Err(StatusCode::UNPROCESSABLE_ENTITY));
        assert_eq!(check(r#"{"expiresAt": null}"#).map(|(_, at)| at), Ok(None));
    }
}
