//! `resources/read`, in the contract's order: a stored resource with the exact URI wins (an
//! `inode/directory` one reads as itself followed by its direct children); otherwise the best template
//! with a `text` whose expansion matches renders it; otherwise the era's "resource not found".

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Answer, Items, McpMethod, MetaShape, find_compiled, params, render_bounded};
use crate::domain::model::{Content, Resource, ResourceTemplate};
use crate::domain::render::Compiled;
use crate::domain::{ResourceUri, UriTemplate};
use crate::mcp::dispatch::Context;
use crate::mcp::error::McpError;
use crate::mcp::types::{ReadResult, ResourceContents};
use crate::mcp::uri_match::{MatchBudget, match_uri_within};
use crate::metrics::ConfiguredLimit;
use crate::registry::cache::{Key, Loaded};
use crate::registry::collection::{Collection, Templates};
use crate::store::StoreError;

/// The MIME type that marks a directory resource.
pub const DIRECTORY_MIME: &str = "inode/directory";
/// A directory read returns at most this many contents (itself included) …
pub const DIRECTORY_MAX_CONTENTS: usize = 100;
/// … and at most this many content bytes in all.
pub const DIRECTORY_MAX_BYTES: u64 = 4 * 1024 * 1024;
/// Templates considered for template reads (an agent with more has the rest ignored).
const MAX_TEMPLATES: u32 = 1000;

/// A stored resource as cached: the resource, its content's size, and its MCP contents item serialised
/// once, when loaded.
pub struct StoredItem {
    pub resource: Resource,
    pub size: u64,
    pub item: Arc<RawValue>,
}

/// A stored resource (or its absence), as cached.
pub type Stored = Option<StoredItem>;

pub struct ReadResource {
    uri: String,
}

/// The params of `resources/read` this server reads (the SDK's type would copy `_meta` out of them).
#[derive(serde::Deserialize)]
struct ReadParams {
    #[serde(rename = "_meta", default)]
    _meta: Option<MetaShape>,
    uri: String,
}

impl McpMethod for ReadResource {
    type Output = Answer;

    fn parse(raw: Option<&Value>) -> Result<Self, McpError> {
        let parsed: ReadParams = params(raw)?;
        // Not a URI a resource could have (relative, malformed, longer than any may be): invalid params,
        // rather than a not-found, answered without touching the store or the cache.
        ResourceUri::parse(&parsed.uri).map_err(|error| McpError::InvalidParams(error.0))?;
        Ok(Self { uri: parsed.uri })
    }

    async fn apply(self, ctx: &Context<'_>) -> Result<Answer, McpError> {
        let contents = match stored(ctx, &self.uri).await?.as_ref() {
            Some(stored) if stored.resource.mime_type.as_deref() == Some(DIRECTORY_MIME) => {
                directory(ctx, stored).await?
            }
            Some(stored) => vec![stored.item.clone()],
            None => vec![serialised(&from_template(ctx, &self.uri).await?)?],
        };
        let result =
            ReadResult { result_type: ctx.result_type(), cache: ctx.cache_hints(), contents, meta: ctx.server_meta() };
        let (outline, contents) = result.outline().map_err(|error| {
            tracing::error!(%error, "could not serialise a read result");
            McpError::Internal
        })?;
        Ok(Answer::Around { outline, items: Items::Each(contents) })
    }
}

