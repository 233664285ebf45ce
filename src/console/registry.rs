//! `/console/agents/{agent_id}/registry`, `…/resource`, `…/template`, `…/prompt`: an agent's registry, for
//! the operator and for the agent's `registry` keys.
//!
//! Resources are shown as a tree by URI (`<details>` elements: directories expand without script). Changes
//! go through the admin API's functions ([`crate::admin::collection`] and the like). The template's "try a
//! URI" box, the prompt's preview and its completion suggestions run the MCP methods themselves
//! (`resources/read`, `prompts/get`, `completion/complete`) against the agent, so they show what a client
//! would be answered.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Multipart, Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use minijinja::context;
use serde::Serialize;
use serde_json::{Value, json};

use super::auth::{AgentPage, Change, Console};
use super::form::Form;
use super::view::{self, ConsoleError, Result};
use crate::admin::collection::{self, AdminCollection};
use crate::admin::prompts::PromptBody;
use crate::admin::resources::ResourceBody;
use crate::admin::templates::TemplateBody;
use crate::domain::model::{Agent, Content, KeyRecord, Resource};
use crate::domain::time::Timestamp;
use crate::domain::{PromptName, Scope};
use crate::error::ApiError;
use crate::mcp::dispatch::Context;
use crate::mcp::era::Era;
use crate::mcp::methods::completion::Complete;
use crate::mcp::methods::prompts::GetPrompt;
use crate::mcp::methods::read::ReadResource;
use crate::mcp::methods::{McpMethod, run};
use crate::registry::collection::{Collection, Prompts, Resources, Templates};
use crate::state::AppState;

/// Items of each kind the registry page lists.
const LISTED: u32 = 1000;

/// One level of the resource tree: a directory's children by name, and the resource at this path if any.
#[derive(Debug, Default, Serialize)]
struct Node {
    name: String,
    /// `uri=…`, URL-encoded, for the links to the resource.
    query: Option<String>,
    resource: Option<Resource>,
    children: Vec<Node>,
}

/// The URI's parts as tree levels: `scheme://authority`, then each path segment.
fn levels(uri: &str) -> Vec<String> {
    let (root, rest) = match uri.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            (format!("{scheme}://{authority}"), path)
        }
        None => match uri.split_once(':') {
            Some((scheme, path)) => (format!("{scheme}:"), path),
            None => (uri.to_owned(), ""),
        },
    };
    std::iter::once(root).chain(rest.split('/').filter(|s| !s.is_empty()).map(str::to_owned)).collect()
}

/// The resources as a tree by URI, directories before files at each level, in name order.
fn tree(resources: Vec<Resource>) -> Vec<Node> {
    #[derive(Default)]
    struct Building {
        resource: Option<Resource>,
        children: BTreeMap<String, Building>,
    }
    fn finish(name: String, building: Building) -> Node {
        let mut children: Vec<Node> = building.children.into_iter().map(|(name, child)| finish(name, child)).collect();
        children.sort_by_key(|node| node.children.is_empty());
        let query = building.resource.as_ref().map(|resource| uri_query("uri", resource.uri.as_str()));
        Node { name, query, resource: building.resource, children }
    }
    let mut root = Building::default();
    for resource in resources {
        let mut at = &mut root;
        for level in levels(resource.uri.as_str()) {
            at = at.children.entry(level).or_default();
        }
        at.resource = Some(resource);
    }
    finish(String::new(), root).children
}

/// `name=value`, URL-encoded.
fn uri_query(name: &str, value: &str) -> String {
    serde_urlencoded::to_string([(name, value)]).unwrap_or_default()
}

/// How the console names an item of a registry collection.
pub trait ConsoleCollection: AdminCollection {
    /// The page of one item (`/console/agents/{agent_id}/<PAGE>`), and with `/delete` where it is deleted.
    const PAGE: &'static str;
    /// The form field and query parameter that name the item on that page.
    const FIELD: &'static str;
}

