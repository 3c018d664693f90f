//! Pod status, as kubelet's `pkg/kubelet/status`: [`generate`] computes a
//! pod's v1 status from what the runtime shows (pure), and [`Manager`]
//! keeps the latest one of every pod, written by the pod's worker and read
//! by the HTTP endpoints, stats and the OOM watcher.

pub mod generate;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;

use crate::mutex::lock;

pub use generate::{Context, ProbeState, Waiting, no_probes, pod_status};

/// The latest status of every pod, by UID.
#[derive(Debug, Clone, Default)]
pub struct Manager(Arc<Mutex<BTreeMap<String, Pod>>>);

impl Manager {
    pub fn set(&self, uid: &str, pod: Pod) {
        lock(&self.0).insert(uid.to_string(), pod);
    }

    pub fn get(&self, uid: &str) -> Option<Pod> {
        lock(&self.0).get(uid).cloned()
    }

    pub fn remove(&self, uid: &str) {
        lock(&self.0).remove(uid);
    }

    /// Every pod with its status, by UID.
    pub fn pods(&self) -> Vec<Pod> {
        lock(&self.0).values().cloned().collect()
    }
}
