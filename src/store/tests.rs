//! One story run against both backends, plus what only PostgreSQL has to prove: sequence order under
//! concurrent writers, safe concurrent migrations, and a listener that survives losing its connection.
//!
//! The PostgreSQL tests need `HIVEGATE_TEST_POSTGRES_URL` to name a server (they fail without one) (e.g.
//! `postgres://postgres@127.0.0.1:5432/postgres`); each creates its own database and drops it afterwards.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::TryRecvError;

use super::postgres::PgStore;
use super::prelude::*;
use super::sqlite::SqliteStore;
use super::{Store, StoreError};
use crate::audit::stream::AuditStream;
use crate::config::DatabaseConfig;
use crate::domain::model::AuditRecord;
use crate::domain::model::{
    Actor, AgentPatch, Content, KeyPatch, NewAgent, NewKey, NewPrompt, NewResource, NewResourceTemplate, PromptMessage,
    RateLimit, RateLimitPatch, Role,
};
use crate::domain::{AgentId, KeyDigest, KeyHasher, PromptName, ResourceUri, Scope};
use crate::events::postgres::{LISTENER_APPLICATION_NAME, PgBus};
use crate::events::{BusMessage, LocalBus};
use crate::guard::limiter::{Limit, Outcome};
use crate::registry::collection::{Collection, Prompts, Resources, Templates};

pub(super) type TestResult = Result<(), Box<dyn std::error::Error>>;

/// `records` as the audit writer queues them.
pub(super) fn queued(records: &[AuditRecord]) -> Vec<crate::audit::chain::QueuedRecord> {
    records.iter().map(crate::audit::chain::QueuedRecord::from).collect()
}

/// A test per backend (`$sqlite`, `$postgres`), each running `$story` against a fresh store.
macro_rules! on_both_backends {
    ($sqlite:ident, $postgres:ident, $story:ident) => {
        #[tokio::test]
        async fn $sqlite() -> TestResult {
            let file = ScratchFile::new();
            let store = sqlite_store(&file.url(), LocalBus::new()).await?;
            $story(&store).await
        }

        #[tokio::test]
        async fn $postgres() -> TestResult {
            let Some(db) = ScratchDatabase::create().await else { return Ok(()) };
            let store = pg_store(&db.url).await?;
            $story(&store).await
        }
    };
}

fn agent_id(id: &str) -> AgentId {
    AgentId::parse(id).expect("test agent id")
}

fn uri(value: &str) -> ResourceUri {
    ResourceUri::parse(value).expect("test URI")
}

fn actor() -> Actor {
    Actor { name: "operator".to_owned(), request_id: Some("req-1".to_owned()) }
}

fn new_agent(id: &str) -> NewAgent {
    NewAgent {
        id: agent_id(id),
        name: format!("Agent {id}"),
        description: None,
        rate_limit: None,
        cache_ttl_ms: None,
        audit_retention_days: None,
    }
}

/// The digest a key is stored and found by, from a short tag.
fn digest(tag: &str) -> KeyDigest {
    KeyHasher::new(None).digest(tag)
}

fn new_key(agent: &str, tag: &str) -> NewKey {
    NewKey {
        id: uuid::Uuid::now_v7().to_string(),
        agent_id: agent_id(agent),
        name: Some("ci".to_owned()),
        prefix: "bak_abcdefgh".to_owned(),
        digest: digest(tag).to_hex(),
        scopes: vec![Scope::Mcp, Scope::Registry],
        expires_at: None,
        rate_limit: None,
    }
}

fn text_resource(value: &str, name: &str, text: &str) -> NewResource {
    NewResource {
        uri: uri(value),
        name: name.to_owned(),
        title: None,
        description: None,
        mime_type: Some("text/plain".to_owned()),
        annotations: None,
        meta: None,
        content: Content::Text(text.to_owned()),
    }
}

fn template(uri_template: &str, name: &str) -> NewResourceTemplate {
    NewResourceTemplate {
        uri_template: uri_template.to_owned(),
        name: name.to_owned(),
        title: None,
        description: None,
        mime_type: None,
        annotations: Some(json!({"audience": ["user"]})),
        text: Some("Hello {{ name }}".to_owned()),
    }
}

fn prompt(name: &str, text: &str) -> NewPrompt {
    NewPrompt {
        name: PromptName::parse(name).expect("test prompt name"),
        title: None,
        description: Some("d".to_owned()),
        arguments: Vec::new(),
        messages: vec![PromptMessage { role: Role::User, content: json!({"type": "text", "text": text}) }],
    }
}

/// The next message on the bus; PostgreSQL delivers through the listener, so allow it a moment.
async fn next_message(bus: &mut Receiver<BusMessage>) -> BusMessage {
    tokio::time::timeout(Duration::from_secs(10), bus.recv())
        .await
        .expect("a bus message within 10 s")
        .expect("the bus is open and not lagging")
}

fn change(agent: &str, seq: i64) -> BusMessage {
    BusMessage::Change { agent: agent_id(agent), seq }
}

