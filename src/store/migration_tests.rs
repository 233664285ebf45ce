//! The audit log written in agents' segments (PostgreSQL's 0008, SQLite's 0006, as the writer of that
//! release stored MCP records) migrated to the writer streams: the records list and verify as before, new
//! ones go to a stream, and one agent's records verify on their own. With `--ignored`, the same over a
//! million records, timed (`cargo test --lib -- --ignored --nocapture million`).

use std::time::Instant;

use super::Store;
use super::sql::audit_segment::chain_audit_segments;
use super::tests::{ScratchDatabase, ScratchFile, TestResult, pg_store, sqlite_store, verify_chains};
use crate::audit::chain::GENESIS;
use crate::audit::stream::AuditStream;
use crate::domain::model::{AuditFilter, AuditRecord};
use crate::domain::time::Timestamp;
use crate::events::LocalBus;

/// The statements that store `per_agent` MCP records of each of `agents` agents as the 0008 writer did:
/// a chain per agent, segments of at most 1,000 records, the chain's head; in statements of about
/// 10,000 records.
fn segment_statements(agents: usize, per_agent: usize) -> Vec<String> {
    let base = Timestamp::now().as_micros() - 3_600_000_000;
    let mut statements = Vec::new();
    let mut sql = String::new();
    for agent in 0..agents {
        let agent = format!("agent-{agent:04}");
        let mut records: Vec<AuditRecord> = (0..per_agent)
            .map(|n| AuditRecord {
                id: uuid::Uuid::now_v7().to_string().into(),
                agent_id: agent.as_str().into(),
                occurred_at: Timestamp::from_micros(base + n as i64 * 1_000),
                kind: "mcp".into(),
                actor: "key:k".into(),
                action: "resources/read".into(),
                target: format!("test://{n}").into(),
                method: Some("resources/read".into()),
                outcome: Some("ok".into()),
                ..AuditRecord::default()
            })
            .collect();
        let Ok((segments, head)) = chain_audit_segments(&agent, &mut records, 0, GENESIS.to_owned()) else {
            unreachable!("records are encoded as UTF-8")
        };
        for segment in segments {
            sql.push_str(&format!(
                "insert into audit_segment (agent_id, first_seq, last_seq, first_at, last_at, prev_hash, last_hash, \
                 records, created_at, updated_at) values ('{agent}', {}, {}, {}, {}, '{}', '{}', '{}', {base}, {base});",
                segment.first_seq,
                segment.last_seq,
                segment.first_at,
                segment.last_at,
                segment.prev_hash,
                segment.last_hash,
                segment.records.replace('\'', "''"),
            ));
            if sql.len() > 4_000_000 {
                statements.push(std::mem::take(&mut sql));
            }
        }
        sql.push_str(&format!(
            "insert into audit_chain (agent_id, seq, head) values ('{agent}', {per_agent}, '{head}');"
        ));
    }
    statements.push(sql);
    statements
}

/// After the migration: every record lists and verifies, one agent alone too, and new records of an agent
/// go to a stream and verify with its old ones.
async fn segments_are_migrated(store: &dyn Store, agents: usize, per_agent: usize) -> TestResult {
    let started = Instant::now();
    let counts = verify_chains(store).await?;
    let verified_in = started.elapsed();
    assert_eq!(counts.len(), agents);
    assert!(counts.iter().all(|(_, records)| *records == per_agent as i64), "{counts:?}");
    let started = Instant::now();
    let report = crate::audit::verify::verify(store, Some("agent-0001")).await?;
    let one_in = started.elapsed();
    assert_eq!(report.agents.get("agent-0001").cloned(), Some(Ok(per_agent as u64)));

    let more: Vec<AuditRecord> = (0..3)
        .map(|n| AuditRecord {
            id: uuid::Uuid::now_v7().to_string().into(),
            agent_id: "agent-0001".into(),
            occurred_at: Timestamp::now(),
            kind: "mcp".into(),
            actor: "key:k".into(),
            action: "prompts/get".into(),
            target: format!("prompt-{n}").into(),
            method: Some("prompts/get".into()),
            ..AuditRecord::default()
        })
        .collect();
    store.append_audit(&mut AuditStream::new(), &mut crate::store::tests::queued(&more)).await?;
    let report = crate::audit::verify::verify(store, Some("agent-0001")).await?;
    assert_eq!(report.agents.get("agent-0001").cloned(), Some(Ok(per_agent as u64 + 3)));
    let agent = crate::domain::AgentId::parse("agent-0001")?;
    let filter = AuditFilter { agent: Some(agent), ..AuditFilter::default() };
    let listed = store.list_audit(&filter, None, 5).await?;
    let methods: Vec<Option<&str>> = listed.iter().map(|record| record.method.as_deref()).collect();
    assert_eq!(
        methods,
        [Some("prompts/get"), Some("prompts/get"), Some("prompts/get"), Some("resources/read"), Some("resources/read")]
    );
    eprintln!("{} records verified in {verified_in:?}; one agent's in {one_in:?}", agents * per_agent);
    Ok(())
}

async fn sqlite_segments(agents: usize, per_agent: usize) -> TestResult {
    let file = ScratchFile::new();
    let pool = sqlx::SqlitePool::connect(&file.url()).await?;
    sqlx::migrate!("./migrations/sqlite").run_to(6, &pool).await?;
    for statement in segment_statements(agents, per_agent) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement)).execute(&pool).await?;
    }
    pool.close().await;
    let started = Instant::now();
    let store = sqlite_store(&file.url(), LocalBus::new()).await?;
    eprintln!("SQLite: migrated {} records in {:?}", agents * per_agent, started.elapsed());
    segments_are_migrated(&store, agents, per_agent).await
}

async fn postgres_segments(agents: usize, per_agent: usize) -> TestResult {
    let Some(db) = ScratchDatabase::create().await else { return Ok(()) };
    let pool = sqlx::PgPool::connect(&db.url).await?;
    sqlx::migrate!("./migrations/postgres").run_to(8, &pool).await?;
    for statement in segment_statements(agents, per_agent) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement)).execute(&pool).await?;
    }
    pool.close().await;
    let started = Instant::now();
    let store = pg_store(&db.url).await?;
    eprintln!("PostgreSQL: migrated {} records in {:?}", agents * per_agent, started.elapsed());
    segments_are_migrated(&store, agents, per_agent).await
}

#[tokio::test]
async fn sqlite_segments_are_migrated_to_streams() -> TestResult {
    sqlite_segments(12, 1_500).await
}

#[tokio::test]
async fn postgres_segments_are_migrated_to_streams() -> TestResult {
    postgres_segments(12, 1_500).await
}

#[tokio::test]
#[ignore = "a measurement over a million records: minutes"]
async fn sqlite_a_million_segment_records_are_migrated() -> TestResult {
    sqlite_segments(1_000, 1_000).await
}

#[tokio::test]
#[ignore = "a measurement over a million records: minutes"]
async fn postgres_a_million_segment_records_are_migrated() -> TestResult {
    postgres_segments(1_000, 1_000).await
}
