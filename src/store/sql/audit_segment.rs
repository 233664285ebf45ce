//! Agents' audit segments: how one agent's records are cut into segments and chained, without a database.
//!
//! An agent's own chain (admin changes, and MCP records from before the writer streams) is stored as
//! segments, one agent's run of records in a row (see the 0008 migration); [`super::audit`] writes and
//! reads them.

use crate::domain::model::AuditRecord;
use crate::store::StoreError;

/// The most records one audit segment holds: a listing or a chain walk decodes a segment whole, and a
/// chain page finds the segment holding a position by looking this far back.
pub(in crate::store) const AUDIT_SEGMENT_RECORDS: usize = 1_000;

/// The longest stretch of occurrence time (µs) one audit segment spans: the listing looks this far past
/// the newest time a page can show for segments holding records at or before it.
pub(in crate::store) const AUDIT_SEGMENT_SPAN: i64 = 60_000_000;

/// The most audit rows (agents' segments, 10 values each, or stream rows, 11) one `insert` statement
/// carries: far below both backends' bound parameters (SQLite's 32,766).
pub(in crate::store) const AUDIT_ROWS_PER_INSERT: usize = 1_000;

/// The bytes of text values one audit `insert` statement carries, unless its first row alone has more. A
/// batch of records spread over many agents makes rows of several MiB together; sent as one statement,
/// their arguments and the connection's buffer grew to that size, by doubling, for every batch (the
/// buffer is given back after each: otherwise each pooled connection would keep one). In statements of
/// this size they stay in memory the allocator reuses, at a few more round trips a batch.
pub(in crate::store) const AUDIT_STATEMENT_BYTES: usize = 512 * 1024;

/// The values of an audit row (a segment's or a stream row's): 10 or 11.
pub(in crate::store) const AUDIT_VALUES_PER_ROW: usize = 11;

/// What a row's values take in a statement's arguments beside their text, at most: the numbers (8 bytes
/// each, or 4) and a length before each value (PostgreSQL's encoding).
pub(in crate::store) const AUDIT_ROW_ENCODING_BYTES: usize = AUDIT_VALUES_PER_ROW * 4 + 6 * 8;

/// How many of `rows` the next audit `insert` statement carries, and their text's bytes: at least one, at
/// most [`AUDIT_ROWS_PER_INSERT`], and no more than [`AUDIT_STATEMENT_BYTES`] unless the first row
/// alone has more.
pub(in crate::store) fn statement_rows<T>(rows: &[T], bytes: impl Fn(&T) -> usize) -> (usize, usize) {
    let mut total = 0;
    for (count, row) in rows.iter().take(AUDIT_ROWS_PER_INSERT).enumerate() {
        let size = bytes(row);
        if count > 0 && total + size > AUDIT_STATEMENT_BYTES {
            return (count, total);
        }
        total += size;
    }
    (rows.len().min(AUDIT_ROWS_PER_INSERT), total)
}

/// Where one audit segment lies in an agent's records: a run of at most [`AUDIT_SEGMENT_RECORDS`] records
/// spanning at most [`AUDIT_SEGMENT_SPAN`] of occurrence time (see the 0008 migration).
pub(in crate::store) struct AuditSegment {
    pub(in crate::store) records: std::ops::Range<usize>,
    pub(in crate::store) first_at: i64,
    pub(in crate::store) last_at: i64,
}

/// Cuts one agent's `records`, in chain order, into segments.
pub(in crate::store) fn audit_segments(records: &[AuditRecord]) -> Vec<AuditSegment> {
    let mut segments = Vec::new();
    let mut start = 0;
    let (mut first_at, mut last_at) = (0, 0);
    for (i, record) in records.iter().enumerate() {
        let at = record.occurred_at.as_micros();
        let fits = i > start
            && i - start < AUDIT_SEGMENT_RECORDS
            && at.max(last_at).saturating_sub(at.min(first_at)) <= AUDIT_SEGMENT_SPAN;
        if fits {
            first_at = first_at.min(at);
            last_at = last_at.max(at);
            continue;
        }
        if i > start {
            segments.push(AuditSegment { records: start..i, first_at, last_at });
        }
        start = i;
        (first_at, last_at) = (at, at);
    }
    if start < records.len() {
        segments.push(AuditSegment { records: start..records.len(), first_at, last_at });
    }
    segments
}