/// Everything the admin API and the MCP endpoint ask of a store, on one agent's life.
async fn story(store: &dyn Store, bus: &mut Receiver<BusMessage>) -> TestResult {
    let actor = actor();
    let story = agent_id("story");

    // Settings: the first value stays.
    assert_eq!(store.init_setting("k", "v1").await?, "v1");
    assert_eq!(store.init_setting("k", "v2").await?, "v1");
    store.put_setting("k", "v3").await?;
    assert_eq!(store.get_setting("k").await?.as_deref(), Some("v3"));
    assert_eq!(store.get_setting("missing").await?, None);

    // Agents.
    let created = store.create_agent(&new_agent("story"), &actor).await?;
    assert_ne!(created.epoch, 0);
    assert_eq!(next_message(bus).await, BusMessage::AgentChanged { agent: agent_id("story") });
    assert!(matches!(store.create_agent(&new_agent("story"), &actor).await, Err(StoreError::Conflict)));
    store.create_agent(&new_agent("other"), &actor).await?;
    assert_eq!(next_message(bus).await, BusMessage::AgentChanged { agent: agent_id("other") });
    let first = store.list_agents(None, 1).await?;
    assert_eq!(first.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), ["other"]);
    let rest = store.list_agents(Some("other"), 10).await?;
    assert_eq!(rest.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), ["story"]);
    let patch = AgentPatch {
        description: Some(Some("helps".to_owned())),
        rate_limit: Some(Some(RateLimitPatch { requests_per_second: Some(5), burst: Some(10), shared: None })),
        ..AgentPatch::default()
    };
    let updated = store.update_agent(&story, &patch, &actor).await?;
    assert_eq!(updated.description.as_deref(), Some("helps"));
    assert_eq!(updated.name, "Agent story");
    assert_eq!(next_message(bus).await, BusMessage::AgentChanged { agent: agent_id("story") });
    let cleared = AgentPatch { rate_limit: Some(None), cache_ttl_ms: Some(Some(60_000)), ..AgentPatch::default() };
    store.update_agent(&story, &cleared, &actor).await?;
    assert_eq!(next_message(bus).await, BusMessage::AgentChanged { agent: agent_id("story") });
    let fetched = store.get_agent(&story).await?.ok_or("agent")?;
    assert_eq!((fetched.rate_limit, fetched.cache_ttl_ms, fetched.epoch), (None, Some(60_000), created.epoch));
    assert_eq!(fetched.description.as_deref(), Some("helps"));
    assert!(matches!(store.update_agent(&agent_id("nobody"), &patch, &actor).await, Err(StoreError::NotFound)));

    // Keys.
    let k1 = store.create_key(&new_key("story", "d1"), &actor).await?;
    let k2 = store.create_key(&new_key("story", "d2"), &actor).await?;
    assert!(matches!(store.create_key(&new_key("nobody", "d3"), &actor).await, Err(StoreError::NotFound)));
    assert!(matches!(store.create_key(&new_key("story", "d1"), &actor).await, Err(StoreError::Conflict)));
    let found = store.find_key(&digest("d1")).await?.ok_or("key d1")?;
    assert_eq!((found.id.as_str(), found.agent_id.as_str()), (k1.id.as_str(), "story"));
    assert_eq!(found.scopes, [Scope::Mcp, Scope::Registry]);
    assert!(store.find_key(&digest("unknown")).await?.is_none());
    let page = store.list_keys(&story, None, 1).await?;
    assert_eq!(page.iter().map(|k| k.id.as_str()).collect::<Vec<_>>(), [k1.id.as_str()]);
    let page = store.list_keys(&story, Some(&k1.id), 10).await?;
    assert_eq!(page.iter().map(|k| k.id.as_str()).collect::<Vec<_>>(), [k2.id.as_str()]);
    assert!(matches!(store.revoke_key(&agent_id("other"), &k1.id, &actor).await, Err(StoreError::NotFound)));
    assert!(matches!(store.revoke_key(&story, "unknown", &actor).await, Err(StoreError::NotFound)));
    store.revoke_key(&story, &k1.id, &actor).await?;
    let revoked = BusMessage::KeyRevoked { agent: agent_id("story"), key: k1.id.clone() };
    assert_eq!(next_message(bus).await, revoked);
    let first_revocation = store.find_key(&digest("d1")).await?.ok_or("key d1")?.revoked_at.ok_or("revoked")?;
    store.revoke_key(&story, &k1.id, &actor).await?;
    assert_eq!(next_message(bus).await, revoked);
    assert_eq!(store.find_key(&digest("d1")).await?.ok_or("key d1")?.revoked_at, Some(first_revocation));
    store.touch_keys(&[k2.id.clone(), k1.id.clone()]).await?;
    assert!(store.find_key(&digest("d2")).await?.ok_or("key d2")?.last_used_at.is_some());
    assert!(store.find_key(&digest("d1")).await?.ok_or("key d1")?.last_used_at.is_some());

    // Resources: create, replace content, replace metadata.
    let put = Resources::store(store).put(&story, &text_resource("x://b", "b", "one"), &actor).await?;
    assert!(put.created);
    assert_eq!((put.item.version, put.item.size), (1, 3));
    assert_eq!(next_message(bus).await, change("story", 1));
    // Same size, same metadata: only the content changed.
    let replaced = Resources::store(store).put(&story, &text_resource("x://b", "b", "two"), &actor).await?;
    assert!(!replaced.created);
    assert_eq!((replaced.item.version, replaced.item.size), (2, 3));
    assert_eq!(replaced.item.created_at, put.item.created_at);
    assert_eq!(next_message(bus).await, change("story", 2));
    Resources::store(store).put(&story, &text_resource("x://b", "renamed", "two"), &actor).await?;
    assert_eq!(next_message(bus).await, change("story", 3));
    let events = store.events_after(&story, 0, 100).await?;
    let summary: Vec<_> = events
        .iter()
        .map(|e| (e.seq, e.updated_uris.clone(), e.resources_list_changed, e.prompts_list_changed))
        .collect();
    assert_eq!(
        summary,
        [
            (1, vec![], true, false),
            (2, vec!["x://b".to_owned()], false, false),
            (3, vec!["x://b".to_owned()], true, false)
        ]
    );

    // Bytewise order: `B` < `_` < `a` < `b` < `b/` < `b0` (a locale collation would say otherwise).
    let blob = NewResource { content: Content::Blob(vec![0, 1, 2, 255]), ..text_resource("x://a", "a", "") };
    Resources::store(store).put(&story, &blob, &actor).await?;
    for value in ["x://B", "x://_", "x://b/c", "x://b/c/d", "x://b0"] {
        Resources::store(store).put(&story, &text_resource(value, value, value), &actor).await?;
    }
    for seq in 4..=9 {
        assert_eq!(next_message(bus).await, change("story", seq));
    }
    let order = ["x://B", "x://_", "x://a", "x://b", "x://b/c", "x://b/c/d", "x://b0"];
    let listed = Resources::store(store).list(&story, None, 100).await?;
    assert_eq!(listed.iter().map(|r| r.uri.as_str()).collect::<Vec<_>>(), order);
    let page = Resources::store(store).list(&story, Some("x://a"), 2).await?;
    assert_eq!(page.iter().map(|r| r.uri.as_str()).collect::<Vec<_>>(), ["x://b", "x://b/c"]);
    let (resource, content) = store.get_resource(&story, "x://a").await?.ok_or("x://a")?;
    assert_eq!((resource.size, content), (4, Content::Blob(vec![0, 1, 2, 255])));
    assert!(store.get_resource(&story, "x://none").await?.is_none());
    assert!(store.get_resource(&agent_id("other"), "x://a").await?.is_none());
    let directory = store.directory_children(&story, "x://b/", 10).await?;
    assert_eq!(directory.iter().map(|r| r.uri.as_str()).collect::<Vec<_>>(), ["x://b/c"]);
    let directory = store.directory_children(&story, "x://b/c/", 10).await?;
    assert_eq!(directory.iter().map(|r| r.uri.as_str()).collect::<Vec<_>>(), ["x://b/c/d"]);
    assert!(store.directory_children(&story, "x://b/c/d/", 10).await?.is_empty());

    // Delete: list change plus an update for the URI; absent → NotFound and no sequence number used.
    Resources::store(store).delete(&story, &uri("x://a"), &actor).await?;
    assert_eq!(next_message(bus).await, change("story", 10));
    assert!(matches!(Resources::store(store).delete(&story, &uri("x://a"), &actor).await, Err(StoreError::NotFound)));
    assert!(matches!(
        Resources::store(store).delete(&agent_id("nobody"), &uri("x://a"), &actor).await,
        Err(StoreError::NotFound)
    ));

    // A batch is all or nothing.
    let failing =
        store.batch_resources(&story, &[text_resource("x://n1", "n1", "new")], &[uri("x://absent")], &actor).await;
    assert!(matches!(&failing, Err(StoreError::Absent(detail)) if detail.contains("x://absent")), "{failing:?}");
    assert!(store.get_resource(&story, "x://n1").await?.is_none());
    let outcome = store
        .batch_resources(
            &story,
            &[text_resource("x://n1", "n1", "new"), text_resource("x://b", "renamed", "four")],
            &[uri("x://_")],
            &actor,
        )
        .await?;
    assert_eq!(outcome.upserted.iter().map(|u| u.created).collect::<Vec<_>>(), [true, false]);
    assert_eq!(outcome.deleted, [uri("x://_")]);
    assert_eq!(next_message(bus).await, change("story", 11));
    // The same URI twice in one batch (callers refuse this, but the store copes): still a creation.
    let twice = [text_resource("x://n2", "n2", "a"), text_resource("x://n2", "n2", "bb")];
    store.batch_resources(&story, &twice, &[], &actor).await?;
    assert_eq!(next_message(bus).await, change("story", 12));
    assert!(store.batch_resources(&story, &[], &[], &actor).await?.upserted.is_empty());
    assert!(matches!(store.batch_resources(&agent_id("nobody"), &[], &[], &actor).await, Err(StoreError::NotFound)));
    let events = store.events_after(&story, 9, 100).await?;
    let summary: Vec<_> = events.iter().map(|e| (e.seq, e.updated_uris.clone(), e.resources_list_changed)).collect();
    assert_eq!(
        summary,
        [
            (10, vec!["x://a".to_owned()], true),
            (11, vec!["x://b".to_owned(), "x://_".to_owned()], true),
            (12, vec![], true),
        ]
    );

    // Templates: every change is a list change.
    assert!(Templates::store(store).put(&story, &template("x://t/{name}", "t"), &actor).await?.created);
    assert!(Templates::store(store).put(&story, &template("x://A/{name}", "a"), &actor).await?.created);
    let replaced = Templates::store(store).put(&story, &template("x://t/{name}", "t2"), &actor).await?;
    assert!(!replaced.created);
    let templates = Templates::store(store).list(&story, None, 10).await?;
    assert_eq!(templates.iter().map(|t| t.uri_template.as_str()).collect::<Vec<_>>(), ["x://A/{name}", "x://t/{name}"]);
    assert_eq!(templates[1].name, "t2");
    assert_eq!(templates[1].annotations, Some(json!({"audience": ["user"]})));
    assert_eq!(Templates::store(store).list(&story, Some("x://A/{name}"), 10).await?.len(), 1);
    Templates::store(store).delete(&story, &"x://A/{name}".to_owned(), &actor).await?;
    assert!(matches!(
        Templates::store(store).delete(&story, &"x://A/{name}".to_owned(), &actor).await,
        Err(StoreError::NotFound)
    ));

    // Prompts: every change is a prompt list change.
    assert!(Prompts::store(store).put(&story, &prompt("summarise", "Summarise {{ topic }}"), &actor).await?.created);
    assert!(!Prompts::store(store).put(&story, &prompt("summarise", "Sum up {{ topic }}"), &actor).await?.created);
    Prompts::store(store).put(&story, &prompt("Ask", "Ask"), &actor).await?;
    let prompts = Prompts::store(store).list(&story, None, 10).await?;
    assert_eq!(prompts.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["Ask", "summarise"]);
    assert_eq!(Prompts::store(store).list(&story, Some("Ask"), 10).await?.len(), 1);
    let name = PromptName::parse("summarise")?;
    let fetched = Prompts::store(store).get(&story, &name).await?.ok_or("prompt")?;
    assert_eq!(fetched.messages[0].content["text"], "Sum up {{ topic }}");
    Prompts::store(store).delete(&story, &name, &actor).await?;
    assert!(Prompts::store(store).get(&story, &name).await?.is_none());
    assert!(matches!(Prompts::store(store).delete(&story, &name, &actor).await, Err(StoreError::NotFound)));
    for seq in 13..=20 {
        assert_eq!(next_message(bus).await, change("story", seq));
    }
    let events = store.events_after(&story, 12, 100).await?;
    let kinds: Vec<_> = events.iter().map(|e| (e.seq, e.resources_list_changed, e.prompts_list_changed)).collect();
    assert_eq!(
        kinds,
        [
            (13, true, false),
            (14, true, false),
            (15, true, false),
            (16, true, false),
            (17, false, true),
            (18, false, true),
            (19, false, true),
            (20, false, true),
        ]
    );
    let all = store.events_after(&story, 0, 1000).await?;
    assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=20).collect::<Vec<_>>());
    assert_eq!(store.events_after(&story, 5, 2).await?.iter().map(|e| e.seq).collect::<Vec<_>>(), [6, 7]);

    // Deleting the agent takes its keys, registry and events with it.
    store.delete_agent(&story, &actor).await?;
    assert_eq!(next_message(bus).await, BusMessage::AgentDeleted { agent: agent_id("story") });
    assert!(store.get_agent(&story).await?.is_none());
    assert!(store.find_key(&digest("d2")).await?.is_none());
    assert!(store.events_after(&story, 0, 100).await?.is_empty());
    assert!(Resources::store(store).list(&story, None, 100).await?.is_empty());
    assert!(matches!(store.delete_agent(&story, &actor).await, Err(StoreError::NotFound)));
    assert!(matches!(
        Resources::store(store).put(&story, &text_resource("x://b", "b", "x"), &actor).await,
        Err(StoreError::NotFound)
    ));
    // A re-created agent starts its sequence afresh, under a new epoch.
    let again = store.create_agent(&new_agent("story"), &actor).await?;
    assert_ne!(again.epoch, created.epoch);
    assert_eq!(next_message(bus).await, BusMessage::AgentChanged { agent: agent_id("story") });
    Resources::store(store).put(&story, &text_resource("x://b", "b", "x"), &actor).await?;
    assert_eq!(next_message(bus).await, change("story", 1));
    store.ping().await?;
    Ok(())
}

