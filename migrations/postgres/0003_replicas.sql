-- Replicas whose event listener is alive. Each listener refreshes its row when it hears its own heartbeat
-- notification, so a row is fresh only while notifications really reach that replica. A change waits (in
-- bounded time) until every fresh replica has acknowledged it, which is how a revocation is refused at once
-- on every replica. Times are the database's clock, so replicas never compare their own clocks.
create table replica (
    replica_id text collate "C" primary key,
    started_at timestamptz not null default now(),
    heartbeat_at timestamptz not null default now()
);
