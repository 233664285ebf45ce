-- The audit log in segments, as on PostgreSQL (see its migration 0008 for why): a run of one agent's chained
-- records, written together, in one row, a JSON array of the records in chain order (at most 1,000, spanning
-- at most 60 s of occurrence time). The records read back as rows through the `audit_record` view.
create table audit_segment (
    -- not a foreign key: the records stay when the agent is deleted
    agent_id text not null,
    -- chain positions of the first and last record; records from before the chain existed were given
    -- negative positions, one segment each
    first_seq integer not null,
    last_seq integer not null,
    -- the earliest and latest `occurred_at` among the records (microseconds since the Unix epoch)
    first_at integer not null,
    last_at integer not null,
    -- the chain's hash before the first record ('' at the chain's start), and the last record's hash
    prev_hash text not null,
    last_hash text not null,
    -- the records: a JSON array of objects named as the view's columns (null fields left out)
    records text not null,
    created_at integer not null,
    updated_at integer not null,
    primary key (agent_id, first_seq)
);

-- The listing, newest first, over every agent and for one: segments by their latest record.
create index audit_segment_last_at_idx on audit_segment (last_at, agent_id, first_seq);
create index audit_segment_agent_last_at_idx on audit_segment (agent_id, last_at, first_seq);

-- Every existing record becomes a segment of one.
insert into audit_segment (agent_id, first_seq, last_seq, first_at, last_at, prev_hash, last_hash, records,
                           created_at, updated_at)
select agent_id, seq, seq, occurred_at, occurred_at, coalesce(prev_hash, ''), coalesce(hash, ''),
       json_array(json_object(
           'audit_id', audit_id, 'occurred_at', occurred_at, 'kind', kind, 'actor', actor, 'action', action,
           'target', target, 'before_digest', before_digest, 'after_digest', after_digest,
           'request_id', request_id, 'key_id', key_id, 'key_prefix', key_prefix, 'session_id', session_id,
           'method', method, 'outcome', outcome, 'error_code', error_code, 'bytes_out', bytes_out,
           'latency_us', latency_us, 'client_ip', client_ip, 'user_agent', user_agent, 'trace_id', trace_id,
           'chain_seq', chain_seq, 'hash', hash)),
       created_at, updated_at
from (
    select *, coalesce(chain_seq, -row_number() over (partition by agent_id order by occurred_at, audit_id)) as seq
    from audit
) as old;

drop table audit;

-- The records as rows, one per record, for operators' queries (`select * from audit_record where ...`).
create view audit_record as
select segment.agent_id,
       json_extract(record.value, '$.audit_id') as audit_id,
       json_extract(record.value, '$.occurred_at') as occurred_at,
       json_extract(record.value, '$.kind') as kind,
       json_extract(record.value, '$.actor') as actor,
       json_extract(record.value, '$.action') as action,
       json_extract(record.value, '$.target') as target,
       json_extract(record.value, '$.before_digest') as before_digest,
       json_extract(record.value, '$.after_digest') as after_digest,
       json_extract(record.value, '$.request_id') as request_id,
       json_extract(record.value, '$.key_id') as key_id,
       json_extract(record.value, '$.key_prefix') as key_prefix,
       json_extract(record.value, '$.session_id') as session_id,
       json_extract(record.value, '$.method') as method,
       json_extract(record.value, '$.outcome') as outcome,
       json_extract(record.value, '$.error_code') as error_code,
       json_extract(record.value, '$.bytes_out') as bytes_out,
       json_extract(record.value, '$.latency_us') as latency_us,
       json_extract(record.value, '$.client_ip') as client_ip,
       json_extract(record.value, '$.user_agent') as user_agent,
       json_extract(record.value, '$.trace_id') as trace_id,
       json_extract(record.value, '$.chain_seq') as chain_seq,
       json_extract(record.value, '$.hash') as hash
from audit_segment as segment, json_each(segment.records) as record;
