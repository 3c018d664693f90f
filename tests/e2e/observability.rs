//! End-to-end: what an operator sees of a pod's resources: OOM kills from
//! /dev/kmsg and the cgroup, with real containers and the real shim.
//! Root only.

use crate::common;

use std::time::Duration;

use common::agent::{Agent, container};

const T: Duration = Duration::from_secs(60);

#[test]
fn an_oom_killed_container_is_reported_with_event_and_reason() {
    require_root!();
    let agent = Agent::start("");
    // `tail` of an endless stream without newlines keeps growing its line
    // buffer until the 16 MiB limit kills it.
    agent.write_manifest(
        "hog.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  name: hog
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: hog
    image: busybox:latest
    imagePullPolicy: IfNotPresent
    command: [tail, /dev/zero]
    resources:
      limits: {memory: 16Mi}
"#,
    );
    let p = agent.wait_pod("hog", "OOM-killed", T, |p| {
        container(p, "hog")["state"]["terminated"].is_object()
    });
    let t = &container(&p, "hog")["state"]["terminated"];
    assert_eq!(t["reason"], "OOMKilled", "{t}");
    assert_eq!(t["exitCode"], 137, "{t}");
    assert_eq!(p["status"]["phase"], "Failed");
    // The kmsg watcher saw the same kill.
    agent.wait("OOMKilling event", T, || {
        agent.events().iter().any(|e| {
            e["reason"] == "OOMKilling"
                && e["involvedObject"]["fieldPath"] == "spec.containers{hog}"
                && e["message"].as_str().is_some_and(|m| {
                    m.starts_with("Memory cgroup out of memory: Killed process ")
                        && m.ends_with(" (tail)")
                })
        })
    });
    // The pod cgroup (kept while the failed pod exists) counts the kill.
    let text = agent.get("/metrics/cadvisor").expect("/metrics/cadvisor");
    assert!(
        sample(
            &text,
            "container_oom_events_total",
            &["pod=\"hog-e2e\"", "container=\"\""]
        )
        .is_some_and(|v| v >= 1.0),
        "{text}"
    );
}

/// The value of the first sample of `name` whose labels contain all of
/// `want` (`key="value"` pairs).
fn sample(text: &str, name: &str, want: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| want.iter().all(|w| l.contains(w)))
        .and_then(|l| l.rsplit_once("} ").or_else(|| l.split_once(' ')))
        .and_then(|(_, v)| v.split(' ').next()?.parse().ok())
}

/// An agent whose client CA signed `crt` and `key`, and its pod `stats`
/// running: `busy` spins, `mem` writes 32 MiB to a memory-backed emptyDir
/// under a 64Mi limit.
struct Stats {
    agent: Agent,
    pod: serde_json::Value,
    uid: String,
    busy_id: String,
    crt: std::path::PathBuf,
    key: std::path::PathBuf,
    /// Holds the CA and the client certificate: bind it (`_pki`, not `..`)
    /// for as long as they are used.
    _pki: tempfile::TempDir,
}

fn stats_pod() -> Stats {
    let pki = tempfile::tempdir().expect("tmp");
    let [ca, crt, key] = common::agent::client_ca(pki.path(), "prom", "prometheus", "monitoring");
    let agent = Agent::start(&format!(
        "authentication: {{x509: {{clientCAFile: {}}}}}\n",
        ca.display()
    ));
    agent.write_manifest(
        "stats.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  name: stats
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: mem
    emptyDir: {medium: Memory}
  containers:
  - name: busy
    image: busybox:latest
    imagePullPolicy: IfNotPresent
    command: [sh, -c, 'while :; do :; done']
  - name: mem
    image: busybox:latest
    imagePullPolicy: IfNotPresent
    command: [sh, -c, 'dd if=/dev/zero of=/mem/blob bs=1M count=32 2>/dev/null; touch /mem/done; sleep 100000']
    volumeMounts: [{name: mem, mountPath: /mem}]
    resources:
      limits: {memory: 64Mi}
"#,
    );
    let pod = agent.wait_pod("stats", "running", T, |p| {
        container(p, "busy")["state"]["running"].is_object()
            && container(p, "mem")["state"]["running"].is_object()
    });
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();
    let busy_id = container(&pod, "busy")["containerID"]
        .as_str()
        .and_then(|c| c.split_once("://"))
        .map(|(_, id)| id.to_string())
        .expect("id");
    Stats {
        agent,
        pod,
        uid,
        busy_id,
        crt,
        key,
        _pki: pki,
    }
}

/// The `busy` container's series.
const BUSY: [&str; 3] = [
    "container=\"busy\"",
    "pod=\"stats-e2e\"",
    "namespace=\"default\"",
];

