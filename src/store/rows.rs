//! Rows as both backends return them, and their conversion into domain records.
//!
//! The columns have the same names and compatible types in SQLite and PostgreSQL (`bigint`/`integer` →
//! `i64`, `boolean`/`integer` → `bool`, `bytea`/`blob` → `Vec<u8>`, JSON as text), so one set of row structs
//! serves both. Anything stored that no longer parses (a URI, a scope, a JSON column) is
//! [`StoreError::Corrupt`]: the database is the truth, but it is not trusted blindly.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{StoreError, StoreResult};
use crate::domain::model::{
    Agent, AuditRecord, AuditText, ChangeEvent, Content, KeyRecord, Prompt, RateLimit, Resource, ResourceTemplate,
};
use crate::domain::time::Timestamp;
use crate::domain::{AgentId, PromptName, ResourceUri, Scope};

/// A row as the database returns it, and the record it holds.
pub(super) trait Decode {
    type Record;
    /// The record; `Corrupt` when what is stored no longer parses.
    fn decode(self) -> StoreResult<Self::Record>;
}

/// Implements [`Decode`] for each `row => record` by the row's conversion method.
macro_rules! decode_by {
    ($($row:ty => $record:ty, $method:ident;)+) => {
        $(impl Decode for $row {
            type Record = $record;
            fn decode(self) -> StoreResult<$record> {
                self.$method()
            }
        })+
    };
}

decode_by! {
    AgentRow => Agent, into_agent;
    KeyRow => KeyRecord, into_key;
    ResourceRow => Resource, into_resource;
    TemplateRow => ResourceTemplate, into_template;
    PromptRow => Prompt, into_prompt;
    ResourceContentRow => (Resource, Content), into_parts;
    EventRow => ChangeEvent, into_event;
    super::sql::keys::SubjectRow => crate::domain::subject::SubjectGrant, into_grant;
    super::sql::sessions::SessionRow => crate::domain::session::Session, into_session;
    super::sql::oauth_server::ClientRow => super::oauth_server::StoredClient, into_client;
    super::sql::oauth_server::CodeRow => super::oauth_server::StoredCode, into_code;
    super::sql::oauth_server::TokenRow => super::oauth_server::StoredToken, into_token;
}

#[derive(sqlx::FromRow)]
pub(super) struct AgentRow {
    agent_id: String,
    name: String,
    description: Option<String>,
    rate_limit_rps: Option<i64>,
    rate_limit_burst: Option<i64>,
    rate_limit_shared: bool,
    cache_ttl_ms: Option<i64>,
    audit_retention_days: Option<i64>,
    epoch: i64,
    created_at: i64,
    updated_at: i64,
}

impl AgentRow {
    pub(super) fn into_agent(self) -> StoreResult<Agent> {
        let rate_limit = rate_limit(self.rate_limit_rps, self.rate_limit_burst, self.rate_limit_shared)?;
        Ok(Agent {
            id: agent_id(&self.agent_id)?,
            name: self.name,
            description: self.description,
            rate_limit,
            cache_ttl_ms: self.cache_ttl_ms.map(|ms| to_u64(ms, "cache_ttl_ms")).transpose()?,
            audit_retention_days: self
                .audit_retention_days
                .map(|days| to_u32(days, "audit_retention_days"))
                .transpose()?,
            epoch: self.epoch,
            created_at: Timestamp::from_micros(self.created_at),
            updated_at: Timestamp::from_micros(self.updated_at),
        })
    }
}

