//! The audit log's tamper evidence: each agent's records form a hash chain.
//!
//! Every record gets the next position (`chain_seq`, from 1) in its agent's chain and a hash over the
//! previous record's hash and every field of its own, in a fixed order. Editing a record changes its hash;
//! deleting one leaves a gap or breaks the next record's link; deleting the newest ones is caught by the
//! chain's head (position and hash of the last record), kept in its own table beside the records. Pruning
//! old records keeps the chain verifiable: the head remembers the position and hash of the last record
//! pruned, and verification starts from there.

use sha2::{Digest, Sha256};

use crate::domain::model::{AuditRecord, AuditText};

/// The hash before the first record of a chain.
pub const GENESIS: &str = "";

/// `hex(SHA-256(prev || "\n" || fields))`, the fields serialised as one compact JSON array in a fixed order.
pub fn chain_hash(prev: &str, record: &AuditRecord, seq: i64) -> String {
    hash_fields(prev, &chain_fields(record, seq))
}

/// The chain hash of a record whose fields (as [`chain_fields`] writes them) are `fields`.
fn hash_fields(prev: &str, fields: &[u8]) -> String {
    hex_text(&hash_digits(prev, fields)).to_owned()
}

/// The chain hash's 64 lower-case hex digits, for a record whose fields are `fields` after the record whose
/// hash is `prev`. Hashed in one call rather than a call per token: the writer hashes every MCP request's
/// record.
fn hash_digits(prev: &str, fields: &[u8]) -> [u8; 64] {
    let mut hasher = Sha256::new();
    hasher.update(prev.as_bytes());
    hasher.update(b"\n");
    hasher.update(fields);
    let mut digits = [0u8; 64];
    // 32 bytes of digest fill the 64 digits exactly.
    let _ = hex::encode_to_slice(hasher.finalize(), &mut digits);
    digits
}

/// Hex digits as text (they are ASCII).
pub fn hex_text(digits: &[u8; 64]) -> &str {
    std::str::from_utf8(digits).unwrap_or_default()
}

/// Appends `record`, at position `seq` after the record whose hash is `prev`, to `out` as an agent's own
/// segments keep it: its hashed fields as `chain_fields` writes them (the queued ones with the position put
/// in) with its hash as one more element, so that the bytes are written once for both. Returns the record's
/// own hash ([`hex_text`] reads it).
pub fn append_stored_record(out: &mut Vec<u8>, prev: &str, record: &QueuedRecord, seq: i64) -> [u8; 64] {
    let digits = append_chained_record(out, prev, record, seq);
    out.pop();
    out.extend_from_slice(b",\"");
    out.extend_from_slice(&digits);
    out.extend_from_slice(b"\"]");
    digits
}

/// Appends `record`, at position `seq` after the record whose hash is `prev`, to `out` as a writer stream's
/// row keeps it: its hashed fields alone, without its hash, which follows from them and the row's heads (the
/// hash before each agent's first record there): the hash of every record would be a sixth to a quarter of
/// a row's bytes and half of what it compresses to (bench/README.md). Returns the record's own hash, which the
/// caller keeps where it likes: the writer chains every MCP request's record, and a string a record was an
/// allocation each.
pub fn append_chained_record(out: &mut Vec<u8>, prev: &str, record: &QueuedRecord, seq: i64) -> [u8; 64] {
    let start = out.len();
    let (before, after) = record.fields.split_at(record.seq_at);
    out.extend_from_slice(before);
    out.push(b',');
    out.extend_from_slice(itoa::Buffer::new().format(seq).as_bytes());
    out.extend_from_slice(after);
    hash_digits(prev, &out[start..])
}

/// A record on its way to a writer stream: its hashed fields already written as [`chain_fields`] writes
/// them, all but its chain position, which the writer sets. One buffer a record, written where the record
/// is made: the writer only copies it into its row beside the position and hashes it.
#[derive(Debug, Clone, Default)]
pub struct QueuedRecord {
    agent_id: AuditText,
    occurred_at: i64,
    /// The compact JSON array of the fields without the position (the third element).
    fields: Vec<u8>,
    /// Where the position goes: after the id and the agent, before the `,` that follows them.
    seq_at: usize,
}

