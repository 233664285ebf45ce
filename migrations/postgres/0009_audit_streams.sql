-- MCP request records in writer streams (src/domain/audit_stream.rs). Segments per agent (0008) cost every
-- batch a chain-head update and a row per agent: with requests spread over 10,000 agents the writer fell
-- behind (bench/README.md). Now each replica's audit writer opens a stream when it starts, keeps its
-- agents' chain heads in memory, and stores a batch as a few rows (one per bucket of agents) and one update
-- of the stream's head: the same few statements however many agents a batch spans.
--
-- Records already stored stay where they are, in their agents' chains (audit_segment, audit_chain), and
-- verify as before; admin changes keep writing there, in their own transaction.

-- One row per writer stream: the position and hash of its newest row, updated once per batch, so that
-- deleting the newest rows is detectable; and of the newest row retention deleted.
create table audit_stream (
    -- a UUID v7 made by the writer when it starts
    stream_id text collate "C" primary key,
    last_seq bigint not null,
    last_hash text not null,
    pruned_seq bigint not null default 0,
    pruned_hash text not null default '',
    created_at bigint not null,
    updated_at bigint not null
);

-- A stream's rows: a batch's records of one bucket of agents (at most 1,000 records spanning at most 60 s).
create table audit_batch (
    stream_id text collate "C" not null,
    -- position in the stream's chain of rows, from 1
    seq bigint not null,
    -- the agents' bucket: the first four bytes of SHA-256(agent id), modulo 64
    bucket integer not null,
    -- the earliest and latest `occurred_at` among the records (microseconds since the Unix epoch)
    first_at bigint not null,
    last_at bigint not null,
    -- for each agent in the row, by agent: a JSON array [agent, position and hash before its first record
    -- here, position and hash of its last]; the row's hash covers them, and they the agent's records
    heads text not null,
    -- the previous row's hash ('' before the first), and hex(SHA-256(prev_hash "\n" seq "\n" heads))
    prev_hash text not null,
    hash text not null,
    -- the records, as in audit_segment: a JSON array of the fields each record's hash covers, then its hash
    records text not null,
    created_at bigint not null,
    updated_at bigint not null,
    primary key (stream_id, seq)
);

-- As for segments: LZ4 where the server has it, else stored uncompressed (see 0008). The heads too: mostly
-- hashes, which PostgreSQL's default pglz would try to compress in vain on every row.
do $$
begin
    alter table audit_batch alter column records set compression lz4;
    alter table audit_batch alter column heads set compression lz4;
exception when others then
    alter table audit_batch alter column records set storage external;
    alter table audit_batch alter column heads set storage external;
end
$$;

-- The listing, newest first, over every agent, and for one (its bucket's rows, whose heads name it).
create index audit_batch_last_at_idx on audit_batch (last_at, stream_id, seq);
create index audit_batch_bucket_last_at_idx on audit_batch (bucket, last_at, stream_id, seq);

-- The records as rows, one per record, from both formats.
create or replace view audit_record as
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
from (
    select records from audit_segment
    union all
    select records from audit_batch
) as stored
cross join lateral json_array_elements(stored.records::json) as record (value);
