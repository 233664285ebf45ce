//! `/agents`: create, list, read, merge-patch and delete agents (operator only).

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::access::{ManagedAgent, OperatorAccess};
use super::extract::{JsonBody, merge_patch};
use super::operation::operation;
use super::page::{Page, PageQuery};
use crate::domain::AgentId;
use crate::domain::limits::{Field, FieldLimits};
use crate::domain::model::{Actor, Agent, AgentPatch, NewAgent, RateLimit, RateLimitPatch};
use crate::error::{ApiError, Problem};
use crate::registry::cursor::ListKind;
use crate::state::AppState;
use crate::store::StoreError;

/// The largest `cacheTtlMs`: what both databases store as a signed 64-bit integer.
const MAX_CACHE_TTL_MS: u64 = i64::MAX as u64;
/// The longest `auditRetentionDays`: a hundred years (0 keeps records forever).
const MAX_AUDIT_RETENTION_DAYS: u32 = 36_500;

/// A new agent.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateAgent {
    /// Not `admin`, `healthz`, `readyz`, `metrics` or `static`.
    #[schema(example = "research-bot", pattern = "^[a-z0-9][a-z0-9_-]{0,62}$")]
    pub id: String,
    /// Not blank.
    #[schema(example = "Research Assistant")]
    pub name: String,
    pub description: Option<String>,
    pub rate_limit: Option<RateLimit>,
    /// The `ttlMs` hint modern MCP clients get for this agent's lists and reads.
    #[schema(maximum = 9_223_372_036_854_775_807_i64)]
    pub cache_ttl_ms: Option<u64>,
    /// Days the agent's audit records are kept (0: forever); absent: `audit.retention_days` from the
    /// configuration (or its per-agent entry).
    #[schema(maximum = 36_500)]
    pub audit_retention_days: Option<u32>,
}

merge_patch! {
    /// A JSON merge-patch (RFC 7396) of an agent: absent fields stay, `null` clears an optional field.
    #[derive(Debug, Deserialize, utoipa::ToSchema)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct PatchAgent {
        /// Not blank; cannot be `null`.
        #[schema(value_type = String)]
        pub name: String,
        #[schema(value_type = Option<String>)]
        pub description: String,
        /// Merged into the agent's limit (members not given stay); `null` removes the limit.
        #[schema(value_type = Option<RateLimitBody>)]
        pub rate_limit: RateLimitBody,
        #[schema(value_type = Option<u64>, maximum = 9_223_372_036_854_775_807_i64)]
        pub cache_ttl_ms: u64,
        /// `null` goes back to the configured retention.
        #[schema(value_type = Option<u32>, maximum = 36_500)]
        pub audit_retention_days: u32,
    }
}

merge_patch! {
    /// `rateLimit` in a merge-patch: any member may be left out (it keeps its value), none may be `null`. A member
    /// left out of a patch of an agent or key that has no limit yet has nothing to keep (422).
    #[derive(Debug, Deserialize, utoipa::ToSchema)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct RateLimitBody {
        #[schema(value_type = u32, minimum = 1, maximum = 4_294_967_295_i64)]
        pub requests_per_second: u32,
        #[schema(value_type = u32, minimum = 1, maximum = 4_294_967_295_i64)]
        pub burst: u32,
        /// Counted by every replica together in the database (exact), rather than by each replica.
        #[schema(value_type = bool)]
        pub shared: bool,
    }
}

impl RateLimitBody {
    pub(super) fn into_patch(self) -> Result<RateLimitPatch, ApiError> {
        if self.shared == Some(None) {
            return Err(ApiError::Unprocessable("rateLimit.shared cannot be null".to_owned()));
        }
        let member = |value: Option<Option<u32>>, name: &str| match value {
            Some(None) => Err(ApiError::Unprocessable(format!(
                "rateLimit.{name} cannot be null (\"rateLimit\": null removes the whole limit)"
            ))),
            Some(Some(0)) => Err(ApiError::Unprocessable(format!("rateLimit.{name} must be at least 1"))),
            Some(Some(n)) => Ok(Some(n)),
            None => Ok(None),
        };
        Ok(RateLimitPatch {
            requests_per_second: member(self.requests_per_second, "requestsPerSecond")?,
            burst: member(self.burst, "burst")?,
            shared: self.shared.flatten(),
        })
    }
}

fn check_name(name: &str) -> Result<(), ApiError> {
    if name.trim().is_empty() {
        return Err(ApiError::Unprocessable("name must not be empty".to_owned()));
    }
    Ok(())
}

pub(super) fn check_rate_limit(limit: &RateLimit) -> Result<(), ApiError> {
    if limit.requests_per_second == 0 || limit.burst == 0 {
        return Err(ApiError::Unprocessable(
            "rateLimit.requestsPerSecond and rateLimit.burst must be at least 1".into(),
        ));
    }
    Ok(())
}

fn check_audit_retention(days: u32) -> Result<(), ApiError> {
    if days > MAX_AUDIT_RETENTION_DAYS {
        return Err(ApiError::Unprocessable(format!(
            "auditRetentionDays must be at most {MAX_AUDIT_RETENTION_DAYS} (0 keeps records forever)"
        )));
    }
    Ok(())
}

