//! Leader election on a coordination.k8s.io/v1 Lease (kube 5 ships none).
//!
//! Same protocol as client-go's: a candidate takes the Lease when it is free or its holder failed
//! to renew within `leaseDurationSeconds`; the leader renews every retry period and gives up
//! leadership when it could not renew for the renew deadline. Writes use the resourceVersion as a
//! precondition, so two candidates never both succeed.
//!
//! "Failed to renew" is judged as client-go judges it: by the local, monotonic time at which this
//! candidate last saw the Lease change, never by comparing the holder's `renewTime` with the local
//! clock. A holder whose clock runs minutes behind is not deposed while it renews; one whose clock
//! runs ahead is replaced one lease duration after it stops.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;

#[derive(Debug, Clone)]
pub struct ElectorConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

pub struct Elector {
    api: Api<Lease>,
    config: ElectorConfig,
    /// The Lease's resourceVersion as last seen, and when (local monotonic time) it was first
    /// seen: every renewal changes the resourceVersion.
    observed: Mutex<Option<(String, Instant)>>,
}

/// The Lease's annotations as its holder writes them: `annotations` with this controller's
/// version (read by `kubectl upgradeplan version`).
fn own_annotations(annotations: Option<BTreeMap<String, String>>) -> BTreeMap<String, String> {
    let mut a = annotations.unwrap_or_default();
    a.insert(
        upgradeplan::api::CONTROLLER_VERSION_ANNOTATION.to_string(),
        env!("CARGO_PKG_VERSION").to_string(),
    );
    a
}

/// Whether a Lease first seen in its current version at `observed_at` has expired at `now`: its
/// holder had `held_for` to renew it and did not (client-go's observedTime rule).
pub fn expired(observed_at: Instant, now: Instant, held_for: Duration) -> bool {
    now.saturating_duration_since(observed_at) > held_for
}

impl Elector {
    pub fn new(client: Client, config: ElectorConfig) -> Elector {
        Elector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: Mutex::new(None),
        }
    }

    /// One attempt to take or renew the Lease; true when we hold it afterwards.
    async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let me = &self.config.identity;
        let duration_s = self.config.lease_duration.as_secs().max(1) as i32;
        let pp = PostParams::default();
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    annotations: Some(own_annotations(None)),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me.clone()),
                    lease_duration_seconds: Some(duration_s),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&pp, &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let held_for = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(duration_s).max(1) as u64);
        let observed_at = self.observe(lease.metadata.resource_version.clone().unwrap_or_default());
        if holder != *me && !holder.is_empty() && !expired(observed_at, Instant::now(), held_for) {
            return Ok(false);
        }
        let taking_over = holder != *me;
        lease.metadata.annotations = Some(own_annotations(lease.metadata.annotations.take()));
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(me.clone()),
            lease_duration_seconds: Some(duration_s),
            acquire_time: if taking_over {
                Some(MicroTime(now))
            } else {
                spec.acquire_time
            },
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(spec.lease_transitions.unwrap_or(0) + i32::from(taking_over)),
            ..spec
        });
        match self.api.replace(&self.config.name, &pp, &lease).await {
            Ok(written) => {
                self.observe(written.metadata.resource_version.unwrap_or_default());
                if taking_over {
                    tracing::info!(lease = %self.config.name, previous = %holder, "acquired leadership");
                }
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Records the Lease's resourceVersion as seen now; returns when this version was first seen.
    fn observe(&self, version: String) -> Instant {
        let now = Instant::now();
        let Ok(mut observed) = self.observed.lock() else {
            return now;
        };
        match observed.as_ref() {
            Some((seen, at)) if *seen == version => *at,
            _ => {
                *observed = Some((version, now));
                now
            }
        }
    }

    /// Waits until this candidate holds the Lease.
    pub async fn acquire(&self) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => return,
                Ok(false) => tracing::debug!("lease held by another candidate"),
                Err(e) => tracing::warn!(error = %e, "leader election attempt failed"),
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// Renews the Lease until a renewal has not succeeded for the renew deadline; then returns
    /// (leadership is lost and the process must stop acting).
    pub async fn hold(&self) {
        let mut last_renewed = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renewed = tokio::time::Instant::now(),
                Ok(false) => {
                    tracing::error!("the lease was taken by another candidate");
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "renewing the lease failed"),
            }
            if last_renewed.elapsed() > self.config.renew_deadline {
                tracing::error!(deadline = ?self.config.renew_deadline, "could not renew the lease in time");
                return;
            }
        }
    }

    /// Gives the Lease up so that a standby takes over at once (not after the lease duration).
    /// A renewal still in flight when shutdown began may have moved the Lease on: re-read and
    /// retry on conflict.
    pub async fn release(&self) {
        for _ in 0..5 {
            let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
                return;
            };
            let Some(spec) = lease.spec.as_mut() else { return };
            if spec.holder_identity.as_deref() != Some(&self.config.identity) {
                return;
            }
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            match self
                .api
                .replace(&self.config.name, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => {
                    tracing::info!(lease = %self.config.name, "released leadership");
                    return;
                }
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "releasing the lease failed");
                    return;
                }
            }
        }
        tracing::warn!("releasing the lease failed: it kept changing");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_expires_a_lease_duration_after_it_last_changed_here() {
        let seen = Instant::now();
        let d = Duration::from_secs(15);
        assert!(!expired(seen, seen, d));
        assert!(!expired(seen, seen + d, d), "exactly the duration: not yet");
        assert!(expired(seen, seen + d + Duration::from_millis(1), d));
        assert!(
            !expired(seen + Duration::from_secs(1), seen, d),
            "a clock that went back is no expiry"
        );
    }
}
