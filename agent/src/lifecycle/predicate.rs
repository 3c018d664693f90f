//! Pod admission, kubelet's `lifecycle/predicate.go` over the scheduler's
//! `AdmissionCheck`: before an API server's pod gets a worker, it must fit
//! what the node has left (pods, cpu, memory, ephemeral-storage requests
//! against allocatable), match the node's labels (nodeSelector, required
//! node affinity), want no host port another admitted pod holds, tolerate
//! the node's NoExecute taints and be a Linux pod. A refused pod never
//! runs: it is failed with kubelet's reason (`OutOfcpu`, `NodeAffinity`,
//! ...) and message ("Pod was rejected: ..."), and stays refused.
//!
//! Pods are admitted in creation order, each against the static pods and
//! the pods admitted before it that are not finished. Static pods are the
//! device's own: they are not admitted here (the folder's `maxPods` cap
//! applies to them) but count against what the node has. Pure.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, Pod, Taint, Toleration};

use crate::qos::quantity;

/// What the node offers and is, as admission sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeView {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    /// The node's pressure conditions now ("MemoryPressure",
    /// "DiskPressure", "PIDPressure"), from the eviction manager.
    pub pressure: BTreeSet<String>,
}

/// Allocatable, or a pod's requests: millicores, bytes, pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu_milli: u128,
    pub memory: u128,
    pub ephemeral: u128,
    pub pods: u128,
}

/// Why a pod was refused: kubelet's reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

/// The admission state of the sync loop.
#[derive(Debug, Default)]
pub struct Admission {
    admitted: BTreeSet<String>,
    rejected: BTreeMap<String, Rejection>,
}

/// What one pass decided.
#[derive(Debug, Default)]
pub struct Decision {
    /// The API server's pods to run, by UID.
    pub run: BTreeMap<String, Arc<Pod>>,
    /// Pods refused in this pass (once each): UID, pod, why.
    pub rejected: Vec<(String, Arc<Pod>, Rejection)>,
    /// Pods refused before that left the API server: their status goes.
    pub forgotten: Vec<String>,
}

impl Admission {
    /// Admits the new ones of `api` (valid, not being deleted, by UID).
    /// `finished(uid)`: the pod's containers are done for good (phase
    /// Succeeded or Failed) — it holds no resources. A pod the API server
    /// reports finished that has no worker (`has_worker`) is not started
    /// again: the agent restarted after it ended.
    pub fn admit(
        &mut self,
        node: &NodeView,
        statics: &BTreeMap<String, Arc<Pod>>,
        api: &BTreeMap<String, Arc<Pod>>,
        finished: impl Fn(&str) -> bool,
        has_worker: impl Fn(&str) -> bool,
    ) -> Decision {
        let mut d = Decision::default();
        self.admitted.retain(|uid| api.contains_key(uid));
        let rejected = std::mem::take(&mut self.rejected);
        for (uid, r) in rejected {
            if api.contains_key(&uid) {
                self.rejected.insert(uid, r);
            } else {
                d.forgotten.push(uid);
            }
        }
        let mut active: Vec<&Pod> = statics.values().map(|p| p.as_ref()).collect();
        active.extend(
            self.admitted
                .iter()
                .filter(|uid| !finished(uid))
                .filter_map(|uid| api.get(uid).map(|p| p.as_ref())),
        );
        let mut new: Vec<(&String, &Arc<Pod>)> = api
            .iter()
            .filter(|(uid, _)| !self.admitted.contains(*uid) && !self.rejected.contains_key(*uid))
            .collect();
        new.sort_by(|a, b| {
            let t = |p: &Pod| p.metadata.creation_timestamp.clone().map(|t| t.0);
            t(a.1).cmp(&t(b.1)).then(a.0.cmp(b.0))
        });
        let mut admitted_now = Vec::new();
        for (uid, pod) in new {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if phase.is_some_and(crate::phase::is_terminal) && !has_worker(uid) {
                continue;
            }
            match check(node, &active, pod) {
                None => {
                    self.admitted.insert(uid.clone());
                    admitted_now.push(uid.clone());
                    active.push(pod);
                }
                Some(r) => {
                    self.rejected.insert(uid.clone(), r.clone());
                    d.rejected.push((uid.clone(), pod.clone(), r));
                }
            }
        }
        d.run = self
            .admitted
            .iter()
            .filter_map(|uid| Some((uid.clone(), api.get(uid)?.clone())))
            .collect();
        d
    }
}

