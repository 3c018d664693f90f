//! The Node object this agent registers and the status it reports, as
//! kubelet's `nodestatus` setters build them: capacity and allocatable,
//! addresses, nodeInfo, daemon endpoints, images and the four conditions
//! with heartbeat and transition times. Pure: the caller gathers the facts.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// kubelet's default `maxPods`.
pub const MAX_PODS: u32 = 110;
/// The Kubernetes version whose kubelet picolet stands in for, reported
/// as the node's kubeletVersion (with picolet's own after it).
pub const KUBELET_COMPAT: &str = "1.26.0";
/// kubelet's cap on the images a node status lists.
const MAX_IMAGES: usize = 50;

/// What the node is, read once at start (and the runtime's version).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    pub name: String,
    pub internal_ip: String,
    pub hostname: String,
    pub cpus: u64,
    pub memory_bytes: u64,
    /// Capacity of the filesystem holding the agent's data dir.
    pub ephemeral_bytes: u64,
    /// Hugepage sizes the kernel offers, in KiB (capacity 0 each: picolet
    /// does not reserve hugepages).
    pub hugepage_kib: Vec<u64>,
    pub max_pods: u32,
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    pub kernel: String,
    pub os_image: String,
    /// GOARCH spelling: amd64, arm64.
    pub arch: String,
    /// `<runtime>://<version>` from CRI Version.
    pub runtime_version: String,
    pub kubelet_port: u16,
    /// What allocatable keeps back: kubeReserved + systemReserved +
    /// evictionHard, per resource (bytes, millicores).
    pub reserved_memory: u64,
    pub reserved_ephemeral: u64,
    pub reserved_cpu_milli: u64,
    /// Device plugins' resources now: name → (capacity: every device,
    /// allocatable: the healthy ones).
    pub extended: BTreeMap<String, (usize, usize)>,
    /// The runtime's handlers and what each does (kubelet's
    /// `status.runtimeHandlers`).
    pub runtime_handlers: Vec<cri_proto::v1::RuntimeHandler>,
    /// The runtime does SupplementalGroupsPolicy (`status.features`).
    pub supplemental_groups_policy: bool,
}

/// Capacity less what is kept back: millicores, bytes, pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Allocatable {
    pub cpu_milli: u64,
    pub memory: u64,
    pub ephemeral: u64,
    pub pods: u32,
}

impl Facts {
    /// Allocatable, as the node status reports it and admission checks it.
    pub fn allocatable(&self) -> Allocatable {
        Allocatable {
            cpu_milli: (self.cpus * 1000).saturating_sub(self.reserved_cpu_milli),
            memory: self.memory_bytes.saturating_sub(self.reserved_memory),
            ephemeral: self.ephemeral_bytes.saturating_sub(self.reserved_ephemeral),
            pods: self.max_pods,
        }
    }
}

/// What the conditions are made of, read at every status update.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    /// Why the node is not ready (runtime or network), None: ready.
    pub not_ready: Option<String>,
    pub memory_pressure: bool,
    pub disk_pressure: bool,
    pub pid_pressure: bool,
}

/// GOARCH of this build's target.
pub fn goarch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "riscv64" => "riscv64",
        other => other,
    }
}

/// The Node to create: kubelet's labels (hostname, os, arch) and extra
/// `labels`, its annotations, `taints` (registerWithTaints).
pub fn registration(f: &Facts, labels: &BTreeMap<String, String>, taints: &[Value]) -> Value {
    let mut all = BTreeMap::from([
        ("beta.kubernetes.io/arch".to_string(), f.arch.clone()),
        ("beta.kubernetes.io/os".into(), "linux".into()),
        ("kubernetes.io/arch".into(), f.arch.clone()),
        ("kubernetes.io/hostname".into(), f.hostname.clone()),
        ("kubernetes.io/os".into(), "linux".into()),
    ]);
    all.extend(labels.clone());
    let mut node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f.name,
            "labels": all,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {},
    });
    if !taints.is_empty() {
        node["spec"]["taints"] = Value::Array(taints.to_vec());
    }
    node
}

fn kib(bytes: u64) -> String {
    format!("{}Ki", bytes / 1024)
}