impl QueuedRecord {
    /// The record of `fields`.
    pub fn new(fields: &ChainFields<'_>) -> Self {
        let mut array = JsonArray::with_capacity(384);
        array.string(fields.id);
        array.string(fields.agent_id);
        let seq_at = array.out.len();
        write_fields_after_seq(&mut array, fields);
        let mut written = array.finish();
        // The queue holds it until it is written: a record whose escaped fields doubled the buffer past what
        // most need does not keep the spare half.
        if written.capacity() > 1024 && written.capacity() > written.len() + written.len() / 2 {
            written.shrink_to_fit();
        }
        Self { agent_id: AuditText::from(fields.agent_id), occurred_at: fields.occurred_at, fields: written, seq_at }
    }

    pub fn agent_id(&self) -> &AuditText {
        &self.agent_id
    }

    /// Its fields as text, the position left out.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.fields)
    }

    /// Its id and agent as written (`["<id>","<agent>"`), which name it in logs without what the client sent.
    pub fn id_text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.fields[..self.seq_at])
    }

    /// When it happened (µs since the Unix epoch).
    pub fn occurred_at(&self) -> i64 {
        self.occurred_at
    }
}

impl From<&AuditRecord> for QueuedRecord {
    fn from(record: &AuditRecord) -> Self {
        Self::new(&ChainFields::of(record))
    }
}

/// The hashed fields of a record, borrowed from wherever they are, in the order they are hashed; `actor`
/// in parts, joined.
#[derive(Debug, Clone, Copy)]
pub struct ChainFields<'a> {
    pub id: &'a str,
    pub agent_id: &'a str,
    pub occurred_at: i64,
    pub kind: &'a str,
    pub actor: [&'a str; 2],
    pub action: &'a str,
    pub target: &'a str,
    pub before_digest: Option<&'a str>,
    pub after_digest: Option<&'a str>,
    pub request_id: Option<&'a str>,
    pub key_id: Option<&'a str>,
    pub key_prefix: Option<&'a str>,
    pub session_id: Option<&'a str>,
    pub method: Option<&'a str>,
    pub outcome: Option<&'a str>,
    pub error_code: Option<i64>,
    pub bytes_out: Option<i64>,
    pub latency_us: Option<i64>,
    pub client_ip: Option<&'a str>,
    pub user_agent: Option<&'a str>,
    pub trace_id: Option<&'a str>,
}

impl<'a> ChainFields<'a> {
    pub fn of(record: &'a AuditRecord) -> Self {
        Self {
            id: &record.id,
            agent_id: &record.agent_id,
            occurred_at: record.occurred_at.as_micros(),
            kind: &record.kind,
            actor: [&record.actor, ""],
            action: &record.action,
            target: &record.target,
            before_digest: record.before_digest.as_deref(),
            after_digest: record.after_digest.as_deref(),
            request_id: record.request_id.as_deref(),
            key_id: record.key_id.as_deref(),
            key_prefix: record.key_prefix.as_deref(),
            session_id: record.session_id.as_deref(),
            method: record.method.as_deref(),
            outcome: record.outcome.as_deref(),
            error_code: record.error_code.map(i64::from),
            bytes_out: record.bytes_out,
            latency_us: record.latency_us,
            client_ip: record.client_ip.as_deref(),
            user_agent: record.user_agent.as_deref(),
            trace_id: record.trace_id.as_deref(),
        }
    }
}

/// The hashed fields of a record at position `seq`: the compact JSON array serde_json writes for them,
/// byte for byte (stored chains must keep verifying), written straight into one buffer. A string with
/// nothing to escape, as nearly every field is, is copied whole instead of byte by byte.
fn chain_fields(record: &AuditRecord, seq: i64) -> Vec<u8> {
    let fields = ChainFields::of(record);
    let mut array = JsonArray::with_capacity(512);
    array.string(fields.id);
    array.string(fields.agent_id);
    array.number(seq);
    write_fields_after_seq(&mut array, &fields);
    array.finish()
}

