//! Secure `/metrics` (`--metrics-secure`), as controller-runtime serves it: TLS, and each caller's
//! bearer token checked by the API server — a TokenReview says who it is, a SubjectAccessReview
//! whether they may `get` the non-resource URL `/metrics` (the `upgradeplan-metrics-reader`
//! ClusterRole grants it). Verdicts are cached briefly, so a scrape every few seconds costs the API
//! server two requests a minute, not two per scrape.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};

/// The certificate file in `--metrics-cert-dir` (a `kubernetes.io/tls` Secret's key).
pub const CERT_FILE: &str = "tls.crt";
/// The private key file in `--metrics-cert-dir`.
pub const KEY_FILE: &str = "tls.key";
/// How long an allowed caller is remembered (a revoked RoleBinding takes effect within this).
const ALLOWED_TTL: Duration = Duration::from_secs(60);
/// How long a refused token is remembered (a new RoleBinding takes effect within this).
const DENIED_TTL: Duration = Duration::from_secs(10);
/// Tokens remembered at most; beyond it the expired ones go, then all (a flood of bad tokens
/// must not grow the cache).
const CACHE_ENTRIES: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("--metrics-cert-dir: {path}: {why}")]
    File { path: String, why: String },
    #[error("--metrics-cert-dir: {path}: {why} (a PEM private key: PKCS#8, PKCS#1 or SEC1)")]
    Key { path: String, why: String },
    #[error("generating the self-signed certificate for /metrics: {0}")]
    SelfSigned(#[from] rcgen::Error),
    #[error("TLS set-up for /metrics: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The TLS configuration of the metrics server: the certificate and key in `cert_dir`
/// (re-read when either file changes, so a rotated Secret is served without a restart), or a
/// self-signed certificate for `names` generated now.
pub fn server_config(cert_dir: Option<&Path>, names: &[String]) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let resolver: Arc<dyn ResolvesServerCert> = match cert_dir {
        Some(dir) => Arc::new(CertFiles::load(dir.join(CERT_FILE), dir.join(KEY_FILE))?),
        None => Arc::new(Fixed(Arc::new(self_signed(names)?))),
    };
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    // HTTP/1.1 only, as controller-runtime's default (HTTP/2 is off there since the rapid-reset CVEs).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn certified(certs: Vec<CertificateDer<'static>>, key: &PrivateKeyDer<'static>) -> Result<CertifiedKey, rustls::Error> {
    let signer = rustls::crypto::ring::sign::any_supported_type(key)?;
    Ok(CertifiedKey::new(certs, signer))
}

/// A self-signed certificate for `names` (DNS names or IP addresses), valid for the process's life.
fn self_signed(names: &[String]) -> Result<CertifiedKey, TlsError> {
    let generated = rcgen::generate_simple_self_signed(names.to_vec())?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(generated.signing_key.serialize_der()));
    Ok(certified(vec![generated.cert.der().clone()], &key)?)
}

#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// A certificate and key read from files, and read again when either file's modification time
/// changes (cert-manager and the kubelet replace a mounted Secret's files in place).
#[derive(Debug)]
struct CertFiles {
    cert: PathBuf,
    key: PathBuf,
    current: Mutex<(Stamp, Arc<CertifiedKey>)>,
}

type Stamp = (Option<SystemTime>, Option<SystemTime>);

impl CertFiles {
    fn load(cert: PathBuf, key: PathBuf) -> Result<Self, TlsError> {
        let stamp = stamp(&cert, &key);
        let loaded = read_pair(&cert, &key)?;
        Ok(CertFiles {
            cert,
            key,
            current: Mutex::new((stamp, Arc::new(loaded))),
        })
    }

    /// The pair to serve: re-read when the files changed; a pair that does not load (a half-written
    /// rotation) keeps the previous one serving, and is tried again on the next handshake.
    fn current(&self) -> Arc<CertifiedKey> {
        let now = stamp(&self.cert, &self.key);
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.0 != now {
            match read_pair(&self.cert, &self.key) {
                Ok(pair) => {
                    tracing::info!(cert = %self.cert.display(), "serving the rotated /metrics certificate");
                    *current = (now, Arc::new(pair));
                }
                Err(e) => tracing::warn!(error = %e, "keeping the previous /metrics certificate"),
            }
        }
        current.1.clone()
    }
}

