//! Native TLS: the configured certificate is served, replaced without a restart when its files change (a bad
//! replacement keeps the previous one), start-up errors name the key at fault; everything else works over
//! it: client addresses, the admin API, MCP, SSE streams and their end at shutdown; `hivegate healthcheck`.

use std::path::{Path, PathBuf};

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{
    Api, Backend, HivegateProcess, OPERATOR_TOKEN, TempDir, TestApp, TestDatabase, eventually, expect_json,
    expect_problem, spawn_app_with, test_config,
};
use crate::live_client::{listen, resources_changed, summary};
use crate::mcp_client::{Mcp, agent_with_key};

both!(
    certificates_are_served_and_reloaded,
    tls_start_up_errors_name_the_file,
    healthcheck_over_tls,
    slow_handshakes_hold_up_no_one,
    console_cookie_is_secure_over_tls
);

/// A self-signed certificate for `localhost` and 127.0.0.1, and its key, in PEM and DER.
struct TestCertificate {
    cert_pem: String,
    key_pem: String,
    der: Vec<u8>,
}

impl TestCertificate {
    fn new() -> Self {
        let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("a self-signed certificate");
        Self {
            cert_pem: generated.cert.pem(),
            key_pem: generated.signing_key.serialize_pem(),
            der: generated.cert.der().to_vec(),
        }
    }

    fn root(&self) -> reqwest::Certificate {
        reqwest::Certificate::from_der(&self.der).expect("a DER certificate")
    }
}

/// The certificate and key files in a temporary directory.
struct Files {
    dir: TempDir,
}

impl Files {
    fn new(certificate: &TestCertificate) -> Self {
        let files = Self { dir: TempDir::new() };
        files.write(&certificate.cert_pem, &certificate.key_pem);
        files
    }

    fn cert(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    fn key(&self) -> PathBuf {
        self.dir.path().join("key.pem")
    }

    /// Replaces both files, each by a rename (as a secret mount or a certificate manager does).
    fn write(&self, cert: &str, key: &str) {
        replace(&self.key(), key);
        replace(&self.cert(), cert);
    }
}

fn replace(path: &Path, contents: &str) {
    let next = path.with_extension("next");
    std::fs::write(&next, contents).unwrap();
    std::fs::rename(&next, path).unwrap();
}

/// A client that trusts exactly `roots` and reports the certificate it was shown.
fn tls_client(roots: &[&TestCertificate]) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .tls_info(true)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(60));
    for root in roots {
        builder = builder.add_root_certificate(root.root());
    }
    builder.build().unwrap()
}

/// The certificate a new connection to `app` is served (DER), checked against `roots`. A client of its own:
/// the app's client keeps its HTTP/2 connection (and the certificate it was set up with).
async fn served_certificate(app: &TestApp, roots: &[&TestCertificate]) -> Vec<u8> {
    let response = tls_client(roots).get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let info = response.extensions().get::<reqwest::tls::TlsInfo>().expect("TLS information on the response");
    info.peer_certificate().expect("a peer certificate").to_vec()
}

/// The value of `hivegate_tls_certificate_reloads_total{outcome}` (0 while absent).
async fn reloads(app: &TestApp, outcome: &str) -> f64 {
    let text = app.anon(Method::GET, "/metrics").send().await.unwrap().text().await.unwrap();
    let series = format!("hivegate_tls_certificate_reloads_total{{outcome=\"{outcome}\"}} ");
    text.lines().find_map(|line| line.strip_prefix(&series)?.parse().ok()).unwrap_or(0.0)
}

