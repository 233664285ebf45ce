//! What replicas share beyond the registry, written once for both backends: the
//! [`ReplicaStore`](crate::store::ReplicaStore) implementation.
//!
//! Shared rate-limit buckets are one atomic upsert each, the same SQL on both backends. The `replica` table
//! exists only where several replicas do (PostgreSQL): each backend supplies its statements as hooks
//! (`replicas`, `deregister`; no-ops with SQLite's single replica). A replica registers and refreshes its row
//! on its listener's own connection ([`PgStore::register_replica_on`]).
//!
//! [`PgStore::register_replica_on`]: crate::store::postgres::PgStore::register_replica_on

/// Expands the [`ReplicaStore`](crate::store::ReplicaStore) implementation for `$store`.
macro_rules! impl_replica_store {
    ($store:ty, $db:ty) => {
        #[async_trait::async_trait]
        impl ReplicaStore for $store {
            async fn live_replicas(&self) -> StoreResult<Vec<String>> {
                self.replicas().await
            }

            async fn deregister_replica(&self, replica: &str) -> StoreResult<()> {
                self.deregister(replica).await
            }

            #[tracing::instrument(skip_all)]
            async fn take_shared_token(&self, bucket: &str, limit: Limit) -> StoreResult<Outcome> {
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

            fn pool_usage(&self) -> PoolUsage {
                self.pools().iter().fold(PoolUsage::default(), |usage, pool| PoolUsage {
                    size: usage.size.saturating_add(pool.size()),
                    idle: usage.idle.saturating_add($crate::store::idle_of(pool.num_idle(), pool.size())),
                    max: usage.max.saturating_add(pool.options().get_max_connections()),
                })
            }
        }
    };
}

pub(in crate::store) use impl_replica_store;
