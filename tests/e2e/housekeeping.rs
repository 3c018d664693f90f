//! End-to-end: the agent's housekeeping on the real shim — container log
//! rotation (kubelet's containerLogMaxSize / containerLogMaxFiles, through
//! CRI ReopenContainerLog), image garbage collection (imageGC*
//! thresholds, through CRI RemoveImage) and node-pressure eviction. Root
//! only.

use crate::common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::agent::{Agent, container, phase, pod, running};
use common::test_images;

/// A container's log files, oldest first: compressed rotated ones, the
/// newest rotated one, then the live `0.log`.
fn log_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    // `0.log` sorts before `0.log.<time>`: put it last.
    files.sort_by_key(|p| {
        let n = p.file_name().map(|n| n.to_string_lossy().into_owned());
        (n.as_deref() == Some("0.log"), n)
    });
    files
}

fn text_of(p: &Path) -> String {
    let mut text = String::new();
    let f = std::fs::File::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    if p.extension().is_some_and(|e| e == "gz") {
        flate2::read::GzDecoder::new(f)
            .read_to_string(&mut text)
            .unwrap_or_else(|e| panic!("gunzip {}: {e}", p.display()));
    } else {
        std::io::BufReader::new(f)
            .read_to_string(&mut text)
            .expect("read");
    }
    text
}

/// The numbers of the container's `n <i>` lines, in file order.
fn numbers(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.split(" stdout F n ").nth(1))
        .filter_map(|rest| rest.split(' ').next()?.parse().ok())
        .collect()
}

#[test]
fn chatty_logs_rotate_compress_and_stay_within_max_files() {
    require_root!();
    let agent = Agent::start(
        "containerLogMaxSize: 8Ki\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\n",
    );
    // ~100 numbered lines of ~110 bytes a second.
    let script = "i=0; pad=$(printf %0100d 0); while true; do i=$((i+1)); echo \"n $i $pad\"; \
                  sleep 0.01; done";
    agent.write_manifest(
        "chatty.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: chatty\nspec:\n  \
             terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    \
             image: busybox:latest\n    imagePullPolicy: IfNotPresent\n    \
             command: [sh, -c, '{script}']\n"
        ),
    );
    let p = agent.wait_pod("chatty", "Running", Duration::from_secs(30), |p| {
        phase(p) == "Running" && container(p, "main")["state"]["running"].is_object()
    });
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let dir = agent
        .dir()
        .join("logs")
        .join(format!("default_chatty-e2e_{uid}"))
        .join("main");

    // Watch until two compressed files were seen; never more than 3 files.
    let mut most = 0;
    let mut gz_seen = std::collections::BTreeSet::new();
    common::eventually(
        "two compressed log files",
        Duration::from_secs(40),
        || {
            let files = log_files(&dir);
            most = most.max(files.len());
            assert!(files.len() <= 3, "over containerLogMaxFiles: {files:?}");
            for f in &files {
                if f.extension().is_some_and(|e| e == "gz") {
                    gz_seen.insert(f.clone());
                }
            }
            if gz_seen.len() >= 2 {
                Ok(())
            } else {
                Err(format!("{files:?}"))
            }
        },
        || agent.log(),
    );
    assert_eq!(most, 3);
    // The oldest compressed file goes when the second one comes (the next
    // rotation is ~3 s away); the new live file gets its first line.
    let first_gz = gz_seen.iter().next().expect("first gz");
    let files = common::eventually(
        "the oldest compressed file removed, a line in each file",
        Duration::from_secs(2),
        || {
            let files = log_files(&dir);
            if !files.contains(first_gz)
                && files.iter().all(|f| {
                    // Read without text_of's panics: a file may go meanwhile.
                    f.extension().is_some_and(|e| e == "gz")
                        || std::fs::read_to_string(f).is_ok_and(|t| t.contains('\n'))
                })
            {
                Ok(files)
            } else {
                Err(format!("{files:?}"))
            }
        },
        || agent.log(),
    );
    assert!(!files.contains(first_gz), "{files:?}");

    // No line lost or doubled across the files that are left: read oldest
    // to newest, the numbers count up by one. The first ones are gone.
    let mut all = Vec::new();
    for f in &files {
        let mut text = text_of(f);
        // The live file may end in a line still being written.
        if !text.ends_with('\n') {
            text.truncate(text.rfind('\n').map_or(0, |i| i + 1));
        }
        let n = numbers(&text);
        assert!(!n.is_empty(), "{} has no lines", f.display());
        all.extend(n);
    }
    assert!(
        all[0] > 1,
        "the oldest lines were removed: starts at {}",
        all[0]
    );
    for w in all.windows(2) {
        assert_eq!(w[1], w[0] + 1, "a gap or repeat across rotation: {files:?}");
    }
    // The live file is small again, and the pod never restarted.
    let p = agent.pod("chatty").expect("pod");
    assert_eq!(container(&p, "main")["restartCount"], 0);
    agent.remove_manifest("chatty.yaml");
    agent.wait("pod gone", Duration::from_secs(30), || {
        agent.pod("chatty").is_none()
    });
}

