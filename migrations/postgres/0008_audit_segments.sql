-- The audit log in segments: a run of one agent's chained records, written together, in one row.
--
-- A row per record cost PostgreSQL a heap tuple and three b-tree insertions for every MCP request (about
-- 5-6.5 µs of its CPU a request at the W1 rate, on the same cores as the gateway, bench/README.md). The audit
-- writer appends in batches, so it now stores each agent's records of a batch as one segment: a JSON array
-- of the records in chain order, at most 1,000 of them and spanning at most 60 s of occurrence time (both
-- enforced by the writer, src/store/sql.rs), with the chain positions, the times and the hashes that
-- bound it in columns of their own for the queries. An admin change's record is a segment of one, written in
-- the change's own transaction as before. The records read back as rows through the `audit_record` view.
create table audit_segment (
    -- not a foreign key: the records stay when the agent is deleted
    agent_id text collate "C" not null,
    -- chain positions of the first and last record (src/domain/audit.rs); records from before the chain
    -- existed were given negative positions, one segment each
    first_seq bigint not null,
    last_seq bigint not null,
    -- the earliest and latest `occurred_at` among the records (microseconds since the Unix epoch)
    first_at bigint not null,
    last_at bigint not null,
    -- the chain's hash before the first record ('' at the chain's start), and the last record's hash
    prev_hash text not null,
    last_hash text not null,
    -- the records: a JSON array of objects named as the view's columns (null fields left out)
    records text not null,
    created_at bigint not null,
    updated_at bigint not null,
    primary key (agent_id, first_seq)
);

-- Kept out of line and uncompressed: compressing every batch with pglz cost more CPU than the rows it
-- replaced.
alter table audit_segment alter column records set storage external;

-- The listing, newest first, over every agent and for one: segments by their latest record.
create index audit_segment_last_at_idx on audit_segment (last_at, agent_id, first_seq);
create index audit_segment_agent_last_at_idx on audit_segment (agent_id, last_at, first_seq);

-- Every existing record becomes a segment of one.
insert into audit_segment (agent_id, first_seq, last_seq, first_at, last_at, prev_hash, last_hash, records,
                           created_at, updated_at)
select agent_id, seq, seq, occurred_at, occurred_at, coalesce(prev_hash, ''), coalesce(hash, ''),
       json_build_array(json_strip_nulls(json_build_object(
           'audit_id', audit_id, 'occurred_at', occurred_at, 'kind', kind, 'actor', actor, 'action', action,
           'target', target, 'before_digest', before_digest, 'after_digest', after_digest,
           'request_id', request_id, 'key_id', key_id, 'key_prefix', key_prefix, 'session_id', session_id,
           'method', method, 'outcome', outcome, 'error_code', error_code, 'bytes_out', bytes_out,
           'latency_us', latency_us, 'client_ip', client_ip, 'user_agent', user_agent, 'trace_id', trace_id,
           'chain_seq', chain_seq, 'hash', hash)))::text,
       created_at, updated_at
from (
    select *, coalesce(chain_seq, -row_number() over (partition by agent_id order by occurred_at, audit_id)) as seq
    from audit
) as old;

drop table audit;

-- The records as rows, one per record, for operators' queries (`select * from audit_record where ...`).
create view audit_record as
select segment.agent_id, record.*
from audit_segment as segment
cross join lateral json_to_recordset(segment.records::json) as record (
    audit_id text, occurred_at bigint, kind text, actor text, action text, target text, before_digest text,
    after_digest text, request_id text, key_id text, key_prefix text, session_id text, method text,
    outcome text, error_code integer, bytes_out bigint, latency_us bigint, client_ip text, user_agent text,
    trace_id text, chain_seq bigint, hash text
);
