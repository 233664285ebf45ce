//! `resources/list`, `resources/templates/list` and `prompts/list`: one list method over the registry's
//! collections (cursors, pages of 100 from the registry cache), and the MCP shapes of stored records.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Answer, Items, McpMethod, MetaShape, params};
use crate::domain::model::{Resource, ResourceTemplate};
use crate::domain::time::Timestamp;
use crate::mcp::dispatch::Context;
use crate::mcp::error::McpError;
use crate::mcp::types::{Annotations, ListResult, McpResource, McpResourceTemplate, MetaObject};
use crate::registry::cache::{Key, Loaded};
use crate::registry::collection::{Collection, Resources, Templates};
use crate::registry::cursor::ListKind;
use crate::store::{StoreError, StoreResult};

/// Items per MCP list page (the contract's wire decision).
pub const PAGE_SIZE: u32 = 100;

/// A page of a list as the registry cache keeps it: the items already serialised as a JSON array.
pub struct Page {
    pub items: Box<RawValue>,
    /// The sort key of the page's last item when another page follows.
    pub last: Option<String>,
}

impl Page {
    /// A page from up to `PAGE_SIZE + 1` items (one more than a page shows, to learn whether more follow),
    /// ending early, with the sort key of its last item, where the next item would take its items past
    /// `max_bytes` of JSON (a page holds at least one item, which the field limits bound).
    pub fn from_items<T: Serialize>(
        items: Vec<T>,
        sort_key: impl Fn(&T) -> String,
        max_bytes: usize,
    ) -> StoreResult<Self> {
        let corrupt = |error: serde_json::Error| StoreError::Corrupt(error.to_string());
        let mut json = Vec::with_capacity(1024);
        json.push(b'[');
        let mut last = None;
        for (index, item) in items.iter().enumerate() {
            if index == PAGE_SIZE as usize {
                last = items.get(index - 1).map(&sort_key);
                break;
            }
            let start = json.len();
            if index > 0 {
                json.push(b',');
            }
            serde_json::to_writer(&mut json, item).map_err(corrupt)?;
            // The closing bracket counts too.
            if index > 0 && json.len() + 1 > max_bytes {
                json.truncate(start);
                last = items.get(index - 1).map(&sort_key);
                break;
            }
        }
        json.push(b']');
        let json = String::from_utf8(json).map_err(|error| StoreError::Corrupt(error.to_string()))?;
        let items = RawValue::from_string(json).map_err(corrupt)?;
        Ok(Self { items, last })
    }

    fn bytes(&self) -> usize {
        self.items.get().len() + self.last.as_ref().map_or(0, String::len)
    }
}

/// Answers a list request: decodes the cursor (invalid → -32602), serves the page from the cache (loading
/// it once), and wraps it in the era's result shape under `key`.
pub(crate) async fn list<F, Fut>(
    ctx: &Context<'_>,
    kind: ListKind,
    key: &'static str,
    cursor: Option<String>,
    load: F,
) -> Result<Answer, McpError>
where
    F: FnOnce(Option<String>) -> Fut,
    Fut: Future<Output = StoreResult<Page>>,
{
    let agent = ctx.agent.id.as_str();
    let after = match cursor {
        Some(cursor) => ctx
            .state
            .cursors
            .decode(kind, agent, &cursor)
            .map_err(|_| McpError::InvalidParams("invalid cursor".to_owned()))?,
        None => None,
    };
    let cache_key = Key::Page(key, after.clone());
    let page: Arc<Page> = ctx
        .registry()
        .get_or_load_linked(ctx.link, &ctx.agent.id, cache_key, || async move {
            let page = load(after).await?;
            let bytes = page.bytes();
            // Copied into the caches' arena, where it is kept (src/allocator.rs).
            let page = crate::allocator::in_cache_scope(|| Page { items: page.items.clone(), last: page.last.clone() });
            Ok(Loaded { value: page, bytes: Some(bytes) })
        })
        .await?;
    let result = ListResult {
        key,
        items: &page.items,
        next_cursor: page.last.as_deref().map(|last| ctx.state.cursors.encode(kind, agent, last)),
        result_type: ctx.result_type(),
        cache: ctx.cache_hints(),
        meta: ctx.server_meta(),
    };
    let outline = result.outline().map_err(|_| McpError::Internal)?;
    Ok(Answer::Around { outline, items: Items::Page(page) })
}

/// The params of a list request this server reads (the SDK's type would copy `_meta` out of them).
#[derive(serde::Deserialize)]
struct PageParams {
    #[serde(rename = "_meta", default)]
    _meta: Option<MetaShape>,
    #[serde(default)]
    cursor: Option<String>,
}

/// The cursor of a list request (`_meta` and unknown fields are ignored).
pub(crate) fn cursor(raw: Option<&Value>) -> Result<Option<String>, McpError> {
    let parsed: PageParams = params(raw)?;
    Ok(parsed.cursor)
}

/// How MCP lists show the items of a registry collection.
pub(crate) trait McpCollection: Collection {
    /// An item as a list shows it.
    type Listed: Serialize;

    fn listed(item: &Self::Item) -> Self::Listed;
}

impl McpCollection for Resources {
    type Listed = McpResource;

    fn listed(resource: &Resource) -> McpResource {
        mcp_resource(resource)
    }
}

impl McpCollection for Templates {
    type Listed = McpResourceTemplate;

    fn listed(template: &ResourceTemplate) -> McpResourceTemplate {
        mcp_template(template)
    }
}

/// A stored item serialised as its list shows it.
struct Listing<'a, C: McpCollection>(&'a C::Item);

impl<C: McpCollection> Serialize for Listing<'_, C> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        C::listed(self.0).serialize(serializer)
    }
}

