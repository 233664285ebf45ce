//! Who is calling and what they may touch. Checked in the contract's order before any body is read:
//! credentials (401) → the credential's rate limit (429, [`crate::guard`]) → permission (403) → the agent
//! exists (404).
//!
//! The operator token (`Authorization: Bearer`) may do everything. An agent key (`X-Agent-API-Key`)
//! with scope `registry` may manage its own agent's resources, templates and prompts, and nothing else.
//! On the admin API an `Authorization` header is only ever the operator token; `X-Agent-API-Key` wins
//! when both are present.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::extract::PathParams;
use crate::domain::model::{Actor, Agent, KeyRecord};
use crate::domain::{AgentId, Scope};
use crate::error::ApiError;
use crate::guard::Bucketed;
use crate::http::REQUEST_ID;
use crate::http::auth::{KEY_HEADER, KeyError};
use crate::state::AppState;

/// The authenticated caller.
#[derive(Debug, Clone)]
pub enum Caller {
    Operator,
    Key(Arc<Bucketed<KeyRecord>>),
}

impl Caller {
    #[tracing::instrument(name = "admin.authenticate", skip_all, fields(caller))]
    async fn authenticate(parts: &Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = if let Some(value) = parts.headers.get(&KEY_HEADER) {
            let presented = value.to_str().ok().map(str::trim);
            match state.keys.authenticate(presented).await {
                Ok(hit) => Caller::Key(hit.key),
                Err(KeyError::Unauthenticated) => {
                    return Err(ApiError::Unauthorized("the API key is unknown, revoked or expired".to_owned()));
                }
                Err(KeyError::Store(error)) => return Err(error.into()),
            }
        } else if parts.headers.contains_key(AUTHORIZATION) {
            if !state.operator.is_presented_in(&parts.headers) {
                return Err(ApiError::Unauthorized(
                    "the Authorization header does not carry the operator token".to_owned(),
                ));
            }
            Caller::Operator
        } else {
            return Err(ApiError::Unauthorized(
                "credentials required: Authorization: Bearer <operator token>, or X-Agent-API-Key".to_owned(),
            ));
        };
        let name = caller.name();
        tracing::Span::current().record("caller", name.as_str());
        take_admin_token(parts, state, &name).await?;
        Ok(caller)
    }

    /// `operator` or `key:<key id>`: how audit records name the caller.
    pub fn name(&self) -> String {
        match self {
            Caller::Operator => "operator".to_owned(),
            Caller::Key(record) => format!("key:{}", record.id),
        }
    }

    fn actor(&self, parts: &Parts) -> Actor {
        let request_id = parts.headers.get(REQUEST_ID).and_then(|v| v.to_str().ok()).map(str::to_owned);
        Actor { name: self.name(), request_id }
    }
}

fn forbidden_for_keys() -> ApiError {
    ApiError::Forbidden("agent keys may only manage their own agent's resources, templates and prompts".to_owned())
}

/// One token per request from the credential's admin bucket (the admin API's and the console's); 429 when it
/// is empty. The guard's middleware shows the fields.
pub async fn take_admin_token(parts: &Parts, state: &AppState, credential: &str) -> Result<(), ApiError> {
    state
        .guard
        .admin(credential)
        .await
        .settle(&parts.extensions, &state.metrics)
        .map_err(|retry_after| ApiError::TooManyRequests { retry_after })
}

/// The caller is the operator: agents and keys, the audit log.
#[derive(Debug)]
pub struct OperatorAccess {
    pub actor: Actor,
}

impl FromRequestParts<AppState> for OperatorAccess {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let caller = Caller::authenticate(parts, state).await?;
        if !matches!(caller, Caller::Operator) {
            return Err(forbidden_for_keys());
        }
        Ok(Self { actor: caller.actor(parts) })
    }
}

/// The operator, on an existing agent named by the path's `{agent_id}`.
#[derive(Debug)]
pub struct ManagedAgent {
    pub agent: Agent,
    pub actor: Actor,
}

impl FromRequestParts<AppState> for ManagedAgent {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let OperatorAccess { actor } = OperatorAccess::from_request_parts(parts, state).await?;
        let raw = PathParams::from_request_parts(parts, state).await?;
        let agent = existing_agent(state, raw.get("agent_id")?).await?;
        Ok(Self { agent, actor })
    }
}

/// The operator or a `registry` key of the path's agent, on an existing agent: its resources,
/// templates and prompts.
#[derive(Debug)]
pub struct RegistryAccess {
    pub agent: AgentId,
    pub actor: Actor,
}

impl FromRequestParts<AppState> for RegistryAccess {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let caller = Caller::authenticate(parts, state).await?;
        let raw = PathParams::from_request_parts(parts, state).await?;
        let agent_id = raw.get("agent_id")?;
        if let Caller::Key(record) = &caller {
            if record.agent_id.as_str() != agent_id {
                return Err(ApiError::Forbidden("this key belongs to another agent".to_owned()));
            }
            if !record.has_scope(Scope::Registry) {
                return Err(ApiError::Forbidden("this key lacks the registry scope".to_owned()));
            }
        }
        let agent = existing_agent(state, agent_id).await?;
        Ok(Self { agent: agent.id, actor: caller.actor(parts) })
    }
}

/// The agent with this id; 404 when it does not exist (or the id cannot be one).
async fn existing_agent(state: &AppState, id: &str) -> Result<Agent, ApiError> {
    let missing = || ApiError::NotFound(format!("agent {id:?} does not exist"));
    let id = AgentId::parse(id).map_err(|_| missing())?;
    state.store.get_agent(&id).await?.ok_or_else(missing)
}
