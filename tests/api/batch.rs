use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Api, Backend, TestApp, base64, expect_json, expect_problem, spawn_app, unbase64, uris};

both!(batch_applies_all, batch_is_all_or_nothing);

const PATH: &str = "/admin/v1/agents/bot/resources/batch";

/// Every resource of `bot` with its content, as (uri, text or blob).
async fn snapshot(app: &TestApp) -> Vec<(String, Value)> {
    let items = app.list_all("/admin/v1/agents/bot/resources", None).await;
    let mut state = Vec::new();
    for uri in uris(&items) {
        let read = expect_json(app.get_content("bot", &uri).await, StatusCode::OK).await;
        let content = read.get("text").filter(|v| !v.is_null()).or(read.get("blob")).cloned().unwrap();
        state.push((uri, json!({"content": content, "name": read["name"], "size": read["size"]})));
    }
    state
}

async fn batch_applies_all(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    for uri in ["test://keep", "test://replace", "test://remove"] {
        app.put_text("bot", uri, "old").await;
    }

    let batch = json!({
        "upsert": [
            {"uri": "test://new-text", "name": "new text", "text": "fresh"},
            {"uri": "test://new-blob", "name": "new blob", "blob": base64(&[255, 0, 128])},
            {"uri": "test://replace", "name": "replaced", "text": "new"}
        ],
        "delete": ["test://remove"]
    });
    let response = app.op(Method::POST, PATH).json(&batch).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;

    let items = app.list_all("/admin/v1/agents/bot/resources", None).await;
    assert_eq!(uris(&items), ["test://keep", "test://new-blob", "test://new-text", "test://replace"]);
    let read = expect_json(app.get_content("bot", "test://new-text").await, StatusCode::OK).await;
    assert_eq!(read["text"], "fresh");
    let read = expect_json(app.get_content("bot", "test://new-blob").await, StatusCode::OK).await;
    assert_eq!(unbase64(read["blob"].as_str().unwrap()), [255, 0, 128]);
    assert_eq!(read["size"], 3);
    let read = expect_json(app.get_content("bot", "test://replace").await, StatusCode::OK).await;
    assert_eq!((read["text"].clone(), read["name"].clone()), (json!("new"), json!("replaced")));
    let read = expect_json(app.get_content("bot", "test://keep").await, StatusCode::OK).await;
    assert_eq!(read["text"], "old");

    // Only deletes, only upserts.
    let response = app.op(Method::POST, PATH).json(&json!({"delete": ["test://keep"]})).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    let response = app
        .op(Method::POST, PATH)
        .json(&json!({"upsert": [{"uri": "test://only", "name": "only", "text": "x"}]}))
        .send()
        .await
        .unwrap();
    expect_json(response, StatusCode::OK).await;
    let items = app.list_all("/admin/v1/agents/bot/resources", None).await;
    assert_eq!(uris(&items), ["test://new-blob", "test://new-text", "test://only", "test://replace"]);
}

async fn batch_is_all_or_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    for uri in ["test://a", "test://b", "test://c"] {
        app.put_text("bot", uri, uri).await;
    }
    let before = snapshot(&app).await;

    let good = |i: usize| json!({"uri": format!("test://new/{i}"), "name": "n", "text": "n"});
    let replace_a = json!({"uri": "test://a", "name": "changed", "text": "changed"});

    // One invalid item (index 3) among valid ones, including a replace and a delete: nothing happens.
    let invalid_items = [
        json!({"uri": "not a uri", "name": "bad", "text": "x"}),
        json!({"uri": "test://both", "name": "bad", "text": "x", "blob": base64(b"x")}),
        json!({"uri": "test://neither", "name": "bad"}),
        json!({"uri": "test://badblob", "name": "bad", "blob": "***"}),
        json!({"uri": "test://unknown", "name": "bad", "text": "x", "colour": "red"}),
    ];
    for invalid in invalid_items {
        let batch = json!({
            "upsert": [good(0), replace_a.clone(), good(2), invalid.clone(), good(4)],
            "delete": ["test://b"]
        });
        let response = app.op(Method::POST, PATH).json(&batch).send().await.unwrap();
        expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert_eq!(snapshot(&app).await, before, "a refused batch changed something ({invalid})");
    }

    // Deleting a URI that does not exist: 404, nothing happens.
    let batch = json!({"upsert": [good(0), replace_a.clone()], "delete": ["test://b", "test://absent"]});
    let response = app.op(Method::POST, PATH).json(&batch).send().await.unwrap();
    let problem = expect_problem(response, StatusCode::NOT_FOUND).await;
    assert!(problem["detail"].as_str().unwrap_or_default().contains("\"test://absent\""), "names the URI: {problem}");
    assert_eq!(snapshot(&app).await, before, "a batch deleting an absent URI changed something");

    // An invalid URI to delete: 422, nothing happens.
    let batch = json!({"upsert": [good(0)], "delete": ["test://b", "relative"]});
    let response = app.op(Method::POST, PATH).json(&batch).send().await.unwrap();
    expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(snapshot(&app).await, before);

    // Malformed batches.
    for body in
        [json!({"upsert": "all"}), json!({"delete": [1]}), json!({"upsert": [{"uri": 1, "name": "x", "text": "x"}]})]
    {
        let response = app.op(Method::POST, PATH).json(&body).send().await.unwrap();
        expect_problem(response, StatusCode::BAD_REQUEST).await;
    }
    let response = app.op(Method::POST, PATH).json(&json!({"upsert": [], "remove": []})).send().await.unwrap();
    expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    let response =
        app.op(Method::POST, PATH).header("content-type", "application/json").body("{\"upsert\": [").send().await;
    expect_problem(response.unwrap(), StatusCode::BAD_REQUEST).await;
    assert_eq!(snapshot(&app).await, before);

    // A batch for an absent agent.
    let response = app
        .op(Method::POST, "/admin/v1/agents/absent/resources/batch")
        .json(&json!({"upsert": [good(0)]}))
        .send()
        .await
        .unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;

    // The same batch, valid now, applies in full.
    let batch = json!({"upsert": [good(0), replace_a.clone(), good(2)], "delete": ["test://b"]});
    let response = app.op(Method::POST, PATH).json(&batch).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    let items = app.list_all("/admin/v1/agents/bot/resources", None).await;
    assert_eq!(uris(&items), ["test://a", "test://c", "test://new/0", "test://new/2"]);
    let read = expect_json(app.get_content("bot", "test://a").await, StatusCode::OK).await;
    assert_eq!(read["text"], "changed");
}
