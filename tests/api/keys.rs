use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{
    Api, Backend, expect_json, expect_problem, expect_status, is_unset, spawn_app, str_of, timestamp,
};

both!(keys_issue_list_revoke, key_errors);

/// Checks the contract's key format: `bak_` then at least 32 base62 characters.
fn assert_key_shape(key: &str) {
    let random = key.strip_prefix("bak_").unwrap_or_else(|| panic!("key {key:?} does not start with bak_"));
    assert!(random.len() >= 32, "key {key:?} has fewer than 32 characters after bak_");
    assert!(random.bytes().all(|b| b.is_ascii_alphanumeric()), "key {key:?} is not base62");
}

async fn keys_issue_list_revoke(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    app.create_agent("other").await;

    // Defaults: scopes ["mcp"], no name, no expiry.
    let response = app.op(Method::POST, "/admin/v1/agents/bot/keys").json(&json!({})).send().await.unwrap();
    assert_eq!(response.headers()["cache-control"], "no-store", "the only copy of a key is never cached");
    let plain = expect_json(response, StatusCode::CREATED).await;
    let key = str_of(&plain, "key");
    assert_key_shape(key);
    assert_eq!(str_of(&plain, "prefix"), &key[..12]);
    assert_eq!(plain["scopes"], json!(["mcp"]));
    assert!(is_unset(&plain, "expiresAt"), "{plain}");
    assert!(!str_of(&plain, "id").is_empty());
    timestamp(&plain, "createdAt");

    // Everything given.
    let expires = (chrono::Utc::now() + chrono::Duration::days(30)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let response = app
        .op(Method::POST, "/admin/v1/agents/bot/keys")
        .json(&json!({"name": "ci", "scopes": ["mcp", "registry"], "expiresAt": expires}))
        .send()
        .await
        .unwrap();
    let full = expect_json(response, StatusCode::CREATED).await;
    assert_key_shape(str_of(&full, "key"));
    assert_eq!(full["name"], "ci");
    let mut scopes: Vec<&str> = full["scopes"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    scopes.sort_unstable();
    assert_eq!(scopes, ["mcp", "registry"]);
    assert_eq!(timestamp(&full, "expiresAt"), chrono::DateTime::parse_from_rfc3339(&expires).unwrap());

    let response =
        app.op(Method::POST, "/admin/v1/agents/bot/keys").json(&json!({"scopes": ["registry"]})).send().await.unwrap();
    let registry = expect_json(response, StatusCode::CREATED).await;
    assert_eq!(registry["scopes"], json!(["registry"]));

    // Every key is different.
    let keys = [str_of(&plain, "key"), str_of(&full, "key"), str_of(&registry, "key")];
    assert!(keys[0] != keys[1] && keys[1] != keys[2] && keys[0] != keys[2]);

    // The list shows every key, in creation order, never the key itself.
    let response = app.op(Method::GET, "/admin/v1/agents/bot/keys").send().await.unwrap();
    let text = expect_status(response, StatusCode::OK).await;
    for key in keys {
        assert!(!text.contains(key), "the key list contains a plain key: {text}");
    }
    let list: Value = serde_json::from_str(&text).unwrap();
    let items = list["items"].as_array().unwrap();
    let ids: Vec<&str> = items.iter().map(|k| str_of(k, "id")).collect();
    assert_eq!(ids, [str_of(&plain, "id"), str_of(&full, "id"), str_of(&registry, "id")]);
    for (item, created) in items.iter().zip([&plain, &full, &registry]) {
        assert!(item.get("key").is_none(), "a listed key has `key`: {item}");
        for member in ["id", "name", "prefix", "scopes", "createdAt", "expiresAt"] {
            assert_eq!(item.get(member).filter(|v| !v.is_null()), created.get(member).filter(|v| !v.is_null()));
        }
        assert!(is_unset(item, "revokedAt"), "{item}");
    }
    // Another agent's list is its own.
    assert!(app.list_all("/admin/v1/agents/other/keys", None).await.is_empty());

    // The key works; after revocation it does not, and the list says when it was revoked.
    let registry_key = str_of(&registry, "key");
    let response = app.with_key(Method::GET, "/admin/v1/agents/bot/resources", registry_key).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    let registry_id = str_of(&registry, "id");
    let response = app.op(Method::DELETE, &format!("/admin/v1/agents/bot/keys/{registry_id}")).send().await.unwrap();
    let body = expect_status(response, StatusCode::NO_CONTENT).await;
    assert!(body.is_empty());
    let response = app.with_key(Method::GET, "/admin/v1/agents/bot/resources", registry_key).send().await.unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED).await;
    let items = app.list_all("/admin/v1/agents/bot/keys", None).await;
    let revoked = items.iter().find(|k| k["id"] == registry["id"]).expect("a revoked key stays listed");
    timestamp(revoked, "revokedAt");
    let still = items.iter().find(|k| k["id"] == plain["id"]).unwrap();
    assert!(is_unset(still, "revokedAt"));

    // The key was used: lastUsedAt is set (written asynchronously, at most once a minute).
    crate::helpers::eventually("lastUsedAt of a used key", || async {
        let items = app.list_all("/admin/v1/agents/bot/keys", None).await;
        let item = items.into_iter().find(|k| k["id"] == registry["id"]).unwrap();
        (!is_unset(&item, "lastUsedAt")).then(|| timestamp(&item, "lastUsedAt"))
    })
    .await;
}

async fn key_errors(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    app.create_agent("other").await;
    let other_key = app.issue_key("other", &["mcp"]).await;

    let post = |body: Value| app.op(Method::POST, "/admin/v1/agents/bot/keys").json(&body).send();

    // An unknown scope, a past or malformed expiry, an unknown field: invalid values.
    let past = (chrono::Utc::now() - chrono::Duration::minutes(1)).to_rfc3339();
    for body in [
        json!({"scopes": ["admin"]}),
        json!({"scopes": ["mcp", "everything"]}),
        json!({"expiresAt": past}),
        json!({"expiresAt": "tomorrow"}),
        json!({"name": "x", "colour": "red"}),
    ] {
        let response = post(body.clone()).await.unwrap();
        let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert!(!str_of(&problem, "detail").is_empty(), "{body}: {problem}");
    }

    // Wrong types and unparsable JSON.
    for body in [json!({"scopes": "mcp"}), json!({"name": 5}), json!({"scopes": [1]}), json!({"expiresAt": 17})] {
        let response = post(body).await.unwrap();
        expect_problem(response, StatusCode::BAD_REQUEST).await;
    }
    let response = app
        .op(Method::POST, "/admin/v1/agents/bot/keys")
        .header("content-type", "application/json")
        .body("{")
        .send()
        .await
        .unwrap();
    expect_problem(response, StatusCode::BAD_REQUEST).await;

    // Nothing was issued.
    assert!(app.list_all("/admin/v1/agents/bot/keys", None).await.is_empty());

    // An absent agent has no keys.
    let response = app.op(Method::POST, "/admin/v1/agents/absent/keys").json(&json!({})).send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let response = app.op(Method::GET, "/admin/v1/agents/absent/keys").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;

    // Revoking an unknown key, or another agent's key through this agent, is 404 and changes nothing.
    let response = app.op(Method::DELETE, "/admin/v1/agents/bot/keys/no-such-key").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let response = app.op(Method::DELETE, &format!("/admin/v1/agents/bot/keys/{}", other_key.id)).send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let response =
        app.op(Method::DELETE, &format!("/admin/v1/agents/absent/keys/{}", other_key.id)).send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let response = app.with_key(Method::GET, "/admin/v1/agents/other/resources", &other_key.key).send().await.unwrap();
    // An `mcp` key cannot use the admin API, but it is still a valid key: 403, not 401.
    expect_problem(response, StatusCode::FORBIDDEN).await;
    let listed = app.list_all("/admin/v1/agents/other/keys", None).await;
    assert!(is_unset(&listed[0], "revokedAt"), "{listed:?}");
}
