use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{
    Api, Backend, expect_json, expect_problem, expect_status, is_unset, spawn_app, str_of, timestamp,
};

both!(templates_crud, template_errors);

const PATH: &str = "/admin/v1/agents/bot/resource-templates";

fn template_uris(items: &[Value]) -> Vec<&str> {
    items.iter().map(|t| str_of(t, "uriTemplate")).collect()
}

async fn templates_crud(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;

    let full = json!({
        "uriTemplate": "docs://papers/{id}",
        "name": "paper",
        "title": "A paper",
        "description": "Papers by id",
        "mimeType": "text/plain",
        "annotations": {"audience": ["assistant"]},
        "text": "Paper {{ id }}"
    });
    let response = app.op(Method::PUT, PATH).json(&full).send().await.unwrap();
    let created = expect_json(response, StatusCode::CREATED).await;
    for member in ["uriTemplate", "name", "title", "description", "mimeType", "annotations"] {
        assert_eq!(created[member], full[member], "member {member}");
    }
    timestamp(&created, "createdAt");
    timestamp(&created, "updatedAt");

    // Replace by the same uriTemplate: 200.
    let response = app
        .op(Method::PUT, PATH)
        .json(&json!({"uriTemplate": "docs://papers/{id}", "name": "paper v2", "text": "Paper number {{ id }}"}))
        .send()
        .await
        .unwrap();
    let replaced = expect_json(response, StatusCode::OK).await;
    assert_eq!(replaced["name"], "paper v2");
    assert_eq!(replaced["createdAt"], created["createdAt"]);
    assert!(is_unset(&replaced, "title"), "{replaced}");

    // Templates without text may use every RFC 6570 level, including explode and prefix modifiers.
    for template in ["files://{/path*}", "search://q{?query,page}", "short://{name:3}", "a://{x}/{y}"] {
        let response =
            app.op(Method::PUT, PATH).json(&json!({"uriTemplate": template, "name": template})).send().await.unwrap();
        expect_json(response, StatusCode::CREATED).await;
    }
    // Levels 1-3 with text are fine.
    for template in ["level2://{+path}", "level3://x{/a,b}{?q,r}{#frag}", "level1://{a}-{b}"] {
        let response = app
            .op(Method::PUT, PATH)
            .json(&json!({"uriTemplate": template, "name": template, "text": "{{ a }}"}))
            .send()
            .await
            .unwrap();
        expect_json(response, StatusCode::CREATED).await;
    }

    // The list is ordered by uriTemplate, bytewise.
    let response = app.op(Method::GET, PATH).send().await.unwrap();
    let list = expect_json(response, StatusCode::OK).await;
    let items = list["items"].as_array().unwrap();
    let listed = template_uris(items);
    let mut expected = listed.clone();
    expected.sort_unstable();
    assert_eq!(listed, expected);
    assert_eq!(listed.len(), 8);
    assert!(list.get("nextCursor").is_none());
    let paper = items.iter().find(|t| t["uriTemplate"] == "docs://papers/{id}").unwrap();
    assert_eq!(paper["text"], "Paper number {{ id }}");

    // Delete: 204, then 404.
    let delete = |template: &str| app.op(Method::DELETE, PATH).query(&[("uriTemplate", template)]).send();
    expect_status(delete("docs://papers/{id}").await.unwrap(), StatusCode::NO_CONTENT).await;
    expect_problem(delete("docs://papers/{id}").await.unwrap(), StatusCode::NOT_FOUND).await;
    expect_problem(delete("never://{x}").await.unwrap(), StatusCode::NOT_FOUND).await;
    let items = app.list_all(PATH, None).await;
    assert_eq!(items.len(), 7);
    assert!(!template_uris(&items).contains(&"docs://papers/{id}"));
}

async fn template_errors(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    let put = |body: Value| app.op(Method::PUT, PATH).json(&body).send();

    let invalid = [
        ("unclosed expression", json!({"uriTemplate": "test://{unclosed", "name": "x"})),
        ("stray closing brace", json!({"uriTemplate": "test://a}b", "name": "x"})),
        ("empty expression", json!({"uriTemplate": "test://{}", "name": "x"})),
        ("text does not compile", json!({"uriTemplate": "test://{foo}", "name": "x", "text": "{{ foo "})),
        ("unclosed block in text", json!({"uriTemplate": "test://{foo}", "name": "x", "text": "{% if foo %}x"})),
        ("explode with text", json!({"uriTemplate": "test://files{/path*}", "name": "x", "text": "{{ path }}"})),
        ("prefix with text", json!({"uriTemplate": "test://{name:3}", "name": "x", "text": "{{ name }}"})),
        ("unknown field", json!({"uriTemplate": "test://{x}", "name": "x", "colour": "red"})),
    ];
    for (case, body) in invalid {
        let response = put(body).await.unwrap();
        let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert!(!str_of(&problem, "detail").is_empty(), "{case}: {problem}");
    }

    for body in [
        json!({"uriTemplate": 5, "name": "x"}),
        json!({"uriTemplate": "test://{x}", "name": ["x"]}),
        json!({"uriTemplate": "test://{x}", "name": "x", "text": 5}),
    ] {
        expect_problem(put(body).await.unwrap(), StatusCode::BAD_REQUEST).await;
    }
    let response =
        app.op(Method::PUT, PATH).header("content-type", "application/json").body("{\"uriTemplate\":").send().await;
    expect_problem(response.unwrap(), StatusCode::BAD_REQUEST).await;

    // Nothing was stored.
    assert!(app.list_all(PATH, None).await.is_empty());

    // A failed replace leaves the stored template as it was.
    let response = put(json!({"uriTemplate": "test://{x}", "name": "good", "text": "{{ x }}"})).await.unwrap();
    expect_json(response, StatusCode::CREATED).await;
    let response = put(json!({"uriTemplate": "test://{x}", "name": "bad", "text": "{{ x "})).await.unwrap();
    expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    let items = app.list_all(PATH, None).await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["name"], "good");
    assert_eq!(items[0]["text"], "{{ x }}");

    // An absent agent.
    let response = app
        .op(Method::PUT, "/admin/v1/agents/absent/resource-templates")
        .json(&json!({"uriTemplate": "test://{x}", "name": "x"}))
        .send()
        .await
        .unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let response = app.op(Method::GET, "/admin/v1/agents/absent/resource-templates").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
}
