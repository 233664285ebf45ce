use super::*;
use crate::domain::time::Timestamp;

fn record(agent: &str, n: usize) -> AuditRecord {
    let at = Timestamp::from_micros(1_700_000_000_000_000 + n as i64);
    let record = crate::audit::read_record(&format!("{agent}-{n}"), agent, at, &format!("test://{n}"));
    AuditRecord { method: Some("resources/read".into()), outcome: Some("ok".into()), ..record }
}

/// `batches` batches of `per_batch` records each, spread over `agents` agents, written to one stream;
/// returns the stream's head and its rows with their records as stored.
fn written(agents: usize, batches: usize, per_batch: usize) -> (StreamHead, Vec<VerifiedRow>) {
    let mut stream = AuditStream::new();
    let mut rows = Vec::new();
    let mut n = 0;
    for _ in 0..batches {
        let mut records: Vec<AuditRecord> = (0..per_batch)
            .map(|_| {
                n += 1;
                record(&format!("agent-{}", n % agents), n)
            })
            .collect();
        let mut queued: Vec<QueuedRecord> = records.iter().map(QueuedRecord::from).collect();
        let batch = stream.chain(&mut queued);
        // The records in the order they were chained (by bucket and agent, each agent's in the order they
        // came), each at the next position of its agent's chain.
        records.sort_by_key(|record| (bucket_of(&record.agent_id), record.agent_id.clone()));
        let mut seqs: HashMap<AuditText, i64> =
            stream.heads.iter().map(|(agent, head)| (agent.clone(), head.seq)).collect();
        for record in &mut records {
            let seq = seqs.entry(record.agent_id.clone()).or_default();
            *seq += 1;
            record.chain_seq = Some(*seq);
        }
        let mut rest = &records[..];
        for row in &batch.rows {
            let count = serde_json::from_str::<Vec<serde_json::Value>>(&row.records).expect("records").len();
            let (mine, others) = rest.split_at(count);
            rest = others;
            // As the store reads them back: each record with its hash and the one before it.
            let heads: Vec<RowHead> = serde_json::from_str(&row.heads).expect("heads");
            let mut prev: HashMap<String, String> = heads.into_iter().map(|head| (head.0, head.2)).collect();
            let mine: Vec<AuditRecord> = mine
                .iter()
                .cloned()
                .map(|mut record| {
                    let before = prev.get(record.agent_id.as_str()).cloned().unwrap_or_default();
                    let hash = crate::audit::chain::chain_hash(&before, &record, record.chain_seq.unwrap_or_default());
                    record.prev_hash = Some(before.as_str().into());
                    record.hash = Some(hash.as_str().into());
                    prev.insert(record.agent_id.to_string(), hash);
                    record
                })
                .collect();
            rows.push(VerifiedRow {
                seq: row.seq,
                last_at: row.last_at,
                prev_hash: row.prev_hash.clone(),
                hash: row.hash.clone(),
                heads: row.heads.clone(),
                records: Some(mine),
            });
        }
        stream.commit(batch);
    }
    let head = StreamHead {
        stream_id: stream.id().to_owned(),
        seq: stream.seq,
        hash: stream.hash.clone(),
        pruned_seq: 0,
        pruned_hash: String::new(),
    };
    (head, rows)
}

fn verify(head: &StreamHead, rows: &[VerifiedRow], agent: Option<&str>) -> Result<Vec<(String, u64)>, StreamError> {
    let mut verifier = StreamVerifier::new(head.clone(), agent);
    for row in rows {
        verifier.check(row)?;
    }
    verifier.finish()
}

/// Only `agent`'s rows keep their records, as the per-agent verification reads them.
fn only(rows: &[VerifiedRow], agent: &str) -> Vec<VerifiedRow> {
    rows.iter()
        .cloned()
        .map(|mut row| {
            if !row.heads.contains(&format!("[\"{agent}\",")) {
                row.records = None;
            }
            row
        })
        .collect()
}