/// Shared token buckets and per-key limits: what the guard's shared mode and `PATCH .../keys/{id}` rely on.
async fn limits(store: &dyn Store) -> TestResult {
    let actor = actor();
    // A bucket of 3 at 1 a second: taken 10 times in a row, it lets through its burst plus what came back
    // meanwhile (nothing, unless the machine stalls for a second), and refuses the rest with a wait of at
    // most one interval.
    let limit = Limit::new(1, 3).ok_or("a limit")?;
    let started = std::time::Instant::now();
    let mut allowed = Vec::new();
    let mut refusals = 0;
    for _ in 0..10 {
        match store.take_shared_token("agent:limits", limit).await? {
            Outcome::Allowed { remaining, .. } => allowed.push(remaining),
            Outcome::Refused { retry_after } => {
                assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_secs(1), "{retry_after:?}");
                refusals += 1;
            }
        }
    }
    let came_back = usize::try_from(started.elapsed().as_secs()).unwrap_or(usize::MAX);
    assert_eq!(allowed[..3], [2, 1, 0], "the burst, counting down");
    assert!(allowed.len() <= 3 + came_back, "{allowed:?} after {came_back} s");
    assert_eq!(allowed.len() + refusals, 10);
    // Another bucket is full.
    assert!(matches!(store.take_shared_token("key:other", limit).await?, Outcome::Allowed { remaining: 2, .. }));

    // A key's own limit: set at creation, merged, cleared; the change is announced so caches drop the key.
    let agent = agent_id("limits");
    store.create_agent(&new_agent("limits"), &actor).await?;
    let key = store
        .create_key(
            &NewKey {
                rate_limit: Some(RateLimit { requests_per_second: 5, burst: 10, shared: false }),
                ..new_key("limits", "ffff")
            },
            &actor,
        )
        .await?;
    assert_eq!(key.rate_limit.map(|l| (l.requests_per_second, l.burst)), Some((5, 10)));
    let merge = KeyPatch {
        name: Some(None),
        rate_limit: Some(Some(RateLimitPatch { burst: Some(20), shared: Some(true), ..RateLimitPatch::default() })),
    };
    let merged = store.update_key(&agent, &key.id, &merge, &actor).await?;
    assert_eq!(merged.rate_limit, Some(RateLimit { requests_per_second: 5, burst: 20, shared: true }));
    assert_eq!(merged.name, None);
    let found = store.find_key(&digest("ffff")).await?.ok_or("the key")?;
    assert_eq!(found.rate_limit, merged.rate_limit);
    let clear = KeyPatch { rate_limit: Some(None), ..KeyPatch::default() };
    assert_eq!(store.update_key(&agent, &key.id, &clear, &actor).await?.rate_limit, None);
    let partial = KeyPatch {
        rate_limit: Some(Some(RateLimitPatch { burst: Some(1), ..RateLimitPatch::default() })),
        ..KeyPatch::default()
    };
    assert!(matches!(store.update_key(&agent, &key.id, &partial, &actor).await, Err(StoreError::Invalid(_))));
    assert!(matches!(
        store.update_key(&agent_id("story"), &key.id, &KeyPatch::default(), &actor).await,
        Err(StoreError::NotFound)
    ));
    // The agent's audit retention.
    let patch = AgentPatch { audit_retention_days: Some(Some(7)), ..AgentPatch::default() };
    assert_eq!(store.update_agent(&agent, &patch, &actor).await?.audit_retention_days, Some(7));
    assert_eq!(store.get_agent(&agent).await?.ok_or("agent")?.audit_retention_days, Some(7));
    Ok(())
}