/// The fields after the position, each after its `,`.
fn write_fields_after_seq(array: &mut JsonArray, fields: &ChainFields<'_>) {
    array.number(fields.occurred_at);
    array.string(fields.kind);
    array.strings(fields.actor);
    array.string(fields.action);
    array.string(fields.target);
    array.optional_string(fields.before_digest);
    array.optional_string(fields.after_digest);
    array.optional_string(fields.request_id);
    array.optional_string(fields.key_id);
    array.optional_string(fields.key_prefix);
    array.optional_string(fields.session_id);
    array.optional_string(fields.method);
    array.optional_string(fields.outcome);
    array.optional_number(fields.error_code);
    array.optional_number(fields.bytes_out);
    array.optional_number(fields.latency_us);
    array.optional_string(fields.client_ip);
    array.optional_string(fields.user_agent);
    array.optional_string(fields.trace_id);
}

/// Whether serde_json escapes anything in `bytes`: a control character, `"` or `\\` (and nothing else).
/// Looked at eight bytes at a time, the last eight overlapping the ones before (a shorter value is padded with
/// spaces): a record's fields are short, and a byte at a time costs each of them its length in loop rounds.
fn needs_escape(bytes: &[u8]) -> bool {
    let word = |chunk: &[u8]| {
        let mut padded = [b' '; 8];
        padded[..chunk.len()].copy_from_slice(chunk);
        u64::from_le_bytes(padded)
    };
    if bytes.len() <= 8 {
        return word_needs_escape(word(bytes));
    }
    let (chunks, _) = bytes.as_chunks::<8>();
    let last = &bytes[bytes.len() - 8..];
    chunks.iter().any(|chunk| word_needs_escape(u64::from_le_bytes(*chunk))) || word_needs_escape(word(last))
}

/// Whether any of the eight bytes of `word` is below 0x20, `"` or `\\`. Each test is the exact "any byte"
/// form (a borrow can only mark bytes above one that matched): a byte below `n` (for `n` <= 0x80) leaves its
/// top bit set in `(x - n * 0x01…) & !x`, and a byte equal to `c` is a zero byte of `x ^ c * 0x01…`.
fn word_needs_escape(x: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const TOPS: u64 = 0x8080_8080_8080_8080;
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & TOPS;
    let quote = x ^ (ONES * u64::from(b'"'));
    let backslash = x ^ (ONES * u64::from(b'\\'));
    (below(x, 0x20) | below(quote, 1) | below(backslash, 1)) != 0
}

/// A compact JSON array written element by element, as serde_json writes one.
struct JsonArray {
    out: Vec<u8>,
    /// Where the array starts in `out` (its `[`).
    start: usize,
}

impl JsonArray {
    fn with_capacity(capacity: usize) -> Self {
        let mut out = Vec::with_capacity(capacity);
        out.push(b'[');
        Self { out, start: 0 }
    }

    fn separate(&mut self) {
        if self.out.len() > self.start + 1 {
            self.out.push(b',');
        }
    }

    fn string(&mut self, value: &str) {
        self.separate();
        if needs_escape(value.as_bytes()) {
            // Writing a string into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut self.out, value);
        } else {
            self.out.push(b'"');
            self.out.extend_from_slice(value.as_bytes());
            self.out.push(b'"');
        }
    }

    /// One string of `parts` joined: JSON escapes character by character, so each part is escaped alone.
    fn strings(&mut self, parts: [&str; 2]) {
        if parts[1].is_empty() {
            return self.string(parts[0]);
        }
        self.string(parts[0]);
        // The closing quote of the first part gives way to the second part, whose opening quote goes.
        self.out.pop();
        let resume = self.out.len();
        self.string(parts[1]);
        // `string` wrote `,"` before the second part (the array had elements): take them out.
        self.out.drain(resume..resume + 2);
    }

    fn optional_string(&mut self, value: Option<&str>) {
        match value {
            Some(value) => self.string(value),
            None => self.null(),
        }
    }

