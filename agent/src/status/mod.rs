//! Pod status, as kubelet's `pkg/kubelet/status`: [`generate`] computes a
//! pod's v1 status from what the runtime shows (pure), and [`Manager`]
//! keeps the latest one of every pod, written by the pod's worker and read
//! by the HTTP endpoints, stats and the OOM watcher.

pub mod apiserver;
pub mod generate;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Pod, PodCondition};

use crate::mutex::lock;

/// kubelet's status manager `updateLastTransitionTime`: a condition keeps
/// the time it last changed status; a new or changed one gets `now`.
fn transition_times(old: &[PodCondition], new: Option<&mut Vec<PodCondition>>, now: i64) {
    for c in new.into_iter().flatten() {
        if c.last_transition_time.is_some() {
            continue;
        }
        c.last_transition_time = match old.iter().find(|o| o.type_ == c.type_) {
            Some(o) if o.status == c.status && o.last_transition_time.is_some() => {
                o.last_transition_time.clone()
            }
            _ => time(now),
        };
    }
}

pub use generate::{Context, ProbeState, Waiting, no_probes, pod_status, time};

/// The latest status of every pod, by UID.
#[derive(Debug, Clone, Default)]
pub struct Manager {
    pods: Arc<Mutex<BTreeMap<String, Pod>>>,
    /// Woken when a pod's status changes or it goes: the API server's
    /// status sync reports it at once (kubelet's `podStatusChannel`).
    changed: Arc<tokio::sync::Notify>,
}

impl Manager {
    pub fn set(&self, uid: &str, mut pod: Pod) {
        let mut pods = lock(&self.pods);
        let old = pods.get(uid).and_then(|o| o.status.as_ref());
        transition_times(
            old.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]),
            pod.status.as_mut().and_then(|s| s.conditions.as_mut()),
            crate::clock::now_ns(),
        );
        let changed = pods.get(uid).is_none_or(|o| o.status != pod.status);
        pods.insert(uid.to_string(), pod);
        drop(pods);
        if changed {
            self.changed.notify_one();
        }
    }

    pub fn get(&self, uid: &str) -> Option<Pod> {
        lock(&self.pods).get(uid).cloned()
    }

    pub fn remove(&self, uid: &str) {
        if lock(&self.pods).remove(uid).is_some() {
            self.changed.notify_one();
        }
    }

    /// Every pod with its status, by UID.
    pub fn pods(&self) -> Vec<Pod> {
        lock(&self.pods).values().cloned().collect()
    }

    /// Resolves at the next change (at once if one came since the last
    /// call): for one waiter, the status sync.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let cond = |t: &str, s: &str| PodCondition {
            type_: t.into(),
            status: s.into(),
            ..Default::default()
        };
        let mut first = vec![cond("Ready", "False"), cond("Initialized", "True")];
        transition_times(&[], Some(&mut first), 1_000_000_000);
        assert!(
            first
                .iter()
                .all(|c| c.last_transition_time == time(1_000_000_000))
        );
        let mut second = vec![cond("Ready", "True"), cond("Initialized", "True")];
        transition_times(&first, Some(&mut second), 5_000_000_000);
        assert_eq!(
            second[0].last_transition_time,
            time(5_000_000_000),
            "changed"
        );
        assert_eq!(second[1].last_transition_time, time(1_000_000_000), "kept");
    }
}