/// The `mem` container's series.
const MEM: [&str; 2] = ["container=\"mem\"", "pod=\"stats-e2e\""];

/// Waits until the 32 MiB the `mem` container wrote count as its working set.
fn wait_for_mem(agent: &Agent) {
    agent.wait("32 MiB in the mem container's working set", T, || {
        let text = agent.get("/metrics/cadvisor").expect("/metrics/cadvisor");
        sample(&text, "container_memory_working_set_bytes", &MEM)
            .is_some_and(|v| v >= 32.0 * 1048576.0)
    });
}

#[test]
fn cadvisor_metrics_match_the_cgroups() {
    require_root!();
    let Stats {
        agent,
        pod: p,
        uid,
        busy_id,
        _pki,
        ..
    } = stats_pod();
    // 64Mi limit on one container, nothing else: Burstable.
    assert_eq!(p["status"]["qosClass"], "Burstable");
    let pod_cg = format!("{}/kubepods/burstable/pod{uid}", agent.cgroup_root());
    let cg = format!("/sys/fs/cgroup/cpuacct{pod_cg}/{busy_id}/cpuacct.usage");
    let cgroup_cpu = || -> f64 {
        std::fs::read_to_string(&cg)
            .expect("cpuacct.usage")
            .trim()
            .parse::<f64>()
            .expect("number")
            / 1e9
    };
    let busy = BUSY;
    let scrape = || agent.get("/metrics/cadvisor").expect("/metrics/cadvisor");

    // CPU: the metric's growth over an interval matches the cgroup's.
    let (m0, c0) = (
        sample(&scrape(), "container_cpu_usage_seconds_total", &busy).expect("busy cpu"),
        cgroup_cpu(),
    );
    // The interval the growth is measured over (not a wait for anything).
    std::thread::sleep(Duration::from_secs(3));
    let (m1, c1) = (
        sample(&scrape(), "container_cpu_usage_seconds_total", &busy).expect("busy cpu"),
        cgroup_cpu(),
    );
    let (dm, dc) = (m1 - m0, c1 - c0);
    eprintln!("busy container: {dm:.3} cpu-s by the metric, {dc:.3} by the cgroup over 3 s");
    assert!(dc > 0.5, "the busy loop ran: {dc}");
    assert!((dm - dc).abs() / dc < 0.10, "metric {dm} vs cgroup {dc}");

    // Memory: 32 MiB written to a memory-backed emptyDir count as working set.
    let mem = ["container=\"mem\"", "pod=\"stats-e2e\""];
    agent.wait("32 MiB in the mem container's working set", T, || {
        sample(&scrape(), "container_memory_working_set_bytes", &mem)
            .is_some_and(|v| v >= 32.0 * 1048576.0)
    });
    let text = scrape();
    let ws = sample(&text, "container_memory_working_set_bytes", &mem).expect("ws");
    assert!(ws < 48.0 * 1048576.0, "working set {ws}");
    assert_eq!(
        sample(&text, "container_spec_memory_limit_bytes", &mem),
        Some(64.0 * 1048576.0)
    );
    // Pod cgroup and root series exist; machine_* too.
    let pod_id = format!("id=\"{pod_cg}\"");
    assert!(
        sample(
            &text,
            "container_memory_usage_bytes",
            &[&pod_id, "container=\"\""]
        )
        .is_some()
    );
    assert!(sample(&text, "container_memory_usage_bytes", &["id=\"/\""]).is_some_and(|v| v > 0.0));
    assert!(sample(&text, "machine_cpu_cores", &[]).is_some_and(|v| v >= 1.0));

    // The image label is the pod's image name, as kubelet's cAdvisor shows it.
    assert!(
        sample(
            &text,
            "container_memory_usage_bytes",
            &[busy[0], "image=\"busybox:latest\""]
        )
        .is_some(),
        "image label"
    );
    // Network: the node's on the root cgroup, none per app container.
    assert!(
        sample(
            &text,
            "container_network_receive_bytes_total",
            &["id=\"/\""]
        )
        .is_some()
    );
    assert!(sample(&text, "container_network_receive_bytes_total", &busy).is_none());
    assert!(text.contains("\ncontainer_scrape_error 0\n"));
    // No CPU request: kubelet's minimum shares (2); no limit: no quota.
    assert_eq!(sample(&text, "container_spec_cpu_shares", &busy), Some(2.0));
    assert_eq!(
        sample(&text, "container_spec_cpu_period", &busy),
        Some(100_000.0)
    );
    assert!(sample(&text, "container_spec_cpu_quota", &busy).is_none());

    // Process figures from procfs.
    assert!(sample(&text, "container_threads", &busy).is_some_and(|v| v >= 1.0));
    assert!(sample(&text, "container_file_descriptors", &busy).is_some_and(|v| v >= 1.0));

    // promtool's checker accepts the exposition.
    let dir = agent.dir();
    std::fs::write(dir.join("cadvisor.prom"), &text).expect("write");
    let check = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(dir.join("cadvisor.prom")).expect("open"))
        .output()
        .expect("promtool (Debian prometheus package)");
    // It parses, and the only lint finding is cAdvisor's own name for a
    // counter without `_total` (kubelet's /metrics/cadvisor has it too;
    // renaming it would break existing dashboards).
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let findings: Vec<&str> = report
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| *l != "container_memory_failcnt counter metrics should have \"_total\" suffix")
        .collect();
    assert!(
        findings.is_empty()
            && (check.status.success() || report.contains("container_memory_failcnt")),
        "promtool check metrics: {report}"
    );
}

