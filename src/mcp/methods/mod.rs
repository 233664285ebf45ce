//! One type per JSON-RPC method: `parse` the params into it (bad params are -32602), `apply` it against a
//! [`Context`], get a typed result. [`run`] serialises the result once.

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
    type Output: Serialize;

    fn parse(params: Option<&Value>) -> Result<Self, McpError>;

    async fn apply(self, ctx: &Context<'_>) -> Result<Self::Output, McpError>;

    /// The output as the result's JSON. A list's output already is (its page is written once, with the
    /// cursor): copying tens of kilobytes through the serializer again would be the request's largest cost.
    fn into_raw(output: Self::Output) -> serde_json::Result<Box<RawValue>> {
        serde_json::value::to_raw_value(&output)
    }
}

/// Parses, applies and serialises one method call.
pub(crate) async fn run<M: McpMethod>(ctx: &Context<'_>, params: Option<&Value>) -> Result<Box<RawValue>, McpError> {
    let output = M::parse(params)?.apply(ctx).await?;
    M::into_raw(output).map_err(|error| {
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
