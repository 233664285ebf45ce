use rand::Rng;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{
    Api, Backend, base64, expect_json, expect_problem, expect_problem_in, expect_status, is_unset, spawn_app, str_of,
    timestamp, unbase64, uris,
};

both!(resources_crud, resource_errors, resource_content_round_trips, resource_uris_are_opaque_keys, size_limits);

/// The members of a resource as the admin API shows it without content.
const RESOURCE_MEMBERS: [&str; 10] =
    ["uri", "name", "title", "description", "mimeType", "size", "annotations", "_meta", "createdAt", "updatedAt"];

fn assert_without_content(resource: &Value) {
    assert!(resource.get("text").is_none() && resource.get("blob").is_none(), "content where none is due: {resource}");
    for member in resource.as_object().unwrap().keys() {
        assert!(RESOURCE_MEMBERS.contains(&member.as_str()), "unexpected member `{member}` in {resource}");
    }
    timestamp(resource, "createdAt");
    timestamp(resource, "updatedAt");
}

async fn resources_crud(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    let path = "/admin/v1/agents/bot/resources";

    // Create: 201, without content, size computed in bytes.
    let full = json!({
        "uri": "docs://guide/intro",
        "name": "intro",
        "title": "Introduction",
        "description": "Start here",
        "mimeType": "text/markdown",
        "annotations": {"audience": ["user"], "priority": 0.5},
        "_meta": {"example.com/owner": "docs-team"},
        "text": "# Héllo"
    });
    let response = app.op(Method::PUT, path).json(&full).send().await.unwrap();
    let created = expect_json(response, StatusCode::CREATED).await;
    assert_without_content(&created);
    for member in ["uri", "name", "title", "description", "mimeType", "annotations", "_meta"] {
        assert_eq!(created[member], full[member], "member {member}");
    }
    assert_eq!(created["size"], 8, "size is the UTF-8 length in bytes");

    // Read with content.
    let response = app.get_content("bot", "docs://guide/intro").await;
    let read = expect_json(response, StatusCode::OK).await;
    assert_eq!(read["text"], "# Héllo");
    assert!(read.get("blob").is_none_or(Value::is_null), "{read}");
    for member in RESOURCE_MEMBERS {
        assert_eq!(read.get(member), created.get(member), "member {member}");
    }

    // Replace: 200, same createdAt, new content and size; optional members not given are cleared.
    let response = app
        .op(Method::PUT, path)
        .json(&json!({"uri": "docs://guide/intro", "name": "intro v2", "text": "second"}))
        .send()
        .await
        .unwrap();
    let replaced = expect_json(response, StatusCode::OK).await;
    assert_without_content(&replaced);
    assert_eq!(replaced["name"], "intro v2");
    assert_eq!(replaced["size"], 6);
    assert_eq!(replaced["createdAt"], created["createdAt"]);
    assert!(timestamp(&replaced, "updatedAt") >= timestamp(&created, "updatedAt"));
    for member in ["title", "description", "mimeType", "annotations", "_meta"] {
        assert!(is_unset(&replaced, member), "a replace keeps `{member}`: {replaced}");
    }
    let read = expect_json(app.get_content("bot", "docs://guide/intro").await, StatusCode::OK).await;
    assert_eq!(read["text"], "second");

    // Text replaced by a blob.
    let response = app
        .op(Method::PUT, path)
        .json(&json!({"uri": "docs://guide/intro", "name": "intro", "mimeType": "application/octet-stream", "blob": base64(&[0, 1, 2])}))
        .send()
        .await
        .unwrap();
    let replaced = expect_json(response, StatusCode::OK).await;
    assert_eq!(replaced["size"], 3);
    let read = expect_json(app.get_content("bot", "docs://guide/intro").await, StatusCode::OK).await;
    assert_eq!(unbase64(str_of(&read, "blob")), [0, 1, 2]);
    assert!(read.get("text").is_none_or(Value::is_null), "{read}");

    // More resources; the list is in URI order and never carries content.
    app.put_text("bot", "docs://guide/b", "b").await;
    app.put_text("bot", "docs://a", "a").await;
    let response = app.op(Method::GET, path).send().await.unwrap();
    let list = expect_json(response, StatusCode::OK).await;
    let items = list["items"].as_array().unwrap();
    assert_eq!(uris(items), ["docs://a", "docs://guide/b", "docs://guide/intro"]);
    items.iter().for_each(assert_without_content);
    assert!(list.get("nextCursor").is_none());

    // Delete: 204, then 404 for reading and deleting again.
    let response = app.op(Method::DELETE, path).query(&[("uri", "docs://guide/b")]).send().await.unwrap();
    let body = expect_status(response, StatusCode::NO_CONTENT).await;
    assert!(body.is_empty());
    expect_problem(app.get_content("bot", "docs://guide/b").await, StatusCode::NOT_FOUND).await;
    let response = app.op(Method::DELETE, path).query(&[("uri", "docs://guide/b")]).send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    // What cannot be a URI is an invalid value, not an absent resource.
    for invalid in ["no scheme", ""] {
        expect_problem(app.get_content("bot", invalid).await, StatusCode::UNPROCESSABLE_ENTITY).await;
        let response = app.op(Method::DELETE, path).query(&[("uri", invalid)]).send().await.unwrap();
        expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    }
    let items = app.list_all(path, None).await;
    assert_eq!(uris(&items), ["docs://a", "docs://guide/intro"]);

    // A deleted URI can be created again (201).
    let response = app.put_resource("bot", &json!({"uri": "docs://guide/b", "name": "b", "text": ""})).await;
    let again = expect_json(response, StatusCode::CREATED).await;
    assert_eq!(again["size"], 0);
}

