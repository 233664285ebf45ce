//! Every field a key can write has a size limit: over it, 413 naming the field and the limit's key, and
//! nothing changes. List pages are bounded by bytes as well as by items.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Api, Backend, TestApp, expect_json, expect_problem, spawn_app_with};
use crate::mcp_client::{Mcp, agent_with_key};

both!(oversized_fields_are_refused_and_change_nothing, list_pages_are_bounded_by_bytes);

fn small_limits(config: &mut hivegate::config::Config) {
    let limits = &mut config.limits;
    limits.max_name_bytes = 16;
    limits.max_title_bytes = 16;
    limits.max_description_bytes = 32;
    limits.max_mime_type_bytes = 24;
    limits.max_meta_bytes = 32;
    limits.max_annotations_bytes = 40;
    limits.max_uri_template_bytes = 24;
    limits.max_template_text_bytes = 64;
    limits.max_prompt_bytes = 400;
    limits.max_completions_bytes = 32;
    limits.max_prompt_arguments = 2;
}

/// Sends `request` and asserts a 413 whose detail names `field` with its size and `limits.<key>`.
async fn refused(request: reqwest::RequestBuilder, field: &str, size: usize, key: &str) {
    let response = request.send().await.unwrap();
    let problem = expect_problem(response, StatusCode::PAYLOAD_TOO_LARGE).await;
    let detail = problem["detail"].as_str().unwrap_or_default();
    let expected = format!("{field} is {size} bytes; at most");
    assert!(detail.contains(&expected) && detail.contains(&format!("(limits.{key})")), "{field}: {detail}");
}

async fn oversized_fields_are_refused_and_change_nothing(backend: Backend) {
    let app = spawn_app_with(backend, small_limits).await;
    app.create_agent("bot").await;
    let long = |n: usize| "x".repeat(n);

    // Resources: each field on its own, at one byte over its limit.
    let resource = |extra: Value| {
        let mut body = json!({"uri": "test://a", "name": "a", "text": "t"});
        for (key, value) in extra.as_object().cloned().unwrap_or_default() {
            body[key] = value;
        }
        body
    };
    let put = |body: Value| app.op(Method::PUT, "/admin/v1/agents/bot/resources").json(&body);
    refused(put(resource(json!({"name": long(17)}))), "name", 17, "max_name_bytes").await;
    refused(put(resource(json!({"title": long(17)}))), "title", 17, "max_title_bytes").await;
    refused(put(resource(json!({"description": long(33)}))), "description", 33, "max_description_bytes").await;
    refused(put(resource(json!({"mimeType": format!("text/{}", long(20))}))), "mimeType", 25, "max_mime_type_bytes")
        .await;
    // `{"k":"` + 25 + `"}` = 33 bytes of JSON.
    refused(put(resource(json!({"_meta": {"k": long(25)}}))), "_meta", 33, "max_meta_bytes").await;
    let audience = json!({"annotations": {"audience": ["user", "user", "user", "user", "user"]}});
    refused(put(resource(audience)), "annotations", 49, "max_annotations_bytes").await;
    // At the limits, accepted.
    let fits =
        resource(json!({"name": long(16), "title": long(16), "description": long(32), "_meta": {"k": long(24)}}));
    assert_eq!(put(fits).send().await.unwrap().status(), StatusCode::CREATED);
    // In a batch, the item is named.
    let batch = json!({"upsert": [resource(json!({"uri": "test://b", "description": long(40)}))]});
    let request = app.op(Method::POST, "/admin/v1/agents/bot/resources/batch").json(&batch);
    refused(request, "upsert[0]: description", 40, "max_description_bytes").await;

    // Templates: the source is measured before it is compiled.
    let template = |uri_template: &str, text: &str| json!({"uriTemplate": uri_template, "name": "t", "text": text});
    let put_template = |body: Value| app.op(Method::PUT, "/admin/v1/agents/bot/resource-templates").json(&body);
    refused(
        put_template(template(&format!("t://{}/{{a}}", long(17)), "")),
        "uriTemplate",
        25,
        "max_uri_template_bytes",
    )
    .await;
    refused(put_template(template("t://{a}", &"{{ a }}".repeat(10))), "text", 70, "max_template_text_bytes").await;

    // Prompts: arguments, each argument's fields, each templated message field, and the whole.
    let put_prompt = |body: Value| app.op(Method::PUT, "/admin/v1/agents/bot/prompts/p").json(&body);
    let message = |text: &str| json!([{"role": "user", "content": {"type": "text", "text": text}}]);
    let three = json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]);
    refused(put_prompt(json!({"arguments": three, "messages": message("hi")})), "arguments", 3, "max_prompt_arguments")
        .await;
    let argument = json!([{"name": long(17)}]);
    refused(
        put_prompt(json!({"arguments": argument, "messages": message("hi")})),
        "arguments[0].name",
        17,
        "max_name_bytes",
    )
    .await;
    let completions = json!([{"name": "a", "completions": [long(15), long(15)]}]);
    refused(
        put_prompt(json!({"arguments": completions, "messages": message("hi")})),
        "arguments[0].completions",
        37,
        "max_completions_bytes",
    )
    .await;
    refused(put_prompt(json!({"messages": message(&long(65))})), "messages[0].content", 65, "max_template_text_bytes")
        .await;
    let many: Vec<Value> =
        (0..8).map(|_| json!({"role": "user", "content": {"type": "text", "text": long(60)}})).collect();
    let response = put_prompt(json!({"messages": many})).send().await.unwrap();
    let detail = expect_problem(response, StatusCode::PAYLOAD_TOO_LARGE).await["detail"].to_string();
    assert!(detail.contains("arguments and messages") && detail.contains("limits.max_prompt_bytes"), "{detail}");
    refused(put_prompt(json!({"title": long(17), "messages": message("hi")})), "title", 17, "max_title_bytes").await;

    // Agents and keys.
    let create = json!({"id": "other", "name": long(17)});
    refused(app.op(Method::POST, "/admin/v1/agents").json(&create), "name", 17, "max_name_bytes").await;
    let patch = json!({"description": long(33)});
    refused(app.op(Method::PATCH, "/admin/v1/agents/bot").json(&patch), "description", 33, "max_description_bytes")
        .await;
    let key = json!({"name": long(17)});
    refused(app.op(Method::POST, "/admin/v1/agents/bot/keys").json(&key), "name", 17, "max_name_bytes").await;

    // Nothing of the refused changes was stored.
    let listed = |path: &'static str| {
        let app: &TestApp = &app;
        async move { expect_json(app.op(Method::GET, path).send().await.unwrap(), StatusCode::OK).await["items"].clone() }
    };
    assert_eq!(listed("/admin/v1/agents/bot/resources").await.as_array().map(Vec::len), Some(1));
    assert_eq!(listed("/admin/v1/agents/bot/resource-templates").await, json!([]));
    assert_eq!(listed("/admin/v1/agents/bot/prompts").await, json!([]));
    assert_eq!(listed("/admin/v1/agents/bot/keys").await, json!([]));
    let agents = listed("/admin/v1/agents").await;
    assert_eq!(agents.as_array().map(Vec::len), Some(1), "{agents}");
    assert!(agents[0]["description"].is_null());
}

