use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{
    Api, Backend, expect_json, expect_problem, expect_status, is_unset, spawn_app, str_of, timestamp,
};

both!(prompts_crud, prompt_errors);

fn research_prompt() -> Value {
    json!({
        "title": "Research",
        "description": "Research a topic",
        "arguments": [
            {"name": "topic", "title": "Topic", "description": "What to research", "required": true},
            {"name": "depth", "completions": ["shallow", "deep"]}
        ],
        "messages": [
            {"role": "user", "content": {"type": "text",
                "text": "Research {{ topic }}.{% if depth == 'deep' %} Cover recent advances, key players and applications.{% endif %}"}},
            {"role": "assistant", "content": {"type": "text", "text": "I will research {{ topic }}."}},
            {"role": "user", "content": {"type": "resource_link", "uri": "docs://topics/{{ topic }}", "name": "topic"}},
            {"role": "user", "content": {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}}
        ]
    })
}

async fn prompts_crud(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    let path = "/admin/v1/agents/bot/prompts/research";

    let prompt = research_prompt();
    let response = app.op(Method::PUT, path).json(&prompt).send().await.unwrap();
    let created = expect_json(response, StatusCode::CREATED).await;
    assert_eq!(created["name"], "research");
    for member in ["title", "description", "arguments", "messages"] {
        assert_eq!(created[member], prompt[member], "member {member}");
    }
    timestamp(&created, "createdAt");
    timestamp(&created, "updatedAt");

    // Get one: the admin view includes the arguments' completions.
    let response = app.op(Method::GET, path).send().await.unwrap();
    let fetched = expect_json(response, StatusCode::OK).await;
    assert_eq!(fetched, created);
    assert_eq!(fetched["arguments"][1]["completions"], json!(["shallow", "deep"]));

    // Replace: 200.
    let replacement = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "Hi {{ name }}"}}],
        "arguments": [{"name": "name"}]});
    let response = app.op(Method::PUT, path).json(&replacement).send().await.unwrap();
    let replaced = expect_json(response, StatusCode::OK).await;
    assert_eq!(replaced["messages"], replacement["messages"]);
    assert_eq!(replaced["createdAt"], created["createdAt"]);
    assert!(is_unset(&replaced, "title") && is_unset(&replaced, "description"), "{replaced}");

    // Names: case matters, dots, dashes and underscores are allowed. The list is ordered by name, bytewise.
    let minimal = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "x"}}]});
    for name in ["Zeta", "alpha", "a.b-c_d", "0numeric"] {
        let response =
            app.op(Method::PUT, &format!("/admin/v1/agents/bot/prompts/{name}")).json(&minimal).send().await.unwrap();
        let created = expect_json(response, StatusCode::CREATED).await;
        assert_eq!(created["name"], name);
    }
    let response = app.op(Method::GET, "/admin/v1/agents/bot/prompts").send().await.unwrap();
    let list = expect_json(response, StatusCode::OK).await;
    let names: Vec<&str> = list["items"].as_array().unwrap().iter().map(|p| str_of(p, "name")).collect();
    assert_eq!(names, ["0numeric", "Zeta", "a.b-c_d", "alpha", "research"]);
    assert!(list.get("nextCursor").is_none());

    // Delete: 204, then 404 for reading and deleting.
    expect_status(app.op(Method::DELETE, path).send().await.unwrap(), StatusCode::NO_CONTENT).await;
    expect_problem(app.op(Method::GET, path).send().await.unwrap(), StatusCode::NOT_FOUND).await;
    expect_problem(app.op(Method::DELETE, path).send().await.unwrap(), StatusCode::NOT_FOUND).await;
    let items = app.list_all("/admin/v1/agents/bot/prompts", None).await;
    assert_eq!(items.len(), 4);
}

