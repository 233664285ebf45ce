//! The admin operations every registry collection shares: create or replace, list, read and delete an
//! item of `/agents/{agent_id}/resources`, `…/resource-templates` or `…/prompts`.
//!
//! Each operation is written once over the [`Collection`] descriptor and the few admin facts of
//! [`AdminCollection`] (the request body, where a request names an item, the `Location` of a created one).
//! The handlers of each collection's module carry the operation's documentation and span and call these.
//!
//! [`Collection`]: crate::registry::collection::Collection
//! [`AdminCollection`]: crate::admin::collection::AdminCollection

use std::marker::PhantomData;

use axum::Json;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::access::RegistryAccess;
use super::extract::{JsonBody, PathParams, QueryParams};
use super::page::{Page, PageQuery};
use crate::domain::AgentId;
use crate::domain::model::Actor;
use crate::error::ApiError;
use crate::registry::collection::Collection;
use crate::state::AppState;
use crate::store::{StoreError, Upserted};

/// What the admin API needs to know of a collection beyond its [`Collection`] descriptor.
pub trait AdminCollection: Collection {
    /// The body of a create-or-replace request.
    type Body: DeserializeOwned + Send;
    /// The parameter that names an item on reads and deletes: a path parameter when
    /// [`AdminCollection::IS_KEY_IN_PATH`], else a required query parameter.
    const KEY_PARAM: &'static str;
    /// Whether the key is a path parameter.
    const IS_KEY_IN_PATH: bool = false;

    /// The key a read or delete names; an error when no item can have it.
    fn parse_key(raw: &str) -> Result<Self::Key, ApiError>;
    /// The validated item of a create-or-replace request; 422 for an invalid value, 413 for one over its limit.
    fn new_item(state: &AppState, path: &PathParams, body: Self::Body) -> Result<Self::New, ApiError>;
    /// Where a created item is read, when its collection says so.
    fn location(_agent: &AgentId, _item: &Self::Item) -> Option<String> {
        None
    }
}

/// 201 when created, 200 when replaced.
pub fn upsert_status(created: bool) -> StatusCode {
    if created { StatusCode::CREATED } else { StatusCode::OK }
}

/// A `NotFound` from an upsert means the agent went away after the access check.
pub fn agent_gone(error: StoreError) -> ApiError {
    match error {
        StoreError::NotFound => ApiError::NotFound("the agent does not exist".to_owned()),
        other => other.into(),
    }
}

/// The 404 of an item `raw` names.
pub fn missing<C: Collection>(raw: &str) -> ApiError {
    ApiError::NotFound(format!("{} {raw:?} does not exist", C::NOUN))
}

/// The raw key a read or delete request names, as it names it (parsed by the operation).
pub struct ItemKey<C> {
    raw: String,
    kind: PhantomData<C>,
}

impl<C: AdminCollection> FromRequestParts<AppState> for ItemKey<C> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let raw = if C::IS_KEY_IN_PATH {
            PathParams::from_request_parts(parts, state).await?.get(C::KEY_PARAM)?.to_owned()
        } else {
            QueryParams::from_request_parts(parts, state).await?.require(C::KEY_PARAM)?.to_owned()
        };
        Ok(Self { raw, kind: PhantomData })
    }
}

impl<C> ItemKey<C> {
    pub fn as_str(&self) -> &str {
        &self.raw
    }
}

/// `PUT`: create or replace an item; 201 (with `Location` where the collection gives one) or 200.
pub async fn put<C: AdminCollection>(
    State(state): State<AppState>,
    access: RegistryAccess,
    path: PathParams,
    JsonBody(body): JsonBody<C::Body>,
) -> Result<Response, ApiError> {
    let new = C::new_item(&state, &path, body)?;
    let upserted = store_item::<C>(&state, &access.agent, &new, &access.actor).await?;
    let status = upsert_status(upserted.created);
    match C::location(&access.agent, &upserted.item).filter(|_| upserted.created) {
        Some(location) => Ok((status, [(header::LOCATION, location)], Json(upserted.item)).into_response()),
        None => Ok((status, Json(upserted.item)).into_response()),
    }
}

