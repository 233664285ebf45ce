//! The registry methods over MCP, in both eras: lists and pagination, reads (text, blob, templates,
//! directories), prompts, completion, the cache staying true after admin changes, and the bounds on
//! templates (refused constructs, argument caps, the output budget).

use std::collections::BTreeSet;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Api, Backend, TestApp, expect_problem, spawn_app, str_of};
use crate::mcp_client::{Mcp, PNG, after_write, agent_with_key, seed_fixtures};

both!(
    lists_and_reads_in_both_eras,
    pagination_without_duplicates_or_gaps,
    template_and_directory_reads,
    prompts_in_both_eras,
    completion_of_prompts_and_templates,
    changes_are_seen_at_once,
    templates_are_bounded
);

async fn lists_and_reads_in_both_eras(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    seed_fixtures(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    let annotated = json!({"uri": "test://annotated", "name": "annotated", "title": "Annotated", "description": "d",
        "mimeType": "text/markdown", "annotations": {"audience": ["user"], "priority": 0.25},
        "_meta": {"com.example/x": 1}, "text": "# hi"});
    assert!(app.put_resource("bot", &annotated).await.status().is_success());

    let legacy = mcp.legacy("resources/list", json!({})).await;
    let modern = mcp.modern("resources/list", json!({})).await;
    assert_eq!(legacy.result()["resources"], modern.result()["resources"], "same items in both eras");
    let resources = legacy.result()["resources"].as_array().unwrap();
    let uris: Vec<&str> = resources.iter().map(|r| r["uri"].as_str().unwrap()).collect();
    assert_eq!(uris, ["test://annotated", "test://static-binary", "test://static-text"]);
    let first = &resources[0];
    let last_modified = first["annotations"]["lastModified"].as_str().expect("lastModified filled in").to_owned();
    assert_eq!(
        *first,
        json!({"uri": "test://annotated", "name": "annotated", "title": "Annotated", "description": "d",
            "mimeType": "text/markdown", "size": 4, "_meta": {"com.example/x": 1},
            "annotations": {"audience": ["user"], "priority": 0.25, "lastModified": last_modified}})
    );
    assert_eq!(resources[1]["size"], PNG.len());
    assert!(legacy.result().get("nextCursor").is_none());
    assert_eq!(
        modern.result().as_object().unwrap().keys().cloned().collect::<BTreeSet<_>>(),
        ["_meta", "cacheScope", "resources", "resultType", "ttlMs"].map(String::from).into()
    );

    // Text and blob reads, the blob byte-exact.
    let text = mcp.modern("resources/read", json!({"uri": "test://static-text"})).await;
    assert_eq!(
        text.result()["contents"],
        json!([{"uri": "test://static-text", "mimeType": "text/plain",
        "text": "This is the content of the static text resource."}])
    );
    assert_eq!(text.result()["resultType"], "complete");
    assert_eq!(text.result()["cacheScope"], "private");
    for answer in [
        mcp.legacy("resources/read", json!({"uri": "test://static-binary"})).await,
        mcp.modern("resources/read", json!({"uri": "test://static-binary"})).await,
    ] {
        let contents = &answer.result()["contents"][0];
        assert_eq!(contents["mimeType"], "image/png");
        assert_eq!(STANDARD.decode(contents["blob"].as_str().unwrap()).unwrap(), PNG);
        assert!(contents.get("text").is_none());
    }

    // Not found: -32002 (legacy) and -32602 (modern), HTTP 200, data exactly {uri}.
    let uri = "test://nonexistent-resource-for-conformance-testing";
    let legacy = mcp.legacy("resources/read", json!({"uri": uri})).await;
    assert_eq!(legacy.error(StatusCode::OK, -32002)["data"], json!({"uri": uri}));
    let modern = mcp.modern("resources/read", json!({"uri": uri})).await;
    assert_eq!(modern.error(StatusCode::OK, -32602)["data"], json!({"uri": uri}));
    assert_eq!(modern.body["id"], 7);

    // Templates are listed without their text.
    let templates = mcp.modern("resources/templates/list", json!({})).await;
    assert_eq!(
        templates.result()["resourceTemplates"],
        json!([{"uriTemplate": "test://template/{id}/data",
        "name": "template", "mimeType": "application/json"}])
    );
    assert_eq!(templates.result()["ttlMs"], 0);
    let legacy = mcp.legacy("resources/templates/list", json!({})).await;
    assert!(legacy.result().get("resultType").is_none() && legacy.result().get("cacheScope").is_none());
}

async fn pagination_without_duplicates_or_gaps(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    let upserts: Vec<Value> = (0..250)
        .map(|i| json!({"uri": format!("test://items/{i:03}"), "name": format!("item {i}"), "text": "x"}))
        .collect();
    let response = app
        .op(Method::POST, "/admin/v1/agents/bot/resources/batch")
        .json(&json!({"upsert": upserts, "delete": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    for modern in [false, true] {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let params = cursor.as_ref().map_or(json!({}), |c| json!({"cursor": c}));
            let answer = if modern {
                mcp.modern("resources/list", params).await
            } else {
                mcp.legacy("resources/list", params).await
            };
            let result = answer.result().clone();
            let items = result["resources"].as_array().unwrap();
            assert!(items.len() <= 100);
            seen.extend(items.iter().map(|r| r["uri"].as_str().unwrap().to_owned()));
            pages += 1;
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
        }
        let expected: Vec<String> = (0..250).map(|i| format!("test://items/{i:03}")).collect();
        assert_eq!((pages, seen), (3, expected), "modern: {modern}");
    }
    // "" is the first page; a forged or foreign cursor is -32602.
    let first = mcp.legacy("resources/list", json!({"cursor": ""})).await;
    assert_eq!(first.result()["resources"][0]["uri"], "test://items/000");
    mcp.legacy("resources/list", json!({"cursor": "not-a-cursor"})).await.error(StatusCode::OK, -32602);
    let next = first.result()["nextCursor"].as_str().unwrap().to_owned();
    mcp.modern("prompts/list", json!({"cursor": next})).await.error(StatusCode::OK, -32602);
    mcp.modern("resources/templates/list", json!({"cursor": next})).await.error(StatusCode::OK, -32602);
}

async fn template_and_directory_reads(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    seed_fixtures(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    let put_template = |body: Value| app.op(Method::PUT, "/admin/v1/agents/bot/resource-templates").json(&body).send();

    // The most literal characters win; text/plain without a mimeType; templates without text never read.
    assert!(
        put_template(json!({"uriTemplate": "test://{+rest}", "name": "catch-all", "text": "any {{ rest }}"}))
            .await
            .unwrap()
            .status()
            .is_success()
    );
    assert!(
        put_template(json!({"uriTemplate": "test://docs/{page}", "name": "docs", "text": "page {{ page }}"}))
            .await
            .unwrap()
            .status()
            .is_success()
    );
    assert!(
        put_template(json!({"uriTemplate": "test://plain/{x}", "name": "textless"}))
            .await
            .unwrap()
            .status()
            .is_success()
    );
    // The template's text, rendered with the (percent-decoded) variables, under the template's mimeType.
    let answer = mcp.modern("resources/read", json!({"uri": "test://template/123/data"})).await;
    assert_eq!(
        answer.result()["contents"],
        json!([{"uri": "test://template/123/data", "mimeType": "application/json",
        "text": "{\"id\":\"123\",\"templateTest\":true,\"data\":\"Data for ID: 123\"}"}])
    );
    let answer = mcp.legacy("resources/read", json!({"uri": "test://template/a%20b/data"})).await;
    assert!(answer.result()["contents"][0]["text"].as_str().unwrap().contains("Data for ID: a b"));
    // A stored resource with the exact URI wins over the template.
    app.put_text("bot", "test://template/7/data", "stored wins").await;
    let answer = mcp.legacy("resources/read", json!({"uri": "test://template/7/data"})).await;
    assert_eq!(answer.result()["contents"][0]["text"], "stored wins");
    let answer = mcp.legacy("resources/read", json!({"uri": "test://docs/intro"})).await;
    assert_eq!(
        answer.result()["contents"],
        json!([{"uri": "test://docs/intro", "mimeType": "text/plain", "text": "page intro"}])
    );
    let answer = mcp.legacy("resources/read", json!({"uri": "test://plain/x"})).await;
    assert_eq!(answer.result()["contents"][0]["text"], "any plain/x", "the catch-all, not the textless template");
    // Fuel: a text that needs more than a quick render's fuel is rendered in full; one that needs more than
    // the full fuel, or outgrows the output budget with the URI's variables, is -32602.
    for (template, text) in [
        ("test://count/{n}", "{% for i in range(1000) %}{{ n }}{% endfor %}"),
        ("test://runaway/{n}", "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}"),
        ("test://huge/{n}", "{% for i in range(1000) %}{{ n }}{{ n }}{% endfor %}"),
    ] {
        let body = json!({"uriTemplate": template, "name": template, "text": text});
        assert!(put_template(body).await.unwrap().status().is_success(), "{template}");
    }
    for _ in 0..2 {
        let answer = mcp.legacy("resources/read", json!({"uri": "test://count/ab"})).await;
        assert_eq!(answer.result()["contents"][0]["text"], "ab".repeat(1000));
    }
    let answer = mcp.modern("resources/read", json!({"uri": "test://runaway/1"})).await;
    assert!(answer.error(StatusCode::OK, -32602)["message"].as_str().unwrap().contains("fuel"));
    let answer = mcp.legacy("resources/read", json!({"uri": format!("test://huge/{}", "x".repeat(600))})).await;
    assert!(answer.error(StatusCode::OK, -32602)["message"].as_str().unwrap().contains("output budget"));
    // Rendered URIs never appear in resources/list.
    let listed = mcp.legacy("resources/list", json!({})).await;
    assert!(!listed.result().to_string().contains("test://docs/intro"));

    // Directory reads: itself, then the resources directly below it, in URI order.
    let dir = json!({"uri": "file:///project", "name": "project", "mimeType": "inode/directory", "text": ""});
    assert!(app.put_resource("bot", &dir).await.status().is_success());
    for (uri, text) in [
        ("file:///project/b.txt", "b"),
        ("file:///project/a.txt", "a"),
        ("file:///project/sub/deep.txt", "deep"),
        ("file:///projectile", "no"),
    ] {
        app.put_text("bot", uri, text).await;
    }
    let blob =
        json!({"uri": "file:///project/c.png", "name": "c", "mimeType": "image/png", "blob": STANDARD.encode(PNG)});
    assert!(app.put_resource("bot", &blob).await.status().is_success());
    for answer in [
        mcp.modern("resources/read", json!({"uri": "file:///project"})).await,
        mcp.legacy("resources/read", json!({"uri": "file:///project"})).await,
    ] {
        let contents = answer.result()["contents"].as_array().unwrap().clone();
        let uris: Vec<&str> = contents.iter().map(|c| c["uri"].as_str().unwrap()).collect();
        assert_eq!(
            uris,
            ["file:///project", "file:///project/a.txt", "file:///project/b.txt", "file:///project/c.png"]
        );
        assert_eq!(contents[0], json!({"uri": "file:///project", "mimeType": "inode/directory", "text": ""}));
        assert_eq!(STANDARD.decode(contents[3]["blob"].as_str().unwrap()).unwrap(), PNG);
    }
    // A trailing slash is not doubled.
    let dir = json!({"uri": "file:///slash/", "name": "slash", "mimeType": "inode/directory", "text": "listing"});
    assert!(app.put_resource("bot", &dir).await.status().is_success());
    app.put_text("bot", "file:///slash/x", "x").await;
    let answer = mcp.legacy("resources/read", json!({"uri": "file:///slash/"})).await;
    assert_eq!(answer.result()["contents"].as_array().unwrap().len(), 2);

    // Deeper resources never crowd out direct children, however many there are: 1,200 grandchildren sort
    // before the one child here.
    let dir = json!({"uri": "file:///many", "name": "many", "mimeType": "inode/directory", "text": ""});
    assert!(app.put_resource("bot", &dir).await.status().is_success());
    for chunk in 0..2 {
        let upsert: Vec<Value> = (0..600)
            .map(|i| json!({"uri": format!("file:///many/a/{chunk}-{i:04}"), "name": "deep", "text": "d"}))
            .collect();
        let response = app
            .op(Method::POST, "/admin/v1/agents/bot/resources/batch")
            .json(&json!({"upsert": upsert}))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success());
    }
    app.put_text("bot", "file:///many/b.txt", "child").await;
    let answer = mcp.legacy("resources/read", json!({"uri": "file:///many"})).await;
    let uris: Vec<String> =
        answer.result()["contents"].as_array().unwrap().iter().map(|c| c["uri"].as_str().unwrap().to_owned()).collect();
    assert_eq!(uris, ["file:///many", "file:///many/b.txt"]);

    // A value that is not an absolute URI, or one longer than any resource URI may be, is invalid params
    // saying why (not a "not found").
    let answer = mcp.legacy("resources/read", json!({"uri": "no scheme"})).await;
    assert!(answer.error(StatusCode::OK, -32602)["message"].as_str().unwrap().contains("not an absolute URI"));
    let long = format!("test://{}", "x".repeat(4096));
    let answer = mcp.legacy("resources/read", json!({"uri": long})).await;
    assert!(answer.error(StatusCode::OK, -32602)["message"].as_str().unwrap().contains("at most 2048"));
}

async fn prompts_in_both_eras(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    seed_fixtures(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);

    let listed = mcp.modern("prompts/list", json!({})).await;
    let prompts = listed.result()["prompts"].as_array().unwrap().clone();
    let names: Vec<&str> = prompts.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "test_prompt_with_arguments",
            "test_prompt_with_embedded_resource",
            "test_prompt_with_image",
            "test_simple_prompt"
        ]
    );
    assert_eq!(
        prompts[0]["arguments"],
        json!([{"name": "arg1", "description": "First", "required": true},
        {"name": "arg2", "description": "Second", "required": true}]),
        "completions are never listed"
    );
    assert_eq!(listed.result()["cacheScope"], "private");

    let answer = mcp
        .legacy(
            "prompts/get",
            json!({"name": "test_prompt_with_arguments", "arguments": {"arg1": "hello", "arg2": "world"}}),
        )
        .await;
    assert_eq!(
        *answer.result(),
        json!({"description": "A prompt with arguments", "messages": [{"role": "user", "content": {"type": "text",
            "text": "Prompt with arguments: arg1='hello', arg2='world'"}}]})
    );
    let answer = mcp.modern("prompts/get", json!({"name": "test_simple_prompt"})).await;
    assert_eq!(answer.result()["resultType"], "complete");
    assert_eq!(answer.result()["description"], "A simple prompt");
    assert!(answer.result().get("ttlMs").is_none(), "prompts/get is not a cacheable result");
    let answer = mcp
        .modern(
            "prompts/get",
            json!({"name": "test_prompt_with_embedded_resource",
        "arguments": {"resourceUri": "test://example-resource"}}),
        )
        .await;
    assert_eq!(
        answer.result()["messages"][0]["content"],
        json!({"type": "resource", "resource":
        {"uri": "test://example-resource", "mimeType": "text/plain", "text": "Embedded resource content for testing."}})
    );
    let answer = mcp.legacy("prompts/get", json!({"name": "test_prompt_with_image"})).await;
    assert_eq!(
        answer.result()["messages"][0]["content"],
        json!({"type": "image", "data": STANDARD.encode(PNG), "mimeType": "image/png"})
    );

    // Errors: missing required argument, unknown prompt, undeclared argument, rendered URI invalid.
    let missing =
        mcp.legacy("prompts/get", json!({"name": "test_prompt_with_arguments", "arguments": {"arg1": "x"}})).await;
    missing.error(StatusCode::OK, -32602);
    mcp.modern("prompts/get", json!({"name": "no_such_prompt"})).await.error(StatusCode::OK, -32602);
    mcp.legacy("prompts/get", json!({"name": "test_simple_prompt", "arguments": {"extra": "x"}}))
        .await
        .error(StatusCode::OK, -32602);
    mcp.legacy(
        "prompts/get",
        json!({"name": "test_prompt_with_embedded_resource", "arguments": {"resourceUri": "not a uri"}}),
    )
    .await
    .error(StatusCode::OK, -32602);
}

async fn completion_of_prompts_and_templates(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    seed_fixtures(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    let complete = |reference: Value, name: &str, value: &str| json!({"ref": reference, "argument": {"name": name, "value": value}});
    let prompt = json!({"type": "ref/prompt", "name": "test_prompt_with_arguments"});
    let answer = mcp.legacy("completion/complete", complete(prompt.clone(), "arg1", "par")).await;
    assert_eq!(
        *answer.result(),
        json!({"completion": {"values": ["paris", "park", "party"], "total": 3, "hasMore": false}})
    );
    let answer = mcp.modern("completion/complete", complete(prompt.clone(), "arg2", "")).await;
    assert_eq!(answer.result()["completion"], json!({"values": [], "total": 0, "hasMore": false}));
    assert_eq!(answer.result()["resultType"], "complete");
    mcp.legacy("completion/complete", complete(prompt, "nope", "")).await.error(StatusCode::OK, -32602);
    let unknown = json!({"type": "ref/prompt", "name": "absent"});
    mcp.legacy("completion/complete", complete(unknown, "a", "")).await.error(StatusCode::OK, -32602);

    // Template variables from the stored URIs that match the template; at most 100, with total and hasMore.
    let upserts: Vec<Value> = (0..120)
        .map(|i| json!({"uri": format!("test://template/{i:03}/data"), "name": "t", "text": "x"}))
        .chain([json!({"uri": "test://template/zz/other", "name": "t", "text": "x"})])
        .collect();
    let response = app
        .op(Method::POST, "/admin/v1/agents/bot/resources/batch")
        .json(&json!({"upsert": upserts, "delete": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let template = json!({"type": "ref/resource", "uri": "test://template/{id}/data"});
    let answer = mcp.legacy("completion/complete", complete(template.clone(), "id", "")).await;
    let completion = &answer.result()["completion"];
    assert_eq!(completion["values"].as_array().unwrap().len(), 100);
    assert_eq!((completion["total"].clone(), completion["hasMore"].clone()), (json!(120), json!(true)));
    assert_eq!(completion["values"][0], "000");
    let answer = mcp.modern("completion/complete", complete(template.clone(), "id", "11")).await;
    assert_eq!(
        answer.result()["completion"],
        json!({"values": ["110", "111", "112", "113", "114", "115", "116", "117", "118", "119"], "total": 10, "hasMore": false})
    );
    mcp.legacy("completion/complete", complete(template, "other", "")).await.error(StatusCode::OK, -32602);
}

async fn changes_are_seen_at_once(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    app.put_text("bot", "test://a", "one").await;
    let greeting = || async {
        let answer = mcp.legacy("prompts/get", json!({"name": "greet", "arguments": {"who": "bees"}})).await;
        answer.result()["messages"][0]["content"]["text"].as_str().unwrap().to_owned()
    };
    put_greeting(&app, "Hello {{ who }}").await;
    // Warm every cache: list, read, prompt (its template compiled), not-found.
    assert_eq!(mcp.legacy("resources/read", json!({"uri": "test://a"})).await.result()["contents"][0]["text"], "one");
    assert_eq!(mcp.legacy("resources/list", json!({})).await.result()["resources"].as_array().unwrap().len(), 1);
    assert_eq!(greeting().await, "Hello bees");
    mcp.legacy("resources/read", json!({"uri": "test://b"})).await.error(StatusCode::OK, -32002);
    for round in 0..5usize {
        let text = format!("version {round}");
        app.put_text("bot", "test://a", &text).await;
        app.put_text("bot", &format!("test://new/{round}"), "x").await;
        put_greeting(&app, &format!("{{{{ who }}}}, version {round}")).await;
        after_write(backend, "the replaced prompt", || async {
            (greeting().await == format!("bees, version {round}")).then_some(())
        })
        .await;
        after_write(backend, "the replaced content", || async {
            let answer = mcp.legacy("resources/read", json!({"uri": "test://a"})).await;
            (answer.result()["contents"][0]["text"] == text.as_str()).then_some(())
        })
        .await;
        after_write(backend, "the longer list", || async {
            let listed = mcp.modern("resources/list", json!({})).await;
            (listed.result()["resources"].as_array().unwrap().len() == round + 2).then_some(())
        })
        .await;
    }
    app.put_text("bot", "test://b", "now here").await;
    after_write(backend, "a resource that was not found before", || async {
        let answer = mcp.legacy("resources/read", json!({"uri": "test://b"})).await;
        (answer.body["result"]["contents"][0]["text"] == "now here").then_some(())
    })
    .await;
    // Agent settings too: the name is the server title.
    let response =
        app.op(Method::PATCH, "/admin/v1/agents/bot").json(&json!({"name": "Renamed"})).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    after_write(backend, "the new agent name", || async {
        let answer = mcp.modern("server/discover", json!({})).await;
        (answer.result()["_meta"]["io.modelcontextprotocol/serverInfo"]["title"] == "Renamed").then_some(())
    })
    .await;
    // A deleted resource is gone from reads and lists.
    let response =
        app.op(Method::DELETE, "/admin/v1/agents/bot/resources").query(&[("uri", "test://a")]).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    after_write(backend, "the deletion", || async {
        let answer = mcp.legacy("resources/read", json!({"uri": "test://a"})).await;
        (answer.body["error"]["code"] == -32002).then_some(())
    })
    .await;
}

/// Stores (or replaces) the prompt `greet` of agent `bot`: one message of `text`, one argument `who`.
async fn put_greeting(app: &TestApp, text: &str) {
    let prompt = json!({"arguments": [{"name": "who"}],
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}]});
    let response = app.op(Method::PUT, "/admin/v1/agents/bot/prompts/greet").json(&prompt).send().await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
}

async fn templates_are_bounded(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);

    // Constructs outside the allowed subset: 422 problem+json naming the construct and its line, nothing stored.
    let path = "/admin/v1/agents/bot/prompts/unbounded";
    for (text, construct) in [
        ("Hi {% set x = 'a' %}{{ x }}", "`{% set %}` is not allowed (line 1)"),
        ("Hi\n{{ 'x' * 9 }}", "the `*` operator is not allowed (line 2)"),
        ("{{ x|format(1) }}", "the filter `format` is not allowed (line 1)"),
        ("{{ namespace() }}", "calling `namespace()` is not allowed (line 1)"),
    ] {
        let body = json!({"messages": [{"role": "user", "content": {"type": "text", "text": text}}]});
        let response = app.op(Method::PUT, path).json(&body).send().await.unwrap();
        let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert!(str_of(&problem, "detail").contains(construct), "{text}: {problem}");
        expect_problem(app.op(Method::GET, path).send().await.unwrap(), StatusCode::NOT_FOUND).await;
    }
    let templates = "/admin/v1/agents/bot/resource-templates";
    let response = app
        .op(Method::PUT, templates)
        .json(&json!({"uriTemplate": "test://unbounded/{id}", "name": "u",
            "text": "{% for i in range(3) %}\n{% set x = id %}{% endfor %}"}))
        .send()
        .await
        .unwrap();
    let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert!(str_of(&problem, "detail").contains("`{% set %}` is not allowed (line 2)"), "{problem}");
    assert!(app.list_all(templates, None).await.is_empty(), "nothing stored");

    // prompts/get arguments: at most 64, each at most 64 KiB, 256 KiB in all; beyond, -32602.
    let echo = "/admin/v1/agents/bot/prompts/echo";
    let arguments: Vec<Value> = (0..5).map(|i| json!({"name": format!("a{i}")})).collect();
    let body = json!({"arguments": arguments,
        "messages": [{"role": "user", "content": {"type": "text", "text": "{{ a0 }}"}}]});
    assert!(app.op(Method::PUT, echo).json(&body).send().await.unwrap().status().is_success());
    let get = |arguments: Value| json!({"name": "echo", "arguments": arguments});
    let many: serde_json::Map<String, Value> = (0..65).map(|i| (format!("a{i}"), json!("x"))).collect();
    let answer = mcp.legacy("prompts/get", get(Value::Object(many))).await;
    let message = answer.error(StatusCode::OK, -32602)["message"].as_str().unwrap().to_owned();
    assert!(message.contains("65 arguments given; at most 64"), "{message}");
    let kib = |n: usize| "x".repeat(n * 1024);
    let answer = mcp.modern("prompts/get", get(json!({"a0": format!("{}y", kib(64))}))).await;
    let message = answer.error(StatusCode::OK, -32602)["message"].as_str().unwrap().to_owned();
    assert!(message.contains("argument \"a0\" is 65537 bytes; at most 65536"), "{message}");
    let five: serde_json::Map<String, Value> = (0..5).map(|i| (format!("a{i}"), json!(kib(60)))).collect();
    let answer = mcp.legacy("prompts/get", get(Value::Object(five))).await;
    let message = answer.error(StatusCode::OK, -32602)["message"].as_str().unwrap().to_owned();
    assert!(message.contains("more than 262144 bytes together"), "{message}");
    let answer = mcp.legacy("prompts/get", get(json!({"a0": kib(64)}))).await;
    assert_eq!(answer.result()["messages"][0]["content"]["text"].as_str().map(str::len), Some(64 * 1024));

    // One output budget for all the messages of a prompt: three messages of 600 KiB exceed it.
    let body = json!({"arguments": [{"name": "text", "required": true}],
        "messages": vec![json!({"role": "user", "content": {"type": "text",
            "text": "{% for i in range(10) %}{{ text }}{% endfor %}"}}); 3]});
    let large = "/admin/v1/agents/bot/prompts/large";
    assert!(app.op(Method::PUT, large).json(&body).send().await.unwrap().status().is_success());
    let answer = mcp.modern("prompts/get", json!({"name": "large", "arguments": {"text": kib(60)}})).await;
    let message = answer.error(StatusCode::OK, -32602)["message"].as_str().unwrap().to_owned();
    assert!(message.contains("messages[1]") && message.contains("output budget of 1048576 bytes"), "{message}");
    let answer = mcp.legacy("prompts/get", json!({"name": "large", "arguments": {"text": kib(30)}})).await;
    assert_eq!(answer.result()["messages"].as_array().map(Vec::len), Some(3));

    // Fuel: a prompt that needs more than a quick render's fuel is rendered in full (all its messages, from
    // a fresh budget) and answered as any other; one that needs more than the full fuel is -32602.
    let text = |text: &str| json!({"role": "user", "content": {"type": "text", "text": text}});
    let body = json!({"arguments": [{"name": "who"}],
        "messages": [text("Count, {{ who }}:"), text("{% for i in range(1000) %}{{ i }},{% endfor %}")]});
    assert!(
        app.op(Method::PUT, "/admin/v1/agents/bot/prompts/count")
            .json(&body)
            .send()
            .await
            .unwrap()
            .status()
            .is_success()
    );
    let counted: String = (0..1000).map(|i| format!("{i},")).collect();
    for answer in [
        mcp.legacy("prompts/get", json!({"name": "count", "arguments": {"who": "Ada"}})).await,
        mcp.modern("prompts/get", json!({"name": "count", "arguments": {"who": "Ada"}})).await,
    ] {
        let messages = &answer.result()["messages"];
        assert_eq!(messages[0]["content"]["text"], "Count, Ada:");
        assert_eq!(messages[1]["content"]["text"], counted.as_str());
    }
    let body =
        json!({"messages": [text("{% for i in range(10000) %}{% for j in range(10000) %}.{% endfor %}{% endfor %}")]});
    assert!(
        app.op(Method::PUT, "/admin/v1/agents/bot/prompts/runaway")
            .json(&body)
            .send()
            .await
            .unwrap()
            .status()
            .is_success()
    );
    let answer = mcp.modern("prompts/get", json!({"name": "runaway"})).await;
    let message = answer.error(StatusCode::OK, -32602)["message"].as_str().unwrap().to_owned();
    assert!(message.contains("messages[0]") && message.contains("fuel"), "{message}");
}
