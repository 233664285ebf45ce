-- hivegate's first schema, PostgreSQL edition. migrations/sqlite/0001_init.sql creates the same tables with
-- the same columns; only the column types differ.
--
-- Conventions: singular table names, `<table>_id` keys, `created_at`/`updated_at` on every table.
-- Times are bigints: microseconds since the Unix epoch (UTC), always set by the application, never by the
-- database. JSON documents are stored as text. Keys that lists are ordered by use `collate "C"`, so that
-- `order by` and `>` compare bytewise, exactly like SQLite's default `binary` collation.

-- Values every replica shares.
create table setting (
    -- e.g. `operator_token_digest`, `cursor_key`
    name text primary key,
    value text not null,
    created_at bigint not null,
    updated_at bigint not null
);

-- A hosted agent: the tenant that owns keys and a registry.
create table agent (
    agent_id text collate "C" primary key,
    name text not null,
    description text,
    -- the request budget shared by all the agent's keys; both null = no agent-wide limit
    rate_limit_rps bigint,
    rate_limit_burst bigint,
    -- the `ttlMs` hint given to modern clients; null = the configured default
    cache_ttl_ms bigint,
    -- random and non-zero per creation: SSE event ids carry it, so a re-created agent never replays old ids
    epoch bigint not null,
    -- the sequence number of the agent's last event. Every registry change bumps it first: the row lock
    -- this takes serialises the agent's changes, so sequence numbers commit in order and without gaps
    event_seq bigint not null default 0,
    created_at bigint not null,
    updated_at bigint not null
);

-- An agent's API key. The key itself is never stored: only its digest.
create table api_key (
    -- a UUID v7, assigned by the application
    api_key_id text collate "C" primary key,
    agent_id text collate "C" not null references agent (agent_id) on delete cascade,
    name text,
    -- the first 12 characters of the key, shown so people can tell keys apart
    prefix text not null,
    -- hex SHA-256 of the key (HMAC-SHA-256 when a pepper is configured); how presented keys are looked up
    digest text not null unique,
    -- comma-separated scopes: `mcp`, `registry`
    scopes text not null,
    created_at bigint not null,
    updated_at bigint not null,
    -- null = never expires
    expires_at bigint,
    -- written at most once a minute per key
    last_used_at bigint,
    -- null = usable; set once, never cleared
    revoked_at bigint
);

-- Keys are listed per agent by (created_at, api_key_id).
create index api_key_agent_created_idx on api_key (agent_id, created_at, api_key_id);

-- A resource of an agent's registry, with its content.
create table resource (
    agent_id text collate "C" not null references agent (agent_id) on delete cascade,
    -- an absolute URI (RFC 3986), at most 2048 bytes; an opaque key
    uri text collate "C" not null,
    name text not null,
    title text,
    description text,
    mime_type text,
    -- exactly one of content_text (UTF-8) and content_blob (bytes) is set
    content_text text,
    content_blob bytea,
    -- the content's length in bytes
    size bigint not null,
    -- JSON objects, or null
    annotations text,
    meta text,
    -- 1 when created, bumped on every replace
    version bigint not null,
    created_at bigint not null,
    updated_at bigint not null,
    primary key (agent_id, uri)
);

-- An RFC 6570 resource template, optionally with a MiniJinja `text` rendered for matching URIs.
create table resource_template (
    agent_id text collate "C" not null references agent (agent_id) on delete cascade,
    uri_template text collate "C" not null,
    name text not null,
    title text,
    description text,
    mime_type text,
    -- a JSON object, or null
    annotations text,
    -- a MiniJinja template rendered with the URI's variables on `resources/read`, or null
    text text,
    created_at bigint not null,
    updated_at bigint not null,
    primary key (agent_id, uri_template)
);

-- A prompt: MiniJinja message templates rendered with the `prompts/get` arguments.
create table prompt (
    agent_id text collate "C" not null references agent (agent_id) on delete cascade,
    name text collate "C" not null,
    title text,
    description text,
    -- JSON array of the declared arguments
    arguments text not null,
    -- JSON array of `{role, content}` messages
    messages text not null,
    created_at bigint not null,
    updated_at bigint not null,
    primary key (agent_id, name)
);

-- One committed registry change: the outbox that notifications are sent from and replayed from.
create table event (
    agent_id text collate "C" not null references agent (agent_id) on delete cascade,
    -- per agent, from 1, without gaps (agent.event_seq)
    seq bigint not null,
    -- JSON array of the URIs whose resources were replaced or deleted (`notifications/resources/updated`)
    updated_uris text not null,
    -- the resource or template list changed (`notifications/resources/list_changed`)
    resources_list_changed boolean not null,
    -- the prompt list changed (`notifications/prompts/list_changed`)
    prompts_list_changed boolean not null,
    created_at bigint not null,
    -- events are never updated; kept for the convention
    updated_at bigint not null,
    primary key (agent_id, seq)
);

-- Old events are pruned by age.
create index event_created_idx on event (created_at);

-- The audit log: admin changes now, MCP requests later. Records outlive their agents.
create table audit (
    -- a UUID v7
    audit_id text collate "C" primary key,
    -- not a foreign key: the record stays when the agent is deleted
    agent_id text collate "C" not null,
    occurred_at bigint not null,
    -- `admin` (a change through the admin API) or `mcp` (a request on the MCP endpoint)
    kind text not null,
    -- `operator` or `key:<api_key_id>`
    actor text not null,
    -- e.g. `agent.create`, `key.revoke`, `resource.put`, `resource.delete`, `prompt.put`
    action text not null,
    -- what the action was applied to: an agent id, key id, URI, URI template or prompt name
    target text not null,
    -- hex SHA-256 of the record before and after the change; null when it did not exist
    before_digest text,
    after_digest text,
    -- the `X-Request-Id` of the request that made the change
    request_id text,
    -- MCP request records (kind = 'mcp'): who asked what, and how it went
    key_id text,
    key_prefix text,
    session_id text,
    method text,
    outcome text,
    error_code integer,
    bytes_out bigint,
    latency_us bigint,
    client_ip text,
    user_agent text,
    trace_id text,
    -- the per-agent hash chain that makes the log tamper-evident: position, previous hash, this record's hash
    chain_seq bigint,
    prev_hash text,
    hash text,
    created_at bigint not null,
    updated_at bigint not null
);

-- The audit listing: newest first, optionally for one agent.
create index audit_occurred_idx on audit (occurred_at desc, audit_id desc);
create index audit_agent_occurred_idx on audit (agent_id, occurred_at desc, audit_id desc);