async fn certificates_are_served_and_reloaded(backend: Backend) {
    let (first, second, third) = (TestCertificate::new(), TestCertificate::new(), TestCertificate::new());
    let files = Files::new(&first);
    let mut app = spawn_app_with(backend, |config| {
        config.tls.cert_path = Some(files.cert());
        config.tls.key_path = Some(files.key());
        config.tls.reload_interval_ms = 50;
        config.rate_limits.failed_auth_attempts = 2;
    })
    .await;
    assert!(app.address.starts_with("https://"), "{}", app.address);

    // Plain HTTP is not served on a TLS listener.
    let plain = app.address.replace("https://", "http://");
    assert!(crate::helpers::http_client().get(format!("{plain}/readyz")).send().await.is_err());
    // A client that trusts neither of the certificates refuses the connection.
    app.client = tls_client(&[&third]);
    assert!(app.anon(Method::GET, "/readyz").send().await.is_err(), "an untrusted certificate was accepted");

    // The first certificate is served, over HTTP/2 when the client offers it (ALPN).
    let roots = [&first, &second];
    app.client = tls_client(&roots);
    assert_eq!(served_certificate(&app, &roots).await, first.der);
    let response = app.anon(Method::GET, "/healthz").send().await.unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);

    // Everything works over it: the admin API, MCP, a stream.
    let key = agent_with_key(&app, "bot").await;
    let mut stream = listen(&app, "bot", &key, json!(1), json!({"resourcesListChanged": true})).await;
    stream.next().await;
    app.put_text("bot", "test://a", "over TLS").await;
    assert_eq!(summary(&stream.message().await), resources_changed());
    let read = Mcp::new(&app, "bot", &key).modern("resources/read", json!({"uri": "test://a"})).await;
    let result = read.result();
    assert_eq!(result["contents"][0]["text"], "over TLS", "{result}");

    // The files are replaced: new connections are served the second certificate, without a restart.
    files.write(&second.cert_pem, &second.key_pem);
    eventually("the second certificate to be served", || async {
        (served_certificate(&app, &roots).await == second.der).then_some(())
    })
    .await;
    assert_eq!(reloads(&app, "ok").await, 1.0);
    // The stream opened before is still open, on the connection set up with the first certificate.
    app.put_text("bot", "test://b", "still streaming").await;
    assert_eq!(summary(&stream.message().await), resources_changed());

    // Bad replacements are refused and counted; the second certificate stays in use.
    let bad: [(&str, &str); 3] = [
        ("not a certificate", &third.key_pem),
        (&third.cert_pem, "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n"),
        // A valid certificate with another certificate's key.
        (&third.cert_pem, &second.key_pem),
    ];
    for (refused, (cert, key)) in bad.into_iter().enumerate() {
        files.write(cert, key);
        eventually("the bad replacement to be refused", || async {
            (reloads(&app, "error").await >= (refused + 1) as f64).then_some(())
        })
        .await;
        assert_eq!(served_certificate(&app, &roots).await, second.der, "case {refused}");
    }
    // A missing file as well.
    std::fs::remove_file(files.cert()).unwrap();
    eventually("the missing file to be reported", || async { (reloads(&app, "error").await >= 4.0).then_some(()) })
        .await;
    assert_eq!(served_certificate(&app, &roots).await, second.der);
    // A good pair again is taken.
    files.write(&first.cert_pem, &first.key_pem);
    eventually("the first certificate to be served again", || async {
        (served_certificate(&app, &roots).await == first.der).then_some(())
    })
    .await;
    assert_eq!(reloads(&app, "ok").await, 2.0);

    // Client addresses reach the failed-authentication limit: two failures, then refused.
    for _ in 0..2 {
        let response = app.anon(Method::GET, "/admin/v1/agents").bearer_auth("wrong-token").send().await.unwrap();
        expect_problem(response, StatusCode::UNAUTHORIZED).await;
    }
    let response = app.op(Method::GET, "/admin/v1/agents").send().await.unwrap();
    expect_problem(response, StatusCode::TOO_MANY_REQUESTS).await;

    // Shutdown closes the stream and drains as over plain HTTP.
    app.stop().await;
    stream.expect_end().await;
}

