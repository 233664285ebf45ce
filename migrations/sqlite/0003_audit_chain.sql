-- The head of each agent's audit hash chain (see src/domain/audit.rs): the position and hash of its newest
-- record, and of the newest record retention pruned, from which verification starts. Kept apart from the
-- records so that deleting the newest records is detectable; it outlives the agent, as the records do.
create table audit_chain (
    agent_id text not null primary key,
    seq integer not null,
    head text not null,
    pruned_seq integer not null default 0,
    pruned_hash text not null default ''
);

-- Verification walks each chain in order.
create index audit_chain_idx on audit (agent_id, chain_seq);
