-- The built-in OAuth 2.1 authorization server (`oauth.mode = "builtin"`), SQLite edition.
-- migrations/postgres/0011_oauth_server.sql creates the same tables with the same columns; only the column
-- types differ. Same conventions as 0001: singular table names, `<table>_id` keys, `created_at`/`updated_at`
-- on every table, times in microseconds since the Unix epoch set by the application.
--
-- No secret is stored: codes and tokens are kept as digests (hex SHA-256, or HMAC-SHA-256 under the key
-- pepper), like API keys. A grant resolves to the API key its owner consented with, so revoking, expiring or
-- deleting the key (or its agent) ends everything issued under it.

-- A client registered through Dynamic Client Registration (RFC 7591). Clients identified by a metadata
-- document URL are fetched and cached in memory, never stored here.
create table oauth_client (
    -- `hgc_` followed by random characters; public, not a secret
    oauth_client_id text primary key,
    -- as registered, at most the configured length
    client_name text,
    -- JSON array of the exact redirect URIs a code may be sent to
    redirect_uris text not null,
    -- the client's last authorization or token request (written at most once a minute); registrations
    -- unused for `oauth.builtin.client_idle_secs` are pruned
    last_used_at integer not null,
    created_at integer not null,
    updated_at integer not null
);

create index oauth_client_last_used_idx on oauth_client (last_used_at);

-- A one-time authorization code, issued when a key's owner consents on the authorize page.
create table oauth_code (
    -- digest of the code the client holds
    oauth_code_id text primary key,
    -- the grant the code starts: every token issued for it carries the same family, so reusing the code
    -- revokes them all
    family_id text not null,
    -- a registered client's id or a metadata document URL
    client_id text not null,
    agent_id text not null references agent (agent_id) on delete cascade,
    -- the key whose owner consented
    api_key_id text not null references api_key (api_key_id) on delete cascade,
    redirect_uri text not null,
    -- the agent's canonical MCP URL (RFC 8707)
    resource text not null,
    -- space-separated
    scopes text not null,
    -- the S256 PKCE challenge
    code_challenge text not null,
    expires_at integer not null,
    -- set when the code is exchanged; a second exchange revokes its family
    used_at integer,
    created_at integer not null,
    updated_at integer not null
);

create index oauth_code_expires_idx on oauth_code (expires_at);
create index oauth_code_api_key_idx on oauth_code (api_key_id);
create index oauth_code_agent_idx on oauth_code (agent_id);

-- An access or refresh token.
create table oauth_token (
    -- digest of the token the client holds
    oauth_token_id text primary key,
    -- `access` or `refresh`
    kind text not null,
    -- the grant (the code's family) the token belongs to
    family_id text not null,
    client_id text not null,
    agent_id text not null references agent (agent_id) on delete cascade,
    -- the key the grant is bound to: the token is usable only while the key is
    api_key_id text not null references api_key (api_key_id) on delete cascade,
    resource text not null,
    scopes text not null,
    expires_at integer not null,
    -- refresh tokens: set when rotated; presenting a rotated one revokes its family
    used_at integer,
    -- set when revoked (family revocation, RFC 7009); never cleared
    revoked_at integer,
    created_at integer not null,
    updated_at integer not null
);

create index oauth_token_family_idx on oauth_token (family_id);
create index oauth_token_expires_idx on oauth_token (expires_at);
create index oauth_token_api_key_idx on oauth_token (api_key_id, created_at);
create index oauth_token_agent_idx on oauth_token (agent_id);