async fn list_pages_are_bounded_by_bytes(backend: Backend) {
    let app = spawn_app_with(backend, |config| config.limits.max_page_bytes = 1000).await;
    let key = agent_with_key(&app, "bot").await;
    let expected: Vec<String> = (0..30).map(|n| format!("test://r{n:02}")).collect();
    for uri in &expected {
        let body = json!({"uri": uri, "name": uri, "description": "d".repeat(100), "text": "t"});
        assert_eq!(app.put_resource("bot", &body).await.status(), StatusCode::CREATED);
    }

    // MCP: each page's items take at most 1,000 bytes of JSON; following the cursors gives every resource
    // once, in order.
    let mcp = Mcp::new(&app, "bot", &key);
    let (mut seen, mut cursor, mut pages) = (Vec::new(), None::<String>, 0);
    loop {
        let params = cursor.as_ref().map_or(json!({}), |cursor| json!({"cursor": cursor}));
        let answer = mcp.legacy("resources/list", params).await;
        let items = answer.result()["resources"].clone();
        let bytes = serde_json::to_vec(&items).unwrap().len();
        assert!(bytes <= 1000, "a page of {bytes} bytes");
        let items = items.as_array().cloned().unwrap_or_default();
        assert!(!items.is_empty());
        seen.extend(items.iter().map(|item| item["uri"].as_str().unwrap_or_default().to_owned()));
        pages += 1;
        match answer.result().get("nextCursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, expected);
    assert!(pages >= 5, "{pages} pages");

    // Admin lists too, whatever `limit` asks for.
    let (mut seen, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let mut request = app.op(Method::GET, "/admin/v1/agents/bot/resources").query(&[("limit", "1000")]);
        if let Some(cursor) = &cursor {
            request = request.query(&[("cursor", cursor)]);
        }
        let page = expect_json(request.send().await.unwrap(), StatusCode::OK).await;
        let bytes = serde_json::to_vec(&page["items"]).unwrap().len();
        assert!(bytes <= 1000, "an admin page of {bytes} bytes");
        let items = page["items"].as_array().cloned().unwrap_or_default();
        assert!(!items.is_empty());
        seen.extend(items.iter().map(|item| item["uri"].as_str().unwrap_or_default().to_owned()));
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, expected);
}