async fn prompt_errors(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    let path = "/admin/v1/agents/bot/prompts/p";
    let put = |body: Value| app.op(Method::PUT, path).json(&body).send();
    let text_message = |text: &str| json!({"messages": [{"role": "user", "content": {"type": "text", "text": text}}]});

    // A message text that does not compile: 422, and the detail carries the template error.
    let response = put(text_message("Hello {{ name ")).await.unwrap();
    let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    let detail = str_of(&problem, "detail").to_lowercase();
    assert!(detail.contains("syntax error") || detail.contains("unexpected"), "no template error in: {problem}");
    let response = put(text_message("{% if x %}never closed")).await.unwrap();
    expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    let response = put(text_message("{% for %}")).await.unwrap();
    expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    // A template in a resource link's URI is compiled too.
    let response = put(json!({"messages": [{"role": "user",
        "content": {"type": "resource_link", "uri": "docs://{{ broken", "name": "x"}}]}))
    .await
    .unwrap();
    expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;

    // A template that reads a variable no argument declares: 422 naming it, and nothing is stored.
    let undeclared = json!({"arguments": [{"name": "topic"}],
        "messages": [{"role": "user", "content": {"type": "text", "text": "{{ topic }} in {{ depth }}"}}]});
    let problem = expect_problem(put(undeclared).await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY).await;
    let detail = str_of(&problem, "detail");
    assert!(detail.contains("not declared in arguments") && detail.contains(r#""depth""#), "{problem}");
    let response = app.op(Method::GET, path).send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;

    // Other invalid values.
    let invalid = [
        ("unknown role", json!({"messages": [{"role": "system", "content": {"type": "text", "text": "x"}}]})),
        ("unknown field", json!({"messages": [], "colour": "red"})),
        (
            "unknown argument field",
            json!({"arguments": [{"name": "a", "colour": "red"}], "messages": [{"role": "user", "content": {"type": "text", "text": "x"}}]}),
        ),
        (
            "unknown message field",
            json!({"messages": [{"role": "user", "content": {"type": "text", "text": "x"}, "colour": "red"}]}),
        ),
    ];
    for (case, body) in invalid {
        let response = put(body).await.unwrap();
        let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert!(!str_of(&problem, "detail").is_empty(), "{case}: {problem}");
    }

    // An invalid name in the path.
    for name in [".hidden", "-dash", "x".repeat(129).as_str()] {
        let response = app
            .op(Method::PUT, &format!("/admin/v1/agents/bot/prompts/{name}"))
            .json(&text_message("x"))
            .send()
            .await
            .unwrap();
        expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    }

    // Wrong types, unparsable JSON.
    for body in [
        json!({"messages": "hello"}),
        json!({"messages": [{"role": 1, "content": {"type": "text", "text": "x"}}]}),
        json!({"title": 5, "messages": []}),
        json!({"arguments": [{"name": "a", "required": "yes"}], "messages": []}),
    ] {
        expect_problem(put(body).await.unwrap(), StatusCode::BAD_REQUEST).await;
    }
    let response = app.op(Method::PUT, path).header("content-type", "application/json").body("{\"messages\": [").send();
    expect_problem(response.await.unwrap(), StatusCode::BAD_REQUEST).await;

    // Nothing was stored.
    expect_problem(app.op(Method::GET, path).send().await.unwrap(), StatusCode::NOT_FOUND).await;
    assert!(app.list_all("/admin/v1/agents/bot/prompts", None).await.is_empty());

    // A failed replace leaves the stored prompt as it was.
    let mut good = text_message("good {{ x }}");
    good["arguments"] = json!([{"name": "x"}]);
    expect_json(put(good).await.unwrap(), StatusCode::CREATED).await;
    expect_problem(put(text_message("bad {{ x ")).await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY).await;
    let stored = expect_json(app.op(Method::GET, path).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(stored["messages"][0]["content"]["text"], "good {{ x }}");

    // An absent agent, an absent prompt.
    let response =
        app.op(Method::PUT, "/admin/v1/agents/absent/prompts/p").json(&text_message("x")).send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let response = app.op(Method::GET, "/admin/v1/agents/absent/prompts").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let response = app.op(Method::DELETE, "/admin/v1/agents/bot/prompts/absent").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
}
