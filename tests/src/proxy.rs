//! A recording, fault-injecting HTTP proxy in front of the API server, for the reliability
//! tests. A controller pointed at it (`--kubeconfig` from [`FaultProxy::kubeconfig`]) speaks
//! plain HTTP to the proxy; the proxy forwards with the test's own client (TLS, credentials).
//!
//! Every request is recorded (method, path, status, whether it reached the API server), which
//! is the tests' ground truth: what a controller wrote, when, and how often. Faults are set at
//! run time: 5xx answers, requests held until they time out, responses lost after the API server
//! applied the request, refused connections, and watch streams cut.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, BodyStream, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// Faults to inject; each "one in N" is counted over all requests (0: never).
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Only requests whose path contains this are faulted (all when `None`).
    pub only_paths: Option<String>,
    /// Answer 500/502/503/504 without forwarding.
    pub error_one_in: u64,
    /// Hold the request for `hold`, then drop the connection without an answer (a timeout).
    pub hold_one_in: u64,
    pub hold: Duration,
    /// Forward (the API server applies it), then answer 504: the response is lost.
    pub lose_response_one_in: u64,
    /// Refuse everything: close connections without an answer.
    pub down: bool,
    /// Hold every targeted write (not a read) until [`FaultProxy::release_writes`], then forward
    /// it: a slow API server the test paces.
    pub hold_writes: bool,
}

/// One request as the proxy saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub at: SystemTime,
    pub method: String,
    pub path: String,
    pub query: String,
    /// What the client got (0: the connection was dropped).
    pub status: u16,
    /// What the API server answered, when the request reached it.
    pub upstream_status: Option<u16>,
    /// Why the API server could not be reached, when it could not.
    pub error: Option<String>,
}

impl Recorded {
    pub fn is_write(&self) -> bool {
        !matches!(self.method.as_str(), "GET" | "HEAD" | "OPTIONS")
    }
}

struct Shared {
    upstream: kube::Client,
    faults: Mutex<Faults>,
    log: Mutex<Vec<Recorded>>,
    counter: AtomicU64,
    /// Requests being held now (see [`Faults::hold_one_in`]).
    holding: AtomicU64,
    /// Bumped to cut every open streaming response.
    cut: watch::Sender<u64>,
    /// Set to let writes held by [`Faults::hold_writes`] through.
    released: watch::Sender<bool>,
    /// Texts looked for in what the proxy streams back (watch events), and whether each passed.
    looked_for: Mutex<Vec<(String, bool)>>,
}

pub struct FaultProxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards with `upstream`.
    pub async fn start(upstream: kube::Client) -> anyhow::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            faults: Mutex::default(),
            log: Mutex::default(),
            counter: AtomicU64::new(0),
            holding: AtomicU64::new(0),
            cut: watch::channel(0).0,
            released: watch::channel(false).0,
            looked_for: Mutex::default(),
        });
        let state = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = state.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| handle(state.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(FaultProxy { addr, shared, task })
    }

    /// Writes a kubeconfig that reaches the API server through this proxy.
    pub fn kubeconfig(&self, dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
        let path = dir.join(format!("{name}.kubeconfig"));
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: http://{}\n\
                 users:\n- name: proxy\n  user: {{}}\ncontexts:\n- name: proxy\n  context: {{cluster: proxy, user: proxy}}\n\
                 current-context: proxy\n",
                self.addr
            ),
        )?;
        Ok(path)
    }

    pub fn set_faults(&self, faults: Faults) {
        if let Ok(mut f) = self.shared.faults.lock() {
            *f = faults;
        }
    }

    /// Ends every open streaming response (watches) abruptly.
    pub fn cut_streams(&self) {
        self.shared.cut.send_modify(|g| *g += 1);
    }

    /// Lets the writes held by [`Faults::hold_writes`] through, and every later one.
    pub fn release_writes(&self) {
        self.shared.released.send_replace(true);
    }

    /// From now on, notes whether `text` passes back to the client in a response body (a watch
    /// event carrying it, say): [`FaultProxy::passed`] tells. A client reading through the proxy
    /// has it once it passed.
    pub fn look_for(&self, text: &str) {
        if let Ok(mut l) = self.shared.looked_for.lock() {
            l.push((text.to_string(), false));
        }
    }

    /// Whether `text` ([`FaultProxy::look_for`]) has passed back to the client.
    pub fn passed(&self, text: &str) -> bool {
        self.shared
            .looked_for
            .lock()
            .is_ok_and(|l| l.iter().any(|(t, seen)| t == text && *seen))
    }

    /// How many requests the proxy is holding now: a client waiting in one of them.
    pub fn holding(&self) -> u64 {
        self.shared.holding.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl Shared {
    fn record(&self, r: Recorded) {
        if let Ok(mut l) = self.log.lock() {
            l.push(r);
        }
    }
}

/// One request counted in [`Shared::holding`] for as long as this lives.
struct Holding<'a>(&'a AtomicU64);

