//! The SQL of the built-in authorization server's tables, written once for both backends.
//!
//! Expanded by [`impl_store!`](super::impl_store) as the [`OAuthServerStore`] implementation of each backend's
//! store. Nothing here is announced on the bus: no replica caches codes or tokens, and a token is resolved
//! through the key it is bound to, whose revocation the key cache learns from the bus.
//!
//! [`OAuthServerStore`]: crate::store::oauth_server::OAuthServerStore

use crate::domain::AgentId;
use crate::domain::time::Timestamp;
use crate::store::oauth_server::{NewCode, NewToken, StoredClient, StoredCode, StoredToken, TokenKind};
use crate::store::{StoreError, StoreResult};

/// A registered client by id, as [`ClientRow`] reads it.
pub(in crate::store) const SELECT_CLIENT: &str = "select oauth_client_id, client_name, redirect_uris, last_used_at, \
     created_at from oauth_client where oauth_client_id = $1";
/// A code by digest, as [`CodeRow`] reads it.
pub(in crate::store) const SELECT_CODE: &str = "select oauth_code_id, family_id, client_id, agent_id, api_key_id, \
     redirect_uri, resource, scopes, code_challenge, expires_at, used_at, created_at from oauth_code \
     where oauth_code_id = $1";
/// A token by digest, as [`TokenRow`] reads it.
pub(in crate::store) const SELECT_TOKEN: &str = "select oauth_token_id, kind, family_id, client_id, agent_id, \
     api_key_id, resource, scopes, expires_at, used_at, revoked_at, created_at from oauth_token \
     where oauth_token_id = $1";

/// A registered client as the database returns it.
#[derive(sqlx::FromRow)]
pub(in crate::store) struct ClientRow {
    oauth_client_id: String,
    client_name: Option<String>,
    redirect_uris: String,
    last_used_at: i64,
    created_at: i64,
}

impl ClientRow {
    pub(in crate::store) fn into_client(self) -> StoreResult<StoredClient> {
        let redirect_uris = serde_json::from_str(&self.redirect_uris)
            .map_err(|error| StoreError::Corrupt(format!("a client's redirect URIs: {error}")))?;
        Ok(StoredClient {
            id: self.oauth_client_id,
            name: self.client_name,
            redirect_uris,
            last_used_at: Timestamp::from_micros(self.last_used_at),
            created_at: Timestamp::from_micros(self.created_at),
        })
    }
}

/// A code as the database returns it.
#[derive(sqlx::FromRow)]
pub(in crate::store) struct CodeRow {
    oauth_code_id: String,
    family_id: String,
    client_id: String,
    agent_id: String,
    api_key_id: String,
    redirect_uri: String,
    resource: String,
    scopes: String,
    code_challenge: String,
    expires_at: i64,
    used_at: Option<i64>,
    created_at: i64,
}

impl CodeRow {
    pub(in crate::store) fn into_code(self) -> StoreResult<StoredCode> {
        Ok(StoredCode {
            code: NewCode {
                digest: self.oauth_code_id,
                family_id: self.family_id,
                client_id: self.client_id,
                agent_id: AgentId::parse(&self.agent_id).map_err(|e| StoreError::Corrupt(e.0))?,
                key_id: self.api_key_id,
                redirect_uri: self.redirect_uri,
                resource: self.resource,
                scopes: self.scopes,
                code_challenge: self.code_challenge,
                expires_at: Timestamp::from_micros(self.expires_at),
                created_at: Timestamp::from_micros(self.created_at),
            },
            used_at: self.used_at.map(Timestamp::from_micros),
        })
    }
}

/// A token as the database returns it.
#[derive(sqlx::FromRow)]
pub(in crate::store) struct TokenRow {
    oauth_token_id: String,
    kind: String,
    family_id: String,
    client_id: String,
    agent_id: String,
    api_key_id: String,
    resource: String,
    scopes: String,
    expires_at: i64,
    used_at: Option<i64>,
    revoked_at: Option<i64>,
    created_at: i64,
}

impl TokenRow {
    pub(in crate::store) fn into_token(self) -> StoreResult<StoredToken> {
        let kind = match self.kind.as_str() {
            "access" => TokenKind::Access,
            "refresh" => TokenKind::Refresh,
            other => return Err(StoreError::Corrupt(format!("unknown token kind {other:?}"))),
        };
        Ok(StoredToken {
            token: NewToken {
                digest: self.oauth_token_id,
                kind,
                family_id: self.family_id,
                client_id: self.client_id,
                agent_id: AgentId::parse(&self.agent_id).map_err(|e| StoreError::Corrupt(e.0))?,
                key_id: self.api_key_id,
                resource: self.resource,
                scopes: self.scopes,
                expires_at: Timestamp::from_micros(self.expires_at),
                created_at: Timestamp::from_micros(self.created_at),
            },
            used_at: self.used_at.map(Timestamp::from_micros),
            revoked_at: self.revoked_at.map(Timestamp::from_micros),
        })
    }
}

