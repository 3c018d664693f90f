//! The API server as a pod source and the pods' status manager (kubelet's
//! `config/apiserver.go` and `status_manager.go`).
//!
//! The source lists then watches the pods bound to this node (from the
//! last resourceVersion; bookmarks on; a 410 or an error event relists;
//! back-off on failures) and publishes the whole set on a `watch` channel
//! that the sync loop merges with the static pods.
//!
//! The status manager PATCHes a pod's status when the worker's differs
//! from the last one sent, with the pod's UID as precondition, and ends a
//! deleted pod's life: once a pod with a deletionTimestamp has no worker
//! left (terminated with its grace), the final DELETE with
//! gracePeriodSeconds 0 and the UID precondition.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::sync::watch as chan;

use super::client::Client;
use super::watch::{self, Cache, Next};

/// The node's pods by UID, as the API server last said; None until the
/// first LIST answered.
pub type ApiPods = Option<Arc<BTreeMap<String, Value>>>;

const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Watches last 5 to 10 minutes (client-go's reflector), spread by node.
fn watch_timeout(node: &str) -> u32 {
    300 + node.bytes().map(u32::from).sum::<u32>() % 300
}

/// Starts the source; the receiver sees every change of the set.
pub fn source(client: Arc<Client>, node: String) -> chan::Receiver<ApiPods> {
    let (tx, rx) = chan::channel(None);
    tokio::spawn(async move {
        let mut delay = BACKOFF_MIN;
        loop {
            let mut cache = Cache::default();
            let listed = match client.get(&watch::list_path(&node)).await {
                Ok(list) => cache.listed(list),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = listed {
                tracing::warn!(node = %node, "list the node's pods: {e}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(BACKOFF_MAX);
                continue;
            }
            let _ = tx.send(Some(Arc::new(cache.pods.clone())));
            'watch: loop {
                let path = watch::watch_path(&node, &cache.resource_version, watch_timeout(&node));
                let mut lines = match client.watch(&path).await {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!(node = %node, "watch the node's pods: {e}");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(BACKOFF_MAX);
                        break 'watch;
                    }
                };
                delay = BACKOFF_MIN;
                while let Some(line) = lines.next().await {
                    let ev = match line {
                        Ok(ev) => ev,
                        Err(e) => {
                            tracing::warn!(node = %node, "{e}");
                            continue 'watch;
                        }
                    };
                    match cache.event(&ev) {
                        Next::Continue(true) => {
                            let _ = tx.send(Some(Arc::new(cache.pods.clone())));
                        }
                        Next::Continue(false) => {}
                        Next::Relist(why) => {
                            tracing::info!(node = %node, "relisting the node's pods: {why}");
                            break 'watch;
                        }
                    }
                }
                // The server ended the watch: go on from where it got.
            }
        }
    });
    rx
}

/// The pods to run: those the API server has for the node, not being
/// deleted, that are valid (an invalid one is logged once per version).
pub fn desired(
    api: &BTreeMap<String, Value>,
    warned: &mut HashMap<String, String>,
) -> BTreeMap<String, Arc<k8s_openapi::api::core::v1::Pod>> {
    let mut out = BTreeMap::new();
    for (uid, v) in api.iter() {
        if !v["metadata"]["deletionTimestamp"].is_null() {
            continue;
        }
        match crate::manifest::api_pod(v.clone()) {
            Ok(p) => {
                out.insert(uid.clone(), Arc::new(p));
            }
            Err(e) => {
                let rv = v["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                if warned.get(uid) != Some(&rv) {
                    tracing::warn!(
                        pod = %format!("{}/{}", v["metadata"]["namespace"].as_str().unwrap_or(""), v["metadata"]["name"].as_str().unwrap_or("")),
                        "not run: {e}"
                    );
                    warned.insert(uid.clone(), rv);
                }
            }
        }
    }
    warned.retain(|uid, _| api.contains_key(uid));
    out
}

/// What the status manager needs of the agent.
pub struct StatusSync {
    pub client: Arc<Client>,
    pub pods: chan::Receiver<ApiPods>,
    pub statuses: crate::status::Manager,
    /// Whether the pod (by UID) still has a worker (running or terminating).
    pub has_worker: Box<dyn Fn(&str) -> bool + Send + Sync>,
}

/// Every second: statuses that changed, final deletes.
pub fn spawn_status(s: StatusSync) {
    tokio::spawn(async move {
        let mut sent: HashMap<String, Value> = HashMap::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let Some(pods) = s.pods.borrow().clone() else {
                continue;
            };
            for (uid, v) in pods.iter() {
                let ns = v["metadata"]["namespace"].as_str().unwrap_or("default");
                let name = v["metadata"]["name"].as_str().unwrap_or("");
                let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
                if !v["metadata"]["deletionTimestamp"].is_null() && !(s.has_worker)(uid) {
                    let body = json!({
                        "kind": "DeleteOptions",
                        "apiVersion": "v1",
                        "gracePeriodSeconds": 0,
                        "preconditions": {"uid": uid},
                    });
                    match s
                        .client
                        .json(Method::DELETE, &path, Some(&body), None)
                        .await
                    {
                        Ok(_) => {
                            tracing::info!(pod = %format!("{ns}/{name}"), "deleted from the API server")
                        }
                        Err(e)
                            if matches!(
                                e.status(),
                                Some(StatusCode::NOT_FOUND | StatusCode::CONFLICT)
                            ) => {}
                        Err(e) => tracing::warn!(pod = %format!("{ns}/{name}"), "delete: {e}"),
                    }
                    continue;
                }
                let Some(status) = s
                    .statuses
                    .get(uid)
                    .and_then(|p| serde_json::to_value(p.status?).ok())
                else {
                    continue;
                };
                if sent.get(uid) == Some(&status) || v["status"] == status {
                    sent.insert(uid.clone(), status);
                    continue;
                }
                let patch = json!({"metadata": {"uid": uid}, "status": status});
                match s
                    .client
                    .json(
                        Method::PATCH,
                        &format!("{path}/status"),
                        Some(&patch),
                        Some("application/strategic-merge-patch+json"),
                    )
                    .await
                {
                    Ok(_) => {
                        sent.insert(uid.clone(), status);
                    }
                    // Gone, or another pod of that name now: nothing to update.
                    Err(e)
                        if matches!(
                            e.status(),
                            Some(
                                StatusCode::NOT_FOUND
                                    | StatusCode::CONFLICT
                                    | StatusCode::UNPROCESSABLE_ENTITY
                            )
                        ) =>
                    {
                        tracing::debug!("pod status: {e}");
                    }
                    Err(e) => {
                        tracing::warn!(pod = %format!("{ns}/{name}"), "update the pod status: {e}")
                    }
                }
            }
            sent.retain(|uid, _| pods.contains_key(uid));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real API server's pods (a LIST, recorded by hand).
    const LIST: &str = include_str!("testdata/pods-list.json");

    fn listed() -> BTreeMap<String, Value> {
        let mut c = Cache::default();
        c.listed(serde_json::from_str(LIST).expect("list"))
            .expect("listed");
        c.pods
    }

    #[test]
    fn the_api_servers_pods_are_run_as_they_are_unless_being_deleted_or_invalid() {
        let mut pods = listed();
        let n = pods.len();
        assert!(n >= 3);
        let mut warned = HashMap::new();
        let run = desired(&pods, &mut warned);
        assert_eq!(run.len(), n, "every recorded pod validates: {warned:?}");
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
        let run = desired(&pods, &mut warned);
        assert_eq!(run.len(), n - 2);
        assert!(!run.contains_key(&deleting) && !run.contains_key(&invalid));
        assert_eq!(warned.len(), 1, "the invalid pod is logged, once a version");
        pods.remove(&invalid);
        desired(&pods, &mut warned);
        assert!(warned.is_empty(), "forgotten with the pod");
    }
}
