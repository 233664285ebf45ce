//! MCP request records in writer streams: one write per batch, however many agents it spans.
//!
//! Each replica's audit writer opens a *stream* when it starts (a fresh UUID v7). Within it every agent's
//! records form a hash chain of their own ([`super::chain`]'s hash, positions from 1, the first
//! record linked to the stream's id), whose heads the writer keeps in memory: appending reads and updates
//! no per-agent row. A batch is stored as a few rows, one per bucket of agents ([`bucket_of`]) and at most
//! [`ROW_RECORDS`] records and [`ROW_SPAN`] of time each. A row carries, beside its records, its *heads*:
//! for each agent in it, the position and hash before its first record there and of its last. The rows of
//! a stream form a hash chain over their heads, whose newest position and hash (the stream's head) is one
//! row updated once per batch.
//!
//! A record is stored as the fields its hash covers, not with its hash: that follows from them and the hash
//! before it, and a row's heads give the hash before each agent's first record there. (Rows written before
//! this hold each record's hash as one more element; they read and verify alike.)
//!
//! So one agent's records are checked without anybody else's: the stream's chain is recomputed from the
//! rows' heads alone, and the agent's records only in the rows whose heads name it, against those heads.
//! Editing a record breaks its agent's chain or the head its row commits to; deleting one leaves a gap;
//! deleting the newest rows is caught by the stream's head. Retention deletes a stream's oldest rows and
//! keeps the position and hash of the last one deleted, from which verification starts.
//!
//! [`super::chain`]: crate::audit::chain
//! [`bucket_of`]: crate::audit::stream::bucket_of
//! [`ROW_RECORDS`]: crate::audit::stream::ROW_RECORDS
//! [`ROW_SPAN`]: crate::audit::stream::ROW_SPAN

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use super::chain::{QueuedRecord, append_chained_record, hex_text};
use crate::domain::model::{AuditRecord, AuditText};

/// Agents' records of a batch are stored in this many buckets at most (by a hash of the agent id): a
/// batch is at most this many rows (more only when a bucket holds over [`ROW_RECORDS`] records), and one
/// agent's listing reads only its bucket's rows.
pub const BUCKETS: u32 = 64;

/// The most records one row holds: a listing decodes a row whole.
pub const ROW_RECORDS: usize = 1_000;

/// The longest stretch of occurrence time (µs) one row spans: the listing looks this far past the newest
/// time a page can show for rows holding records at or before it.
pub const ROW_SPAN: i64 = 60_000_000;

/// The bucket of `agent`'s records: the first four bytes of its SHA-256, modulo [`BUCKETS`]. Stored
/// rows depend on it: it never changes.
pub fn bucket_of(agent: &str) -> i32 {
    let digest = Sha256::digest(agent.as_bytes());
    let first = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    (first % BUCKETS) as i32
}

/// The `like` pattern that finds `agent` in a row's heads (`\` escapes; agent ids hold no `%`).
pub fn heads_pattern(agent: &str) -> String {
    format!("%[\"{}\",%", agent.replace('\\', "\\\\").replace('_', "\\_").replace('%', "\\%"))
}

/// A chain's newest hash: 64 hex digits, or the stream's id (36 characters) before the agent's first record.
/// Held inline, so that a head is copied without an allocation: a batch spread over many agents moves a head
/// for each of them, thousands a batch.
type HeadHash = arrayvec::ArrayString<64>;

/// Where an agent's chain in a stream stands, and the agent's bucket ([`bucket_of`], worked out once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head {
    seq: i64,
    hash: HeadHash,
    bucket: i32,
}

/// An agent's part of a batch being chained: where its chain stands and how many of the batch's records are
/// its own.
struct Part {
    agent: AuditText,
    head: Head,
    records: usize,
}

/// One agent's part of a row: the position and hash before its first record there, and of its last.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RowHead(pub String, pub i64, pub String, pub i64, pub String);

impl RowHead {
    pub fn agent(&self) -> &str {
        &self.0
    }
}

/// A [`RowHead`] as the writer makes it, its fields inline: it is written as the same JSON array.
#[derive(serde::Serialize)]
struct RowHeadOut(AuditText, i64, HeadHash, i64, HeadHash);