/// An audit segment as it is inserted.
pub(in crate::store) struct AuditSegmentInsert<'a> {
    pub(in crate::store) agent_id: &'a str,
    pub(in crate::store) first_seq: i64,
    pub(in crate::store) last_seq: i64,
    pub(in crate::store) first_at: i64,
    pub(in crate::store) last_at: i64,
    pub(in crate::store) prev_hash: String,
    pub(in crate::store) last_hash: String,
    pub(in crate::store) records: String,
}

/// Chains one agent's `records` on after position `seq`, whose hash is `hash`, and encodes them in
/// segments; sets each record's position. Returns the segments and the new head's hash.
pub(in crate::store) fn chain_audit_segments<'a>(
    agent_id: &'a str,
    records: &mut [AuditRecord],
    mut seq: i64,
    mut hash: String,
) -> Result<(Vec<AuditSegmentInsert<'a>>, String), StoreError> {
    let mut segments = Vec::new();
    for segment in audit_segments(records) {
        let prev_hash = hash.clone();
        let first_seq = seq + 1;
        let mut out = Vec::with_capacity(segment.records.len() * 448 + 2);
        out.push(b'[');
        for record in &mut records[segment.records] {
            seq += 1;
            if out.len() > 1 {
                out.push(b',');
            }
            record.chain_seq = Some(seq);
            let queued = crate::audit::chain::QueuedRecord::from(&*record);
            let digits = crate::audit::chain::append_stored_record(&mut out, &hash, &queued, seq);
            hash.clear();
            hash.push_str(crate::audit::chain::hex_text(&digits));
        }
        out.push(b']');
        let records = String::from_utf8(out)
            .map_err(|_| StoreError::Corrupt("an audit segment was not written as UTF-8".to_owned()))?;
        segments.push(AuditSegmentInsert {
            agent_id,
            first_seq,
            last_seq: seq,
            first_at: segment.first_at,
            last_at: segment.last_at,
            prev_hash,
            last_hash: hash.clone(),
            records,
        });
    }
    Ok((segments, hash))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_takes_rows_up_to_its_bytes_and_at_least_one() {
        let size = |row: &usize| *row;
        let third = AUDIT_STATEMENT_BYTES / 3;
        assert_eq!(statement_rows(&[third, third, third, third], size), (3, 3 * third));
        // Exactly a statement's bytes fit; one byte more does not.
        let half = AUDIT_STATEMENT_BYTES / 2;
        assert_eq!(statement_rows(&[half, half, 1], size), (2, AUDIT_STATEMENT_BYTES));
        assert_eq!(statement_rows(&[half, half + 1, 1], size), (1, half));
        // A row larger than a statement's bytes goes alone, and after a smaller row starts the next statement.
        let large = AUDIT_STATEMENT_BYTES + 1;
        assert_eq!(statement_rows(&[large, 1], size), (1, large));
        assert_eq!(statement_rows(&[1, large], size), (1, 1));
        assert_eq!(statement_rows(&[5, 7], size), (2, 12));
        assert_eq!(statement_rows::<usize>(&[], size), (0, 0));
    }

    #[test]
    fn a_statement_takes_at_most_its_rows() {
        let rows = vec![0_usize; AUDIT_ROWS_PER_INSERT + 5];
        assert_eq!(statement_rows(&rows, |row| *row), (AUDIT_ROWS_PER_INSERT, 0));
        assert_eq!(statement_rows(&rows[AUDIT_ROWS_PER_INSERT..], |row| *row), (5, 0));
    }
}