#[test]
fn a_batch_of_many_agents_is_a_row_per_bucket_and_verifies() {
    let (head, rows) = written(500, 3, 2_000);
    // 500 agents fill every bucket; no bucket holds over 1,000 records of a batch.
    assert_eq!(rows.len(), 3 * BUCKETS as usize);
    let counts = verify(&head, &rows, None).expect("intact");
    assert_eq!(counts.len(), 500);
    assert!(counts.iter().all(|(_, n)| *n == 12), "{counts:?}");
}

#[test]
fn one_agent_verifies_without_the_records_of_others() {
    let (head, rows) = written(100, 4, 300);
    let mine = only(&rows, "agent-7");
    assert!(mine.iter().filter(|row| row.records.is_some()).count() <= 4);
    assert_eq!(verify(&head, &mine, Some("agent-7")), Ok(vec![("agent-7".to_owned(), 12)]));
}

#[test]
fn a_large_batch_of_one_agent_is_cut_into_rows() {
    let (head, rows) = written(1, 1, 2_500);
    assert_eq!(rows.len(), 3);
    assert_eq!(verify(&head, &rows, None), Ok(vec![("agent-0".to_owned(), 2_500)]));
}

#[test]
fn tampering_is_detected() {
    let (head, rows) = written(10, 3, 50);
    let agent = "agent-3";
    let at = rows
        .iter()
        .position(|row| row.records.as_ref().is_some_and(|r| r.iter().any(|r| r.agent_id == agent)))
        .expect("a row of the agent");
    an_edit_and_a_deletion_are_detected(&head, &rows, agent, at);
    // A whole row deleted.
    let mut gap = rows.clone();
    gap.remove(1);
    assert_eq!(verify(&head, &gap, None), Err(StreamError::RowGap { expected_before: 2, found: 3 }));
    // The newest rows deleted.
    let mut truncated = rows.clone();
    truncated.pop();
    let error = verify(&head, &only(&truncated, agent), Some(agent)).expect_err("truncated");
    assert!(matches!(error, StreamError::Truncated { .. }), "{error}");
    // The newest records of an agent cut from its last row, its heads rewritten to match: the row's hash
    // no longer does.
    let mut cut = rows.clone();
    let last = cut.iter().rposition(|row| row.heads.contains("[\"agent-3\",")).expect("a row");
    let heads: Vec<RowHead> = serde_json::from_str(&cut[last].heads).expect("heads");
    let head_of = heads.iter().find(|head| head.0 == agent).expect("a head").clone();
    if let Some(records) = cut[last].records.as_mut() {
        let index = records.iter().rposition(|r| r.agent_id == agent).expect("a record");
        let dropped = records.remove(index);
        let rewritten: Vec<RowHead> = heads
            .iter()
            .map(|head| {
                let mut head = head.clone();
                if head.0 == agent {
                    head.3 = dropped.chain_seq.unwrap_or_default() - 1;
                    head.4 = dropped.prev_hash.clone().unwrap_or_default().to_string();
                }
                head
            })
            .collect();
        cut[last].heads = serde_json::to_string(&rewritten).expect("heads");
    }
    assert_ne!(head_of.3, 0);
    assert_eq!(verify(&head, &cut, Some(agent)), Err(StreamError::RowAltered { seq: cut[last].seq }));
}

/// Records as rows hold them now, without their hashes: an edit shows where the agent's chain ends in its
/// row, a deletion as a gap, and the intact rows verify.
#[test]
fn tampering_is_detected_without_the_records_hashes() {
    let (head, mut rows) = written(10, 3, 50);
    for record in rows.iter_mut().flat_map(|row| row.records.iter_mut().flatten()) {
        (record.hash, record.prev_hash) = (None, None);
    }
    assert_eq!(verify(&head, &rows, None).expect("intact").len(), 10);
    let agent = "agent-3";
    let at = rows
        .iter()
        .position(|row| row.records.as_ref().is_some_and(|r| r.iter().filter(|r| r.agent_id == agent).count() > 1))
        .expect("a row with two records of the agent");
    // Without the hashes an edit shows where the agent's chain ends in the row.
    an_edit_and_a_deletion_are_detected(&head, &rows, agent, at);
    // A hash put on a record that had none must be its own.
    let mut forged = rows.clone();
    if let Some(record) = forged[at].records.as_mut().and_then(|r| r.iter_mut().find(|r| r.agent_id == agent)) {
        record.hash = Some("0".repeat(64).as_str().into());
    }
    let error = verify(&head, &forged, None).expect_err("a forged hash");
    assert!(error.to_string().contains("does not match its hash"), "{error}");
}