#[test]
fn resource_metrics_and_the_summary_report_the_pod() {
    require_root!();
    let Stats {
        agent, uid, _pki, ..
    } = stats_pod();
    let busy = BUSY;
    wait_for_mem(&agent);
    // /metrics/resource, as metrics-server reads it; promtool finds nothing.
    let res = agent.get("/metrics/resource").expect("/metrics/resource");
    let pod = ["namespace=\"default\"", "pod=\"stats-e2e\""];
    assert!(
        sample(&res, "pod_memory_working_set_bytes", &pod).is_some_and(|v| v >= 32.0 * 1048576.0),
        "{res}"
    );
    assert!(sample(&res, "container_cpu_usage_seconds_total", &busy).is_some_and(|v| v > 0.0));
    assert!(
        res.lines()
            .any(|l| l.starts_with("node_memory_working_set_bytes "))
    );
    assert!(res.contains("\nresource_scrape_error 0\n"));
    std::fs::write(agent.dir().join("resource.prom"), &res).expect("write");
    let check = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(agent.dir().join("resource.prom")).expect("open"))
        .output()
        .expect("promtool");
    assert!(
        check.status.success(),
        "promtool on /metrics/resource: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );

    // /stats/summary in kubelet's shape; a second reading gives CPU rates.
    let summary = || -> serde_json::Value {
        serde_json::from_str(&agent.get("/stats/summary").expect("/stats/summary")).expect("json")
    };
    summary();
    // The interval the CPU rate is measured over (not a wait for anything).
    std::thread::sleep(Duration::from_millis(1500));
    let sum = summary();
    assert_eq!(sum["node"]["nodeName"], "e2e");
    assert!(
        sum["node"]["memory"]["workingSetBytes"].as_u64() > Some(0),
        "{sum}"
    );
    assert!(
        sum["node"]["fs"]["capacityBytes"].as_u64() > Some(0),
        "{sum}"
    );
    let pod = sum["pods"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["podRef"]["name"] == "stats-e2e"))
        .expect("stats pod in the summary");
    assert_eq!(pod["podRef"]["uid"], uid.as_str());
    let c = |name: &str| {
        pod["containers"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["name"] == name))
            .cloned()
            .unwrap_or_default()
    };
    let cores = c("busy")["cpu"]["usageNanoCores"].as_u64().unwrap_or(0);
    assert!(
        cores > 200_000_000,
        "a busy loop uses most of a core: {cores}"
    );
    assert!(c("mem")["memory"]["workingSetBytes"].as_u64() >= Some(32 << 20));
    assert_eq!(
        c("mem")["memory"]["availableBytes"]
            .as_u64()
            .map(|a| a < (32 << 20)),
        Some(true)
    );
    assert!(pod["memory"]["workingSetBytes"].as_u64() >= Some(32 << 20));
    assert!(c("busy")["rootfs"]["usedBytes"].is_u64(), "{pod}");
    assert!(
        c("busy")["rootfs"]["capacityBytes"].as_u64() > Some(0),
        "{pod}"
    );
    assert!(pod["ephemeral-storage"]["usedBytes"].is_u64(), "{pod}");
    let mem_vol = pod["volume"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["name"] == "mem"))
        .expect("the mem emptyDir in the summary");
    assert!(mem_vol["usedBytes"].as_u64() >= Some(32 << 20), "{mem_vol}");
}

