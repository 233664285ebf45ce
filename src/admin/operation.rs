//! The declaration of an operator-only operation: its doc comment and `#[utoipa::path]` (from which the
//! OpenAPI document is generated) with the operator security and the problem+json bodies of its error
//! answers written once, and, for a handler with a span, its span and signature.

/// Declares an operator-only handler: `method "path" as "operationId", tag "tag"`, then an optional
/// `request_body = Body,` and `params(...)` (followed by `paged` for the `limit` and `cursor` of a page),
/// `ok(...)` (the success answers as `#[utoipa::path]` writes them) and `refused(status "description", ...)`
/// (its error answers, each a problem+json body). The handler follows the `;`: either as written, or as
/// `in "span" [for access]; pub async fn name(state, other extractors) -> Answer { ... }`, which takes the
/// state as `State(state)`, answers `Result<Answer, ApiError>` and runs in the span (naming the agent of
/// the `ManagedAgent` called `access`).
macro_rules! operation {
    (
        $(#[$doc:meta])*
        $method:ident $path:literal as $id:literal, tag $tag:literal, $(request_body = $body:ident,)?
        params($($param:tt),*) paged, $($rest:tt)*
    ) => {
        $crate::admin::operation::operation! {
            $(#[$doc])*
            $method $path as $id, tag $tag, $(request_body = $body,)?
            params($($param,)* ("limit" = Option<u32>, Query, description = "1 to 1000, default 100"),
                ("cursor" = Option<String>, Query, description = "`nextCursor` of the page before")),
            $($rest)*
        }
    };
    (
        $(#[$doc:meta])*
        $method:ident $path:literal as $id:literal, tag $tag:literal, $(request_body = $body:ident,)?
        $(params($($param:tt),*),)? ok($($ok:tt)*), refused($($status:literal $why:literal),*);
        in $span:literal $(for $access:ident)?;
        pub async fn $name:ident($state:ident, $($arg:tt)*) -> $out:ty $block:block
    ) => {
        $crate::admin::operation::operation! {
            $(#[$doc])*
            $method $path as $id, tag $tag, $(request_body = $body,)? $(params($($param),*),)?
            ok($($ok)*), refused($($status $why),*);
            #[tracing::instrument(name = $span, skip_all $(, fields(agent = %$access.agent.id))?)]
            pub async fn $name(
                axum::extract::State($state): axum::extract::State<$crate::state::AppState>,
                $($arg)*
            ) -> Result<$out, $crate::error::ApiError> $block
        }
    };
    (
        $(#[$doc:meta])*
        $method:ident $path:literal as $id:literal, tag $tag:literal, $(request_body = $body:ident,)?
        $(params($($param:tt),*),)? ok($($ok:tt)*), refused($($status:literal $why:literal),*);
        $handler:item
    ) => {
        $(#[$doc])*
        #[utoipa::path($method, path = $path, operation_id = $id, tag = $tag, $(request_body = $body,)?
            $(params($($param),*),)?
            security(("operator" = [])),
            responses($($ok)*
                $(, (status = $status, description = $why, body = Problem, content_type = "application/problem+json"))*))]
        $handler
    };
}

pub(crate) use operation;
