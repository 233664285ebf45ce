//! Native TLS on the public listener (`[tls]`), for deployments without a TLS-terminating proxy.
//!
//! The listener's accept loop ([`crate::http::serve`]) runs each connection's TLS handshake ([`TlsHandshake`])
//! in the connection's own task, bounded by `tls.handshake_timeout_ms`, so a slow client cannot hold up the
//! others; the connection is then served exactly like a plain one: client addresses, caps, timeouts, graceful
//! shutdown and SSE streams are the same. ALPN offers HTTP/2 and HTTP/1.1.
//!
//! The certificate and key are PEM files, re-read every `tls.reload_interval_ms`: when their contents
//! change, the new pair is parsed and checked (the key must belong to the certificate) and then used for
//! every new handshake; connections already open keep the certificate they were set up with. A pair that
//! cannot be read or does not parse is logged, counted and ignored: the previous certificate stays in use.
//!
//! [`TlsHandshake`]: crate::tls::TlsHandshake

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::config::{ConfigError, TlsConfig};
use crate::metrics::{Metrics, Outcome, OutcomeLabels};
use crate::task::AbortOnDrop;

/// The cryptography every TLS connection of hivegate uses: *ring*, as the HTTP client's rustls does.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The configured certificate and key files.
#[derive(Debug, Clone)]
struct Files {
    cert_path: PathBuf,
    key_path: PathBuf,
}

/// The two files' contents, as last read.
#[derive(PartialEq, Eq)]
struct Contents {
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl Files {
    fn read(&self) -> Result<Contents, ConfigError> {
        let read = |key: &'static str, path: &Path| {
            std::fs::read(path).map_err(|error| ConfigError::Invalid {
                key,
                message: format!("cannot read {}: {error}", path.display()),
            })
        };
        Ok(Contents { cert: read("tls.cert_path", &self.cert_path)?, key: read("tls.key_path", &self.key_path)? })
    }

    /// Parses the certificate chain and private key and checks that they belong together.
    fn parse(&self, contents: &Contents, provider: &CryptoProvider) -> Result<CertifiedKey, ConfigError> {
        let cert_error = |message: String| ConfigError::Invalid {
            key: "tls.cert_path",
            message: format!("{}: {message}", self.cert_path.display()),
        };
        let key_error = |message: String| ConfigError::Invalid {
            key: "tls.key_path",
            message: format!("{}: {message}", self.key_path.display()),
        };
        let chain = CertificateDer::pem_slice_iter(&contents.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| cert_error(format!("not a PEM certificate chain: {error}")))?;
        if chain.is_empty() {
            return Err(cert_error("no PEM `CERTIFICATE` block".to_owned()));
        }
        let key = PrivateKeyDer::from_pem_slice(&contents.key).map_err(|error| {
            key_error(format!(
                "no PEM private key (`PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY`) could be read: {error}"
            ))
        })?;
        CertifiedKey::from_der(chain, key, provider).map_err(|error| match error {
            rustls::Error::InconsistentKeys(_) => key_error("the key does not belong to the certificate".to_owned()),
            rustls::Error::General(message) => key_error(format!("unusable private key: {message}")),
            other => cert_error(format!("unusable certificate or key: {other}")),
        })
    }
}

/// Answers every handshake with the certificate loaded last.
#[derive(Debug)]
struct CurrentCertificate(RwLock<Arc<CertifiedKey>>);

impl CurrentCertificate {
    fn get(&self) -> Arc<CertifiedKey> {
        self.0.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    fn set(&self, certified: CertifiedKey) {
        *self.0.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(certified);
    }
}

impl ResolvesServerCert for CurrentCertificate {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }
}

/// The TLS side of the public listener: the handshake of each accepted connection, with the certificate
/// loaded last; the certificate files are watched for as long as it lives.
pub struct TlsHandshake {
    acceptor: TlsAcceptor,
    timeout: Duration,
    _reloader: AbortOnDrop,
}

impl TlsHandshake {
    /// Runs the server side of the handshake on `tcp`, within `tls.handshake_timeout_ms`.
    pub async fn accept(&self, tcp: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
        tokio::time::timeout(self.timeout, self.acceptor.accept(tcp))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out"))?
    }
}

/// The configured certificate and key, loaded and checked, ready to serve.
pub struct ServerTls {
    files: Files,
    seen: Contents,
    current: Arc<CurrentCertificate>,
    provider: Arc<CryptoProvider>,
    acceptor: TlsAcceptor,
    reload_interval: Duration,
    handshake_timeout: Duration,
}

