//! Pagination of admin lists: `?limit=` (default 100, 1 to 1000) and `?cursor=`; the answer is
//! `{"items": [...], "nextCursor": "..."}` with `nextCursor` absent on the last page.
//!
//! A page asks the store for `limit + 1` rows: the extra row only says that another page follows.
//! A `limit` that is not an integer is a 400 (wrong type); an integer outside 1..=1000 a 422.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::Serialize;

use super::extract::QueryParams;
use crate::error::ApiError;
use crate::registry::cursor::{CursorCodec, ListKind};
use crate::state::AppState;
use crate::store::StoreError;

pub const DEFAULT_LIMIT: u32 = 100;
pub const MAX_LIMIT: u32 = 1000;

/// `?limit=&cursor=`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageQuery {
    pub limit: u32,
    cursor: String,
}

impl<S: Send + Sync> FromRequestParts<S> for PageQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let params = QueryParams::from_request_parts(parts, state).await?;
        Self::from_params(&params)
    }
}

impl PageQuery {
    pub fn from_params(params: &QueryParams) -> Result<Self, ApiError> {
        let limit = match params.get("limit")? {
            None => DEFAULT_LIMIT,
            Some(raw) => {
                let limit: i64 =
                    raw.parse().map_err(|_| ApiError::BadRequest(format!("limit {raw:?} is not an integer")))?;
                u32::try_from(limit)
                    .ok()
                    .filter(|l| (1..=MAX_LIMIT).contains(l))
                    .ok_or_else(|| ApiError::Unprocessable(format!("limit must be from 1 to {MAX_LIMIT}")))?
            }
        };
        let cursor = params.get("cursor")?.unwrap_or_default().to_owned();
        Ok(Self { limit, cursor })
    }

    /// Where the page starts: the sort key the cursor carries (`None` for the first page).
    /// 400 when the cursor was not issued for this list of this agent.
    pub fn after(&self, codec: &CursorCodec, kind: ListKind, agent: &str) -> Result<Option<String>, ApiError> {
        Ok(codec.decode(kind, agent, &self.cursor)?)
    }

    /// How many rows to ask the store for.
    pub fn fetch_limit(&self) -> u32 {
        self.limit + 1
    }

    /// The page of the list `kind` of `scope` (an agent id, or `""` for a list of the whole gateway): `fetch`
    /// reads up to its limit of rows after the sort key it is given (the cursor's), and `sort_key` gives the
    /// key the next page resumes after.
    pub async fn load<T: Serialize>(
        &self,
        state: &AppState,
        kind: ListKind,
        scope: &str,
        fetch: impl AsyncFnOnce(Option<&str>, u32) -> Result<Vec<T>, StoreError>,
        sort_key: impl Fn(&T) -> String,
    ) -> Result<Page<T>, ApiError> {
        let after = self.after(&state.cursors, kind, scope)?;
        let rows = fetch(after.as_deref(), self.fetch_limit()).await?;
        Ok(Page::from_rows(rows, self, state, kind, scope, sort_key))
    }
}

/// One page of a list.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Pass as `?cursor=` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

impl<T: Serialize> Page<T> {
    /// The page for `rows` fetched with [`PageQuery::fetch_limit`]; `sort_key` gives the key the next
    /// page resumes after. The page ends early where the next row would take its items past
    /// `limits.max_page_bytes` of JSON.
    pub fn from_rows(
        rows: Vec<T>,
        query: &PageQuery,
        state: &AppState,
        kind: ListKind,
        agent: &str,
        sort_key: impl Fn(&T) -> String,
    ) -> Self {
        Self::bounded(rows, query, &state.cursors, state.config.limits.max_page_bytes, kind, agent, sort_key)
    }

    /// [`Page::from_rows`] with the codec and the byte bound given (a page holds at least one row, which
    /// the field limits bound).
    fn bounded(
        mut rows: Vec<T>,
        query: &PageQuery,
        codec: &CursorCodec,
        max_bytes: usize,
        kind: ListKind,
        agent: &str,
        sort_key: impl Fn(&T) -> String,
    ) -> Self {
        let mut limit = query.limit as usize;
        // The brackets, then each row and its comma.
        let mut bytes = 2;
        for (index, row) in rows.iter().enumerate().take(limit) {
            bytes += crate::domain::limits::json_len(row) + usize::from(index > 0);
            if index > 0 && bytes > max_bytes {
                limit = index;
                break;
            }
        }
        let next_cursor = if rows.len() > limit {
            rows.truncate(limit);
            rows.last().map(|last| codec.encode(kind, agent, &sort_key(last)))
        } else {
            None
        };
        Self { items: rows, next_cursor }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Result<PageQuery, StatusCode> {
        let pairs = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        PageQuery::from_params(&QueryParams::from_pairs(pairs)).map_err(|e| e.status())
    }

    #[test]
    fn limits() {
        assert_eq!(query(&[]).map(|q| q.limit), Ok(DEFAULT_LIMIT));
        assert_eq!(query(&[("limit", "1000")]).map(|q| q.limit), Ok(1000));
        assert_eq!(query(&[("limit", "0")]), Err(StatusCode::UNPROCESSABLE_ENTITY));
        assert_eq!(query(&[("limit", "1001")]), Err(StatusCode::UNPROCESSABLE_ENTITY));
        assert_eq!(query(&[("limit", "-1")]), Err(StatusCode::UNPROCESSABLE_ENTITY));
        assert_eq!(query(&[("limit", "ten")]), Err(StatusCode::BAD_REQUEST));
        assert_eq!(query(&[("limit", "")]), Err(StatusCode::BAD_REQUEST));
    }

    #[test]
    fn pages_carry_a_cursor_only_when_more_follow() {
        let codec = CursorCodec::new([1; 32]);
        let q = query(&[("limit", "2")]).expect("valid");
        let page =
            Page::bounded(vec!["a", "b", "c"], &q, &codec, usize::MAX, ListKind::Prompts, "bot", |s| s.to_string());
        assert_eq!(page.items, ["a", "b"]);
        let cursor = page.next_cursor.expect("more follow");
        assert_eq!(codec.decode(ListKind::Prompts, "bot", &cursor), Ok(Some("b".to_owned())));
        let last = Page::bounded(vec!["c"], &q, &codec, usize::MAX, ListKind::Prompts, "bot", |s| s.to_string());
        assert_eq!(last.next_cursor, None);
        let json = serde_json::to_value(&last).expect("serialises");
        assert_eq!(json, serde_json::json!({"items": ["c"]}));
    }

    #[test]
    fn foreign_cursors_are_bad_requests() {
        let codec = CursorCodec::new([1; 32]);
        let cursor = codec.encode(ListKind::Resources, "a", "x://1");
        let q = query(&[("cursor", &cursor)]).expect("valid");
        assert_eq!(q.after(&codec, ListKind::Resources, "a").ok(), Some(Some("x://1".to_owned())));
        assert_eq!(q.after(&codec, ListKind::Resources, "b").map_err(|e| e.status()), Err(StatusCode::BAD_REQUEST));
    }
}
