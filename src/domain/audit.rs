//! The audit log's tamper evidence: each agent's records form a hash chain.
//!
//! Every record gets the next position (`chain_seq`, from 1) in its agent's chain and a hash over the
//! previous record's hash and every field of its own, in a fixed order. Editing a record changes its hash;
//! deleting one leaves a gap or breaks the next record's link; deleting the newest ones is caught by the
//! chain's head (position and hash of the last record), kept in its own table beside the records. Pruning
//! old records keeps the chain verifiable: the head remembers the position and hash of the last record
//! pruned, and verification starts from there.

use sha2::{Digest, Sha256};

use super::model::AuditRecord;

/// The hash before the first record of a chain.
pub const GENESIS: &str = "";

/// `hex(SHA-256(prev || "\n" || fields))`, the fields serialised as one compact JSON array in a fixed order.
pub fn chain_hash(prev: &str, record: &AuditRecord, seq: i64) -> String {
    // Serialised into one buffer without building a JSON value first (the writer hashes every MCP request's
    // record), then hashed in one call rather than a call per token. Strings, numbers and nulls always
    // serialise, so the default is never taken.
    let fields = serde_json::to_vec(&ChainFields { record, seq }).unwrap_or_default();
    let mut hasher = Sha256::new();
    hasher.update(prev.as_bytes());
    hasher.update(b"\n");
    hasher.update(&fields);
    crate::domain::hex(hasher.finalize())
}

/// The hashed fields of a record at position `seq`, serialised as a JSON array.
struct ChainFields<'a> {
    record: &'a AuditRecord,
    seq: i64,
}

impl serde::Serialize for ChainFields<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let record = self.record;
        let mut fields = serializer.serialize_tuple(22)?;
        fields.serialize_element(&record.id)?;
        fields.serialize_element(&record.agent_id)?;
        fields.serialize_element(&self.seq)?;
        fields.serialize_element(&record.occurred_at.as_micros())?;
        fields.serialize_element(&record.kind)?;
        fields.serialize_element(&record.actor)?;
        fields.serialize_element(&record.action)?;
        fields.serialize_element(&record.target)?;
        fields.serialize_element(&record.before_digest)?;
        fields.serialize_element(&record.after_digest)?;
        fields.serialize_element(&record.request_id)?;
        fields.serialize_element(&record.key_id)?;
        fields.serialize_element(&record.key_prefix)?;
        fields.serialize_element(&record.session_id)?;
        fields.serialize_element(&record.method)?;
        fields.serialize_element(&record.outcome)?;
        fields.serialize_element(&record.error_code)?;
        fields.serialize_element(&record.bytes_out)?;
        fields.serialize_element(&record.latency_us)?;
        fields.serialize_element(&record.client_ip)?;
        fields.serialize_element(&record.user_agent)?;
        fields.serialize_element(&record.trace_id)?;
        fields.end()
    }
}

/// Where an agent's chain stands: its newest record, and the newest record retention has pruned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainHead {
    pub agent_id: String,
    /// Position of the newest record (0 before the first).
    pub seq: i64,
    /// Hash of the newest record ([`GENESIS`] before the first).
    pub hash: String,
    /// Position of the newest pruned record (0 when nothing was pruned).
    pub pruned_seq: i64,
    /// Hash of the newest pruned record.
    pub pruned_hash: String,
}

/// Why a chain does not verify; the first problem found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("record {id} is at position {found}, expected {expected}: a record is missing or was moved")]
    Gap { id: String, expected: i64, found: i64 },
    #[error("record {id} (position {seq}) does not match its hash: it was altered")]
    Altered { id: String, seq: i64 },
    #[error("record {id} (position {seq}) does not link to the record before it")]
    Unlinked { id: String, seq: i64 },
    #[error("the chain ends at position {found}, but its head says {expected}: newer records were deleted")]
    Truncated { expected: i64, found: i64 },
}

/// Checks records of one chain, fed oldest first, against the head they started from.
#[derive(Debug)]
pub struct ChainVerifier {
    head: ChainHead,
    seq: i64,
    hash: String,
    checked: u64,
}

impl ChainVerifier {
    /// Starts after the newest pruned record.
    pub fn new(head: ChainHead) -> Self {
        let (seq, hash) = (head.pruned_seq, head.pruned_hash.clone());
        Self { head, seq, hash, checked: 0 }
    }

    /// Checks the next record (with its stored position, previous hash and hash).
    pub fn check(&mut self, record: &AuditRecord) -> Result<(), ChainError> {
        let id = record.id.clone();
        let seq = record.chain_seq.unwrap_or_default();
        if seq != self.seq + 1 {
            return Err(ChainError::Gap { id, expected: self.seq + 1, found: seq });
        }
        if record.prev_hash.as_deref() != Some(self.hash.as_str()) {
            return Err(ChainError::Unlinked { id, seq });
        }
        let hash = chain_hash(&self.hash, record, seq);
        if record.hash.as_deref() != Some(hash.as_str()) {
            return Err(ChainError::Altered { id, seq });
        }
        self.seq = seq;
        self.hash = hash;
        self.checked += 1;
        Ok(())
    }

