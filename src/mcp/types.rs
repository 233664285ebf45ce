//! The MCP wire types. This is the only module that names `rmcp`: the rest of the endpoint uses its model
//! types through the re-exports below, so an upgrade of the pinned crate touches one file.
//!
//! `rmcp` 3.9 models the 2026-07-28 shapes (`resultType`, `ttlMs`, `cacheScope`, `server/discover`); what it
//! lacks is defined here: the protocol constants, the `_meta` keys, and [`ListResult`], the envelope around
//! the pre-serialised list pages the registry cache keeps.

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::value::RawValue;

pub use rmcp::model::{
    Annotations, CacheScope, CompleteRequestParams, CompleteResult, CompletionInfo, ContentBlock, DiscoverResult,
    EmptyObject, GetPromptRequestParams, GetPromptResult, Implementation, InitializeRequestParams, InitializeResult,
    MetaObject, PaginatedRequestParams, PromptsCapability, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResult, Reference, ResourceContents, ResourcesCapability, ResultType, ServerCapabilities,
};
/// MCP's records under names that do not collide with the domain's.
pub use rmcp::model::{
    Prompt as McpPrompt, PromptArgument as McpPromptArgument, PromptMessage as McpPromptMessage,
    Resource as McpResource, ResourceTemplate as McpResourceTemplate, Role as McpRole,
};

/// The one modern revision served: stateless, per-request `_meta`.
pub const MODERN_VERSION: &str = "2026-07-28";
/// The legacy (handshake) revisions served, newest first.
pub const LEGACY_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// Every revision served, newest first: `server/discover`'s `supportedVersions` and -32022's `data.supported`.
pub const SUPPORTED_VERSIONS: [&str; 5] = [MODERN_VERSION, "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// What `initialize` answers when the client asks for a revision that is not served.
pub const LATEST_LEGACY_VERSION: &str = "2025-11-25";
/// The revision assumed for a legacy request with neither a protocol header nor a session (the transport
/// specification's default); the only one whose requests may come in batches.
pub const DEFAULT_LEGACY_VERSION: &str = "2025-03-26";

/// Reserved `_meta` keys.
pub mod meta {
    pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    /// On every message of a `subscriptions/listen` stream: the listen request's id.
    pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
}

/// The log levels of RFC 5424 that `io.modelcontextprotocol/logLevel` and `logging/setLevel` accept.
pub const LOG_LEVELS: [&str; 8] = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

/// The request headers of the Streamable HTTP transport.
pub mod header {
    pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
    pub const METHOD: &str = "mcp-method";
    pub const NAME: &str = "mcp-name";
    pub const SESSION_ID: &str = "mcp-session-id";
}

/// Caching hints of a modern cacheable result (`ttlMs`, `cacheScope`); absent on the legacy wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheHints {
    pub ttl_ms: u64,
    pub scope: CacheScope,
}

/// A page of a list result (`resources/list`, `resources/templates/list`, `prompts/list`) whose items are
/// already serialised: the registry cache keeps pages as JSON so that a list costs one copy, not one
/// serialisation per item. Modern fields (`resultType`, caching hints, `_meta`) are set per request.
pub struct ListResult<'a> {
    /// `resources`, `resourceTemplates` or `prompts`.
    pub key: &'static str,
    /// The JSON array of items.
    pub items: &'a RawValue,
    pub next_cursor: Option<String>,
    pub result_type: Option<ResultType>,
    pub cache: Option<CacheHints>,
    pub meta: Option<MetaObject>,
}

impl Serialize for ListResult<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        if let Some(result_type) = &self.result_type {
            map.serialize_entry("resultType", result_type)?;
        }
        map.serialize_entry(self.key, self.items)?;
        if let Some(cursor) = &self.next_cursor {
            map.serialize_entry("nextCursor", cursor)?;
        }
        if let Some(cache) = &self.cache {
            map.serialize_entry("ttlMs", &cache.ttl_ms)?;
            map.serialize_entry("cacheScope", &cache.scope)?;
        }
        if let Some(meta) = &self.meta {
            map.serialize_entry("_meta", meta)?;
        }
        map.end()
    }
}

impl ListResult<'_> {
    /// The result's JSON before and after its items, as [`Serialize`] writes it around them: a page's
    /// items can then be written straight into the answer.
    pub fn around_items(self) -> serde_json::Result<(String, String)> {
        // Written with `0` for the items: the first `"key":0` is the items' place, since nothing before it
        // is text from a client or a registry (only `resultType`, a fixed word).
        let placeholder = RawValue::from_string("0".to_owned())?;
        let key = self.key;
        let whole = serde_json::to_string(&ListResult {
            key,
            items: &placeholder,
            next_cursor: self.next_cursor,
            result_type: self.result_type,
            cache: self.cache,
            meta: self.meta,
        })?;
        let marker = format!("\"{key}\":0");
        let Some(at) = whole.find(&marker) else {
            return Err(serde::ser::Error::custom("the items' place was not found"));
        };
        let split = at + marker.len() - 1;
        Ok((whole[..split].to_owned(), whole[split + 1..].to_owned()))
    }
}