/// Expands the [`OAuthServerStore`](crate::store::oauth_server::OAuthServerStore) implementation for `$store`.
macro_rules! impl_oauth_server_sql {
    ($store:ty, $db:ty) => {
        const _: () = {
            use $crate::domain::time::Timestamp;
            use $crate::store::oauth_server::{
                ClientBounds, Exchange, GrantBounds, NewCode, NewToken, OAuthPruned, OAuthServerStore, StoredClient, StoredCode,
                StoredToken,
            };
            use $crate::store::sql::oauth_server::{
                ClientRow, CodeRow, SELECT_CLIENT, SELECT_CODE, SELECT_TOKEN, TokenRow,
            };
            use $crate::store::sql::sessions::PRUNE_BATCH;
            use $crate::store::{StoreError, StoreResult};

            type Tx = sqlx::Transaction<'static, $db>;

            impl $store {
                async fn oauth_insert_tokens(tx: &mut Tx, tokens: &[NewToken]) -> StoreResult<()> {
                    for token in tokens {
                        sqlx::query::<$db>(
                            "insert into oauth_token (oauth_token_id, kind, family_id, client_id, agent_id, \
                             api_key_id, resource, scopes, expires_at, created_at, updated_at) \
                             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)",
                        )
                        .bind(token.digest.as_str())
                        .bind(token.kind.as_str())
                        .bind(token.family_id.as_str())
                        .bind(token.client_id.as_str())
                        .bind(token.agent_id.as_str())
                        .bind(token.key_id.as_str())
                        .bind(token.resource.as_str())
                        .bind(token.scopes.as_str())
                        .bind(token.expires_at.as_micros())
                        .bind(token.created_at.as_micros())
                        .execute(&mut **tx)
                        .await
                        .map_err(Self::error)?;
                    }
                    Ok(())
                }

                async fn oauth_revoke_family_in(tx: &mut Tx, family_id: &str, at: Timestamp) -> StoreResult<()> {
                    sqlx::query::<$db>(
                        "update oauth_token set revoked_at = $2, updated_at = $2 \
                         where family_id = $1 and revoked_at is null",
                    )
                    .bind(family_id)
                    .bind(at.as_micros())
                    .execute(&mut **tx)
                    .await
                    .map_err(Self::error)?;
                    Ok(())
                }

                /// A code or refresh token presented again: revokes the family `family_sql` finds for `digest`
                /// (if the row still exists) and commits.
                async fn oauth_replayed(
                    &self,
                    mut tx: Tx,
                    family_sql: &'static str,
                    digest: &str,
                    at: Timestamp,
                ) -> StoreResult<Exchange> {
                    let family = sqlx::query_scalar::<$db, String>(family_sql)
                        .bind(digest)
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err(Self::error)?;
                    if let Some(family) = family {
                        Self::oauth_revoke_family_in(&mut tx, &family, at).await?;
                    }
                    tx.commit().await.map_err(Self::error)?;
                    Ok(Exchange::Replayed)
                }

                /// Locks the key's row (a no-op update; PostgreSQL), so that counting and adding a key's codes
                /// or grants happens one transaction at a time; `NotFound` when the key is gone.
                async fn oauth_lock_key(tx: &mut Tx, key_id: &str) -> StoreResult<()> {
                    let locked = sqlx::query::<$db>("update api_key set updated_at = updated_at where api_key_id = $1")
                        .bind(key_id)
                        .execute(&mut **tx)
                        .await
                        .map_err(Self::error)?
                        .rows_affected();
                    if locked == 0 {
                        return Err(StoreError::NotFound);
                    }
                    Ok(())
                }
            }

            #[async_trait::async_trait]
            impl OAuthServerStore for $store {
                async fn register_client(&self, client: &StoredClient, bounds: ClientBounds) -> StoreResult<bool> {
                    let ClientBounds { max_clients, idle_before, never_used_before } = bounds;
                    let mut tx = self.begin_write().await?;
                    let count_sql = "select count(*) from oauth_client";
                    let mut count = sqlx::query_scalar::<$db, i64>(count_sql)
                        .fetch_one(&mut *tx)
                        .await
                        .map_err(Self::error)?;
                    if u64::try_from(count).unwrap_or(0) >= max_clients {
                        sqlx::query::<$db>(
                            "delete from oauth_client where oauth_client_id in (select oauth_client_id from \
                             oauth_client where last_used_at < $1 or (last_used_at = created_at and created_at < $3) \
                             order by last_used_at limit $2)",
                        )
                        .bind(idle_before.as_micros())
                        .bind(PRUNE_BATCH)
                        .bind(never_used_before.as_micros())
                        .execute(&mut *tx)
                        .await
                        .map_err(Self::error)?;
                        count = sqlx::query_scalar::<$db, i64>(count_sql)
                            .fetch_one(&mut *tx)
                            .await
                            .map_err(Self::error)?;
                        if u64::try_from(count).unwrap_or(0) >= max_clients {
                            tx.commit().await.map_err(Self::error)?;
                            return Ok(false);
                        }
                    }
                    let redirect_uris = serde_json::to_string(&client.redirect_uris)
                        .map_err(|error| StoreError::Invalid(error.to_string()))?;
                    sqlx::query::<$db>(
                        "insert into oauth_client (oauth_client_id, client_name, redirect_uris, last_used_at, \
                         created_at, updated_at) values ($1, $2, $3, $4, $5, $5)",
                    )
                    .bind(client.id.as_str())
                    .bind(client.name.as_deref())
                    .bind(redirect_uris)
                    .bind(client.last_used_at.as_micros())
                    .bind(client.created_at.as_micros())
                    .execute(&mut *tx)
                    .await
                    .map_err(Self::error)?;
                    tx.commit().await.map_err(Self::error)?;
                    Ok(true)
                }

                async fn get_client(&self, id: &str) -> StoreResult<Option<StoredClient>> {
                    Self::one(sqlx::query_as::<$db, ClientRow>(SELECT_CLIENT).bind(id), self.reader()).await
                }

                async fn touch_client(&self, id: &str, at: Timestamp) -> StoreResult<()> {
                    sqlx::query::<$db>(
                        "update oauth_client set last_used_at = $2, updated_at = $2 where oauth_client_id = $1",
                    )
                    .bind(id)
                    .bind(at.as_micros())
                    .execute(self.writer())
                    .await
                    .map_err(Self::error)?;
                    Ok(())
                }

                async fn create_code(&self, code: &NewCode, bounds: GrantBounds) -> StoreResult<bool> {
                    let mut tx = self.begin_write().await?;
                    Self::oauth_lock_key(&mut tx, &code.key_id).await?;
                    let live = "select count(*) from oauth_code where api_key_id = $1 and used_at is null \
                                and expires_at > $2";
                    let (key, now) = (code.key_id.as_str(), code.created_at.as_micros());
                    if !Self::below_limit(&mut tx, live, key, now, bounds.max_codes_per_key).await? {
                        return Ok(false);
                    }
                    sqlx::query::<$db>(
                        "insert into oauth_code (oauth_code_id, family_id, client_id, agent_id, api_key_id, \
                         redirect_uri, resource, scopes, code_challenge, expires_at, created_at, updated_at) \
                         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)",
                    )
                    .bind(code.digest.as_str())
                    .bind(code.family_id.as_str())
                    .bind(code.client_id.as_str())
                    .bind(code.agent_id.as_str())
                    .bind(code.key_id.as_str())
                    .bind(code.redirect_uri.as_str())
                    .bind(code.resource.as_str())
                    .bind(code.scopes.as_str())
                    .bind(code.code_challenge.as_str())
                    .bind(code.expires_at.as_micros())
                    .bind(code.created_at.as_micros())
                    .execute(&mut *tx)
                    .await
                    .map_err(Self::error)?;
                    tx.commit().await.map_err(Self::error)?;
                    Ok(true)
                }

                async fn find_code(&self, digest: &str) -> StoreResult<Option<StoredCode>> {
                    Self::one(sqlx::query_as::<$db, CodeRow>(SELECT_CODE).bind(digest), self.reader()).await
                }

                async fn exchange_code(
                    &self,
                    digest: &str,
                    at: Timestamp,
                    tokens: &[NewToken],
                    bounds: GrantBounds,
                ) -> StoreResult<Exchange> {
                    let mut tx = self.begin_write().await?;
                    let family = sqlx::query_scalar::<$db, String>(
                        "update oauth_code set used_at = $2, updated_at = $2 \
                         where oauth_code_id = $1 and used_at is null returning family_id",
                    )
                    .bind(digest)
                    .bind(at.as_micros())
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(Self::error)?;
                    let Some(family) = family else {
                        let sql = "select family_id from oauth_code where oauth_code_id = $1";
                        return self.oauth_replayed(tx, sql, digest, at).await;
                    };
                    if let Some(first) = tokens.first() {
                        Self::oauth_lock_key(&mut tx, &first.key_id).await?;
                        // The key's live grants, oldest first: those beyond the bound (counting the new one)
                        // are revoked.
                        let families = sqlx::query_scalar::<$db, String>(
                            "select family_id from oauth_token where api_key_id = $1 and kind = 'refresh' \
                             and revoked_at is null and used_at is null and expires_at > $2 and family_id <> $3 \
                             order by created_at desc",
                        )
                        .bind(first.key_id.as_str())
                        .bind(at.as_micros())
                        .bind(family.as_str())
                        .fetch_all(&mut *tx)
                        .await
                        .map_err(Self::error)?;
                        let keep = usize::try_from(bounds.max_grants_per_key.saturating_sub(1)).unwrap_or(0);
                        for old in families.iter().skip(keep) {
                            Self::oauth_revoke_family_in(&mut tx, old, at).await?;
                        }
                    }
                    Self::oauth_insert_tokens(&mut tx, tokens).await?;
                    tx.commit().await.map_err(Self::error)?;
                    Ok(Exchange::Done)
                }

                async fn find_token(&self, digest: &str) -> StoreResult<Option<StoredToken>> {
                    Self::one(sqlx::query_as::<$db, TokenRow>(SELECT_TOKEN).bind(digest), self.reader()).await
                }

                async fn rotate_refresh(
                    &self,
                    digest: &str,
                    at: Timestamp,
                    tokens: &[NewToken],
                ) -> StoreResult<Exchange> {
                    let mut tx = self.begin_write().await?;
                    let rotated = sqlx::query_scalar::<$db, String>(
                        "update oauth_token set used_at = $2, updated_at = $2 where oauth_token_id = $1 \
                         and kind = 'refresh' and used_at is null and revoked_at is null returning family_id",
                    )
                    .bind(digest)
                    .bind(at.as_micros())
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(Self::error)?;
                    if rotated.is_none() {
                        let sql = "select family_id from oauth_token where oauth_token_id = $1";
                        return self.oauth_replayed(tx, sql, digest, at).await;
                    }
                    Self::oauth_insert_tokens(&mut tx, tokens).await?;
                    tx.commit().await.map_err(Self::error)?;
                    Ok(Exchange::Done)
                }

                async fn revoke_family(&self, family_id: &str, at: Timestamp) -> StoreResult<()> {
                    let mut tx = self.begin_write().await?;
                    Self::oauth_revoke_family_in(&mut tx, family_id, at).await?;
                    tx.commit().await.map_err(Self::error)
                }

                async fn revoke_token(&self, digest: &str, at: Timestamp) -> StoreResult<()> {
                    sqlx::query::<$db>(
                        "update oauth_token set revoked_at = $2, updated_at = $2 \
                         where oauth_token_id = $1 and revoked_at is null",
                    )
                    .bind(digest)
                    .bind(at.as_micros())
                    .execute(self.writer())
                    .await
                    .map_err(Self::error)?;
                    Ok(())
                }

                async fn prune_oauth(
                    &self,
                    expired_before: Timestamp,
                    idle_before: Timestamp,
                ) -> StoreResult<OAuthPruned> {
                    let mut pruned = OAuthPruned::default();
                    let statements: [(&str, i64, &mut u64); 3] = [
                        (
                            "delete from oauth_code where oauth_code_id in (select oauth_code_id from oauth_code \
                             where expires_at < $1 limit $2)",
                            expired_before.as_micros(),
                            &mut pruned.codes,
                        ),
                        (
                            "delete from oauth_token where oauth_token_id in (select oauth_token_id from \
                             oauth_token where expires_at < $1 limit $2)",
                            expired_before.as_micros(),
                            &mut pruned.tokens,
                        ),
                        (
                            "delete from oauth_client where oauth_client_id in (select oauth_client_id from \
                             oauth_client where last_used_at < $1 limit $2)",
                            idle_before.as_micros(),
                            &mut pruned.clients,
                        ),
                    ];
                    for (sql, before, count) in statements {
                        loop {
                            let deleted = sqlx::query::<$db>(sql)
                                .bind(before)
                                .bind(PRUNE_BATCH)
                                .execute(self.writer())
                                .await
                                .map_err(Self::error)?
                                .rows_affected();
                            *count += deleted;
                            if deleted < u64::try_from(PRUNE_BATCH).unwrap_or(u64::MAX) {
                                break;
                            }
                        }
                    }
                    Ok(pruned)
                }
            }
        };
    };
}

pub(in crate::store) use impl_oauth_server_sql;