/// An MCP audit record of `agent`.
fn mcp_record(agent: &str, n: i64) -> AuditRecord {
    AuditRecord {
        id: uuid::Uuid::now_v7().to_string().into(),
        agent_id: agent.into(),
        occurred_at: crate::domain::time::Timestamp::now(),
        kind: "mcp".into(),
        actor: "key:k".into(),
        action: "resources/read".into(),
        target: format!("test://{n}").into(),
        method: Some("resources/read".into()),
        bytes_out: Some(n),
        ..AuditRecord::default()
    }
}

/// Checks every agent's records in every chain (its own and the writer streams'); returns each agent's
/// number of records.
pub(super) async fn verify_chains(store: &dyn Store) -> Result<Vec<(String, i64)>, Box<dyn std::error::Error>> {
    let report = crate::audit::verify::verify(store, None).await?;
    assert!(report.streams.is_empty(), "{:?}", report.streams);
    let mut counts = Vec::new();
    for (agent, outcome) in report.agents {
        let records = outcome.map_err(|problem| format!("{agent}: {problem}"))?;
        counts.push((agent, i64::try_from(records)?));
    }
    Ok(counts)
}

/// Batches of MCP audit records, large ones and a small one, for one busy agent interleaved with a hundred
/// others, and one of 2,500 records for one agent whose times go back and forth over minutes: every record
/// is stored, each agent's chain verifies from the first to the head across the batches and their segments,
/// and the listing pages through all of them in its order (time desc, id desc), over every agent and for one.
async fn large_audit_batches(store: &dyn Store) -> TestResult {
    use crate::domain::model::{AuditFilter, AuditPosition};
    use crate::domain::time::Timestamp;

    let agent = |n: i64| if n % 3 == 0 { "busy".to_owned() } else { format!("agent-{:03}", n % 101) };
    let records: Vec<AuditRecord> = (0..1_234).map(|n| mcp_record(&agent(n), n)).collect();
    let mut stream = AuditStream::new();
    store.append_audit(&mut stream, &mut queued(&records[..600])).await?;
    store.append_audit(&mut stream, &mut queued(&records[600..603])).await?;
    store.append_audit(&mut stream, &mut queued(&records[603..])).await?;
    // More than two segments' worth (at most 1,000 records each), over more than one segment's span of time
    // (60 s): 37 s apart, back and forth, some at one time so that only the id orders them.
    let base = Timestamp::now().as_micros();
    let wide: Vec<AuditRecord> = (0..2_500)
        .map(|n| AuditRecord {
            occurred_at: Timestamp::from_micros(base - (n % 7) * 37_000_000 - (n % 5) * 1_000),
            ..mcp_record("wide", n)
        })
        .collect();
    store.append_audit(&mut stream, &mut queued(&wide)).await?;
    let mut expected = std::collections::BTreeMap::new();
    for n in 0..1_234 {
        *expected.entry(agent(n)).or_insert(0) += 1;
    }
    expected.insert("wide".to_owned(), 2_500);
    assert_eq!(verify_chains(store).await?, expected.into_iter().collect::<Vec<_>>());

    let newest_first = |records: &mut Vec<AuditRecord>| {
        records.sort_by(|a, b| (b.occurred_at, &b.id).cmp(&(a.occurred_at, &a.id)));
        records.iter().map(|record| (record.id.to_string(), record.target.to_string())).collect::<Vec<_>>()
    };
    let mut all: Vec<AuditRecord> = records.iter().chain(&wide).cloned().collect();
    let mut busy: Vec<AuditRecord> = records.iter().filter(|record| record.agent_id == "busy").cloned().collect();
    for (filter, expected) in [
        (AuditFilter::default(), newest_first(&mut all)),
        (
            AuditFilter { agent: Some(crate::domain::AgentId::parse("busy")?), ..AuditFilter::default() },
            newest_first(&mut busy),
        ),
    ] {
        for limit in [97, 1_000] {
            let mut listed = Vec::new();
            let mut after: Option<AuditPosition> = None;
            loop {
                let page = store.list_audit(&filter, after.as_ref(), limit).await?;
                listed.extend(page.iter().map(|record| (record.id.to_string(), record.target.to_string())));
                match page.last() {
                    Some(last) if page.len() == limit as usize => after = Some(AuditPosition::of(last)),
                    _ => break,
                }
            }
            assert_eq!(listed.len(), expected.len(), "pages of {limit}");
            assert!(listed == expected, "pages of {limit} in the listing's order");
        }
    }
    Ok(())
}

/// A batch spread over many agents whose rows together hold several statements' bytes: it goes to the
/// database in several statements of one transaction, and every record is stored, in chains that verify.
async fn audit_batch_of_many_statements(store: &dyn Store) -> TestResult {
    use crate::store::sql::audit_segment::AUDIT_STATEMENT_BYTES;

    const AGENTS: i64 = 1_500;
    let long = "x".repeat(400);
    let records: Vec<AuditRecord> = (0..6_000)
        .map(|n| AuditRecord {
            target: format!("test://{n}/{long}").into(),
            ..mcp_record(&format!("agent-{:04}", n % AGENTS), n)
        })
        .collect();
    let targets: usize = records.iter().map(|record| record.target.len()).sum();
    assert!(targets > 4 * AUDIT_STATEMENT_BYTES, "the batch needs several statements");
    store.append_audit(&mut AuditStream::new(), &mut queued(&records)).await?;
    let counts = verify_chains(store).await?;
    assert_eq!(counts.len(), AGENTS as usize);
    assert!(counts.iter().all(|(_, records)| *records == 4), "{counts:?}");
    Ok(())
}