impl ConsoleCollection for Resources {
    const PAGE: &'static str = "resource";
    const FIELD: &'static str = "uri";
}

impl ConsoleCollection for Templates {
    const PAGE: &'static str = "template";
    const FIELD: &'static str = "uri_template";
}

impl ConsoleCollection for Prompts {
    const PAGE: &'static str = "prompt";
    const FIELD: &'static str = "name";
}

/// The first [`LISTED`] items of a collection, in key order.
async fn listed<C: Collection>(state: &AppState, agent: &Agent) -> Result<Vec<C::Item>> {
    Ok(C::store(&*state.store).list(&agent.id, None, LISTED).await?)
}

/// The item a page's query names (`None` when it names none, for a new one); 404 when there is no such item.
async fn requested<C: ConsoleCollection>(state: &AppState, agent: &Agent, query: &Form) -> Result<Option<C::Item>> {
    let Some(raw) = query.given(C::FIELD) else { return Ok(None) };
    let key = C::parse_key(raw)?;
    let item = C::store(&*state.store).get(&agent.id, &key).await?;
    Ok(Some(item.ok_or_else(|| collection::missing::<C>(raw))?))
}

/// `GET /console/agents/{agent_id}/registry`.
pub async fn page(State(state): State<AppState>, console: Console, Path(id): Path<String>) -> Result<Response> {
    let agent = console.agent(&state, &id).await?;
    let resources = listed::<Resources>(&state, &agent).await?;
    let is_truncated = resources.len() == LISTED as usize;
    let templates: Vec<_> = listed::<Templates>(&state, &agent)
        .await?
        .into_iter()
        .map(|template| context! { query => uri_query(Templates::FIELD, &template.uri_template), template })
        .collect();
    let prompts = listed::<Prompts>(&state, &agent).await?;
    Ok(view::page(
        &console,
        "registry.html",
        context! {
            title => format!("Registry of {}", agent.id),
            agent, tree => tree(resources), is_truncated, templates, prompts,
        },
    ))
}

/// `GET …/resource?uri=`: a resource's details, its text in an edit form; without `uri`, a new one.
pub async fn resource(State(state): State<AppState>, page: AgentPage) -> Result<Response> {
    let AgentPage { console, agent, query } = page;
    let (resource, text) = match query.given("uri") {
        None => (None, None),
        Some(uri) => {
            let missing = || ApiError::NotFound(format!("resource {uri:?} does not exist"));
            let (resource, content) = state.store.get_resource(&agent.id, uri).await?.ok_or_else(missing)?;
            let text = match content {
                Content::Text(text) => Some(text),
                Content::Blob(_) => None,
            };
            (Some(resource), text)
        }
    };
    let title = resource.as_ref().map_or("New resource".to_owned(), |r| format!("Resource {}", r.uri));
    let query = resource.as_ref().map(|resource| uri_query("uri", resource.uri.as_str()));
    Ok(view::page(&console, "resource.html", context! { title, agent, resource, text, query }))
}

/// The admin API's body of a resource or template from its console form: the key field (named as in the
/// form) trimmed, `name` as typed, `title`, `description` and `mime_type` when not blank, then the body's
/// own fields.
macro_rules! described_body {
    ($body:ident { $key:ident } from $form:ident, $($own:ident $(: $value:expr)?),*) => {
        $body {
            $key: $form.get(stringify!($key)).unwrap_or_default().trim().to_owned(),
            name: $form.get("name").unwrap_or_default().to_owned(),
            title: $form.given("title").map(str::to_owned),
            description: $form.given("description").map(str::to_owned),
            mime_type: $form.given("mime_type").map(str::to_owned),
            $($own $(: $value)?),*
        }
    };
}

