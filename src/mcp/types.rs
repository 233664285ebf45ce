//! The MCP wire types. This is the only module that names `rmcp`: the rest of the endpoint uses its model
//! types through the re-exports below, so an upgrade of the pinned crate touches one file.
//!
//! `rmcp` 3.9 models the 2026-07-28 shapes (`resultType`, `ttlMs`, `cacheScope`, `server/discover`); what it
//! lacks is defined here: the protocol constants, the `_meta` keys, and [`ListResult`], the envelope around
//! the pre-serialised list pages the registry cache keeps.
//!
//! [`ListResult`]: crate::mcp::types::ListResult

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

/// The request headers of the Streamable HTTP transport, as `HeaderName`s: a lookup by one does not parse the
/// name again.
pub mod header {
    use axum::http::HeaderName;

    pub const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
    pub const METHOD: HeaderName = HeaderName::from_static("mcp-method");
    pub const NAME: HeaderName = HeaderName::from_static("mcp-name");
    pub const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
}

/// A modern result's `_meta`: `io.modelcontextprotocol/serverInfo`, hivegate titled with the agent's name.
/// Serialises exactly as that [`Implementation`] in a [`MetaObject`] does, without building either.
#[derive(Debug, Clone, Copy)]
pub struct ServerMeta<'a> {
    /// The agent's name.
    pub title: &'a str,
}

impl ServerMeta<'_> {
    pub const NAME: &'static str = "hivegate";
    pub const VERSION: &'static str = env!("CARGO_PKG_VERSION");

    /// The server's [`Implementation`], as `initialize` and `server/discover` answer it.
    pub fn implementation(&self) -> Implementation {
        Implementation::new(Self::NAME, Self::VERSION).with_title(self.title)
    }
}

impl Serialize for ServerMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Info<'a> {
            name: &'static str,
            title: &'a str,
            version: &'static str,
        }
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry(
            meta::SERVER_INFO,
            &Info { name: ServerMeta::NAME, title: self.title, version: ServerMeta::VERSION },
        )?;
        map.end()
    }
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
    pub meta: Option<ServerMeta<'a>>,
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
    /// The result's JSON without its items, and where they go: a page's items can then be written straight
    /// into the answer ([`Outline`]).
    pub fn outline(self) -> serde_json::Result<Outline> {
        // Written with `0` for the items: the first `"key":0` is the items' place, since nothing before it
        // is text from a client or a registry (only `resultType`, a fixed word).
        let placeholder = RawValue::from_string("0".to_owned())?;
        let key = self.key;
        let whole = serde_json::to_string(&ListResult { items: &placeholder, ..self })?;
        Outline::cut(whole, &format!("\"{key}\":"), "0")
    }
}

/// A result's JSON with its items (a JSON array) left out, and the byte offset where they go.
#[derive(Debug)]
pub struct Outline {
    json: String,
    at: usize,
}

impl Outline {
    /// Cuts `placeholder` out of `whole` where it follows the first `key`. The key is within the result's first
    /// few fields, so a plain scan finds it sooner than `str::find` has set its searcher up.
    pub(crate) fn cut(mut whole: String, key: &str, placeholder: &str) -> serde_json::Result<Self> {
        let found = whole.as_bytes().windows(key.len()).position(|window| window == key.as_bytes());
        let Some(at) = found.map(|found| found + key.len()) else {
            return Err(serde::ser::Error::custom("the items' place was not found"));
        };
        if !whole[at..].starts_with(placeholder) {
            return Err(serde::ser::Error::custom("the items' place holds something else"));
        }
        whole.replace_range(at..at + placeholder.len(), "");
        Ok(Self { json: whole, at })
    }

    /// The JSON before the items.
    pub fn head(&self) -> &str {
        &self.json[..self.at]
    }

    /// The JSON after the items.
    pub fn tail(&self) -> &str {
        &self.json[self.at..]
    }
}

/// A `resources/read` result whose contents items are already serialised (the registry cache keeps each
/// stored resource's item as JSON, so a read costs one copy of it, not a clone and a serialisation). It
/// serialises exactly as [`ReadResourceResult`] does, field for field.
pub struct ReadResult<'a> {
    pub result_type: Option<ResultType>,
    pub cache: Option<CacheHints>,
    /// Each a serialised [`ResourceContents`].
    pub contents: Vec<std::sync::Arc<RawValue>>,
    pub meta: Option<ServerMeta<'a>>,
}