on_both_backends!(
    sqlite_audit_batch_of_many_statements,
    postgres_audit_batch_of_many_statements,
    audit_batch_of_many_statements
);

/// A listing reads a stream's large rows on the blocking pool (`AuditListRow::into_records_aside`): every
/// record is listed, for all agents and for one, each with its own hash as the writer chained it and the hash
/// before it.
async fn large_stream_rows_list_whole(store: &dyn Store) -> TestResult {
    use crate::domain::model::AuditFilter;

    const RECORDS: i64 = 800;
    let long = "x".repeat(200);
    let agents = ["agent-a", "agent-b"];
    let records: Vec<AuditRecord> = (0..RECORDS)
        .map(|n| AuditRecord { target: format!("test://{n}/{long}").into(), ..mcp_record(agents[(n % 2) as usize], n) })
        .collect();
    // However the two agents fall into buckets, a row holds at least half the batch: past the threshold.
    assert!((RECORDS as usize / 2) * long.len() >= super::rows::DECODE_ASIDE_FROM);
    let mut stream = AuditStream::new();
    store.append_audit(&mut stream, &mut queued(&records)).await?;
    let everyone = store.list_audit(&AuditFilter::default(), None, 1_000).await?;
    assert_eq!(everyone.len(), RECORDS as usize);
    for agent in agents {
        let filter = AuditFilter { agent: Some(agent_id(agent)), ..AuditFilter::default() };
        let mut listed = store.list_audit(&filter, None, 1_000).await?;
        assert_eq!(listed.len(), RECORDS as usize / 2, "{agent}");
        listed.sort_by_key(|record| record.chain_seq);
        // The writer's chain, worked out again from the records as they were made.
        let mut prev = stream.id().to_owned();
        let made = records.iter().filter(|record| record.agent_id == agent);
        for (n, (record, made)) in listed.iter().zip(made).enumerate() {
            let seq = n as i64 + 1;
            assert_eq!((record.chain_seq, record.target.as_str()), (Some(seq), made.target.as_str()));
            assert_eq!(record.prev_hash.as_deref(), Some(prev.as_str()), "{agent} {seq}");
            prev = crate::audit::chain::chain_hash(&prev, made, seq);
            assert_eq!(record.hash.as_deref(), Some(prev.as_str()), "{agent} {seq}");
            let same = everyone.iter().find(|listed| listed.id == record.id).ok_or("listed for everyone")?;
            assert_eq!(same.hash, record.hash);
        }
    }
    Ok(())
}

on_both_backends!(
    sqlite_large_stream_rows_list_whole,
    postgres_large_stream_rows_list_whole,
    large_stream_rows_list_whole
);

/// Writers appending batches at once, each in its own stream over the same fifty agents in its own order:
/// none deadlocks or fails, and every chain verifies with every record in it.
async fn concurrent_audit_batches(store: Arc<dyn Store>) -> TestResult {
    const WRITERS: i64 = 4;
    const BATCHES: i64 = 5;
    // Enough records a batch that hashing them moves off the worker (`off_the_workers`) on PostgreSQL's
    // multi-threaded test.
    const RECORDS: i64 = 300;
    let writers = (0..WRITERS).map(|writer| {
        let store = store.clone();
        tokio::spawn(async move {
            let mut stream = AuditStream::new();
            for batch in 0..BATCHES {
                let records: Vec<AuditRecord> = (0..RECORDS)
                    .map(|n| mcp_record(&format!("agent-{:02}", (n * (writer + 1) + batch) % 50), n))
                    .collect();
                store.append_audit(&mut stream, &mut queued(&records)).await?;
            }
            Ok::<_, StoreError>(())
        })
    });
    for outcome in futures::future::join_all(writers).await {
        outcome??;
    }
    let heads = verify_chains(store.as_ref()).await?;
    assert_eq!(heads.iter().map(|(_, seq)| seq).sum::<i64>(), WRITERS * BATCHES * RECORDS);
    Ok(())
}

on_both_backends!(sqlite_large_audit_batches, postgres_large_audit_batches, large_audit_batches);

/// A live writer stores rows after verification has read its stream's head: they lie past that head, and
/// the head, read again, has reached them, so the stream verifies up to where its head stood, and a
/// verification begun afterwards checks them all.
async fn rows_stored_after_the_head_was_read(store: &dyn Store) -> TestResult {
    let mut stream = AuditStream::new();
    let batch = |from: i64, count: i64| queued(&(from..from + count).map(|n| mcp_record("bot", n)).collect::<Vec<_>>());
    store.append_audit(&mut stream, &mut batch(0, 3)).await?;
    let heads = store.audit_streams().await?;
    let [head] = heads.as_slice() else { panic!("one stream: {heads:?}") };
    store.append_audit(&mut stream, &mut batch(3, 4)).await?;
    let moved = store.audit_streams().await?[0].seq;
    assert!(moved > head.seq, "the second batch moved the head: {moved} after {}", head.seq);

    let verify_stream = crate::audit::verify::verify_stream;
    let checked = verify_stream(store, head, None).await?.map_err(|problem| problem.to_string())?;
    assert_eq!(checked, vec![("bot".to_owned(), 3)], "the records up to the head read");
    let bot = agent_id("bot");
    let checked = verify_stream(store, head, Some(&bot)).await?.map_err(|problem| problem.to_string())?;
    assert_eq!(checked, vec![("bot".to_owned(), 3)], "one agent's records up to the head read");
    assert_eq!(verify_chains(store).await?, vec![("bot".to_owned(), 7)], "a verification begun now");
    Ok(())
}

on_both_backends!(
    sqlite_rows_stored_after_the_head_was_read,
    postgres_rows_stored_after_the_head_was_read,
    rows_stored_after_the_head_was_read
);

