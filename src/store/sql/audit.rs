//! The audit log's SQL, written once for both backends: the [`AuditStore`](crate::store::AuditStore)
//! implementation.
//!
//! Two formats hold records: agents' own chains, stored as segments ([`super::audit_segment`]; admin
//! changes, which commit inside their change's transaction through `append_audit_in`, and MCP records from
//! before the writer streams), and the writer streams' rows ([`crate::audit::stream`]), which
//! [`AuditStore::append_audit`](crate::store::AuditStore::append_audit) appends. Listing reads both;
//! verification and retention walk each chain.

/// Expands the [`AuditStore`](crate::store::AuditStore) implementation, and the audit statements every
/// admin change runs inside its transaction, for `$store`.
macro_rules! impl_audit_store {
    ($store:ty, $db:ty) => {
        impl $store {
            /// Inserts `rows` with `insert` (the statement up to its values), as many rows a statement as
            /// [`statement_rows`] gives for their `bytes`, each row's values bound by `bind` into arguments
            /// sized for them at once. Only the one-row statement (an admin change's, a one-agent batch's, a row
            /// larger than a statement's bytes) is kept prepared, so that other row counts do not push the
            /// connection's prepared statements out.
            async fn insert_rows<T>(
                connection: &mut <$db as sqlx::Database>::Connection,
                insert: &'static str,
                rows: &[T],
                bytes: impl Fn(&T) -> usize,
                mut bind: impl FnMut(&mut sqlx::query_builder::Separated<'_, $db, &'static str>, &T),
            ) -> StoreResult<()> {
                let mut rest = rows;
                while !rest.is_empty() {
                    let (count, size) = statement_rows(rest, &bytes);
                    let (chunk, others) = rest.split_at(count);
                    rest = others;
                    let mut arguments = <$db as sqlx::Database>::Arguments::default();
                    sqlx::Arguments::reserve(
                        &mut arguments,
                        chunk.len() * AUDIT_VALUES_PER_ROW,
                        size + chunk.len() * AUDIT_ROW_ENCODING_BYTES,
                    );
                    let mut statement = sqlx::QueryBuilder::<$db>::with_arguments(insert, arguments);
                    statement.push_values(chunk, |mut row, item| bind(&mut row, item));
                    let statement = statement.build().persistent(chunk.len() == 1);
                    statement.execute(&mut *connection).await.map_err(Self::error)?;
                }
                Ok(())
            }

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
                        page.extend(row.into_records_aside(is_stream, agent).await?.into_iter().filter(|record| wanted(record)));
                        page.sort_unstable_by(|a, b| (b.occurred_at, &b.id).cmp(&(a.occurred_at, &a.id)));
                        page.truncate(limit);
                    }
                    if !more {
                        return Ok(page);
                    }
                    fetch = (fetch * 2).min(64);
                }
            }

            /// Appends `records` to their agents' hash chains and stores them as segments (one agent's
            /// run of records in a row; see the 0008 migration), inside `tx`, leaving them sorted by agent
            /// (each agent's in the order they came) with their chain positions set. The statement that
            /// reserves the records' positions locks each agent's head row (agents in sorted order, so
            /// concurrent writers never deadlock); a batch costs the same few statements however many
            /// agents it spans.
            async fn append_audit_in(tx: &mut Tx, records: &mut [AuditRecord]) -> StoreResult<()> {
                // Stable: each agent's records keep their order, which is their order in its chain.
                records.sort_by(|a, b| a.agent_id.cmp(&b.agent_id));
                let mut counts: Vec<(String, i64)> = Vec::new();
                for record in records.iter() {
                    match counts.last_mut() {
                        Some((agent, count)) if *agent == record.agent_id => *count += 1,
                        _ => counts.push((record.agent_id.to_string(), 1)),
                    }
                }
                let reserved = Self::reserve_audit_positions(tx, &counts).await?;
                // A batch holds thousands of records: hashing and encoding them is milliseconds of work.
                let chained = $crate::store::off_the_workers(records.len(), || {
                    let mut heads = Vec::with_capacity(counts.len());
                    let mut segments = Vec::new();
                    let mut rest = &mut records[..];
                    for ((agent, count), (last, hash)) in counts.iter().zip(reserved) {
                        let (mine, others) = std::mem::take(&mut rest).split_at_mut(*count as usize);
                        rest = others;
                        let (chained, head) = chain_audit_segments(agent, mine, last - count, hash)?;
                        segments.extend(chained);
                        heads.push((agent.as_str(), head));
                    }
                    Ok::<_, StoreError>((heads, segments))
                });
                let (heads, segments) = chained?;
                Self::store_audit_heads(tx, &heads).await?;
                let now = Timestamp::now().as_micros();
                let insert = "insert into audit_segment (agent_id, first_seq, last_seq, first_at, last_at, prev_hash, \
                              last_hash, records, created_at, updated_at) ";
                let bytes = |segment: &AuditSegmentInsert<'_>| {
                    segment.agent_id.len() + segment.prev_hash.len() + segment.last_hash.len() + segment.records.len()
                };
                Self::insert_rows(&mut **tx, insert, &segments, bytes, |row, segment| {
                    row.push_bind(segment.agent_id)
                        .push_bind(segment.first_seq)
                        .push_bind(segment.last_seq)
                        .push_bind(segment.first_at)
                        .push_bind(segment.last_at)
                        .push_bind(segment.prev_hash.as_str())
                        .push_bind(segment.last_hash.as_str())
                        .push_bind(segment.records.as_str())
                        .push_bind(now)
                        .push_bind(now);
                })
                .await?;
                Ok(())
            }
        }

        #[async_trait::async_trait]
        impl AuditStore for $store {
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

            async fn append_audit(&self, stream: &mut AuditStream, records: &mut [QueuedRecord]) -> StoreResult<()> {
                if records.is_empty() {
                    return Ok(());
                }
                // A batch holds thousands of records: hashing and encoding them is milliseconds of work.
                let batch = $crate::store::off_the_workers(records.len(), || stream.chain(records));
                let mut tx = self.begin_write().await?;
                let now = Timestamp::now().as_micros();
                let insert = "insert into audit_batch (stream_id, seq, bucket, first_at, last_at, heads, prev_hash, \
                              hash, records, created_at, updated_at) ";
                let bytes = |stored: &$crate::audit::stream::StreamRow| {
                    stream.id().len() + stored.heads.len() + stored.prev_hash.len() + stored.hash.len() + stored.records.len()
                };
                Self::insert_rows(&mut *tx, insert, &batch.rows, bytes, |row, stored| {
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
                })
                .await?;
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
                // The connection's buffers grew to the batch's largest statement (about half a MiB,
                // `AUDIT_STATEMENT_BYTES`, or a row larger than that alone) and would keep that size in the
                // pool: every connection the writer used would hold one.
                sqlx::Connection::shrink_buffers(&mut *tx);
                self.commit(tx, Vec::new()).await?;
                stream.commit(batch);
                Ok(())
            }

            async fn audit_streams(&self) -> StoreResult<Vec<StreamHead>> {
                let heads = sqlx::query_as::<$db, HeadRow>(
                    "select stream_id as owner, last_seq as seq, last_hash as hash, pruned_seq, pruned_hash \
                     from audit_stream order by stream_id",
                );
                let heads = heads.fetch_all(self.reader()).await.map_err(Self::error)?;
                Ok(heads.into_iter().map(HeadRow::into_stream_head).collect())
            }

            async fn audit_stream_rows(&self, wanted: StreamRows<'_>) -> StoreResult<Vec<VerifiedRow>> {
                let StreamRows { stream, after_seq, limit, records, agent } = wanted;
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
                .bind(agent.map(AgentId::as_str))
                .bind(agent.map(|agent| bucket_of(agent.as_str())))
                .bind(agent.map(|agent| heads_pattern(agent.as_str())))
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

            async fn audit_heads(&self, agent: Option<&AgentId>) -> StoreResult<Vec<ChainHead>> {
                let heads = sqlx::query_as::<$db, HeadRow>(
                    "select agent_id as owner, seq, head as hash, pruned_seq, pruned_hash from audit_chain \
                     where ($1 is null or agent_id = $1) order by agent_id",
                );
                let heads = heads.bind(agent.map(AgentId::as_str)).fetch_all(self.reader()).await.map_err(Self::error)?;
                Ok(heads.into_iter().map(HeadRow::into_chain_head).collect())
            }

            async fn audit_chains_to_prune(
                &self,
                now: Timestamp,
                before: Timestamp,
                default_before: Option<Timestamp>,
            ) -> StoreResult<Vec<(String, Option<u32>)>> {
                // The index on `last_at` bounds the scan to records older than the shortest retention; each
                // is then held against its own agent's. Planned for the values bound (not a prepared plan),
                // so that the bound is used.
                let rows = sqlx::query_as::<$db, (String, Option<i64>)>(
                    "select distinct s.agent_id, a.audit_retention_days from audit_segment s \
                     left join agent a on a.agent_id = s.agent_id \
                     where s.last_at < $1 and s.first_seq > 0 and case \
                       when a.audit_retention_days is null then s.last_at < $3 \
                       else a.audit_retention_days > 0 and s.last_at < $2 - a.audit_retention_days * 86400000000 \
                     end",
                )
                .bind(before.as_micros())
                .bind(now.as_micros())
                .bind(default_before.map_or(i64::MIN, Timestamp::as_micros))
                .persistent(false)
                .fetch_all(self.reader())
                .await
                .map_err(Self::error)?;
                Ok(rows
                    .into_iter()
                    .map(|(agent, days)| (agent, days.map(|days| u32::try_from(days).unwrap_or(u32::MAX))))
                    .collect())
            }

            async fn shortest_audit_retention(&self) -> StoreResult<Option<u32>> {
                let days = sqlx::query_scalar::<$db, Option<i64>>(
                    "select min(audit_retention_days) from agent where audit_retention_days > 0",
                )
                .fetch_one(self.reader())
                .await
                .map_err(Self::error)?;
                Ok(days.map(|days| u32::try_from(days).unwrap_or(u32::MAX)))
            }

            async fn prune_audit(&self, agent: &AgentId, before: Timestamp, max: u32) -> StoreResult<u64> {
                // Most chains hold nothing old enough most of the time. A read says so without locking the
                // chain's head, which would wait for the audit writer's open batch and write a row version,
                // for every agent on every sweep (thousands a minute with thousands of agents).
                let old = sqlx::query_scalar::<$db, i64>(
                    "select count(*) from (select 1 from audit_segment where agent_id = $1 and last_at < $2 \
                     and first_seq > 0 limit 1) as old",
                )
                .bind(agent.as_str())
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
                .bind(agent.as_str())
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
                .bind(agent.as_str())
                .bind(pruned)
                .bind(pruned.saturating_add(i64::from(max)))
                .bind(before.as_micros())
                .fetch_optional(&mut *tx)
                .await
                .map_err(Self::error)?;
                let Some((seq, hash)) = last else { return Ok(0) };
                sqlx::query::<$db>("update audit_chain set pruned_seq = $2, pruned_hash = $3 where agent_id = $1")
                    .bind(agent.as_str())
                    .bind(seq)
                    .bind(&hash)
                    .execute(&mut *tx)
                    .await
                    .map_err(Self::error)?;
                let deleted = sqlx::query_scalar::<$db, i64>(
                    "delete from audit_segment where agent_id = $1 and first_seq > 0 and last_seq <= $2 \
                     returning last_seq - first_seq + 1",
                )
                .bind(agent.as_str())
                .bind(seq)
                .fetch_all(&mut *tx)
                .await
                .map_err(Self::error)?;
                self.commit(tx, Vec::new()).await?;
                Ok(deleted.into_iter().map(|records| u64::try_from(records).unwrap_or(0)).sum())
            }

            async fn audit_chain_page(&self, agent: &AgentId, after_seq: i64, limit: u32) -> StoreResult<Vec<AuditRecord>> {
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
                    .bind(agent.as_str())
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
        }
    };
}

pub(in crate::store) use impl_audit_store;
