//! Domain types: values that are valid once they exist (parse, don't validate).

/// The audit log's per-agent hash chain: hashing and verification.
pub mod audit;
/// MCP content blocks and annotations: their checks at write time and their rendering at read time.
pub mod content;
/// Identifiers with a fixed syntax: agent ids, prompt names, resource URIs.
pub mod id;
/// API keys, their digests and scopes.
pub mod key;
/// The registry's records as the store keeps them and the admin API shows them.
pub mod model;
/// Prompt checks at write time and message rendering for `prompts/get`.
pub mod prompt;
/// The sandboxed MiniJinja environment for prompt and template texts.
pub mod render;
/// Legacy Streamable HTTP sessions: the id a client holds, its stored digest, the record.
pub mod session;
/// Time as the store keeps it: microseconds since the Unix epoch, shown as RFC 3339.
pub mod time;
/// RFC 6570 URI templates: parsing, levels, the operator table.
pub mod uri_template;

pub use id::{AgentId, PromptName, ResourceUri};
pub use key::{ApiKey, KeyDigest, KeyHasher, Scope};
pub use uri_template::UriTemplate;