#[tokio::test]
async fn sqlite_concurrent_audit_batches() -> TestResult {
    let file = ScratchFile::new();
    let store = sqlite_store(&file.url(), LocalBus::new()).await?;
    concurrent_audit_batches(Arc::new(store)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_concurrent_audit_batches() -> TestResult {
    let Some(db) = ScratchDatabase::create().await else { return Ok(()) };
    let store = pg_store(&db.url).await?;
    concurrent_audit_batches(Arc::new(store)).await
}

/// A record PostgreSQL refuses (here a trigger refuses one target with a data exception, as the database
/// would a value it cannot store) is dropped alone, counted, and the records of its batch are written, their
/// chain intact; text with a NUL, which PostgreSQL's text cannot hold, is stored and read back intact.
#[tokio::test]
async fn postgres_audit_writer_drops_only_what_the_database_refuses() -> TestResult {
    audit_writer_drops_only_what_the_database_refuses(8, 5).await?;
    audit_writer_drops_only_what_the_database_refuses(200, 137).await
}

/// `count` records of one agent, the `bad`th refused by the database, through the audit writer in one
/// batch: the others are written and chained, the bad one alone is dropped and counted.
async fn audit_writer_drops_only_what_the_database_refuses(count: usize, bad: usize) -> TestResult {
    use std::sync::atomic::Ordering;

    use crate::audit::AuditWriter;
    use crate::config::AuditConfig;
    use crate::domain::model::AuditFilter;

    let Some(db) = ScratchDatabase::create().await else { return Ok(()) };
    let store: Arc<dyn Store> = Arc::new(pg_store(&db.url).await?);
    let pool = sqlx::PgPool::connect(&db.url).await?;
    sqlx::raw_sql(
        "create function refuse_bad() returns trigger language plpgsql as $$ begin \
           if new.records like '%test://bad%' then raise exception 'refused' using errcode = '22023'; end if; \
           return new; end $$; \
         create trigger refuse_bad before insert on audit_batch for each row execute function refuse_bad()",
    )
    .execute(&pool)
    .await?;
    pool.close().await;
    let config = AuditConfig { batch_size: count, flush_interval_ms: 3_600_000, ..AuditConfig::default() };
    let (writer, task) = AuditWriter::start(store.clone(), &config);
    let target = |n: usize| match n {
        n if n == bad => "test://bad".into(),
        0 => "test://000\0nul".into(),
        n => compact_str::format_compact!("test://{n:03}"),
    };
    for n in 0..count {
        writer.record(crate::audit::chain::QueuedRecord::from(&AuditRecord {
            id: uuid::Uuid::now_v7().to_string().into(),
            agent_id: "one".into(),
            occurred_at: crate::domain::time::Timestamp::now(),
            kind: "mcp".into(),
            actor: "key:k".into(),
            action: "resources/read".into(),
            target: target(n),
            ..AuditRecord::default()
        }));
    }
    let stats = writer.stats().clone();
    task.stop(Duration::from_secs(10)).await;
    let kept = u64::try_from(count - 1)?;
    assert_eq!(stats.written.load(Ordering::Relaxed), kept);
    assert_eq!(stats.dropped.load(Ordering::Relaxed), 1);
    assert_eq!(stats.refused.load(Ordering::Relaxed), 1);
    assert_eq!(stats.backlog(), 0, "a refused record is no longer waiting");
    assert!(stats.failed_batches.load(Ordering::Relaxed) >= 4, "the batch and its halves down to one record refused");
    let stored = store.list_audit(&AuditFilter::default(), None, 1_000).await?;
    let mut targets: Vec<&str> = stored.iter().map(|record| record.target.as_str()).collect();
    targets.sort_unstable();
    let expected: Vec<compact_str::CompactString> = (0..count).filter(|&n| n != bad).map(target).collect();
    assert_eq!(targets, expected);
    assert_eq!(verify_chains(store.as_ref()).await?, [("one".to_owned(), i64::try_from(kept)?)]);
    Ok(())
}

/// What the statements of a database before the audit segments (PostgreSQL's 0007, SQLite's 0005) held: an
/// unchained record from before the chain existed, and a chain of three, with the chain's head.
fn legacy_audit_rows() -> String {
    use crate::audit::chain::{GENESIS, chain_hash};
    use crate::domain::time::Timestamp;

    let base = Timestamp::now().as_micros() - 3_600_000_000;
    let mut sql = format!(
        "insert into audit (audit_id, agent_id, occurred_at, kind, actor, action, target, created_at, updated_at) \
         values ('00000000-0000-7000-8000-000000000000', 'old', {base}, 'admin', 'operator', 'agent.create', 'old', \
         {base}, {base});"
    );
    let mut prev = GENESIS.to_owned();
    for seq in 1..=3_i64 {
        let record = AuditRecord {
            id: format!("00000000-0000-7000-8000-00000000000{seq}").into(),
            agent_id: "old".into(),
            occurred_at: Timestamp::from_micros(base + seq),
            kind: "mcp".into(),
            actor: "key:k".into(),
            action: "resources/read".into(),
            target: format!("test://'{seq}\"").into(),
            method: Some("resources/read".into()),
            user_agent: (seq == 2).then(|| "agent \\u0000 é".into()),
            bytes_out: Some(seq * 10),
            ..AuditRecord::default()
        };
        let hash = chain_hash(&prev, &record, seq);
        let at = base + seq;
        let agent = if seq == 2 { "'agent \\u0000 é'".to_owned() } else { "null".to_owned() };
        sql.push_str(&format!(
            "insert into audit (audit_id, agent_id, occurred_at, kind, actor, action, target, method, user_agent, \
             bytes_out, chain_seq, prev_hash, hash, created_at, updated_at) values ('{}', 'old', {at}, 'mcp', \
             'key:k', 'resources/read', '{}', 'resources/read', {agent}, {}, {seq}, '{prev}', '{hash}', {at}, {at});",
            record.id,
            record.target.replace('\'', "''"),
            seq * 10,
        ));
        prev = hash;
    }
    sql.push_str(&format!("insert into audit_chain (agent_id, seq, head) values ('old', 3, '{prev}');"));
    sql
}

/// The records of a database from before the audit segments are moved into them by the migration: listed
/// as before, the chain verifies and goes on with new records, and the view shows every record.
async fn legacy_audit_is_migrated(store: &dyn Store, view_count: i64) -> TestResult {
    use crate::domain::model::AuditFilter;

    let listed = store.list_audit(&AuditFilter::default(), None, 100).await?;
    let targets: Vec<&str> = listed.iter().map(|record| record.target.as_str()).collect();
    assert_eq!(targets, ["test://'3\"", "test://'2\"", "test://'1\"", "old"]);
    assert_eq!(listed[1].user_agent.as_deref(), Some("agent \\u0000 é"));
    assert_eq!(listed[0].bytes_out, Some(30));
    assert_eq!(listed[3].chain_seq, None);
    assert_eq!(verify_chains(store).await?, [("old".to_owned(), 3)]);
    let more: Vec<AuditRecord> = (4..6).map(|n| mcp_record("old", n)).collect();
    store.append_audit(&mut AuditStream::new(), &mut queued(&more)).await?;
    assert_eq!(verify_chains(store).await?, [("old".to_owned(), 5)]);
    assert_eq!(view_count, 4);
    Ok(())
}

#[tokio::test]
async fn sqlite_legacy_audit_is_migrated() -> TestResult {
    let file = ScratchFile::new();
    let pool = sqlx::SqlitePool::connect(&file.url()).await?;
    sqlx::migrate!("./migrations/sqlite").run_to(5, &pool).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(legacy_audit_rows())).execute(&pool).await?;
    let store = sqlite_store(&file.url(), LocalBus::new()).await?;
    let count: i64 = sqlx::query_scalar("select count(*) from audit_record").fetch_one(&pool).await?;
    legacy_audit_is_migrated(&store, count).await
}

#[tokio::test]
async fn postgres_legacy_audit_is_migrated() -> TestResult {
    let Some(db) = ScratchDatabase::create().await else { return Ok(()) };
    let pool = sqlx::PgPool::connect(&db.url).await?;
    sqlx::migrate!("./migrations/postgres").run_to(7, &pool).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(legacy_audit_rows())).execute(&pool).await?;
    let store = pg_store(&db.url).await?;
    let count: i64 = sqlx::query_scalar("select count(*) from audit_record").fetch_one(&pool).await?;
    pool.close().await;
    legacy_audit_is_migrated(&store, count).await
}