/// Rows with their records' hashes (written before) and rows without, in one stream, and a row whose records
/// hold their hashes only in part, verify alike.
#[test]
fn rows_with_and_without_the_records_hashes_verify_together() {
    let (head, mut rows) = written(10, 4, 50);
    for (n, row) in rows.iter_mut().enumerate() {
        for (m, record) in row.records.iter_mut().flatten().enumerate() {
            if n % 2 == 0 || m % 3 == 0 {
                (record.hash, record.prev_hash) = (None, None);
            }
        }
    }
    let counts = verify(&head, &rows, None).expect("intact");
    assert_eq!(counts.iter().map(|(_, n)| n).sum::<u64>(), 200);
    assert_eq!(verify(&head, &only(&rows, "agent-3"), Some("agent-3")), Ok(vec![("agent-3".to_owned(), 20)]));
}

/// `agent`'s first record in row `at` edited, then deleted instead: the edit is reported as an alteration of
/// the agent's records (checking every agent's, and the agent's alone), the deletion as a missing record.
fn an_edit_and_a_deletion_are_detected(head: &StreamHead, rows: &[VerifiedRow], agent: &str, at: usize) {
    let mut edited = rows.to_vec();
    if let Some(record) = edited[at].records.as_mut().and_then(|r| r.iter_mut().find(|r| r.agent_id == agent)) {
        record.target = "test://forged".into();
    }
    for only_agent in [None, Some(agent)] {
        let error = verify(head, &edited, only_agent).expect_err("edited");
        assert_eq!(error.agent(), Some(agent));
        assert!(error.to_string().contains("altered"), "{error}");
        assert!(matches!(error, StreamError::Agent { seq, .. } if seq == rows[at].seq), "{error:?}");
    }
    let mut deleted = rows.to_vec();
    if let Some(records) = deleted[at].records.as_mut() {
        let index = records.iter().position(|r| r.agent_id == agent).expect("a record");
        records.remove(index);
    }
    let error = verify(head, &only(&deleted, agent), Some(agent)).expect_err("deleted");
    assert!(error.to_string().contains("missing"), "{error}");
}

#[test]
fn a_pruned_stream_verifies_from_its_anchor() {
    let (mut head, mut rows) = written(10, 4, 40);
    let pruned: Vec<VerifiedRow> = rows.drain(..5).collect();
    head.pruned_seq = pruned[4].seq;
    head.pruned_hash = pruned[4].hash.clone();
    let counts = verify(&head, &rows, None).expect("intact after pruning");
    assert_eq!(counts.len(), 10);
}

#[test]
fn buckets_are_stable() {
    assert_eq!(bucket_of("bot"), bucket_of("bot"));
    assert!((0..BUCKETS as i32).contains(&bucket_of("research-bot")));
    assert_eq!(heads_pattern("a_b"), "%[\"a\\_b\",%");
}