/// `POST …/resource`: create or replace a text resource.
pub async fn put_resource(State(state): State<AppState>, change: Change) -> Result<Response> {
    let Change { console, agent, form, .. } = change;
    let text = Some(form.get("text").unwrap_or_default().replace("\r\n", "\n"));
    let body = described_body!(ResourceBody { uri } from form, annotations: None, meta: None, text, blob: None);
    put_resource_body(&state, &console, &agent, body).await
}

/// Validates and stores a resource of the console's forms, then shows it.
async fn put_resource_body(state: &AppState, console: &Console, agent: &Agent, body: ResourceBody) -> Result<Response> {
    let limits = &state.config.limits;
    let new = body.into_new(limits.max_resource_bytes, &limits.fields())?;
    put::<Resources>(state, console, agent, &new).await
}

/// Stores a validated item with the console's actor, then shows it on its page.
async fn put<C: ConsoleCollection>(
    state: &AppState,
    console: &Console,
    agent: &Agent,
    new: &C::New,
) -> Result<Response> {
    let upserted = collection::store_item::<C>(state, &agent.id, new, &console.actor()).await?;
    let query = uri_query(C::FIELD, C::key(&upserted.item));
    Ok(Redirect::to(&format!("/console/agents/{}/{}?{query}", agent.id, C::PAGE)).into_response())
}

/// `POST …/resource/upload` (multipart): a file as a resource, its MIME type guessed from its name; text
/// when it is UTF-8 of a `text/*` type, else a blob.
pub async fn upload(
    State(state): State<AppState>,
    console: Console,
    Path(id): Path<String>,
    mut multipart: Multipart,
) -> Result<Response> {
    let bad = |error: axum::extract::multipart::MultipartError| {
        ConsoleError::Api(ApiError::BadRequest(format!("the upload is not a valid multipart form: {error}")))
    };
    let mut fields = Vec::new();
    let mut file = None;
    while let Some(field) = multipart.next_field().await.map_err(bad)? {
        let name = field.name().unwrap_or_default().to_owned();
        if name == "file" {
            let file_name = field.file_name().unwrap_or_default().to_owned();
            file = Some((file_name, field.bytes().await.map_err(bad)?));
        } else {
            fields.push((name, field.text().await.map_err(bad)?));
        }
    }
    let form = Form::from_fields(fields);
    let agent = console.change(&state, &id, &form).await?;
    let Some((file_name, bytes)) = file.filter(|(name, _)| !name.is_empty()) else {
        return Err(ApiError::Unprocessable("choose a file to upload".to_owned()).into());
    };
    let mime = mime_guess::from_path(&file_name).first_or_octet_stream();
    let (text, blob) = match std::str::from_utf8(&bytes) {
        Ok(text) if mime.type_() == mime_guess::mime::TEXT => (Some(text.to_owned()), None),
        _ => (None, Some(STANDARD.encode(&bytes))),
    };
    let body = ResourceBody {
        uri: form.given("uri").map_or_else(|| format!("file:///{file_name}"), str::to_owned),
        name: form.given("name").unwrap_or(&file_name).to_owned(),
        title: None,
        description: form.given("description").map(str::to_owned),
        mime_type: Some(mime.essence_str().to_owned()),
        annotations: None,
        meta: None,
        text,
        blob,
    };
    put_resource_body(&state, &console, &agent, body).await
}

/// `GET …/resource/download?uri=`: the content as an attachment (never rendered in the console's origin).
pub async fn download(State(state): State<AppState>, page: AgentPage) -> Result<Response> {
    let AgentPage { agent, query, .. } = page;
    let uri = query.given("uri").ok_or_else(|| ApiError::Unprocessable("uri is required".to_owned()))?;
    let missing = || ApiError::NotFound(format!("resource {uri:?} does not exist"));
    let (_, content) = state.store.get_resource(&agent.id, uri).await?.ok_or_else(missing)?;
    let bytes = match content {
        Content::Text(text) => text.into_bytes(),
        Content::Blob(bytes) => bytes,
    };
    let file_name: String = uri
        .rsplit('/')
        .next()
        .unwrap_or("resource")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .collect();
    let file_name = if file_name.is_empty() { "resource".to_owned() } else { file_name };
    let mut response = (
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_DISPOSITION, format!("attachment; filename=\"{file_name}\"")),
        ],
        bytes,
    )
        .into_response();
    view::secure(&mut response);
    Ok(response)
}

