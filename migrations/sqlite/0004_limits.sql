-- Limits set through the admin API: an agent's shared (exact across replicas) rate limit, its audit retention,
-- and per-key rate limits; and the token buckets of the shared limits.

-- true: the agent's `rateLimit` is counted in `rate_bucket` by every replica together, not per replica
alter table agent add column rate_limit_shared integer not null default 0;
-- days the agent's audit records are kept; 0 = forever; null = the configured retention
alter table agent add column audit_retention_days integer;

-- a key's own request budget; both null = the configured per-key limit
alter table api_key add column rate_limit_rps integer;
-- true: the key's own limit is counted in `rate_bucket` by every replica together
alter table api_key add column rate_limit_shared integer not null default 0;
alter table api_key add column rate_limit_burst integer;

-- A token bucket shared by every replica (GCRA): one row per limited bucket, e.g. `agent:<agent_id>`.
-- Each request moves `tat` forward in one atomic upsert; a row idle past its `tat` is full and is pruned.
-- (PostgreSQL keeps this table unlogged; SQLite has one writer and no such thing.)
create table rate_bucket (
    bucket text primary key,
    -- the theoretical arrival time (microseconds since the Unix epoch): the bucket is full again at `tat`
    tat integer not null,
    created_at integer not null,
    updated_at integer not null
);

-- Pruning finds idle buckets by `tat`.
create index rate_bucket_tat_idx on rate_bucket (tat);
