//! `/healthz` and `/readyz` on the health address; `/metrics` on the metrics address.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// Readiness (flipped to false first on shutdown) and the metrics to expose.
#[derive(Default)]
pub struct Health {
    pub ready: AtomicBool,
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
}

fn respond(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r
}

async fn handle(req: Request<Incoming>, health: Arc<Health>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(match req.uri().path() {
        "/healthz" | "/livez" => respond(StatusCode::OK, "ok\n"),
        "/readyz" if health.ready.load(Ordering::SeqCst) => respond(StatusCode::OK, "ok\n"),
        "/readyz" => respond(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
        "/metrics" if health.metrics.is_some() => {
            let body = health.metrics.as_ref().map(|m| m.render()).unwrap_or_default();
            let mut r = Response::new(Full::new(Bytes::from(body)));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        _ => respond(StatusCode::NOT_FOUND, "not found\n"),
    })
}

/// Binds `addr` now (so a bad address fails start-up) and serves in the background.
pub async fn serve(addr: SocketAddr, health: Arc<Health>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let health = health.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| handle(req, health.clone()));
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(bound)
}