/// scheduling.SystemCriticalPriority.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// Static, mirror and system-critical pods: admitted under pressure and
/// never evicted (kubelet's `IsCriticalPod`).
pub fn is_critical(pod: &Pod) -> bool {
    let ann = pod.metadata.annotations.as_ref();
    let source = ann.and_then(|a| a.get("kubernetes.io/config.source"));
    let is_static = source.is_some_and(|s| s != "api");
    let mirror = ann.is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    is_static || mirror || priority >= SYSTEM_CRITICAL_PRIORITY
}

/// The eviction manager's admission (kubelet's `managerImpl.Admit`): under
/// memory pressure alone only BestEffort pods that do not tolerate it are
/// refused; under any other pressure every pod is; critical pods never.
pub fn under_pressure(pressure: &BTreeSet<String>, pod: &Pod) -> Option<Rejection> {
    if pressure.is_empty() || is_critical(pod) {
        return None;
    }
    if pressure.len() == 1 && pressure.contains("MemoryPressure") {
        let spec = pod.spec.as_ref();
        let best_effort =
            spec.is_none_or(|s| crate::qos::qos_class(s) == crate::qos::Qos::BestEffort);
        let taint = Taint {
            key: "node.kubernetes.io/memory-pressure".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let tolerated = spec
            .and_then(|s| s.tolerations.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| tolerates(t, &taint)));
        if !best_effort || tolerated {
            return None;
        }
    }
    let names: Vec<&str> = pressure.iter().map(String::as_str).collect();
    Some(Rejection {
        reason: crate::reason::EVICTED.into(),
        message: format!("The node had condition: [{}]. ", names.join(" ")),
    })
}

/// The first reason `pod` cannot run beside `others` on `node`, in
/// kubelet's order (the eviction manager's handler first); None: it fits.
pub fn check(node: &NodeView, others: &[&Pod], pod: &Pod) -> Option<Rejection> {
    if let Some(r) = under_pressure(&node.pressure, pod) {
        return Some(r);
    }
    let a = &node.allocatable;
    let used_pods = u128::try_from(others.len()).unwrap_or(u128::MAX);
    if used_pods + 1 > a.pods {
        return Some(insufficient("pods", 1, used_pods, a.pods));
    }
    if let Some(r) = check_resources(a, others, pod) {
        return Some(r);
    }
    let predicate = |name: &str| Rejection {
        reason: name.to_string(),
        message: format!("Predicate {name} failed"),
    };
    if !selector_matches(node, pod) {
        return Some(predicate("NodeAffinity"));
    }
    let spec = pod.spec.as_ref()?;
    if spec.node_name.as_deref().is_some_and(|n| n != node.name) {
        return Some(predicate("NodeName"));
    }
    let taken: HashSet<(String, String, i32)> = others.iter().flat_map(|p| host_ports(p)).collect();
    if host_ports(pod).iter().any(|p| conflicts(p, &taken)) {
        return Some(predicate("NodePorts"));
    }
    if node
        .taints
        .iter()
        .filter(|t| t.effect == "NoExecute")
        .any(|t| {
            !spec
                .tolerations
                .iter()
                .flatten()
                .any(|tol| tolerates(tol, t))
        })
    {
        return Some(predicate("TaintToleration"));
    }
    let os = spec
        .node_selector
        .as_ref()
        .and_then(|s| s.get("kubernetes.io/os"));
    if os.is_some_and(|os| node.labels.get("kubernetes.io/os") != Some(os)) {
        return Some(Rejection {
            reason: "PodOSSelectorNodeLabelDoesNotMatch".into(),
            message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
                .into(),
        });
    }
    if spec.os.as_ref().is_some_and(|o| o.name != "linux") {
        return Some(Rejection {
            reason: "PodOSNotSupported".into(),
            message: "Failed to admit pod as the OS field doesn't match node OS".into(),
        });
    }
    None
}

/// kubelet's "Node didn't have enough resource" rejection.
fn insufficient(name: &str, requested: u128, used: u128, capacity: u128) -> Rejection {
    Rejection {
        reason: format!("OutOf{name}"),
        message: format!(
            "Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
        ),
    }
}

