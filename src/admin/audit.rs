//! `GET /audit`: the audit log, newest first, filtered and paginated; `GET /audit/export`: the same as NDJSON,
//! streamed (operator only).

use axum::Json;
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt;

use super::access::OperatorAccess;
use super::extract::QueryParams;
use super::operation::operation;
use super::page::{Page, PageQuery};
use crate::domain::AgentId;
use crate::domain::model::{AuditFilter, AuditPosition, AuditRecord};
use crate::domain::time::Timestamp;
use crate::error::{ApiError, Problem};
use crate::registry::cursor::{InvalidCursor, ListKind};
use crate::state::AppState;
use crate::store::StoreError;

/// The filters of `GET /audit`, parsed from the query string; an empty parameter (`?agent=&since=`) is absent.
fn filter(params: &QueryParams) -> Result<AuditFilter, ApiError> {
    let given = |name: &str| -> Result<Option<&str>, ApiError> { Ok(params.get(name)?.filter(|v| !v.is_empty())) };
    let time = |name: &str| -> Result<Option<Timestamp>, ApiError> {
        given(name)?
            .map(|raw| {
                Timestamp::parse_rfc3339(raw)
                    .ok_or_else(|| ApiError::Unprocessable(format!("{name} {raw:?} is not an RFC 3339 time")))
            })
            .transpose()
    };
    Ok(AuditFilter {
        agent: given("agent")?.map(AgentId::parse).transpose()?,
        since: time("since")?,
        until: time("until")?,
        method: given("method")?.map(str::to_owned),
        key: given("key")?.map(str::to_owned),
        outcome: given("outcome")?.map(str::to_owned),
    })
}

/// The filters both audit endpoints take (documentation only: [`filter`] parses them).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
struct AuditQuery {
    /// Only this agent's records.
    agent: Option<String>,
    /// Records at or after this RFC 3339 time.
    since: Option<String>,
    /// Records before this RFC 3339 time.
    until: Option<String>,
    /// The MCP method, or the admin action (e.g. `resource.put`).
    method: Option<String>,
    /// MCP requests made with this key (its id or its prefix).
    key: Option<String>,
    /// MCP requests with this outcome: `ok` or `error`.
    outcome: Option<String>,
}

operation! {
    /// List audit records.
    get "/admin/v1/audit" as "listAudit", tag "audit",
        params(AuditQuery,
               ("limit" = Option<u32>, Query, description = "Page size, 1 to 1000 (default 100)"),
               ("cursor" = Option<String>, Query, description = "The `nextCursor` of the page before")),
        ok((status = 200, description = "Audit records, newest first", body = Page<AuditRecord>)),
        refused(400 "Malformed query or cursor", 422 "Invalid filter value");
    in "admin.list_audit";
    pub async fn list(state, _access: OperatorAccess, params: QueryParams) -> Json<Page<AuditRecord>> {
        Ok(Json(list_page(&state, &params).await?))
    }
}

/// A page of audit records for the query's filters and cursor: `GET /audit` and the console.
pub(crate) async fn list_page(state: &AppState, params: &QueryParams) -> Result<Page<AuditRecord>, ApiError> {
    let filter = filter(params)?;
    let page = PageQuery::from_params(params)?;
    let scope = filter.agent.as_ref().map(AgentId::as_str).unwrap_or("");
    let after = match page.after(&state.cursors, ListKind::Audit, scope)? {
        // A cursor is authenticated, so a key that is not a position was issued before cursors carried one.
        Some(key) => Some(AuditPosition::from_key(&key).ok_or(InvalidCursor)?),
        None => None,
    };
    let rows = state.store.list_audit(&filter, after.as_ref(), page.fetch_limit()).await?;
    Ok(Page::from_rows(rows, &page, state, ListKind::Audit, scope, |record| AuditPosition::of(record).to_key()))
}

/// Records per database query while exporting.
const EXPORT_PAGE: u32 = 1000;

operation! {
    /// Export audit records as NDJSON.
    get "/admin/v1/audit/export" as "exportAudit", tag "audit", params(AuditQuery),
        ok((status = 200, description = "Every matching record, newest first, one JSON object per line",
            body = AuditRecord, content_type = "application/x-ndjson")),
        refused(400 "Malformed query", 422 "Invalid filter value");
    in "admin.export_audit";
    pub async fn export(state, _access: OperatorAccess, params: QueryParams) -> Response {
        export_response(state, &params)
    }
}

/// Every record matching the query's filters as NDJSON, streamed: `GET /audit/export` and the console.
pub(crate) fn export_response(state: AppState, params: &QueryParams) -> Result<Response, ApiError> {
    let filter = filter(params)?;
    // Streamed page by page (keyset on the last record sent), so an export of any size holds one page.
    let pages = futures::stream::try_unfold(Some(None::<AuditPosition>), move |after| {
        let (state, filter) = (state.clone(), filter.clone());
        async move {
            let Some(after) = after else { return Ok(None) };
            let rows = state.store.list_audit(&filter, after.as_ref(), EXPORT_PAGE).await?;
            // The next state: after the last record of a full page; done after a short one.
            let next = match rows.last() {
                Some(last) if rows.len() == EXPORT_PAGE as usize => Some(Some(AuditPosition::of(last))),
                _ => None,
            };
            let mut lines = Vec::new();
            for record in &rows {
                serde_json::to_writer(&mut lines, record).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                lines.push(b'\n');
            }
            Ok::<_, StoreError>(Some((Bytes::from(lines), next)))
        }
    });
    let body = Body::from_stream(pages.inspect_err(|error| tracing::error!(%error, "audit export cut short")));
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}
