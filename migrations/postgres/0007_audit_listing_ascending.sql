-- The listing indexes in ascending order. They serve the contract's newest-first listing just as well, scanned
-- backward, but records arrive roughly in time order: an ascending index takes each one at its right edge,
-- where PostgreSQL appends to the rightmost leaf without descending the tree and splits it to leave a full
-- page behind, while a descending one took every record at its left edge and split half-empty pages. With
-- the three audit indexes, 300,000 MCP request records by binary COPY took 1.32-1.41 s against 1.81-2.02 s,
-- and the two indexes came out 38 % smaller; in the running server PostgreSQL's CPU per W1 request fell from
-- 6.9-8.8 to 4.8-5.3 µs (bench/README.md).
drop index audit_occurred_idx;
create index audit_occurred_idx on audit (occurred_at, audit_id);
drop index audit_agent_occurred_idx;
create index audit_agent_occurred_idx on audit (agent_id, occurred_at, audit_id);