    /// After the last record: the chain must end where its head says. Returns how many records were checked.
    pub fn finish(self) -> Result<u64, ChainError> {
        if self.seq != self.head.seq || self.hash != self.head.hash {
            return Err(ChainError::Truncated { expected: self.head.seq, found: self.seq });
        }
        Ok(self.checked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::time::Timestamp;

    fn record(id: &str) -> AuditRecord {
        AuditRecord {
            id: id.to_owned(),
            agent_id: "bot".to_owned(),
            occurred_at: Timestamp::from_micros(1_700_000_000_000_000),
            kind: "mcp".to_owned(),
            actor: "key:k1".to_owned(),
            action: "resources/read".to_owned(),
            target: "test://a".to_owned(),
            method: Some("resources/read".to_owned()),
            outcome: Some("ok".to_owned()),
            ..AuditRecord::default()
        }
    }

    /// Chains `records` the way the store does; returns the head.
    fn chain(records: &mut [AuditRecord]) -> ChainHead {
        let mut hash = GENESIS.to_owned();
        for (index, record) in records.iter_mut().enumerate() {
            let seq = index as i64 + 1;
            record.chain_seq = Some(seq);
            record.prev_hash = Some(hash.clone());
            hash = chain_hash(&hash, record, seq);
            record.hash = Some(hash.clone());
        }
        ChainHead {
            agent_id: "bot".to_owned(),
            seq: records.len() as i64,
            hash,
            pruned_seq: 0,
            pruned_hash: GENESIS.to_owned(),
        }
    }

    fn verify(head: ChainHead, records: &[AuditRecord]) -> Result<u64, ChainError> {
        let mut verifier = ChainVerifier::new(head);
        for record in records {
            verifier.check(record)?;
        }
        verifier.finish()
    }

    /// The hashed form is the compact JSON array of the fields, exactly: stored chains keep verifying
    /// whatever serialises it.
    #[test]
    fn the_hash_covers_the_fields_as_one_json_array() {
        let record = AuditRecord {
            id: "0190-id".to_owned(),
            agent_id: "bot".to_owned(),
            occurred_at: crate::domain::time::Timestamp::from_micros(1_700_000_000_123_456),
            kind: "mcp".to_owned(),
            actor: "key:k1".to_owned(),
            action: "resources/read".to_owned(),
            target: "file:///a \"quoted\" \\ name\n\u{e9}\u{1f600}".to_owned(),
            request_id: Some("req".to_owned()),
            method: Some("resources/read".to_owned()),
            outcome: Some("error".to_owned()),
            error_code: Some(-32002),
            bytes_out: Some(0),
            latency_us: Some(17),
            user_agent: Some("curl/8".to_owned()),
            ..AuditRecord::default()
        };
        let fields = concat!(
            r#"["0190-id","bot",7,1700000000123456,"mcp","key:k1","resources/read","#,
            r#""file:///a \"quoted\" \\ name\né😀","#,
            r#"null,null,"req",null,null,null,"resources/read","error",-32002,0,17,null,"curl/8",null]"#
        );
        let mut hasher = Sha256::new();
        hasher.update(b"prev\n");
        hasher.update(fields.as_bytes());
        assert_eq!(chain_hash("prev", &record, 7), hex::encode(hasher.finalize()));
    }

    #[test]
    fn an_intact_chain_verifies() {
        let mut records = vec![record("a"), record("b"), record("c")];
        let head = chain(&mut records);
        assert_eq!(verify(head, &records), Ok(3));
    }

    #[test]
    fn an_edited_record_is_detected() {
        let mut records = vec![record("a"), record("b"), record("c")];
        let head = chain(&mut records);
        records[1].outcome = Some("error".to_owned());
        assert_eq!(verify(head, &records), Err(ChainError::Altered { id: "b".to_owned(), seq: 2 }));
    }

    #[test]
    fn a_deleted_record_is_detected() {
        let mut records = vec![record("a"), record("b"), record("c")];
        let head = chain(&mut records);
        records.remove(1);
        assert_eq!(verify(head, &records), Err(ChainError::Gap { id: "c".to_owned(), expected: 2, found: 3 }));
    }

    #[test]
    fn deleting_the_newest_records_is_detected() {
        let mut records = vec![record("a"), record("b"), record("c")];
        let head = chain(&mut records);
        records.pop();
        assert_eq!(verify(head, &records), Err(ChainError::Truncated { expected: 3, found: 2 }));
    }

    #[test]
    fn a_rehashed_forgery_does_not_link() {
        let mut records = vec![record("a"), record("b"), record("c")];
        let head = chain(&mut records);
        // Rewriting b and its hash consistently still breaks c's link.
        records[1].target = "test://forged".to_owned();
        records[1].hash = Some(chain_hash(records[1].prev_hash.as_deref().unwrap_or_default(), &records[1], 2));
        assert_eq!(verify(head, &records), Err(ChainError::Unlinked { id: "c".to_owned(), seq: 3 }));
    }

    #[test]
    fn a_pruned_chain_verifies_from_its_anchor() {
        let mut records = vec![record("a"), record("b"), record("c")];
        let mut head = chain(&mut records);
        let pruned = records.remove(0);
        head.pruned_seq = 1;
        head.pruned_hash = pruned.hash.unwrap_or_default();
        assert_eq!(verify(head, &records), Ok(2));
    }
}
