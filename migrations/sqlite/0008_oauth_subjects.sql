-- Subject grants of an external authorization server (oauth.mode = "external"): an access token whose
-- issuer and subject are granted on an agent acts as the key named here, so that key's scopes, rate limit,
-- expiry and revocation apply to it.
create table oauth_subject (
    agent_id text not null references agent (agent_id) on delete cascade,
    -- the issuer identifier (`iss`) the subject belongs to: oauth.issuer when it was granted
    issuer text not null,
    -- the token's `sub`
    subject text not null,
    -- the key the tokens act as, a key of the same agent
    api_key_id text not null references api_key (api_key_id) on delete cascade,
    created_at integer not null,
    updated_at integer not null,
    primary key (agent_id, issuer, subject)
);

-- The grants that name a key.
create index oauth_subject_key on oauth_subject (api_key_id);
