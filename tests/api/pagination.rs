use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Api, Backend, TestApp, expect_json, expect_problem, expect_problem_in, spawn_app, str_of, uris};

both!(resource_pages, agent_key_prompt_template_pages, cursor_errors, limit_errors);

/// Text fragments whose bytewise order differs from any linguistic collation (case, punctuation, digits).
const MIXED: [&str; 10] = ["A", "a", "B", "b", "_", "-", "Z", "~", "0", "%41"];

/// 250 URIs whose bytewise order is not their creation order nor a linguistic order.
fn many_uris() -> Vec<String> {
    (0..250).map(|i| format!("test://p/{}{:03}", MIXED[(i * 7) % MIXED.len()], 249 - i)).collect()
}

async fn store_many(app: &TestApp, agent: &str, uris: &[String]) {
    let upsert: Vec<Value> = uris.iter().map(|uri| json!({"uri": uri, "name": uri, "text": uri})).collect();
    let response = app
        .op(Method::POST, &format!("/admin/v1/agents/{agent}/resources/batch"))
        .json(&json!({"upsert": upsert}))
        .send()
        .await
        .unwrap();
    expect_json(response, StatusCode::OK).await;
}

fn sorted(mut values: Vec<String>) -> Vec<String> {
    values.sort_unstable(); // `String`'s order is bytewise.
    values
}

async fn resource_pages(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    let all = many_uris();
    store_many(&app, "bot", &all).await;
    let expected = sorted(all);
    let path = "/admin/v1/agents/bot/resources";

    // Page sizes, and how many pages each gives: every URI exactly once, in bytewise order.
    for (limit, page_count) in
        [(Some(100), 3), (Some(7), 36), (Some(125), 2), (Some(1), 250), (None, 3), (Some(250), 1), (Some(1000), 1)]
    {
        let pages = app.list_pages(path, limit).await;
        assert_eq!(pages.len(), page_count, "limit {limit:?}");
        let items: Vec<Value> = pages.into_iter().flatten().collect();
        assert_eq!(uris(&items), expected, "limit {limit:?}: not every URI exactly once in bytewise order");
    }

    // The default page is 100 items with a cursor.
    let response = app.op(Method::GET, path).send().await.unwrap();
    let first = expect_json(response, StatusCode::OK).await;
    assert_eq!(first["items"].as_array().unwrap().len(), 100);
    assert!(first["nextCursor"].is_string());

    // `cursor=` (empty) is the first page; the same cursor always gives the same page.
    let response = app.op(Method::GET, path).query(&[("cursor", "")]).send().await.unwrap();
    assert_eq!(expect_json(response, StatusCode::OK).await, first);
    let cursor = str_of(&first, "nextCursor");
    let page = |cursor: &str| app.op(Method::GET, path).query(&[("cursor", cursor)]).send();
    let second = expect_json(page(cursor).await.unwrap(), StatusCode::OK).await;
    let again = expect_json(page(cursor).await.unwrap(), StatusCode::OK).await;
    assert_eq!(second, again);
    assert_eq!(uris(second["items"].as_array().unwrap()), expected[100..200]);

    // Another agent's resources never show up.
    app.create_agent("other").await;
    app.put_text("other", "test://p/0000", "other").await;
    assert_eq!(uris(&app.list_all(path, Some(100)).await), expected);
}

