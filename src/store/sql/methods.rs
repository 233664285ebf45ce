//! The [`Store`](crate::store::Store) methods, written once for both backends.
//!
//! Expanded by [`impl_store!`](super::impl_store) inside its scope, where the domain types, the row types,
//! the transaction helpers and the backend's hooks are in scope. Every mutating method runs in one write
//! transaction: registry changes bump the agent's sequence first, write the change, its audit row(s) and its
//! event row, and commit through the backend, which announces the change on the bus.

/// The `impl Store` block; see the module documentation.
macro_rules! impl_store_methods {
    ($store:ty, $db:ty, $backend:literal) => {
        impl $store {
            /// The newest records of one format matching `filter` after `after`, at most `limit`: agents'
            /// segments, or (`is_stream`) the writer streams' rows.
            ///
            /// Rows are read newest first by their latest record, a few at a time, and their records that pass
            /// the filters gathered, newest first (time desc, id desc), from the position the cursor carries: the
            /// page is complete once it is full and the next row's latest record is older than the page's last.
            /// One agent's listing reads its own segments, or its bucket's stream rows whose heads name it.
            async fn list_audit_from(
                &self,
                is_stream: bool,
                filter: &AuditFilter,
                after: Option<&AuditPosition>,
                limit: u32,
            ) -> StoreResult<Vec<AuditRecord>> {
                let limit = limit as usize;
                let since = filter.since.map(Timestamp::as_micros);
                let until = filter.until.map(Timestamp::as_micros);
                // The newest time a record of this page may have; rows holding one end at most a span later,
                // which bounds the scan of the listing index.
                let newest = [until.map(|until| until.saturating_sub(1)), after.map(|after| after.occurred_at.as_micros())]
                    .into_iter()
                    .flatten()
                    .min();
                let agent = filter.agent.as_ref().map(AgentId::as_str);
                let wanted = |record: &AuditRecord| {
                    let at = record.occurred_at.as_micros();
                    agent.is_none_or(|agent| record.agent_id == agent)
                        && since.is_none_or(|since| at >= since)
                        && until.is_none_or(|until| at < until)
                        && filter.method.as_deref().is_none_or(|method| {
                            record.method.as_deref().unwrap_or(&record.action) == method
                        })
                        && filter.key.as_deref().is_none_or(|key| {
                            record.key_id.as_deref() == Some(key) || record.key_prefix.as_deref() == Some(key)
                        })
                        && filter.outcome.as_deref().is_none_or(|outcome| record.outcome.as_deref() == Some(outcome))
                        && after.is_none_or(|after| {
                            (record.occurred_at, record.id.as_str()) < (after.occurred_at, after.id.as_str())
                        })
                };
                let query = if is_stream {
                    "select stream_id as owner, seq as position, last_at, heads as prefix, records from audit_batch \
                     where ($1 is null or (bucket = $9 and heads like $10 escape '\\')) \
                     and ($2 is null or last_at >= $2) \
                     and ($3 is null or (first_at <= $3 and last_at <= $4)) \
                     and ($5 is null or (last_at, stream_id, seq) < ($5, $6, $7)) \
                     order by last_at desc, stream_id desc, seq desc limit $8"
                } else {
                    "select agent_id as owner, first_seq as position, last_at, prev_hash as prefix, records \
                     from audit_segment \
                     where ($1 is null or agent_id = $1) and ($9 is null or $10 is not null) \
                     and ($2 is null or last_at >= $2) \
                     and ($3 is null or (first_at <= $3 and last_at <= $4)) \
                     and ($5 is null or (last_at, agent_id, first_seq) < ($5, $6, $7)) \
                     order by last_at desc, agent_id desc, first_seq desc limit $8"
                };
                let span = if is_stream { ROW_SPAN } else { AUDIT_SEGMENT_SPAN };
                let mut page: Vec<AuditRecord> = Vec::new();
                let mut resume: Option<(i64, String, i64)> = None;
                let mut fetch = 4_i64;
                loop {
                    let rows = sqlx::query_as::<$db, AuditListRow>(query)
                        .bind(agent)
                        .bind(since)
                        .bind(newest)
                        .bind(newest.map(|newest| newest.saturating_add(span)))
                        .bind(resume.as_ref().map(|resume| resume.0))
                        .bind(resume.as_ref().map(|resume| resume.1.as_str()))
                        .bind(resume.as_ref().map(|resume| resume.2))
                        .bind(fetch)
                        .bind(agent.map(bucket_of))
                        .bind(agent.map(heads_pattern))
                        .fetch_all(self.reader())
                        .await
                        .map_err(Self::error)?;
                    let more = rows.len() as i64 == fetch;
                    for row in rows {
                        if page.len() >= limit && page.last().is_some_and(|last| last.occurred_at.as_micros() > row.last_at) {
                            return Ok(page);
                        }
                        resume = Some((row.last_at, row.owner.clone(), row.position));
                        page.extend(row.into_records(is_stream)?.into_iter().filter(|record| wanted(record)));
                        page.sort_unstable_by(|a, b| (b.occurred_at, &b.id).cmp(&(a.occurred_at, &a.id)));
                        page.truncate(limit);
                    }
                    if !more {
                        return Ok(page);
                    }
                    fetch = (fetch * 2).min(64);
                }
            }
        }

        #[async_trait::async_trait]
        impl Store for $store {
            async fn migrate(&self) -> StoreResult<()> {
                self.run_migrations().await
            }

            async fn ping(&self) -> StoreResult<()> {
                sqlx::query::<$db>("select 1").execute(self.reader()).await.map_err(Self::error)?;
                Ok(())
            }

            fn backend(&self) -> &'static str {
                $backend
            }

            fn oauth_server(&self) -> &dyn $crate::store::oauth_server::OAuthServerStore {
                self
            }

            #[tracing::instrument(skip_all)]
            async fn list_audit(
                &self,
                filter: &AuditFilter,
                after: Option<&AuditPosition>,
                limit: u32,
            ) -> StoreResult<Vec<AuditRecord>> {
                // Both formats hold records: agents' segments (admin changes, and MCP records from before the
                // writer streams) and the streams' rows. Each gives its newest page; the page is the newest of
                // both.
                let mut page = self.list_audit_from(false, filter, after, limit).await?;
                page.extend(self.list_audit_from(true, filter, after, limit).await?);
                page.sort_unstable_by(|a, b| (b.occurred_at, &b.id).cmp(&(a.occurred_at, &a.id)));
                page.truncate(limit as usize);
                Ok(page)
            }

            async fn append_audit(&self, stream: &mut AuditStream, records: &mut [AuditRecord]) -> StoreResult<()> {
                if records.is_empty() {
                    return Ok(());
                }
                // A batch holds thousands of records: hashing and encoding them is milliseconds of work.
                let batch = $crate::store::off_the_workers(records.len(), || stream.chain(records));
                let mut tx = self.begin_write().await?;
                let now = Timestamp::now().as_micros();
                for chunk in batch.rows.chunks(AUDIT_SEGMENTS_PER_INSERT) {
                    let mut insert = sqlx::QueryBuilder::<$db>::new(
                        "insert into audit_batch (stream_id, seq, bucket, first_at, last_at, heads, prev_hash, hash, \
                         records, created_at, updated_at) ",
                    );
                    insert.push_values(chunk, |mut row, stored| {
                        row.push_bind(stream.id())
                            .push_bind(stored.seq)
                            .push_bind(stored.bucket)
                            .push_bind(stored.first_at)
                            .push_bind(stored.last_at)
                            .push_bind(stored.heads.as_str())
                            .push_bind(stored.prev_hash.as_str())
                            .push_bind(stored.hash.as_str())
                            .push_bind(stored.records.as_str())
                            .push_bind(now)
                            .push_bind(now);
                    });
                    // Only the one-row insert (a one-agent batch's) is kept prepared, so that other row counts
                    // do not push the connection's prepared statements out.
                    insert.build().persistent(chunk.len() == 1).execute(&mut *tx).await.map_err(Self::error)?;
                }
                // The stream's head: one row, updated once per batch.
                sqlx::query::<$db>(
                    "insert into audit_stream (stream_id, last_seq, last_hash, created_at, updated_at) \
                     values ($1, $2, $3, $4, $4) on conflict (stream_id) do update \
                     set last_seq = excluded.last_seq, last_hash = excluded.last_hash, updated_at = excluded.updated_at",
                )
                .bind(stream.id())
                .bind(batch.last_seq)
                .bind(batch.last_hash.as_str())
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(Self::error)?;
                self.commit(tx, Vec::new()).await?;
                stream.commit(batch);
                Ok(())
            }

            async fn audit_streams(&self) -> StoreResult<Vec<StreamHead>> {
                sqlx::query_as::<$db, (String, i64, String, i64, String)>(
                    "select stream_id, last_seq, last_hash, pruned_seq, pruned_hash from audit_stream order by stream_id",
                )
                .fetch_all(self.reader())
                .await
                .map_err(Self::error)
                .map(|rows| {
                    rows.into_iter()
                        .map(|(stream_id, seq, hash, pruned_seq, pruned_hash)| StreamHead {
                            stream_id,
                            seq,
                            hash,
                            pruned_seq,
                            pruned_hash,
                        })
                        .collect()
                })
            }

            async fn audit_stream_rows(
                &self,
                stream: &str,
                after_seq: i64,
                limit: u32,
                agent: Option<&str>,
                records: bool,
            ) -> StoreResult<Vec<VerifiedRow>> {
                // The records of other rows are not read (PostgreSQL does not even decompress them).
                let rows = sqlx::query_as::<$db, AuditStreamRow>(
                    "select stream_id, seq, last_at, prev_hash, hash, heads, \
                     case when $4 and ($5 is null or (bucket = $6 and heads like $7 escape '\\')) \
                     then records end as records \
                     from audit_batch where stream_id = $1 and seq > $2 order by seq limit $3",
                )
                .bind(stream)
                .bind(after_seq)
                .bind(i64::from(limit))
                .bind(records)
                .bind(agent)
                .bind(agent.map(bucket_of))
                .bind(agent.map(heads_pattern))
                .fetch_all(self.reader())
                .await
                .map_err(Self::error)?;
                rows.into_iter().map(AuditStreamRow::into_verified).collect()
            }

            async fn prune_audit_stream(&self, stream: &str, through_seq: i64) -> StoreResult<u64> {
                let mut tx = self.begin_write().await?;
                let Some(hash) = sqlx::query_scalar::<$db, String>(
                    "select hash from audit_batch where stream_id = $1 and seq = $2",
                )
                .bind(stream)
                .bind(through_seq)
                .fetch_optional(&mut *tx)
                .await
                .map_err(Self::error)?
                else {
                    return Ok(0);
                };
                // The anchor first (which waits for the stream's writer to commit its batch), then the rows.
                sqlx::query::<$db>(
                    "update audit_stream set pruned_seq = $2, pruned_hash = $3, updated_at = $4 \
                     where stream_id = $1 and pruned_seq < $2",
                )
                .bind(stream)
                .bind(through_seq)
                .bind(&hash)
                .bind(Timestamp::now().as_micros())
                .execute(&mut *tx)
                .await
                .map_err(Self::error)?;
                let deleted = sqlx::query_scalar::<$db, String>(
                    "delete from audit_batch where stream_id = $1 and seq <= $2 returning heads",
                )
                .bind(stream)
                .bind(through_seq)
                .fetch_all(&mut *tx)
                .await
                .map_err(Self::error)?;
                self.commit(tx, Vec::new()).await?;
                // Each head counts its agent's records in the row.
                let mut records = 0;
                for heads in deleted {
                    let heads: Vec<RowHead> = serde_json::from_str(&heads).unwrap_or_default();
                    records += heads.iter().map(|head| u64::try_from(head.3 - head.1).unwrap_or(0)).sum::<u64>();
                }
                Ok(records)
            }

            async fn audit_heads(&self, agent: Option<&str>) -> StoreResult<Vec<ChainHead>> {
                sqlx::query_as::<$db, (String, i64, String, i64, String)>(
                    "select agent_id, seq, head, pruned_seq, pruned_hash from audit_chain \
                     where ($1 is null or agent_id = $1) order by agent_id",
                )
                .bind(agent)
                .fetch_all(self.reader())
                .await
                .map_err(Self::error)
                .map(|rows| {
                    rows.into_iter()
                        .map(|(agent_id, seq, hash, pruned_seq, pruned_hash)| ChainHead {
                            agent_id,
                            seq,
                            hash,
                            pruned_seq,
                            pruned_hash,
                        })
                        .collect()
                })
            }

            async fn prune_audit(&self, agent: &str, before: Timestamp, max: u32) -> StoreResult<u64> {
                // Most chains hold nothing old enough most of the time. A read says so without locking the
                // chain's head, which would wait for the audit writer's open batch and write a row version,
                // for every agent on every sweep (thousands a minute with thousands of agents).
                let old = sqlx::query_scalar::<$db, i64>(
                    "select count(*) from (select 1 from audit_segment where agent_id = $1 and last_at < $2 \
                     and first_seq > 0 limit 1) as old",
                )
                .bind(agent)
                .bind(before.as_micros())
                .fetch_one(self.reader())
                .await
                .map_err(Self::error)?;
                if old == 0 {
                    return Ok(0);
                }
                let mut tx = self.begin_write().await?;
                // Locks the chain's head: appends to this chain wait until the prune commits.
                let Some(pruned) = sqlx::query_scalar::<$db, i64>(
                    "update audit_chain set pruned_seq = pruned_seq where agent_id = $1 returning pruned_seq",
                )
                .bind(agent)
                .fetch_optional(&mut *tx)
                .await
                .map_err(Self::error)?
                else {
                    return Ok(0);
                };
                // The last segment of the prefix to delete: the newest wholly old one that starts within
                // `max` records (a segment goes whole, so a prune may take up to a segment more than `max`).
                let last = sqlx::query_as::<$db, (i64, String)>(
                    "select last_seq, last_hash from audit_segment where agent_id = $1 and first_seq = \
                     (select max(first_seq) from audit_segment where agent_id = $1 and first_seq > $2 \
                      and first_seq <= $3 and last_at < $4)",
                )
                .bind(agent)
                .bind(pruned)
                .bind(pruned.saturating_add(i64::from(max)))
                .bind(before.as_micros())
                .fetch_optional(&mut *tx)
                .await
                .map_err(Self::error)?;
                let Some((seq, hash)) = last else { return Ok(0) };
                sqlx::query::<$db>("update audit_chain set pruned_seq = $2, pruned_hash = $3 where agent_id = $1")
                    .bind(agent)
                    .bind(seq)
                    .bind(&hash)
                    .execute(&mut *tx)
                    .await
                    .map_err(Self::error)?;
                let deleted = sqlx::query_scalar::<$db, i64>(
                    "delete from audit_segment where agent_id = $1 and first_seq > 0 and last_seq <= $2 \
                     returning last_seq - first_seq + 1",
                )
                .bind(agent)
                .bind(seq)
                .fetch_all(&mut *tx)
                .await
                .map_err(Self::error)?;
                self.commit(tx, Vec::new()).await?;
                Ok(deleted.into_iter().map(|records| u64::try_from(records).unwrap_or(0)).sum())
            }

            async fn audit_chain_page(&self, agent: &str, after_seq: i64, limit: u32) -> StoreResult<Vec<AuditRecord>> {
                // The segment holding the position after `after_seq` starts at most a segment's length
                // before it, which bounds the primary key's scan.
                let limit = limit as usize;
                let mut page = Vec::new();
                let mut from = after_seq.saturating_sub(AUDIT_SEGMENT_RECORDS as i64);
                while page.len() < limit {
                    let segments = sqlx::query_as::<$db, AuditSegmentRow>(
                        "select agent_id, first_seq, last_at, prev_hash, records from audit_segment \
                         where agent_id = $1 and first_seq > $2 and last_seq > $3 order by first_seq limit 16",
                    )
                    .bind(agent)
                    .bind(from)
                    .bind(after_seq)
                    .fetch_all(self.reader())
                    .await
                    .map_err(Self::error)?;
                    let Some(last) = segments.last() else { break };
                    from = last.first_seq;
                    for segment in segments {
                        let records = segment.into_records()?;
                        page.extend(records.into_iter().filter(|record| record.chain_seq.is_some_and(|seq| seq > after_seq)));
                    }
                }
                page.truncate(limit);
                Ok(page)
            }

            async fn announce(&self, message: BusMessage) -> StoreResult<()> {
                let tx = self.begin_write().await?;
                self.commit(tx, vec![message]).await
            }

            fn pool_usage(&self) -> $crate::store::PoolUsage {
                self.pools().iter().fold($crate::store::PoolUsage::default(), |usage, pool| $crate::store::PoolUsage {
                    size: usage.size + pool.size(),
                    idle: usage.idle + pool.num_idle(),
                    max: usage.max + pool.options().get_max_connections(),
                })
            }

            async fn live_replicas(&self) -> StoreResult<Vec<String>> {
                self.replicas().await
            }

            #[tracing::instrument(skip_all, fields(setting = name))]
            async fn get_setting(&self, name: &str) -> StoreResult<Option<String>> {
                sqlx::query_scalar::<$db, String>("select value from setting where name = $1")
                    .bind(name)
                    .fetch_optional(self.reader())
                    .await
                    .map_err(Self::error)
            }

            #[tracing::instrument(skip_all, fields(setting = name))]
            async fn init_setting(&self, name: &str, value: &str) -> StoreResult<String> {
                let now = Timestamp::now().as_micros();
                sqlx::query::<$db>(
                    "insert into setting (name, value, created_at, updated_at) values ($1, $2, $3, $3) \
                     on conflict (name) do nothing",
                )
                .bind(name)
                .bind(value)
                .bind(now)
                .execute(self.writer())
                .await
                .map_err(Self::error)?;
                sqlx::query_scalar::<$db, String>("select value from setting where name = $1")
                    .bind(name)
                    .fetch_one(self.writer())
                    .await
                    .map_err(Self::error)
            }

            #[tracing::instrument(skip_all, fields(setting = name))]
            async fn put_setting(&self, name: &str, value: &str) -> StoreResult<()> {
                let now = Timestamp::now().as_micros();
                sqlx::query::<$db>(
                    "insert into setting (name, value, created_at, updated_at) values ($1, $2, $3, $3) \
                     on conflict (name) do update set value = excluded.value, updated_at = excluded.updated_at",
                )
                .bind(name)
                .bind(value)
                .bind(now)
                .execute(self.writer())
                .await
                .map_err(Self::error)?;
                Ok(())
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
                sqlx::query::<$db>(
                    "insert into agent (agent_id, name, description, rate_limit_rps, rate_limit_burst, \
                     rate_limit_shared, cache_ttl_ms, audit_retention_days, epoch, event_seq, created_at, \
                     updated_at) values ($1, $2, $3, $4, $5, $6, $7, $8, $9, 0, $10, $10)",
                )
                .bind(created.id.as_str())
                .bind(created.name.as_str())
                .bind(created.description.as_deref())
                .bind(created.rate_limit.map(|limit| i64::from(limit.requests_per_second)))
                .bind(created.rate_limit.map(|limit| i64::from(limit.burst)))
                .bind(created.rate_limit.is_some_and(|limit| limit.shared))
                .bind(created.cache_ttl_ms.map(to_i64))
                .bind(created.audit_retention_days.map(i64::from))
                .bind(created.epoch)
                .bind(now.as_micros())
                .execute(&mut *tx)
                .await
                .map_err(Self::error)?;
                let audit = Audit {
                    agent: &created.id,
                    actor,
                    action: "agent.create",
                    target: created.id.as_str(),
                    before: None,
                    after: Some(record_digest(&created, None)),
                };
                Self::insert_audit(&mut tx, audit, now).await?;
                self.check_byte_quotas(&mut tx, &created.id).await?;
                self.commit(tx, vec![BusMessage::AgentChanged { agent: created.id.clone() }]).await?;
                Ok(created)
            }

            #[tracing::instrument(skip_all, fields(agent = %id))]
            async fn get_agent(&self, id: &AgentId) -> StoreResult<Option<Agent>> {
                sqlx::query_as::<$db, AgentRow>(concat!(
                    "select ",
                    agent_columns!(),
                    " from agent where agent_id = $1"
                ))
                .bind(id.as_str())
                .fetch_optional(self.reader())
                .await
                .map_err(Self::error)?
                .map(AgentRow::into_agent)
                .transpose()
            }

            #[tracing::instrument(skip_all)]
            async fn list_agents(&self, after: After<'_>, limit: u32) -> StoreResult<Vec<Agent>> {
                // Every id is non-empty, so `> ''` is the first page.
                sqlx::query_as::<$db, AgentRow>(concat!(
                    "select ",
                    agent_columns!(),
                    " from agent where agent_id > $1 order by agent_id limit $2"
                ))
                .bind(after.unwrap_or(""))
                .bind(i64::from(limit))
                .fetch_all(self.reader())
                .await
                .map_err(Self::error)?
                .into_iter()
                .map(AgentRow::into_agent)
                .collect()
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
                sqlx::query::<$db>(
                    "update agent set name = $2, description = $3, rate_limit_rps = $4, rate_limit_burst = $5, \
                     rate_limit_shared = $6, cache_ttl_ms = $7, audit_retention_days = $8, updated_at = $9 \
                     where agent_id = $1",
                )
                .bind(id.as_str())
                .bind(after.name.as_str())
                .bind(after.description.as_deref())
                .bind(after.rate_limit.map(|limit| i64::from(limit.requests_per_second)))
                .bind(after.rate_limit.map(|limit| i64::from(limit.burst)))
                .bind(after.rate_limit.is_some_and(|limit| limit.shared))
                .bind(after.cache_ttl_ms.map(to_i64))
                .bind(after.audit_retention_days.map(i64::from))
                .bind(now.as_micros())
                .execute(&mut *tx)
                .await
                .map_err(Self::error)?;
                let audit = Audit {
                    agent: id,
                    actor,
                    action: "agent.update",
                    target: id.as_str(),
                    before: Some(record_digest(&before, None)),
                    after: Some(record_digest(&after, None)),
                };
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
                let before = sqlx::query_as::<$db, AgentRow>(concat!(
                    "delete from agent where agent_id = $1 returning ",
                    agent_columns!()
                ))
                .bind(id.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(Self::error)?
                .ok_or(StoreError::NotFound)?
                .into_agent()?;
                let audit = Audit {
                    agent: id,
                    actor,
                    action: "agent.delete",
                    target: id.as_str(),
                    before: Some(record_digest(&before, None)),
                    after: None,
                };
                Self::insert_audit(&mut tx, audit, now).await?;
                self.commit(tx, vec![BusMessage::AgentDeleted { agent: id.clone() }]).await
            }

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
                let audit = Audit {
                    agent: &record.agent_id,
                    actor,
                    action: "key.create",
                    target: record.id.as_str(),
                    before: None,
                    after: Some(record_digest(&record, None)),
                };
                Self::insert_audit(&mut tx, audit, now).await?;
                self.commit(tx, Vec::new()).await?;
                Ok(record)
            }

            #[tracing::instrument(skip_all, fields(agent = %agent))]
            async fn list_keys(&self, agent: &AgentId, after: After<'_>, limit: u32) -> StoreResult<Vec<KeyRecord>> {
                sqlx::query_as::<$db, KeyRow>(concat!(
                    "select ",
                    key_columns!(),
                    " from api_key where agent_id = $1 and ($2 is null or (created_at, api_key_id) > \
                     (select k.created_at, k.api_key_id from api_key k where k.api_key_id = $2)) \
                     order by created_at, api_key_id limit $3"
                ))
                .bind(agent.as_str())
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(self.reader())
                .await
                .map_err(Self::error)?
                .into_iter()
                .map(KeyRow::into_key)
                .collect()
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, key = key_id))]
            async fn revoke_key(&self, agent: &AgentId, key_id: &str, actor: &Actor) -> StoreResult<()> {
                let now = Timestamp::now();
                let mut tx = self.begin_write().await?;
                // A second revocation keeps the first `revoked_at`.
                let after = sqlx::query_as::<$db, KeyRow>(concat!(
                    "update api_key set revoked_at = coalesce(revoked_at, $3), updated_at = $3 \
                     where api_key_id = $1 and agent_id = $2 returning ",
                    key_columns!()
                ))
                .bind(key_id)
                .bind(agent.as_str())
                .bind(now.as_micros())
                .fetch_optional(&mut *tx)
                .await
                .map_err(Self::error)?
                .ok_or(StoreError::NotFound)?
                .into_key()?;
                let before = KeyRecord { revoked_at: None, ..after.clone() };
                let audit = Audit {
                    agent,
                    actor,
                    action: "key.revoke",
                    target: key_id,
                    before: Some(record_digest(&before, None)),
                    after: Some(record_digest(&after, None)),
                };
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
                let before = sqlx::query_as::<$db, KeyRow>(concat!(
                    "select ",
                    key_columns!(),
                    " from api_key where api_key_id = $1 and agent_id = $2"
                ))
                .bind(key_id)
                .bind(agent.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(Self::error)?
                .ok_or(StoreError::NotFound)?
                .into_key()?;
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
                let audit = Audit {
                    agent,
                    actor,
                    action: "key.update",
                    target: key_id,
                    before: Some(record_digest(&before, None)),
                    after: Some(record_digest(&after, None)),
                };
                Self::insert_audit(&mut tx, audit, now).await?;
                let changed = BusMessage::KeyChanged { agent: agent.clone(), key: key_id.to_owned() };
                self.commit(tx, vec![changed]).await?;
                Ok(after)
            }

            #[tracing::instrument(skip_all)]
            async fn take_shared_token(
                &self,
                bucket: &str,
                limit: $crate::guard::limiter::Limit,
            ) -> StoreResult<$crate::guard::limiter::Outcome> {
                // GCRA in one atomic upsert: a request is let through when moving the bucket's theoretical
                // arrival time (`tat`) one interval past max(tat, now) leaves it within the burst's tolerance
                // of now; otherwise no row comes back and nothing changes.
                let now = Timestamp::now().as_micros();
                let interval = limit.interval_micros();
                let tolerance = limit.tolerance_micros();
                let tat = sqlx::query_scalar::<$db, i64>(
                    "insert into rate_bucket (bucket, tat, created_at, updated_at) values ($1, $2 + $3, $2, $2) \
                     on conflict (bucket) do update \
                     set tat = (case when rate_bucket.tat > $2 then rate_bucket.tat else $2 end) + $3, \
                         updated_at = $2 \
                     where (case when rate_bucket.tat > $2 then rate_bucket.tat else $2 end) + $3 - $2 <= $4 \
                     returning tat",
                )
                .bind(bucket)
                .bind(now)
                .bind(interval)
                .bind(tolerance)
                .fetch_optional(self.writer())
                .await
                .map_err(Self::error)?;
                if let Some(tat) = tat {
                    return Ok(limit.allowed_at(tat - now));
                }
                let tat = sqlx::query_scalar::<$db, i64>("select tat from rate_bucket where bucket = $1")
                    .bind(bucket)
                    .fetch_optional(self.writer())
                    .await
                    .map_err(Self::error)?
                    .unwrap_or(now);
                Ok(limit.refused_at(tat - now))
            }

            #[tracing::instrument(skip_all)]
            async fn find_key(&self, digest_hex: &str) -> StoreResult<Option<KeyRecord>> {
                sqlx::query_as::<$db, KeyRow>(concat!("select ", key_columns!(), " from api_key where digest = $1"))
                    .bind(digest_hex)
                    .fetch_optional(self.reader())
                    .await
                    .map_err(Self::error)?
                    .map(KeyRow::into_key)
                    .transpose()
            }

            #[tracing::instrument(skip_all, fields(key = key_id))]
            async fn find_key_by_id(&self, key_id: &str) -> StoreResult<Option<KeyRecord>> {
                sqlx::query_as::<$db, KeyRow>(concat!("select ", key_columns!(), " from api_key where api_key_id = $1"))
                    .bind(key_id)
                    .fetch_optional(self.reader())
                    .await
                    .map_err(Self::error)?
                    .map(KeyRow::into_key)
                    .transpose()
            }

            #[tracing::instrument(skip_all, fields(agent = %grant.agent_id))]
            async fn put_oauth_subject(
                &self,
                grant: &SubjectGrant,
                max_per_agent: u64,
                actor: &Actor,
            ) -> StoreResult<Upserted<SubjectGrant>> {
                self.sql_put_subject(grant, max_per_agent, actor).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent))]
            async fn list_oauth_subjects(
                &self,
                agent: &AgentId,
                after: After<'_>,
                limit: u32,
            ) -> StoreResult<Vec<SubjectGrant>> {
                self.sql_list_subjects(agent, after, limit).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent))]
            async fn get_oauth_subject(
                &self,
                agent: &AgentId,
                issuer: &str,
                subject: &str,
            ) -> StoreResult<Option<SubjectGrant>> {
                self.sql_get_subject(agent, issuer, subject).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent))]
            async fn delete_oauth_subject(
                &self,
                agent: &AgentId,
                issuer: &str,
                subject: &str,
                actor: &Actor,
            ) -> StoreResult<()> {
                self.sql_delete_subject(agent, issuer, subject, actor).await
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

            #[tracing::instrument(skip_all, fields(agent = %agent, uri = %resource.uri))]
            async fn put_resource(
                &self,
                agent: &AgentId,
                resource: &NewResource,
                actor: &Actor,
            ) -> StoreResult<Upserted<Resource>> {
                let now = Timestamp::now();
                let mut tx = self.begin_write().await?;
                let seq = Self::next_seq(&mut tx, agent).await?;
                let (before, after) = Self::upsert_resource_in(&mut tx, agent, resource, actor, now).await?;
                self.check_resource_quotas(&mut tx, agent).await?;
                let mut change = Change::default();
                change.resource_put(before.as_ref(), &after);
                self.finish_change(tx, agent, seq, &change, now).await?;
                Ok(Upserted { item: after, created: before.is_none() })
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, upserts = upserts.len(), deletes = deletes.len()))]
            async fn batch_resources(
                &self,
                agent: &AgentId,
                upserts: &[NewResource],
                deletes: &[ResourceUri],
                actor: &Actor,
            ) -> StoreResult<BatchOutcome> {
                if upserts.is_empty() && deletes.is_empty() {
                    // Nothing changes, so no event; the agent must still exist.
                    return match self.get_agent(agent).await? {
                        Some(_) => Ok(BatchOutcome::default()),
                        None => Err(StoreError::NotFound),
                    };
                }
                let now = Timestamp::now();
                let mut tx = self.begin_write().await?;
                let seq = Self::next_seq(&mut tx, agent).await?;
                let mut change = Change::default();
                let mut outcome = BatchOutcome::default();
                for resource in upserts {
                    let (before, after) = Self::upsert_resource_in(&mut tx, agent, resource, actor, now).await?;
                    change.resource_put(before.as_ref(), &after);
                    outcome.upserted.push(Upserted { item: after, created: before.is_none() });
                }
                for uri in deletes {
                    // An error drops `tx`, which rolls the whole batch back.
                    Self::delete_resource_in(&mut tx, agent, uri, actor, now).await.map_err(|error| match error {
                        StoreError::NotFound => StoreError::Absent(format!(
                            "resource {:?} does not exist, so it cannot be deleted; nothing was changed",
                            uri.as_str()
                        )),
                        other => other,
                    })?;
                    change.resource_deleted(uri.as_str());
                    outcome.deleted.push(uri.clone());
                }
                self.check_resource_quotas(&mut tx, agent).await?;
                self.finish_change(tx, agent, seq, &change, now).await?;
                Ok(outcome)
            }

            #[tracing::instrument(skip_all, fields(agent = %agent))]
            async fn list_resources(
                &self,
                agent: &AgentId,
                after: After<'_>,
                limit: u32,
            ) -> StoreResult<Vec<Resource>> {
                // Every URI is non-empty, so `> ''` is the first page.
                sqlx::query_as::<$db, ResourceRow>(concat!(
                    "select ",
                    resource_columns!(),
                    " from resource where agent_id = $1 and uri > $2 order by uri limit $3"
                ))
                .bind(agent.as_str())
                .bind(after.unwrap_or(""))
                .bind(i64::from(limit))
                .fetch_all(self.reader())
                .await
                .map_err(Self::error)?
                .into_iter()
                .map(ResourceRow::into_resource)
                .collect()
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, uri = uri))]
            async fn get_resource(&self, agent: &AgentId, uri: &str) -> StoreResult<Option<(Resource, Content)>> {
                sqlx::query_as::<$db, ResourceContentRow>(concat!(
                    "select ",
                    resource_content_columns!(),
                    " from resource where agent_id = $1 and uri = $2"
                ))
                .bind(agent.as_str())
                .bind(uri)
                .fetch_optional(self.reader())
                .await
                .map_err(Self::error)?
                .map(ResourceContentRow::into_parts)
                .transpose()
            }

            #[tracing::instrument(skip_all, fields(agent = %agent))]
            async fn directory_children(
                &self,
                agent: &AgentId,
                prefix: &str,
                limit: u32,
            ) -> StoreResult<Vec<Resource>> {
                // A range on the primary key, `(prefix, successor of prefix)`, narrowed in SQL to URIs with no
                // further `/` after the prefix, so deeper resources neither cost nor crowd out children.
                let Some(upper) = prefix_upper_bound(prefix) else {
                    return Ok(Vec::new());
                };
                let rest_from = i32::try_from(prefix.chars().count() + 1)
                    .map_err(|_| StoreError::Corrupt("directory prefix too long".to_owned()))?;
                sqlx::query_as::<$db, ResourceRow>(concat!(
                    "select ",
                    resource_columns!(),
                    " from resource where agent_id = $1 and uri > $2 and uri < $3 \
                      and substr(uri, $4) not like '%/%' order by uri limit $5"
                ))
                .bind(agent.as_str())
                .bind(prefix)
                .bind(upper)
                .bind(rest_from)
                .bind(i64::from(limit))
                .fetch_all(self.reader())
                .await
                .map_err(Self::error)?
                .into_iter()
                .map(ResourceRow::into_resource)
                .collect()
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, uri = %uri))]
            async fn delete_resource(&self, agent: &AgentId, uri: &ResourceUri, actor: &Actor) -> StoreResult<()> {
                let now = Timestamp::now();
                let mut tx = self.begin_write().await?;
                let seq = Self::next_seq(&mut tx, agent).await?;
                Self::delete_resource_in(&mut tx, agent, uri, actor, now).await?;
                let mut change = Change::default();
                change.resource_deleted(uri.as_str());
                self.finish_change(tx, agent, seq, &change, now).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, uri_template = %template.uri_template))]
            async fn put_template(
                &self,
                agent: &AgentId,
                template: &NewResourceTemplate,
                actor: &Actor,
            ) -> StoreResult<Upserted<ResourceTemplate>> {
                let now = Timestamp::now();
                let mut tx = self.begin_write().await?;
                let seq = Self::next_seq(&mut tx, agent).await?;
                let before = sqlx::query_as::<$db, TemplateRow>(concat!(
                    "select ",
                    template_columns!(),
                    " from resource_template where agent_id = $1 and uri_template = $2"
                ))
                .bind(agent.as_str())
                .bind(template.uri_template.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(Self::error)?
                .map(TemplateRow::into_template)
                .transpose()?;
                let after = ResourceTemplate {
                    uri_template: template.uri_template.clone(),
                    name: template.name.clone(),
                    title: template.title.clone(),
                    description: template.description.clone(),
                    mime_type: template.mime_type.clone(),
                    annotations: template.annotations.clone(),
                    text: template.text.clone(),
                    created_at: before.as_ref().map_or(now, |old| old.created_at),
                    updated_at: now,
                };
                let statement = if before.is_some() {
                    "update resource_template set name = $3, title = $4, description = $5, mime_type = $6, \
                     annotations = $7, text = $8, updated_at = $10 where agent_id = $1 and uri_template = $2"
                } else {
                    "insert into resource_template (agent_id, uri_template, name, title, description, mime_type, \
                     annotations, text, created_at, updated_at) values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
                };
                sqlx::query::<$db>(statement)
                    .bind(agent.as_str())
                    .bind(after.uri_template.as_str())
                    .bind(after.name.as_str())
                    .bind(after.title.as_deref())
                    .bind(after.description.as_deref())
                    .bind(after.mime_type.as_deref())
                    .bind(json_text(after.annotations.as_ref()))
                    .bind(after.text.as_deref())
                    .bind(after.created_at.as_micros())
                    .bind(now.as_micros())
                    .execute(&mut *tx)
                    .await
                    .map_err(Self::error)?;
                let max = self.quotas().max_templates_per_agent;
                Self::check_count_quota(&mut tx, agent, "resource_template", max, "max_templates_per_agent").await?;
                self.check_byte_quotas(&mut tx, agent).await?;
                let audit = Audit {
                    agent,
                    actor,
                    action: "template.put",
                    target: after.uri_template.as_str(),
                    before: before.as_ref().map(|old| record_digest(old, None)),
                    after: Some(record_digest(&after, None)),
                };
                Self::insert_audit(&mut tx, audit, now).await?;
                let change = Change::templates_changed();
                self.finish_change(tx, agent, seq, &change, now).await?;
                Ok(Upserted { item: after, created: before.is_none() })
            }

            #[tracing::instrument(skip_all, fields(agent = %agent))]
            async fn list_templates(
                &self,
                agent: &AgentId,
                after: After<'_>,
                limit: u32,
            ) -> StoreResult<Vec<ResourceTemplate>> {
                sqlx::query_as::<$db, TemplateRow>(concat!(
                    "select ",
                    template_columns!(),
                    " from resource_template where agent_id = $1 and uri_template > $2 order by uri_template limit $3"
                ))
                .bind(agent.as_str())
                .bind(after.unwrap_or(""))
                .bind(i64::from(limit))
                .fetch_all(self.reader())
                .await
                .map_err(Self::error)?
                .into_iter()
                .map(TemplateRow::into_template)
                .collect()
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, uri_template = uri_template))]
            async fn delete_template(&self, agent: &AgentId, uri_template: &str, actor: &Actor) -> StoreResult<()> {
                let now = Timestamp::now();
                let mut tx = self.begin_write().await?;
                let seq = Self::next_seq(&mut tx, agent).await?;
                let before = sqlx::query_as::<$db, TemplateRow>(concat!(
                    "delete from resource_template where agent_id = $1 and uri_template = $2 returning ",
                    template_columns!()
                ))
                .bind(agent.as_str())
                .bind(uri_template)
                .fetch_optional(&mut *tx)
                .await
                .map_err(Self::error)?
                .ok_or(StoreError::NotFound)?
                .into_template()?;
                let audit = Audit {
                    agent,
                    actor,
                    action: "template.delete",
                    target: uri_template,
                    before: Some(record_digest(&before, None)),
                    after: None,
                };
                Self::insert_audit(&mut tx, audit, now).await?;
                let change = Change::templates_changed();
                self.finish_change(tx, agent, seq, &change, now).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, prompt = %prompt.name))]
            async fn put_prompt(
                &self,
                agent: &AgentId,
                prompt: &NewPrompt,
                actor: &Actor,
            ) -> StoreResult<Upserted<Prompt>> {
                let now = Timestamp::now();
                let mut tx = self.begin_write().await?;
                let seq = Self::next_seq(&mut tx, agent).await?;
                let before = sqlx::query_as::<$db, PromptRow>(concat!(
                    "select ",
                    prompt_columns!(),
                    " from prompt where agent_id = $1 and name = $2"
                ))
                .bind(agent.as_str())
                .bind(prompt.name.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(Self::error)?
                .map(PromptRow::into_prompt)
                .transpose()?;
                let after = Prompt {
                    name: prompt.name.clone(),
                    title: prompt.title.clone(),
                    description: prompt.description.clone(),
                    arguments: prompt.arguments.clone(),
                    messages: prompt.messages.clone(),
                    created_at: before.as_ref().map_or(now, |old| old.created_at),
                    updated_at: now,
                };
                let statement = if before.is_some() {
                    "update prompt set title = $3, description = $4, arguments = $5, messages = $6, updated_at = $8 \
                     where agent_id = $1 and name = $2"
                } else {
                    "insert into prompt (agent_id, name, title, description, arguments, messages, created_at, \
                     updated_at) values ($1, $2, $3, $4, $5, $6, $7, $8)"
                };
                sqlx::query::<$db>(statement)
                    .bind(agent.as_str())
                    .bind(after.name.as_str())
                    .bind(after.title.as_deref())
                    .bind(after.description.as_deref())
                    .bind(json_string(&after.arguments)?)
                    .bind(json_string(&after.messages)?)
                    .bind(after.created_at.as_micros())
                    .bind(now.as_micros())
                    .execute(&mut *tx)
                    .await
                    .map_err(Self::error)?;
                let max = self.quotas().max_prompts_per_agent;
                Self::check_count_quota(&mut tx, agent, "prompt", max, "max_prompts_per_agent").await?;
                self.check_byte_quotas(&mut tx, agent).await?;
                let audit = Audit {
                    agent,
                    actor,
                    action: "prompt.put",
                    target: after.name.as_str(),
                    before: before.as_ref().map(|old| record_digest(old, None)),
                    after: Some(record_digest(&after, None)),
                };
                Self::insert_audit(&mut tx, audit, now).await?;
                let change = Change::prompts_changed();
                self.finish_change(tx, agent, seq, &change, now).await?;
                Ok(Upserted { item: after, created: before.is_none() })
            }

            #[tracing::instrument(skip_all, fields(agent = %agent))]
            async fn list_prompts(&self, agent: &AgentId, after: After<'_>, limit: u32) -> StoreResult<Vec<Prompt>> {
                sqlx::query_as::<$db, PromptRow>(concat!(
                    "select ",
                    prompt_columns!(),
                    " from prompt where agent_id = $1 and name > $2 order by name limit $3"
                ))
                .bind(agent.as_str())
                .bind(after.unwrap_or(""))
                .bind(i64::from(limit))
                .fetch_all(self.reader())
                .await
                .map_err(Self::error)?
                .into_iter()
                .map(PromptRow::into_prompt)
                .collect()
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, uri_template = %uri_template))]
            async fn get_template(
                &self,
                agent: &AgentId,
                uri_template: &str,
            ) -> StoreResult<Option<ResourceTemplate>> {
                sqlx::query_as::<$db, TemplateRow>(concat!(
                    "select ",
                    template_columns!(),
                    " from resource_template where agent_id = $1 and uri_template = $2"
                ))
                .bind(agent.as_str())
                .bind(uri_template)
                .fetch_optional(self.reader())
                .await
                .map_err(Self::error)?
                .map(TemplateRow::into_template)
                .transpose()
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, prompt = %name))]
            async fn get_prompt(&self, agent: &AgentId, name: &PromptName) -> StoreResult<Option<Prompt>> {
                sqlx::query_as::<$db, PromptRow>(concat!(
                    "select ",
                    prompt_columns!(),
                    " from prompt where agent_id = $1 and name = $2"
                ))
                .bind(agent.as_str())
                .bind(name.as_str())
                .fetch_optional(self.reader())
                .await
                .map_err(Self::error)?
                .map(PromptRow::into_prompt)
                .transpose()
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, prompt = %name))]
            async fn delete_prompt(&self, agent: &AgentId, name: &PromptName, actor: &Actor) -> StoreResult<()> {
                let now = Timestamp::now();
                let mut tx = self.begin_write().await?;
                let seq = Self::next_seq(&mut tx, agent).await?;
                let before = sqlx::query_as::<$db, PromptRow>(concat!(
                    "delete from prompt where agent_id = $1 and name = $2 returning ",
                    prompt_columns!()
                ))
                .bind(agent.as_str())
                .bind(name.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(Self::error)?
                .ok_or(StoreError::NotFound)?
                .into_prompt()?;
                let audit = Audit {
                    agent,
                    actor,
                    action: "prompt.delete",
                    target: name.as_str(),
                    before: Some(record_digest(&before, None)),
                    after: None,
                };
                Self::insert_audit(&mut tx, audit, now).await?;
                let change = Change::prompts_changed();
                self.finish_change(tx, agent, seq, &change, now).await
            }

            #[tracing::instrument(skip_all, fields(agent = %session.agent_id, session = %session.digest))]
            async fn create_session(
                &self,
                session: &Session,
                max_per_key: u32,
                live_since: Timestamp,
            ) -> StoreResult<bool> {
                self.sql_create_session(session, max_per_key, live_since).await
            }

            #[tracing::instrument(skip_all, fields(session = %digest))]
            async fn get_session(&self, digest: &SessionDigest) -> StoreResult<Option<Session>> {
                self.sql_get_session(digest).await
            }

            #[tracing::instrument(skip_all, fields(session = %digest))]
            async fn touch_session(&self, digest: &SessionDigest, at: Timestamp) -> StoreResult<()> {
                self.sql_touch_session(digest, at).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, session = %digest))]
            async fn delete_session(&self, agent: &AgentId, digest: &SessionDigest) -> StoreResult<bool> {
                self.sql_delete_session(agent, digest).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, session = %digest))]
            async fn subscribe(
                &self,
                agent: &AgentId,
                digest: &SessionDigest,
                uri: &ResourceUri,
                limit: u32,
            ) -> StoreResult<bool> {
                self.sql_subscribe(agent, digest, uri, limit).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, session = %digest))]
            async fn unsubscribe(&self, agent: &AgentId, digest: &SessionDigest, uri: &str) -> StoreResult<()> {
                self.sql_unsubscribe(agent, digest, uri).await
            }

            #[tracing::instrument(skip_all, fields(session = %digest))]
            async fn subscriptions(&self, digest: &SessionDigest) -> StoreResult<Vec<String>> {
                self.sql_subscriptions(digest).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent))]
            async fn event_head(&self, agent: &AgentId) -> StoreResult<Option<(i64, i64)>> {
                self.sql_event_head(agent).await
            }

            #[tracing::instrument(skip_all)]
            async fn prune(
                &self,
                events_before: Timestamp,
                keep_per_agent: u64,
                sessions_idle_before: Timestamp,
            ) -> StoreResult<Pruned> {
                self.sql_prune(events_before, keep_per_agent, sessions_idle_before).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, after_seq = after_seq))]
            async fn events_after(&self, agent: &AgentId, after_seq: i64, limit: u32) -> StoreResult<Vec<ChangeEvent>> {
                sqlx::query_as::<$db, EventRow>(
                    "select agent_id, seq, updated_uris, resources_list_changed, prompts_list_changed, created_at \
                     from event where agent_id = $1 and seq > $2 order by seq limit $3",
                )
                .bind(agent.as_str())
                .bind(after_seq)
                .bind(i64::from(limit))
                .fetch_all(self.reader())
                .await
                .map_err(Self::error)?
                .into_iter()
                .map(EventRow::into_event)
                .collect()
            }
        }
    };
}

pub(in crate::store) use impl_store_methods;
