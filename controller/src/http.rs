//! `/healthz` and `/readyz` on the health address; `/metrics` on the metrics address, over HTTPS
//! for authorized callers only with `--metrics-secure` (see [`crate::secure`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::secure::{Authorizer, Verdict};

/// How long a client may take over the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Readiness (flipped to false first on shutdown) and the metrics to expose.
#[derive(Default)]
pub struct Health {
    pub ready: AtomicBool,
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
    /// With `--metrics-secure`: who may read `/metrics`.
    pub authorizer: Option<Authorizer>,
}

fn respond(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r
}

async fn handle(req: Request<Incoming>, health: Arc<Health>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(match (req.uri().path(), &health.metrics) {
        ("/healthz" | "/livez", _) => respond(StatusCode::OK, "ok\n"),
        ("/readyz", _) if health.ready.load(Ordering::SeqCst) => respond(StatusCode::OK, "ok\n"),
        ("/readyz", _) => respond(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
        ("/metrics", Some(metrics)) => {
            if let Some(refused) = refused(&req, health.authorizer.as_ref()).await {
                return Ok(refused);
            }
            let mut r = Response::new(Full::new(Bytes::from(metrics.render())));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        _ => respond(StatusCode::NOT_FOUND, "not found\n"),
    })
}

/// The answer to a caller who may not read the metrics (401, 403, or 500 when the API server
/// could not be asked), or None.
async fn refused(req: &Request<Incoming>, authorizer: Option<&Authorizer>) -> Option<Response<Full<Bytes>>> {
    let authorizer = authorizer?;
    let header = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok());
    match authorizer.check(header).await {
        Ok(Verdict::Allowed { .. }) => None,
        Ok(Verdict::Unauthenticated) => {
            let mut r = respond(StatusCode::UNAUTHORIZED, "Unauthorized\n");
            r.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Bearer"),
            );
            Some(r)
        }
        Ok(Verdict::Forbidden { user }) => {
            tracing::debug!(%user, "refused /metrics: no get on the non-resource URL /metrics");
            Some(respond(StatusCode::FORBIDDEN, "Forbidden\n"))
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not review a /metrics caller's token");
            Some(respond(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error\n"))
        }
    }
}

/// Binds `addr` now (so a bad address fails start-up) and serves in the background; over TLS
/// when `tls` is given.
pub async fn serve(
    addr: SocketAddr,
    health: Arc<Health>,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let health = health.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| handle(req, health.clone()));
                let connection = http1::Builder::new();
                let _ = match tls {
                    None => connection.serve_connection(TokioIo::new(stream), service).await,
                    Some(tls) => match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
                        Ok(Ok(stream)) => connection.serve_connection(TokioIo::new(stream), service).await,
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "TLS handshake on /metrics failed");
                            Ok(())
                        }
                        Err(_) => Ok(()),
                    },
                };
            });
        }
    });
    Ok(bound)
}