async fn resource_errors(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    app.put_text("bot", "test://existing", "keep me").await;
    let put = |body: Value| app.op(Method::PUT, "/admin/v1/agents/bot/resources").json(&body).send();

    let too_long = format!("test://{}", "a".repeat(2048 - "test://".len() + 1));
    assert_eq!(too_long.len(), 2049);
    let invalid = [
        ("both text and blob", json!({"uri": "test://x", "name": "x", "text": "a", "blob": base64(b"a")})),
        ("neither text nor blob", json!({"uri": "test://x", "name": "x"})),
        ("bad base64", json!({"uri": "test://x", "name": "x", "blob": "not base64!!"})),
        ("relative URI", json!({"uri": "relative/path", "name": "x", "text": "a"})),
        ("no scheme", json!({"uri": "//host/path", "name": "x", "text": "a"})),
        ("space in URI", json!({"uri": "test://a b", "name": "x", "text": "a"})),
        ("empty URI", json!({"uri": "", "name": "x", "text": "a"})),
        ("URI over 2048 bytes", json!({"uri": too_long, "name": "x", "text": "a"})),
        ("unknown field", json!({"uri": "test://x", "name": "x", "text": "a", "colour": "red"})),
    ];
    for (case, body) in invalid {
        let response = put(body).await.unwrap();
        let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert!(!str_of(&problem, "detail").is_empty(), "{case}: {problem}");
    }

    let wrong_types = [
        json!({"uri": "test://x", "name": 5, "text": "a"}),
        json!({"uri": 5, "name": "x", "text": "a"}),
        json!({"uri": "test://x", "name": "x", "text": 5}),
        json!({"uri": "test://x", "name": "x", "blob": [1, 2]}),
        json!("test://x"),
    ];
    for body in wrong_types {
        let response = put(body).await.unwrap();
        expect_problem(response, StatusCode::BAD_REQUEST).await;
    }
    let response = app
        .op(Method::PUT, "/admin/v1/agents/bot/resources")
        .header("content-type", "application/json")
        .body(r#"{"uri": "test://x", "name": "x", "text": "unterminated}"#)
        .send()
        .await
        .unwrap();
    expect_problem(response, StatusCode::BAD_REQUEST).await;

    // The longest URI is accepted.
    let longest = format!("test://{}", "a".repeat(2048 - "test://".len()));
    assert_eq!(longest.len(), 2048);
    let response = put(json!({"uri": longest, "name": "long", "text": "a"})).await.unwrap();
    expect_json(response, StatusCode::CREATED).await;

    // Nothing refused was stored, the existing resource is untouched.
    let items = app.list_all("/admin/v1/agents/bot/resources", None).await;
    assert_eq!(uris(&items), [longest.as_str(), "test://existing"]);
    let read = expect_json(app.get_content("bot", "test://existing").await, StatusCode::OK).await;
    assert_eq!(read["text"], "keep me");

    // Reads and deletes of absent things.
    expect_problem(app.get_content("bot", "test://absent").await, StatusCode::NOT_FOUND).await;
    let response =
        app.op(Method::DELETE, "/admin/v1/agents/bot/resources").query(&[("uri", "test://absent")]).send().await;
    expect_problem(response.unwrap(), StatusCode::NOT_FOUND).await;
    let response = app.op(Method::GET, "/admin/v1/agents/bot/resources/content").send().await.unwrap();
    expect_problem_in(response, &[StatusCode::BAD_REQUEST, StatusCode::UNPROCESSABLE_ENTITY]).await;

    // An absent agent.
    let response = app.put_resource("absent", &json!({"uri": "test://x", "name": "x", "text": "a"})).await;
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let response = app.op(Method::GET, "/admin/v1/agents/absent/resources").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    expect_problem(app.get_content("absent", "test://existing").await, StatusCode::NOT_FOUND).await;
}

async fn resource_content_round_trips(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;

    let every_byte: Vec<u8> = (0..=255u8).collect();
    let mut random = vec![0u8; 5 * 1024 + 3];
    rand::rng().fill(&mut random[..]);
    let blobs: [(&str, Vec<u8>); 4] = [
        ("test://blob/every-byte", every_byte),
        ("test://blob/random", random),
        ("test://blob/empty", Vec::new()),
        ("test://blob/zeros", vec![0u8; 1000]),
    ];
    for (uri, bytes) in &blobs {
        let response = app.put_resource("bot", &json!({"uri": uri, "name": uri, "blob": base64(bytes)})).await;
        let created = expect_json(response, StatusCode::CREATED).await;
        assert_eq!(created["size"], bytes.len(), "{uri}");
    }
    for (uri, bytes) in &blobs {
        let read = expect_json(app.get_content("bot", uri).await, StatusCode::OK).await;
        assert_eq!(&unbase64(str_of(&read, "blob")), bytes, "{uri} did not round-trip byte for byte");
        assert_eq!(read["size"], bytes.len());
    }

    let texts = [
        ("test://text/unicode", "Grüße, 世界! 🐝 \u{1F600} ∑ — \"quoted\" \\ backslash\ttab\r\nnewline"),
        ("test://text/empty", ""),
        ("test://text/markup", "{{ not a template }} {% neither %} <b>&amp;</b>"),
    ];
    for (uri, text) in texts {
        let created = app.put_text("bot", uri, text).await;
        assert_eq!(created["size"], text.len(), "{uri}");
        let read = expect_json(app.get_content("bot", uri).await, StatusCode::OK).await;
        assert_eq!(read["text"], text, "{uri} did not round-trip");
    }

    // NUL is valid UTF-8 and valid in a JSON string: it must round-trip, or be refused as an invalid value;
    // it must never be a server error.
    let response = app.put_resource("bot", &json!({"uri": "test://text/nul", "name": "nul", "text": "a\u{0}b"})).await;
    if response.status() == StatusCode::UNPROCESSABLE_ENTITY {
        expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    } else {
        expect_json(response, StatusCode::CREATED).await;
        let read = expect_json(app.get_content("bot", "test://text/nul").await, StatusCode::OK).await;
        assert_eq!(read["text"], "a\u{0}b");
    }

    // Large content close to the default limit of 4 MiB round-trips too.
    let mut large = vec![0u8; 3 * 1024 * 1024];
    rand::rng().fill(&mut large[..]);
    let response =
        app.put_resource("bot", &json!({"uri": "test://blob/large", "name": "large", "blob": base64(&large)})).await;
    expect_json(response, StatusCode::CREATED).await;
    let read = expect_json(app.get_content("bot", "test://blob/large").await, StatusCode::OK).await;
    assert!(unbase64(str_of(&read, "blob")) == large, "a 3 MiB blob did not round-trip");
}

async fn resource_uris_are_opaque_keys(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    app.create_agent("other").await;

    // A file URI is a key like any other: the gateway's own filesystem is never read.
    app.put_text("bot", "file:///etc/hostname", "stored, not read from disk").await;
    let read = expect_json(app.get_content("bot", "file:///etc/hostname").await, StatusCode::OK).await;
    assert_eq!(read["text"], "stored, not read from disk");
    expect_problem(app.get_content("bot", "file:///etc/passwd").await, StatusCode::NOT_FOUND).await;

    // URIs that differ only in case, encoding or a query are different resources.
    let distinct = ["test://Case", "test://case", "test://a%20b", "test://a%2520b", "test://q?x=1&y=2", "test://q?x=1"];
    for (i, uri) in distinct.iter().enumerate() {
        app.put_text("bot", uri, &i.to_string()).await;
    }
    for (i, uri) in distinct.iter().enumerate() {
        let read = expect_json(app.get_content("bot", uri).await, StatusCode::OK).await;
        assert_eq!(read["text"], i.to_string(), "{uri}");
        assert_eq!(read["uri"], *uri);
    }

    // Agents do not share resources: the same URI is separate per agent.
    expect_problem(app.get_content("other", "test://Case").await, StatusCode::NOT_FOUND).await;
    let response = app.put_resource("other", &json!({"uri": "test://Case", "name": "other", "text": "other"})).await;
    expect_json(response, StatusCode::CREATED).await;
    let read = expect_json(app.get_content("bot", "test://Case").await, StatusCode::OK).await;
    assert_eq!(read["text"], "0");
    let response = app.op(Method::DELETE, "/admin/v1/agents/other/resources").query(&[("uri", "test://Case")]).send();
    expect_status(response.await.unwrap(), StatusCode::NO_CONTENT).await;
    let read = expect_json(app.get_content("bot", "test://Case").await, StatusCode::OK).await;
    assert_eq!(read["text"], "0");
}

async fn size_limits(backend: Backend) {
    let app = crate::helpers::spawn_app_with(backend, |config| {
        config.limits.max_body_bytes = 64 * 1024;
        config.limits.max_resource_bytes = 1024;
    })
    .await;
    app.create_agent("bot").await;

    // Content at the limit is fine; one byte more is 413, as text or as blob.
    app.put_text("bot", "test://at-limit", &"a".repeat(1024)).await;
    let response =
        app.put_resource("bot", &json!({"uri": "test://blob-at-limit", "name": "x", "blob": base64(&[7; 1024])})).await;
    expect_json(response, StatusCode::CREATED).await;
    let response = app.put_resource("bot", &json!({"uri": "test://over", "name": "x", "text": "a".repeat(1025)})).await;
    expect_problem(response, StatusCode::PAYLOAD_TOO_LARGE).await;
    let response =
        app.put_resource("bot", &json!({"uri": "test://over", "name": "x", "blob": base64(&[7; 1025])})).await;
    expect_problem(response, StatusCode::PAYLOAD_TOO_LARGE).await;
    let batch = json!({"upsert": [{"uri": "test://ok", "name": "x", "text": "ok"}, {"uri": "test://over", "name": "x", "text": "a".repeat(1025)}]});
    let response = app.op(Method::POST, "/admin/v1/agents/bot/resources/batch").json(&batch).send().await.unwrap();
    expect_problem(response, StatusCode::PAYLOAD_TOO_LARGE).await;

    // A body over the limit is 413 in the problem format, whatever it holds.
    let response =
        app.put_resource("bot", &json!({"uri": "test://huge", "name": "x", "text": "a".repeat(70 * 1024)})).await;
    expect_problem(response, StatusCode::PAYLOAD_TOO_LARGE).await;
    let response = app
        .op(Method::POST, "/admin/v1/agents")
        .json(&json!({"id": "big", "name": "x".repeat(70 * 1024)}))
        .send()
        .await
        .unwrap();
    expect_problem(response, StatusCode::PAYLOAD_TOO_LARGE).await;

    let items = app.list_all("/admin/v1/agents/bot/resources", None).await;
    assert_eq!(uris(&items), ["test://at-limit", "test://blob-at-limit"]);
    assert_eq!(app.list_all("/admin/v1/agents", None).await.len(), 1);
}
