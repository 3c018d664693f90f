//! Mirror pods (kubelet's `mirror_client.go`): each static pod has a copy
//! in the API server so `kubectl get pods` shows it, bound to this node,
//! owned by the Node object, annotated `kubernetes.io/config.mirror` with
//! the static pod's hash. A mirror pod deleted by someone is made again; a
//! static pod gone takes its mirror with it; one whose manifest changed
//! gets a new mirror (the hash changed). Mirror pods are never run: the
//! static pod is. Pure: what to create and delete.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

pub use crate::config::manifest::is_mirror;
use crate::config::manifest::{CONFIG_HASH, CONFIG_MIRROR};

/// What to do: mirrors to create (the pod objects), and mirrors to delete
/// as (namespace, name, uid).
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub create: Vec<Value>,
    pub delete: Vec<(String, String, String)>,
}

/// Compares the static pods (by UID = hash) with the API server's mirrors.
pub fn plan(
    statics: &BTreeMap<String, Arc<Pod>>,
    api: &BTreeMap<String, Value>,
    node: &str,
    node_uid: Option<&str>,
) -> Plan {
    let mut p = Plan::default();
    let mut mirrored = std::collections::BTreeSet::new();
    for (uid, m) in api.iter().filter(|(_, m)| is_mirror(m)) {
        let hash = m["metadata"]["annotations"][CONFIG_MIRROR]
            .as_str()
            .unwrap_or("");
        let deleting = !m["metadata"]["deletionTimestamp"].is_null();
        let name = |k: &str| m["metadata"][k].as_str().unwrap_or("").to_string();
        if statics.contains_key(hash) && !deleting {
            mirrored.insert(hash.to_string());
        } else if !deleting {
            p.delete
                .push((name("namespace"), name("name"), uid.clone()));
        }
    }
    for (uid, pod) in statics {
        if mirrored.contains(uid) {
            continue;
        }
        // A mirror of the same name still going away: wait for it.
        let name = pod.metadata.name.as_deref().unwrap_or("");
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let taken = api
            .values()
            .any(|m| m["metadata"]["name"] == name && m["metadata"]["namespace"] == ns);
        if taken {
            continue;
        }
        p.create.push(mirror_of(pod, node, node_uid));
    }
    p
}

/// The mirror pod of a static pod: its spec, its labels and annotations
/// plus the mirror annotation, without UID or status.
fn mirror_of(pod: &Pod, node: &str, node_uid: Option<&str>) -> Value {
    let mut m = serde_json::to_value(pod).unwrap_or_default();
    let hash = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_HASH))
        .cloned()
        .or_else(|| pod.metadata.uid.clone())
        .unwrap_or_default();
    if let Some(o) = m.as_object_mut() {
        o.remove("status");
    }
    if let Some(meta) = m["metadata"].as_object_mut() {
        meta.remove("uid");
        meta.remove("resourceVersion");
    }
    m["apiVersion"] = json!("v1");
    m["kind"] = json!("Pod");
    m["metadata"]["annotations"][CONFIG_MIRROR] = json!(hash);
    m["spec"]["nodeName"] = json!(node);
    if let Some(uid) = node_uid {
        m["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "v1", "kind": "Node", "name": node, "uid": uid, "controller": true,
        }]);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn static_pod(name: &str, uid: &str) -> Arc<Pod> {
        let text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers: [{{name: c, image: busybox}}]\n"
        );
        let mut pods = crate::config::manifest::parse(
            std::path::Path::new("/etc/picolet/manifests/x.yaml"),
            &text,
            "pk-edge",
            "2026-11-25T21:00:00Z",
        )
        .expect("manifest");
        let mut p = pods.remove(0);
        p.metadata.uid = Some(uid.into());
        p.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(CONFIG_HASH.into(), uid.into());
        Arc::new(p)
    }

    fn mirror(name: &str, hash: &str, uid: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "default", "uid": uid,
            "annotations": {CONFIG_MIRROR: hash}}})
    }

    #[test]
    fn each_static_pod_gets_one_mirror_and_strays_go() {
        let statics = BTreeMap::from([
            ("h1".to_string(), static_pod("web", "h1")),
            ("h2".to_string(), static_pod("db", "h2")),
        ]);
        let api = BTreeMap::from([
            ("u1".to_string(), mirror("web-pk-edge", "h1", "u1")),
            // A mirror of a manifest since changed or removed.
            ("u9".to_string(), mirror("old-pk-edge", "h9", "u9")),
            // An ordinary API pod is none of this plan's business.
            (
                "u5".to_string(),
                json!({"metadata": {"name": "app", "namespace": "default", "uid": "u5"}}),
            ),
        ]);
        let p = plan(&statics, &api, "pk-edge", Some("node-uid"));
        assert_eq!(
            p.delete,
            [(
                "default".to_string(),
                "old-pk-edge".to_string(),
                "u9".to_string()
            )]
        );
        assert_eq!(p.create.len(), 1);
        let m = &p.create[0];
        assert_eq!(m["metadata"]["name"], "db-pk-edge");
        assert_eq!(m["metadata"]["annotations"][CONFIG_MIRROR], "h2");
        assert_eq!(m["metadata"]["ownerReferences"][0]["uid"], "node-uid");
        assert_eq!(m["spec"]["nodeName"], "pk-edge");
        assert!(m["metadata"].get("uid").is_none() && m.get("status").is_none());
        assert!(is_mirror(m));
    }

    #[test]
    fn a_mirror_going_away_is_waited_for_not_duplicated() {
        let statics = BTreeMap::from([("h1".to_string(), static_pod("web", "h1"))]);
        let mut going = mirror("web-pk-edge", "h1", "u1");
        going["metadata"]["deletionTimestamp"] = json!("2026-11-25T21:00:00Z");
        let api = BTreeMap::from([("u1".to_string(), going)]);
        assert_eq!(plan(&statics, &api, "pk-edge", None), Plan::default());
    }
}
