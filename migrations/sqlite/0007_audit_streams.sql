-- MCP request records in writer streams, as on PostgreSQL (see its migration 0009 for why): each writer's
-- stream keeps its agents' chain heads in memory and stores a batch as a row per bucket of agents plus one
-- update of the stream's head. Records already stored stay in their agents' chains (audit_segment,
-- audit_chain), where admin changes keep writing.

-- One row per writer stream: its newest row's position and hash (updated once per batch), and the newest
-- row retention deleted.
create table audit_stream (
    -- a UUID v7 made by the writer when it starts
    stream_id text primary key,
    last_seq integer not null,
    last_hash text not null,
    pruned_seq integer not null default 0,
    pruned_hash text not null default '',
    created_at integer not null,
    updated_at integer not null
);

-- A stream's rows: a batch's records of one bucket of agents (at most 1,000 records spanning at most 60 s).
create table audit_batch (
    stream_id text not null,
    -- position in the stream's chain of rows, from 1
    seq integer not null,
    -- the agents' bucket: the first four bytes of SHA-256(agent id), modulo 64
    bucket integer not null,
    -- the earliest and latest `occurred_at` among the records (microseconds since the Unix epoch)
    first_at integer not null,
    last_at integer not null,
    -- for each agent in the row, by agent: a JSON array [agent, position and hash before its first record
    -- here, position and hash of its last]; the row's hash covers them, and they the agent's records
    heads text not null,
    -- the previous row's hash ('' before the first), and hex(SHA-256(prev_hash "\n" seq "\n" heads))
    prev_hash text not null,
    hash text not null,
    -- the records, as in audit_segment: a JSON array of the fields each record's hash covers, then its hash
    records text not null,
    created_at integer not null,
    updated_at integer not null,
    primary key (stream_id, seq)
);

-- The listing, newest first, over every agent, and for one (its bucket's rows, whose heads name it).
create index audit_batch_last_at_idx on audit_batch (last_at, stream_id, seq);
create index audit_batch_bucket_last_at_idx on audit_batch (bucket, last_at, stream_id, seq);

-- The records as rows, one per record, from both formats.
drop view audit_record;
create view audit_record as
select
       json_extract(record.value, '$[0]') as audit_id,
       json_extract(record.value, '$[1]') as agent_id,
       json_extract(record.value, '$[2]') as chain_seq,
       json_extract(record.value, '$[3]') as occurred_at,
       json_extract(record.value, '$[4]') as kind,
       json_extract(record.value, '$[5]') as actor,
       json_extract(record.value, '$[6]') as action,
       json_extract(record.value, '$[7]') as target,
       json_extract(record.value, '$[8]') as before_digest,
       json_extract(record.value, '$[9]') as after_digest,
       json_extract(record.value, '$[10]') as request_id,
       json_extract(record.value, '$[11]') as key_id,
       json_extract(record.value, '$[12]') as key_prefix,
       json_extract(record.value, '$[13]') as session_id,
       json_extract(record.value, '$[14]') as method,
       json_extract(record.value, '$[15]') as outcome,
       json_extract(record.value, '$[16]') as error_code,
       json_extract(record.value, '$[17]') as bytes_out,
       json_extract(record.value, '$[18]') as latency_us,
       json_extract(record.value, '$[19]') as client_ip,
       json_extract(record.value, '$[20]') as user_agent,
       json_extract(record.value, '$[21]') as trace_id,
       json_extract(record.value, '$[22]') as hash
from (select records from audit_segment union all select records from audit_batch) as stored,
     json_each(stored.records) as record;
