-- Limits set through the admin API: an agent's shared (exact across replicas) rate limit, its audit retention,
-- and per-key rate limits; and the token buckets of the shared limits.

-- true: the agent's `rateLimit` is counted in `rate_bucket` by every replica together, not per replica
alter table agent add column rate_limit_shared boolean not null default false;
-- days the agent's audit records are kept; 0 = forever; null = the configured retention
alter table agent add column audit_retention_days bigint;

-- a key's own request budget; both null = the configured per-key limit
alter table api_key add column rate_limit_rps bigint;
-- true: the key's own limit is counted in `rate_bucket` by every replica together
alter table api_key add column rate_limit_shared boolean not null default false;
alter table api_key add column rate_limit_burst bigint;

-- A token bucket shared by every replica (GCRA): one row per limited bucket, e.g. `agent:<agent_id>`.
-- Each request moves `tat` forward in one atomic upsert; a row idle past its `tat` is full and is pruned.
-- Unlogged: its writes skip the WAL, so a request's upsert commits without waiting for a disk flush (about
-- four times the throughput on one hot bucket). A crash empties it, which only makes every bucket full again;
-- it is not copied to standbys, whose buckets start full after a failover.
create unlogged table rate_bucket (
    bucket text collate "C" primary key,
    -- the theoretical arrival time (microseconds since the Unix epoch): the bucket is full again at `tat`
    tat bigint not null,
    created_at bigint not null,
    updated_at bigint not null
);

-- Pruning finds idle buckets by `tat`.
create index rate_bucket_tat_idx on rate_bucket (tat);