/// The hash of a stream's row at `seq` after the row whose hash is `prev`: `hex(SHA-256(prev "\n" seq "\n"
/// heads))`.
pub fn row_hash(prev: &str, seq: i64, heads: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(prev.as_bytes());
    hasher.update(b"\n");
    hasher.update(itoa::Buffer::new().format(seq).as_bytes());
    hasher.update(b"\n");
    hasher.update(heads.as_bytes());
    crate::domain::hex(hasher.finalize())
}

/// A row as it is inserted (and as verification reads it, `records` decoded).
#[derive(Debug, Clone)]
pub struct StreamRow {
    pub seq: i64,
    pub bucket: i32,
    pub first_at: i64,
    pub last_at: i64,
    /// JSON array of [`RowHead`]s, by agent.
    pub heads: String,
    pub prev_hash: String,
    pub hash: String,
    /// JSON array of the stored records (as in [`append_chained_record`]: their hashed fields, not their hashes).
    pub records: String,
}

/// A batch chained onto a stream, not yet stored: its rows and where the stream stands after it.
#[derive(Debug)]
pub struct ChainedBatch {
    pub rows: Vec<StreamRow>,
    heads: Vec<(AuditText, Head)>,
    pub last_seq: i64,
    pub last_hash: String,
}

/// One writer's stream: its id, the position and hash of its newest row, and every agent's chain head.
#[derive(Debug)]
pub struct AuditStream {
    id: String,
    seq: i64,
    hash: String,
    /// A head per agent written to in this stream (an agent id, two numbers and a hash each).
    heads: HashMap<AuditText, Head, foldhash::fast::RandomState>,
    /// The rows the last batch stored made.
    last_rows: usize,
}

impl Default for AuditStream {
    fn default() -> Self {
        Self::new()
    }
}

