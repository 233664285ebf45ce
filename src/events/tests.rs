use super::*;

fn agent() -> AgentId {
    AgentId::parse("bot").expect("agent id")
}

fn session() -> SessionDigest {
    SessionDigest::from_hex(&"ab".repeat(32)).expect("digest")
}

fn uri() -> ResourceUri {
    ResourceUri::parse("test://a?b=1").expect("uri")
}

/// Every message and its NOTIFY payload, exactly as replicas of every version write and read it.
fn payloads() -> Vec<(BusMessage, String)> {
    let digest = "ab".repeat(32);
    vec![
        (BusMessage::Change { agent: agent(), seq: 7 }, r#"{"t":"change","agent":"bot","seq":7}"#.to_owned()),
        (BusMessage::AgentChanged { agent: agent() }, r#"{"t":"agent_changed","agent":"bot"}"#.to_owned()),
        (BusMessage::AgentDeleted { agent: agent() }, r#"{"t":"agent_deleted","agent":"bot"}"#.to_owned()),
        (
            BusMessage::KeyRevoked { agent: agent(), key: "k1".to_owned() },
            r#"{"t":"key_revoked","agent":"bot","key":"k1"}"#.to_owned(),
        ),
        (
            BusMessage::KeyChanged { agent: agent(), key: "k1".to_owned() },
            r#"{"t":"key_changed","agent":"bot","key":"k1"}"#.to_owned(),
        ),
        (
            BusMessage::SessionEnded { agent: agent(), session: session() },
            format!(r#"{{"t":"session_ended","agent":"bot","session":"{digest}"}}"#),
        ),
        (
            BusMessage::Subscribed { agent: agent(), session: session(), uri: uri() },
            format!(r#"{{"t":"subscribed","agent":"bot","session":"{digest}","uri":"test://a?b=1"}}"#),
        ),
        (
            BusMessage::Unsubscribed { agent: agent(), session: session(), uri: uri() },
            format!(r#"{{"t":"unsubscribed","agent":"bot","session":"{digest}","uri":"test://a?b=1"}}"#),
        ),
        (
            BusMessage::StreamOpened { agent: agent(), session: session(), stream: "s1".to_owned() },
            format!(r#"{{"t":"stream_opened","agent":"bot","session":"{digest}","stream":"s1"}}"#),
        ),
        (BusMessage::Barrier { id: "b1".to_owned() }, r#"{"t":"barrier","id":"b1"}"#.to_owned()),
        (
            BusMessage::Ack { barrier: "b1".to_owned(), replica: "r1".to_owned() },
            r#"{"t":"ack","barrier":"b1","replica":"r1"}"#.to_owned(),
        ),
        (BusMessage::Beat { replica: "r1".to_owned() }, r#"{"t":"beat","replica":"r1"}"#.to_owned()),
        (BusMessage::Offline, r#"{"t":"offline"}"#.to_owned()),
        (BusMessage::Resync, r#"{"t":"resync"}"#.to_owned()),
    ]
}

#[test]
fn payloads_keep_their_wire_form() {
    for (message, payload) in payloads() {
        assert_eq!(serde_json::to_string(&message).expect("serialises"), payload);
        assert_eq!(serde_json::from_str::<BusMessage>(&payload).expect("parses"), message);
    }
}

#[test]
fn payloads_with_invalid_ids_are_refused() {
    for payload in [
        r#"{"t":"change","agent":"Not An Id","seq":7}"#,
        r#"{"t":"session_ended","agent":"bot","session":"short"}"#,
        r#"{"t":"subscribed","agent":"bot","session":"ab","uri":"no scheme"}"#,
    ] {
        assert!(serde_json::from_str::<BusMessage>(payload).is_err(), "{payload}");
    }
}

#[test]
fn caches_apply_offline_resync_and_what_is_stale() {
    let gate = CacheGate::default();
    let generation = gate.generation();
    let mut forgotten = Vec::new();
    for message in payloads().into_iter().map(|(message, _)| message) {
        let mut all = false;
        gate.apply(&message, || all = true, |stale| forgotten.push(format!("{stale:?}")));
        assert_eq!(all, matches!(message, BusMessage::Offline | BusMessage::Resync), "{message:?}");
        if message == BusMessage::Offline {
            assert!(!gate.is_open() && !gate.may_keep(generation));
        }
    }
    assert!(gate.is_open());
    // Change, AgentChanged, AgentDeleted, KeyRevoked, KeyChanged, SessionEnded: nothing else reaches a cache.
    assert_eq!(forgotten.len(), 6);
    gate.invalidate();
    assert!(!gate.may_keep(generation) && gate.may_keep(gate.generation()));
}
