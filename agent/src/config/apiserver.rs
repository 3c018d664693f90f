//! The API server as a pod source (kubelet's `config/apiserver.go`).
//!
//! The source lists then watches the pods bound to this node (from the
//! last resourceVersion; bookmarks on; a 410 or an error event relists;
//! back-off on failures) and publishes the whole set on a `watch` channel
//! that the sync loop merges with the static pods.

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::watch as chan;

use crate::config::{PodUpdate, Source};
use crate::kube::client::Client;
use crate::kube::reflector::{self, Seen};
use crate::kube::watch::Query;

/// The node's pods by UID, as the API server last said; None until the
/// first LIST answered.
pub type ApiPods = Option<Arc<BTreeMap<String, Value>>>;

/// The pods the API server assigned, on disk: a device that reboots
/// without its uplink runs them again (beyond kubelet, as KubeEdge). Only
/// what defines a pod is kept (no status, managed fields or resource
/// version), so status updates never rewrite the file; it is rewritten,
/// atomically, before the sync loop hears of a change, so a pod whose
/// deletion the agent has seen is never in it.
pub struct Checkpoint {
    pub path: std::path::PathBuf,
    last: Vec<u8>,
}

impl Checkpoint {
    pub fn new(path: std::path::PathBuf) -> Self {
        Self {
            path,
            last: Vec::new(),
        }
    }

    /// The pods saved last; none when there is no (readable) file.
    pub fn load(&mut self) -> BTreeMap<String, Value> {
        let Ok(bytes) = std::fs::read(&self.path) else {
            return BTreeMap::new();
        };
        match serde_json::from_slice(&bytes) {
            Ok(pods) => {
                self.last = bytes;
                pods
            }
            Err(e) => {
                tracing::warn!(file = %self.path.display(), "pod checkpoint unreadable, ignored: {e}");
                BTreeMap::new()
            }
        }
    }

    /// Saves `pods` when what defines them changed.
    pub fn save(&mut self, pods: &BTreeMap<String, Value>) {
        let bytes = content(pods);
        if bytes == self.last {
            return;
        }
        match edge_config::write_atomic(&self.path, &bytes) {
            Ok(()) => self.last = bytes,
            Err(e) => tracing::warn!(file = %self.path.display(), "save the pod checkpoint: {e}"),
        }
    }
}

/// The checkpoint's bytes: the pods not being deleted and not finished
/// (Succeeded or Failed, refused by admission included: never to run
/// again), without what changes with their status.
pub fn content(pods: &BTreeMap<String, Value>) -> Vec<u8> {
    let kept: BTreeMap<&String, Value> = pods
        .iter()
        .filter(|(_, p)| p["metadata"]["deletionTimestamp"].is_null())
        .filter(|(_, p)| {
            !p["status"]["phase"]
                .as_str()
                .is_some_and(crate::phase::is_terminal)
        })
        .map(|(uid, p)| {
            let mut p = p.clone();
            if let Some(o) = p.as_object_mut() {
                o.remove("status");
            }
            if let Some(m) = p["metadata"].as_object_mut() {
                m.remove("managedFields");
                m.remove("resourceVersion");
            }
            (uid, p)
        })
        .collect();
    serde_json::to_vec(&kept).unwrap_or_default()
}

/// Starts the source; the receiver sees every change of the set, after it
/// is in the checkpoint.
pub fn source(
    client: Arc<Client>,
    node: String,
    mut checkpoint: Checkpoint,
) -> chan::Receiver<ApiPods> {
    let (tx, rx) = chan::channel(None);
    tokio::spawn(async move {
        let query = Query::pods_of(&node);
        reflector::run(&client, &query, "the node's pods", |seen| {
            if let Seen::Listed(pods) | Seen::Changed(pods) = seen {
                checkpoint.save(pods);
                let _ = tx.send(Some(Arc::new(pods.clone())));
            }
            ControlFlow::Continue(())
        })
        .await;
    });
    rx
}