impl ServerTls {
    /// Loads the configured certificate and key; an error names the key of the file at fault.
    pub fn load(config: &TlsConfig) -> Result<Self, ConfigError> {
        let (Some(cert_path), Some(key_path)) = (&config.cert_path, &config.key_path) else {
            return Err(ConfigError::Invalid {
                key: "tls.cert_path",
                message: "TLS needs both tls.cert_path and tls.key_path".to_owned(),
            });
        };
        let files = Files { cert_path: cert_path.clone(), key_path: key_path.clone() };
        let provider = provider();
        let seen = files.read()?;
        let current = Arc::new(CurrentCertificate(RwLock::new(Arc::new(files.parse(&seen, &provider)?))));
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|error| ConfigError::Invalid { key: "tls.cert_path", message: error.to_string() })?
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            files,
            seen,
            current,
            provider,
            acceptor: TlsAcceptor::from(Arc::new(server)),
            reload_interval: Duration::from_millis(config.reload_interval_ms),
            handshake_timeout: Duration::from_millis(config.handshake_timeout_ms),
        })
    }

    /// Starts watching the files; the handshakes use whatever pair was loaded last.
    pub fn start(self, metrics: Arc<Metrics>) -> TlsHandshake {
        let reloading = AbortOnDrop::spawn(reload(
            self.files,
            self.seen,
            self.current,
            self.provider,
            self.reload_interval,
            metrics,
        ));
        TlsHandshake { acceptor: self.acceptor, timeout: self.handshake_timeout, _reloader: reloading }
    }
}

/// Re-reads the files every `interval`; a changed pair that parses replaces the current one.
async fn reload(
    files: Files,
    mut seen: Contents,
    current: Arc<CurrentCertificate>,
    provider: Arc<CryptoProvider>,
    interval: Duration,
    metrics: Arc<Metrics>,
) {
    let mut every = tokio::time::interval(interval);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    // An unreadable file is reported once, not at every tick, until it can be read again.
    let mut unreadable = false;
    loop {
        every.tick().await;
        let read = {
            let files = files.clone();
            tokio::task::spawn_blocking(move || files.read()).await
        };
        let contents = match read {
            Ok(Ok(contents)) => {
                unreadable = false;
                contents
            }
            Ok(Err(error)) => {
                if !unreadable {
                    tracing::warn!(%error, "cannot read the TLS certificate files; serving the previous certificate");
                    metrics.tls_reloads.get_or_create(&OutcomeLabels { outcome: Outcome::Error.as_str() }).inc();
                    unreadable = true;
                }
                continue;
            }
            Err(_) => continue,
        };
        if contents == seen {
            continue;
        }
        match files.parse(&contents, &provider) {
            Ok(certified) => {
                current.set(certified);
                tracing::info!(cert = %files.cert_path.display(), "TLS certificate reloaded");
                metrics.tls_reloads.get_or_create(&OutcomeLabels { outcome: Outcome::Ok.as_str() }).inc();
            }
            Err(error) => {
                tracing::warn!(%error, "the changed TLS certificate files are not usable; serving the previous certificate");
                metrics.tls_reloads.get_or_create(&OutcomeLabels { outcome: Outcome::Error.as_str() }).inc();
            }
        }
        // Either way this pair has been dealt with: it is looked at again only once it changes.
        seen = contents;
    }
}

/// The verifier's methods that check a handshake's signature (TLS 1.2 and 1.3), each with the provider's
/// function of the same name: the signatures are checked even though the certificate is not.
macro_rules! verify_signatures {
    ($($verify:ident),*) => {
        $(
            fn $verify(
                &self,
                message: &[u8],
                cert: &CertificateDer<'_>,
                dss: &rustls::DigitallySignedStruct,
            ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
                rustls::crypto::$verify(message, cert, dss, &self.0.signature_verification_algorithms)
            }
        )*
    };
}

/// A certificate verifier for `hivegate healthcheck`'s own probe of this instance on loopback only: it
/// accepts whatever certificate is presented, because the certificate is made out for the names clients
/// use, not for 127.0.0.1, and the probe learns nothing secret nor sends any credential. The handshake's
/// signatures are still checked.
#[derive(Debug)]
pub struct LoopbackProbe(pub Arc<CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for LoopbackProbe {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    verify_signatures!(verify_tls12_signature, verify_tls13_signature);

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
