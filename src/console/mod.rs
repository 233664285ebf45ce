//! The web console at `/console/`: server-rendered pages for operators and agent owners.
//!
//! # Map
//!
//! - [`session`]: who signed in (the operator token, or an agent's `registry` key), their CSRF token, idle
//!   expiry; sessions live in this replica's memory.
//! - [`auth`]: sign-in and sign-out, and the [`auth::Console`] extractor every page takes: the session from
//!   the `hivegate_console` cookie, the key it was opened with still usable, the CSRF token of a change.
//! - [`view`]: the MiniJinja environment (templates embedded with `include_str!`, HTML autoescape on), the
//!   security headers every page carries (a strict Content-Security-Policy: no inline script, nothing from
//!   another origin) and the embedded assets under `/console/assets/`, named by their content's hash.
//! - [`form`]: URL-encoded and multipart form bodies, read within `limits.max_body_bytes`.
//! - [`overview`]: agents, requests, errors, open streams and the audit writer, from the figures of `/metrics`.
//! - [`agents`]: search, create, edit and delete agents; create, rename and revoke their keys.
//! - [`registry`]: resources as a tree by URI, templates with a "try a URI" box, prompts with a preview.
//! - [`live`]: an agent's open streams on this replica, refreshed by the page's script.
//! - [`audit`]: the audit log filtered and paged, its NDJSON export and the chains' verification.
//!
//! Every change goes through the functions the admin API's handlers call (`crate::admin::agents::create_agent`
//! and the like), which validate, store with the event and audit rows, and announce on the bus; the audit
//! record's actor is `console:operator` or `console:key:<key id>`.
//!
//! [`session`]: crate::console::session
//! [`auth`]: crate::console::auth
//! [`auth::Console`]: crate::console::auth::Console
//! [`view`]: crate::console::view
//! [`form`]: crate::console::form
//! [`overview`]: crate::console::overview
//! [`agents`]: crate::console::agents
//! [`live`]: crate::console::live

use axum::Router;
use axum::routing::{get, post};

use crate::registry::collection::{Prompts, Resources, Templates};
use crate::state::AppState;

/// `/console/agents…`: agents and their keys.
pub mod agents;
/// `/console/audit`: the audit log, its export and verification.
pub mod audit;
/// Sign-in, sign-out and the session extractor.
pub mod auth;
/// Form bodies.
pub mod form;
/// `/console/agents/{agent_id}/live`: open streams, refreshed live.
pub mod live;
/// `/console/`: the overview.
pub mod overview;
/// `/console/agents/{agent_id}/registry`: resources, templates, prompts.
pub mod registry;
/// Console sessions.
pub mod session;
/// Templates, security headers and assets.
pub mod view;

/// Where the console is served.
pub const PATH: &str = "/console";

/// The console's routes, merged into a listener's router; `is_tls`: whether the listener serves TLS, so that
/// the session cookie is marked `Secure` (as it is when `http.public_url` is `https://`, behind a proxy that
/// terminates TLS). A change answers once it has come back through the bus, as the admin API's do: a key
/// revoked on the console is refused on the very next request, on every replica.
pub fn router(state: &AppState, is_tls: bool) -> Router<AppState> {
    let is_tls = is_tls || state.config.http.public_url.as_deref().is_some_and(|url| url.starts_with("https://"));
    Router::new()
        .route("/console", get(view::to_index))
        .route("/console/", get(overview::page))
        .route("/console/sign-in", get(auth::sign_in_page).post(auth::sign_in))
        .route("/console/sign-out", post(auth::sign_out))
        .route("/console/assets/{file}", get(view::asset))
        .route("/console/agents", get(agents::list).post(agents::create))
        .route("/console/agents/{agent_id}", get(agents::page).post(agents::update))
        .route("/console/agents/{agent_id}/delete", post(agents::delete))
        .route("/console/agents/{agent_id}/keys", post(agents::create_key))
        .route("/console/agents/{agent_id}/keys/{key_id}/rename", post(agents::rename_key))
        .route("/console/agents/{agent_id}/keys/{key_id}/revoke", post(agents::revoke_key))
        .route("/console/agents/{agent_id}/registry", get(registry::page))
        .route("/console/agents/{agent_id}/resource", get(registry::resource).post(registry::put_resource))
        .route("/console/agents/{agent_id}/resource/download", get(registry::download))
        .route("/console/agents/{agent_id}/resource/upload", post(registry::upload))
        .route("/console/agents/{agent_id}/resource/delete", post(registry::delete::<Resources>))
        .route("/console/agents/{agent_id}/template", get(registry::template).post(registry::put_template))
        .route("/console/agents/{agent_id}/template/delete", post(registry::delete::<Templates>))
        .route("/console/agents/{agent_id}/prompt", get(registry::prompt).post(registry::put_prompt))
        .route("/console/agents/{agent_id}/prompt/delete", post(registry::delete::<Prompts>))
        .route("/console/agents/{agent_id}/live", get(live::page))
        .route("/console/agents/{agent_id}/live/streams", get(live::fragment))
        .route("/console/audit", get(audit::page))
        .route("/console/audit/export", get(audit::export))
        .layer(axum::middleware::from_fn_with_state(state.clone(), crate::http::settle_after_write))
        .layer(axum::middleware::map_response(view::secure_every))
        .layer(axum::Extension(auth::Transport { is_tls }))
}
