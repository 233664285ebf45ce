//! The SQL of API keys and of subject grants (`oauth_subject`), written once for both backends: the
//! [`KeyStore`](crate::store::KeyStore) implementation.
//!
//! A key's change commits with its audit row and a `KeyRevoked` / `KeyChanged` message. A grant's change
//! commits with an audit row, and with a `KeyChanged` message for the key a grant named before, so that
//! every replica drops what it cached about that key's grants. Use of keys is no edit: it is written in
//! bulk, without audit rows.

use crate::domain::AgentId;
use crate::domain::subject::SubjectGrant;
use crate::domain::time::Timestamp;
use crate::store::{StoreError, StoreResult};

/// Keys one `update` of their last use names.
pub(in crate::store) const KEYS_PER_TOUCH: usize = 1_000;

/// The columns of a key, in [`KeyRow`](crate::store::rows::KeyRow)'s order.
macro_rules! key_columns {
    () => {
        "api_key_id, agent_id, name, prefix, scopes, created_at, expires_at, last_used_at, revoked_at, \
         rate_limit_rps, rate_limit_burst, rate_limit_shared"
    };
}
pub(in crate::store) use key_columns;

/// The columns of a grant, in [`SubjectRow`]'s order.
macro_rules! subject_columns {
    () => {
        "agent_id, issuer, subject, api_key_id, created_at, updated_at"
    };
}
pub(in crate::store) use subject_columns;

/// A grant as the database returns it.
#[derive(sqlx::FromRow)]
pub(in crate::store) struct SubjectRow {
    agent_id: String,
    issuer: String,
    subject: String,
    api_key_id: String,
    created_at: i64,
    updated_at: i64,
}

impl SubjectRow {
    pub(in crate::store) fn into_grant(self) -> StoreResult<SubjectGrant> {
        Ok(SubjectGrant {
            agent_id: AgentId::parse(&self.agent_id).map_err(|e| StoreError::Corrupt(e.0))?,
            issuer: self.issuer,
            subject: self.subject,
            key_id: self.api_key_id,
            created_at: Timestamp::from_micros(self.created_at),
            updated_at: Timestamp::from_micros(self.updated_at),
        })
    }
}

/// The sort key of a grant in its agent's list, which cursors carry: issuer and subject, split by a line
/// feed (neither may hold one).
pub fn subject_sort_key(issuer: &str, subject: &str) -> String {
    format!("{issuer}\n{subject}")
}