on_both_backends!(sqlite_limits, postgres_limits, limits);

/// The audit actions written for the story's agent, oldest first.
/// Read through the `audit_record` view, which shows every record of the segments as a row.
const AUDIT_ACTIONS: &str = "select action from audit_record where agent_id = 'story' order by occurred_at, audit_id";

fn expected_audit_actions() -> Vec<&'static str> {
    let mut actions = vec!["agent.create", "agent.update", "agent.update", "key.create", "key.create"];
    actions.extend(["key.revoke", "key.revoke"]);
    actions.extend(["resource.put"; 9]);
    actions.push("resource.delete");
    // The two batches: put, put, delete; put, put.
    actions.extend(["resource.put", "resource.put", "resource.delete", "resource.put", "resource.put"]);
    actions.extend(["template.put", "template.put", "template.put", "template.delete"]);
    actions.extend(["prompt.put", "prompt.put", "prompt.put", "prompt.delete"]);
    actions.extend(["agent.delete", "agent.create", "resource.put"]);
    actions
}

/// Writers racing on one agent: every change gets the next sequence number, the event table has no gap,
/// and the bus delivers the changes in sequence order.
async fn concurrent_writers(store: Arc<dyn Store>, bus: &mut Receiver<BusMessage>) -> TestResult {
    const WRITERS: usize = 8;
    const WRITES: usize = 25;
    let busy = agent_id("busy");
    store.create_agent(&new_agent("busy"), &actor()).await?;
    assert_eq!(next_message(bus).await, BusMessage::AgentChanged { agent: agent_id("busy") });
    let writers = (0..WRITERS).map(|writer| {
        let store = store.clone();
        let busy = busy.clone();
        tokio::spawn(async move {
            for write in 0..WRITES {
                let value = format!("x://w{writer}/{}", write % 5);
                Resources::store(&*store).put(&busy, &text_resource(&value, "r", "c"), &actor()).await?;
            }
            Ok::<_, StoreError>(())
        })
    });
    for outcome in futures::future::join_all(writers).await {
        outcome??;
    }
    let total = i64::try_from(WRITERS * WRITES)?;
    for seq in 1..=total {
        assert_eq!(next_message(bus).await, change("busy", seq));
    }
    let events = store.events_after(&busy, 0, 10_000).await?;
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=total).collect::<Vec<_>>());
    Ok(())
}

// ---------------------------------------------------------------------------------------------- SQLite

/// A database file in the temporary directory, removed (with its WAL files) when dropped.
pub(super) struct ScratchFile {
    path: std::path::PathBuf,
}

impl ScratchFile {
    pub(super) fn new() -> Self {
        Self { path: std::env::temp_dir().join(format!("hivegate-test-{}.db", uuid::Uuid::new_v4())) }
    }

    pub(super) fn url(&self) -> String {
        format!("sqlite://{}?mode=rwc", self.path.display())
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.path.display()));
        }
    }
}

pub(super) async fn sqlite_store(url: &str, bus: LocalBus) -> Result<SqliteStore, StoreError> {
    let store = SqliteStore::connect(url, &DatabaseConfig::default(), bus).await?;
    store.migrate().await?;
    Ok(store)
}

#[tokio::test]
async fn sqlite_story() -> TestResult {
    let file = ScratchFile::new();
    let bus = LocalBus::new();
    let mut messages = bus.subscribe();
    let store = sqlite_store(&file.url(), bus).await?;
    story(&store, &mut messages).await?;
    assert!(matches!(messages.try_recv(), Err(TryRecvError::Empty)), "no message for changes that failed");
    let pool = sqlx::SqlitePool::connect(&file.url()).await?;
    let actions: Vec<String> = sqlx::query_scalar(AUDIT_ACTIONS).fetch_all(&pool).await?;
    assert_eq!(actions, expected_audit_actions());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_sequences_are_published_in_order_under_concurrent_writers() -> TestResult {
    let file = ScratchFile::new();
    let bus = LocalBus::new();
    let mut messages = bus.subscribe();
    let store = Arc::new(sqlite_store(&file.url(), bus).await?);
    concurrent_writers(store, &mut messages).await
}

#[tokio::test]
async fn sqlite_in_memory_works() -> TestResult {
    let bus = LocalBus::new();
    let mut messages = bus.subscribe();
    let store = sqlite_store("sqlite::memory:", bus).await?;
    story(&store, &mut messages).await?;
    Ok(())
}

#[tokio::test]
async fn sqlite_concurrent_migrations_are_safe() -> TestResult {
    let file = ScratchFile::new();
    let url = file.url();
    // Separate pools open separate connections to the file, as separate processes would.
    let config = DatabaseConfig::default();
    let stores =
        futures::future::try_join_all((0..4).map(|_| SqliteStore::connect(&url, &config, LocalBus::new()))).await?;
    concurrent_migrations(&stores).await
}

/// Migrates `stores` (separate pools on one database) at once, then again, and uses them.
async fn concurrent_migrations(stores: &[impl Store]) -> TestResult {
    futures::future::try_join_all(stores.iter().map(|store| store.migrate())).await?;
    stores[0].migrate().await?;
    stores[1].create_agent(&new_agent("story"), &actor()).await?;
    assert!(stores[2].get_agent(&agent_id("story")).await?.is_some());
    Ok(())
}

#[tokio::test]
async fn sqlite_missing_file_without_create_is_an_error() {
    let file = ScratchFile::new();
    let url = format!("sqlite://{}", file.path.display());
    let outcome = SqliteStore::connect(&url, &DatabaseConfig::default(), LocalBus::new()).await;
    assert!(outcome.is_err());
}

// ---------------------------------------------------------------------------------------------- PostgreSQL

/// A database of its own on the test server, dropped (even when the test fails) when this is dropped.
pub(super) struct ScratchDatabase {
    admin_url: String,
    name: String,
    pub(super) url: String,
}

impl ScratchDatabase {
    /// A fresh database; panics when `HIVEGATE_TEST_POSTGRES_URL` is not set, since a PostgreSQL test
    /// fails rather than skips (`scripts/test` always sets it). Returns `Option` for the callers' shape.
    pub(super) async fn create() -> Option<Self> {
        let admin_url = std::env::var("HIVEGATE_TEST_POSTGRES_URL")
            .expect("HIVEGATE_TEST_POSTGRES_URL must name a PostgreSQL server (scripts/test sets it)");
        let name = format!("hivegate_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = connect_admin(&admin_url).await;
        // An ICU locale collation as the database default, so the store has to ask for bytewise order
        // itself (`collate "C"`); plain `create database` where ICU is unavailable.
        let icu = format!("create database {name} template template0 locale_provider icu icu_locale 'en-US'");
        if sqlx::raw_sql(sqlx::AssertSqlSafe(icu)).execute(&mut admin).await.is_err() {
            let plain = format!("create database {name}");
            sqlx::raw_sql(sqlx::AssertSqlSafe(plain)).execute(&mut admin).await.expect("create a scratch database");
        }
        let url = with_database(&admin_url, &name);
        Some(Self { admin_url, name, url })
    }
}

impl Drop for ScratchDatabase {
    /// Drops the database from a thread of its own: `Drop` cannot await, and the test's runtime may be
    /// unwinding. `with (force)` ends the connections the test left open.
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let statement = format!("drop database if exists {} with (force)", self.name);
        let dropper = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            runtime.block_on(async {
                let mut admin = connect_admin(&admin_url).await;
                sqlx::raw_sql(sqlx::AssertSqlSafe(statement)).execute(&mut admin).await.map(|_| ())
            })
        });
        if let Ok(Err(error)) = dropper.join() {
            eprintln!("cannot drop the scratch database {}: {error}", self.name);
        }
    }
}