fn check_cache_ttl(ttl: u64) -> Result<(), ApiError> {
    if ttl > MAX_CACHE_TTL_MS {
        return Err(ApiError::Unprocessable(format!("cacheTtlMs must be at most {MAX_CACHE_TTL_MS}")));
    }
    Ok(())
}

impl CreateAgent {
    fn into_new(self, limits: &FieldLimits) -> Result<NewAgent, ApiError> {
        let id = AgentId::parse(&self.id)?;
        limits.text(Field::Name, "name", Some(&self.name))?;
        limits.text(Field::Description, "description", self.description.as_deref())?;
        check_name(&self.name)?;
        self.rate_limit.as_ref().map(check_rate_limit).transpose()?;
        self.cache_ttl_ms.map(check_cache_ttl).transpose()?;
        self.audit_retention_days.map(check_audit_retention).transpose()?;
        Ok(NewAgent {
            id,
            name: self.name,
            description: self.description,
            rate_limit: self.rate_limit,
            cache_ttl_ms: self.cache_ttl_ms,
            audit_retention_days: self.audit_retention_days,
        })
    }
}

impl PatchAgent {
    fn into_patch(self, limits: &FieldLimits) -> Result<AgentPatch, ApiError> {
        if let Some(Some(description)) = &self.description {
            limits.text(Field::Description, "description", Some(description))?;
        }
        let name = match self.name {
            Some(None) => return Err(ApiError::Unprocessable("name cannot be null".to_owned())),
            Some(Some(name)) => {
                limits.text(Field::Name, "name", Some(&name))?;
                check_name(&name)?;
                Some(name)
            }
            None => None,
        };
        let rate_limit = match self.rate_limit {
            Some(Some(body)) => Some(Some(body.into_patch()?)),
            Some(None) => Some(None),
            None => None,
        };
        if let Some(Some(ttl)) = self.cache_ttl_ms {
            check_cache_ttl(ttl)?;
        }
        if let Some(Some(days)) = self.audit_retention_days {
            check_audit_retention(days)?;
        }
        Ok(AgentPatch {
            name,
            description: self.description,
            rate_limit,
            cache_ttl_ms: self.cache_ttl_ms,
            audit_retention_days: self.audit_retention_days,
        })
    }
}

operation! {
    /// Create an agent.
    post "/admin/v1/agents" as "createAgent", tag "agents", request_body = CreateAgent,
        ok((status = 201, description = "Created", body = Agent)),
        refused(409 "An agent with this id exists", 422 "Invalid id or values");
    in "admin.create_agent";
    pub async fn create(state, access: OperatorAccess, JsonBody(body): JsonBody<CreateAgent>) -> Response {
        let agent = create_agent(&state, body, &access.actor).await?;
        let location = format!("/admin/v1/agents/{}", agent.id);
        Ok((StatusCode::CREATED, [(header::LOCATION, location)], Json(agent)).into_response())
    }
}

operation! {
    /// List agents, ordered by id.
    get "/admin/v1/agents" as "listAgents", tag "agents", params() paged,
        ok((status = 200, description = "A page of agents", body = Page<Agent>)), refused();
    in "admin.list_agents";
    pub async fn list(state, _access: OperatorAccess, page: PageQuery) -> Json<Page<Agent>> {
        let fetch = async |after: Option<&str>, limit| state.store.list_agents(after, limit).await;
        Ok(Json(page.load(&state, ListKind::Agents, "", fetch, |a| a.id.to_string()).await?))
    }
}

operation! {
    /// Read an agent.
    get "/admin/v1/agents/{agent_id}" as "getAgent", tag "agents", params(("agent_id" = String, Path)),
        ok((status = 200, description = "The agent", body = Agent)), refused(404 "No such agent");
    pub async fn get(access: ManagedAgent) -> Json<Agent> {
        Json(access.agent)
    }
}

operation! {
    /// Change an agent's name, description, rate limit, cache TTL or audit retention (JSON merge-patch).
    patch "/admin/v1/agents/{agent_id}" as "patchAgent", tag "agents", request_body = PatchAgent,
        params(("agent_id" = String, Path)), ok((status = 200, description = "The changed agent", body = Agent)),
        refused(404 "No such agent", 422 "Invalid values");
    in "admin.patch_agent" for access;
    pub async fn patch(state, access: ManagedAgent, JsonBody(body): JsonBody<PatchAgent>) -> Json<Agent> {
        Ok(Json(patch_agent(&state, &access.agent.id, body, &access.actor).await?))
    }
}

operation! {
    /// Delete an agent with its keys, registry and streams.
    delete "/admin/v1/agents/{agent_id}" as "deleteAgent", tag "agents", params(("agent_id" = String, Path)),
        ok((status = 204, description = "Deleted")), refused(404 "No such agent");
    in "admin.delete_agent" for access;
    pub async fn delete(state, access: ManagedAgent) -> StatusCode {
        delete_agent(&state, &access.agent.id, &access.actor).await?;
        Ok(StatusCode::NO_CONTENT)
    }
}

