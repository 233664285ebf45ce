//! `/agents/{agent_id}/oauth-subjects`: which subjects of the external authorization server may use an
//! agent over MCP, and as which of its keys (operator only; `oauth.mode = "external"`).
//!
//! A grant binds (issuer, subject) to one key of the agent: the subject's access tokens act as that key, so
//! its scopes, rate limit, expiry and revocation apply. Grants are made under the configured `oauth.issuer`;
//! those made under an issuer configured before are listed with it and can be deleted with `?issuer=`.
//! An agent holds at most `oauth.max_subjects_per_agent` grants, of subjects of at most
//! `oauth.max_subject_bytes` bytes.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::access::ManagedAgent;
use super::extract::{JsonBody, PathParams, QueryParams};
use super::operation::operation;
use super::page::{Page, PageQuery};
use crate::domain::subject::SubjectGrant;
use crate::domain::time::Timestamp;
use crate::error::{ApiError, Problem};
use crate::registry::cursor::ListKind;
use crate::state::AppState;
use crate::store::{StoreError, subject_sort_key};

/// The key a subject's tokens act as.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PutSubject {
    /// The id of a usable key of the agent (not revoked, not expired); give it scope `mcp`.
    pub key_id: String,
}

/// The configured issuer grants are made under; 409 while there is none.
fn issuer(state: &AppState) -> Result<&str, ApiError> {
    match state.oauth.external() {
        Some(external) => Ok(external.issuer()),
        None => Err(ApiError::Conflict(
            "subject grants are for an external authorization server: set oauth.mode = \"external\" and \
             oauth.issuer"
                .to_owned(),
        )),
    }
}

/// The path's `{subject}`, checked: 1 byte to `oauth.max_subject_bytes` (413 beyond), no control character.
fn subject<'a>(state: &AppState, path: &'a PathParams) -> Result<&'a str, ApiError> {
    let subject = path.get("subject")?;
    let max = state.config.oauth.max_subject_bytes;
    if subject.len() > max {
        return Err(ApiError::PayloadTooLarge(format!(
            "subject is {} bytes, more than the {max} allowed (oauth.max_subject_bytes)",
            subject.len()
        )));
    }
    if subject.is_empty() || subject.chars().any(char::is_control) {
        return Err(ApiError::Unprocessable("subject must be non-empty and hold no control character".to_owned()));
    }
    Ok(subject)
}

operation! {
    /// Grant a subject of the configured issuer on the agent, as one of its keys (replacing its grant).
    put "/admin/v1/agents/{agent_id}/oauth-subjects/{subject}" as "putOauthSubject", tag "oauth subjects",
        request_body = PutSubject,
        params(("agent_id" = String, Path),
               ("subject" = String, Path, description = "The `sub` of the issuer's tokens, percent-encoded")),
        ok((status = 201, description = "Granted", body = SubjectGrant),
           (status = 200, description = "Replaced", body = SubjectGrant)),
        refused(404 "No such agent",
                409 "OAuth is not external, or the agent holds oauth.max_subjects_per_agent grants",
                413 "The subject is longer than oauth.max_subject_bytes",
                422 "No usable key of the agent with this id, or an invalid subject");
    in "admin.put_oauth_subject" for access;
    pub async fn put(
        state, access: ManagedAgent, path: PathParams, JsonBody(body): JsonBody<PutSubject>,
    ) -> Response {
        let issuer = issuer(&state)?;
        let subject = subject(&state, &path)?;
        let now = Timestamp::now();
        let grant = SubjectGrant {
            agent_id: access.agent.id.clone(),
            issuer: issuer.to_owned(),
            subject: subject.to_owned(),
            key_id: body.key_id,
            created_at: now,
            updated_at: now,
        };
        let max = state.config.oauth.max_subjects_per_agent;
        let stored = state.store.put_oauth_subject(&grant, max, &access.actor).await?;
        let status = if stored.created { StatusCode::CREATED } else { StatusCode::OK };
        Ok((status, Json(stored.item)).into_response())
    }
}

operation! {
    /// List the agent's subject grants, by issuer and subject.
    get "/admin/v1/agents/{agent_id}/oauth-subjects" as "listOauthSubjects", tag "oauth subjects",
        params(("agent_id" = String, Path)) paged,
        ok((status = 200, description = "A page of grants", body = Page<SubjectGrant>)), refused(404 "No such agent");
    in "admin.list_oauth_subjects" for access;
    pub async fn list(state, access: ManagedAgent, page: PageQuery) -> Json<Page<SubjectGrant>> {
        let agent = &access.agent.id;
        let fetch = async |after: Option<&str>, limit| state.store.list_oauth_subjects(agent, after, limit).await;
        let sort_key = |grant: &SubjectGrant| subject_sort_key(&grant.issuer, &grant.subject);
        Ok(Json(page.load(&state, ListKind::OauthSubjects, agent.as_str(), fetch, sort_key).await?))
    }
}

operation! {
    /// One grant of a subject of the configured issuer.
    get "/admin/v1/agents/{agent_id}/oauth-subjects/{subject}" as "getOauthSubject", tag "oauth subjects",
        params(("agent_id" = String, Path), ("subject" = String, Path)),
        ok((status = 200, description = "The grant", body = SubjectGrant)),
        refused(404 "No such agent or grant", 409 "OAuth is not external",
                413 "The subject is longer than oauth.max_subject_bytes",
                422 "An empty subject, or one with a control character");
    in "admin.get_oauth_subject" for access;
    pub async fn get(state, access: ManagedAgent, path: PathParams) -> Json<SubjectGrant> {
        let issuer = issuer(&state)?;
        let subject = subject(&state, &path)?;
        let grant = state.store.get_oauth_subject(&access.agent.id, issuer, subject).await?;
        grant.map(Json).ok_or_else(|| missing(subject))
    }
}

operation! {
    /// Withdraw a grant: the subject's tokens are refused from the next request on, on every replica.
    delete "/admin/v1/agents/{agent_id}/oauth-subjects/{subject}" as "deleteOauthSubject", tag "oauth subjects",
        params(("agent_id" = String, Path), ("subject" = String, Path),
               ("issuer" = Option<String>, Query, description = "The issuer the grant was made under; default: oauth.issuer")),
        ok((status = 204, description = "Deleted")),
        refused(404 "No such agent or grant", 409 "No issuer given and OAuth is not external",
                413 "The subject is longer than oauth.max_subject_bytes",
                422 "An empty subject, or one with a control character");
    in "admin.delete_oauth_subject" for access;
    pub async fn delete(state, access: ManagedAgent, path: PathParams, query: QueryParams) -> StatusCode {
        let subject = subject(&state, &path)?;
        let issuer = match query.get("issuer")? {
            Some(issuer) => issuer,
            None => issuer(&state)?,
        };
        let deleted = state.store.delete_oauth_subject(&access.agent.id, issuer, subject, &access.actor).await;
        deleted.map_err(|error| match error {
            StoreError::NotFound => missing(subject),
            other => other.into(),
        })?;
        Ok(StatusCode::NO_CONTENT)
    }
}

fn missing(subject: &str) -> ApiError {
    ApiError::NotFound(format!("subject {subject:?} has no grant on this agent"))
}