async fn agent_key_prompt_template_pages(backend: Backend) {
    let app = spawn_app(backend).await;

    // Agents, by id.
    let ids: Vec<String> =
        (0..23).map(|i| format!("{}{}{:02}", ["a", "0", "z", "m"][i % 4], ["-", "_", ""][i % 3], 22 - i)).collect();
    for id in &ids {
        app.create_agent(id).await;
    }
    let expected = sorted(ids);
    for (limit, page_count) in [(5, 5), (23, 1), (22, 2)] {
        let pages = app.list_pages("/admin/v1/agents", Some(limit)).await;
        assert_eq!(pages.len(), page_count, "agents, limit {limit}");
        let listed: Vec<String> = pages.iter().flatten().map(|a| str_of(a, "id").to_owned()).collect();
        assert_eq!(listed, expected, "agents, limit {limit}");
    }

    // Keys, by creation (createdAt, id).
    let agent = expected[0].clone();
    let mut key_ids = Vec::new();
    for _ in 0..13 {
        key_ids.push(app.issue_key(&agent, &["mcp"]).await.id);
    }
    for (limit, page_count) in [(4, 4), (13, 1), (1, 13)] {
        let pages = app.list_pages(&format!("/admin/v1/agents/{agent}/keys"), Some(limit)).await;
        assert_eq!(pages.len(), page_count, "keys, limit {limit}");
        let listed: Vec<String> = pages.iter().flatten().map(|k| str_of(k, "id").to_owned()).collect();
        assert_eq!(listed, key_ids, "keys, limit {limit}");
    }

    // Prompts, by name.
    let names: Vec<String> = (0..17)
        .map(|i| format!("{}{}{:02}", ["A", "a", "B", "b", "Z", "z", "0"][i % 7], ["", ".", "-", "_"][i % 4], 16 - i))
        .collect();
    let prompt = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "x"}}]});
    for name in &names {
        let response = app
            .op(Method::PUT, &format!("/admin/v1/agents/{agent}/prompts/{name}"))
            .json(&prompt)
            .send()
            .await
            .unwrap();
        expect_json(response, StatusCode::CREATED).await;
    }
    let expected_names = sorted(names);
    for (limit, page_count) in [(3, 6), (17, 1)] {
        let pages = app.list_pages(&format!("/admin/v1/agents/{agent}/prompts"), Some(limit)).await;
        assert_eq!(pages.len(), page_count, "prompts, limit {limit}");
        let listed: Vec<String> = pages.iter().flatten().map(|p| str_of(p, "name").to_owned()).collect();
        assert_eq!(listed, expected_names, "prompts, limit {limit}");
    }

    // Templates, by uriTemplate.
    let templates: Vec<String> =
        (0..9).map(|i| format!("t://{}/{{id}}{}", MIXED[(i * 3) % MIXED.len()], 8 - i)).collect();
    for template in &templates {
        let response = app
            .op(Method::PUT, &format!("/admin/v1/agents/{agent}/resource-templates"))
            .json(&json!({"uriTemplate": template, "name": template}))
            .send()
            .await
            .unwrap();
        expect_json(response, StatusCode::CREATED).await;
    }
    let expected_templates = sorted(templates);
    for (limit, page_count) in [(2, 5), (9, 1)] {
        let pages = app.list_pages(&format!("/admin/v1/agents/{agent}/resource-templates"), Some(limit)).await;
        assert_eq!(pages.len(), page_count, "templates, limit {limit}");
        let listed: Vec<String> = pages.iter().flatten().map(|t| str_of(t, "uriTemplate").to_owned()).collect();
        assert_eq!(listed, expected_templates, "templates, limit {limit}");
    }
}

/// The `nextCursor` of the first page of `path` with `limit=2`.
async fn first_cursor(app: &TestApp, path: &str) -> String {
    let response = app.op(Method::GET, path).query(&[("limit", "2")]).send().await.unwrap();
    let page = expect_json(response, StatusCode::OK).await;
    str_of(&page, "nextCursor").to_owned()
}

