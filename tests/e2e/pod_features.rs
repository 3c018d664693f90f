//! End-to-end: pod features kubelet 1.36 has on by default, on `picolet
//! agent` and the real shim. A static pod with resources of its own
//! (`spec.resources`, PodLevelResources): its class and pod cgroup come
//! from them, and a container that sets no limit of its own gets the
//! pod's. A container's own restart rules (ContainerRestartRules). Root
//! only.

use crate::common;

use std::time::Duration;

use common::agent::{Agent, container};

const T: Duration = Duration::from_secs(30);

#[test]
fn the_pods_own_limits_bound_its_cgroup_and_its_unlimited_containers() {
    require_root!();
    let agent = Agent::start("");
    agent.write_manifest(
        "shared.yaml",
        r#"apiVersion: v1
kind: Pod
metadata: {name: shared}
spec:
  terminationGracePeriodSeconds: 1
  resources:
    limits: {cpu: 300m, memory: 48Mi}
  containers:
  - name: free
    image: busybox:latest
    imagePullPolicy: Never
    command: [sleep, '600']
  - name: capped
    image: busybox:latest
    imagePullPolicy: Never
    command: [sleep, '600']
    resources:
      limits: {memory: 32Mi}
"#,
    );
    let p = agent.wait_pod("shared", "both running", T, |p| {
        ["free", "capped"]
            .iter()
            .all(|c| container(p, c)["state"]["running"].is_object())
    });
    // The pod's memory request defaults to what its containers request
    // (32Mi), below its limit: Burstable.
    assert_eq!(p["status"]["qosClass"], "Burstable");
    let uid = p["metadata"]["uid"].as_str().expect("uid");
    let pod_cg = format!("{}/kubepods/burstable/pod{uid}", agent.cgroup_root());
    let read = |ctrl: &str, cg: &str, file: &str| {
        std::fs::read_to_string(format!("/sys/fs/cgroup/{ctrl}{cg}/{file}"))
            .unwrap_or_else(|e| panic!("{ctrl}{cg}/{file}: {e}"))
            .trim()
            .to_string()
    };
    assert_eq!(
        read("memory", &pod_cg, "memory.limit_in_bytes"),
        (48u64 << 20).to_string()
    );
    assert_eq!(read("cpu", &pod_cg, "cpu.cfs_quota_us"), "30000");
    assert_eq!(read("cpu", &pod_cg, "cpu.shares"), "307");
    let id = |name: &str| {
        container(&p, name)["containerID"]
            .as_str()
            .expect("id")
            .trim_start_matches("picolet://")
            .to_string()
    };
    let free = format!("{pod_cg}/{}", id("free"));
    let capped = format!("{pod_cg}/{}", id("capped"));
    assert_eq!(
        read("memory", &free, "memory.limit_in_bytes"),
        (48u64 << 20).to_string(),
        "the pod's"
    );
    assert_eq!(read("cpu", &free, "cpu.cfs_quota_us"), "30000", "the pod's");
    assert_eq!(
        read("memory", &capped, "memory.limit_in_bytes"),
        (32u64 << 20).to_string(),
        "its own"
    );
    assert_eq!(
        read("cpu", &capped, "cpu.cfs_quota_us"),
        "30000",
        "the pod's"
    );
    // No swap, as kubelet's default (NoSwap): memory + swap = memory.
    if std::path::Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists() {
        assert_eq!(
            read("memory", &capped, "memory.memsw.limit_in_bytes"),
            (32u64 << 20).to_string()
        );
    }
}

/// kubelet's ContainerRestartRules: in a pod that never restarts, a
/// container whose rule restarts it on exit code 42 runs again after
/// exiting 42, and the pod ends Succeeded once it exits 0.
#[test]
fn a_restart_rule_reruns_a_container_on_its_exit_code() {
    require_root!();
    let agent = Agent::start("");
    let script = "n=$(cat /out/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /out/n; [ $n -lt 2 ] && exit 42; exit 0";
    let text = common::agent::pod(&agent, "rules", script, "  restartPolicy: Never\n").replace(
        "    imagePullPolicy: IfNotPresent\n",
        "    imagePullPolicy: IfNotPresent\n    restartPolicy: Never\n    restartPolicyRules:\n    - {action: Restart, exitCodes: {operator: In, values: [42]}}\n",
    );
    agent.write_manifest("rules.yaml", &text);
    let p = agent.wait_pod("rules", "Succeeded", T, |p| {
        p["status"]["phase"] == "Succeeded"
    });
    let main = container(&p, "main");
    assert_eq!(main["restartCount"], 1, "{main}");
    assert_eq!(main["state"]["terminated"]["exitCode"], 0, "{main}");
    assert_eq!(
        std::fs::read_to_string(agent.host_dir().join("n"))
            .expect("n")
            .trim(),
        "2"
    );
}