/// Whether `pod`'s requests fit in `a` beside `others`' (a new pod, or a
/// resize of one: kubelet's resource predicate).
pub fn check_resources(a: &Resources, others: &[&Pod], pod: &Pod) -> Option<Rejection> {
    let want = requests(pod);
    let used = others
        .iter()
        .map(|p| requests(p))
        .fold(Resources::default(), |s, r| Resources {
            cpu_milli: s.cpu_milli + r.cpu_milli,
            memory: s.memory + r.memory,
            ephemeral: s.ephemeral + r.ephemeral,
            pods: 0,
        });
    for (name, w, u, cap) in [
        ("cpu", want.cpu_milli, used.cpu_milli, a.cpu_milli),
        ("memory", want.memory, used.memory, a.memory),
        (
            "ephemeral-storage",
            want.ephemeral,
            used.ephemeral,
            a.ephemeral,
        ),
    ] {
        if w > 0 && w > cap.saturating_sub(u) {
            return Some(insufficient(name, w, u, cap));
        }
    }
    None
}

/// A pod's requests as the scheduler counts them: the containers' sum or
/// the largest init container's, whichever is more, plus the overhead.
pub fn requests(pod: &Pod) -> Resources {
    let Some(spec) = pod.spec.as_ref() else {
        return Resources::default();
    };
    let one = |res: &str| {
        let sum: u128 = spec
            .containers
            .iter()
            .map(|c| quantity(c, "requests", res).unwrap_or(0))
            .sum();
        let init = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| quantity(c, "requests", res).unwrap_or(0))
            .max()
            .unwrap_or(0);
        let overhead = spec
            .overhead
            .as_ref()
            .and_then(|o| o.get(res))
            .and_then(|q| {
                if res == "cpu" {
                    edge_config::quantity::parse_quantity_milli(&q.0)
                } else {
                    edge_config::quantity::parse_quantity(&q.0)
                }
            })
            .unwrap_or(0);
        // kubelet's PodRequests: the pod's own request, where it sets one
        // (cpu, memory), in place of its containers'.
        let own = (res != "ephemeral-storage")
            .then(|| crate::qos::pod_quantity(spec, "requests", res))
            .flatten()
            .filter(|_| crate::qos::pod_level_requests_set(spec));
        own.unwrap_or(sum.max(init)) + overhead
    };
    Resources {
        cpu_milli: one("cpu"),
        memory: one("memory"),
        ephemeral: one("ephemeral-storage"),
        pods: 1,
    }
}

/// nodeSelector and required node affinity (component-helpers'
/// `GetRequiredNodeAffinity(pod).Match(node)`).
fn selector_matches(node: &NodeView, pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    if let Some(sel) = &spec.node_selector
        && sel.iter().any(|(k, v)| node.labels.get(k) != Some(v))
    {
        return false;
    }
    let Some(required) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    else {
        return true;
    };
    // Terms are ORed; a term ANDs its requirements; an empty term matches
    // nothing.
    required.node_selector_terms.iter().any(|term| {
        let exprs = term.match_expressions.as_deref().unwrap_or_default();
        let fields = term.match_fields.as_deref().unwrap_or_default();
        if exprs.is_empty() && fields.is_empty() {
            return false;
        }
        let name = BTreeMap::from([("metadata.name".to_string(), node.name.clone())]);
        exprs.iter().all(|r| requirement(r, &node.labels))
            && fields.iter().all(|r| {
                r.key == "metadata.name"
                    && matches!(r.operator.as_str(), "In" | "NotIn")
                    && requirement(r, &name)
            })
    })
}

/// One label requirement (`In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`,
/// `Lt`); an unknown operator matches nothing.
fn requirement(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let have = labels.get(&r.key);
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => have.is_some_and(|v| values.contains(v)),
        "NotIn" => have.is_none_or(|v| !values.contains(v)),
        "Exists" => have.is_some(),
        "DoesNotExist" => have.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), [want]) = (have.and_then(|v| number(v)), values) else {
                return false;
            };
            let Some(want) = number(want) else {
                return false;
            };
            if r.operator == "Gt" {
                have > want
            } else {
                have < want
            }
        }
        _ => false,
    }
}