/// Validates a new agent and commits it with its event and audit rows: `POST /agents` and the console.
pub async fn create_agent(state: &AppState, body: CreateAgent, actor: &Actor) -> Result<Agent, ApiError> {
    let new = body.into_new(&state.config.limits.fields())?;
    state.store.create_agent(&new, actor).await.map_err(|error| match error {
        StoreError::Conflict => ApiError::Conflict(format!("agent {:?} already exists", new.id.as_str())),
        other => other.into(),
    })
}

/// Validates a merge-patch of an agent and commits it: `PATCH /agents/{agent_id}` and the console.
pub async fn patch_agent(
    state: &AppState,
    agent: &AgentId,
    body: PatchAgent,
    actor: &Actor,
) -> Result<Agent, ApiError> {
    let patch = body.into_patch(&state.config.limits.fields())?;
    state.store.update_agent(agent, &patch, actor).await.map_err(agent_missing)
}

/// Deletes an agent with its keys, registry and streams: `DELETE /agents/{agent_id}` and the console.
pub async fn delete_agent(state: &AppState, agent: &AgentId, actor: &Actor) -> Result<(), ApiError> {
    state.store.delete_agent(agent, actor).await.map_err(agent_missing)
}

fn agent_missing(error: StoreError) -> ApiError {
    match error {
        StoreError::NotFound => ApiError::NotFound("the agent does not exist".to_owned()),
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;
    use crate::admin::extract::body_status;

    fn patch(json: &str) -> Result<AgentPatch, StatusCode> {
        body_status(json, |body: PatchAgent| body.into_patch(&crate::config::LimitsConfig::default().fields()))
    }

    fn create(json: &str) -> Result<NewAgent, StatusCode> {
        body_status(json, |body: CreateAgent| body.into_new(&crate::config::LimitsConfig::default().fields()))
    }

    #[test]
    fn merge_patch() {
        let cleared = patch(r#"{"description": null, "rateLimit": null}"#).expect("valid");
        assert_eq!(cleared.description, Some(None));
        assert_eq!(cleared.rate_limit, Some(None));
        assert_eq!(cleared.name, None);
        assert_eq!(cleared.cache_ttl_ms, None);
        assert_eq!(patch(r#"{"name": null}"#).unwrap_err(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(patch(r#"{"id": "x"}"#).unwrap_err(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(patch(r#"{"cacheTtlMs": "x"}"#).unwrap_err(), StatusCode::BAD_REQUEST);
        assert!(patch("{}").is_ok());
    }

    #[test]
    fn create_checks_values() {
        assert!(
            create(r#"{"id": "research-bot", "name": "R", "rateLimit": {"requestsPerSecond": 5, "burst": 10}}"#)
                .is_ok()
        );
        assert_eq!(create(r#"{"id": "admin", "name": "R"}"#).unwrap_err(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(create(r#"{"id": "Bad", "name": "R"}"#).unwrap_err(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(create(r#"{"id": "a", "name": ""}"#).unwrap_err(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(create(r#"{"name": "R"}"#).unwrap_err(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(create(r#"{"id": 5, "name": "R"}"#).unwrap_err(), StatusCode::BAD_REQUEST);
        let zero = r#"{"id": "a", "name": "R", "rateLimit": {"requestsPerSecond": 0, "burst": 1}}"#;
        assert_eq!(create(zero).unwrap_err(), StatusCode::UNPROCESSABLE_ENTITY);
        let unknown = r#"{"id": "a", "name": "R", "rateLimit": {"rps": 1, "requestsPerSecond": 1, "burst": 1}}"#;
        assert_eq!(create(unknown).unwrap_err(), StatusCode::UNPROCESSABLE_ENTITY);
        let shared = r#"{"id": "a", "name": "R", "rateLimit": {"requestsPerSecond": 1, "burst": 1, "shared": true}}"#;
        assert!(create(shared).is_ok_and(|agent| agent.rate_limit.is_some_and(|limit| limit.shared)));
        let kept = create(r#"{"id": "a", "name": "R", "auditRetentionDays": 0}"#).expect("0 keeps forever");
        assert_eq!(kept.audit_retention_days, Some(0));
        assert_eq!(
            create(r#"{"id": "a", "name": "R", "auditRetentionDays": 40000}"#).unwrap_err(),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_eq!(
            create(r#"{"id": "a", "name": "R", "auditRetentionDays": -1}"#).unwrap_err(),
            StatusCode::UNPROCESSABLE_ENTITY
        );
    }

    #[test]
    fn merge_patch_of_shared_and_retention() {
        let shared = patch(r#"{"rateLimit": {"shared": true}, "auditRetentionDays": 7}"#).expect("valid");
        assert_eq!(shared.rate_limit.flatten().and_then(|limit| limit.shared), Some(true));
        assert_eq!(shared.audit_retention_days, Some(Some(7)));
        assert_eq!(patch(r#"{"auditRetentionDays": null}"#).expect("valid").audit_retention_days, Some(None));
        assert_eq!(patch(r#"{"rateLimit": {"shared": null}}"#).unwrap_err(), StatusCode::UNPROCESSABLE_ENTITY);
    }
}