/// Capacity and allocatable.
fn resources(f: &Facts) -> (Value, Value) {
    let mut capacity = json!({
        "cpu": f.cpus.to_string(),
        "memory": kib(f.memory_bytes),
        "pods": f.max_pods.to_string(),
        "ephemeral-storage": kib(f.ephemeral_bytes),
    });
    let a = f.allocatable();
    let mut allocatable = json!({
        "cpu": if a.cpu_milli.is_multiple_of(1000) { (a.cpu_milli / 1000).to_string() } else { format!("{}m", a.cpu_milli) },
        "memory": kib(a.memory),
        "pods": a.pods.to_string(),
        "ephemeral-storage": a.ephemeral.to_string(),
    });
    for k in &f.hugepage_kib {
        let name = if k % (1024 * 1024) == 0 {
            format!("hugepages-{}Gi", k / (1024 * 1024))
        } else if k % 1024 == 0 {
            format!("hugepages-{}Mi", k / 1024)
        } else {
            format!("hugepages-{k}Ki")
        };
        capacity[&name] = json!("0");
        allocatable[&name] = json!("0");
    }
    for (name, (all, healthy)) in &f.extended {
        capacity[name] = json!(all.to_string());
        allocatable[name] = json!(healthy.to_string());
    }
    (capacity, allocatable)
}

/// The four conditions at `now` (RFC 3339), each keeping its transition
/// time from `previous` when its status did not change.
pub fn conditions(h: &Health, previous: &[Value], now: &str) -> Vec<Value> {
    let one = |kind: &str, on: bool, reason: &str, message: &str| {
        let status = if on { "True" } else { "False" };
        let since = previous
            .iter()
            .find(|c| c["type"] == kind && c["status"] == status)
            .and_then(|c| c["lastTransitionTime"].as_str())
            .unwrap_or(now);
        json!({
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": since,
        })
    };
    let pressure = |kind: &str, on: bool, has: &str, no: &str, what: &str| {
        if on {
            one(kind, true, has, &format!("kubelet has {what}"))
        } else {
            one(
                kind,
                false,
                no,
                &format!("kubelet has {}", no_message(what)),
            )
        }
    };
    vec![
        pressure(
            "MemoryPressure",
            h.memory_pressure,
            "KubeletHasInsufficientMemory",
            "KubeletHasSufficientMemory",
            "insufficient memory available",
        ),
        pressure(
            "DiskPressure",
            h.disk_pressure,
            "KubeletHasDiskPressure",
            "KubeletHasNoDiskPressure",
            "disk pressure",
        ),
        pressure(
            "PIDPressure",
            h.pid_pressure,
            "KubeletHasInsufficientPID",
            "KubeletHasSufficientPID",
            "insufficient PID available",
        ),
        match &h.not_ready {
            None => one(
                "Ready",
                true,
                "KubeletReady",
                "kubelet is posting ready status",
            ),
            Some(why) => one("Ready", false, "KubeletNotReady", why),
        },
    ]
}

/// kubelet's messages for a condition that is off.
fn no_message(what: &str) -> &'static str {
    match what {
        "insufficient memory available" => "sufficient memory available",
        "disk pressure" => "no disk pressure",
        _ => "sufficient PID available",
    }
}