/// A `resources/read` result whose contents items are already serialised (the registry cache keeps each
/// stored resource's item as JSON, so a read costs one copy of it, not a clone and a serialisation). It
/// serialises exactly as [`ReadResourceResult`] does, field for field.
pub struct ReadResult {
    pub result_type: Option<ResultType>,
    pub cache: Option<CacheHints>,
    /// Each a serialised [`ResourceContents`].
    pub contents: Vec<std::sync::Arc<RawValue>>,
    pub meta: Option<MetaObject>,
}

impl Serialize for ReadResult {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Items<'a>(&'a [std::sync::Arc<RawValue>]);
        impl Serialize for Items<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_seq(self.0.iter().map(|item| &**item))
            }
        }
        let mut map = serializer.serialize_map(None)?;
        if let Some(result_type) = &self.result_type {
            map.serialize_entry("resultType", result_type)?;
        }
        if let Some(cache) = &self.cache {
            map.serialize_entry("ttlMs", &cache.ttl_ms)?;
            map.serialize_entry("cacheScope", &cache.scope)?;
        }
        map.serialize_entry("contents", &Items(&self.contents))?;
        if let Some(meta) = &self.meta {
            map.serialize_entry("_meta", meta)?;
        }
        map.end()
    }
}

/// Whether `version` is a legacy revision this server speaks.
pub fn is_legacy_version(version: &str) -> bool {
    LEGACY_VERSIONS.contains(&version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_result_shapes_per_era() {
        let items = RawValue::from_string(r#"[{"uri":"a://b","name":"b"}]"#.to_owned()).expect("valid json");
        let legacy = ListResult {
            key: "resources",
            items: &items,
            next_cursor: None,
            result_type: None,
            cache: None,
            meta: None,
        };
        assert_eq!(
            serde_json::to_string(&legacy).expect("serialises"),
            r#"{"resources":[{"uri":"a://b","name":"b"}]}"#
        );
        let modern = ListResult {
            next_cursor: Some("c".to_owned()),
            result_type: Some(ResultType::COMPLETE),
            cache: Some(CacheHints { ttl_ms: 5, scope: CacheScope::Private }),
            ..legacy
        };
        assert_eq!(
            serde_json::to_string(&modern).expect("serialises"),
            r#"{"resultType":"complete","resources":[{"uri":"a://b","name":"b"}],"nextCursor":"c","ttlMs":5,"cacheScope":"private"}"#
        );
    }

    /// The two ends around the items, with the items between them, are the result as it serialises, also
    /// when a field after the items holds what the items' place looks like.
    #[test]
    fn list_results_split_around_their_items() {
        let items = RawValue::from_string(r#"[{"uri":"a://\"prompts\":0","name":"b"}]"#.to_owned()).expect("valid");
        let mut meta = MetaObject::new();
        meta.insert("note".to_owned(), serde_json::json!("\"prompts\":0"));
        for (result_type, next_cursor, cache, meta) in [
            (None, None, None, None),
            (
                Some(ResultType::COMPLETE),
                Some("c".to_owned()),
                Some(CacheHints { ttl_ms: 5, scope: CacheScope::Private }),
                Some(meta),
            ),
        ] {
            let result = || ListResult {
                key: "prompts",
                items: &items,
                next_cursor: next_cursor.clone(),
                result_type: result_type.clone(),
                cache,
                meta: meta.clone(),
            };
            let whole = serde_json::to_string(&result()).expect("serialises");
            let (head, tail) = result().around_items().expect("splits");
            assert_eq!(format!("{head}{}{tail}", items.get()), whole);
        }
    }

    #[test]
    fn read_results_serialise_as_rmcp_does() {
        let text = ResourceContents::TextResourceContents {
            uri: "a://b".to_owned(),
            mime_type: Some("text/plain".to_owned()),
            text: "line \"one\"\n\u{1}é".to_owned(),
            meta: None,
        };
        let blob = ResourceContents::BlobResourceContents {
            uri: "a://c".to_owned(),
            mime_type: None,
            blob: "AAE=".to_owned(),
            meta: None,
        };
        let meta =
            MetaObject(serde_json::Map::from_iter([(meta::SERVER_INFO.to_owned(), serde_json::json!({"name": "x"}))]));
        for (result_type, cache, meta) in [
            (None, None, None),
            (Some(ResultType::COMPLETE), Some(CacheHints { ttl_ms: 5, scope: CacheScope::Private }), Some(meta)),
        ] {
            let mut expected = ReadResourceResult::new(vec![text.clone(), blob.clone()]);
            expected.result_type = result_type.clone();
            if let Some(hints) = cache {
                expected = expected.with_ttl_ms(hints.ttl_ms).with_cache_scope(hints.scope);
            }
            expected.meta = meta.clone();
            let items =
                [&text, &blob].map(|item| std::sync::Arc::from(serde_json::value::to_raw_value(item).expect("item")));
            let ours = ReadResult { result_type, cache, contents: items.to_vec(), meta };
            assert_eq!(
                serde_json::to_string(&ours).expect("serialises"),
                serde_json::to_string(&expected).expect("serialises")
            );
        }
    }

    #[test]
    fn versions_are_newest_first() {
        let mut sorted = SUPPORTED_VERSIONS;
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(sorted, SUPPORTED_VERSIONS);
        assert!(is_legacy_version(DEFAULT_LEGACY_VERSION) && !is_legacy_version(MODERN_VERSION));
    }
}