/// `GET`: a page of items, ordered by key.
pub async fn list<C: AdminCollection>(
    State(state): State<AppState>,
    access: RegistryAccess,
    page: PageQuery,
) -> Result<Json<Page<C::Item>>, ApiError> {
    let fetch = async |after: Option<&str>, limit| C::store(&*state.store).list(&access.agent, after, limit).await;
    Ok(Json(page.load(&state, C::LIST, access.agent.as_str(), fetch, |item| C::key(item).to_owned()).await?))
}

/// `GET`: one item.
pub async fn get<C: AdminCollection>(
    State(state): State<AppState>,
    access: RegistryAccess,
    raw: ItemKey<C>,
) -> Result<Json<C::Item>, ApiError> {
    let key = C::parse_key(raw.as_str())?;
    let item = C::store(&*state.store).get(&access.agent, &key).await?;
    item.map(Json).ok_or_else(|| missing::<C>(raw.as_str()))
}

/// `DELETE`: 204, or 404 when there is no such item.
pub async fn delete<C: AdminCollection>(
    State(state): State<AppState>,
    access: RegistryAccess,
    raw: ItemKey<C>,
) -> Result<StatusCode, ApiError> {
    delete_item::<C>(&state, &access.agent, raw.as_str(), &access.actor).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Commits a validated item with its event and audit rows: the admin API's `PUT` and the console.
pub async fn store_item<C: Collection>(
    state: &AppState,
    agent: &AgentId,
    new: &C::New,
    actor: &Actor,
) -> Result<Upserted<C::Item>, ApiError> {
    C::store(&*state.store).put(agent, new, actor).await.map_err(agent_gone)
}

/// Deletes the item `raw` names: the admin API's `DELETE` and the console.
pub async fn delete_item<C: AdminCollection>(
    state: &AppState,
    agent: &AgentId,
    raw: &str,
    actor: &Actor,
) -> Result<(), ApiError> {
    let key = C::parse_key(raw)?;
    C::store(&*state.store).delete(agent, &key, actor).await.map_err(|error| match error {
        StoreError::NotFound => missing::<C>(raw),
        other => other.into(),
    })
}

/// Declares the admin body of an item described like an MCP resource (a resource, a resource template): its
/// key field, then `name`, `title`, `description`, `mimeType` and `annotations` (documented by the caller),
/// then its own fields; with the checks of the described fields, which its `into_new` makes in its own order.
macro_rules! described_body {
    (
        $(#[$attr:meta])*
        pub struct $body:ident {
            $(#[$key_attr:meta])* pub $key:ident: String,
            $(#[$annotations_attr:meta])* pub annotations: $annotations_type:ty,
            $($(#[$own_attr:meta])* pub $own:ident: $own_type:ty,)*
        }
    ) => {
        $(#[$attr])*
        pub struct $body {
            $(#[$key_attr])* pub $key: String,
            /// Not blank.
            pub name: String,
            pub title: Option<String>,
            pub description: Option<String>,
            /// A media type, `type/subtype` with optional parameters.
            pub mime_type: Option<String>,
            $(#[$annotations_attr])*
            #[schema(value_type = Option<Object>)]
            pub annotations: $annotations_type,
            $($(#[$own_attr])* pub $own: $own_type,)*
        }

        impl $body {
            /// The described fields and the annotations within their limits: 413 naming the first one over.
            fn limit_described(
                &self,
                limits: &$crate::domain::limits::FieldLimits,
            ) -> Result<(), $crate::domain::limits::TooLarge> {
                use $crate::domain::limits::Field;
                limits.text(Field::Name, "name", Some(&self.name))?;
                limits.text(Field::Title, "title", self.title.as_deref())?;
                limits.text(Field::Description, "description", self.description.as_deref())?;
                limits.text(Field::MimeType, "mimeType", self.mime_type.as_deref())?;
                limits.json(Field::Annotations, "annotations", self.annotations.as_ref())
            }

            /// A name that is not blank, a media type and valid annotations (422 otherwise).
            fn check_described(&self) -> Result<(), $crate::error::ApiError> {
                if self.name.trim().is_empty() {
                    return Err($crate::error::ApiError::Unprocessable("name must not be empty".to_owned()));
                }
                if let Some(mime_type) = &self.mime_type {
                    $crate::admin::resources::check_mime_type(mime_type)?;
                }
                self.annotations
                    .as_ref()
                    .map($crate::domain::content::validate_annotations)
                    .transpose()
                    .map_err($crate::error::ApiError::invalid)?;
                Ok(())
            }
        }
    };
}

pub(crate) use described_body;

/// Defines one collection's handler of a shared operation: its doc comment and `#[utoipa::path]` (from
/// which the OpenAPI document is generated; the security, the success answers and the problem+json bodies
/// are the same for every collection), its span named `in`, and its work done by the generic operation of
/// this module. `refused(status "description", ...)` lists the operation's own error answers.
macro_rules! handler {
    (
        $(#[$doc:meta])*
        put::<$kind:ty>($body:ident -> $item:ident) in $span:tt at $path:tt as $id:tt, tag $tag:tt,
        params($($param:tt)*), created $created:tt, replaced $replaced:tt, refused($($refused:tt)*)
    ) => {
        $crate::admin::collection::handler! {
            @operation $(#[$doc])* put put::<$kind>(path: $crate::admin::extract::PathParams,
                body: $crate::admin::extract::JsonBody<$body>) -> axum::response::Response,
            $span, $path, $id, $tag, request_body = $body, params($($param)*),
            ok((status = 201, description = $created, body = $item), (status = 200, description = $replaced, body = $item)),
            refused($($refused)*)
        }
    };
    (
        $(#[$doc:meta])*
        list::<$kind:ty>($item:ident) in $span:tt at $path:tt as $id:tt, tag $tag:tt, described $described:tt
    ) => {
        $crate::admin::collection::handler! {
            @operation $(#[$doc])* get list::<$kind>(page: $crate::admin::page::PageQuery)
                -> axum::Json<$crate::admin::page::Page<$item>>,
            $span, $path, $id, $tag,
            params(("agent_id" = String, Path),
                   ("limit" = Option<u32>, Query, description = "1 to 1000, default 100"),
                   ("cursor" = Option<String>, Query, description = "`nextCursor` of the page before")),
            ok((status = 200, description = $described, body = Page<$item>)), refused()
        }
    };
    (
        $(#[$doc:meta])*
        get::<$kind:ty>($item:ident) in $span:tt at $path:tt as $id:tt, tag $tag:tt,
        params($($param:tt)*), found $found:tt, refused($($refused:tt)*)
    ) => {
        $crate::admin::collection::handler! {
            @operation $(#[$doc])* get get::<$kind>(raw: $crate::admin::collection::ItemKey<$kind>) -> axum::Json<$item>,
            $span, $path, $id, $tag, params($($param)*), ok((status = 200, description = $found, body = $item)),
            refused($($refused)*)
        }
    };
    (
        $(#[$doc:meta])*
        delete::<$kind:ty> in $span:tt at $path:tt as $id:tt, tag $tag:tt,
        params($($param:tt)*), refused($($refused:tt)*)
    ) => {
        $crate::admin::collection::handler! {
            @operation $(#[$doc])* delete delete::<$kind>(raw: $crate::admin::collection::ItemKey<$kind>)
                -> axum::http::StatusCode,
            $span, $path, $id, $tag, params($($param)*), ok((status = 204, description = "Deleted")),
            refused($($refused)*)
        }
    };
    (
        @operation $(#[$doc:meta])* $method:ident $operation:ident::<$kind:ty>($($arg:ident: $arg_type:ty),*) -> $out:ty,
        $span:tt, $path:tt, $id:tt, $tag:tt, $(request_body = $body:ident,)? params($($param:tt)*),
        ok($($ok:tt)*), refused($($status:tt $why:tt),*)
    ) => {
        $(#[$doc])*
        #[utoipa::path($method, path = $path, operation_id = $id, tag = $tag, $(request_body = $body,)?
            params($($param)*),
            security(("operator" = []), ("agentKey" = [])),
            responses($($ok)*
                $(, (status = $status, description = $why, body = Problem, content_type = "application/problem+json"))*))]
        #[tracing::instrument(name = $span, skip_all, fields(agent = %access.agent))]
        pub async fn $operation(
            state: axum::extract::State<$crate::state::AppState>,
            access: $crate::admin::access::RegistryAccess,
            $($arg: $arg_type),*
        ) -> Result<$out, $crate::error::ApiError> {
            $crate::admin::collection::$operation::<$kind>(state, access, $($arg),*).await
        }
    };
}

pub(crate) use handler;
