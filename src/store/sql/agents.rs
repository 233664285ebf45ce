//! The SQL of settings and agents, written once for both backends: the
//! [`AgentStore`](crate::store::AgentStore) implementation.
//!
//! An agent's changes commit with their audit row and an `AgentChanged` / `AgentDeleted` message; deleting
//! an agent deletes its keys, registry, sessions and events with it (`on delete cascade`), not its audit
//! records.

/// The columns of an agent, in [`AgentRow`](crate::store::rows::AgentRow)'s order.
macro_rules! agent_columns {
    () => {
        "agent_id, name, description, rate_limit_rps, rate_limit_burst, rate_limit_shared, cache_ttl_ms, \
         audit_retention_days, epoch, created_at, updated_at"
    };
}
pub(in crate::store) use agent_columns;

/// Expands the [`AgentStore`](crate::store::AgentStore) implementation for `$store`.
macro_rules! impl_agent_store {
    ($store:ty, $db:ty) => {
        impl $store {
            /// Binds `agent`'s id and the columns a patch may change, `$1` to `$8`, as both the `insert` and
            /// the `update` of an agent name them.
            fn bind_agent<'q>(statement: Statement<'q>, agent: &'q Agent) -> Statement<'q> {
                statement
                    .bind(agent.id.as_str())
                    .bind(agent.name.as_str())
                    .bind(agent.description.as_deref())
                    .bind(agent.rate_limit.map(|limit| i64::from(limit.requests_per_second)))
                    .bind(agent.rate_limit.map(|limit| i64::from(limit.burst)))
                    .bind(agent.rate_limit.is_some_and(|limit| limit.shared))
                    .bind(agent.cache_ttl_ms.map(to_i64))
                    .bind(agent.audit_retention_days.map(i64::from))
            }

            /// Setting `name`, read through `executor`.
            async fn setting_in<'c>(&self, executor: impl Executor<'c>, name: &str) -> StoreResult<Option<String>> {
                sqlx::query_scalar::<$db, String>("select value from setting where name = $1")
                    .bind(name)
                    .fetch_optional(executor)
                    .await
                    .map_err(Self::error)
            }

            /// Stores setting `name` as `value`; an existing one is replaced when `replace`, else left as it is.
            async fn write_setting(&self, name: &str, value: &str, replace: bool) -> StoreResult<()> {
                let statement = if replace {
                    "insert into setting (name, value, created_at, updated_at) values ($1, $2, $3, $3) \
                     on conflict (name) do update set value = excluded.value, updated_at = excluded.updated_at"
                } else {
                    "insert into setting (name, value, created_at, updated_at) values ($1, $2, $3, $3) \
                     on conflict (name) do nothing"
                };
                sqlx::query::<$db>(statement)
                    .bind(name)
                    .bind(value)
                    .bind(Timestamp::now().as_micros())
                    .execute(self.writer())
                    .await
                    .map_err(Self::error)?;
                Ok(())
            }

            async fn agent_in(tx: &mut Tx, id: &AgentId) -> StoreResult<Option<Agent>> {
                // A no-op update rather than `select ... for update` (which SQLite lacks): it locks the
                // row in PostgreSQL, so two concurrent patches cannot lose each other's fields.
                let query = sqlx::query_as::<$db, AgentRow>(concat!(
                    "update agent set updated_at = updated_at where agent_id = $1 returning ",
                    agent_columns!()
                ))
                .bind(id.as_str());
                Self::one(query, &mut **tx).await
            }
        }

        #[async_trait::async_trait]
        impl AgentStore for $store {
            #[tracing::instrument(skip_all, fields(setting = name))]
            async fn get_setting(&self, name: &str) -> StoreResult<Option<String>> {
                self.setting_in(self.reader(), name).await
            }

            #[tracing::instrument(skip_all, fields(setting = name))]
            async fn init_setting(&self, name: &str, value: &str) -> StoreResult<String> {
                self.write_setting(name, value, false).await?;
                // Read back from the writer, which has just written it (or found it).
                let stored = self.setting_in(self.writer(), name).await?;
                stored.ok_or_else(|| Self::error(sqlx::Error::RowNotFound))
            }

            #[tracing::instrument(skip_all, fields(setting = name))]
            async fn put_setting(&self, name: &str, value: &str) -> StoreResult<()> {
                self.write_setting(name, value, true).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent.id))]
            async fn create_agent(&self, agent: &NewAgent, actor: &Actor) -> StoreResult<Agent> {
                let now = Timestamp::now();
                let created = Agent {
                    id: agent.id.clone(),
                    name: agent.name.clone(),
                    description: agent.description.clone(),
                    rate_limit: agent.rate_limit,
                    cache_ttl_ms: agent.cache_ttl_ms,
                    audit_retention_days: agent.audit_retention_days,
                    epoch: rand::random_range(1..=i64::MAX),
                    created_at: now,
                    updated_at: now,
                };
                let mut tx = self.begin_write().await?;
                let insert = sqlx::query::<$db>(
                    "insert into agent (agent_id, name, description, rate_limit_rps, rate_limit_burst, \
                     rate_limit_shared, cache_ttl_ms, audit_retention_days, epoch, event_seq, created_at, \
                     updated_at) values ($1, $2, $3, $4, $5, $6, $7, $8, $9, 0, $10, $10)",
                );
                Self::bind_agent(insert, &created)
                    .bind(created.epoch)
                    .bind(now.as_micros())
                    .execute(&mut *tx)
                    .await
                    .map_err(Self::error)?;
                let id = &created.id;
                let audit = Audit::of(id, actor, AuditAction::AgentCreate, id.as_str(), None, Some(&created));
                Self::insert_audit(&mut tx, audit, now).await?;
                self.check_byte_quotas(&mut tx, &created.id).await?;
                self.commit(tx, vec![BusMessage::AgentChanged { agent: created.id.clone() }]).await?;
                Ok(created)
            }

            #[tracing::instrument(skip_all, fields(agent = %id))]
            async fn get_agent(&self, id: &AgentId) -> StoreResult<Option<Agent>> {
                let sql = concat!("select ", agent_columns!(), " from agent where agent_id = $1");
                let query = sqlx::query_as::<$db, AgentRow>(sql).bind(id.as_str());
                Self::one(query, self.reader()).await
            }

            #[tracing::instrument(skip_all)]
            async fn list_agents(&self, after: After<'_>, limit: u32) -> StoreResult<Vec<Agent>> {
                // Every id is non-empty, so `> ''` is the first page.
                let query = sqlx::query_as::<$db, AgentRow>(concat!(
                    "select ",
                    agent_columns!(),
                    " from agent where agent_id > $1 order by agent_id limit $2"
                ))
                .bind(after.unwrap_or(""))
                .bind(i64::from(limit));
                Self::all(query, self.reader()).await
            }

            #[tracing::instrument(skip_all, fields(agent = %id))]
            async fn update_agent(&self, id: &AgentId, patch: &AgentPatch, actor: &Actor) -> StoreResult<Agent> {
                let now = Timestamp::now();
                let mut tx = self.begin_write().await?;
                let before = Self::agent_in(&mut tx, id).await?.ok_or(StoreError::NotFound)?;
                let mut after = before.clone();
                if let Some(name) = &patch.name {
                    after.name = name.clone();
                }
                if let Some(description) = &patch.description {
                    after.description = description.clone();
                }
                after.rate_limit = merged_rate_limit(before.rate_limit, patch.rate_limit, "agent")?;
                if let Some(cache_ttl_ms) = patch.cache_ttl_ms {
                    after.cache_ttl_ms = cache_ttl_ms;
                }
                if let Some(days) = patch.audit_retention_days {
                    after.audit_retention_days = days;
                }
                after.updated_at = now;
                let update = sqlx::query::<$db>(
                    "update agent set name = $2, description = $3, rate_limit_rps = $4, rate_limit_burst = $5, \
                     rate_limit_shared = $6, cache_ttl_ms = $7, audit_retention_days = $8, updated_at = $9 \
                     where agent_id = $1",
                );
                Self::bind_agent(update, &after).bind(now.as_micros()).execute(&mut *tx).await.map_err(Self::error)?;
                let audit = Audit::of(id, actor, AuditAction::AgentUpdate, id.as_str(), Some(&before), Some(&after));
                Self::insert_audit(&mut tx, audit, now).await?;
                self.check_byte_quotas(&mut tx, id).await?;
                self.commit(tx, vec![BusMessage::AgentChanged { agent: id.clone() }]).await?;
                Ok(after)
            }

            #[tracing::instrument(skip_all, fields(agent = %id))]
            async fn delete_agent(&self, id: &AgentId, actor: &Actor) -> StoreResult<()> {
                let now = Timestamp::now();
                let mut tx = self.begin_write().await?;
                // Keys, registry and events go with the agent (`on delete cascade`); audit records stay.
                let query = sqlx::query_as::<$db, AgentRow>(concat!(
                    "delete from agent where agent_id = $1 returning ",
                    agent_columns!()
                ))
                .bind(id.as_str());
                let before = Self::one(query, &mut *tx).await?.ok_or(StoreError::NotFound)?;
                let audit = Audit::of(id, actor, AuditAction::AgentDelete, id.as_str(), Some(&before), None);
                Self::insert_audit(&mut tx, audit, now).await?;
                self.commit(tx, vec![BusMessage::AgentDeleted { agent: id.clone() }]).await
            }
        }
    };
}

pub(in crate::store) use impl_agent_store;
