//! A small client of the Prometheus HTTP API for signal gates (spec §13.3): one instant query
//! (`POST /api/v1/query`), a 10 s timeout, TLS with an optional CA file, and a bearer token read
//! from a file on every request (so a rotated token is picked up).
//!
//! Every failure becomes a [`Reading::Error`] with a sentence saying what went wrong: the gate is
//! then closed (fail safe), and the `Gated` condition shows the sentence.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;

use crate::engine::gate::{parse_response, Reading};

/// How long one query may take.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a client cannot be built from its flags.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("--prometheus-url {0:?} is not an http:// or https:// URL")]
    Url(String),
    #[error("--prometheus-ca-file {path}: {why}")]
    CaFile { path: String, why: String },
    #[error("TLS set-up failed: {0}")]
    Tls(String),
}

/// A Prometheus server's query endpoint.
#[derive(Clone)]
pub struct PrometheusClient {
    /// `<url>/api/v1/query`.
    endpoint: hyper::Uri,
    url: String,
    token_file: Option<PathBuf>,
    http: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl std::fmt::Debug for PrometheusClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusClient").field("url", &self.url).finish()
    }
}

impl PrometheusClient {
    /// A client of the Prometheus at `url` (a base URL such as `http://prometheus:9090`, with
    /// any path prefix it is served under). `ca_file`: PEM certificates to trust instead of the
    /// system's; `bearer_token_file`: sent as `Authorization: Bearer`.
    pub fn new(url: &str, ca_file: Option<&Path>, bearer_token_file: Option<&Path>) -> Result<Self, ClientError> {
        let base = url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ClientError::Url(url.to_string()));
        }
        let endpoint: hyper::Uri = format!("{base}/api/v1/query")
            .parse()
            .map_err(|_| ClientError::Url(url.to_string()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ClientError::Tls(e.to_string()))?;
        let https = match ca_file {
            Some(path) => {
                let ca_error = |why: String| ClientError::CaFile {
                    path: path.display().to_string(),
                    why,
                };
                let pem = std::fs::read(path).map_err(|e| ca_error(e.to_string()))?;
                let mut roots = rustls::RootCertStore::empty();
                use rustls::pki_types::pem::PemObject;
                for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
                    let cert = cert.map_err(|e| ca_error(format!("not PEM certificates ({e})")))?;
                    roots.add(cert).map_err(|e| ca_error(e.to_string()))?;
                }
                if roots.is_empty() {
                    return Err(ca_error("no certificate in it".into()));
                }
                hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(builder.with_root_certificates(roots).with_no_client_auth())
                    .https_or_http()
                    .enable_http1()
                    .build()
            }
            None => hyper_rustls::HttpsConnectorBuilder::new()
                .with_provider_and_native_roots(rustls::crypto::ring::default_provider())
                .map_err(|e| ClientError::Tls(format!("the system's CA certificates: {e}")))?
                .https_or_http()
                .enable_http1()
                .build(),
        };
        Ok(PrometheusClient {
            endpoint,
            url: base.to_string(),
            token_file: bearer_token_file.map(Path::to_path_buf),
            http: Client::builder(TokioExecutor::new()).build(https),
        })
    }

    /// The base URL, as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs `query` as an instant query now; what it says about the gate.
    pub async fn query(&self, query: &str) -> Reading {
        match tokio::time::timeout(QUERY_TIMEOUT, self.send(query)).await {
            Ok(Ok(reading)) => reading,
            Ok(Err(e)) => Reading::Error(e),
            Err(_) => Reading::Error(format!(
                "Prometheus at {} did not answer within {}s",
                self.url,
                QUERY_TIMEOUT.as_secs()
            )),
        }
    }

    async fn send(&self, query: &str) -> Result<Reading, String> {
        let mut request = hyper::Request::post(self.endpoint.clone())
            .header(hyper::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(hyper::header::ACCEPT, "application/json");
        if let Some(path) = &self.token_file {
            let token = std::fs::read_to_string(path)
                .map_err(|e| format!("--prometheus-bearer-token-file {}: {e}", path.display()))?;
            request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {}", token.trim()));
        }
        let body = format!("query={}", form_encode(query));
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("building the request: {e}"))?;
        let response = self
            .http
            .request(request)
            .await
            .map_err(|e| format!("querying Prometheus at {}: {}", self.url, error_chain(&e)))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading Prometheus' answer: {e}"))?
            .to_bytes();
        // 400 (bad query) and 422 (cannot execute) carry Prometheus' JSON error, which says more.
        if !(status.is_success() || status.as_u16() == 400 || status.as_u16() == 422) {
            let text = String::from_utf8_lossy(&body);
            let text: String = text.trim().chars().take(200).collect();
            return Err(format!("Prometheus at {} answered {status}: {text}", self.url));
        }
        Ok(parse_response(&body))
    }
}

/// `e` and its sources, as one sentence ("client error (Connect): tcp connect error: Connection
/// refused"): hyper's own message alone says only "client error".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// `application/x-www-form-urlencoded` encoding of a value.
fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_form_encoded() {
        assert_eq!(
            form_encode(r#"ALERTS{alertstate="firing", severity=~"crit.*"} > 0"#),
            "ALERTS%7Balertstate%3D%22firing%22%2C+severity%3D~%22crit.%2A%22%7D+%3E+0"
        );
        assert_eq!(form_encode("sum(rate(x[5m]))/2"), "sum%28rate%28x%5B5m%5D%29%29%2F2");
        assert_eq!(form_encode("é"), "%C3%A9");
    }

    #[test]
    fn bad_flags_are_named() {
        assert_eq!(
            PrometheusClient::new("prometheus:9090", None, None)
                .unwrap_err()
                .to_string(),
            "--prometheus-url \"prometheus:9090\" is not an http:// or https:// URL"
        );
        let missing = PrometheusClient::new("https://p", Some(Path::new("/nonexistent/ca.pem")), None)
            .unwrap_err()
            .to_string();
        assert!(
            missing.starts_with("--prometheus-ca-file /nonexistent/ca.pem: "),
            "{missing}"
        );
    }

    #[tokio::test]
    async fn an_unreachable_server_is_an_error_reading() {
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = PrometheusClient::new(&format!("http://127.0.0.1:{port}"), None, None).unwrap();
        match client.query("up").await {
            Reading::Error(e) => assert!(e.contains("Connection refused") || e.contains("connect"), "{e}"),
            other => panic!("{other:?}"),
        }
    }
}
