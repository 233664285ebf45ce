//! The audit log: what an MCP request's record holds, how records reach the database, and how the hash
//! chains that make them tamper-evident are built and verified.
//!
//! Admin changes write their audit record in the change's own transaction (the store chains it onto the
//! agent's own chain, [`chain`]). Everything here is about the far more frequent MCP requests, and about
//! checking both kinds.
//!
//! # Layout
//!
//! | file | holds |
//! | --- | --- |
//! | [`request`] | what an MCP request's record holds: the [`request::Trail`] handlers hand back with their answer, and [`request::record`], run around every handler of the endpoint, which turns it into records |
//! | [`writer`] | the handle requests record through ([`AuditWriter`]): a bounded queue, its counters ([`AuditStats`]), `audit.on_overload = "reject"` ([`Recorder`], [`Overloaded`]), and stopping ([`AuditTask`]) |
//! | `batcher` | the writer's one background task: batches off the queue, one transaction each, retries, stream rotation, the drain at shutdown |
//! | [`stream`] | a writer's stream: each agent's chain in it kept in memory, a batch encoded as a few rows chained over their heads, and the stream's verifier |
//! | [`chain`] | the hash of one record, and an agent's own chain (admin changes, and MCP records from before streams) with its verifier |
//! | [`verify`] | `hivegate audit verify`: every agent's chains and every stream read back and checked |
//!
//! # The life of a record
//!
//! 1. The MCP endpoint's handler knows the agent, key, method and target and hands them back with its
//!    response as a [`request::Trail`] (a batch's trail holds an item per message).
//! 2. [`request::record`] adds what only the HTTP layer knows (time, latency, client address, user agent,
//!    request and trace ids, bytes sent) and hands the finished [`AuditRecord`](crate::domain::model::AuditRecord)
//!    to the [`AuditWriter`]; with `audit.on_overload = "reject"` it took its place in the queue before the
//!    request was served.
//! 3. The writer queues it without waiting; the `batcher` task takes records off the queue once a full
//!    batch waits or at the flush interval.
//! 4. The batch is chained onto the task's stream ([`stream::AuditStream::chain`]: each record's hash over
//!    the previous one of its agent, [`chain::chain_hash`]) and stored by the store's `append_audit` in one
//!    transaction: a few rows and the stream's new head. Only once stored does the stream move on.
//!
//! # Verification
//!
//! [`verify::verify`] walks every agent's own chain page by page ([`chain::ChainVerifier`]: positions
//! without gaps, each record linked to and hashed over the one before, ending at the chain's head), then
//! every stream ([`stream::StreamVerifier`]: the rows' own chain recomputed from their heads, and each
//! agent's records checked against the heads their row commits to). Retention prunes from the oldest end
//! and keeps the position and hash of the last record or row pruned, from which verification starts.
//!
//! [`chain`]: crate::audit::chain
//! [`request`]: crate::audit::request
//! [`request::Trail`]: crate::audit::request::Trail
//! [`request::record`]: crate::audit::request::record
//! [`writer`]: crate::audit::writer
//! [`AuditWriter`]: crate::audit::AuditWriter
//! [`AuditStats`]: crate::audit::AuditStats
//! [`Recorder`]: crate::audit::Recorder
//! [`Overloaded`]: crate::audit::Overloaded
//! [`AuditTask`]: crate::audit::AuditTask
//! [`stream`]: crate::audit::stream
//! [`verify`]: crate::audit::verify
//! [`stream::AuditStream::chain`]: crate::audit::stream::AuditStream::chain
//! [`chain::chain_hash`]: crate::audit::chain::chain_hash
//! [`verify::verify`]: crate::audit::verify::verify
//! [`chain::ChainVerifier`]: crate::audit::chain::ChainVerifier
//! [`stream::StreamVerifier`]: crate::audit::stream::StreamVerifier

/// The writer's background task: batches, retries, stream rotation, shutdown.
mod batcher;
/// The hash chain of one record and of an agent's own chain.
pub mod chain;
/// What an MCP request's record holds, and the layer that records it.
pub mod request;
/// Writer streams: a batch stored as a few chained rows, and their verifier.
pub mod stream;
/// `hivegate audit verify`: every agent's records checked against their chains.
pub mod verify;
/// The handle requests record through, and its counters.
pub mod writer;

pub use writer::{AuditStats, AuditTask, AuditWriter, Overloaded, Recorder};

/// A record of an MCP `resources/read` of `target` by `agent`, for tests to build on.
#[cfg(test)]
pub(crate) fn read_record(
    id: &str,
    agent: &str,
    occurred_at: crate::domain::time::Timestamp,
    target: &str,
) -> crate::domain::model::AuditRecord {
    crate::domain::model::AuditRecord {
        id: id.into(),
        agent_id: agent.into(),
        occurred_at,
        kind: "mcp".into(),
        actor: "key:k".into(),
        action: "resources/read".into(),
        target: target.into(),
        ..crate::domain::model::AuditRecord::default()
    }
}
