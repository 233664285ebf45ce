//! `POST /agents/{agent_id}/resources/batch`: many upserts and deletes in one transaction.
//!
//! Everything is checked before anything changes: an invalid item is refused with its index
//! (`upsert[3]: ...`), a URI named twice is a 422, and then one store call applies the whole batch with
//! one event (at most one `list_changed`). A deleted URI that does not exist is a 404 and nothing changes.

use std::collections::HashSet;

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::access::RegistryAccess;
use super::collection::agent_gone;
use super::extract::{JsonBody, from_value};
use super::resources::ResourceBody;
use crate::domain::ResourceUri;
use crate::domain::limits::FieldLimits;
use crate::domain::model::{NewResource, Resource};
use crate::error::{ApiError, Problem};
use crate::metrics::ConfiguredLimit;
use crate::state::AppState;
use crate::store::StoreError;

/// Items one batch may hold (upserts and deletes together); the body limit bounds their size.
pub const MAX_BATCH_ITEMS: usize = 1000;

/// Resources to upsert and URIs to delete.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchBody {
    /// Resources, as `PUT .../resources` takes them.
    #[serde(default)]
    #[schema(value_type = Vec<ResourceBody>)]
    pub upsert: Vec<Value>,
    #[serde(default)]
    pub delete: Vec<String>,
}

/// What the batch did.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BatchResult {
    /// The upserted resources (without content), in request order.
    pub upserted: Vec<Resource>,
    /// The deleted URIs, in request order.
    pub deleted: Vec<String>,
}

impl BatchBody {
    /// Every item validated, URIs unique across the batch.
    fn check(
        self,
        max_resource_bytes: usize,
        limits: &FieldLimits,
    ) -> Result<(Vec<NewResource>, Vec<ResourceUri>), ApiError> {
        let items = self.upsert.len() + self.delete.len();
        if items > MAX_BATCH_ITEMS {
            return Err(ApiError::limited(
                ConfiguredLimit::Batch,
                ApiError::Unprocessable(format!("the batch has {items} items; at most {MAX_BATCH_ITEMS} are allowed")),
            ));
        }
        let mut seen = HashSet::new();
        let mut upserts = Vec::with_capacity(self.upsert.len());
        for (index, item) in self.upsert.into_iter().enumerate() {
            let at = format!("upsert[{index}]: ");
            let body: ResourceBody = from_value(item, &at)?;
            let resource = body.into_new(max_resource_bytes, limits).map_err(|error| error.at(&at))?;
            if !seen.insert(resource.uri.clone()) {
                return Err(ApiError::Unprocessable(format!("{at}{} appears more than once", resource.uri)));
            }
            upserts.push(resource);
        }
        let mut deletes = Vec::with_capacity(self.delete.len());
        for (index, raw) in self.delete.iter().enumerate() {
            let at = format!("delete[{index}]: ");
            let uri = ResourceUri::parse(raw).map_err(|error| ApiError::Unprocessable(format!("{at}{}", error.0)))?;
            if !seen.insert(uri.clone()) {
                return Err(ApiError::Unprocessable(format!("{at}{uri} appears more than once in the batch")));
            }
            deletes.push(uri);
        }
        Ok((upserts, deletes))
    }
}

/// Upsert and delete resources in one transaction.
#[utoipa::path(post, path = "/admin/v1/agents/{agent_id}/resources/batch", operation_id = "batchResources", tag = "resources", request_body = BatchBody,
    params(("agent_id" = String, Path)),
    security(("operator" = []), ("agentKey" = [])),
    responses((status = 200, description = "Applied", body = BatchResult),
               (status = 404, description = "No such agent, or a deleted URI does not exist (nothing changed)", body = Problem, content_type = "application/problem+json"),
               (status = 422, description = "An invalid item (named by index) or a URI named twice; nothing changed", body = Problem, content_type = "application/problem+json")))]
#[tracing::instrument(name = "admin.batch_resources", skip_all, fields(agent = %access.agent, upserts, deletes))]
pub async fn batch(
    State(state): State<AppState>,
    access: RegistryAccess,
    JsonBody(body): JsonBody<BatchBody>,
) -> Result<Json<BatchResult>, ApiError> {
    let (upserts, deletes) = body.check(state.config.limits.max_resource_bytes, &state.config.limits.fields())?;
    tracing::Span::current().record("upserts", upserts.len()).record("deletes", deletes.len());
    if upserts.is_empty() && deletes.is_empty() {
        return Ok(Json(BatchResult { upserted: Vec::new(), deleted: Vec::new() }));
    }
    let outcome = state.store.batch_resources(&access.agent, &upserts, &deletes, &access.actor).await.map_err(
        |error| match error {
            StoreError::NotFound => ApiError::NotFound("the agent does not exist; nothing was changed".to_owned()),
            other => agent_gone(other),
        },
    )?;
    Ok(Json(BatchResult {
        upserted: outcome.upserted.into_iter().map(|u| u.item).collect(),
        deleted: outcome.deleted.into_iter().map(ResourceUri::into_string).collect(),
    }))
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;
    use crate::admin::extract::parse_json;

    fn check(json: &str) -> Result<(usize, usize), (StatusCode, String)> {
        parse_json(json.as_bytes())
            .and_then(|v| from_value::<BatchBody>(v, ""))
            .and_then(|body| body.check(1024, &crate::config::LimitsConfig::default().fields()))
            .map(|(u, d)| (u.len(), d.len()))
            .map_err(|e| (e.status(), e.to_string()))
    }

    #[test]
    fn valid_batches() {
        assert_eq!(check("{}"), Ok((0, 0)));
        let body = r#"{"upsert": [{"uri": "x://a", "name": "a", "text": "1"}, {"uri": "x://b", "name": "b", "blob": ""}],
                       "delete": ["x://c"]}"#;
        assert_eq!(check(body), Ok((2, 1)));
    }

    #[test]
    fn invalid_items_are_named_by_index() {
        let body = r#"{"upsert": [{"uri": "x://a", "name": "a", "text": "1"}, {"uri": "x://b", "name": "b"}]}"#;
        let (status, detail) = check(body).expect_err("invalid");
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(detail.starts_with("upsert[1]: "), "{detail}");
        let (status, detail) = check(r#"{"delete": ["x://a", "nope"]}"#).expect_err("invalid");
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(detail.starts_with("delete[1]: "), "{detail}");
        let (status, _) = check(r#"{"upsert": [{"uri": 1, "name": "a", "text": ""}]}"#).expect_err("wrong type");
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let (status, _) = check(r#"{"upsert": [], "remove": []}"#).expect_err("unknown field");
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    }

    #[test]
    fn a_uri_may_appear_once() {
        let across = r#"{"upsert": [{"uri": "x://a", "name": "a", "text": ""}], "delete": ["x://a"]}"#;
        assert_eq!(check(across).map_err(|e| e.0), Err(StatusCode::UNPROCESSABLE_ENTITY));
        let twice = r#"{"delete": ["x://a", "x://a"]}"#;
        assert_eq!(check(twice).map_err(|e| e.0), Err(StatusCode::UNPROCESSABLE_ENTITY));
    }
}