/// The stored resource at `uri` (or its absence), through the cache when small.
async fn stored(ctx: &Context<'_>, uri: &str) -> Result<Arc<Stored>, McpError> {
    let max = ctx.registry().max_content_bytes() as u64;
    // What the load owns is copied only on a miss.
    let load = || {
        let (store, agent, owned) = (ctx.registry().store().clone(), ctx.agent.id.clone(), uri.to_owned());
        async move {
            let Some((resource, content)) = store.get_resource(&agent, &owned).await? else {
                return Ok(Loaded { value: None, bytes: Some(owned.len()) });
            };
            let item = serde_json::value::to_raw_value(&contents_of(&resource, &content))
                .map_err(|error| StoreError::Corrupt(error.to_string()))?;
            let size = content.size();
            let bytes = (size <= max).then(|| item.get().len() + resource.uri.as_str().len() * 2);
            // What is kept, copied into the caches' arena (src/allocator.rs; the item's `Arc` is its copy
            // there); served once, it is not.
            let value = if bytes.is_some() {
                crate::allocator::in_cache_scope(|| StoredItem {
                    resource: resource.clone(),
                    size,
                    item: Arc::from(item),
                })
            } else {
                StoredItem { resource, size, item: Arc::from(item) }
            };
            Ok(Loaded { value: Some(value), bytes })
        }
    };
    let loaded = ctx.registry().get_or_load_linked(ctx.link, &ctx.agent.id, Key::Content(uri.into()), load).await?;
    Ok(loaded)
}

/// A contents item rendered for this request, serialised.
fn serialised(contents: &ResourceContents) -> Result<Arc<RawValue>, McpError> {
    serde_json::value::to_raw_value(contents).map(Arc::from).map_err(|error| {
        tracing::error!(%error, "could not serialise a resource's contents");
        McpError::Internal
    })
}

/// One content item: text as is, bytes as base64; the resource's own `mimeType`.
fn contents_of(resource: &Resource, content: &Content) -> ResourceContents {
    let uri = resource.uri.as_str().to_owned();
    let mime_type = resource.mime_type.clone();
    match content {
        Content::Text(text) => {
            ResourceContents::TextResourceContents { uri, mime_type, text: text.clone(), meta: None }
        }
        Content::Blob(bytes) => {
            ResourceContents::BlobResourceContents { uri, mime_type, blob: STANDARD.encode(bytes), meta: None }
        }
    }
}

/// The directory itself, then the resources directly below it in URI order, within the count and byte caps.
/// Children are chosen from their metadata (sizes) first; only the chosen ones' contents are loaded.
async fn directory(ctx: &Context<'_>, dir: &StoredItem) -> Result<Vec<Arc<RawValue>>, McpError> {
    let uri = dir.resource.uri.as_str();
    let prefix = if uri.ends_with('/') { uri.to_owned() } else { format!("{uri}/") };
    let mut contents = vec![dir.item.clone()];
    let mut total = dir.size;
    let limit = (DIRECTORY_MAX_CONTENTS - 1) as u32;
    let children = ctx.registry().store().directory_children(&ctx.agent.id, &prefix, limit).await?;
    for child in &children {
        if contents.len() >= DIRECTORY_MAX_CONTENTS || total + child.size > DIRECTORY_MAX_BYTES {
            break;
        }
        // Read through the content cache; a child deleted meanwhile is simply left out.
        if let Some(stored) = stored(ctx, child.uri.as_str()).await?.as_ref() {
            total += stored.size;
            contents.push(stored.item.clone());
        }
    }
    Ok(contents)
}

/// The agent's templates that can serve reads (with a `text` and a matchable template), as the registry
/// cache keeps them for matching: parsed, without their texts, so that the entry stays small however large
/// the texts are. The text of the one template a read renders is compiled and cached on its own
/// ([`template_text`]).
struct ReadableTemplates {
    templates: Vec<Readable>,
}

/// One template as matching needs it.
struct Readable {
    parsed: UriTemplate,
    uri_template: String,
    name: String,
    mime_type: Option<String>,
}

