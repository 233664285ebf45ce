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
    -- the records: a JSON array of records, each a JSON array of the fields its chain hash covers, in their
    -- order (src/domain/audit.rs), then its hash; the `audit_record` view below names them
    records text not null,
    created_at bigint not null,
    updated_at bigint not null,
    primary key (agent_id, first_seq)
);

-- Compressed with LZ4 where the server has it (PostgreSQL 14 and later, built with lz4, as Debian's and the
-- official images are): a segment's records repeat most of their fields, and LZ4 costs PostgreSQL less than
-- storing them uncompressed did, and far less than its default pglz, which cost more than the rows per
-- record it replaced (bench/README.md). Without LZ4, stored uncompressed.
do $$
begin
    alter table audit_segment alter column records set compression lz4;
exception when others then
    alter table audit_segment alter column records set storage external;
end
$$;

-- The listing, newest first, over every agent and for one: segments by their latest record.
create index audit_segment_last_at_idx on audit_segment (last_at, agent_id, first_seq);
create index audit_segment_agent_last_at_idx on audit_segment (agent_id, last_at, first_seq);

-- Every existing record becomes a segment of one.
insert into audit_segment (agent_id, first_seq, last_seq, first_at, last_at, prev_hash, last_hash, records,
                           created_at, updated_at)
select agent_id, seq, seq, occurred_at, occurred_at, coalesce(prev_hash, ''), coalesce(hash, ''),
       json_build_array(json_build_array(
           audit_id, agent_id, chain_seq, occurred_at, kind, actor, action, target, before_digest, after_digest,
           request_id, key_id, key_prefix, session_id, method, outcome, error_code, bytes_out, latency_us, client_ip,
           user_agent, trace_id, hash))::text,
       created_at, updated_at
from (
    select *, coalesce(chain_seq, -row_number() over (partition by agent_id order by occurred_at, audit_id)) as seq
    from audit
) as old;

drop table audit;

-- The records as rows, one per record, for operators' queries (`select * from audit_record where ...`).
create view audit_record as
select
       record.value ->> 0 as audit_id,
       record.value ->> 1 as agent_id,
       (record.value ->> 2)::bigint as chain_seq,
       (record.value ->> 3)::bigint as occurred_at,
       record.value ->> 4 as kind,
       record.value ->> 5 as actor,
       record.value ->> 6 as action,
       record.value ->> 7 as target,
       record.value ->> 8 as before_digest,
       record.value ->> 9 as after_digest,
       record.value ->> 10 as request_id,
       record.value ->> 11 as key_id,
       record.value ->> 12 as key_prefix,
       record.value ->> 13 as session_id,
       record.value ->> 14 as method,
       record.value ->> 15 as outcome,
       (record.value ->> 16)::integer as error_code,
       (record.value ->> 17)::bigint as bytes_out,
       (record.value ->> 18)::bigint as latency_us,
       record.value ->> 19 as client_ip,
       record.value ->> 20 as user_agent,
       record.value ->> 21 as trace_id,
       record.value ->> 22 as hash
from audit_segment as segment
cross join lateral json_array_elements(segment.records::json) as record (value);
