//! The pods' status manager towards the API server (kubelet's
//! `status_manager.go`): it PATCHes a pod's status when the worker's
//! differs from the last one sent, with the pod's UID as precondition,
//! keeps the static pods' mirror pods ([`crate::pod::mirror`]), and ends a
//! deleted pod's life: once a pod with a deletionTimestamp has no worker
//! left (terminated with its grace), the final DELETE with
//! gracePeriodSeconds 0 and the UID precondition.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::sync::watch as chan;

use crate::config::apiserver::ApiPods;
use crate::kube::client::Client;

/// What the status manager needs of the agent.
pub struct StatusSync {
    pub client: Arc<Client>,
    pub node: String,
    /// The Node's UID once registered (mirror pods' owner).
    pub node_uid: Arc<std::sync::OnceLock<String>>,
    pub pods: chan::Receiver<ApiPods>,
    /// The static pods, which get mirror pods.
    pub statics: chan::Receiver<BTreeMap<String, Arc<k8s_openapi::api::core::v1::Pod>>>,
    pub statuses: super::Manager,
    /// Whether the pod (by UID) still has a worker (running or terminating).
    pub has_worker: Box<dyn Fn(&str) -> bool + Send + Sync>,
}

/// At every status change, and every second: statuses that changed,
/// mirror pods, final deletes.
pub fn spawn_status(s: StatusSync) {
    tokio::spawn(async move {
        let mut sent: HashMap<String, Value> = HashMap::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = s.statuses.changed() => {}
            }
            let Some(pods) = s.pods.borrow().clone() else {
                continue;
            };
            mirrors(&s, &pods).await;
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
                // A mirror shows its static pod's status.
                let status_of = match v["metadata"]["annotations"]
                    [crate::config::manifest::CONFIG_MIRROR]
                    .as_str()
                {
                    Some(hash) => hash,
                    None => uid.as_str(),
                };
                let Some(status) = s
                    .statuses
                    .get(status_of)
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
                    // Gone, or another pod of that name now: nothing to
                    // update. (A status the API server finds invalid is
                    // warned of below: it would never show.)
                    Err(e)
                        if matches!(
                            e.status(),
                            Some(StatusCode::NOT_FOUND | StatusCode::CONFLICT)
                        ) =>
                    {
                        tracing::debug!("pod status: {e}");
                    }
                    // Refused as invalid: said once, not resent until the
                    // status changes again.
                    Err(e) if e.status() == Some(StatusCode::UNPROCESSABLE_ENTITY) => {
                        tracing::warn!(pod = %format!("{ns}/{name}"), "the API server refused the pod status: {e}");
                        sent.insert(uid.clone(), status);
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

/// Creates the missing mirror pods, deletes the stray ones.
async fn mirrors(s: &StatusSync, api: &BTreeMap<String, Value>) {
    let statics = s.statics.borrow().clone();
    let plan =
        crate::pod::mirror::plan(&statics, api, &s.node, s.node_uid.get().map(String::as_str));
    for m in plan.create {
        let ns = m["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        let name = m["metadata"]["name"].as_str().unwrap_or("").to_string();
        match s
            .client
            .json(
                Method::POST,
                &format!("/api/v1/namespaces/{ns}/pods"),
                Some(&m),
                None,
            )
            .await
        {
            Ok(_) => tracing::info!(pod = %format!("{ns}/{name}"), "created the mirror pod"),
            // The watch has not shown it yet.
            Err(e) if e.status() == Some(StatusCode::CONFLICT) => {}
            Err(e) => tracing::warn!(pod = %format!("{ns}/{name}"), "create the mirror pod: {e}"),
        }
    }
    for (ns, name, uid) in plan.delete {
        let body = json!({
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid},
        });
        let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
        match s
            .client
            .json(Method::DELETE, &path, Some(&body), None)
            .await
        {
            Ok(_) => tracing::info!(pod = %format!("{ns}/{name}"), "deleted a stray mirror pod"),
            Err(e)
                if matches!(
                    e.status(),
                    Some(StatusCode::NOT_FOUND | StatusCode::CONFLICT)
                ) => {}
            Err(e) => tracing::warn!(pod = %format!("{ns}/{name}"), "delete the mirror pod: {e}"),
        }
    }
}