/// `POST …/resource/delete`, `…/template/delete`, `…/prompt/delete`: the item the form names.
pub async fn delete<C: ConsoleCollection>(State(state): State<AppState>, change: Change) -> Result<Response> {
    let Change { console, agent, form, .. } = change;
    let raw = form.get(C::FIELD).unwrap_or_default();
    collection::delete_item::<C>(&state, &agent.id, raw, &console.actor()).await?;
    Ok(Redirect::to(&format!("/console/agents/{}/registry", agent.id)).into_response())
}

/// Why a method run as a client gave no answer to show; `Display` is what the page shows.
#[derive(Debug, thiserror::Error)]
enum AsClientError {
    /// The answer could not be pretty-printed.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// The method answered with an error.
    #[error("error {}: {}", .0.code(), .0)]
    Method(crate::mcp::error::McpError),
}

/// Runs one MCP method against the agent as its clients' requests do, with a stand-in for the key (the
/// methods run here read nothing of it): the answer's result, pretty-printed, or its error.
async fn as_client<M: McpMethod>(
    state: &AppState,
    agent: &Agent,
    params: Value,
) -> std::result::Result<String, AsClientError> {
    let key = KeyRecord {
        id: "console".to_owned(),
        agent_id: agent.id.clone(),
        name: None,
        prefix: String::new(),
        scopes: vec![Scope::Mcp],
        created_at: Timestamp::now(),
        expires_at: None,
        last_used_at: None,
        revoked_at: None,
        rate_limit: None,
    };
    let ctx = Context {
        state,
        agent: Arc::new(crate::guard::Bucketed::new(agent.clone())),
        key: &key,
        session: None,
        era: Era::Modern,
        slot: None,
        link: None,
    };
    match run::<M>(&ctx, Some(&params)).await {
        Ok(answer) => {
            let mut out = Vec::with_capacity(answer.json_len());
            answer.write(&mut out);
            let value: Value = serde_json::from_slice(&out)?;
            Ok(serde_json::to_string_pretty(&value)?)
        }
        Err(error) => Err(AsClientError::Method(error)),
    }
}

/// `GET …/template?uri_template=&try=`: a template's form and, with `try`, what `resources/read` answers
/// for that URI; without `uri_template`, a new one.
pub async fn template(State(state): State<AppState>, page: AgentPage) -> Result<Response> {
    let AgentPage { console, agent, query } = page;
    let template = requested::<Templates>(&state, &agent, &query).await?;
    let tried = query.given("try").map(str::to_owned);
    let read = match &tried {
        Some(uri) => Some(as_client::<ReadResource>(&state, &agent, json!({ "uri": uri })).await),
        None => None,
    };
    let (read_ok, read_error) = match read {
        Some(Ok(json)) => (Some(json), None),
        Some(Err(error)) => (None, Some(error.to_string())),
        None => (None, None),
    };
    let title =
        template.as_ref().map_or("New resource template".to_owned(), |t| format!("Template {}", t.uri_template));
    Ok(view::page(&console, "template.html", context! { title, agent, template, tried, read_ok, read_error }))
}

/// `POST …/template`: create or replace a resource template.
pub async fn put_template(State(state): State<AppState>, change: Change) -> Result<Response> {
    let Change { console, agent, form, .. } = change;
    let text = form.given("text").map(|text| text.replace("\r\n", "\n"));
    let body = described_body!(TemplateBody { uri_template } from form, annotations: None, text);
    let new = body.into_new(&state.config.limits.fields())?;
    put::<Templates>(&state, &console, &agent, &new).await
}

