//! Counts the controller's own API requests (controller-runtime's `rest_client_requests_total`),
//! by HTTP method and resource — how the scale benchmark measures requests per upgrade.

use std::task::{Context, Poll};

use prometheus::IntCounterVec;
use tower::{Layer, Service};

#[derive(Clone)]
pub struct CountLayer(pub IntCounterVec);

impl<S> Layer<S> for CountLayer {
    type Service = Count<S>;
    fn layer(&self, inner: S) -> Count<S> {
        Count {
            inner,
            counter: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Count<S> {
    inner: S,
    counter: IntCounterVec,
}

/// The resource a request path names: `/api/v1/namespaces/x/configmaps/y` → `configmaps`
/// (subresources as `resource/sub`), so that labels stay few.
pub fn resource_of(path: &str) -> String {
    let parts: Vec<&str> = path
        .trim_start_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    let rest: &[&str] = match parts.first() {
        Some(&"api") => parts.get(2..).unwrap_or_default(),
        Some(&"apis") => parts.get(3..).unwrap_or_default(),
        _ => return "other".into(),
    };
    let rest = if rest.first() == Some(&"namespaces") && rest.len() > 2 {
        &rest[2..]
    } else {
        rest
    };
    match rest {
        [] => "discovery".into(),
        [resource] | [resource, _] => resource.to_string(),
        [resource, _, sub, ..] => format!("{resource}/{sub}"),
    }
}

impl<S, B> Service<http::Request<B>> for Count<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        self.counter
            .with_label_values(&[req.method().as_str(), &resource_of(req.uri().path())])
            .inc();
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::resource_of;

    #[test]
    fn resources_from_paths() {
        assert_eq!(resource_of("/api/v1/namespaces/ns/configmaps/x"), "configmaps");
        assert_eq!(resource_of("/api/v1/namespaces/default/events"), "events");
        assert_eq!(
            resource_of("/apis/platform.kratix.io/v1alpha1/namespaces/a/resourcebindings/b"),
            "resourcebindings"
        );
        assert_eq!(
            resource_of("/apis/platform.kratix.io/v1alpha1/resourcebindings"),
            "resourcebindings"
        );
        assert_eq!(
            resource_of("/apis/platform.syntasso.io/v1alpha1/upgraderuns/r/status"),
            "upgraderuns/status"
        );
        assert_eq!(
            resource_of("/apis/coordination.k8s.io/v1/namespaces/x/leases/l"),
            "leases"
        );
        assert_eq!(resource_of("/version"), "other");
    }
}
