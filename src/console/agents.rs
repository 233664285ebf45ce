//! `/console/agents…` (operator only): search, create, edit and delete agents; create, rename and revoke
//! their keys. Each change is the admin API's own function ([`crate::admin::agents`], [`crate::admin::keys`]).

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use minijinja::context;

use super::auth::{Change, Console, OperatorChange};
use super::form::Form;
use super::view::{self, ConsoleError, Result};
use crate::admin::agents::{CreateAgent, PatchAgent, RateLimitBody};
use crate::admin::keys::{CreateKey, PatchKey};
use crate::admin::{agents, keys};
use crate::domain::Scope;
use crate::domain::model::RateLimit;
use crate::error::ApiError;
use crate::state::AppState;

/// Agents shown on one page of the list.
const PAGE: usize = 100;
/// Agents read per query while searching, and the most queries one search makes (a bounded cost).
const SCAN_PAGE: u32 = 500;
const SCAN_PAGES: usize = 20;

/// `GET /console/agents?q=&after=`: agents whose id or name contains `q`, in id order.
pub async fn list(State(state): State<AppState>, console: Console, query: axum::extract::RawQuery) -> Result<Response> {
    console.require_operator()?;
    let query = Form::parse(query.0.unwrap_or_default().as_bytes())?;
    let needle = query.given("q").unwrap_or_default().to_lowercase();
    let mut after = query.given("after").map(str::to_owned);
    let mut found = Vec::new();
    let mut next = None;
    'scan: for _ in 0..SCAN_PAGES {
        let rows = state.store.list_agents(after.as_deref(), SCAN_PAGE).await?;
        let is_last = rows.len() < SCAN_PAGE as usize;
        for agent in rows {
            after = Some(agent.id.to_string());
            if needle.is_empty() || agent.id.as_str().contains(&needle) || agent.name.to_lowercase().contains(&needle) {
                found.push(agent);
                if found.len() == PAGE {
                    next = after.clone();
                    break 'scan;
                }
            }
        }
        if is_last {
            break;
        }
        next = after.clone();
    }
    let next = next.map(|after| {
        serde_urlencoded::to_string([("q", needle.as_str()), ("after", after.as_str())]).unwrap_or_default()
    });
    Ok(view::page(&console, "agents.html", context! { title => "Agents", agents => found, q => needle, next }))
}

/// A rate limit from `{prefix}rps`, `{prefix}burst` and `{prefix}shared`: `None` when both numbers are blank.
fn rate_limit(form: &Form, prefix: &str) -> Result<Option<RateLimit>> {
    let rps = form.number::<u32>(&format!("{prefix}rps"), "requests per second")?;
    let burst = form.number::<u32>(&format!("{prefix}burst"), "burst")?;
    let shared = form.get(&format!("{prefix}shared")).is_some();
    match (rps, burst) {
        (None, None) => Ok(None),
        (Some(requests_per_second), Some(burst)) => Ok(Some(RateLimit { requests_per_second, burst, shared })),
        _ => Err(ApiError::Unprocessable("a rate limit needs both requests per second and burst".into()).into()),
    }
}

/// `POST /console/agents`: create an agent.
pub async fn create(State(state): State<AppState>, console: Console, form: Form) -> Result<Response> {
    console.require_operator()?;
    console.check_csrf(&form)?;
    let body = CreateAgent {
        id: form.get("id").unwrap_or_default().trim().to_owned(),
        name: form.get("name").unwrap_or_default().to_owned(),
        description: form.given("description").map(str::to_owned),
        rate_limit: rate_limit(&form, "")?,
        cache_ttl_ms: form.number("cache_ttl_ms", "cache TTL")?,
        audit_retention_days: form.number("audit_retention_days", "audit retention")?,
    };
    let agent = agents::create_agent(&state, body, &console.actor()).await?;
    Ok(Redirect::to(&format!("/console/agents/{}", agent.id)).into_response())
}

/// `GET /console/agents/{agent_id}`: the agent's settings and keys.
pub async fn page(State(state): State<AppState>, console: Console, Path(id): Path<String>) -> Result<Response> {
    console.require_operator()?;
    let agent = console.agent(&state, &id).await?;
    let keys = state.store.list_keys(&agent.id, None, 1000).await?;
    Ok(view::page(&console, "agent.html", context! { title => format!("Agent {}", agent.id), agent, keys }))
}