    fn number(&mut self, value: i64) {
        self.separate();
        self.out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    fn optional_number(&mut self, value: Option<i64>) {
        match value {
            Some(value) => self.number(value),
            None => self.null(),
        }
    }

    fn null(&mut self) {
        self.separate();
        self.out.extend_from_slice(b"null");
    }

    fn finish(mut self) -> Vec<u8> {
        self.out.push(b']');
        self.out
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
            return Err(ChainError::Gap { id: id.to_string(), expected: self.seq + 1, found: seq });
        }
        if record.prev_hash.as_deref() != Some(self.hash.as_str()) {
            return Err(ChainError::Unlinked { id: id.to_string(), seq });
        }
        let hash = chain_hash(&self.hash, record, seq);
        if record.hash.as_deref() != Some(hash.as_str()) {
            return Err(ChainError::Altered { id: id.to_string(), seq });
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

    /// Every byte value at every place of values up to 40 bytes long, among bytes that need no escape: the
    /// word-wise check says what serde_json does.
    #[test]
    fn escapes_are_found_wherever_they_are() {
        let reference = |bytes: &[u8]| bytes.iter().any(|&byte| byte < 0x20 || byte == b'"' || byte == b'\\');
        for len in 0..=40 {
            let plain: Vec<u8> = (0..len).map(|i| b"aZ9 ~/:-{}"[i % 10]).collect();
            assert!(!needs_escape(&plain), "{len} plain bytes");
            for at in 0..len {
                for byte in 0..=255u8 {
                    let mut bytes = plain.clone();
                    bytes[at] = byte;
                    assert_eq!(needs_escape(&bytes), reference(&bytes), "byte {byte:#x} at {at} of {len}");
                }
            }
        }
        for value in
            ["", "mcp", "key:", "01a2189b-3f68-74d3-9740-08cf3cd84518", "k\"ey", "a\\b", "tab\there", "é\u{7f}ü"]
        {
            let escaped = serde_json::to_string(value).expect("a string");
            assert_eq!(needs_escape(value.as_bytes()), escaped.len() != value.len() + 2, "{value:?}");
        }
    }

    fn record(id: &str) -> AuditRecord {
        let record = crate::audit::read_record(id, "bot", Timestamp::from_micros(1_700_000_000_000_000), "test://a");
        let (method, outcome) = (Some("resources/read".into()), Some("ok".into()));
        AuditRecord { actor: "key:k1".into(), method, outcome, ..record }
    }

    /// Chains `records` the way the store does; returns the head.
    fn chain(records: &mut [AuditRecord]) -> ChainHead {
        let mut hash = GENESIS.to_owned();
        for (index, record) in records.iter_mut().enumerate() {
            let seq = index as i64 + 1;
            record.chain_seq = Some(seq);
            record.prev_hash = Some(hash.as_str().into());
            hash = chain_hash(&hash, record, seq);
            record.hash = Some(hash.as_str().into());
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

    /// A queued record waits in a bounded queue: one whose escaped fields grew its buffer keeps no more
    /// than half again what it holds, and logs name it by id and agent only.
    #[test]
    fn a_queued_record_keeps_little_spare_room() {
        let mut record = record("01a20c22-2e86-739b-9cc0-9c4622ff8836");
        record.target = "\u{1}".repeat(512).into();
        let queued = QueuedRecord::from(&record);
        assert!(queued.fields.len() > 3 * 1024, "each control character is six bytes escaped");
        assert!(queued.fields.capacity() <= queued.fields.len() + queued.fields.len() / 2);
        assert_eq!(queued.id_text(), "[\"01a20c22-2e86-739b-9cc0-9c4622ff8836\",\"bot\"");
    }

    /// The hashed form is the compact JSON array of the fields, exactly: stored chains keep verifying
    /// whatever serialises it.
    #[test]
    fn a_stored_record_is_its_hashed_fields_and_its_hash() {
        let mut record = record("01a20c22-2e86-739b-9cc0-9c4622ff8836");
        record.user_agent = Some("quote \" and \\ and \u{1}".into());
        let mut out = b"[".to_vec();
        let hash = hex_text(&append_stored_record(&mut out, "prev", &QueuedRecord::from(&record), 7)).to_owned();
        assert_eq!(hash, chain_hash("prev", &record, 7));
        let fields = chain_fields(&record, 7);
        let expected = format!("[{},\"{hash}\"]", String::from_utf8_lossy(&fields[..fields.len() - 1]));
        assert_eq!(String::from_utf8_lossy(&out), expected);
        let parsed: Vec<serde_json::Value> = serde_json::from_slice(&out[1..]).expect("a JSON array");
        assert_eq!(parsed.len(), 23);
    }

    #[test]
    fn the_hash_covers_the_fields_as_one_json_array() {
        let record = AuditRecord {
            id: "0190-id".into(),
            agent_id: "bot".into(),
            occurred_at: crate::domain::time::Timestamp::from_micros(1_700_000_000_123_456),
            kind: "mcp".into(),
            actor: "key:k1".into(),
            action: "resources/read".into(),
            target: "file:///a \"quoted\" \\ name\n\u{e9}\u{1f600}".into(),
            request_id: Some("req".into()),
            method: Some("resources/read".into()),
            outcome: Some("error".into()),
            error_code: Some(-32002),
            bytes_out: Some(0),
            latency_us: Some(17),
            user_agent: Some("curl/8".into()),
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

    /// The fields are written as serde_json writes the same array, for every character it escapes or not.
    #[test]
    fn the_fields_are_written_as_serde_json_writes_them() {
        let every_ascii: String = (0u8..0x80).map(char::from).collect();
        let values = ["", "plain", "a\"b", "back\\slash", "line\nbreak\ttab\r", "\u{7f}\u{e9}\u{1f600}", "\u{0}"];
        for (index, value) in values.iter().copied().chain([every_ascii.as_str()]).enumerate() {
            let record = AuditRecord {
                id: value.into(),
                agent_id: "bot".into(),
                occurred_at: Timestamp::from_micros(-5),
                kind: value.into(),
                actor: value.into(),
                action: value.into(),
                target: value.into(),
                before_digest: (index % 2 == 0).then(|| value.into()),
                request_id: Some(value.into()),
                session_id: (index % 3 == 0).then(|| value.into()),
                error_code: (index % 2 == 1).then_some(i32::MIN),
                bytes_out: Some(i64::MAX),
                latency_us: (index % 2 == 0).then_some(0),
                user_agent: Some(value.into()),
                trace_id: (index % 2 == 1).then(|| value.into()),
                ..AuditRecord::default()
            };
            let r = &record;
            let expected = serde_json::to_vec(&serde_json::json!([
                r.id,
                r.agent_id,
                -9,
                r.occurred_at.as_micros(),
                r.kind,
                r.actor,
                r.action,
                r.target,
                r.before_digest,
                r.after_digest,
                r.request_id,
                r.key_id,
                r.key_prefix,
                r.session_id,
                r.method,
                r.outcome,
                r.error_code,
                r.bytes_out,
                r.latency_us,
                r.client_ip,
                r.user_agent,
                r.trace_id
            ]))
            .expect("serialisable");
            assert_eq!(
                String::from_utf8_lossy(&chain_fields(&record, -9)),
                String::from_utf8_lossy(&expected),
                "{value:?}"
            );
        }
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
        records[1].outcome = Some("error".into());
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
        records[1].target = "test://forged".into();
        records[1].hash = Some(chain_hash(records[1].prev_hash.as_deref().unwrap_or_default(), &records[1], 2).into());
        assert_eq!(verify(head, &records), Err(ChainError::Unlinked { id: "c".to_owned(), seq: 3 }));
    }

    #[test]
    fn a_pruned_chain_verifies_from_its_anchor() {
        let mut records = vec![record("a"), record("b"), record("c")];
        let mut head = chain(&mut records);
        let pruned = records.remove(0);
        head.pruned_seq = 1;
        head.pruned_hash = pruned.hash.unwrap_or_default().into();
        assert_eq!(verify(head, &records), Ok(2));
    }
}
