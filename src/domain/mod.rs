//! Domain types: values that are valid once they exist (parse, don't validate).

/// MCP content blocks and annotations: their checks at write time and their rendering at read time.
pub mod content;
/// Identifiers with a fixed syntax: agent ids, prompt names, resource URIs.
pub mod id;
/// API keys, their digests and scopes.
pub mod key;
/// The size limit of every field a key can write.
pub mod limits;
/// The registry's records as the store keeps them and the admin API shows them.
pub mod model;
/// Prompt checks at write time and message rendering for `prompts/get`.
pub mod prompt;
/// The sandboxed MiniJinja environment for prompt and template texts.
pub mod render;
/// Legacy Streamable HTTP sessions: the id a client holds, its stored digest, the record.
pub mod session;
/// Subject grants of an external authorization server: (issuer, `sub`) → a key of an agent.
pub mod subject;
/// Time as the store keeps it: microseconds since the Unix epoch, shown as RFC 3339.
pub mod time;
/// RFC 6570 URI templates: parsing, levels, the operator table.
pub mod uri_template;

pub use id::{AgentId, PromptName, ResourceUri};

/// Lower-case hex of `bytes`. Digests are written as hex on every request (session and audit chain digests),
/// and `hex::encode` builds its string a `char` at a time; this encodes into one buffer.
pub fn hex(bytes: impl AsRef<[u8]>) -> String {
    let bytes = bytes.as_ref();
    let mut text = vec![0u8; bytes.len() * 2];
    // The buffer is exactly twice the input's length, and hex digits are ASCII: neither step can fail.
    let _ = hex::encode_to_slice(bytes, &mut text);
    String::from_utf8(text).unwrap_or_default()
}
pub use key::{ApiKey, KeyDigest, KeyHasher, Scope};
pub use uri_template::UriTemplate;

#[cfg(test)]
mod tests {
    #[test]
    fn hex_is_lower_case_and_two_digits_a_byte() {
        assert_eq!(super::hex([0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
        assert_eq!(super::hex([]), "");
    }
}