impl AuditStream {
    /// A new stream with a fresh id.
    pub fn new() -> Self {
        Self {
            id: uuid::Uuid::now_v7().to_string(),
            seq: 0,
            hash: String::new(),
            heads: HashMap::default(),
            last_rows: 0,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Agents with a chain in this stream.
    pub fn agents(&self) -> usize {
        self.heads.len()
    }

    /// The rows the last batch stored made (0 before the first).
    pub fn last_rows(&self) -> usize {
        self.last_rows
    }

    /// Chains `records` on: sorts them by bucket and agent (each agent's keep their order), and encodes the
    /// rows, each record with its position (its hash goes into the next record's and the row's heads). The
    /// stream itself moves on only by [`Self::commit`], once stored.
    pub fn chain(&self, records: &mut [QueuedRecord]) -> ChainedBatch {
        let parts = self.group(records);
        let buckets: Vec<i32> =
            parts.iter().flat_map(|part| std::iter::repeat_n(part.head.bucket, part.records)).collect();
        let mut batch = ChainedBatch {
            rows: Vec::new(),
            heads: Vec::with_capacity(parts.len()),
            last_seq: self.seq,
            last_hash: self.hash.clone(),
        };
        // The agent being chained and how many of its records are still to come: they come in one run (over
        // one or more rows), the parts in the records' order.
        let mut parts = parts.into_iter();
        let mut current: Option<Part> = None;
        let mut left = 0;
        let mut start = 0;
        while start < records.len() {
            let end = row_end(records, &buckets, start);
            let mut out = Vec::with_capacity((end - start) * 448 + 2);
            out.push(b'[');
            let mut heads: Vec<RowHeadOut> = Vec::new();
            let (mut first_at, mut last_at) = (i64::MAX, i64::MIN);
            for record in &records[start..end] {
                let at = record.occurred_at();
                (first_at, last_at) = (first_at.min(at), last_at.max(at));
                if left == 0 {
                    if let Some(done) = current.take() {
                        close(&mut heads, &done.head);
                        batch.heads.push((done.agent, done.head));
                    }
                    current = parts.next();
                    left = current.as_ref().map_or(0, |part| part.records);
                }
                let Some(part) = current.as_mut() else { continue };
                left -= 1;
                if heads.last().is_none_or(|last| last.0 != part.agent) {
                    heads.push(RowHeadOut(part.agent.clone(), part.head.seq, part.head.hash, 0, HeadHash::new()));
                }
                if out.len() > 1 {
                    out.push(b',');
                }
                part.head.seq += 1;
                let digits = append_chained_record(&mut out, &part.head.hash, record, part.head.seq);
                part.head.hash = HeadHash::from(hex_text(&digits)).unwrap_or_default();
            }
            if let Some(part) = &current {
                close(&mut heads, &part.head);
            }
            out.push(b']');
            // Every piece written is valid UTF-8 (strings copied or escaped whole, ASCII punctuation).
            let records_text = String::from_utf8(out).unwrap_or_default();
            // Serialising strings and numbers cannot fail.
            let heads = serde_json::to_string(&heads).unwrap_or_default();
            let seq = batch.last_seq + 1;
            let hash = row_hash(&batch.last_hash, seq, &heads);
            batch.rows.push(StreamRow {
                seq,
                bucket: buckets[start],
                first_at,
                last_at,
                heads,
                prev_hash: std::mem::replace(&mut batch.last_hash, hash.clone()),
                hash,
                records: records_text,
            });
            batch.last_seq = seq;
            start = end;
        }
        if let Some(part) = current {
            batch.heads.push((part.agent, part.head));
        }
        batch
    }

    /// Orders `records` by bucket and agent, stably (each agent's keep their order), and returns the agents'
    /// parts in that order. The agents are sorted, not the records: a batch spread over many agents has a
    /// few records each, and each agent's head is looked up once.
    fn group(&self, records: &mut [QueuedRecord]) -> Vec<Part> {
        let mut parts: Vec<Part> = Vec::new();
        let mut part_of: Vec<usize> = Vec::with_capacity(records.len());
        {
            let mut index: HashMap<&str, usize, foldhash::fast::RandomState> = HashMap::default();
            let mut last: Option<(&str, usize)> = None;
            for record in records.iter() {
                let agent = record.agent_id().as_str();
                let part = match last {
                    Some((previous, part)) if previous == agent => part,
                    _ => *index.entry(agent).or_insert_with(|| {
                        parts.push(self.part(record.agent_id()));
                        parts.len() - 1
                    }),
                };
                last = Some((agent, part));
                parts[part].records += 1;
                part_of.push(part);
            }
        }
        let mut order: Vec<usize> = (0..parts.len()).collect();
        order.sort_unstable_by(|&a, &b| {
            let (a, b) = (&parts[a], &parts[b]);
            (a.head.bucket, &a.agent).cmp(&(b.head.bucket, &b.agent))
        });
        // Where each part's next record goes, then where each record goes.
        let mut next = vec![0; parts.len()];
        let mut at = 0;
        for &part in &order {
            next[part] = at;
            at += parts[part].records;
        }
        let targets: Vec<usize> = part_of
            .iter()
            .map(|&part| {
                next[part] += 1;
                next[part] - 1
            })
            .collect();
        // Records of one agent, or already in order, stay where they are.
        if targets.iter().enumerate().any(|(at, target)| at != *target) {
            let mut taken: Vec<QueuedRecord> = records.iter_mut().map(std::mem::take).collect();
            for (record, target) in taken.iter_mut().zip(targets) {
                records[target] = std::mem::take(record);
            }
        }
        let mut parts: Vec<Option<Part>> = parts.into_iter().map(Some).collect();
        order.into_iter().filter_map(|part| parts[part].take()).collect()
    }

    /// `agent`'s part of a batch, its chain where the stream has it (or at the start).
    fn part(&self, agent: &AuditText) -> Part {
        let head = self.heads.get(agent).copied().unwrap_or_else(|| Head {
            seq: 0,
            hash: HeadHash::from(&self.id).unwrap_or_default(),
            bucket: bucket_of(agent),
        });
        Part { agent: agent.clone(), head, records: 0 }
    }

    /// The batch was stored: the stream moves on to where it ends.
    pub fn commit(&mut self, batch: ChainedBatch) {
        self.last_rows = batch.rows.len();
        self.seq = batch.last_seq;
        self.hash = batch.last_hash;
        for (agent, head) in batch.heads {
            self.heads.insert(agent, head);
        }
    }
}

/// Sets the end of the row's newest head (the agent being chained) to where its chain stands.
fn close(heads: &mut [RowHeadOut], head: &Head) {
    if let Some(last) = heads.last_mut() {
        (last.3, last.4) = (head.seq, head.hash);
    }
}

/// Where the row starting at `start` ends: at the next bucket, after [`ROW_RECORDS`] records, or before a
/// record that would take its span of time over [`ROW_SPAN`].
fn row_end(records: &[QueuedRecord], buckets: &[i32], start: usize) -> usize {
    let first = records[start].occurred_at();
    let (mut low, mut high) = (first, first);
    let mut end = start + 1;
    while end < records.len() && buckets[end] == buckets[start] && end - start < ROW_RECORDS {
        let at = records[end].occurred_at();
        if at.max(high).saturating_sub(at.min(low)) > ROW_SPAN {
            break;
        }
        (low, high) = (low.min(at), high.max(at));
        end += 1;
    }
    end
}

/// Where a stored stream stands: its newest row and the newest row retention deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamHead {
    pub stream_id: String,
    pub seq: i64,
    pub hash: String,
    pub pruned_seq: i64,
    pub pruned_hash: String,
}

/// A stored row as verification reads it: its records only when asked for.
#[derive(Debug, Clone)]
pub struct VerifiedRow {
    pub seq: i64,
    /// The latest `occurred_at` among its records (for retention).
    pub last_at: i64,
    pub prev_hash: String,
    pub hash: String,
    pub heads: String,
    pub records: Option<Vec<AuditRecord>>,
}

/// Why a stream, or an agent's chain in it, does not verify; the first problem found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    #[error("row {found} follows row {expected_before}: a row is missing")]
    RowGap { expected_before: i64, found: i64 },
    #[error("row {seq} does not link to the row before it")]
    RowUnlinked { seq: i64 },
    #[error("row {seq} does not match its hash: its heads were altered")]
    RowAltered { seq: i64 },
    #[error("row {seq}'s heads do not parse")]
    RowMalformed { seq: i64 },
    #[error("the stream ends at row {found}, but its head says {expected}: newer rows were deleted")]
    Truncated { expected: i64, found: i64 },
    #[error(
        "row {seq} lies past the stream's head ({head}), which its writer moves with every row it writes: it was added from outside"
    )]
    PastHead { head: i64, seq: i64 },
    #[error("agent {agent}, row {seq}: {problem}")]
    Agent { agent: String, seq: i64, problem: String },
}