async fn cursor_errors(backend: Backend) {
    let app = spawn_app(backend).await;
    for agent in ["bot", "other", "third"] {
        app.create_agent(agent).await;
        for i in 0..5 {
            app.put_text(agent, &format!("test://{i}"), "x").await;
        }
    }
    let prompt = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "x"}}]});
    for name in ["p1", "p2", "p3"] {
        let response =
            app.op(Method::PUT, &format!("/admin/v1/agents/bot/prompts/{name}")).json(&prompt).send().await.unwrap();
        expect_json(response, StatusCode::CREATED).await;
    }
    for i in 0..3 {
        let response = app
            .op(Method::PUT, "/admin/v1/agents/bot/resource-templates")
            .json(&json!({"uriTemplate": format!("t://{i}/{{x}}"), "name": "t"}))
            .send()
            .await
            .unwrap();
        expect_json(response, StatusCode::CREATED).await;
    }
    let resources = "/admin/v1/agents/bot/resources";
    let cursor = first_cursor(&app, resources).await;
    let get = |path: &str, cursor: &str| app.op(Method::GET, path).query(&[("limit", "2"), ("cursor", cursor)]).send();
    expect_json(get(resources, &cursor).await.unwrap(), StatusCode::OK).await;

    // Tampered cursors: one character changed (at every position), cut short, lengthened, or made up.
    let mut tampered: Vec<String> = (0..cursor.len())
        .map(|i| {
            let mut bytes = cursor.clone().into_bytes();
            // 'g' and 'A' differ in the high bits, which every base64 character position carries.
            bytes[i] = if bytes[i] == b'g' { b'A' } else { b'g' };
            String::from_utf8(bytes).unwrap()
        })
        .collect();
    tampered.push(cursor[..cursor.len() - 1].to_owned());
    tampered.push(cursor[..cursor.len() / 2].to_owned());
    tampered.push(format!("{cursor}A"));
    tampered.push(format!("{cursor}{cursor}"));
    tampered.extend(["not-a-cursor", "!!!", "AAAA", "eyJhZnRlciI6InRlc3Q6Ly8wIn0", "%00"].map(str::to_owned));
    for bad in &tampered {
        let response = get(resources, bad).await.unwrap();
        let problem = expect_problem(response, StatusCode::BAD_REQUEST).await;
        assert!(!str_of(&problem, "detail").is_empty(), "cursor {bad:?}: {problem}");
    }

    // A cursor is bound to its agent and to its kind of list.
    let other_cursor = first_cursor(&app, "/admin/v1/agents/other/resources").await;
    expect_problem(get(resources, &other_cursor).await.unwrap(), StatusCode::BAD_REQUEST).await;
    expect_problem(get("/admin/v1/agents/third/resources", &cursor).await.unwrap(), StatusCode::BAD_REQUEST).await;
    for path in ["/admin/v1/agents/bot/prompts", "/admin/v1/agents/bot/resource-templates", "/admin/v1/agents"] {
        expect_problem(get(path, &cursor).await.unwrap(), StatusCode::BAD_REQUEST).await;
    }
    let prompt_cursor = first_cursor(&app, "/admin/v1/agents/bot/prompts").await;
    expect_problem(get(resources, &prompt_cursor).await.unwrap(), StatusCode::BAD_REQUEST).await;
    let template_cursor = first_cursor(&app, "/admin/v1/agents/bot/resource-templates").await;
    expect_problem(get("/admin/v1/agents/bot/prompts", &template_cursor).await.unwrap(), StatusCode::BAD_REQUEST).await;
    let agents_cursor = first_cursor(&app, "/admin/v1/agents").await;
    expect_problem(get("/admin/v1/agents/bot/keys", &agents_cursor).await.unwrap(), StatusCode::BAD_REQUEST).await;
    expect_problem(get(resources, &agents_cursor).await.unwrap(), StatusCode::BAD_REQUEST).await;

    // A cursor survives a restart of the server: its key is kept in the database.
    let replica = crate::helpers::spawn_app_on(app.db.clone()).await;
    let response = replica.op(Method::GET, resources).query(&[("limit", "2"), ("cursor", &cursor)]).send().await;
    let page = expect_json(response.unwrap(), StatusCode::OK).await;
    assert_eq!(uris(page["items"].as_array().unwrap()), ["test://2", "test://3"]);
}

async fn limit_errors(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    for path in [
        "/admin/v1/agents",
        "/admin/v1/agents/bot/resources",
        "/admin/v1/agents/bot/keys",
        "/admin/v1/agents/bot/prompts",
        "/admin/v1/agents/bot/resource-templates",
    ] {
        for limit in ["0", "1001", "abc", "-1", "1.5", "99999999999999999999"] {
            let response = app.op(Method::GET, path).query(&[("limit", limit)]).send().await.unwrap();
            expect_problem_in(response, &[StatusCode::BAD_REQUEST, StatusCode::UNPROCESSABLE_ENTITY]).await;
        }
        for limit in ["1", "1000"] {
            let response = app.op(Method::GET, path).query(&[("limit", limit)]).send().await.unwrap();
            expect_json(response, StatusCode::OK).await;
        }
    }
}