/// Decodes each set the API server's watch publishes ([`source`]) and
/// sends it to the sync loop; ends when either side is gone.
pub fn spawn_decoder(
    mut pods: chan::Receiver<ApiPods>,
    mut seen: Decoded,
    updates: tokio::sync::mpsc::Sender<PodUpdate>,
) {
    tokio::spawn(async move {
        while pods.changed().await.is_ok() {
            let Some(listed) = pods.borrow_and_update().clone() else {
                continue;
            };
            let update = PodUpdate {
                source: Source::Api,
                pods: desired(&listed, &mut seen),
                ready: true,
            };
            if updates.send(update).await.is_err() {
                return;
            }
        }
    });
}

/// API pods decoded before, by UID: a pod is decoded and validated again
/// only when its spec or generation changed (an image update, a resize),
/// not at every event of its life (each status update is one).
#[derive(Debug, Default)]
pub struct Decoded {
    pods: HashMap<String, DecodedPod>,
    /// Invalid pods, by UID: the resourceVersion last logged.
    pub warned: HashMap<String, String>,
}

/// A decoded pod and what it was decoded from.
#[derive(Debug)]
struct DecodedPod {
    pod: Arc<k8s_openapi::api::core::v1::Pod>,
    spec: Value,
    generation: Value,
}