/// With a 1 % high threshold (any real disk is fuller) and 0 % low, every
/// image no container uses goes; the pod's image stays, and the agent says
/// it could not free enough.
#[test]
fn unused_images_are_garbage_collected_and_used_ones_stay() {
    require_root!();
    let mut agent = Agent::prepare(
        "imageGCHighThresholdPercent: 1\nimageGCLowThresholdPercent: 0\nimageMinimumGCAge: 1s\n",
    );
    agent.picolet_extra = "  imageGCPeriod: 2s\n".into();
    agent.shim.import(&test_images().layered_layout);
    agent.spawn();
    let images = || String::from_utf8_lossy(&agent.shim.ctl(&["images"]).stdout).into_owned();
    let unused = "localhost/picolet-test/layered";
    assert!(images().contains(unused), "{}", images());
    agent.write_manifest(
        "user.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: user\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    \
         image: busybox:latest\n    imagePullPolicy: IfNotPresent\n    \
         command: [sleep, '1000']\n",
    );
    agent.wait_pod("user", "Running", Duration::from_secs(30), |p| {
        phase(p) == "Running" && container(p, "main")["state"]["running"].is_object()
    });
    agent.wait("the unused image removed", Duration::from_secs(30), || {
        !images().contains(unused)
    });
    assert!(images().contains("busybox"), "{}", images());
    agent.wait("FreeDiskSpaceFailed", Duration::from_secs(10), || {
        agent
            .events()
            .iter()
            .any(|e| e["reason"] == "FreeDiskSpaceFailed")
    });
    let p = agent.pod("user").expect("pod");
    assert_eq!(container(&p, "main")["restartCount"], 0);
    agent.remove_manifest("user.yaml");
    agent.wait("pod gone", Duration::from_secs(30), || {
        agent.pod("user").is_none()
    });
}

/// An API server pod as the checkpoint keeps it (what the device ran when
/// its uplink went away): `requests` are its container's.
fn api_pod(name: &str, requests: serde_json::Value) -> (String, serde_json::Value) {
    let uid = format!("uid-{name}-{}", std::process::id());
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": "1",
                     "creationTimestamp": "2026-11-26T00:00:00Z"},
        "spec": {"nodeName": "e2e", "terminationGracePeriodSeconds": 30,
                 "containers": [{"name": "main", "image": "busybox:latest",
                                 "imagePullPolicy": "IfNotPresent",
                                 "command": ["sh", "-c", "sleep 1000"],
                                 "resources": {"requests": requests}}]},
        "status": {"phase": "Pending"},
    });
    (uid, pod)
}