/// Expands the [`KeyStore`](crate::store::KeyStore) implementation for `$store`.
macro_rules! impl_key_store {
    ($store:ty, $db:ty) => {
        #[async_trait::async_trait]
        impl KeyStore for $store {
            #[tracing::instrument(skip_all, fields(agent = %key.agent_id, key = %key.id))]
            async fn create_key(&self, key: &NewKey, actor: &Actor) -> StoreResult<KeyRecord> {
                let now = Timestamp::now();
                let record = KeyRecord {
                    id: key.id.clone(),
                    agent_id: key.agent_id.clone(),
                    name: key.name.clone(),
                    prefix: key.prefix.clone(),
                    scopes: key.scopes.clone(),
                    created_at: now,
                    expires_at: key.expires_at,
                    last_used_at: None,
                    revoked_at: None,
                    rate_limit: key.rate_limit,
                };
                let mut tx = self.begin_write().await?;
                // An unknown agent violates the foreign key: `NotFound`.
                sqlx::query::<$db>(
                    "insert into api_key (api_key_id, agent_id, name, prefix, digest, scopes, created_at, \
                     updated_at, expires_at, rate_limit_rps, rate_limit_burst, rate_limit_shared) \
                     values ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9, $10, $11)",
                )
                .bind(record.id.as_str())
                .bind(record.agent_id.as_str())
                .bind(record.name.as_deref())
                .bind(record.prefix.as_str())
                .bind(key.digest.as_str())
                .bind(scopes_text(&record.scopes))
                .bind(now.as_micros())
                .bind(record.expires_at.map(Timestamp::as_micros))
                .bind(record.rate_limit.map(|limit| i64::from(limit.requests_per_second)))
                .bind(record.rate_limit.map(|limit| i64::from(limit.burst)))
                .bind(record.rate_limit.is_some_and(|limit| limit.shared))
                .execute(&mut *tx)
                .await
                .map_err(Self::error)?;
                let (agent, target) = (&record.agent_id, record.id.as_str());
                let audit = Audit::of(agent, actor, AuditAction::KeyCreate, target, None, Some(&record));
                Self::insert_audit(&mut tx, audit, now).await?;
                self.commit(tx, Vec::new()).await?;
                Ok(record)
            }

            #[tracing::instrument(skip_all, fields(agent = %agent))]
            async fn list_keys(&self, agent: &AgentId, after: After<'_>, limit: u32) -> StoreResult<Vec<KeyRecord>> {
                let query = sqlx::query_as::<$db, KeyRow>(concat!(
                    "select ",
                    key_columns!(),
                    " from api_key where agent_id = $1 and ($2 is null or (created_at, api_key_id) > \
                     (select k.created_at, k.api_key_id from api_key k where k.api_key_id = $2)) \
                     order by created_at, api_key_id limit $3"
                ))
                .bind(agent.as_str())
                .bind(after)
                .bind(i64::from(limit));
                Self::all(query, self.reader()).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, key = key_id))]
            async fn revoke_key(&self, agent: &AgentId, key_id: &str, actor: &Actor) -> StoreResult<()> {
                let now = Timestamp::now();
                let mut tx = self.begin_write().await?;
                // A second revocation keeps the first `revoked_at`.
                let query = sqlx::query_as::<$db, KeyRow>(concat!(
                    "update api_key set revoked_at = coalesce(revoked_at, $3), updated_at = $3 \
                     where api_key_id = $1 and agent_id = $2 returning ",
                    key_columns!()
                ))
                .bind(key_id)
                .bind(agent.as_str())
                .bind(now.as_micros());
                let after = Self::one(query, &mut *tx).await?.ok_or(StoreError::NotFound)?;
                let before = KeyRecord { revoked_at: None, ..after.clone() };
                let audit = Audit::of(agent, actor, AuditAction::KeyRevoke, key_id, Some(&before), Some(&after));
                Self::insert_audit(&mut tx, audit, now).await?;
                let revoked = BusMessage::KeyRevoked { agent: agent.clone(), key: key_id.to_owned() };
                self.commit(tx, vec![revoked]).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, key = key_id))]
            async fn update_key(
                &self,
                agent: &AgentId,
                key_id: &str,
                patch: &KeyPatch,
                actor: &Actor,
            ) -> StoreResult<KeyRecord> {
                let now = Timestamp::now();
                let mut tx = self.begin_write().await?;
                let query = sqlx::query_as::<$db, KeyRow>(concat!(
                    "select ",
                    key_columns!(),
                    " from api_key where api_key_id = $1 and agent_id = $2"
                ))
                .bind(key_id)
                .bind(agent.as_str());
                let before = Self::one(query, &mut *tx).await?.ok_or(StoreError::NotFound)?;
                // A revoked key stays as it was revoked: its record is what the audit trail points at.
                if before.revoked_at.is_some() {
                    return Err(StoreError::Conflict);
                }
                let mut after = before.clone();
                if let Some(name) = &patch.name {
                    after.name = name.clone();
                }
                after.rate_limit = merged_rate_limit(before.rate_limit, patch.rate_limit, "key")?;
                sqlx::query::<$db>(
                    "update api_key set name = $3, rate_limit_rps = $4, rate_limit_burst = $5, \
                     rate_limit_shared = $6, updated_at = $7 where api_key_id = $1 and agent_id = $2",
                )
                .bind(key_id)
                .bind(agent.as_str())
                .bind(after.name.as_deref())
                .bind(after.rate_limit.map(|limit| i64::from(limit.requests_per_second)))
                .bind(after.rate_limit.map(|limit| i64::from(limit.burst)))
                .bind(after.rate_limit.is_some_and(|limit| limit.shared))
                .bind(now.as_micros())
                .execute(&mut *tx)
                .await
                .map_err(Self::error)?;
                let audit = Audit::of(agent, actor, AuditAction::KeyUpdate, key_id, Some(&before), Some(&after));
                Self::insert_audit(&mut tx, audit, now).await?;
                let changed = BusMessage::KeyChanged { agent: agent.clone(), key: key_id.to_owned() };
                self.commit(tx, vec![changed]).await?;
                Ok(after)
            }

            #[tracing::instrument(skip_all)]
            async fn find_key(&self, digest: &KeyDigest) -> StoreResult<Option<KeyRecord>> {
                let sql = concat!("select ", key_columns!(), " from api_key where digest = $1");
                let query = sqlx::query_as::<$db, KeyRow>(sql).bind(digest.to_hex());
                Self::one(query, self.reader()).await
            }

            #[tracing::instrument(skip_all, fields(key = key_id))]
            async fn find_key_by_id(&self, key_id: &str) -> StoreResult<Option<KeyRecord>> {
                let sql = concat!("select ", key_columns!(), " from api_key where api_key_id = $1");
                let query = sqlx::query_as::<$db, KeyRow>(sql).bind(key_id);
                Self::one(query, self.reader()).await
            }

            #[tracing::instrument(skip_all, fields(keys = key_ids.len()))]
            async fn touch_keys(&self, key_ids: &[String]) -> StoreResult<()> {
                // Use is not an edit: `updated_at` stays, and no audit row is written.
                let now = Timestamp::now().as_micros();
                for chunk in key_ids.chunks(KEYS_PER_TOUCH) {
                    let mut update = sqlx::QueryBuilder::<$db>::new("update api_key set last_used_at = ");
                    update.push_bind(now).push(" where api_key_id in (");
                    let mut ids = update.separated(", ");
                    for id in chunk {
                        ids.push_bind(id.as_str());
                    }
                    update.push(")");
                    update.build().persistent(false).execute(self.writer()).await.map_err(Self::error)?;
                }
                Ok(())
            }

            #[tracing::instrument(skip_all, fields(agent = %grant.agent_id))]
            async fn put_oauth_subject(
                &self,
                grant: &SubjectGrant,
                max_per_agent: u64,
                actor: &Actor,
            ) -> StoreResult<Upserted<SubjectGrant>> {
                let now = Timestamp::now();
                let agent = &grant.agent_id;
                let mut tx = self.begin_write().await?;
                // Locks the agent's row (PostgreSQL), so that two grants cannot both see room for one more.
                Self::agent_in(&mut tx, agent).await?.ok_or(StoreError::NotFound)?;
                let query = sqlx::query_as::<$db, KeyRow>(concat!(
                    "select ",
                    key_columns!(),
                    " from api_key where api_key_id = $1 and agent_id = $2"
                ))
                .bind(grant.key_id.as_str())
                .bind(agent.as_str());
                let key = Self::one(query, &mut *tx).await?;
                match key {
                    Some(key) if key.is_usable_at(now) => {}
                    Some(_) => {
                        return Err(StoreError::Invalid(format!(
                            "key {} is revoked or expired; grant a usable key",
                            grant.key_id
                        )));
                    }
                    None => {
                        return Err(StoreError::Invalid(format!("agent {agent} has no key {}", grant.key_id)));
                    }
                }
                let query = sqlx::query_as::<$db, SubjectRow>(concat!(
                    "select ",
                    subject_columns!(),
                    " from oauth_subject where agent_id = $1 and issuer = $2 and subject = $3"
                ))
                .bind(agent.as_str())
                .bind(grant.issuer.as_str())
                .bind(grant.subject.as_str());
                let before = Self::one(query, &mut *tx).await?;
                if before.is_none() {
                    let count =
                        sqlx::query_scalar::<$db, i64>("select count(*) from oauth_subject where agent_id = $1")
                            .bind(agent.as_str())
                            .fetch_one(&mut *tx)
                            .await
                            .map_err(Self::error)?;
                    if u64::try_from(count).unwrap_or(u64::MAX) >= max_per_agent {
                        return Err(StoreError::TooMany(format!(
                            "agent {agent} has {count} subject grants, the most it may hold \
                             (oauth.max_subjects_per_agent); delete one first"
                        )));
                    }
                }
                let created_at = before.as_ref().map_or(now, |before| before.created_at);
                sqlx::query::<$db>(
                    "insert into oauth_subject (agent_id, issuer, subject, api_key_id, created_at, updated_at) \
                     values ($1, $2, $3, $4, $5, $6) \
                     on conflict (agent_id, issuer, subject) do update set api_key_id = $4, updated_at = $6",
                )
                .bind(agent.as_str())
                .bind(grant.issuer.as_str())
                .bind(grant.subject.as_str())
                .bind(grant.key_id.as_str())
                .bind(created_at.as_micros())
                .bind(now.as_micros())
                .execute(&mut *tx)
                .await
                .map_err(Self::error)?;
                let after = SubjectGrant { created_at, updated_at: now, ..grant.clone() };
                let target = format!("{}#{}", grant.issuer, grant.subject);
                let action = AuditAction::OAuthSubjectPut;
                let audit = Audit::of(agent, actor, action, &target, before.as_ref(), Some(&after));
                Self::insert_audit(&mut tx, audit, now).await?;
                let messages = before
                    .as_ref()
                    .map(|before| BusMessage::KeyChanged { agent: agent.clone(), key: before.key_id.clone() })
                    .into_iter()
                    .collect();
                self.commit(tx, messages).await?;
                Ok(Upserted { item: after, created: before.is_none() })
            }

            #[tracing::instrument(skip_all, fields(agent = %agent))]
            async fn list_oauth_subjects(
                &self,
                agent: &AgentId,
                after: After<'_>,
                limit: u32,
            ) -> StoreResult<Vec<SubjectGrant>> {
                let (issuer, subject) = match after.and_then(|after| after.split_once('\n')) {
                    Some((issuer, subject)) => (Some(issuer), Some(subject)),
                    None => (None, None),
                };
                let query = sqlx::query_as::<$db, SubjectRow>(concat!(
                    "select ",
                    subject_columns!(),
                    " from oauth_subject where agent_id = $1 \
                     and ($2 is null or (issuer, subject) > ($2, $3)) order by issuer, subject limit $4"
                ))
                .bind(agent.as_str())
                .bind(issuer)
                .bind(subject)
                .bind(i64::from(limit));
                Self::all(query, self.reader()).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent))]
            async fn get_oauth_subject(
                &self,
                agent: &AgentId,
                issuer: &str,
                subject: &str,
            ) -> StoreResult<Option<SubjectGrant>> {
                let query = sqlx::query_as::<$db, SubjectRow>(concat!(
                    "select ",
                    subject_columns!(),
                    " from oauth_subject where agent_id = $1 and issuer = $2 and subject = $3"
                ))
                .bind(agent.as_str())
                .bind(issuer)
                .bind(subject);
                Self::one(query, self.reader()).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent))]
            async fn delete_oauth_subject(
                &self,
                agent: &AgentId,
                issuer: &str,
                subject: &str,
                actor: &Actor,
            ) -> StoreResult<()> {
                let now = Timestamp::now();
                let mut tx = self.begin_write().await?;
                let query = sqlx::query_as::<$db, SubjectRow>(concat!(
                    "delete from oauth_subject where agent_id = $1 and issuer = $2 and subject = $3 returning ",
                    subject_columns!()
                ))
                .bind(agent.as_str())
                .bind(issuer)
                .bind(subject);
                let before = Self::one(query, &mut *tx).await?.ok_or(StoreError::NotFound)?;
                let target = format!("{issuer}#{subject}");
                let audit = Audit::of(agent, actor, AuditAction::OAuthSubjectDelete, &target, Some(&before), None);
                Self::insert_audit(&mut tx, audit, now).await?;
                let changed = BusMessage::KeyChanged { agent: agent.clone(), key: before.key_id };
                self.commit(tx, vec![changed]).await
            }
        }
    };
}

pub(in crate::store) use impl_key_store;