/// `resources/list` (resources in URI order, without content), `resources/templates/list` (templates in
/// `uriTemplate` order, their `text` never shown) and `prompts/list` (prompts in name order): a collection's
/// items in key order, a page of them from the registry cache.
pub struct List<C> {
    cursor: Option<String>,
    kind: PhantomData<C>,
}

/// `resources/list`.
pub type ListResources = List<Resources>;
/// `resources/templates/list`.
pub type ListTemplates = List<Templates>;

impl<C: McpCollection> McpMethod for List<C> {
    type Output = Answer;

    fn parse(raw: Option<&Value>) -> Result<Self, McpError> {
        Ok(Self { cursor: cursor(raw)?, kind: PhantomData })
    }

    async fn apply(self, ctx: &Context<'_>) -> Result<Answer, McpError> {
        let store = ctx.registry().store().clone();
        let agent = ctx.agent.id.clone();
        let max_bytes = ctx.state.config.limits.max_page_bytes;
        list(ctx, C::LIST, C::MCP_KEY, self.cursor, |after| async move {
            let rows = C::store(&*store).list(&agent, after.as_deref(), PAGE_SIZE + 1).await?;
            let items = rows.iter().map(Listing::<C>).collect();
            Page::from_items(items, |listing: &Listing<C>| C::key(listing.0).to_owned(), max_bytes)
        })
        .await
    }
}

/// A stored resource as MCP lists it: `size` included, `lastModified` filled from the last change.
pub fn mcp_resource(resource: &Resource) -> McpResource {
    let mut listed = McpResource::new(resource.uri.as_str(), resource.name.clone());
    listed.title = resource.title.clone();
    listed.description = resource.description.clone();
    listed.mime_type = resource.mime_type.clone();
    listed.size = Some(resource.size);
    listed.annotations =
        Some(annotations(resource.annotations.as_ref(), Some(resource.updated_at)).unwrap_or_default());
    listed.meta = meta_object(resource.meta.as_ref());
    listed
}

/// A stored template as MCP lists it.
pub fn mcp_template(template: &ResourceTemplate) -> McpResourceTemplate {
    let mut listed = McpResourceTemplate::new(template.uri_template.clone(), template.name.clone());
    listed.title = template.title.clone();
    listed.description = template.description.clone();
    listed.mime_type = template.mime_type.clone();
    listed.annotations = annotations(template.annotations.as_ref(), None);
    listed
}

/// Annotations as the agent gave them (the admin API validated them), with `lastModified` filled in when
/// `last_modified` is given and the agent set none.
fn annotations(given: Option<&Value>, last_modified: Option<Timestamp>) -> Option<Annotations> {
    let mut annotations = match given.map(|value| serde_json::from_value::<Annotations>(value.clone())) {
        Some(Ok(annotations)) => Some(annotations),
        Some(Err(error)) => {
            tracing::warn!(%error, "stored annotations do not parse; leaving them out");
            None
        }
        None => None,
    };
    if let Some(at) = last_modified {
        let filled = annotations.get_or_insert_with(Annotations::default);
        if filled.last_modified.is_none() {
            filled.last_modified = Some(at.to_rfc3339());
        }
    }
    annotations
}

/// A stored `_meta` object.
pub fn meta_object(meta: Option<&Value>) -> Option<MetaObject> {
    meta.and_then(Value::as_object).map(|map| MetaObject(map.clone()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn annotations_are_kept_and_filled() {
        let at = Timestamp::parse_rfc3339("2026-01-02T03:04:05Z").expect("time");
        let given = json!({"audience": ["user"], "priority": 0.8});
        let filled = serde_json::to_string(&annotations(Some(&given), Some(at))).expect("json");
        assert_eq!(filled, r#"{"audience":["user"],"priority":0.8,"lastModified":"2026-01-02T03:04:05.000Z"}"#);
        let own = json!({"lastModified": "2025-01-12T15:00:58Z"});
        let kept = annotations(Some(&own), Some(at)).expect("annotations");
        assert_eq!(kept.last_modified.as_deref(), Some("2025-01-12T15:00:58Z"));
        assert!(annotations(None, None).is_none());
    }

    #[test]
    fn pages_know_whether_more_follow() {
        let full: Vec<u32> = (0..=PAGE_SIZE).collect();
        let page = Page::from_items(full.clone(), |n| n.to_string(), usize::MAX).expect("page");
        assert_eq!(page.last.as_deref(), Some("99"));
        assert_eq!(page.items.get(), serde_json::to_string(&full[..100]).expect("json"));
        let short = Page::from_items(vec![1, 2], |n: &i32| n.to_string(), usize::MAX).expect("page");
        assert!(short.last.is_none());
        assert_eq!(short.items.get(), "[1,2]");
    }

    #[test]
    fn pages_end_early_at_their_byte_bound() {
        let words = vec!["aaaa".to_owned(), "bbbb".to_owned(), "cccc".to_owned()];
        // `["aaaa","bbbb"]` is 15 bytes: a third item would make it 22.
        let page = Page::from_items(words.clone(), Clone::clone, 15).expect("page");
        assert_eq!(page.items.get(), r#"["aaaa","bbbb"]"#);
        assert_eq!(page.last.as_deref(), Some("bbbb"));
        let page = Page::from_items(words.clone(), Clone::clone, 14).expect("page");
        assert_eq!(page.items.get(), r#"["aaaa"]"#);
        assert_eq!(page.last.as_deref(), Some("aaaa"));
        // One item always fits, however small the bound.
        let page = Page::from_items(words.clone(), Clone::clone, 1).expect("page");
        assert_eq!(page.items.get(), r#"["aaaa"]"#);
        let whole = Page::from_items(words, Clone::clone, 22).expect("page");
        assert!(whole.last.is_none());
    }
}
