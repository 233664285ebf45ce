//! What every server in the benchmark serves: the same 100 resources (1 KiB of text each), the same prompt
//! with two arguments, and the request bodies of the workloads. `seed` puts these into hivegate through the
//! admin API, the ceiling precomputes its answers from them and the rmcp peer serves them from memory.

use serde_json::{Value, json};

/// Resources in the base set; `resources/list` returns them as one page.
pub const RESOURCES: usize = 100;
/// The resource W1 reads.
pub const READ_URI: &str = "bench://doc/042";
/// The prompt W3 renders.
pub const PROMPT: &str = "research";
/// The protocol version of the modern variant.
pub const MODERN: &str = "2026-07-28";

/// The URI of base resource `index`.
pub fn uri(index: usize) -> String {
    format!("bench://doc/{index:03}")
}

/// 1 KiB of text for base resource `index`.
pub fn text(index: usize) -> String {
    let line = format!("Resource {index:03} of the hivegate benchmark: plain text, one KiB long. ");
    line.repeat(1024 / line.len() + 1)[..1024].to_owned()
}

/// A base resource as the admin API takes it (`PUT`/batch item).
pub fn resource(index: usize) -> Value {
    json!({
        "uri": uri(index),
        "name": format!("doc-{index:03}"),
        "title": format!("Benchmark document {index:03}"),
        "description": "A 1 KiB text resource of the benchmark",
        "mimeType": "text/plain",
        "text": text(index),
    })
}

/// The prompt's template; `render` is the same text with the arguments substituted.
pub const PROMPT_TEMPLATE: &str =
    "Research {{ topic }} in {{ depth }} depth. Summarise the key findings, cite sources and list open questions.";

/// The prompt as the admin API takes it.
pub fn prompt() -> Value {
    json!({
        "title": "Research a topic",
        "description": "Research a topic to the requested depth",
        "arguments": [
            {"name": "topic", "description": "What to research", "required": true},
            {"name": "depth", "description": "How deep to go", "required": true}
        ],
        "messages": [{"role": "user", "content": {"type": "text", "text": PROMPT_TEMPLATE}}]
    })
}

/// The rendered prompt text.
pub fn render(topic: &str, depth: &str) -> String {
    PROMPT_TEMPLATE.replace("{{ topic }}", topic).replace("{{ depth }}", depth)
}

/// The workloads' JSON-RPC method and params: W1 read, W2 list, W3 prompt.
pub fn call(workload: &str) -> (&'static str, Value, Option<&'static str>) {
    match workload {
        "read" => ("resources/read", json!({"uri": READ_URI}), Some(READ_URI)),
        "list" => ("resources/list", json!({}), None),
        "prompt" => (
            "prompts/get",
            json!({"name": PROMPT, "arguments": {"topic": "quantum computing", "depth": "deep"}}),
            Some(PROMPT),
        ),
        other => panic!("unknown workload {other}: read, list or prompt"),
    }
}
