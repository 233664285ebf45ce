//! `hivegate audit verify`: every agent's records checked against the chains that hold them.
//!
//! An agent's records live in its own chain (admin changes, and MCP records from before the writer
//! streams, [`super::chain`]) and in a chain per writer stream ([`super::stream`]).
//! With one agent, only its own records are read: its chain, and in each stream the heads of every row
//! (which the stream's chain covers) and the records of the rows whose heads name it.
//!
//! [`super::chain`]: crate::audit::chain
//! [`super::stream`]: crate::audit::stream

use std::collections::BTreeMap;

use super::chain::{ChainError, ChainVerifier};
use super::stream::{StreamError, StreamHead, StreamVerifier};
use crate::domain::AgentId;
use crate::store::{Store, StoreResult, StreamRows};

/// Records (or stream rows) read per query.
const PAGE: u32 = 1000;

/// The first problem found in an agent's chains; `Display` is what `hivegate audit verify` prints for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentProblem {
    /// In the agent's own chain.
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// In the agent's chain in a writer stream.
    #[error("{problem} (stream {stream_id})")]
    Stream { problem: StreamError, stream_id: String },
    /// The chain is stored under a name that is not an agent id.
    #[error("the chain's agent id is not valid")]
    InvalidAgentId,
}

/// What verification found.
#[derive(Debug, Default)]
pub struct Report {
    /// Each agent's number of records checked, or the first problem found in its chains.
    pub agents: BTreeMap<String, Result<u64, AgentProblem>>,
    /// Streams whose own chain of rows is broken (their agents' records after the break are unchecked).
    pub streams: Vec<(String, StreamError)>,
}

impl Report {
    /// Broken chains: agents' and streams'.
    pub fn broken(&self) -> usize {
        self.streams.len() + self.agents.values().filter(|outcome| outcome.is_err()).count()
    }
}

/// Checks every agent's records, or `agent`'s.
pub async fn verify(store: &dyn Store, agent: Option<&str>) -> StoreResult<Report> {
    let mut report = Report::default();
    // No chain or stream row names what is not an agent id.
    let agent_id = match agent.map(AgentId::parse).transpose() {
        Ok(agent_id) => agent_id,
        Err(_) => return Ok(report),
    };
    for head in store.audit_heads(agent_id.as_ref()).await? {
        let Ok(chain) = AgentId::parse(&head.agent_id) else {
            report.agents.insert(head.agent_id.clone(), Err(AgentProblem::InvalidAgentId));
            continue;
        };
        let agent_id = head.agent_id.clone();
        let mut verifier = ChainVerifier::new(head.clone());
        let mut after = head.pruned_seq;
        let outcome = loop {
            let page = store.audit_chain_page(&chain, after, PAGE).await?;
            if let Some(problem) = page.iter().find_map(|record| verifier.check(record).err()) {
                break Err(AgentProblem::Chain(problem));
            }
            match page.last() {
                Some(last) if page.len() == PAGE as usize => after = last.chain_seq.unwrap_or(after),
                _ => break verifier.finish().map_err(AgentProblem::Chain),
            }
        };
        report.agents.insert(agent_id, outcome);
    }
    for head in store.audit_streams().await? {
        let outcome = verify_stream(store, &head, agent_id.as_ref()).await?;
        let stream_id = head.stream_id;
        match outcome {
            Ok(counts) => {
                for (agent_id, records) in counts {
                    if let Ok(total) = report.agents.entry(agent_id).or_insert(Ok(0)) {
                        *total += records;
                    }
                }
            }
            Err(problem) => match problem.agent() {
                Some(agent_id) => {
                    let problem = AgentProblem::Stream { problem: problem.clone(), stream_id };
                    report.agents.insert(agent_id.to_owned(), Err(problem));
                }
                None => report.streams.push((stream_id, problem)),
            },
        }
    }
    Ok(report)
}

/// Checks a stream's rows up to `head`, as read when verification began (with `agent`, only that agent's
/// records): each agent's number of records checked, or the first problem found.
pub(crate) async fn verify_stream(
    store: &dyn Store,
    head: &StreamHead,
    agent: Option<&AgentId>,
) -> StoreResult<Result<Vec<(String, u64)>, StreamError>> {
    let mut verifier = StreamVerifier::new(head.clone(), agent.map(AgentId::as_str));
    let mut after = head.pruned_seq;
    loop {
        let wanted = StreamRows { stream: &head.stream_id, after_seq: after, limit: PAGE, records: true, agent };
        let mut rows = store.audit_stream_rows(wanted).await?;
        let is_full = rows.len() == PAGE as usize;
        // The stream is verified up to `head`, as read when verification began: a live writer may have stored
        // rows since, and moved the head with them.
        let past_head = rows.iter().map(|row| row.seq).filter(|seq| *seq > head.seq).max();
        rows.retain(|row| row.seq <= head.seq);
        if let Some(problem) = rows.iter().find_map(|row| verifier.check(row).err()) {
            return Ok(Err(problem));
        }
        match (past_head, rows.last()) {
            (None, Some(last)) if is_full => after = last.seq,
            (None, _) => return Ok(verifier.finish()),
            (Some(seq), _) => {
                let problem = past_the_head(store, &head.stream_id, seq).await?;
                return Ok(problem.map_or_else(|| verifier.finish(), Err));
            }
        }
    }
}

/// A row at `seq` lies past the head a stream's verification started from: a problem unless the head, read
/// again, has reached it (its writer stored it meanwhile).
async fn past_the_head(store: &dyn Store, stream_id: &str, seq: i64) -> StoreResult<Option<StreamError>> {
    let heads = store.audit_streams().await?;
    let head = heads.iter().find(|head| head.stream_id == stream_id).map_or(0, |head| head.seq);
    Ok((head < seq).then_some(StreamError::PastHead { head, seq }))
}