/// The node status: `images` as (names, size), biggest first, at most 50.
pub fn status(f: &Facts, conditions: Vec<Value>, mut images: Vec<(Vec<String>, u64)>) -> Value {
    let (capacity, allocatable) = resources(f);
    images.sort_by_key(|i| std::cmp::Reverse(i.1));
    images.truncate(MAX_IMAGES);
    json!({
        "capacity": capacity,
        "allocatable": allocatable,
        "conditions": conditions,
        "addresses": [
            {"type": "InternalIP", "address": f.internal_ip},
            {"type": "Hostname", "address": f.hostname},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": f.kubelet_port}},
        "nodeInfo": {
            "machineID": f.machine_id,
            "systemUUID": f.system_uuid,
            "bootID": f.boot_id,
            "kernelVersion": f.kernel,
            "osImage": f.os_image,
            "containerRuntimeVersion": f.runtime_version,
            "kubeletVersion": format!("v{KUBELET_COMPAT}-picolet.{}", env!("CARGO_PKG_VERSION")),
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": f.arch,
        },
        "images": images
            .into_iter()
            .map(|(names, size)| json!({"names": names, "sizeBytes": size}))
            .collect::<Vec<_>>(),
        "runtimeHandlers": f.runtime_handlers.iter().map(|h| {
            let features = h.features.unwrap_or_default();
            json!({
                "name": h.name,
                "features": {
                    "recursiveReadOnlyMounts": features.recursive_read_only_mounts,
                    "userNamespaces": features.user_namespaces,
                },
            })
        }).collect::<Vec<_>>(),
        "features": {"supplementalGroupsPolicy": f.supplemental_groups_policy},
    })
}

/// Whether two statuses differ in more than their heartbeat times (kubelet
/// patches on a change, else only every nodeStatusReportFrequency).
pub fn changed(old: &Value, new: &Value) -> bool {
    fn strip(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(cs) = v["conditions"].as_array_mut() {
            for c in cs {
                if let Some(o) = c.as_object_mut() {
                    o.remove("lastHeartbeatTime");
                }
            }
        }
        v
    }
    strip(old) != strip(new)
}

/// Whether the conditions on the server (`server`, the Node's
/// `status.conditions`) say something else than ours: the node lifecycle
/// controller sets Ready to Unknown when the lease lapsed (an outage), and
/// only a new post from the node sets it back.
pub fn server_differs(server: &Value, ours: &Value) -> bool {
    let pairs = |v: &Value| -> Vec<(String, String)> {
        let mut p: Vec<(String, String)> = v
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["type"].as_str().unwrap_or("").to_string(),
                    c["status"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        p.sort();
        p
    };
    pairs(server) != pairs(ours)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts {
        Facts {
            name: "pk-node".into(),
            internal_ip: "192.0.2.10".into(),
            hostname: "pk-node".into(),
            cpus: 2,
            memory_bytes: 4 << 30,
            ephemeral_bytes: 100 << 30,
            hugepage_kib: vec![2048, 1 << 20],
            max_pods: MAX_PODS,
            arch: "arm64".into(),
            runtime_version: "picolet://0.1.0".into(),
            kubelet_port: 10250,
            reserved_memory: 100 << 20,
            reserved_ephemeral: 10 << 30,
            reserved_cpu_milli: 100,
            ..Facts::default()
        }
    }

    #[test]
    fn registration_carries_kubelets_labels_and_the_taints() {
        let taint = json!({"key": "edge", "value": "true", "effect": "NoSchedule"});
        let extra = BTreeMap::from([("site".to_string(), "north".to_string())]);
        let n = registration(&facts(), &extra, std::slice::from_ref(&taint));
        assert_eq!(n["metadata"]["name"], "pk-node");
        let labels = &n["metadata"]["labels"];
        assert_eq!(labels["kubernetes.io/hostname"], "pk-node");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(labels["kubernetes.io/arch"], "arm64");
        assert_eq!(labels["site"], "north");
        assert_eq!(n["spec"]["taints"], json!([taint]));
        assert!(
            registration(&facts(), &BTreeMap::new(), &[])["spec"]
                .get("taints")
                .is_none()
        );
    }

    #[test]
    fn device_plugin_resources_are_capacity_and_their_healthy_ones_allocatable() {
        let mut f = facts();
        f.extended
            .insert("devices.picolet.io/serial".into(), (3, 2));
        let s = status(&f, vec![], vec![]);
        assert_eq!(s["capacity"]["devices.picolet.io/serial"], "3");
        assert_eq!(s["allocatable"]["devices.picolet.io/serial"], "2");
    }

    #[test]
    fn runtime_handlers_and_features_in_kubelets_shape() {
        let mut f = facts();
        f.runtime_handlers = vec![cri_proto::v1::RuntimeHandler {
            name: String::new(),
            features: Some(cri_proto::v1::RuntimeHandlerFeatures {
                recursive_read_only_mounts: true,
                user_namespaces: false,
            }),
        }];
        f.supplemental_groups_policy = true;
        let s = status(&f, vec![], vec![]);
        assert_eq!(
            s["runtimeHandlers"],
            json!([{"name": "", "features": {"recursiveReadOnlyMounts": true, "userNamespaces": false}}])
        );
        assert_eq!(s["features"], json!({"supplementalGroupsPolicy": true}));
    }

    #[test]
    fn allocatable_is_capacity_less_what_is_kept_back() {
        let s = status(&facts(), vec![], vec![]);
        assert_eq!(s["capacity"]["cpu"], "2");
        assert_eq!(s["allocatable"]["cpu"], "1900m");
        assert_eq!(s["capacity"]["memory"], "4194304Ki");
        assert_eq!(s["allocatable"]["memory"], "4091904Ki");
        assert_eq!(s["capacity"]["pods"], "110");
        assert_eq!(
            s["allocatable"]["ephemeral-storage"],
            (90u64 << 30).to_string()
        );
        assert_eq!(s["capacity"]["hugepages-2Mi"], "0");
        assert_eq!(s["allocatable"]["hugepages-1Gi"], "0");
        assert_eq!(s["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10250);
        assert_eq!(
            s["addresses"][0],
            json!({"type": "InternalIP", "address": "192.0.2.10"})
        );
    }

    #[test]
    fn images_are_listed_biggest_first_fifty_at_most() {
        let images = (0..60u64).map(|i| (vec![format!("img{i}")], i)).collect();
        let s = status(&facts(), vec![], images);
        let listed = s["images"].as_array().expect("images");
        assert_eq!(listed.len(), 50);
        assert_eq!(listed[0]["names"][0], "img59");
        assert_eq!(listed[49]["sizeBytes"], 10);
    }

    #[test]
    fn conditions_keep_their_transition_time_until_they_change() {
        let ready = Health::default();
        let t0 = conditions(&ready, &[], "2026-01-01T00:00:00Z");
        assert_eq!(t0.len(), 4);
        let r0 = t0.iter().find(|c| c["type"] == "Ready").expect("Ready");
        assert_eq!(
            (r0["status"].as_str(), r0["reason"].as_str()),
            (Some("True"), Some("KubeletReady"))
        );
        let t1 = conditions(&ready, &t0, "2026-01-01T00:00:10Z");
        let r1 = t1.iter().find(|c| c["type"] == "Ready").expect("Ready");
        assert_eq!(r1["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(r1["lastHeartbeatTime"], "2026-01-01T00:00:10Z");
        let down = Health {
            not_ready: Some("container runtime network not ready".into()),
            ..Health::default()
        };
        let t2 = conditions(&down, &t1, "2026-01-01T00:00:20Z");
        let r2 = t2.iter().find(|c| c["type"] == "Ready").expect("Ready");
        assert_eq!(r2["status"], "False");
        assert_eq!(r2["reason"], "KubeletNotReady");
        assert_eq!(r2["lastTransitionTime"], "2026-01-01T00:00:20Z");
        let mem = t2
            .iter()
            .find(|c| c["type"] == "MemoryPressure")
            .expect("memory");
        assert_eq!(mem["reason"], "KubeletHasSufficientMemory");
        assert_eq!(mem["message"], "kubelet has sufficient memory available");
    }

    #[test]
    fn a_ready_condition_the_controller_set_to_unknown_is_posted_again() {
        let ours = json!(conditions(&Health::default(), &[], "2026-01-01T00:00:00Z"));
        assert!(!server_differs(&ours, &ours));
        let mut server = ours.clone();
        for c in server.as_array_mut().expect("conditions") {
            c["status"] = json!("Unknown");
            c["reason"] = json!("NodeStatusUnknown");
        }
        assert!(server_differs(&server, &ours));
        assert!(server_differs(&Value::Null, &ours));
    }

    #[test]
    fn a_new_heartbeat_alone_is_no_change() {
        let h = Health::default();
        let a = status(
            &facts(),
            conditions(&h, &[], "2026-01-01T00:00:00Z"),
            vec![],
        );
        let c = conditions(
            &h,
            a["conditions"].as_array().expect("conditions"),
            "2026-01-01T00:01:00Z",
        );
        let b = status(&facts(), c, vec![]);
        assert!(!changed(&a, &b));
        let mut other = facts();
        other.runtime_version = "containerd://1.6.20".into();
        let d = status(
            &other,
            b["conditions"].as_array().expect("c").clone(),
            vec![],
        );
        assert!(changed(&b, &d));
    }
}
