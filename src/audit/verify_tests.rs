use super::*;
use crate::audit::chain::QueuedRecord;
use crate::audit::stream::AuditStream;
use crate::config::DatabaseConfig;
use crate::domain::time::Timestamp;
use crate::events::LocalBus;
use crate::store::AuditStore;
use crate::store::sqlite::SqliteStore;

/// An in-memory SQLite store, migrated.
async fn store() -> SqliteStore {
    let store =
        SqliteStore::connect("sqlite::memory:", &DatabaseConfig::default(), LocalBus::new()).await.expect("sqlite");
    store.migrate().await.expect("migrations");
    store
}

/// `count` records of `agent`'s reads, queued as the writer queues them.
fn records(agent: &str, count: usize) -> Vec<QueuedRecord> {
    let read = |n| {
        let id = uuid::Uuid::now_v7().to_string();
        QueuedRecord::from(&crate::audit::read_record(&id, agent, Timestamp::now(), &format!("test://{n}")))
    };
    (0..count).map(read).collect()
}

/// A live writer stores rows after verification has read its stream's head: they lie past that head, and
/// the head, read again, has reached them, so the stream verifies up to where its head stood.
#[tokio::test]
async fn rows_a_live_writer_stores_meanwhile_verify_up_to_the_head_read() {
    let store = store().await;
    let mut stream = AuditStream::new();
    store.append_audit(&mut stream, &mut records("bot", 3)).await.expect("first batch");
    let heads = store.audit_streams().await.expect("heads");
    let [head] = heads.as_slice() else { panic!("one stream: {heads:?}") };
    store.append_audit(&mut stream, &mut records("bot", 4)).await.expect("second batch");
    let moved = store.audit_streams().await.expect("heads")[0].seq;
    assert!(moved > head.seq, "the second batch moved the head: {moved} after {}", head.seq);

    let checked = verify_stream(&store, head, None).await.expect("read").expect("verifies");
    assert_eq!(checked, vec![("bot".to_owned(), 3)], "the records up to the head read");
    let bot = AgentId::parse("bot").expect("agent id");
    let checked = verify_stream(&store, head, Some(&bot)).await.expect("read").expect("verifies");
    assert_eq!(checked, vec![("bot".to_owned(), 3)], "one agent's records up to the head read");
    let report = verify(&store, None).await.expect("verify");
    assert_eq!(report.agents.get("bot"), Some(&Ok(7)), "a verification begun now checks them all: {report:?}");
}
