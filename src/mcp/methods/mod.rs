//! One type per JSON-RPC method: `parse` the params into it (bad params are -32602), `apply` it against a
//! [`Context`], get a typed result. [`run`] serialises the result once.

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::dispatch::Context;
use super::error::McpError;
use crate::domain::render::Budget;

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

/// A method's output as the result's JSON: serialised, or already an [`Answer`] (a list's, whose page is
/// written into the answer as the cache keeps it, with the cursor).
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

/// A method's result as JSON: whole, or a list's cached page of items between the result's two ends, so
/// that the page (tens of kilobytes) is copied once, into the answer, rather than into a result first.
pub enum Answer {
    Whole(Box<RawValue>),
    Page {
        /// The result up to the items: `{"resources":`, with `resultType` before it in the modern era.
        head: String,
        /// The page's items, a JSON array, as the registry cache keeps them.
        items: Arc<resources::Page>,
        /// The rest of the result after the items, `}` included.
        tail: String,
    },
}

impl Answer {
    /// The result's length in bytes.
    pub fn json_len(&self) -> usize {
        match self {
            Answer::Whole(raw) => raw.get().len(),
            Answer::Page { head, items, tail } => head.len() + items.items.get().len() + tail.len(),
        }
    }

    /// Appends the result's JSON to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            Answer::Whole(raw) => out.extend_from_slice(raw.get().as_bytes()),
            Answer::Page { head, items, tail } => {
                out.extend_from_slice(head.as_bytes());
                out.extend_from_slice(items.items.get().as_bytes());
                out.extend_from_slice(tail.as_bytes());
            }
        }
    }

    /// The result, when it is whole (as every method's but a list's is).
    pub fn whole(&self) -> Option<&RawValue> {
        match self {
            Answer::Whole(raw) => Some(raw),
            Answer::Page { .. } => None,
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

/// Deserialises params (absent params are `{}`) into `T`; a mismatch is -32602 naming the problem.
/// Reads them in place: the call keeps its params (no copy of the tree per call).
pub(crate) fn params<T: DeserializeOwned>(params: Option<&Value>) -> Result<T, McpError> {
    let parsed = match params {
        Some(params) => T::deserialize(params),
        None => T::deserialize(&Value::Object(Map::new())),
    };
    parsed.map_err(|error| McpError::InvalidParams(error.to_string()))
}

/// Renders with a quick budget here, on the async worker, and only when that runs out of the quick fuel
/// renders again with a full budget on the blocking pool: what a render gives and the budget it charged.
/// `what` names the render in the log should the blocking task not complete.
pub(crate) async fn render_bounded<T, F>(what: &str, render: F) -> Result<(Result<T, String>, Budget), McpError>
where
    T: Send + 'static,
    F: Fn(&mut Budget) -> Result<T, String> + Send + 'static,
{
    let mut quick = Budget::quick();
    match render(&mut quick) {
        Err(_) if quick.wants_more_fuel() => tokio::task::spawn_blocking(move || {
            let mut budget = Budget::default();
            (render(&mut budget), budget)
        })
        .await
        .map_err(|error| {
            tracing::error!(render = what, %error, "a render did not complete");
            McpError::Internal
        }),
        rendered => Ok((rendered, quick)),
    }
}
