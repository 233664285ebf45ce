//! The SQL of subject grants (`oauth_subject`), written once for both backends.
//!
//! Expanded by [`impl_store!`](super::impl_store) as inherent methods of each backend's store; the
//! [`Store`](crate::store::Store) methods of the same names delegate here. A change commits with an audit
//! row, and with a `KeyChanged` message for the key a grant named before, so that every replica drops what
//! it cached about that key's grants.

use crate::domain::AgentId;
use crate::domain::subject::SubjectGrant;
use crate::domain::time::Timestamp;
use crate::store::{StoreError, StoreResult};

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

/// Expands the subject grant statements as inherent methods of `$store`.
macro_rules! impl_subject_sql {
    ($store:ty, $db:ty) => {
        impl $store {
            async fn sql_put_subject(
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
                let key = sqlx::query_as::<$db, KeyRow>(concat!(
                    "select ",
                    key_columns!(),
                    " from api_key where api_key_id = $1 and agent_id = $2"
                ))
                .bind(grant.key_id.as_str())
                .bind(agent.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(Self::error)?
                .map(KeyRow::into_key)
                .transpose()?;
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
                let before = sqlx::query_as::<$db, SubjectRow>(concat!(
                    "select ",
                    subject_columns!(),
                    " from oauth_subject where agent_id = $1 and issuer = $2 and subject = $3"
                ))
                .bind(agent.as_str())
                .bind(grant.issuer.as_str())
                .bind(grant.subject.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(Self::error)?
                .map(SubjectRow::into_grant)
                .transpose()?;
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
                let audit = Audit {
                    agent,
                    actor,
                    action: "oauth_subject.put",
                    target: &target,
                    before: before.as_ref().map(|before| record_digest(before, None)),
                    after: Some(record_digest(&after, None)),
                };
                Self::insert_audit(&mut tx, audit, now).await?;
                let messages = before
                    .as_ref()
                    .map(|before| BusMessage::KeyChanged { agent: agent.clone(), key: before.key_id.clone() })
                    .into_iter()
                    .collect();
                self.commit(tx, messages).await?;
                Ok(Upserted { item: after, created: before.is_none() })
            }

            async fn sql_list_subjects(
                &self,
                agent: &AgentId,
                after: After<'_>,
                limit: u32,
            ) -> StoreResult<Vec<SubjectGrant>> {
                let (issuer, subject) = match after.and_then(|after| after.split_once('\n')) {
                    Some((issuer, subject)) => (Some(issuer), Some(subject)),
                    None => (None, None),
                };
                sqlx::query_as::<$db, SubjectRow>(concat!(
                    "select ",
                    subject_columns!(),
                    " from oauth_subject where agent_id = $1 \
                     and ($2 is null or (issuer, subject) > ($2, $3)) order by issuer, subject limit $4"
                ))
                .bind(agent.as_str())
                .bind(issuer)
                .bind(subject)
                .bind(i64::from(limit))
                .fetch_all(self.reader())
                .await
                .map_err(Self::error)?
                .into_iter()
                .map(SubjectRow::into_grant)
                .collect()
            }

            async fn sql_get_subject(
                &self,
                agent: &AgentId,
                issuer: &str,
                subject: &str,
            ) -> StoreResult<Option<SubjectGrant>> {
                sqlx::query_as::<$db, SubjectRow>(concat!(
                    "select ",
                    subject_columns!(),
                    " from oauth_subject where agent_id = $1 and issuer = $2 and subject = $3"
                ))
                .bind(agent.as_str())
                .bind(issuer)
                .bind(subject)
                .fetch_optional(self.reader())
                .await
                .map_err(Self::error)?
                .map(SubjectRow::into_grant)
                .transpose()
            }

            async fn sql_delete_subject(
                &self,
                agent: &AgentId,
                issuer: &str,
                subject: &str,
                actor: &Actor,
            ) -> StoreResult<()> {
                let now = Timestamp::now();
                let mut tx = self.begin_write().await?;
                let before = sqlx::query_as::<$db, SubjectRow>(concat!(
                    "delete from oauth_subject where agent_id = $1 and issuer = $2 and subject = $3 returning ",
                    subject_columns!()
                ))
                .bind(agent.as_str())
                .bind(issuer)
                .bind(subject)
                .fetch_optional(&mut *tx)
                .await
                .map_err(Self::error)?
                .ok_or(StoreError::NotFound)?
                .into_grant()?;
                let target = format!("{issuer}#{subject}");
                let audit = Audit {
                    agent,
                    actor,
                    action: "oauth_subject.delete",
                    target: &target,
                    before: Some(record_digest(&before, None)),
                    after: None,
                };
                Self::insert_audit(&mut tx, audit, now).await?;
                let changed = BusMessage::KeyChanged { agent: agent.clone(), key: before.key_id };
                self.commit(tx, vec![changed]).await
            }
        }
    };
}

pub(in crate::store) use impl_subject_sql;
