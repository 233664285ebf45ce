//! One type per JSON-RPC method: `parse` the params into it (bad params are -32602), `apply` it against a
//! [`Context`], get a typed result. `run` serialises the result once.
//!
//! [`Context`]: crate::mcp::dispatch::Context

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::dispatch::Context;
use super::error::McpError;
use super::types::Outline;
use crate::domain::render::Budget;
use crate::registry::cache::{Key, Loaded};
use crate::registry::collection::Collection;
use crate::store::StoreError;

/// `completion/complete`.
pub mod completion;
/// `server/discover`, `initialize`, `ping`, `logging/setLevel`.
pub mod lifecycle;
/// `prompts/list`, `prompts/get`.
pub mod prompts;
/// `resources/read`: stored contents, directory reads, template reads.
pub mod read;
/// `resources/list`, `resources/templates/list` and the shapes of listed records.
pub mod resources;
/// `resources/subscribe`, `resources/unsubscribe`: a legacy session's subscriptions.
pub mod subscribe;

/// A JSON-RPC method: parsed from its params, applied against the request's context.
pub(crate) trait McpMethod: Sized {
    type Output: IntoAnswer;

    fn parse(params: Option<&Value>) -> Result<Self, McpError>;

    async fn apply(self, ctx: &Context<'_>) -> Result<Self::Output, McpError>;
}

/// A method's output as the result's JSON: serialised, or already an [`Answer`] (a list's, a read's or a
/// prompt's, whose cached items or messages are written into the answer as the cache keeps them).
pub(crate) trait IntoAnswer {
    fn into_answer(self) -> serde_json::Result<Answer>;
}

impl<T: Serialize> IntoAnswer for T {
    fn into_answer(self) -> serde_json::Result<Answer> {
        serde_json::value::to_raw_value(&self).map(Answer::Whole)
    }
}

impl IntoAnswer for Answer {
    fn into_answer(self) -> serde_json::Result<Answer> {
        Ok(self)
    }
}

/// A method's result as JSON: whole, or outlined around its items (a list's cached page, a read's contents,
/// a prompt's messages), so that the items (up to megabytes) are copied once, into the answer, rather than
/// into a result first.
pub enum Answer {
    Whole(Box<RawValue>),
    Around { outline: Outline, items: Items },
}

/// The items an [`Answer::Around`] writes into its outline.
pub enum Items {
    /// A list's page of items, a JSON array, as the registry cache keeps it.
    Page(Arc<resources::Page>),
    /// A read's contents items, each as the registry cache keeps it (or as rendered), written as an array.
    Each(Vec<Arc<RawValue>>),
    /// A JSON array written for this answer from what the cache keeps: a prompt's messages with the
    /// arguments in their places ([`prompts::MessagesOutline`]).
    Written(Vec<u8>),
}

impl Items {
    fn json_len(&self) -> usize {
        match self {
            Items::Page(page) => page.items.get().len(),
            Items::Written(json) => json.len(),
            Items::Each(items) => {
                2 + items.len().saturating_sub(1) + items.iter().map(|item| item.get().len()).sum::<usize>()
            }
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Items::Page(page) => out.extend_from_slice(page.items.get().as_bytes()),
            Items::Written(json) => out.extend_from_slice(json),
            Items::Each(items) => {
                out.push(b'[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(item.get().as_bytes());
                }
                out.push(b']');
            }
        }
    }
}

impl Answer {
    /// The result's length in bytes.
    pub fn json_len(&self) -> usize {
        match self {
            Answer::Whole(raw) => raw.get().len(),
            Answer::Around { outline, items } => outline.head().len() + items.json_len() + outline.tail().len(),
        }
    }

    /// Appends the result's JSON to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            Answer::Whole(raw) => out.extend_from_slice(raw.get().as_bytes()),
            Answer::Around { outline, items } => {
                out.extend_from_slice(outline.head().as_bytes());
                items.write(out);
                out.extend_from_slice(outline.tail().as_bytes());
            }
        }
    }

    /// The result, when it is whole (as every method's but a list's, a read's and a plain prompt's is).
    pub fn whole(&self) -> Option<&RawValue> {
        match self {
            Answer::Whole(raw) => Some(raw),
            Answer::Around { .. } => None,
        }
    }
}

/// Parses, applies and serialises one method call.
pub(crate) async fn run<M: McpMethod>(ctx: &Context<'_>, params: Option<&Value>) -> Result<Answer, McpError> {
    let output = M::parse(params)?.apply(ctx).await?;
    output.into_answer().map_err(|error| {
        tracing::error!(%error, "could not serialise a result");
        McpError::Internal
    })
}

/// The item of collection `C` keyed `key`, compiled once per replica for as long as the registry cache keeps
/// it under `cache_key`; `None` when there is none, or `prepare` finds nothing in it to compile. `prepare`
/// gives what the compiled item is counted as and the compiling, which costs time in proportion to the
/// sources: it runs on the blocking pool, in the agent's turn, like a costly render.
pub(crate) async fn find_compiled<C, T, F, G>(
    ctx: &Context<'_>,
    cache_key: Key,
    key: C::Key,
    what: &'static str,
    prepare: F,
) -> Result<Option<Arc<T>>, McpError>
where
    C: Collection,
    T: Send + Sync + 'static,
    F: FnOnce(C::Item) -> Option<(usize, G)>,
    G: FnOnce() -> T + Send + 'static,
{
    // What the load owns is copied only on a miss.
    let load = || {
        let (store, agent, renders) =
            (ctx.registry().store().clone(), ctx.agent.id.clone(), Arc::clone(&ctx.state.renders));
        async move {
            let Some((bytes, compile)) = C::store(&*store).get(&agent, &key).await?.and_then(prepare) else {
                return Ok(Loaded { value: None, bytes: Some(64) });
            };
            let _turn = renders.turn(&agent).await;
            let compiled = tokio::task::spawn_blocking(compile)
                .await
                .map_err(|error| StoreError::Corrupt(format!("compiling {what} did not complete: {error}")))?;
            Ok(Loaded { value: Some(Arc::new(compiled)), bytes: Some(bytes) })
        }
    };
    let found = ctx.registry().get_or_load_linked(ctx.link, &ctx.agent.id, cache_key, load).await?;
    Ok(found.as_ref().clone())
}