/// A stored rate limit: both columns set, or none.
fn rate_limit(rps: Option<i64>, burst: Option<i64>, shared: bool) -> StoreResult<Option<RateLimit>> {
    match (rps, burst) {
        (Some(rps), Some(burst)) => Ok(Some(RateLimit {
            requests_per_second: to_u32(rps, "rate_limit_rps")?,
            burst: to_u32(burst, "rate_limit_burst")?,
            shared,
        })),
        _ => Ok(None),
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct KeyRow {
    api_key_id: String,
    agent_id: String,
    name: Option<String>,
    prefix: String,
    scopes: String,
    created_at: i64,
    expires_at: Option<i64>,
    last_used_at: Option<i64>,
    revoked_at: Option<i64>,
    rate_limit_rps: Option<i64>,
    rate_limit_burst: Option<i64>,
    rate_limit_shared: bool,
}

impl KeyRow {
    pub(super) fn into_key(self) -> StoreResult<KeyRecord> {
        Ok(KeyRecord {
            id: self.api_key_id,
            agent_id: agent_id(&self.agent_id)?,
            name: self.name,
            prefix: self.prefix,
            scopes: parse_scopes(&self.scopes)?,
            created_at: Timestamp::from_micros(self.created_at),
            expires_at: self.expires_at.map(Timestamp::from_micros),
            last_used_at: self.last_used_at.map(Timestamp::from_micros),
            revoked_at: self.revoked_at.map(Timestamp::from_micros),
            rate_limit: rate_limit(self.rate_limit_rps, self.rate_limit_burst, self.rate_limit_shared)?,
        })
    }
}

/// A resource as lists show it: every column but the content.
#[derive(sqlx::FromRow)]
pub(super) struct ResourceRow {
    uri: String,
    name: String,
    title: Option<String>,
    description: Option<String>,
    mime_type: Option<String>,
    size: i64,
    annotations: Option<String>,
    meta: Option<String>,
    version: i64,
    created_at: i64,
    updated_at: i64,
}

impl ResourceRow {
    pub(super) fn into_resource(self) -> StoreResult<Resource> {
        Ok(Resource {
            uri: ResourceUri::parse(&self.uri).map_err(|e| StoreError::Corrupt(e.0))?,
            name: self.name,
            title: self.title,
            description: self.description,
            mime_type: self.mime_type,
            size: to_u64(self.size, "size")?,
            annotations: from_json_opt(self.annotations.as_deref(), "annotations")?,
            meta: from_json_opt(self.meta.as_deref(), "meta")?,
            version: self.version,
            created_at: Timestamp::from_micros(self.created_at),
            updated_at: Timestamp::from_micros(self.updated_at),
        })
    }
}

/// A resource with its content.
#[derive(sqlx::FromRow)]
pub(super) struct ResourceContentRow {
    #[sqlx(flatten)]
    resource: ResourceRow,
    content_text: Option<String>,
    content_blob: Option<Vec<u8>>,
}

impl ResourceContentRow {
    pub(super) fn into_parts(self) -> StoreResult<(Resource, Content)> {
        let content = match (self.content_text, self.content_blob) {
            (Some(text), None) => Content::Text(text),
            (None, Some(bytes)) => Content::Blob(bytes),
            _ => {
                return Err(StoreError::Corrupt(format!(
                    "resource {} must have exactly one content",
                    self.resource.uri
                )));
            }
        };
        Ok((self.resource.into_resource()?, content))
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct TemplateRow {
    uri_template: String,
    name: String,
    title: Option<String>,
    description: Option<String>,
    mime_type: Option<String>,
    annotations: Option<String>,
    text: Option<String>,
    created_at: i64,
    updated_at: i64,
}

impl TemplateRow {
    pub(super) fn into_template(self) -> StoreResult<ResourceTemplate> {
        Ok(ResourceTemplate {
            uri_template: self.uri_template,
            name: self.name,
            title: self.title,
            description: self.description,
            mime_type: self.mime_type,
            annotations: from_json_opt(self.annotations.as_deref(), "annotations")?,
            text: self.text,
            created_at: Timestamp::from_micros(self.created_at),
            updated_at: Timestamp::from_micros(self.updated_at),
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct PromptRow {
    name: String,
    title: Option<String>,
    description: Option<String>,
    arguments: String,
    messages: String,
    created_at: i64,
    updated_at: i64,
}

impl PromptRow {
    pub(super) fn into_prompt(self) -> StoreResult<Prompt> {
        Ok(Prompt {
            name: PromptName::parse(&self.name).map_err(|e| StoreError::Corrupt(e.0))?,
            title: self.title,
            description: self.description,
            arguments: from_json(&self.arguments, "arguments")?,
            messages: from_json(&self.messages, "messages")?,
            created_at: Timestamp::from_micros(self.created_at),
            updated_at: Timestamp::from_micros(self.updated_at),
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct EventRow {
    agent_id: String,
    seq: i64,
    updated_uris: String,
    resources_list_changed: bool,
    prompts_list_changed: bool,
    created_at: i64,
}

impl EventRow {
    pub(super) fn into_event(self) -> StoreResult<ChangeEvent> {
        Ok(ChangeEvent {
            agent_id: agent_id(&self.agent_id)?,
            seq: self.seq,
            updated_uris: from_json(&self.updated_uris, "updated_uris")?,
            resources_list_changed: self.resources_list_changed,
            prompts_list_changed: self.prompts_list_changed,
            created_at: Timestamp::from_micros(self.created_at),
        })
    }
}

/// Scopes as stored: comma-separated, e.g. `mcp,registry`.
pub(super) fn scopes_text(scopes: &[Scope]) -> String {
    scopes.iter().map(|scope| scope.as_str()).collect::<Vec<_>>().join(",")
}

fn parse_scopes(text: &str) -> StoreResult<Vec<Scope>> {
    text.split(',')
        .filter(|part| !part.is_empty())
        .map(|part| Scope::parse(part).ok_or_else(|| StoreError::Corrupt(format!("unknown key scope {part:?}"))))
        .collect()
}

/// A JSON column's text; `None` stays SQL null.
pub(super) fn json_text(value: Option<&Value>) -> Option<String> {
    value.map(Value::to_string)
}

/// The text of a JSON column that is never null.
pub(super) fn json_string<T: Serialize>(value: &T) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(format!("cannot serialise a record: {e}")))
}

fn from_json<T: DeserializeOwned>(text: &str, column: &str) -> StoreResult<T> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("column {column} is not valid JSON: {e}")))
}

fn from_json_opt<T: DeserializeOwned>(text: Option<&str>, column: &str) -> StoreResult<Option<T>> {
    text.map(|text| from_json(text, column)).transpose()
}

fn agent_id(value: &str) -> StoreResult<AgentId> {
    AgentId::parse(value).map_err(|e| StoreError::Corrupt(e.0))
}

fn to_u32(value: i64, column: &str) -> StoreResult<u32> {
    u32::try_from(value).map_err(|_| StoreError::Corrupt(format!("column {column} is out of range: {value}")))
}

fn to_u64(value: i64, column: &str) -> StoreResult<u64> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("column {column} is out of range: {value}")))
}

/// An unsigned count as the database keeps it (`bigint`); counts beyond `i64::MAX` cannot occur in practice
/// and are clamped rather than wrapped.
pub(super) fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The audit digest of a record: hex SHA-256 of its JSON, followed by its content's bytes for resources
/// (so a content change shows in the digest even when the listed fields stay the same).
pub(super) fn record_digest<T: Serialize>(record: &T, content: Option<&Content>) -> String {
    let mut hasher = Sha256::new();
    // Serialising the domain records cannot fail: they hold strings, numbers and JSON values only.
    hasher.update(serde_json::to_vec(record).unwrap_or_default());
    match content {
        Some(Content::Text(text)) => hasher.update(text.as_bytes()),
        Some(Content::Blob(bytes)) => hasher.update(bytes),
        None => {}
    }
    crate::domain::hex(hasher.finalize())
}

/// One record inside an audit segment's or a stream row's `records`: a JSON array of the fields its chain
/// hash covers, in their order (src/domain/audit.rs), then its hash (in segments, and in stream rows written
/// before records were stored without it), read in the order of these fields. The `audit_record` view names
/// them.
#[derive(serde::Deserialize)]
struct StoredAuditRecord {
    id: AuditText,
    agent_id: AuditText,
    chain_seq: Option<i64>,
    occurred_at: i64,
    kind: AuditText,
    actor: AuditText,
    action: AuditText,
    target: AuditText,
    before_digest: Option<AuditText>,
    after_digest: Option<AuditText>,
    request_id: Option<AuditText>,
    key_id: Option<AuditText>,
    key_prefix: Option<AuditText>,
    session_id: Option<AuditText>,
    method: Option<AuditText>,
    outcome: Option<AuditText>,
    error_code: Option<i32>,
    bytes_out: Option<i64>,
    latency_us: Option<i64>,
    client_ip: Option<AuditText>,
    user_agent: Option<AuditText>,
    trace_id: Option<AuditText>,
    /// Written in segments, and in writer streams' rows before they left it out: there it follows from the
    /// fields and the row's heads.
    #[serde(default)]
    hash: Option<AuditText>,
}

impl StoredAuditRecord {
    fn into_record(self, prev_hash: Option<AuditText>) -> AuditRecord {
        AuditRecord {
            id: self.id,
            agent_id: self.agent_id,
            occurred_at: Timestamp::from_micros(self.occurred_at),
            kind: self.kind,
            actor: self.actor,
            action: self.action,
            target: self.target,
            before_digest: self.before_digest,
            after_digest: self.after_digest,
            request_id: self.request_id,
            key_id: self.key_id,
            key_prefix: self.key_prefix,
            session_id: self.session_id,
            method: self.method,
            outcome: self.outcome,
            error_code: self.error_code,
            bytes_out: self.bytes_out,
            latency_us: self.latency_us,
            client_ip: self.client_ip,
            user_agent: self.user_agent,
            trace_id: self.trace_id,
            chain_seq: self.chain_seq,
            prev_hash,
            hash: self.hash,
        }
    }
}

/// The head of a chain as the database returns it: an agent's (`owner` its id) or a writer stream's.
#[derive(sqlx::FromRow)]
pub(super) struct HeadRow {
    owner: String,
    seq: i64,
    hash: String,
    pruned_seq: i64,
    pruned_hash: String,
}

impl HeadRow {
    pub(super) fn into_chain_head(self) -> crate::audit::chain::ChainHead {
        let Self { owner, seq, hash, pruned_seq, pruned_hash } = self;
        crate::audit::chain::ChainHead { agent_id: owner, seq, hash, pruned_seq, pruned_hash }
    }

    pub(super) fn into_stream_head(self) -> crate::audit::stream::StreamHead {
        let Self { owner, seq, hash, pruned_seq, pruned_hash } = self;
        crate::audit::stream::StreamHead { stream_id: owner, seq, hash, pruned_seq, pruned_hash }
    }
}

/// An audit segment as the listing, the chain walk and retention read it.
#[derive(sqlx::FromRow)]
pub(super) struct AuditSegmentRow {
    pub(super) agent_id: String,
    pub(super) first_seq: i64,
    prev_hash: String,
    records: String,
}

impl AuditSegmentRow {
    /// The segment's records, in chain order, each with the hash of the record before it.
    pub(super) fn into_records(self) -> StoreResult<Vec<AuditRecord>> {
        let stored: Vec<StoredAuditRecord> = serde_json::from_str(&self.records).map_err(|error| {
            StoreError::Corrupt(format!("audit segment {}/{} does not parse: {error}", self.agent_id, self.first_seq))
        })?;
        let mut prev = AuditText::from(self.prev_hash.as_str());
        Ok(stored
            .into_iter()
            .map(|record| {
                // A record from before the chain existed has no hash, and none before it.
                let prev_hash = record.hash.as_ref().map(|hash| std::mem::replace(&mut prev, hash.clone()));
                record.into_record(prev_hash)
            })
            .collect())
    }
}

/// A row of either audit format as the listing reads it: a segment (`owner` its agent, `position` its first
/// record's, `prefix` the hash before it) or a stream's row (`owner` the stream, `position` the row's,
/// `prefix` its heads).
#[derive(sqlx::FromRow)]
pub(super) struct AuditListRow {
    pub(super) owner: String,
    pub(super) position: i64,
    pub(super) last_at: i64,
    prefix: String,
    records: String,
}

impl AuditListRow {
    /// The row's records, each with the hash of the record before it in its agent's chain, and its own: worked
    /// out, where a stream's row does not hold it, for `agent`'s records (everyone's when `None`), whom the
    /// listing shows.
    pub(super) fn into_records(self, is_stream: bool, agent: Option<&str>) -> StoreResult<Vec<AuditRecord>> {
        if is_stream {
            let shown = |record: &str| agent.is_none_or(|agent| agent == record);
            return stream_records(&self.owner, self.position, &self.prefix, &self.records, shown);
        }
        AuditSegmentRow {
            agent_id: self.owner,
            first_seq: self.position,
            prev_hash: self.prefix,
            records: self.records,
        }
        .into_records()
    }

    /// [`Self::into_records`], on the blocking pool when the row is large: a stream's full row (about 1,000
    /// records, 190 KiB of text) takes 1.5 ms or so to parse and hash, and a listing goes through up to 64
    /// rows between two reads from the database, which would hold up every other connection of the thread
    /// serving it for a tenth of a second or more (bench/README.md).
    pub(super) async fn into_records_aside(
        self,
        is_stream: bool,
        agent: Option<&str>,
    ) -> StoreResult<Vec<AuditRecord>> {
        if self.records.len() < DECODE_ASIDE_FROM {
            return self.into_records(is_stream, agent);
        }
        let (agent, row) = (agent.map(str::to_owned), format!("{}/{}", self.owner, self.position));
        tokio::task::spawn_blocking(move || self.into_records(is_stream, agent.as_deref()))
            .await
            .map_err(|error| StoreError::Corrupt(format!("audit row {row} could not be read: {error}")))?
    }
}

/// The bytes of a row's records from which [`AuditListRow::into_records_aside`] reads them on the blocking
/// pool: about 200 records, a quarter of a millisecond's work.
pub(super) const DECODE_ASIDE_FROM: usize = 48 * 1024;

/// A stream's row as verification reads it: its records only when asked for.
#[derive(sqlx::FromRow)]
pub(super) struct AuditStreamRow {
    stream_id: String,
    seq: i64,
    last_at: i64,
    prev_hash: String,
    hash: String,
    heads: String,
    records: Option<String>,
}

impl AuditStreamRow {
    pub(super) fn into_verified(self) -> StoreResult<crate::audit::stream::VerifiedRow> {
        let records = match &self.records {
            // The verifier works each record's hash out itself.
            Some(records) => Some(stream_records(&self.stream_id, self.seq, &self.heads, records, |_| false)?),
            None => None,
        };
        Ok(crate::audit::stream::VerifiedRow {
            seq: self.seq,
            last_at: self.last_at,
            prev_hash: self.prev_hash,
            hash: self.hash,
            heads: self.heads,
            records,
        })
    }
}

/// The records of stream `stream`'s row `seq`, each with the hash before it in its agent's chain (the first
/// of each agent's from the row's heads). Each record of an agent `hashes` takes has its own hash too, worked
/// out from its fields where the row does not hold it (rows written since records are stored without it);
/// the others only the hashes the row holds, and the hash before them only where the one before held its
/// own.
fn stream_records(
    stream: &str,
    seq: i64,
    heads: &str,
    records: &str,
    hashes: impl Fn(&str) -> bool,
) -> StoreResult<Vec<AuditRecord>> {
    use crate::audit::stream::RowHead;
    let corrupt =
        |error: serde_json::Error| StoreError::Corrupt(format!("audit row {stream}/{seq} does not parse: {error}"));
    let heads: Vec<RowHead> = serde_json::from_str(heads).map_err(corrupt)?;
    let mut prev: std::collections::HashMap<String, Option<AuditText>> =
        heads.into_iter().map(|RowHead(agent, _, hash, _, _)| (agent, Some(AuditText::from(hash)))).collect();
    let stored: Vec<StoredAuditRecord> = serde_json::from_str(records).map_err(corrupt)?;
    Ok(stored
        .into_iter()
        .map(|record| {
            let Some(before) = prev.get_mut(record.agent_id.as_str()) else { return record.into_record(None) };
            let mut record = record.into_record(before.clone());
            if record.hash.is_none() && hashes(&record.agent_id) {
                let prev_hash = record.prev_hash.as_deref().unwrap_or_default();
                let hash = crate::audit::chain::chain_hash(prev_hash, &record, record.chain_seq.unwrap_or_default());
                record.hash = Some(AuditText::from(hash.as_str()));
            }
            *before = record.hash.clone();
            record
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream's row reads the same whether its records hold their hashes (as rows were written before) or
    /// not (as they are written now): where a record's hash is missing it is worked out from its fields and
    /// the one before it, the first of each agent's from the row's heads.
    #[test]
    fn a_stream_row_reads_alike_with_and_without_the_records_hashes() {
        use crate::audit::chain::{QueuedRecord, append_chained_record, append_stored_record, chain_hash, hex_text};
        let records: Vec<AuditRecord> = (0..5)
            .map(|n| {
                let agent = if n % 2 == 0 { "a" } else { "b" };
                let at = Timestamp::from_micros(1_700_000_000_000_000 + n);
                crate::audit::read_record(&format!("r{n}"), agent, at, "test://x")
            })
            .collect();
        let heads = r#"[["a",4,"hash-before-a",7,"-"],["b",0,"the-stream",2,"-"]]"#;
        let mut chains: std::collections::HashMap<&str, (i64, String)> =
            [("a", (4, "hash-before-a".to_owned())), ("b", (0, "the-stream".to_owned()))].into();
        let (mut old, mut new, mut hashes) = (b"[".to_vec(), b"[".to_vec(), Vec::new());
        for record in &records {
            let (seq, hash) = chains.get_mut(record.agent_id.as_str()).expect("a chain");
            *seq += 1;
            if old.len() > 1 {
                old.push(b',');
                new.push(b',');
            }
            let queued = QueuedRecord::from(record);
            let digits = append_stored_record(&mut old, hash, &queued, *seq);
            assert_eq!(append_chained_record(&mut new, hash, &queued, *seq), digits);
            assert_eq!(hex_text(&digits), chain_hash(hash, record, *seq));
            *hash = hex_text(&digits).to_owned();
            hashes.push(hash.clone());
        }
        old.push(b']');
        new.push(b']');
        let (old, new) = (String::from_utf8(old).expect("UTF-8"), String::from_utf8(new).expect("UTF-8"));
        assert_eq!(
            old.len() - new.len(),
            records.len() * ",\"\"".len() + hashes.iter().map(String::len).sum::<usize>()
        );
        let read = |records: &str, hashes: &dyn Fn(&str) -> bool| {
            let read = stream_records("the-stream", 1, heads, records, hashes).expect("a row that parses");
            read.iter().map(|record| serde_json::to_value(record).expect("JSON")).collect::<Vec<_>>()
        };
        let listed = read(&new, &|_| true);
        assert_eq!(listed, read(&old, &|_| true));
        let field = |n: usize, name: &str| listed[n][name].as_str().map(str::to_owned);
        for (n, hash) in hashes.iter().enumerate() {
            assert_eq!(field(n, "hash").as_ref(), Some(hash));
        }
        assert_eq!(field(0, "prevHash").as_deref(), Some("hash-before-a"));
        assert_eq!(field(1, "prevHash").as_deref(), Some("the-stream"));
        assert_eq!(field(2, "prevHash"), field(0, "hash"));
        assert_eq!(field(3, "prevHash"), field(1, "hash"));
        assert_eq!(field(4, "prevHash"), field(2, "hash"));
        // Verification works the hashes out itself: it is given only those the row holds.
        assert!(read(&new, &|_| false).iter().all(|record| record["hash"].is_null()));
        assert_eq!(read(&old, &|_| false), listed);
        // A listing of one agent's records works out only theirs.
        let of_b = read(&new, &|agent| agent == "b");
        for (n, record) in of_b.iter().enumerate() {
            match n % 2 {
                1 => assert_eq!(record, &listed[n]),
                _ => assert!(record["hash"].is_null(), "{record}"),
            }
        }
    }

    #[test]
    fn scopes_round_trip() {
        let scopes = vec![Scope::Mcp, Scope::Registry];
        assert_eq!(scopes_text(&scopes), "mcp,registry");
        assert_eq!(parse_scopes("mcp,registry").ok(), Some(scopes));
        assert_eq!(parse_scopes("").ok(), Some(vec![]));
        assert!(parse_scopes("mcp,root").is_err());
    }

    #[test]
    fn digests_cover_content() {
        let a = record_digest(&"record", Some(&Content::Text("one".into())));
        let b = record_digest(&"record", Some(&Content::Text("two".into())));
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
    }
}