impl StreamError {
    /// The agent whose chain is broken, when the stream's own chain is intact.
    pub fn agent(&self) -> Option<&str> {
        match self {
            StreamError::Agent { agent, .. } => Some(agent),
            _ => None,
        }
    }
}

/// Checks a stream's rows, fed in order: the chain of rows, and the records of the rows that carry them
/// (every agent's, or one agent's) against the heads the rows commit to.
#[derive(Debug)]
pub struct StreamVerifier {
    head: StreamHead,
    seq: i64,
    hash: String,
    /// Only this agent's records are checked (the rows of others carry none).
    agent: Option<String>,
    /// Each checked agent's chain: position and hash of its newest record, and the records checked.
    chains: HashMap<String, (i64, String, u64)>,
}

impl StreamVerifier {
    pub fn new(head: StreamHead, agent: Option<&str>) -> Self {
        let (seq, hash) = (head.pruned_seq, head.pruned_hash.clone());
        Self { head, seq, hash, agent: agent.map(str::to_owned), chains: HashMap::new() }
    }

    /// Checks the next row.
    pub fn check(&mut self, row: &VerifiedRow) -> Result<(), StreamError> {
        if row.seq != self.seq + 1 {
            return Err(StreamError::RowGap { expected_before: self.seq + 1, found: row.seq });
        }
        if row.prev_hash != self.hash {
            return Err(StreamError::RowUnlinked { seq: row.seq });
        }
        if row_hash(&row.prev_hash, row.seq, &row.heads) != row.hash {
            return Err(StreamError::RowAltered { seq: row.seq });
        }
        (self.seq, self.hash) = (row.seq, row.hash.clone());
        let Some(records) = &row.records else { return Ok(()) };
        let heads: Vec<RowHead> =
            serde_json::from_str(&row.heads).map_err(|_| StreamError::RowMalformed { seq: row.seq })?;
        let problem =
            |agent: &str, problem: String| StreamError::Agent { agent: agent.to_owned(), seq: row.seq, problem };
        let only = self.agent.clone();
        let wanted = |agent: &str| only.as_deref().is_none_or(|wanted| wanted == agent);
        // Each head named by the row continues its agent's chain (or starts it: at the stream's id, or
        // anywhere once older rows were pruned).
        let mut open: HashMap<&str, (i64, String)> = HashMap::new();
        for head in heads.iter().filter(|head| wanted(head.agent())) {
            let RowHead(agent, before_seq, before_hash, _, _) = head;
            match self.chains.get(agent) {
                Some((seq, hash, _)) if (seq, hash) != (before_seq, before_hash) => {
                    return Err(problem(
                        agent,
                        format!(
                            "its records start after position {before_seq}, but its chain is at {seq}: records are missing"
                        ),
                    ));
                }
                None if self.head.pruned_seq == 0 && (*before_seq != 0 || *before_hash != self.head.stream_id) => {
                    return Err(problem(agent, "its first records do not start the stream's chain".to_owned()));
                }
                _ => {}
            }
            open.insert(agent, (*before_seq, before_hash.clone()));
        }
        for record in records.iter().filter(|record| wanted(&record.agent_id)) {
            let Some((seq, hash)) = open.get_mut(record.agent_id.as_str()) else {
                return Err(problem(&record.agent_id, format!("record {} is not in its row's heads", record.id)));
            };
            let at = record.chain_seq.unwrap_or_default();
            if at != *seq + 1 {
                return Err(problem(
                    &record.agent_id,
                    format!(
                        "record {} is at position {at}, expected {}: a record is missing or was moved",
                        record.id,
                        *seq + 1
                    ),
                ));
            }
            let expected = super::chain::chain_hash(hash, record, at);
            // Rows written since records are stored without their hashes hold none: an altered one then
            // shows where its agent's chain ends in the row.
            if record.hash.as_deref().is_some_and(|stored| stored != expected.as_str()) {
                return Err(problem(
                    &record.agent_id,
                    format!("record {} (position {at}) does not match its hash: it was altered", record.id),
                ));
            }
            (*seq, *hash) = (at, expected);
        }
        let counts = records.iter().filter(|record| wanted(&record.agent_id)).fold(
            HashMap::<&str, u64>::new(),
            |mut counts, record| {
                *counts.entry(record.agent_id.as_str()).or_default() += 1;
                counts
            },
        );
        for head in heads.iter().filter(|head| wanted(head.agent())) {
            let reached = open.get(head.agent()).cloned().unwrap_or_default();
            if reached.0 == head.3 && reached.1 != head.4 {
                return Err(problem(
                    head.agent(),
                    format!(
                        "its records end at position {}, as the row's heads say, but not at the hash they give: a record was altered",
                        head.3
                    ),
                ));
            }
            if (reached.0, reached.1.as_str()) != (head.3, head.4.as_str()) {
                return Err(problem(
                    head.agent(),
                    format!(
                        "its records end at position {}, but the row's heads say {}: records were deleted",
                        reached.0, head.3
                    ),
                ));
            }
            let checked = counts.get(head.agent()).copied().unwrap_or_default();
            let chain = self.chains.entry(head.0.clone()).or_insert((0, String::new(), 0));
            (chain.0, chain.1, chain.2) = (head.3, head.4.clone(), chain.2 + checked);
        }
        Ok(())
    }

    /// After the last row: the stream must end where its head says. Returns each checked agent's number
    /// of records.
    pub fn finish(self) -> Result<Vec<(String, u64)>, StreamError> {
        if self.seq != self.head.seq || self.hash != self.head.hash {
            return Err(StreamError::Truncated { expected: self.head.seq, found: self.seq });
        }
        let mut counts: Vec<(String, u64)> = self.chains.into_iter().map(|(agent, (_, _, n))| (agent, n)).collect();
        counts.sort();
        Ok(counts)
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