impl ResolvesServerCert for CertFiles {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

fn stamp(cert: &Path, key: &Path) -> Stamp {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    (modified(cert), modified(key))
}

fn read_pair(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let file_error = |path: &Path, why: String| TlsError::File {
        path: path.display().to_string(),
        why,
    };
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(|e| file_error(cert, e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(file_error(cert, "no PEM CERTIFICATE in it".to_string()));
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::Key {
        path: key.display().to_string(),
        why: e.to_string(),
    })?;
    certified(certs, &private).map_err(|e| TlsError::Key {
        path: key.display().to_string(),
        why: e.to_string(),
    })
}

/// What the API server said about a caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The token names `user`, who may `get /metrics`.
    Allowed { user: String },
    /// No bearer token, or one the API server does not recognise.
    Unauthenticated,
    /// A valid token of `user`, who may not `get /metrics`.
    Forbidden { user: String },
}

/// Checks callers' bearer tokens with TokenReview and SubjectAccessReview, remembering verdicts
/// by the token's SHA-256 (the token itself is not kept).
pub struct Authorizer {
    client: kube::Client,
    cache: Mutex<HashMap<[u8; 32], (Instant, Verdict)>>,
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer_token(authorization: Option<&str>) -> Option<&str> {
    let (scheme, token) = authorization?.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl Authorizer {
    pub fn new(client: kube::Client) -> Self {
        Authorizer {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The verdict for a request's `Authorization` header. An error reaching the API server is
    /// returned (the request fails with 500) and not remembered.
    pub async fn check(&self, authorization: Option<&str>) -> Result<Verdict, kube::Error> {
        let Some(token) = bearer_token(authorization) else {
            return Ok(Verdict::Unauthenticated);
        };
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        if let Some((expires, verdict)) = self.lock().get(&key) {
            if *expires > now {
                return Ok(verdict.clone());
            }
        }
        let verdict = self.review(token).await?;
        let ttl = match verdict {
            Verdict::Allowed { .. } => ALLOWED_TTL,
            _ => DENIED_TTL,
        };
        let mut cache = self.lock();
        if cache.len() >= CACHE_ENTRIES {
            cache.retain(|_, (expires, _)| *expires > now);
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
        }
        cache.insert(key, (now + ttl, verdict.clone()));
        Ok(verdict)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], (Instant, Verdict)>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn review(&self, token: &str) -> Result<Verdict, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..Default::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let status = reviewed.status.unwrap_or_default();
        let Some(user) = status.user.filter(|_| status.authenticated == Some(true)) else {
            return Ok(Verdict::Unauthenticated);
        };
        let name = user.username.clone().unwrap_or_default();
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                uid: user.uid,
                groups: user.groups,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some("/metrics".to_string()),
                    verb: Some("get".to_string()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let decided = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await?;
        Ok(if decided.status.is_some_and(|s| s.allowed) {
            Verdict::Allowed { user: name }
        } else {
            Verdict::Forbidden { user: name }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn bearer_tokens_are_read_as_rfc_6750_says() {
        for (header, token) in [
            (Some("Bearer abc"), Some("abc")),
            (Some("bearer abc"), Some("abc")),
            (Some("  Bearer   abc  "), Some("abc")),
            (Some("Basic abc"), None),
            (Some("Bearer "), None),
            (Some("Bearer"), None),
            (Some(""), None),
            (None, None),
        ] {
            assert_eq!(bearer_token(header), token, "{header:?}");
        }
    }

    fn write_pair(dir: &Path, name: &str) {
        let generated = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
        std::fs::write(dir.join(CERT_FILE), generated.cert.pem()).unwrap();
        std::fs::write(dir.join(KEY_FILE), generated.signing_key.serialize_pem()).unwrap();
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("upgradeplan-secure-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_rotated_certificate_is_served_and_a_broken_rotation_keeps_the_old_one() {
        let dir = temp_dir("rotate");
        write_pair(&dir, "first.example");
        let files = CertFiles::load(dir.join(CERT_FILE), dir.join(KEY_FILE)).unwrap();
        let first = files.current();
        assert!(Arc::ptr_eq(&first, &files.current()), "unchanged files are not re-read");

        // Modification times have a coarse resolution on some filesystems: move them on explicitly.
        let later = SystemTime::now() + Duration::from_secs(5);
        write_pair(&dir, "second.example");
        for f in [CERT_FILE, KEY_FILE] {
            std::fs::File::options()
                .write(true)
                .open(dir.join(f))
                .unwrap()
                .set_modified(later)
                .unwrap();
        }
        let second = files.current();
        assert_ne!(first.cert, second.cert, "the new certificate is served");

        std::fs::write(dir.join(KEY_FILE), "not a key").unwrap();
        std::fs::File::options()
            .write(true)
            .open(dir.join(KEY_FILE))
            .unwrap()
            .set_modified(later + Duration::from_secs(5))
            .unwrap();
        assert_eq!(
            files.current().cert,
            second.cert,
            "a broken key keeps the last good pair"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_files_are_refused_at_start_naming_the_file() {
        let dir = temp_dir("bad");
        let missing = server_config(Some(&dir), &[]).unwrap_err().to_string();
        assert!(
            missing.contains("--metrics-cert-dir") && missing.contains(CERT_FILE),
            "{missing}"
        );
        write_pair(&dir, "x.example");
        std::fs::write(dir.join(KEY_FILE), "-----BEGIN NOTHING-----\n").unwrap();
        let bad_key = server_config(Some(&dir), &[]).unwrap_err().to_string();
        assert!(bad_key.contains(KEY_FILE) && bad_key.contains("PKCS#8"), "{bad_key}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_self_signed_certificate_is_generated_for_the_names() {
        let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        assert!(server_config(None, &names).is_ok());
    }
}