/// Deserialises params (absent params are `{}`) into `T`; a mismatch is -32602 naming the problem.
/// Reads them in place: the call keeps its params (no copy of the tree per call).
pub(crate) fn params<T: DeserializeOwned>(params: Option<&Value>) -> Result<T, McpError> {
    let parsed = match params {
        Some(params) => T::deserialize(params),
        None => T::deserialize(&Value::Object(Map::new())),
    };
    parsed.map_err(|error| McpError::InvalidParams(error.to_string()))
}

/// A request's `params._meta`, checked to be an object (or `null`) as the SDK's params types check it, its
/// members skipped rather than copied: what the server reads of `_meta` (the era's fields, a trace context)
/// it reads from the message's params in place.
pub(crate) struct MetaShape;

impl<'de> serde::Deserialize<'de> for MetaShape {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = MetaShape;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("a map")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<MetaShape, A::Error> {
                while map.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
                Ok(MetaShape)
            }
        }
        deserializer.deserialize_map(Members)
    }
}

/// Checks params a method takes nothing from: absent, or any object (-32602 otherwise).
pub(crate) fn no_params(params: Option<&Value>) -> Result<(), McpError> {
    match params {
        None | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err(McpError::InvalidParams("params must be an object".to_owned())),
    }
}

/// Renders with a quick budget here, on the async worker, and only when that runs out of the quick fuel
/// renders again with a full budget on the blocking pool, in the agent's turn ([`crate::mcp::render_gate`]):
/// what a render gives and the budget it charged. `what` names the render in the log should the blocking
/// task not complete.
pub(crate) async fn render_bounded<T, E, F>(
    ctx: &Context<'_>,
    what: &str,
    render: F,
) -> Result<(Result<T, E>, Budget), McpError>
where
    T: Send + 'static,
    E: Send + 'static,
    F: Fn(&mut Budget) -> Result<T, E> + Send + 'static,
{
    let mut quick = Budget::quick();
    match render(&mut quick) {
        Err(_) if quick.wants_more_fuel() => {
            on_the_blocking_pool(ctx, what, move || {
                let mut budget = Budget::default();
                (render(&mut budget), budget)
            })
            .await
        }
        rendered => Ok((rendered, quick)),
    }
}

/// Runs `work` (a render or a compile) on the blocking pool in the agent's turn: its costly work waits
/// behind its own, not in front of other agents'. `what` names it in the log should the task not complete.
pub(crate) async fn on_the_blocking_pool<T, F>(ctx: &Context<'_>, what: &str, work: F) -> Result<T, McpError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let _turn = ctx.state.renders.turn(&ctx.agent.id).await;
    tokio::task::spawn_blocking(work).await.map_err(|error| {
        tracing::error!(render = what, %error, "a render did not complete");
        McpError::Internal
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read's contents are written as a JSON array, and their length (what a read is charged) is exact.
    #[test]
    fn contents_are_written_as_an_array_of_their_exact_length() {
        let item =
            |json: &str| -> Arc<RawValue> { Arc::from(RawValue::from_string(json.to_owned()).expect("valid json")) };
        for contents in [vec![], vec![item(r#"{"uri":"a://b","text":"x"}"#)], vec![item("{}"), item(r#"{"a":[1,2]}"#)]]
        {
            let expected = format!("[{}]", contents.iter().map(|raw| raw.get()).collect::<Vec<_>>().join(","));
            let items = Items::Each(contents);
            let mut out = Vec::new();
            items.write(&mut out);
            assert_eq!(String::from_utf8(out).expect("utf8"), expected);
            assert_eq!(items.json_len(), expected.len());
        }
    }

    /// The params the read, prompt and list methods take: `_meta` must be an object or `null`, as the SDK's
    /// params types have it, and anything else in it or beside the fields is let be.
    #[test]
    fn params_take_meta_as_an_object_and_read_their_own_fields() {
        let parse = |json: &str| {
            let value: Value = serde_json::from_str(json).expect("json");
            read::ReadResource::parse(Some(&value)).map(|_| ())
        };
        let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","x":[{"y":null}]}"#;
        assert!(parse(&format!(r#"{{"uri":"a://b",{meta},"other":1}}"#)).is_ok());
        assert!(parse(r#"{"uri":"a://b","_meta":null}"#).is_ok());
        for bad in
            [r#"{"uri":"a://b","_meta":5}"#, r#"{"uri":"a://b","_meta":["x"]}"#, r#"{"_meta":{}}"#, r#"{"uri":7}"#]
        {
            let error = parse(bad).err().unwrap_or_else(|| panic!("{bad} was taken"));
            assert!(matches!(error, McpError::InvalidParams(_)), "{bad}: {error:?}");
        }
        let value: Value = serde_json::from_str(r#"{"_meta":"x"}"#).expect("json");
        assert!(matches!(resources::cursor(Some(&value)), Err(McpError::InvalidParams(_))));
        let value: Value = serde_json::from_str(r#"{"_meta":{"a":1},"cursor":"c"}"#).expect("json");
        assert_eq!(resources::cursor(Some(&value)).ok().flatten().as_deref(), Some("c"));
    }
}