/// The pods to run: those the API server has for the node, not being
/// deleted, that are valid (an invalid one is logged once per version).
pub fn desired(
    api: &BTreeMap<String, Value>,
    seen: &mut Decoded,
) -> BTreeMap<String, Arc<k8s_openapi::api::core::v1::Pod>> {
    let mut out = BTreeMap::new();
    for (uid, v) in api.iter() {
        // Being deleted, or the API server's copy of a static pod.
        if !v["metadata"]["deletionTimestamp"].is_null() || crate::config::manifest::is_mirror(v) {
            continue;
        }
        if let Some(d) = seen.pods.get(uid)
            && d.generation == v["metadata"]["generation"]
            && d.spec == v["spec"]
        {
            out.insert(uid.clone(), d.pod.clone());
            continue;
        }
        let rv = v["metadata"]["resourceVersion"].as_str().unwrap_or("");
        if seen.warned.get(uid).is_some_and(|w| w == rv) {
            continue;
        }
        match crate::config::manifest::api_pod(v.clone()) {
            Ok(p) => {
                let p = Arc::new(p);
                seen.warned.remove(uid);
                seen.pods.insert(
                    uid.clone(),
                    DecodedPod {
                        pod: p.clone(),
                        spec: v["spec"].clone(),
                        generation: v["metadata"]["generation"].clone(),
                    },
                );
                out.insert(uid.clone(), p);
            }
            Err(e) => {
                tracing::warn!(
                    pod = %format!("{}/{}", v["metadata"]["namespace"].as_str().unwrap_or(""), v["metadata"]["name"].as_str().unwrap_or("")),
                    "not run: {e}"
                );
                seen.warned.insert(uid.clone(), rv.to_string());
            }
        }
    }
    seen.pods.retain(|uid, _| api.contains_key(uid));
    seen.warned.retain(|uid, _| api.contains_key(uid));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The real API server's pods (a LIST, recorded by hand).
    const LIST: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/pods-list.json"
    ));

    fn listed() -> BTreeMap<String, Value> {
        let mut c = crate::kube::watch::Cache::default();
        c.listed(serde_json::from_str(LIST).expect("list"))
            .expect("listed");
        c.objects
    }

    #[test]
    fn the_api_servers_pods_are_run_as_they_are_unless_being_deleted_or_invalid() {
        let mut pods = listed();
        let n = pods.len();
        assert!(n >= 3);
        let mut seen = Decoded::default();
        let run = desired(&pods, &mut seen);
        assert_eq!(
            run.len(),
            n,
            "every recorded pod validates: {:?}",
            seen.warned
        );
        // A pod's next event (a status update) does not decode it again.
        let (uid0, _) = run.iter().next().expect("a pod");
        pods.get_mut(uid0).expect("pod")["status"]["phase"] = json!("Running");
        let again = desired(&pods, &mut seen);
        assert!(run.iter().all(|(uid, p)| Arc::ptr_eq(p, &again[uid])));
        // A changed spec (a resize, a new image) is decoded again.
        pods.get_mut(uid0).expect("pod")["spec"]["containers"][0]["image"] = json!("busybox:2");
        pods.get_mut(uid0).expect("pod")["metadata"]["generation"] = json!(2);
        let changed = desired(&pods, &mut seen);
        assert_eq!(
            changed[uid0].spec.as_ref().expect("spec").containers[0]
                .image
                .as_deref(),
            Some("busybox:2")
        );
        assert_eq!(changed[uid0].metadata.generation, Some(2));
        let (uid, first) = run.iter().next().expect("a pod");
        assert_eq!(first.metadata.uid.as_deref(), Some(uid.as_str()));
        let name = first.metadata.name.clone().expect("name");
        assert!(!name.ends_with("pk-node"), "no static-pod suffix: {name}");
        let mut uids = pods.keys().cloned();
        let deleting = uids.next().expect("uid");
        let invalid = uids.next().expect("uid");
        pods.get_mut(&deleting).expect("pod")["metadata"]["deletionTimestamp"] =
            json!("2026-11-25T21:00:00Z");
        pods.get_mut(&invalid).expect("pod")["spec"]["containers"] = json!([]);
        // Decoded before: the recorded pods count as new ones here.
        let mut seen = Decoded::default();
        let run = desired(&pods, &mut seen);
        assert_eq!(run.len(), n - 2);
        assert!(!run.contains_key(&deleting) && !run.contains_key(&invalid));
        assert_eq!(
            seen.warned.len(),
            1,
            "the invalid pod is logged, once a version"
        );
        pods.remove(&invalid);
        desired(&pods, &mut seen);
        assert!(seen.warned.is_empty(), "forgotten with the pod");
    }

    #[test]
    fn the_checkpoint_keeps_what_defines_the_pods_and_survives_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("api-pods.json");
        let mut pods = listed();
        let mut cp = Checkpoint::new(path.clone());
        cp.save(&pods);
        let saved = std::fs::read(&path).expect("saved");
        // A status update alone (a new resourceVersion, managed fields,
        // status) writes nothing: flash is not worn by heartbeats.
        let uid = pods.keys().next().expect("a pod").clone();
        let p = pods.get_mut(&uid).expect("pod");
        p["status"]["phase"] = json!("Running");
        p["metadata"]["resourceVersion"] = json!("424242");
        assert_eq!(content(&pods), saved);
        // A restarted agent runs the same pods from it.
        let loaded = Checkpoint::new(path.clone()).load();
        assert_eq!(
            loaded.keys().collect::<Vec<_>>(),
            pods.keys().collect::<Vec<_>>()
        );
        assert_eq!(desired(&loaded, &mut Decoded::default()).len(), pods.len());
        // A pod seen being deleted leaves the checkpoint at once.
        pods.get_mut(&uid).expect("pod")["metadata"]["deletionTimestamp"] =
            json!("2026-11-25T21:00:00Z");
        cp.save(&pods);
        let loaded = Checkpoint::new(path.clone()).load();
        assert!(!loaded.contains_key(&uid));
        assert_eq!(loaded.len(), pods.len() - 1);
        // A pod that finished (or was refused) leaves it too: a restarted
        // agent must not run it again before the API server answers.
        let done = pods.keys().nth(1).expect("a second pod").clone();
        pods.get_mut(&done).expect("pod")["status"]["phase"] = json!("Failed");
        cp.save(&pods);
        let loaded = Checkpoint::new(path.clone()).load();
        assert!(!loaded.contains_key(&done));
        // A damaged file is ignored, not fatal.
        std::fs::write(&path, b"{not json").expect("write");
        assert!(Checkpoint::new(path).load().is_empty());
    }
}