async fn tls_start_up_errors_name_the_file(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let certificate = TestCertificate::new();
    let other = TestCertificate::new();
    let files = Files::new(&certificate);
    let missing = files.dir.path().join("missing.pem");
    let garbage = files.dir.path().join("garbage.pem");
    std::fs::write(&garbage, "-----BEGIN CERTIFICATE-----\n%%%\n-----END CERTIFICATE-----\n").unwrap();
    let other_key = files.dir.path().join("other-key.pem");
    std::fs::write(&other_key, &other.key_pem).unwrap();
    let empty = files.dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();

    let cases: [(&PathBuf, &PathBuf, &str); 6] = [
        (&missing, &files.key(), "tls.cert_path"),
        (&files.cert(), &missing, "tls.key_path"),
        (&garbage, &files.key(), "tls.cert_path"),
        (&empty, &files.key(), "tls.cert_path"),
        (&files.cert(), &empty, "tls.key_path"),
        (&files.cert(), &other_key, "tls.key_path"),
    ];
    for (cert, key, named) in cases {
        let mut config = test_config(&db);
        config.tls.cert_path = Some(cert.clone());
        config.tls.key_path = Some(key.clone());
        let error = match hivegate::app::Application::build(config).await {
            Ok(_) => panic!("started with cert {} and key {}", cert.display(), key.display()),
            Err(error) => format!("{error:#}"),
        };
        assert!(error.contains(named), "{named} is not named: {error}");
    }

    // One file without the other is a configuration error, before anything starts.
    let mut config = test_config(&db);
    config.tls.cert_path = Some(files.cert());
    let error = config.validate().expect_err("a certificate without a key").to_string();
    assert!(error.contains("tls.key_path"), "{error}");

    // Through the binary: the message names the key and the file, the exit status is a failure; the
    // certificate is checked before the database is (which is unreachable here, and would be retried).
    let dir = TempDir::new();
    let unreachable = format!("postgres://postgres@127.0.0.1:{}/postgres", crate::helpers::free_port());
    let mut command = crate::helpers::hivegate_command(dir.path(), &unreachable, Some(OPERATOR_TOKEN));
    let output = command
        .arg("serve")
        .env("HIVEGATE_LISTEN", "127.0.0.1:0")
        .env("HIVEGATE_DATABASE__STARTUP_TIMEOUT_SECS", "5")
        .env("HIVEGATE_TLS__CERT_PATH", &missing)
        .env("HIVEGATE_TLS__KEY_PATH", files.key())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("tls.cert_path") && stderr.contains("missing.pem"), "{stderr}");
}

async fn healthcheck_over_tls(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let certificate = TestCertificate::new();
    let files = Files::new(&certificate);
    let (cert, key) = (files.cert().display().to_string(), files.key().display().to_string());
    let operator_port = crate::helpers::free_port().to_string();
    let operator_listen = format!("127.0.0.1:{operator_port}");
    let tls_env = [("HIVEGATE_TLS__CERT_PATH", cert.as_str()), ("HIVEGATE_TLS__KEY_PATH", key.as_str())];
    let mut process = HivegateProcess::start_with_client(
        db.url(),
        Some(OPERATOR_TOKEN),
        &[tls_env[0], tls_env[1], ("HIVEGATE_HTTP__OPERATOR_LISTEN", operator_listen.as_str())],
        tls_client(&[&certificate]),
    )
    .await;
    let response = process.op(Method::GET, "/admin/v1/agents").send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    let listen = format!("127.0.0.1:{}", process.port);

    // `hivegate healthcheck` as the image runs it, with the instance's configuration: over TLS on the listen
    // address, or on the operator address when there is one.
    let dir = TempDir::new();
    let healthcheck = |env: Vec<(&'static str, String)>| {
        let mut command = crate::helpers::hivegate_command(dir.path(), db.url(), Some(OPERATOR_TOKEN));
        command.arg("healthcheck").envs(env);
        command.output().unwrap()
    };
    let with_tls = || {
        vec![
            ("HIVEGATE_LISTEN", listen.clone()),
            ("HIVEGATE_TLS__CERT_PATH", cert.clone()),
            ("HIVEGATE_TLS__KEY_PATH", key.clone()),
        ]
    };
    let output = healthcheck(with_tls());
    assert!(output.status.success(), "over TLS: {}", String::from_utf8_lossy(&output.stderr));
    let mut with_operator = with_tls();
    with_operator.push(("HIVEGATE_HTTP__OPERATOR_LISTEN", operator_listen.clone()));
    let output = healthcheck(with_operator.clone());
    assert!(output.status.success(), "on the operator address: {}", String::from_utf8_lossy(&output.stderr));
    // Plain HTTP against the TLS listener is no answer.
    let output = healthcheck(vec![("HIVEGATE_LISTEN", listen.clone())]);
    assert!(!output.status.success(), "a plain probe of the TLS listener succeeded");

    // SIGTERM drains both listeners; afterwards the health check fails either way.
    let status = process.terminate().await;
    assert!(status.success(), "{}", process.logs());
    for env in [with_tls(), with_operator] {
        let output = healthcheck(env);
        assert!(!output.status.success(), "a stopped instance is healthy");
    }
}

