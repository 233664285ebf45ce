//! `/console/audit` (operator only): the audit log filtered by agent, key, method, outcome and time, paged
//! with the admin API's cursors; its NDJSON export; and, on request, the hash chains' verification
//! ([`crate::audit::verify`]), which reads every record of the chains it checks.

use axum::extract::{RawQuery, State};
use axum::response::Response;
use minijinja::context;

use super::auth::Console;
use super::form::Form;
use super::view::{self, Result};
use crate::admin::extract::QueryParams;
use crate::state::AppState;

/// Records per page.
const PAGE: &str = "50";

/// The filters of the form as the admin API takes them: a `datetime-local` value (`YYYY-MM-DDTHH:MM`) is
/// read as UTC.
fn params(form: &Form, with_page: bool) -> QueryParams {
    let mut pairs = Vec::new();
    for name in ["agent", "key", "method", "outcome"] {
        if let Some(value) = form.given(name) {
            pairs.push((name.to_owned(), value.to_owned()));
        }
    }
    for name in ["since", "until"] {
        if let Some(value) = form.given(name) {
            let value = if value.len() == 16 { format!("{value}:00Z") } else { value.to_owned() };
            pairs.push((name.to_owned(), value));
        }
    }
    if with_page {
        pairs.push(("limit".to_owned(), PAGE.to_owned()));
        if let Some(cursor) = form.given("cursor") {
            pairs.push(("cursor".to_owned(), cursor.to_owned()));
        }
    }
    QueryParams::from_pairs(pairs)
}

/// `GET /console/audit?agent=&key=&method=&outcome=&since=&until=&cursor=&verify=1`.
pub async fn page(State(state): State<AppState>, console: Console, raw: RawQuery) -> Result<Response> {
    console.require_operator()?;
    let form = Form::parse(raw.0.unwrap_or_default().as_bytes())?;
    let page = crate::admin::audit::list_page(&state, &params(&form, true)).await?;
    let filters: Vec<(String, String)> = ["agent", "key", "method", "outcome", "since", "until"]
        .into_iter()
        .filter_map(|name| form.given(name).map(|value| (name.to_owned(), value.to_owned())))
        .collect();
    let query = serde_urlencoded::to_string(&filters).unwrap_or_default();
    let next = page.next_cursor.as_ref().map(|cursor| {
        let cursor = serde_urlencoded::to_string([("cursor", cursor.as_str())]).unwrap_or_default();
        if query.is_empty() { cursor } else { format!("{query}&{cursor}") }
    });
    let verification = if form.get("verify").is_some() {
        let report = crate::audit::verify::verify(state.store.as_ref(), form.given("agent")).await?;
        let problems: Vec<String> = report
            .agents
            .iter()
            .filter_map(|(agent, outcome)| outcome.as_ref().err().map(|problem| format!("{agent}: {problem}")))
            .chain(report.streams.iter().map(|(stream, problem)| format!("stream {stream}: {problem}")))
            .collect();
        let records: u64 = report.agents.values().filter_map(|outcome| outcome.as_ref().ok()).sum();
        Some(context! { chains => report.agents.len(), records, problems })
    } else {
        None
    };
    let value = |name: &str| form.given(name).unwrap_or_default().to_owned();
    Ok(view::page(
        &console,
        "audit.html",
        context! {
            title => "Audit log",
            records => page.items, next, query, verification,
            agent => value("agent"), key => value("key"), method => value("method"),
            outcome => value("outcome"), since => value("since"), until => value("until"),
        },
    ))
}

/// `GET /console/audit/export?…`: the matching records as an NDJSON download.
pub async fn export(State(state): State<AppState>, console: Console, raw: RawQuery) -> Result<Response> {
    console.require_operator()?;
    let form = Form::parse(raw.0.unwrap_or_default().as_bytes())?;
    let mut response = crate::admin::audit::export_response(state, &params(&form, false))?;
    view::secure(&mut response);
    response.headers_mut().insert(
        axum::http::header::CONTENT_DISPOSITION,
        axum::http::HeaderValue::from_static("attachment; filename=\"audit.ndjson\""),
    );
    Ok(response)
}