/// The (hostIP, protocol, hostPort) a pod's containers ask for.
fn host_ports(pod: &Pod) -> Vec<(String, String, i32)> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|p| *p > 0)?;
            let ip = p
                .host_ip
                .clone()
                .filter(|ip| !ip.is_empty())
                .unwrap_or_else(|| "0.0.0.0".into());
            let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
            Some((ip, proto, port))
        })
        .collect()
}

/// A wildcard address conflicts with every address of the same port and
/// protocol, as the scheduler's `HostPortInfo`.
fn conflicts(want: &(String, String, i32), taken: &HashSet<(String, String, i32)>) -> bool {
    let (ip, proto, port) = want;
    taken.iter().any(|(i, pr, p)| {
        p == port && pr == proto && (i == ip || i == "0.0.0.0" || ip == "0.0.0.0")
    })
}

/// Whether `tol` tolerates `taint` (v1 `Toleration.ToleratesTaint`).
fn tolerates(tol: &Toleration, taint: &Taint) -> bool {
    let effect = tol.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = tol.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match tol.operator.as_deref().unwrap_or("Equal") {
        // An empty key with Exists tolerates everything.
        "Exists" => true,
        "Equal" => {
            !key.is_empty()
                && tol.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Arc<Pod> {
        Arc::new(serde_json::from_value(v).expect("pod"))
    }

    fn node() -> NodeView {
        NodeView {
            name: "pk-edge".into(),
            labels: BTreeMap::from([
                ("kubernetes.io/hostname".into(), "pk-edge".into()),
                ("kubernetes.io/os".into(), "linux".into()),
                ("zone".into(), "3".into()),
            ]),
            taints: Vec::new(),
            allocatable: Resources {
                cpu_milli: 2000,
                memory: 1 << 30,
                ephemeral: 10 << 30,
                pods: 3,
            },
            pressure: BTreeSet::new(),
        }
    }

    fn with(name: &str, created: &str, spec: serde_json::Value) -> Arc<Pod> {
        pod(json!({
            "metadata": {"name": name, "namespace": "default", "uid": name, "creationTimestamp": created},
            "spec": spec,
        }))
    }

    fn cpu(name: &str, created: &str, cpu: &str) -> Arc<Pod> {
        with(
            name,
            created,
            json!({"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}),
        )
    }

    fn by_uid(pods: &[Arc<Pod>]) -> BTreeMap<String, Arc<Pod>> {
        pods.iter()
            .map(|p| (p.metadata.uid.clone().expect("uid"), p.clone()))
            .collect()
    }

    #[test]
    fn pods_are_admitted_in_creation_order_until_cpu_runs_out_and_refusals_stay() {
        let api = by_uid(&[
            cpu("late", "2026-11-25T10:00:02Z", "1"),
            cpu("early", "2026-11-25T10:00:00Z", "1500m"),
            cpu("small", "2026-11-25T10:00:01Z", "500m"),
        ]);
        let mut a = Admission::default();
        let d = a.admit(&node(), &BTreeMap::new(), &api, |_| false, |_| false);
        assert_eq!(d.run.keys().collect::<Vec<_>>(), ["early", "small"]);
        assert_eq!(d.rejected.len(), 1);
        let (uid, _, r) = &d.rejected[0];
        assert_eq!(uid, "late");
        assert_eq!(r.reason, "OutOfcpu");
        assert_eq!(
            r.message,
            "Node didn't have enough resource: cpu, requested: 1000, used: 2000, capacity: 2000"
        );
        // The next pass: the same decision, no second refusal; once
        // "early" has finished its cpu is free but "late" stays refused.
        let d = a.admit(&node(), &BTreeMap::new(), &api, |u| u == "early", |_| false);
        assert_eq!(d.run.len(), 2);
        assert!(d.rejected.is_empty());
        // The refused pod leaves the API server: forgotten.
        let mut api2 = api.clone();
        api2.remove("late");
        let d = a.admit(&node(), &BTreeMap::new(), &api2, |_| false, |_| false);
        assert_eq!(d.forgotten, ["late"]);
    }

    #[test]
    fn static_pods_count_against_pods_and_memory() {
        let statics = by_uid(&[
            with(
                "s1",
                "2026-11-25T09:00:00Z",
                json!({"containers": [{"name": "c", "image": "i", "resources": {"requests": {"memory": "768Mi"}}}]}),
            ),
            cpu("s2", "2026-11-25T09:00:00Z", "0"),
        ]);
        let api = by_uid(&[
            with(
                "m",
                "2026-11-25T10:00:00Z",
                json!({"containers": [{"name": "c", "image": "i", "resources": {"requests": {"memory": "512Mi"}}}]}),
            ),
            cpu("p1", "2026-11-25T10:00:01Z", "0"),
            cpu("p2", "2026-11-25T10:00:02Z", "0"),
        ]);
        let d = Admission::default().admit(&node(), &statics, &api, |_| false, |_| false);
        let reasons: Vec<_> = d
            .rejected
            .iter()
            .map(|(u, _, r)| (u.as_str(), r.reason.as_str()))
            .collect();
        assert_eq!(reasons, [("m", "OutOfmemory"), ("p2", "OutOfpods")]);
        assert_eq!(d.run.keys().collect::<Vec<_>>(), ["p1"]);
    }

    #[test]
    fn under_disk_pressure_new_pods_are_refused_as_evicted_first() {
        let api = by_uid(&[cpu("p1", "2026-11-25T10:00:01Z", "100m")]);
        let mut n = node();
        n.pressure.insert("DiskPressure".into());
        let d = Admission::default().admit(&n, &BTreeMap::new(), &api, |_| false, |_| false);
        let (_, _, r) = &d.rejected[0];
        assert_eq!(r.reason, "Evicted");
        assert_eq!(r.message, "The node had condition: [DiskPressure]. ");
        assert!(d.run.is_empty());
    }

    #[test]
    fn init_containers_and_overhead_count_as_the_scheduler_counts_them() {
        let p = with(
            "p",
            "2026-11-25T10:00:00Z",
            json!({
                "initContainers": [{"name": "i", "image": "i", "resources": {"requests": {"cpu": "700m"}}}],
                "containers": [
                    {"name": "a", "image": "i", "resources": {"requests": {"cpu": "200m", "memory": "1Mi"}}},
                    {"name": "b", "image": "i", "resources": {"requests": {"cpu": "300m"}}},
                ],
                "overhead": {"cpu": "50m"},
            }),
        );
        let r = requests(&p);
        assert_eq!((r.cpu_milli, r.memory), (750, 1 << 20));
    }

    #[test]
    fn node_selector_and_required_affinity_must_match_the_node() {
        let sel = |s: serde_json::Value| {
            check(
                &node(),
                &[],
                &with(
                    "p",
                    "2026-11-25T10:00:00Z",
                    json!({"containers": [{"name": "c", "image": "i"}], "nodeSelector": s}),
                ),
            )
            .map(|r| r.reason)
        };
        assert_eq!(sel(json!({"zone": "3"})), None);
        assert_eq!(sel(json!({"zone": "4"})).as_deref(), Some("NodeAffinity"));
        let aff = |terms: serde_json::Value| {
            let p = with(
                "p",
                "2026-11-25T10:00:00Z",
                json!({
                    "containers": [{"name": "c", "image": "i"}],
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}},
                }),
            );
            check(&node(), &[], &p).map(|r| (r.reason, r.message))
        };
        let expr = |key: &str, op: &str, values: &[&str]| json!({"matchExpressions": [{"key": key, "operator": op, "values": values}]});
        assert_eq!(aff(json!([expr("zone", "In", &["1", "3"])])), None);
        assert_eq!(aff(json!([expr("zone", "Gt", &["2"])])), None);
        assert_eq!(
            aff(json!([expr("zone", "Lt", &["2"])]))
                .map(|r| r.1)
                .as_deref(),
            Some("Predicate NodeAffinity failed")
        );
        assert_eq!(aff(json!([expr("gpu", "DoesNotExist", &[])])), None);
        assert!(aff(json!([expr("gpu", "Exists", &[])])).is_some());
        // Terms are ORed.
        assert_eq!(
            aff(json!([
                expr("gpu", "Exists", &[]),
                expr("zone", "NotIn", &["1"])
            ])),
            None
        );
        assert_eq!(
            aff(
                json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["pk-edge"]}]}])
            ),
            None
        );
        assert!(aff(json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["other"]}]}])).is_some());
        assert!(aff(json!([{}])).is_some(), "an empty term matches nothing");
    }

    #[test]
    fn host_ports_conflict_on_the_same_protocol_and_address_or_a_wildcard() {
        let ports = |name: &str, ports: serde_json::Value| {
            with(
                name,
                "2026-11-25T10:00:00Z",
                json!({"containers": [{"name": "c", "image": "i", "ports": ports}]}),
            )
        };
        let web = ports("web", json!([{"containerPort": 80, "hostPort": 8080}]));
        let one = |p: &Arc<Pod>| check(&node(), &[&web], p).map(|r| r.reason);
        assert_eq!(
            one(&ports(
                "a",
                json!([{"containerPort": 80, "hostPort": 8080}])
            ))
            .as_deref(),
            Some("NodePorts")
        );
        assert_eq!(
            one(&ports(
                "b",
                json!([{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"}])
            ))
            .as_deref(),
            Some("NodePorts")
        );
        assert_eq!(
            one(&ports(
                "c",
                json!([{"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}])
            )),
            None
        );
        assert_eq!(
            one(&ports(
                "d",
                json!([{"containerPort": 80, "hostPort": 8081}])
            )),
            None
        );
        assert_eq!(
            one(&ports("e", json!([{"containerPort": 80}]))),
            None,
            "no host port"
        );
    }

    #[test]
    fn only_untolerated_no_execute_taints_refuse_a_pod() {
        let mut n = node();
        n.taints = vec![
            Taint {
                key: "edge".into(),
                value: Some("offline".into()),
                effect: "NoExecute".into(),
                time_added: None,
            },
            Taint {
                key: "dedicated".into(),
                value: None,
                effect: "NoSchedule".into(),
                time_added: None,
            },
        ];
        let tol = |t: serde_json::Value| {
            check(
                &n,
                &[],
                &with(
                    "p",
                    "2026-11-25T10:00:00Z",
                    json!({"containers": [{"name": "c", "image": "i"}], "tolerations": t}),
                ),
            )
            .map(|r| r.reason)
        };
        assert_eq!(tol(json!([])).as_deref(), Some("TaintToleration"));
        assert_eq!(
            tol(json!([{"key": "edge", "value": "offline", "effect": "NoExecute"}])),
            None
        );
        assert_eq!(tol(json!([{"key": "edge", "operator": "Exists"}])), None);
        assert_eq!(tol(json!([{"operator": "Exists"}])), None);
        assert_eq!(
            tol(json!([{"key": "edge", "value": "online"}])).as_deref(),
            Some("TaintToleration")
        );
    }

    #[test]
    fn a_finished_pod_without_a_worker_is_not_started_again() {
        let mut done = (*cpu("done", "2026-11-25T10:00:00Z", "0")).clone();
        done.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        let api = by_uid(&[Arc::new(done)]);
        let mut a = Admission::default();
        assert!(
            a.admit(&node(), &BTreeMap::new(), &api, |_| false, |_| false)
                .run
                .is_empty()
        );
        assert_eq!(
            a.admit(&node(), &BTreeMap::new(), &api, |_| false, |_| true)
                .run
                .len(),
            1
        );
    }

    #[test]
    fn a_windows_pod_is_refused() {
        let p = with(
            "w",
            "2026-11-25T10:00:00Z",
            json!({"containers": [{"name": "c", "image": "i"}], "os": {"name": "windows"}}),
        );
        assert_eq!(
            check(&node(), &[], &p).map(|r| r.reason).as_deref(),
            Some("PodOSNotSupported")
        );
    }

    #[test]
    fn the_pods_own_requests_count_in_place_of_its_containers() {
        let p = crate::config::manifest::test_pod(
            "  resources: {requests: {cpu: '1', memory: 256Mi}}\n  containers:\n  - name: a\n    image: i\n    resources: {requests: {cpu: 100m, memory: 64Mi, ephemeral-storage: 1Gi}}\n",
        );
        let r = requests(&p);
        assert_eq!(
            (r.cpu_milli, r.memory, r.ephemeral),
            (1000, 256 << 20, 1 << 30)
        );
    }
}