/// `GET …/prompt?name=&arg.<name>=…&preview=1`: a prompt's form, and with `preview` what `prompts/get`
/// answers for the arguments given and what `completion/complete` suggests for each; without `name`, a new one.
pub async fn prompt(State(state): State<AppState>, page: AgentPage) -> Result<Response> {
    let AgentPage { console, agent, query } = page;
    let prompt = requested::<Prompts>(&state, &agent, &query).await?;
    let mut arguments = Vec::new();
    let mut rendered = None;
    let mut render_error = None;
    if let Some(prompt) = &prompt {
        let mut given = serde_json::Map::new();
        for argument in &prompt.arguments {
            let value = query.get(&format!("arg.{}", argument.name)).unwrap_or_default().to_owned();
            let completions = if query.get("preview").is_some() {
                let params = json!({
                    "ref": { "type": "ref/prompt", "name": prompt.name.as_str() },
                    "argument": { "name": argument.name, "value": value },
                });
                Some(as_client::<Complete>(&state, &agent, params).await.unwrap_or_else(|error| error.to_string()))
            } else {
                None
            };
            if !value.is_empty() {
                given.insert(argument.name.clone(), Value::String(value.clone()));
            }
            arguments.push(context! { argument => argument.clone(), value, completions });
        }
        if query.get("preview").is_some() {
            let params = json!({ "name": prompt.name.as_str(), "arguments": given });
            match as_client::<GetPrompt>(&state, &agent, params).await {
                Ok(json) => rendered = Some(json),
                Err(error) => render_error = Some(error.to_string()),
            }
        }
    }
    let (arguments_json, messages_json) = match &prompt {
        Some(prompt) => (
            serde_json::to_string_pretty(&prompt.arguments).unwrap_or_default(),
            serde_json::to_string_pretty(&prompt.messages).unwrap_or_default(),
        ),
        None => (
            "[]".to_owned(),
            "[\n  {\"role\": \"user\", \"content\": {\"type\": \"text\", \"text\": \"Hello {{ name }}\"}}\n]"
                .to_owned(),
        ),
    };
    let title = prompt.as_ref().map_or("New prompt".to_owned(), |p| format!("Prompt {}", p.name));
    Ok(view::page(
        &console,
        "prompt.html",
        context! { title, agent, prompt, arguments, rendered, render_error, arguments_json, messages_json },
    ))
}

/// `POST …/prompt`: create or replace a prompt; its arguments and messages are JSON, as in the admin API.
pub async fn put_prompt(State(state): State<AppState>, change: Change) -> Result<Response> {
    let Change { console, agent, form, .. } = change;
    let name = PromptName::parse(form.get("name").unwrap_or_default().trim()).map_err(ApiError::from)?;
    // The body the admin API would be sent, read by the same deserializer.
    let mut body = serde_json::Map::new();
    for (field, name) in [("arguments", "arguments"), ("messages", "messages")] {
        let raw = form.given(field).unwrap_or("[]");
        let value = crate::admin::extract::parse_json(raw.as_bytes())
            .map_err(|_| ApiError::BadRequest(format!("{name} is not valid JSON")))?;
        body.insert(name.to_owned(), value);
    }
    for field in ["title", "description"] {
        if let Some(value) = form.given(field) {
            body.insert(field.to_owned(), Value::String(value.to_owned()));
        }
    }
    let body: PromptBody = crate::admin::extract::from_value(Value::Object(body), "")?;
    let new = body.into_new(name, &state.config.limits.fields())?;
    put::<Prompts>(&state, &console, &agent, &new).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_split_into_levels() {
        assert_eq!(levels("file:///docs/a.txt"), ["file://", "docs", "a.txt"]);
        assert_eq!(levels("test://static/x"), ["test://static", "x"]);
        assert_eq!(levels("urn:isbn:1"), ["urn:", "isbn:1"]);
    }
}