impl ReadResult<'_> {
    /// The result without its contents, and the contents: they are written into the answer as the registry
    /// cache keeps them, rather than copied into the result first.
    pub fn outline(self) -> serde_json::Result<(Outline, Vec<std::sync::Arc<RawValue>>)> {
        let contents = self.contents;
        // Only fixed words come before `contents` (`resultType`, `ttlMs`, `cacheScope`).
        let whole = serde_json::to_string(&ReadResult { contents: Vec::new(), ..self })?;
        Ok((Outline::cut(whole, "\"contents\":", "[]")?, contents))
    }
}

impl Serialize for ReadResult<'_> {
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

    /// The outline with the items in their place is the result as it serialises, also when a field after the
    /// items holds what the items' place looks like.
    #[test]
    fn list_results_outline_their_items() {
        let items = RawValue::from_string(r#"[{"uri":"a://\"prompts\":0","name":"b"}]"#.to_owned()).expect("valid");
        for (result_type, next_cursor, cache, meta) in [
            (None, None, None, None),
            (
                Some(ResultType::COMPLETE),
                Some("c".to_owned()),
                Some(CacheHints { ttl_ms: 5, scope: CacheScope::Private }),
                Some(ServerMeta { title: "\"prompts\":0" }),
            ),
        ] {
            let result = || ListResult {
                key: "prompts",
                items: &items,
                next_cursor: next_cursor.clone(),
                result_type: result_type.clone(),
                cache,
                meta,
            };
            let whole = serde_json::to_string(&result()).expect("serialises");
            let outline = result().outline().expect("outlines");
            assert_eq!(format!("{}{}{}", outline.head(), items.get(), outline.tail()), whole);
        }
    }

    /// A modern result's `_meta` is the server's `Implementation` under `io.modelcontextprotocol/serverInfo`.
    #[test]
    fn server_meta_serialises_as_the_implementation_does() {
        for title in ["Docs", "a \"quoted\" name\n\u{1}é"] {
            let ours = ServerMeta { title };
            let expected = MetaObject(serde_json::Map::from_iter([(
                meta::SERVER_INFO.to_owned(),
                serde_json::to_value(ours.implementation()).expect("value"),
            )]));
            assert_eq!(serde_json::to_string(&ours).expect("ours"), serde_json::to_string(&expected).expect("theirs"));
        }
    }

    /// A read result serialises as rmcp's does, and its outline with the contents written as an array in
    /// their place is that same JSON (a title that looks like the contents' place comes after them).
    #[test]
    fn read_results_serialise_as_rmcp_does() {
        let text = ResourceContents::TextResourceContents {
            uri: "a://b".to_owned(),
            mime_type: Some("text/plain".to_owned()),
            text: "line \"one\"\n\u{1}é \"contents\":[]".to_owned(),
            meta: None,
        };
        let blob = ResourceContents::BlobResourceContents {
            uri: "a://c".to_owned(),
            mime_type: None,
            blob: "AAE=".to_owned(),
            meta: None,
        };
        let title = "\"contents\":[]";
        for (result_type, cache, meta) in [
            (None, None, None),
            (
                Some(ResultType::COMPLETE),
                Some(CacheHints { ttl_ms: 5, scope: CacheScope::Private }),
                Some(ServerMeta { title }),
            ),
        ] {
            for contents in [vec![], vec![&text], vec![&text, &blob]] {
                let mut expected = ReadResourceResult::new(contents.iter().map(|item| (*item).clone()).collect());
                expected.result_type = result_type.clone();
                if let Some(hints) = cache {
                    expected = expected.with_ttl_ms(hints.ttl_ms).with_cache_scope(hints.scope);
                }
                expected.meta = meta.map(|meta| {
                    let serde_json::Value::Object(map) = serde_json::to_value(meta).expect("value") else {
                        panic!("an object")
                    };
                    MetaObject(map)
                });
                let expected = serde_json::to_string(&expected).expect("serialises");
                let items: Vec<_> = contents
                    .iter()
                    .map(|item| std::sync::Arc::from(serde_json::value::to_raw_value(item).expect("item")))
                    .collect();
                let ours = || ReadResult { result_type: result_type.clone(), cache, contents: items.clone(), meta };
                assert_eq!(serde_json::to_string(&ours()).expect("serialises"), expected);
                let (outline, contents) = ours().outline().expect("outlines");
                let array = format!("[{}]", contents.iter().map(|item| item.get()).collect::<Vec<_>>().join(","));
                assert_eq!(format!("{}{array}{}", outline.head(), outline.tail()), expected);
            }
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
