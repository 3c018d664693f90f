//! QoS class and the resource arithmetic kubelet does for it: cpu shares
//! from requests, CFS quota from limits, the pod-level limits of the pod
//! cgroup, oom_score_adj by class, and where the pod cgroup lives. A pod's
//! own `spec.resources` (kubelet's PodLevelResources, on by default since
//! 1.34) decide its class, its cgroup's values where they are set, and the
//! limits of its containers that set none. Pure.

use edge_config::quantity::{parse_quantity, parse_quantity_milli};
use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};

/// CFS period kubelet uses (100 ms).
pub const CPU_PERIOD_US: i64 = 100_000;

/// QoS class as `v1.PodQOSClass`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl Qos {
    pub fn as_str(self) -> &'static str {
        match self {
            Qos::Guaranteed => "Guaranteed",
            Qos::Burstable => "Burstable",
            Qos::BestEffort => "BestEffort",
        }
    }
}

pub(crate) fn all_containers(spec: &PodSpec) -> impl Iterator<Item = &Container> {
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
}

/// A container's request or limit (`kind`) of `res`: millicores for cpu,
/// bytes otherwise.
pub(crate) fn quantity(c: &Container, kind: &str, res: &str) -> Option<u128> {
    requirement(c.resources.as_ref()?, kind, res)
}

/// A request or limit (`kind`) of `res` in `r`: millicores for cpu, bytes
/// otherwise.
fn requirement(r: &ResourceRequirements, kind: &str, res: &str) -> Option<u128> {
    let map = if kind == "limits" {
        r.limits.as_ref()?
    } else {
        r.requests.as_ref()?
    };
    let q = map.get(res)?;
    if res == "cpu" {
        parse_quantity_milli(&q.0)
    } else {
        parse_quantity(&q.0)
    }
}

/// The pod's own request or limit (`spec.resources`) of `res`, when set
/// above zero.
pub fn pod_quantity(spec: &PodSpec, kind: &str, res: &str) -> Option<u128> {
    requirement(spec.resources.as_ref()?, kind, res).filter(|v| *v > 0)
}

/// kubelet's `IsPodLevelResourcesSet`: `spec.resources` names cpu, memory
/// or a huge page size.
pub fn pod_level_set(spec: &PodSpec) -> bool {
    spec.resources.as_ref().is_some_and(|r| {
        [&r.requests, &r.limits]
            .into_iter()
            .flatten()
            .flat_map(|m| m.keys())
            .any(|k| k == "cpu" || k == "memory" || k.starts_with("hugepages-"))
    })
}

/// kubelet's `IsPodLevelRequestsSet`.
pub fn pod_level_requests_set(spec: &PodSpec) -> bool {
    spec.resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .is_some_and(|m| {
            m.keys()
                .any(|k| k == "cpu" || k == "memory" || k.starts_with("hugepages-"))
        })
}

/// kubelet's `AggregateContainerRequests` for one resource: the app
/// containers and sidecars together, or an init container with the
/// sidecars started before it, whichever is more.
pub fn aggregate_requests(spec: &PodSpec, res: &str) -> u128 {
    let req = |c: &Container| quantity(c, "requests", res).unwrap_or(0);
    let mut sidecars = 0u128;
    let mut init_max = 0u128;
    for c in spec.init_containers.iter().flatten() {
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars += req(c);
            init_max = init_max.max(sidecars);
        } else {
            init_max = init_max.max(req(c) + sidecars);
        }
    }
    (spec.containers.iter().map(req).sum::<u128>() + sidecars).max(init_max)
}

/// A container's CPU and memory limits as its cgroup gets them: its own,
/// else the pod's (kubelet's `getCPULimit` / `getMemoryLimit`).
pub fn effective_limit(spec: &PodSpec, c: &Container, res: &str) -> Option<u128> {
    quantity(c, "limits", res)
        .filter(|v| *v > 0)
        .or_else(|| pod_quantity(spec, "limits", res).filter(|_| pod_level_set(spec)))
}

