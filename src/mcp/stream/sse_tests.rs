use std::collections::HashSet;

use serde_json::{Value, json};

use super::*;
use crate::domain::AgentId;
use crate::domain::time::Timestamp;

fn event(seq: i64, resources: bool, prompts: bool, uris: &[&str]) -> ChangeEvent {
    ChangeEvent {
        agent_id: AgentId::parse("bot").expect("id"),
        seq,
        updated_uris: uris.iter().map(|uri| (*uri).to_owned()).collect(),
        resources_list_changed: resources,
        prompts_list_changed: prompts,
        created_at: Timestamp::from_micros(0),
    }
}

/// The `id` and the JSON `data` of one SSE event.
fn parse(frame: &[u8]) -> (Option<String>, Value) {
    let text = std::str::from_utf8(frame).expect("utf-8");
    assert!(text.ends_with("\n\n"), "an event ends with a blank line: {text:?}");
    let mut id = None;
    let mut data = String::new();
    for line in text.lines() {
        if let Some(value) = line.strip_prefix("id: ") {
            id = Some(value.to_owned());
        } else if let Some(value) = line.strip_prefix("data: ") {
            data.push_str(value);
        }
    }
    let data = if data.trim().is_empty() { Value::Null } else { serde_json::from_str(&data).expect("json data") };
    (id, data)
}

fn interest(resources: bool, prompts: bool, uris: &[&str]) -> Interest {
    Interest {
        resources_list: resources,
        prompts_list: prompts,
        uris: uris.iter().map(|uri| (*uri).to_owned()).collect::<HashSet<_>>(),
    }
}

#[test]
fn event_ids_round_trip() {
    for id in
        [EventId { epoch: 0x7fff_ffff_ffff_ffff, seq: 12, index: Some(3) }, EventId { epoch: 1, seq: 0, index: None }]
    {
        assert_eq!(EventId::parse(&id.encode()), Some(id));
    }
    for bad in ["", "x.1", "1", "1.-2", "1.2.3.4", "1.2.x", "zz.1.1"] {
        assert_eq!(EventId::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn legacy_frames_are_filtered_and_carry_ids() {
    let frames = EventFrames::build(&event(7, true, false, &["test://a", "test://b \"q\""]), 0xabc);
    let all: Vec<_> = frames.legacy(&interest(true, true, &["test://b \"q\""]), None).map(|f| parse(&f)).collect();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].0.as_deref(), Some("abc.7.0"));
    assert_eq!(all[0].1, json!({"jsonrpc": "2.0", "method": "notifications/resources/list_changed"}));
    assert_eq!(all[1].0.as_deref(), Some("abc.7.3"));
    assert_eq!(
        all[1].1,
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "test://b \"q\""}})
    );
    let after: Vec<_> = frames.legacy(&interest(true, true, &["test://a"]), Some(0)).map(|f| parse(&f)).collect();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].0.as_deref(), Some("abc.7.2"));
    assert_eq!(frames.legacy(&interest(false, true, &[]), None).count(), 0);
}

#[test]
fn modern_frames_are_tagged_with_the_listen_id() {
    let frames = EventFrames::build(&event(3, false, true, &["test://a"]), 1);
    let id = RawValue::from_string("\"listen-1\"".to_owned()).expect("raw");
    let tagged: Vec<_> = frames.modern(&interest(false, true, &["test://a"]), &id).map(|f| parse(&f)).collect();
    assert_eq!(tagged.len(), 2);
    assert_eq!(tagged[0].0, None, "modern streams carry no event ids");
    assert_eq!(
        tagged[0].1,
        json!({"jsonrpc": "2.0", "method": "notifications/prompts/list_changed",
            "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": "listen-1"}}})
    );
    assert_eq!(
        tagged[1].1,
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
            "params": {"uri": "test://a", "_meta": {"io.modelcontextprotocol/subscriptionId": "listen-1"}}})
    );
    let numeric = RawValue::from_string("7".to_owned()).expect("raw");
    let tagged: Vec<_> = frames.modern(&interest(false, true, &[]), &numeric).map(|f| parse(&f)).collect();
    assert_eq!(tagged[0].1["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], json!(7));
}

#[test]
fn resync_sets_name_everything_then_the_head() {
    let uris: HashSet<String> = ["test://b".to_owned(), "test://a".to_owned()].into();
    let frames = EventFrames::resync(2, 40, &uris);
    let legacy: Vec<_> =
        frames.legacy(&interest(true, true, &["test://a", "test://b"]), None).map(|f| parse(&f)).collect();
    assert_eq!(legacy.len(), 5);
    assert!(legacy[..4].iter().all(|(id, _)| id.is_none()));
    assert_eq!(legacy[2].1["params"]["uri"], "test://a");
    assert_eq!(legacy[4], (Some("2.40".to_owned()), Value::Null));
}

#[test]
fn listen_messages() {
    let id = RawValue::from_string("1".to_owned()).expect("raw");
    let (_, ack) = parse(&acknowledgement(&id, &json!({"promptsListChanged": true})));
    assert_eq!(
        ack,
        json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": 1},
                "notifications": {"promptsListChanged": true}}})
    );
    let (_, end) = parse(&final_result(&id));
    assert_eq!(
        end,
        json!({"jsonrpc": "2.0", "id": 1,
            "result": {"resultType": "complete", "_meta": {"io.modelcontextprotocol/subscriptionId": 1}}})
    );
}