/// Opens connections to `app` that stall their handshake: some never start it, one sends half a ClientHello.
async fn stalled_handshakes(app: &TestApp) -> Vec<tokio::net::TcpStream> {
    let address = app.address.trim_start_matches("https://").to_owned();
    let mut stalled = Vec::new();
    for _ in 0..8 {
        stalled.push(tokio::net::TcpStream::connect(&address).await.unwrap());
    }
    let mut partial = tokio::net::TcpStream::connect(&address).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut partial, &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).await.unwrap();
    stalled.push(partial);
    stalled
}

async fn slow_handshakes_hold_up_no_one(backend: Backend) {
    use tokio::io::AsyncReadExt;

    let certificate = TestCertificate::new();
    let files = Files::new(&certificate);
    let tls = |handshake_timeout_ms| {
        let (cert, key) = (files.cert(), files.key());
        move |config: &mut hivegate::config::Config| {
            config.tls.cert_path = Some(cert);
            config.tls.key_path = Some(key);
            config.tls.handshake_timeout_ms = handshake_timeout_ms;
        }
    };

    // Handshakes that never finish (for as long as this test runs) hold up no other client.
    let mut app = spawn_app_with(backend, tls(3_600_000)).await;
    app.client = tls_client(&[&certificate]);
    let stalled = stalled_handshakes(&app).await;
    for _ in 0..3 {
        let response = app.anon(Method::GET, "/readyz").send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    // They do not hold up the shutdown either.
    app.stop().await;
    drop(stalled);

    // With a short handshake timeout they are closed (a read gives the end of the stream).
    let mut app = spawn_app_with(backend, tls(300)).await;
    app.client = tls_client(&[&certificate]);
    for mut connection in stalled_handshakes(&app).await {
        let mut buffer = [0u8; 64];
        let read = tokio::time::timeout(crate::helpers::DEADLINE, connection.read(&mut buffer))
            .await
            .expect("the stalled connection is closed");
        assert!(matches!(read, Ok(0) | Err(_)), "the server answered a stalled handshake: {read:?}");
    }
    let response = app.anon(Method::GET, "/readyz").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    app.stop().await;
}

/// The console's session cookie is `Secure` on a listener that serves TLS.
async fn console_cookie_is_secure_over_tls(backend: Backend) {
    let certificate = TestCertificate::new();
    let files = Files::new(&certificate);
    let mut app = spawn_app_with(backend, |config| {
        config.tls.cert_path = Some(files.cert());
        config.tls.key_path = Some(files.key());
    })
    .await;
    app.client = tls_client(&[&certificate]);
    let signed_in =
        app.anon(Method::POST, "/console/sign-in").form(&[("credential", OPERATOR_TOKEN)]).send().await.unwrap();
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let cookie = signed_in.headers()["set-cookie"].to_str().unwrap().to_owned();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/console", "Secure"] {
        assert!(cookie.split("; ").any(|part| part == flag), "{flag} missing from {cookie}");
    }
}
