-- The head of each agent's audit hash chain (see src/domain/audit.rs): the position and hash of its newest
-- record, and of the newest record retention pruned, from which verification starts. Kept apart from the
-- records so that deleting the newest records is detectable; it outlives the agent, as the records do.
-- Appending locks the agent's head row, so one agent's records are chained one writer at a time, in order.
create table audit_chain (
    agent_id text collate "C" primary key,
    seq bigint not null,
    head text not null,
    pruned_seq bigint not null default 0,
    pruned_hash text not null default ''
);

-- Verification walks each chain in order.
create index audit_chain_idx on audit (agent_id, chain_seq);