/// The rows a batch makes, worked out the plain way, record by record: sorted stably by bucket and agent,
/// cut at each bucket and after [`ROW_RECORDS`] records, each record at the next position of its agent's
/// chain, each row's heads the position and hash where each of its agents' run starts and ends. `chains`
/// holds each agent's position and hash before the batch (and after it, on return); `row` the stream's
/// newest row's position and hash. Returns each row's heads, records and hash as stored.
fn reference_rows(
    stream_id: &str,
    chains: &mut HashMap<String, (i64, String)>,
    row: &mut (i64, String),
    records: &[AuditRecord],
) -> Vec<(String, String, String)> {
    let mut sorted: Vec<&AuditRecord> = records.iter().collect();
    sorted.sort_by_key(|record| (bucket_of(&record.agent_id), record.agent_id.to_string()));
    let mut rows = Vec::new();
    let mut start = 0;
    while start < sorted.len() {
        let bucket = bucket_of(&sorted[start].agent_id);
        let mut end = start;
        while end < sorted.len() && end - start < ROW_RECORDS && bucket_of(&sorted[end].agent_id) == bucket {
            end += 1;
        }
        let mut heads: Vec<RowHead> = Vec::new();
        let mut texts: Vec<String> = Vec::new();
        for record in &sorted[start..end] {
            let agent = record.agent_id.to_string();
            let (seq, hash) = chains.entry(agent.clone()).or_insert_with(|| (0, stream_id.to_owned()));
            if heads.last().is_none_or(|head| head.0 != agent) {
                heads.push(RowHead(agent.clone(), *seq, hash.clone(), 0, String::new()));
            }
            *seq += 1;
            let mut out = Vec::new();
            let digits = append_chained_record(&mut out, hash, &QueuedRecord::from(*record), *seq);
            *hash = hex_text(&digits).to_owned();
            texts.push(String::from_utf8(out).expect("UTF-8"));
            if let Some(last) = heads.last_mut() {
                (last.3, last.4) = (*seq, hash.clone());
            }
        }
        let heads = serde_json::to_string(&heads).expect("heads");
        row.0 += 1;
        row.1 = row_hash(&row.1, row.0, &heads);
        rows.push((heads, format!("[{}]", texts.join(",")), row.1.clone()));
        start = end;
    }
    rows
}

/// Each row holds exactly what the plain reference above makes, byte for byte, over two batches (the
/// second continues chains the first began): agents interleaved, two of them sharing a bucket, the first of
/// which has a run longer than a row that goes on into the next, where the second follows it; an agent
/// whose id is too long to be held inline.
#[test]
fn a_batch_is_stored_as_its_records_in_order_byte_for_byte() {
    let long = "an-agent-whose-id-is-longer-than-twenty-four-bytes";
    let first = bucket_of("agent-big");
    // Sorted after the big agent, in its bucket: it follows the big agent's run in the row that run goes on in.
    let same = (0..).map(|n| format!("agent-x{n}")).find(|agent| bucket_of(agent) == first).expect("an agent");
    let other = (0..).map(|n| format!("agent-{n}")).find(|agent| bucket_of(agent) != first).expect("an agent");
    let batch = |from: usize, count: usize| -> Vec<AuditRecord> {
        (from..from + count)
            .map(|n| {
                let agent = match n % 97 {
                    5 => same.as_str(),
                    11 | 40 => other.as_str(),
                    63 => long,
                    _ => "agent-big",
                };
                record(agent, n)
            })
            .collect()
    };
    let mut stream = AuditStream::new();
    let mut chains = HashMap::new();
    let mut row = (0, String::new());
    for records in [batch(0, 1_300), batch(1_300, 400)] {
        let expected = reference_rows(stream.id(), &mut chains, &mut row, &records);
        let mut queued: Vec<QueuedRecord> = records.iter().map(QueuedRecord::from).collect();
        let chained = stream.chain(&mut queued);
        let stored: Vec<(String, String, String)> =
            chained.rows.iter().map(|row| (row.heads.clone(), row.records.clone(), row.hash.clone())).collect();
        assert_eq!(stored, expected);
        stream.commit(chained);
    }
    // The big agent's run in the first batch filled a row and went on into the next.
    assert!(chains["agent-big"].0 > ROW_RECORDS as i64);
    assert_eq!((stream.seq, stream.hash.as_str()), (row.0, row.1.as_str()));
}
