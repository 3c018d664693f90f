//! Pod status, as kubelet's `pkg/kubelet/status`: [`generate`] computes a
//! pod's v1 status from what the runtime shows (pure), and [`Manager`]
//! keeps the latest one of every pod, written by the pod's worker and read
//! by the HTTP endpoints, stats and the OOM watcher.

pub mod generate;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;

use crate::mutex::lock;

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
    pub fn set(&self, uid: &str, pod: Pod) {
        let mut pods = lock(&self.pods);
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