/// `POST /console/agents/{agent_id}`: change its settings; a blank optional field clears it.
pub async fn update(State(state): State<AppState>, OperatorChange(change): OperatorChange) -> Result<Response> {
    let Change { console, agent, form, .. } = change;
    let limit = rate_limit(&form, "")?.map(|limit| RateLimitBody {
        requests_per_second: Some(Some(limit.requests_per_second)),
        burst: Some(Some(limit.burst)),
        shared: Some(Some(limit.shared)),
    });
    let body = PatchAgent {
        name: Some(Some(form.get("name").unwrap_or_default().to_owned())),
        description: Some(form.given("description").map(str::to_owned)),
        rate_limit: Some(limit),
        cache_ttl_ms: Some(form.number("cache_ttl_ms", "cache TTL")?),
        audit_retention_days: Some(form.number("audit_retention_days", "audit retention")?),
    };
    agents::patch_agent(&state, &agent.id, body, &console.actor()).await?;
    Ok(Redirect::to(&format!("/console/agents/{}", agent.id)).into_response())
}

/// `POST /console/agents/{agent_id}/delete`: `confirm` must repeat the agent's id.
pub async fn delete(State(state): State<AppState>, OperatorChange(change): OperatorChange) -> Result<Response> {
    let Change { console, agent, form, .. } = change;
    if form.get("confirm").map(str::trim) != Some(agent.id.as_str()) {
        return Err(ConsoleError::Api(ApiError::Unprocessable(
            "type the agent's id in the confirmation box to delete it".to_owned(),
        )));
    }
    agents::delete_agent(&state, &agent.id, &console.actor()).await?;
    Ok(Redirect::to("/console/agents").into_response())
}

/// An expiry from a `datetime-local` input (`YYYY-MM-DDTHH:MM`, taken as UTC) or RFC 3339.
fn expiry(raw: Option<&str>) -> Option<String> {
    raw.map(|raw| match raw.len() {
        16 => format!("{raw}:00Z"),
        19 => format!("{raw}Z"),
        _ => raw.to_owned(),
    })
}

/// `POST /console/agents/{agent_id}/keys`: create a key; the page shows the secret this once.
pub async fn create_key(State(state): State<AppState>, OperatorChange(change): OperatorChange) -> Result<Response> {
    let Change { console, agent, form, .. } = change;
    let scopes = form
        .all("scope")
        .into_iter()
        .map(|scope| match scope {
            "mcp" => Ok(Scope::Mcp),
            "registry" => Ok(Scope::Registry),
            other => Err(ConsoleError::Api(ApiError::Unprocessable(format!("unknown scope {other:?}")))),
        })
        .collect::<Result<Vec<_>>>()?;
    let body = CreateKey {
        name: form.given("name").map(str::to_owned),
        scopes: Some(scopes),
        expires_at: expiry(form.given("expires_at")),
        rate_limit: rate_limit(&form, "")?,
    };
    let created = keys::create_key(&state, &agent.id, body, &console.actor()).await?;
    Ok(view::page(&console, "key_created.html", context! { title => "Key created", agent, key => created }))
}

/// `POST /console/agents/{agent_id}/keys/{key_id}/rename`: a blank name clears it.
pub async fn rename_key(State(state): State<AppState>, OperatorChange(change): OperatorChange) -> Result<Response> {
    let key_id = change.param("key_id").to_owned();
    let Change { console, agent, form, .. } = change;
    let body = PatchKey { name: Some(form.given("name").map(str::to_owned)), rate_limit: None };
    keys::patch_key(&state, &agent.id, &key_id, body, &console.actor()).await?;
    Ok(Redirect::to(&format!("/console/agents/{}", agent.id)).into_response())
}

/// `POST /console/agents/{agent_id}/keys/{key_id}/revoke`.
pub async fn revoke_key(State(state): State<AppState>, OperatorChange(change): OperatorChange) -> Result<Response> {
    let key_id = change.param("key_id").to_owned();
    let Change { console, agent, .. } = change;
    keys::revoke_key(&state, &agent.id, &key_id, &console.actor()).await?;
    Ok(Redirect::to(&format!("/console/agents/{}", agent.id)).into_response())
}