#[test]
fn the_agents_own_metrics_and_openmetrics_pass_promtool() {
    require_root!();
    let Stats { agent, _pki, .. } = stats_pod();
    // The agent's own metrics, kubelet's names; promtool finds nothing.
    let own = agent.get("/metrics").expect("/metrics");
    assert!(
        sample(&own, "kubelet_running_pods", &[]).is_some_and(|v| v >= 1.0),
        "{own}"
    );
    assert!(
        sample(
            &own,
            "kubelet_running_containers",
            &["container_state=\"running\""]
        )
        .is_some_and(|v| v >= 2.0)
    );
    assert!(
        sample(
            &own,
            "kubelet_runtime_operations_total",
            &["operation_type=\"list_containers\""]
        )
        .is_some_and(|v| v >= 1.0),
        "{own}"
    );
    assert!(
        sample(
            &own,
            "kubelet_runtime_operations_total",
            &["operation_type=\"run_podsandbox\""]
        )
        .is_some_and(|v| v >= 1.0)
    );
    assert!(
        sample(&own, "kubelet_pleg_relist_duration_seconds_count", &[]).is_some_and(|v| v >= 1.0)
    );
    assert!(
        sample(&own, "kubelet_pod_start_duration_seconds_count", &[]).is_some_and(|v| v >= 1.0)
    );
    std::fs::write(agent.dir().join("own.prom"), &own).expect("write");
    let check = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(agent.dir().join("own.prom")).expect("open"))
        .output()
        .expect("promtool");
    assert!(
        check.status.success(),
        "promtool on /metrics: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );

    // OpenMetrics on request (the Prometheus below asks for it too).
    let om = http_get_accept(
        agent.port,
        "/metrics/cadvisor",
        "application/openmetrics-text;version=1.0.0",
    )
    .expect("openmetrics");
    assert!(
        om.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{om}"
    );
    assert!(om.ends_with("# EOF\n"));
    assert!(om.contains("# TYPE container_cpu_usage_seconds counter\n"));
}

#[test]
fn prometheus_scrapes_the_read_only_and_the_tls_port() {
    require_root!();
    let Stats {
        agent,
        crt,
        key,
        _pki,
        ..
    } = stats_pod();
    let dir = agent.dir();
    // A real Prometheus scrapes it and answers a query: the read-only port
    // over plain HTTP, and the API port over TLS with a client certificate
    // (checking the agent's self-signed certificate for 127.0.0.1).
    let serving = agent.shim.root().join("agent/pki/picolet-serving.crt");
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global: {{scrape_interval: 1s}}\nscrape_configs:\n- job_name: picolet\n  metrics_path: /metrics/cadvisor\n  static_configs: [{{targets: ['127.0.0.1:{}']}}]\n\
             - job_name: picolet-tls\n  scheme: https\n  metrics_path: /metrics/resource\n  tls_config: {{ca_file: {}, cert_file: {}, key_file: {}}}\n  static_configs: [{{targets: ['127.0.0.1:{}']}}]\n",
            agent.port,
            serving.display(),
            crt.display(),
            key.display(),
            agent.api_port
        ),
    )
    .expect("write");
    let prom = std::process::Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        // Port 0: it logs the port it got.
        .arg("--web.listen-address=127.0.0.1:0")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).expect("log"))
        .spawn()
        .expect("prometheus (Debian prometheus package)");
    let prom = Stopped(Some(prom));
    let prom_log = || std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
    // `msg="Listening on" address=127.0.0.1:PORT`
    let prom_port: u16 = common::eventually(
        "Prometheus to listen",
        Duration::from_secs(30),
        || {
            let log = prom_log();
            let line = log.lines().find(|l| l.contains("msg=\"Listening on\""))?;
            let addr = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("address="))?;
            addr.rsplit(':').next()?.parse().ok()
        },
        prom_log,
    );
    let query = "/api/v1/query?query=container_memory_working_set_bytes%7Bpod%3D%22stats-e2e%22%2Ccontainer%3D%22mem%22%7D";
    let tls_query = "/api/v1/query?query=container_cpu_usage_seconds_total%7Bjob%3D%22picolet-tls%22%2Cpod%3D%22stats-e2e%22%7D";
    common::eventually(
        "Prometheus to return the series",
        Duration::from_secs(60),
        || {
            let has = |q: &str, want: &str| {
                http_get(prom_port, q)
                    .is_some_and(|b| b.contains("\"status\":\"success\"") && b.contains(want))
            };
            has(query, "\"container\":\"mem\"") && has(tls_query, "\"job\":\"picolet-tls\"")
        },
        || format!("its log:\n{}", prom_log()),
    );
    drop(prom);
}

/// A child stopped (SIGTERM, then SIGKILL) when this goes, also when the
/// test fails.
struct Stopped(Option<std::process::Child>);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            common::terminate(c);
        }
    }
}

fn http_get(port: u16, path: &str) -> Option<String> {
    http_get_accept(port, path, "*/*")
}

/// The whole response (head and body).
fn http_get_accept(port: u16, path: &str, accept: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: localhost\r\nAccept: {accept}\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}