/// Memory pressure on a device that lost its API server (its
/// cluster pods run from the checkpoint) evicts the BestEffort pod first,
/// then the Burstable one, never the static pod; the node reports
/// MemoryPressure on `/node`. The threshold sits between what is available
/// and the capacity, so the pods still fit allocatable.
#[test]
fn memory_pressure_evicts_best_effort_first_and_never_the_static_pod() {
    require_root!();
    let total_kib: u64 = std::fs::read_to_string("/proc/meminfo")
        .expect("meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("MemTotal");
    let mut agent = Agent::prepare(&format!(
        "evictionHard: {{memory.available: {}Ki}}\nevictionPressureTransitionPeriod: 5s\n",
        total_kib - 8 * 1024
    ));
    // Nothing listens there: the API server is away, the checkpoint rules.
    let kubeconfig = agent.dir().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
         clusters: [{name: c, cluster: {server: \"https://127.0.0.1:9\", insecure-skip-tls-verify: true}}]\n\
         users: [{name: u, user: {token: offline}}]\n\
         contexts: [{name: c, context: {cluster: c, user: u}}]\n",
    )
    .expect("kubeconfig");
    agent.picolet_extra = format!("  kubeconfig: {}\n", kubeconfig.display());
    // (`agent.pod(name)` finds `name-e2e`, a static pod's name.)
    let (be, be_pod) = api_pod("besteffort-e2e", serde_json::json!({}));
    let (bu, bu_pod) = api_pod(
        "burstable-e2e",
        serde_json::json!({"memory": "1Mi", "cpu": "10m"}),
    );
    let checkpoint = agent.shim.root().join("agent/api-pods.json");
    std::fs::create_dir_all(checkpoint.parent().expect("dir")).expect("mkdir");
    std::fs::write(
        &checkpoint,
        serde_json::to_vec(&serde_json::json!({ &be: be_pod, &bu: bu_pod })).expect("json"),
    )
    .expect("checkpoint");
    agent.write_manifest("keeper.yaml", &pod(&agent, "keeper", "sleep 1000", ""));
    agent.spawn();
    let evicted =
        |p: &serde_json::Value| phase(p) == "Failed" && p["status"]["reason"] == "Evicted";
    let first = agent.wait_pod("besteffort", "evicted", Duration::from_secs(60), evicted);
    let at = Instant::now();
    let msg = first["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.starts_with("The node was low on resource: memory. Threshold quantity: ")
            && msg.contains("Container main was using "),
        "{msg}"
    );
    let cond = |p: &serde_json::Value, t: &str| {
        p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == t)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(
        cond(&first, "DisruptionTarget")["reason"],
        "TerminationByKubelet"
    );
    // The Burstable pod was still running when the BestEffort one went.
    assert!(
        !evicted(&agent.pod("burstable").expect("burstable")),
        "evicted together with the BestEffort pod"
    );
    agent.wait_pod(
        "burstable",
        "evicted next",
        Duration::from_secs(60),
        evicted,
    );
    assert!(at.elapsed() >= Duration::from_secs(5), "one pod a pass");
    assert!(
        container(&agent.pod("besteffort").expect("be"), "main")["state"]["terminated"].is_object(),
        "its container stopped"
    );
    // A pass after both evictions (the node event's third count) leaves
    // the static pod running; the node says why.
    agent.wait(
        "a pass with nothing left to evict",
        Duration::from_secs(30),
        || {
            agent.events().iter().any(|e| {
                e["reason"] == "EvictionThresholdMet" && e["count"].as_u64().unwrap_or(0) >= 3
            })
        },
    );
    let keeper = agent.pod("keeper").expect("keeper");
    assert!(running(&keeper), "static pod evicted: {keeper}");
    let node: serde_json::Value =
        serde_json::from_str(&agent.get("/node").expect("/node")).expect("node json");
    let memory = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "MemoryPressure")
        .cloned()
        .unwrap_or_default();
    assert_eq!(memory["status"], "True", "{node}");
    for uid in [&be, &bu] {
        assert!(
            agent
                .events()
                .iter()
                .any(|e| e["reason"] == "Evicted" && e["involvedObject"]["uid"] == uid.as_str()),
            "no Evicted event for {uid}"
        );
    }
    assert!(
        !agent
            .events()
            .iter()
            .any(|e| e["reason"] == "Evicted" && e["involvedObject"]["name"] == "keeper-e2e"),
        "the static pod was evicted"
    );
}