/// kubelet's `ComputePodQOS` with pod-level resources: the pod's own
/// requests and limits alone decide (its containers' are not looked at).
fn pod_level_qos(r: &ResourceRequirements) -> Qos {
    let set = |kind| -> Vec<(&str, u128)> {
        ["cpu", "memory"]
            .into_iter()
            .filter_map(|res| Some((res, requirement(r, kind, res).filter(|v| *v > 0)?)))
            .collect()
    };
    let (requests, limits) = (set("requests"), set("limits"));
    if requests.is_empty() && limits.is_empty() {
        return Qos::BestEffort;
    }
    let guaranteed = limits.len() == 2
        && requests.len() == limits.len()
        && requests.iter().all(|q| limits.contains(q));
    if guaranteed {
        Qos::Guaranteed
    } else {
        Qos::Burstable
    }
}

/// kubelet's `GetPodQOS` (cpu and memory only).
pub fn qos_class(spec: &PodSpec) -> Qos {
    if let Some(r) = spec.resources.as_ref() {
        return pod_level_qos(r);
    }
    let mut any = false;
    let mut guaranteed = true;
    for c in all_containers(spec) {
        for res in ["cpu", "memory"] {
            let req = quantity(c, "requests", res).filter(|v| *v > 0);
            let lim = quantity(c, "limits", res).filter(|v| *v > 0);
            if req.is_some() || lim.is_some() {
                any = true;
            }
            if lim.is_none() || req.is_some_and(|r| Some(r) != lim) {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => Qos::BestEffort,
        (true, true) => Qos::Guaranteed,
        (true, false) => Qos::Burstable,
    }
}

/// The pod cgroup (cgroupfs driver): `<root>/kubepods[/burstable|/besteffort]/pod<uid>`.
pub fn pod_cgroup_parent(cgroup_root: &str, qos: Qos, uid: &str) -> String {
    let root = cgroup_root.trim_end_matches('/');
    match qos {
        Qos::Guaranteed => format!("{root}/kubepods/pod{uid}"),
        Qos::Burstable => format!("{root}/kubepods/burstable/pod{uid}"),
        Qos::BestEffort => format!("{root}/kubepods/besteffort/pod{uid}"),
    }
}

/// cpu.shares from a request in millicores (kubelet's `MilliCPUToShares`).
pub fn milli_cpu_to_shares(milli: u128) -> u64 {
    if milli == 0 {
        return 2;
    }
    u64::try_from((milli * 1024 / 1000).max(2)).unwrap_or(262_144)
}

/// CFS quota from a limit in millicores (kubelet's `MilliCPUToQuota`).
pub fn milli_cpu_to_quota(milli: u128) -> i64 {
    if milli == 0 {
        return 0;
    }
    let q = i64::try_from(milli * CPU_PERIOD_US as u128 / 1000).unwrap_or(i64::MAX);
    q.max(1000)
}

/// The pod-level cgroup limits kubelet sets (`ResourceConfigForPod`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PodResources {
    pub cpu_shares: u64,
    pub cpu_quota: Option<i64>,
    pub memory_limit: Option<u64>,
}

pub fn pod_resources(spec: &PodSpec) -> PodResources {
    let app = || spec.containers.iter();
    let sum_or_max = |kind: &str, res: &str| -> Option<u128> {
        // Apps run together (sum); init containers one at a time (max).
        let mut sum = 0u128;
        for c in app() {
            sum += quantity(c, kind, res)?;
        }
        let mut init_max = 0u128;
        for c in spec.init_containers.iter().flatten() {
            init_max = init_max.max(quantity(c, kind, res)?);
        }
        Some(sum.max(init_max))
    };
    let req_cpu: u128 = app()
        .filter_map(|c| quantity(c, "requests", "cpu"))
        .sum::<u128>()
        .max(
            spec.init_containers
                .iter()
                .flatten()
                .filter_map(|c| quantity(c, "requests", "cpu"))
                .max()
                .unwrap_or(0),
        );
    // kubelet's PodRequests / PodLimits: the pod's own value, where it
    // sets one, in place of its containers'.
    let pod = |kind, res| pod_quantity(spec, kind, res).filter(|_| pod_level_set(spec));
    PodResources {
        cpu_shares: milli_cpu_to_shares(pod("requests", "cpu").unwrap_or(req_cpu)),
        cpu_quota: pod("limits", "cpu")
            .or_else(|| sum_or_max("limits", "cpu"))
            .map(milli_cpu_to_quota),
        memory_limit: pod("limits", "memory")
            .or_else(|| sum_or_max("limits", "memory"))
            .and_then(|m| u64::try_from(m).ok()),
    }
}

/// A quantity of millicores as the API server writes it canonically.
pub fn cpu_quantity(milli: u64) -> String {
    if milli.is_multiple_of(1000) {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// A quantity of bytes as the API server writes a binary-SI one
/// canonically: the largest binary suffix it is a whole multiple of, else
/// the largest decimal one.
pub fn memory_quantity(bytes: u64) -> String {
    if bytes == 0 {
        return "0".into();
    }
    for (suffix, shift) in [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ] {
        if bytes.is_multiple_of(1u64 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    for (suffix, div) in [
        ("E", 1_000_000_000_000_000_000u64),
        ("P", 1_000_000_000_000_000),
        ("T", 1_000_000_000_000),
        ("G", 1_000_000_000),
        ("M", 1_000_000),
        ("k", 1_000),
    ] {
        if bytes.is_multiple_of(div) {
            return format!("{}{suffix}", bytes / div);
        }
    }
    bytes.to_string()
}

/// oom_score_adj by QoS (kubelet's `GetContainerOOMScoreAdjust`). With a
/// pod-level memory request, each container also counts an equal share
/// of what the pod requests beyond its containers.
pub fn oom_score_adj(spec: &PodSpec, qos: Qos, c: &Container, node_memory: u128) -> i64 {
    match qos {
        Qos::Guaranteed => -997,
        Qos::BestEffort => 1000,
        Qos::Burstable => {
            let remaining = match pod_quantity(spec, "requests", "memory") {
                Some(pod) if pod_level_requests_set(spec) => {
                    let n =
                        spec.containers.len() + spec.init_containers.as_ref().map_or(0, Vec::len);
                    pod.saturating_sub(aggregate_requests(spec, "memory"))
                        / u128::try_from(n.max(1)).unwrap_or(1)
                }
                _ => 0,
            };
            let req = quantity(c, "requests", "memory").unwrap_or(0) + remaining;
            let adj = 1000 - (1000 * req / node_memory.max(1)).min(1000) as i64;
            if adj < 3 {
                3
            } else if adj == 1000 {
                999
            } else {
                adj
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_written_as_the_api_server_writes_them() {
        assert_eq!(cpu_quantity(500), "500m");
        assert_eq!(cpu_quantity(2000), "2");
        assert_eq!(cpu_quantity(1500), "1500m");
        assert_eq!(memory_quantity(64 << 20), "64Mi");
        assert_eq!(memory_quantity(1 << 30), "1Gi");
        assert_eq!(memory_quantity(1_000_000), "1M");
        assert_eq!(memory_quantity(1500), "1500");
    }
    use crate::config::manifest::test_pod as pod;

    #[test]
    fn qos_classes() {
        let be = pod("  containers:\n  - {name: a, image: i}\n");
        assert_eq!(qos_class(be.spec.as_ref().expect("spec")), Qos::BestEffort);
        let g = pod(
            "  containers:\n  - name: a\n    image: i\n    resources: {limits: {cpu: 500m, memory: 64Mi}}\n",
        );
        assert_eq!(qos_class(g.spec.as_ref().expect("spec")), Qos::Guaranteed);
        let b = pod(
            "  containers:\n  - name: a\n    image: i\n    resources: {requests: {memory: 64Mi}}\n  - {name: b, image: i}\n",
        );
        let spec = b.spec.as_ref().expect("spec");
        assert_eq!(qos_class(spec), Qos::Burstable);
        assert_eq!(
            pod_cgroup_parent("/", Qos::Burstable, "u1"),
            "/kubepods/burstable/podu1"
        );
        assert_eq!(
            pod_cgroup_parent("/", Qos::Guaranteed, "u1"),
            "/kubepods/podu1"
        );
        // 64 MiB of 8 GiB → 1000 - 7 = 993.
        assert_eq!(
            oom_score_adj(spec, Qos::Burstable, &spec.containers[0], 8 << 30),
            993
        );
        assert_eq!(
            oom_score_adj(spec, Qos::Burstable, &spec.containers[1], 8 << 30),
            999
        );
    }

    /// kubelet's PodLevelResources: the pod's own requests and limits
    /// decide its class and its cgroup where it sets them, and the limits
    /// of containers that set none.
    #[test]
    fn pod_level_resources() {
        let node = crate::cri_config::NodeInfo {
            memory_bytes: 8 << 30,
            ..Default::default()
        };
        // Pod limits, no container resources: requests default to the
        // limits, Guaranteed.
        let g = pod(
            "  resources: {limits: {cpu: '1', memory: 128Mi}}\n  containers:\n  - {name: a, image: i}\n  - {name: b, image: i}\n",
        );
        let spec = g.spec.as_ref().expect("spec");
        assert_eq!(qos_class(spec), Qos::Guaranteed);
        let r = pod_resources(spec);
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.memory_limit),
            (1024, Some(100_000), Some(128 << 20))
        );
        let c =
            crate::cri_config::linux_resources(spec, &spec.containers[0], Qos::Guaranteed, &node);
        assert_eq!(
            (c.cpu_quota, c.memory_limit_in_bytes, c.cpu_shares),
            (100_000, 128 << 20, 1024),
            "the pod's limits; shares from the limit for a container with no request"
        );
        // A container requesting less: the pod request is the containers'
        // sum, Burstable; the container's own limit stands.
        let b = pod(
            "  resources: {limits: {cpu: '1', memory: 1Gi}}\n  containers:\n  - name: a\n    image: i\n    resources: {requests: {cpu: 250m, memory: 256Mi}, limits: {memory: 512Mi}}\n  - {name: b, image: i}\n",
        );
        let spec = b.spec.as_ref().expect("spec");
        assert_eq!(qos_class(spec), Qos::Burstable);
        let req = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.clone())
            .expect("defaulted");
        assert_eq!(
            (req["cpu"].0.as_str(), req["memory"].0.as_str()),
            ("250m", "256Mi")
        );
        let c =
            crate::cri_config::linux_resources(spec, &spec.containers[0], Qos::Burstable, &node);
        assert_eq!(
            (c.memory_limit_in_bytes, c.cpu_quota, c.cpu_shares),
            (512 << 20, 100_000, 256)
        );
        // Only cpu at pod level: memory still from the containers (not all
        // declare one: none).
        let cpu = pod(
            "  resources: {limits: {cpu: 500m}}\n  containers:\n  - name: a\n    image: i\n    resources: {limits: {memory: 64Mi}}\n  - {name: b, image: i}\n",
        );
        let r = pod_resources(cpu.spec.as_ref().expect("spec"));
        assert_eq!((r.cpu_quota, r.memory_limit), (Some(50_000), None));
        // `resources: {}` is pod level too: BestEffort whatever the
        // containers ask.
        let empty = pod(
            "  resources: {}\n  containers:\n  - name: a\n    image: i\n    resources: {requests: {cpu: 100m}}\n",
        );
        assert_eq!(
            qos_class(empty.spec.as_ref().expect("spec")),
            Qos::BestEffort
        );
    }

    #[test]
    fn oom_score_counts_a_share_of_the_pods_own_memory_request() {
        let p = pod(
            "  resources: {requests: {memory: 1Gi}}\n  containers:\n  - name: a\n    image: i\n    resources: {requests: {memory: 256Mi}}\n  - {name: b, image: i}\n",
        );
        let spec = p.spec.as_ref().expect("spec");
        // (1 Gi - 256 Mi) / 2 = 384 Mi each on top of its own request.
        assert_eq!(
            oom_score_adj(spec, Qos::Burstable, &spec.containers[0], 8 << 30),
            922
        );
        assert_eq!(
            oom_score_adj(spec, Qos::Burstable, &spec.containers[1], 8 << 30),
            954
        );
    }

    #[test]
    fn cpu_formulas() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(250), 256);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_quota(500), 50_000);
        assert_eq!(milli_cpu_to_quota(5), 1000);
        let p = pod(
            "  containers:\n  - name: a\n    image: i\n    resources: {limits: {cpu: 500m, memory: 64Mi}}\n  - name: b\n    image: i\n    resources: {limits: {cpu: 250m, memory: 32Mi}}\n",
        );
        let r = pod_resources(p.spec.as_ref().expect("spec"));
        assert_eq!(r.cpu_shares, 768);
        assert_eq!(r.cpu_quota, Some(75_000));
        assert_eq!(r.memory_limit, Some(96 << 20));
        let p = pod(
            "  containers:\n  - name: a\n    image: i\n    resources: {limits: {memory: 64Mi}}\n  - {name: b, image: i}\n",
        );
        let r = pod_resources(p.spec.as_ref().expect("spec"));
        assert_eq!((r.cpu_quota, r.memory_limit), (None, None));
    }
}
