//! End-to-end: an API pod resized in place (the `resize` subresource's
//! new spec, same UID) by the agent's pod workers on the real shim and
//! this host's cgroups: the container's and the pod's cgroup get the new
//! CPU quota and memory limit, the container keeps running (same ID,
//! restart count 0), and the pod status reports what the runtime now has.
//! Root.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::cri_config::NodeInfo;
use agent::events::Recorder;
use agent::pod_workers::{Ctx, PodWorkers};
use agent::runtime::Cri;
use agent::{metrics, prober, status};

use crate::common;
use common::rt::{cgroup_file, ready_shim};
use common::wait::eventually_async;

const UID: &str = "5e7a11ce-0000-4000-8000-000000000001";

/// Gives the workers the API server's pods: `rz` at `generation`,
/// Guaranteed with `cpu`/`memory` (None: no pod).
fn set_pods(workers: &PodWorkers, generation: i64, resources: Option<(&str, &str)>) {
    let pods: BTreeMap<String, _> = resources
        .map(|(cpu, memory)| {
            let pod = agent::config::manifest::api_pod(serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "rz", "namespace": "default", "uid": UID, "generation": generation},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "c", "image": "busybox", "command": ["sleep", "600"],
                        "resources": {
                            "limits": {"cpu": cpu, "memory": memory},
                            "requests": {"cpu": cpu, "memory": memory},
                        },
                    }],
                },
            }))
            .expect("valid API pod");
            (UID.to_string(), Arc::new(pod))
        })
        .into_iter()
        .collect();
    workers.update(&pods);
}

/// `c`'s (container id, restart count, limits cpu, limits memory) as
/// the pod status reports them.
fn reported(s: &status::Manager) -> Option<(String, i32, String, String)> {
    let st = s.get(UID)?.status?.container_statuses?.pop()?;
    st.state.as_ref()?.running.as_ref()?;
    let lim = st.resources?.limits?;
    Some((
        st.container_id?
            .trim_start_matches("picolet://")
            .to_string(),
        st.restart_count,
        lim.get("cpu")?.0.clone(),
        lim.get("memory")?.0.clone(),
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resized_pod_gets_its_new_cgroup_limits_in_place() {
    require_root!();
    let (shim, _client) = ready_shim().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cgroup_root = shim.cgroup_parent("resize");
    let config = edge_config::Config {
        cri_socket: shim.socket(),
        cgroups_per_qos: true,
        cgroup_root: cgroup_root.clone(),
        data_dir: dir.path().join("data"),
        pod_logs_dir: dir.path().join("logs"),
        resolv_conf: dir.path().join("resolv.conf"),
        ..Default::default()
    };
    std::fs::write(&config.resolv_conf, "nameserver 10.0.0.1\n").expect("resolv.conf");
    let agent_metrics = Arc::new(metrics::AgentMetrics::default());
    let statuses = status::Manager::default();
    let workers = PodWorkers::new(Ctx {
        cri: Cri::connect(
            &shim.socket(),
            Duration::from_secs(10),
            agent_metrics.clone(),
        )
        .await
        .expect("connect to the shim"),
        config: Arc::new(config),
        node: Arc::new(NodeInfo {
            name: "node".into(),
            host_ip: "127.0.0.1".into(),
            cpu_milli: 2000,
            memory_bytes: 1 << 30,
            // Swap limited with memory, as the agent does where it can:
            // a resize moves both, in the order the kernel accepts.
            swap: if std::path::Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
                .exists()
            {
                agent::cri_config::SwapControl::V1
            } else {
                agent::cri_config::SwapControl::Unavailable
            },
        }),
        runtime_name: "picolet".into(),
        cgroups: Some(cgroup::Hierarchy::detect().expect("cgroups")),
        recorder: Recorder::new(100, "node"),
        statuses: statuses.clone(),
        probe_metrics: prober::Metrics::default(),
        metrics: agent_metrics,
        started: Instant::now(),
        objects: None,
        devices: None,
        userns: None,
        allocatable: agent::lifecycle::predicate::Resources {
            cpu_milli: 2000,
            memory: 1 << 30,
            ephemeral: 10 << 30,
            pods: 110,
        },
    });
    let patience = Duration::from_secs(30);
    set_pods(&workers, 1, Some(("200m", "64Mi")));
    let (id, _, _, _) = eventually_async(
        "the pod running",
        patience,
        async || reported(&statuses),
        || shim.log(),
    )
    .await;
    let pod_cg = format!("{cgroup_root}/kubepods/pod{UID}");
    let ctr_cg = format!("{pod_cg}/{id}");
    let limits = |cg: &str| {
        (
            cgroup_file("cpu", cg, "cpu.cfs_quota_us"),
            cgroup_file("memory", cg, "memory.limit_in_bytes"),
        )
    };
    assert_eq!(limits(&ctr_cg), ("20000".into(), (64u64 << 20).to_string()));
    assert_eq!(limits(&pod_cg), ("20000".into(), (64u64 << 20).to_string()));

    set_pods(&workers, 2, Some(("300m", "96Mi")));
    let now = eventually_async(
        "the new limits reported",
        patience,
        async || reported(&statuses).filter(|r| r.2 == "300m"),
        || shim.log(),
    )
    .await;
    assert_eq!(
        now,
        (id.clone(), 0, "300m".into(), "96Mi".into()),
        "in place"
    );
    assert_eq!(limits(&ctr_cg), ("30000".into(), (96u64 << 20).to_string()));
    assert_eq!(limits(&pod_cg), ("30000".into(), (96u64 << 20).to_string()));
    if std::path::Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists() {
        assert_eq!(
            cgroup_file("memory", &ctr_cg, "memory.memsw.limit_in_bytes"),
            (96u64 << 20).to_string()
        );
    }
    // The same process, still in that cgroup.
    assert!(!cgroup_file("memory", &ctr_cg, "cgroup.procs").is_empty());

    // Gone from its source: stopped and removed, its allocation too.
    set_pods(&workers, 3, None);
    eventually_async(
        "the pod gone",
        patience,
        async || !workers.has_worker(UID),
        || shim.log(),
    )
    .await;
    assert!(!dir.path().join("data/allocation").join(UID).exists());
    // The pod's cgroup is gone; the QoS level above it is the node's (the
    // agent keeps it, as kubelet does): the test's to remove.
    for h in std::fs::read_dir("/sys/fs/cgroup")
        .expect("cgroup fs")
        .flatten()
    {
        let kubepods = h
            .path()
            .join(cgroup_root.trim_start_matches('/'))
            .join("kubepods");
        assert!(
            !kubepods.join(format!("pod{UID}")).exists(),
            "{}",
            kubepods.display()
        );
        remove_empty(&kubepods);
    }
    shim.assert_host_clean();
}

/// Removes `dir` and the empty directories below it, deepest first.
fn remove_empty(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_empty(&e.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}
