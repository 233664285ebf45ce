-- The listing indexes in ascending order, as on PostgreSQL: they serve the newest-first listing scanned
-- backward, and records, which arrive roughly in time order, are added at their right edge.
drop index audit_occurred_idx;
create index audit_occurred_idx on audit (occurred_at, audit_id);
drop index audit_agent_occurred_idx;
create index audit_agent_occurred_idx on audit (agent_id, occurred_at, audit_id);
