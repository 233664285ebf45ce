//! `/console/agents/{agent_id}/live`: the agent's streams open on this replica (era, key, subscriptions,
//! since when) and its latest change notifications. The page's script fetches `…/live/streams` every two
//! seconds and puts the fragment in place, so a stream that closes leaves the page within that time.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::response::Response;
use minijinja::{Value, context};

use super::auth::Console;
use super::view::{self, Result};
use crate::domain::model::Agent;
use crate::state::AppState;

/// Latest change events shown.
const LATEST: i64 = 20;

/// What the page and its fragment show.
async fn figures(state: &AppState, agent: &Agent) -> Result<Value> {
    let keys = state.store.list_keys(&agent.id, None, 1000).await?;
    let prefixes: HashMap<String, String> = keys.into_iter().map(|key| (key.id, key.prefix)).collect();
    let streams: Vec<Value> = state
        .hub
        .streams_of(&agent.id)
        .into_iter()
        .map(|stream| {
            let prefix = prefixes.get(&stream.key_id).cloned().unwrap_or_default();
            context! { stream, key_prefix => prefix }
        })
        .collect();
    let head = state.store.event_head(&agent.id).await?.map_or(0, |(_, seq)| seq);
    let mut events = state.store.events_after(&agent.id, head.saturating_sub(LATEST), LATEST as u32).await?;
    events.reverse();
    let events: Vec<Value> = events
        .into_iter()
        .map(|event| {
            context! {
                seq => event.seq,
                created_at => event.created_at,
                updated_uris => event.updated_uris,
                resources_list_changed => event.resources_list_changed,
                prompts_list_changed => event.prompts_list_changed,
            }
        })
        .collect();
    Ok(context! { agent => agent.clone(), streams, events })
}

/// `GET …/live`.
pub async fn page(State(state): State<AppState>, console: Console, Path(id): Path<String>) -> Result<Response> {
    let agent = console.agent(&state, &id).await?;
    let figures = figures(&state, &agent).await?;
    Ok(view::page(&console, "live.html", context! { title => format!("Live: {}", agent.id), ..figures }))
}

/// `GET …/live/streams`: the fragment the page's script refreshes.
pub async fn fragment(State(state): State<AppState>, console: Console, Path(id): Path<String>) -> Result<Response> {
    let agent = console.agent(&state, &id).await?;
    Ok(view::fragment("live_streams.html", figures(&state, &agent).await?))
}