async fn readable_templates(ctx: &Context<'_>) -> Result<Arc<ReadableTemplates>, McpError> {
    let store = ctx.registry().store().clone();
    let agent = ctx.agent.id.clone();
    let templates = ctx
        .registry()
        .get_or_load_linked(ctx.link, &ctx.agent.id, Key::Templates, || async move {
            let rows = Templates::store(&*store).list(&agent, None, MAX_TEMPLATES).await?;
            let templates: Vec<Readable> = rows
                .into_iter()
                .filter(|row| row.text.is_some())
                .filter_map(|row| {
                    let parsed = UriTemplate::parse(&row.uri_template).ok()?;
                    let ResourceTemplate { uri_template, name, mime_type, .. } = row;
                    parsed.is_matchable().then_some(Readable { parsed, uri_template, name, mime_type })
                })
                .collect();
            // The parsed parts take about as much again as the template's text.
            let bytes = 1024
                + templates
                    .iter()
                    .map(|t| 3 * t.uri_template.len() + t.name.len() + t.mime_type.as_ref().map_or(0, String::len) + 64)
                    .sum::<usize>();
            Ok(Loaded { value: ReadableTemplates { templates }, bytes: Some(bytes) })
        })
        .await?;
    Ok(templates)
}

/// A template's text, checked and compiled once per replica for as long as the registry cache keeps it.
struct CompiledText {
    source: String,
    compiled: Compiled,
}

/// The compiled text of the template `uri_template`, through the cache; `None` when it has none (any
/// more). Compiling costs time in proportion to the text, so it runs on the blocking pool in the agent's
/// turn, like a costly render.
async fn template_text(ctx: &Context<'_>, uri_template: &str) -> Result<Option<Arc<CompiledText>>, McpError> {
    let cache_key = Key::TemplateText(uri_template.into());
    find_compiled::<Templates, _, _, _>(ctx, cache_key, uri_template.to_owned(), "a template's text", |row| {
        let source = row.text?;
        // Compiled instructions and the environments' tables take a multiple of the source.
        let bytes = 8 * 1024 + 17 * source.len();
        Some((bytes, move || {
            let compiled = Compiled::new([source.as_str()]);
            CompiledText { source, compiled }
        }))
    })
    .await
}

/// Renders the best matching template's `text` for `uri`: most literal characters, ties by name.
async fn from_template(ctx: &Context<'_>, uri: &str) -> Result<ResourceContents, McpError> {
    let readable = readable_templates(ctx).await?;
    // One budget for all the matching this read does, however many templates the agent has.
    let mut budget = MatchBudget::per_request();
    let best = readable
        .templates
        .iter()
        .filter_map(|template| {
            match_uri_within(&template.parsed, uri, &mut budget).map(|variables| (template, variables))
        })
        .min_by(|(a, _), (b, _)| b.parsed.literal_len().cmp(&a.parsed.literal_len()).then_with(|| a.name.cmp(&b.name)));
    let Some((template, variables)) = best else {
        return Err(ctx.not_found(uri));
    };
    // Changed since the list was cached: its change will drop both entries; until then, as if it matched
    // nothing.
    let Some(text) = template_text(ctx, &template.uri_template).await? else {
        return Err(ctx.not_found(uri));
    };
    // The variables are pieces of the URI, which is at most `MAX_URI_BYTES` long. Rendering is CPU work up
    // to the fuel limit: it is rendered here with the quick fuel, and only a text that runs out of it is
    // rendered again, with the full fuel and an output budget of its own, on the blocking pool (as
    // `prompts/get` does).
    let (rendered, budget) = render_bounded(ctx, &template.uri_template, move |budget| {
        text.compiled.render(&text.source, &variables, budget)
    })
    .await?;
    let text = rendered.map_err(|message| {
        if budget.is_spent() {
            // The URI's variables took the render over a render limit: the client's params, -32602.
            return McpError::OverLimit {
                limit: ConfiguredLimit::Template,
                message: format!("reading {uri}: {message}"),
            };
        }
        tracing::warn!(template = %template.uri_template, error = %message, "template text failed to render");
        McpError::Internal
    })?;
    let mime_type = Some(template.mime_type.clone().unwrap_or_else(|| "text/plain".to_owned()));
    Ok(ResourceContents::TextResourceContents { uri: uri.to_owned(), mime_type, text, meta: None })
}