async fn connect_admin(url: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    sqlx::PgConnection::connect(url).await.expect("connect to HIVEGATE_TEST_POSTGRES_URL")
}

/// `url` with its database name replaced.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(base, query)| (base, Some(query)));
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{base}/{database}?{query}"),
        None => format!("{base}/{database}"),
    }
}

pub(super) async fn pg_store(url: &str) -> Result<PgStore, StoreError> {
    let store = PgStore::connect(url, &DatabaseConfig::default()).await?;
    store.migrate().await?;
    Ok(store)
}

/// A migrated store on `url`, and a listener forwarding its database's notifications to the bus returned.
async fn listening(url: &str) -> Result<(PgStore, Receiver<BusMessage>, PgBus), StoreError> {
    let store = pg_store(url).await?;
    let bus = LocalBus::new();
    let messages = bus.subscribe();
    let listener = PgBus::start(url, bus).await?;
    Ok((store, messages, listener))
}

/// Every connection the store opens over TCP turns `TCP_NODELAY` on for the process's connections to the
/// server's port ([`super::nodelay`]). The store connects through a port of this test's own, forwarded to
/// the server, so that no other test's connections touch it: a connection of the test's own to that port,
/// made first, is set by the store's.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn postgres_connections_go_without_nagle() -> TestResult {
    use std::str::FromStr as _;

    let Some(db) = ScratchDatabase::create().await else { return Ok(()) };
    let options = sqlx::postgres::PgConnectOptions::from_str(&db.url)?;
    if options.get_socket().is_some() || options.get_host().starts_with('/') {
        return Ok(()); // a Unix socket has no Nagle's algorithm
    }
    let forward = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = forward.local_addr()?.port();
    let server = (options.get_host().to_owned(), options.get_port());
    tokio::spawn(async move {
        while let Ok((mut client, _)) = forward.accept().await {
            let server = server.clone();
            tokio::spawn(async move {
                if let Ok(mut upstream) = tokio::net::TcpStream::connect(server).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
            });
        }
    });
    let own = std::net::TcpStream::connect(("127.0.0.1", port))?;
    assert!(!own.nodelay()?, "a new connection starts with Nagle's algorithm");
    let url = db.url.replacen(&format!(":{}/", options.get_port()), &format!(":{port}/"), 1);
    assert_ne!(url, db.url, "the URL names the server's port");
    let store = PgStore::connect(&url, &DatabaseConfig::default()).await?;
    assert!(own.nodelay()?, "the store's connection set TCP_NODELAY on the connections to its port");
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn postgres_story() -> TestResult {
    let Some(db) = ScratchDatabase::create().await else { return Ok(()) };
    let (store, mut messages, mut listener) = listening(&db.url).await?;
    story(&store, &mut messages).await?;
    let pool = sqlx::PgPool::connect(&db.url).await?;
    let actions: Vec<String> = sqlx::query_scalar(AUDIT_ACTIONS).fetch_all(&pool).await?;
    assert_eq!(actions, expected_audit_actions());
    pool.close().await;
    listener.shutdown();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_sequences_commit_in_order_under_concurrent_writers() -> TestResult {
    let Some(db) = ScratchDatabase::create().await else { return Ok(()) };
    let (store, mut messages, mut listener) = listening(&db.url).await?;
    concurrent_writers(Arc::new(store), &mut messages).await?;
    listener.shutdown();
    Ok(())
}

#[tokio::test]
async fn postgres_concurrent_migrations_are_safe() -> TestResult {
    let Some(db) = ScratchDatabase::create().await else { return Ok(()) };
    let config = DatabaseConfig::default();
    let stores = futures::future::try_join_all((0..4).map(|_| PgStore::connect(&db.url, &config))).await?;
    concurrent_migrations(&stores).await
}

#[tokio::test]
async fn postgres_listener_resyncs_after_losing_its_connection() -> TestResult {
    let Some(db) = ScratchDatabase::create().await else { return Ok(()) };
    let (store, mut messages, mut listener) = listening(&db.url).await?;
    store.create_agent(&new_agent("story"), &actor()).await?;
    assert_eq!(next_message(&mut messages).await, BusMessage::AgentChanged { agent: agent_id("story") });

    for round in 1..=2 {
        let pool = sqlx::PgPool::connect(&db.url).await?;
        let terminated: Vec<bool> = sqlx::query_scalar(
            "select pg_terminate_backend(pid) from pg_stat_activity \
             where application_name = $1 and datname = current_database()",
        )
        .bind(LISTENER_APPLICATION_NAME)
        .fetch_all(&pool)
        .await?;
        assert_eq!(terminated, [true], "exactly one listener connection");
        pool.close().await;
        assert_eq!(next_message(&mut messages).await, BusMessage::Offline);
        assert_eq!(next_message(&mut messages).await, BusMessage::Resync);
        // Listening again: the next change arrives.
        CollectionStore::<Resources>::put(&store, &agent_id("story"), &text_resource("x://a", "a", "a"), &actor())
            .await?;
        assert_eq!(next_message(&mut messages).await, change("story", round));
    }
    listener.shutdown();
    Ok(())
}

#[tokio::test]
async fn postgres_unreachable_is_unavailable() {
    let config = DatabaseConfig { acquire_timeout_ms: 500, ..DatabaseConfig::default() };
    match PgStore::connect("postgres://hivegate@127.0.0.1:1/hivegate", &config).await {
        Err(StoreError::Unavailable(_)) => {}
        Err(error) => panic!("expected Unavailable, got {error:?}"),
        Ok(_) => panic!("connected to a closed port"),
    }
}

#[test]
fn database_names_are_replaced_in_urls() {
    assert_eq!(with_database("postgres://u@h:5432/postgres", "x"), "postgres://u@h:5432/x");
    assert_eq!(with_database("postgres://u@h/postgres?sslmode=disable", "x"), "postgres://u@h/x?sslmode=disable");
    assert_eq!(with_database("postgres://u@h", "x"), "postgres://u@h/x");
}

/// A pool's idle count that wrapped below zero in sqlx (a connection taken between its return to the
/// queue and the count's increment) counts as the pool's size, not as `usize::MAX`, which the metrics'
/// sum over the pools would overflow.
#[test]
fn a_wrapped_idle_count_is_bounded_by_the_pool() {
    assert_eq!(super::idle_of(usize::MAX, 16), 16);
    assert_eq!(super::idle_of(3, 16), 3);
    assert_eq!(super::idle_of(0, 0), 0);
}
