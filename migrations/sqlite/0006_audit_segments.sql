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
    -- the records: a JSON array of records, each a JSON array of the fields its chain hash covers, in their
    -- order (src/domain/audit.rs), then its hash; the `audit_record` view below names them
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
       json_array(json_array(
           audit_id, agent_id, chain_seq, occurred_at, kind, actor, action, target, before_digest, after_digest,
           request_id, key_id, key_prefix, session_id, method, outcome, error_code, bytes_out, latency_us, client_ip,
           user_agent, trace_id, hash)),
       created_at, updated_at
from (
    select *, coalesce(chain_seq, -row_number() over (partition by agent_id order by occurred_at, audit_id)) as seq
    from audit
) as old;

drop table audit;

-- The records as rows, one per record, for operators' queries (`select * from audit_record where ...`).
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
from audit_segment as segment, json_each(segment.records) as record;
