//! End-to-end: a static pod with `picolet.io/rollback-after` whose new
//! version is not Ready in time runs its last Ready version again, on the
//! real shim: the event, the `/pods` condition, the metric; the file stays
//! as written, and the next change is tried. Root only.

use crate::common;

use std::time::Duration;

use common::agent::Agent;
use serde_json::Value;

const T: Duration = Duration::from_secs(60);

/// Version `v` of pod `roll`: its container prints `v`, and is Ready when
/// `ready` (a shell test) holds.
fn roll(v: &str, ready: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: roll
  annotations: {{picolet.io/rollback-after: 4s}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:latest
    imagePullPolicy: IfNotPresent
    command: [sh, -c, 'echo {v}; exec sleep 3600']
    readinessProbe: {{periodSeconds: 1, exec: {{command: [sh, -c, '{ready}']}}}}
"#
    )
}

fn uid(p: &Value) -> String {
    p["metadata"]["uid"].as_str().unwrap_or("").to_string()
}

fn condition<'a>(p: &'a Value, kind: &str) -> Option<&'a Value> {
    p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn ready(p: &Value) -> bool {
    condition(p, "Ready").is_some_and(|c| c["status"] == "True")
}

#[test]
fn a_change_not_ready_in_time_runs_the_last_ready_version_again() {
    require_root!();
    let agent = Agent::start("");
    agent.write_manifest("roll.yaml", &roll("v1", "true"));
    let v1 = uid(&agent.wait_pod("roll", "v1 Ready", T, ready));

    // v2 never gets Ready: after 4 s, v1 runs again.
    agent.write_manifest("roll.yaml", &roll("v2", "false"));
    let v2 = uid(&agent.wait_pod("roll", "v2 tried", T, |p| uid(p) != v1));
    let back = agent.wait_pod("roll", "v1 back and Ready", T, |p| uid(p) == v1 && ready(p));
    let c = condition(&back, "picolet.io/RolledBack").expect("the RolledBack condition");
    assert_eq!(c["status"], "True", "{c}");
    let why = c["message"].as_str().unwrap_or("");
    assert!(
        why.contains(&format!("(uid {v2}) was not Ready within 4s")),
        "{why}"
    );
    let events: Vec<_> = agent
        .events()
        .into_iter()
        .filter(|e| e["reason"] == "RolledBack")
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "Warning");
    let metrics = agent.get("/metrics").unwrap_or_default();
    assert!(
        metrics.contains(
            "picolet_static_pod_rollbacks_total{namespace=\"default\",pod=\"roll-e2e\"} 1"
        ),
        "{metrics}"
    );
    let file = std::fs::read_to_string(agent.manifests().join("roll.yaml")).expect("manifest");
    assert!(file.contains("echo v2"), "the file stays as written");

    // The next change is tried, and kept once Ready.
    agent.write_manifest("roll.yaml", &roll("v3", "true"));
    let v3 = agent.wait_pod("roll", "v3 Ready", T, |p| {
        uid(p) != v1 && uid(p) != v2 && ready(p)
    });
    assert!(condition(&v3, "picolet.io/RolledBack").is_none(), "{v3}");
}
