-- Legacy Streamable HTTP sessions and their resource subscriptions, SQLite edition.
-- migrations/postgres/0002_sessions.sql creates the same tables with the same columns; only the column types
-- differ. Same conventions as 0001: singular table names, `<table>_id` keys, `created_at`/`updated_at` on every
-- table, times in microseconds since the Unix epoch set by the application.
--
-- Sessions live here, not in a replica's memory, so that any replica serves any request of any session: no
-- sticky sessions behind a load balancer.

-- A session issued by `initialize` to a client of protocol versions 2024-11-05 … 2025-11-25.
create table session (
    -- hex SHA-256 of the `Mcp-Session-Id` the client holds; the id itself is never stored
    session_id text primary key,
    agent_id text not null references agent (agent_id) on delete cascade,
    -- the key that created the session: only that key may use it
    api_key_id text not null references api_key (api_key_id) on delete cascade,
    -- the protocol version `initialize` negotiated
    protocol_version text not null,
    -- the last request or stream keep-alive seen for the session (written at most once a minute per
    -- replica); a session idle for longer than the configured timeout has expired
    last_seen_at integer not null,
    created_at integer not null,
    updated_at integer not null
);

-- Expired sessions are pruned by idle time.
create index session_last_seen_idx on session (last_seen_at);
-- An agent's sessions go with the agent; a key's with the key.
create index session_agent_idx on session (agent_id);
create index session_api_key_idx on session (api_key_id);

-- A URI a session subscribed to with `resources/subscribe` (any syntactically valid URI, also one that
-- does not exist yet): its `notifications/resources/updated` go to the session's stream.
create table session_subscription (
    session_id text not null references session (session_id) on delete cascade,
    uri text not null,
    created_at integer not null,
    -- subscriptions are never updated; kept for the convention
    updated_at integer not null,
    primary key (session_id, uri)
);
