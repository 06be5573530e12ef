//! The controller's errors. Each has a short label for logs and metrics.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("encoding JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("snapshot of run {run}: ConfigMap {config_map}: {detail}")]
    Snapshot {
        run: String,
        config_map: String,
        detail: String,
    },
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    /// A low-cardinality label for the kind of error.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(e)) if e.code == 409 => "conflict",
            Error::Kube(_) => "kube",
            Error::Json(_) => "json",
            Error::Snapshot { .. } => "snapshot",
            Error::Finalizer(_) => "finalizer",
        }
    }

    /// One line for an event: the API server's own message and status, without the wrapping.
    pub fn short(&self) -> String {
        match self {
            Error::Kube(kube::Error::Api(e)) => format!("{} (HTTP {}, {})", e.message, e.code, e.reason),
            other => other.to_string(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