impl<'a> Holding<'a> {
    fn count(counter: &'a AtomicU64) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Holding(counter)
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn full(status: u16, body: String) -> http::Response<ProxyBody> {
    let mut resp = http::Response::new(
        Full::new(Bytes::from(body))
            .map_err(|e: Infallible| match e {})
            .boxed_unsync(),
    );
    *resp.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// Marks the texts looked for that `data`, on its way back to the client, carries.
fn noticed(shared: &Shared, data: Option<&Bytes>) {
    let Some(data) = data else {
        return;
    };
    if let Ok(mut looked_for) = shared.looked_for.lock() {
        for (text, seen) in looked_for.iter_mut().filter(|(_, seen)| !*seen) {
            *seen = data.windows(text.len()).any(|w| w == text.as_bytes());
        }
    }
}

fn status_body(code: u16, reason: &str) -> String {
    serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "injected by the test's fault proxy", "reason": reason, "code": code
    })
    .to_string()
}

async fn handle(shared: Arc<Shared>, req: http::Request<Incoming>) -> Result<http::Response<ProxyBody>, BoxError> {
    let n = shared.counter.fetch_add(1, Ordering::Relaxed) + 1;
    let faults = shared.faults.lock().map(|f| f.clone()).unwrap_or_default();
    let targeted = faults
        .only_paths
        .as_ref()
        .is_none_or(|p| req.uri().path().contains(p.as_str()));
    let hit = |one_in: u64, salt: u64| targeted && one_in > 0 && (n + salt).is_multiple_of(one_in);
    let mut record = Recorded {
        at: SystemTime::now(),
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
        query: req.uri().query().unwrap_or_default().to_string(),
        status: 0,
        upstream_status: None,
        error: None,
    };
    let log = |r: Recorded| shared.record(r);

    if faults.down && targeted {
        log(record);
        return Err("the fault proxy refuses connections".into());
    }
    if hit(faults.error_one_in, 0) {
        let code = [500u16, 502, 503, 504][(n % 4) as usize];
        let reason = match code {
            500 => "InternalError",
            504 => "Timeout",
            _ => "ServiceUnavailable",
        };
        record.status = code;
        log(record);
        return Ok(full(code, status_body(code, reason)));
    }
    if hit(faults.hold_one_in, 1) {
        // Counted while held, also when the client goes away first and this future is dropped.
        let _held = Holding::count(&shared.holding);
        tokio::time::sleep(faults.hold).await;
        log(record);
        return Err("held by the fault proxy until the client gave up".into());
    }

    let (parts, body) = req.into_parts();
    let bytes = body.collect().await?.to_bytes();
    if faults.hold_writes && targeted && record.is_write() {
        let _held = Holding::count(&shared.holding);
        let mut released = shared.released.subscribe();
        // Closed only with the proxy.
        let _ = released.wait_for(|r| *r).await;
    }
    let mut upstream = http::Request::builder()
        .method(parts.method)
        .uri(parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
    for (name, value) in &parts.headers {
        if name != http::header::HOST && name != http::header::CONNECTION && name != http::header::AUTHORIZATION {
            upstream = upstream.header(name, value);
        }
    }
    let upstream = upstream.body(kube::client::Body::from(bytes.to_vec()))?;
    let lose_response = hit(faults.lose_response_one_in, 2);
    // Forwarded in a task of its own: a client that dies mid-request (a SIGKILLed controller)
    // does not cancel it, as it would not cancel a request the API server already received, and
    // the outcome is still recorded.
    let forward = {
        let shared = shared.clone();
        tokio::spawn(async move {
            let log = |r: Recorded| shared.record(r);
            match shared.upstream.send(upstream).await {
                Ok(resp) => {
                    record.upstream_status = Some(resp.status().as_u16());
                    record.status = if lose_response { 504 } else { resp.status().as_u16() };
                    log(record);
                    Ok(resp)
                }
                Err(e) => {
                    // The API server is down or unreachable: what a load balancer would say.
                    record.status = 503;
                    record.error = Some(e.to_string());
                    log(record);
                    Err(())
                }
            }
        })
    };
    let resp = match forward.await {
        Ok(Ok(resp)) if !lose_response => resp,
        Ok(Ok(_)) => return Ok(full(504, status_body(504, "Timeout"))),
        Ok(Err(())) | Err(_) => return Ok(full(503, status_body(503, "ServiceUnavailable"))),
    };

    let mut cut = shared.cut.subscribe();
    cut.mark_unchanged();
    let observer = shared.clone();
    let (parts, body) = resp.into_parts();
    let frames = BodyStream::new(body);
    // Frames until the upstream ends, or an error when the test cuts streams.
    let stream = futures::stream::unfold((Some(frames), cut), move |(frames, mut cut)| {
        let observer = observer.clone();
        async move {
            let mut frames = frames?;
            tokio::select! {
                frame = frames.next() => frame.map(|f| {
                    if let Ok(data) = f.as_ref().map(|f| f.data_ref()) {
                        noticed(&observer, data);
                    }
                    (f.map_err(|e| Box::new(e) as BoxError), (Some(frames), cut))
                }),
                _ = cut.changed() => Some((Err::<Frame<Bytes>, BoxError>("stream cut by the fault proxy".into()), (None, cut))),
            }
        }
    });
    Ok(http::Response::from_parts(
        parts,
        BodyExt::boxed_unsync(StreamBody::new(stream)),
    ))
}
