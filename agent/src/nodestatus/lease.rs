//! The node's Lease in `kube-node-lease`, kubelet's heartbeat: created
//! once (owned by the Node, so it goes with it), or taken over by a PUT
//! of the version the server has (the agent restarted), then renewed
//! every quarter of its duration by a merge PATCH of its holder, duration
//! and renew time (kubelet PUTs the whole lease: ~100 bytes up instead of
//! ~600, and an answer in protobuf left unread). Only this node may write
//! its lease (NodeRestriction), so nothing is overwritten that a PUT's
//! version check would have kept. Pure.

use serde_json::{Value, json};

pub const NAMESPACE: &str = "kube-node-lease";

/// Its path, with `name` or for the collection.
pub fn path(name: Option<&str>) -> String {
    let base = format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases");
    match name {
        Some(n) => format!("{base}/{n}"),
        None => base,
    }
}

fn owner(node: &str, node_uid: &str) -> Value {
    json!([{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}])
}

/// A new lease held by `node` for `seconds`, renewed at `now` (MicroTime).
pub fn new(node: &str, node_uid: Option<&str>, seconds: u32, now: &str) -> Value {
    let mut l = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node, "namespace": NAMESPACE},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": seconds, "renewTime": now},
    });
    if let Some(uid) = node_uid {
        l["metadata"]["ownerReferences"] = owner(node, uid);
    }
    l
}

/// `last` (the server's latest version, its resourceVersion kept) renewed
/// at `now`; the Node becomes its owner if it had none.
pub fn renewed(last: &Value, node: &str, node_uid: Option<&str>, seconds: u32, now: &str) -> Value {
    let mut l = last.clone();
    l["spec"]["holderIdentity"] = json!(node);
    l["spec"]["leaseDurationSeconds"] = json!(seconds);
    l["spec"]["renewTime"] = json!(now);
    let owned = l["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|o| !o.is_empty());
    if let (false, Some(uid)) = (owned, node_uid) {
        l["metadata"]["ownerReferences"] = owner(node, uid);
    }
    l
}

/// The merge patch that renews the lease at `now`.
pub fn renewal(node: &str, seconds: u32, now: &str) -> Value {
    json!({"spec": {"holderIdentity": node, "leaseDurationSeconds": seconds, "renewTime": now}})
}

/// MicroTime: RFC 3339 with exactly six fractional digits, as the API
/// server parses it.
pub fn micro_time(t: k8s_openapi::jiff::Timestamp) -> String {
    format!("{t:.6}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real kube-apiserver's (1.26) answer to the creation of a lease,
    /// recorded by hand.
    const CREATED: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/lease-created.json"
    ));

    #[test]
    fn a_renewal_keeps_the_servers_version_and_sets_the_owner() {
        let last: Value = serde_json::from_str(CREATED).expect("recorded lease");
        let rv = last["metadata"]["resourceVersion"].clone();
        assert!(rv.is_string());
        let r = renewed(
            &last,
            "pk-node",
            Some("u-1"),
            40,
            "2026-11-25T21:30:00.000001Z",
        );
        assert_eq!(r["metadata"]["resourceVersion"], rv);
        assert_eq!(r["spec"]["renewTime"], "2026-11-25T21:30:00.000001Z");
        assert_eq!(r["spec"]["holderIdentity"], "pk-node");
        // The recording had its owner already: kept as it was.
        assert_eq!(
            r["metadata"]["ownerReferences"],
            last["metadata"]["ownerReferences"]
        );
        let mut unowned = last.clone();
        unowned["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("ownerReferences");
        let r = renewed(&unowned, "pk-node", Some("u-1"), 40, "t");
        assert_eq!(r["metadata"]["ownerReferences"][0]["uid"], "u-1");
    }

    #[test]
    fn a_renewal_patches_the_holder_duration_and_time_only() {
        let p = renewal("pk-node", 40, "2026-11-25T21:30:00.000001Z");
        assert_eq!(
            p.to_string(),
            r#"{"spec":{"holderIdentity":"pk-node","leaseDurationSeconds":40,"renewTime":"2026-11-25T21:30:00.000001Z"}}"#
        );
    }

    #[test]
    fn new_leases_and_micro_times() {
        let l = new("pk-node", None, 40, "t");
        assert_eq!(l["metadata"]["namespace"], NAMESPACE);
        assert!(l["metadata"].get("ownerReferences").is_none());
        assert_eq!(l["spec"]["leaseDurationSeconds"], 40);
        let t = k8s_openapi::jiff::Timestamp::from_second(1_795_640_000).expect("time");
        assert_eq!(micro_time(t), "2026-11-25T20:53:20.000000Z");
        assert_eq!(
            path(Some("n")),
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n"
        );
    }
}
