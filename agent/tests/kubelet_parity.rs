//! What the real kubelet v1.36.3 sent a runtime and wrote to a pod cgroup
//! for a pod resized in place and a pod with resources of its own
//! (`cri-proto/testdata/kubelet-1.36.3-resize.json`, recorded on picolet's
//! shim), against what the agent computes for the same pods: the same
//! CPU shares, quota and period, memory and swap limits, oom_score_adj,
//! QoS class and pod cgroup values. Pure.

use agent::cri_config::{NodeInfo, SwapControl, linux_resources};
use agent::qos::{self, Qos};
use k8s_openapi::api::core::v1::{Container, PodSpec};
use serde_json::{Value, json};

const RECORDED: &str = include_str!("../../cri-proto/testdata/kubelet-1.36.3-resize.json");

fn recorded() -> Value {
    serde_json::from_str(RECORDED).expect("fixture")
}

/// The recording node: its memory capacity, swap limited as on cgroup v1.
fn node(r: &Value) -> NodeInfo {
    let ki = r["node_capacity"]["memory"]
        .as_str()
        .and_then(|m| m.strip_suffix("Ki"))
        .and_then(|m| m.parse::<u128>().ok())
        .expect("memory capacity in Ki");
    NodeInfo {
        memory_bytes: ki * 1024,
        swap: SwapControl::V1,
        ..Default::default()
    }
}

fn spec(v: Value) -> PodSpec {
    serde_json::from_value(v).expect("pod spec")
}

/// The fields both set, as kubelet sent them and as the agent would.
fn compare(what: &str, kubelet: &Value, ours: &cri_proto::v1::LinuxContainerResources) {
    let ours = json!({
        "cpu_period": ours.cpu_period,
        "cpu_quota": ours.cpu_quota,
        "cpu_shares": ours.cpu_shares,
        "memory_limit_in_bytes": ours.memory_limit_in_bytes,
        "memory_swap_limit_in_bytes": ours.memory_swap_limit_in_bytes,
        "oom_score_adj": ours.oom_score_adj,
    });
    for (k, v) in ours.as_object().expect("object") {
        assert_eq!(&kubelet[k], v, "{what}: {k}");
    }
}

fn pod_cgroup(what: &str, kubelet: &Value, spec: &PodSpec) {
    let r = qos::pod_resources(spec);
    assert_eq!(
        kubelet["cpu.shares"],
        r.cpu_shares.to_string(),
        "{what}: shares"
    );
    assert_eq!(
        kubelet["cpu.cfs_quota_us"],
        r.cpu_quota.expect("a quota").to_string(),
        "{what}: quota"
    );
    assert_eq!(
        kubelet["memory.limit_in_bytes"],
        r.memory_limit.expect("a memory limit").to_string(),
        "{what}: memory"
    );
}

#[test]
fn a_resized_containers_resources_are_kubelets() {
    let r = recorded();
    let node = node(&r);
    let rz = &r["resize"];
    for (at, resources, sent) in [
        ("create", &rz["pod_spec"], &rz["create"]),
        ("update", &rz["resized_spec"], &rz["update"]),
    ] {
        let c = Container {
            name: "c".into(),
            resources: Some(serde_json::from_value(resources.clone()).expect("resources")),
            ..Default::default()
        };
        let s = PodSpec {
            containers: vec![c.clone()],
            ..Default::default()
        };
        assert_eq!(qos::qos_class(&s), Qos::Guaranteed);
        assert_eq!(rz["qosClass"], "Guaranteed");
        compare(at, sent, &linux_resources(&s, &c, Qos::Guaranteed, &node));
        if at == "update" {
            pod_cgroup(at, &rz["pod_cgroup_after"], &s);
        }
    }
    // What kubelet reported and how: the agent's status words.
    assert_eq!(
        rz["conditions_seen"][0][0],
        json!(["PodResizeInProgress", null, 2])
    );
    let reasons: Vec<&str> = rz["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e[0].as_str())
        .collect();
    assert_eq!(reasons[0], agent::events::reason::RESIZE_STARTED);
    assert!(
        reasons[1..]
            .iter()
            .all(|r| *r == agent::events::reason::RESIZE_COMPLETED)
    );
}

#[test]
fn pod_level_resources_are_kubelets() {
    let r = recorded();
    let node = node(&r);
    let pl = &r["pod_level"];
    let containers: Vec<Value> = ["free", "capped"]
        .iter()
        .map(|n| {
            let mut c = json!({"name": n, "image": "busybox:latest"});
            let res = &pl["containers"][n];
            if !res.as_object().is_some_and(|o| o.is_empty()) {
                c["resources"] = res.clone();
            }
            c
        })
        .collect();
    let s = spec(json!({"resources": pl["spec"], "containers": containers}));
    let class = qos::qos_class(&s);
    assert_eq!(pl["qosClass"], class.as_str());
    for (i, name) in ["free", "capped"].iter().enumerate() {
        compare(
            name,
            &pl["created"][name],
            &linux_resources(&s, &s.containers[i], class, &node),
        );
    }
    pod_cgroup("pod level", &pl["pod_cgroup"], &s);
}
