//! Pod → CRI: the sandbox and container configs kubelet's
//! `kuberuntime` builds (labels, annotations, namespaces, security
//! context, resources, env with field refs, mounts, DNS). Pure: node facts
//! and resolved volume paths come in as values; the QoS arithmetic is in
//! [`crate::qos`].

use std::collections::HashMap;
use std::path::PathBuf;

use cri_proto::v1::{
    Int64Value, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption,
    PodSandboxConfig, PodSandboxMetadata, PortMapping, Protocol, SecurityProfile,
    security_profile::ProfileType,
};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, SeccompProfile};
use sha2::{Digest, Sha256};

mod container;
mod dns;
pub mod hosts;

pub use container::{
    ConfigError, ContainerEnv, container_config, container_resource, expand, linux_resources,
};
use dns::dns_config;
pub use dns::parse_resolv_conf;

pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";
pub const ANN_CONTAINER_HASH: &str = "io.kubernetes.container.hash";
pub const ANN_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
pub const ANN_GRACE: &str = "io.kubernetes.pod.terminationGracePeriod";
pub const ANN_TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";

/// The `fieldRef` paths env vars may use.
pub const FIELD_REFS: [&str; 9] = [
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.podIP",
    "status.podIPs",
    "status.hostIP",
    "status.hostIPs",
];

/// Facts about the node that pod configs depend on.
#[derive(Debug, Clone, Default)]
pub struct NodeInfo {
    pub name: String,
    pub host_ip: String,
    pub cpu_milli: u128,
    pub memory_bytes: u128,
    /// How this node's cgroups limit swap, if they can: containers get
    /// none (kubelet's default swap behavior, NoSwap).
    pub swap: SwapControl,
}

/// How the node's cgroups limit a container's swap (kubelet's
/// `swapControllerAvailable` and `ConfigureNoSwap`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SwapControl {
    /// No swap controller (v1 without `memory.memsw.*`): nothing to set.
    #[default]
    Unavailable,
    /// cgroup v1: memory + swap limited to the memory limit.
    V1,
    /// cgroup v2: `memory.swap.max` 0.
    V2,
}

/// Node-level settings for sandbox configs.
#[derive(Debug, Clone, Default)]
pub struct SandboxEnv {
    pub cgroup_parent: String,
    pub pod_logs_dir: PathBuf,
    /// The host's resolv.conf text (`resolvConf`).
    pub host_resolv_conf: String,
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    /// The pod's own user namespace (`hostUsers: false`).
    pub userns: Option<cri_proto::v1::UserNamespace>,
}

/// A hash of the container spec without its resources and resize policy:
/// a changed container restarts (a new image on an API pod), a resized one
/// does not ([`crate::allocation`]), and a restarted agent recognises the
/// containers it made.
pub fn container_hash(c: &Container) -> String {
    let c = Container {
        resources: None,
        resize_policy: None,
        ..c.clone()
    };
    legacy_container_hash(&c)
}

/// The hash agents before in-place resize wrote: of the whole container,
/// resources included. A container it made is adopted, not restarted,
/// when this matches its spec as allocated.
pub fn legacy_container_hash(c: &Container) -> String {
    let json = serde_json::to_vec(c).unwrap_or_default();
    hex::encode(&Sha256::digest(&json)[..8])
}

pub(super) fn labels(pod: &Pod) -> (String, String, String) {
    (
        pod.metadata.name.clone().unwrap_or_default(),
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.uid.clone().unwrap_or_default(),
    )
}

/// The pod's log directory, `<podLogsDir>/<ns>_<name>_<uid>`.
pub fn pod_log_dir(root: &std::path::Path, pod: &Pod) -> PathBuf {
    let (name, ns, uid) = labels(pod);
    pod_log_dir_of(root, &ns, &name, &uid)
}

/// [`pod_log_dir`] from the names alone (an orphan has no pod object).
pub fn pod_log_dir_of(root: &std::path::Path, ns: &str, name: &str, uid: &str) -> PathBuf {
    root.join(format!("{ns}_{name}_{uid}"))
}

fn ns_mode(host: Option<bool>, otherwise: NamespaceMode) -> i32 {
    if host.unwrap_or(false) {
        NamespaceMode::Node as i32
    } else {
        otherwise as i32
    }
}

/// kubelet's namespace options; `userns`: the pod's own user namespace
/// (`hostUsers: false`), else the node's, said as kubelet 1.36 says it.
pub(super) fn namespace_options(
    spec: &PodSpec,
    userns: Option<&cri_proto::v1::UserNamespace>,
) -> NamespaceOption {
    let pid_otherwise = if spec.share_process_namespace.unwrap_or(false) {
        NamespaceMode::Pod
    } else {
        NamespaceMode::Container
    };
    NamespaceOption {
        network: ns_mode(spec.host_network, NamespaceMode::Pod),
        pid: ns_mode(spec.host_pid, pid_otherwise),
        ipc: ns_mode(spec.host_ipc, NamespaceMode::Pod),
        userns_options: Some(userns.cloned().unwrap_or(cri_proto::v1::UserNamespace {
            mode: NamespaceMode::Node as i32,
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// The sandbox's hostname (empty for host network: the runtime keeps the node's).
fn hostname(pod: &Pod) -> String {
    let spec = pod.spec.as_ref();
    if spec.and_then(|s| s.host_network).unwrap_or(false) {
        return String::new();
    }
    let h = spec
        .and_then(|s| s.hostname.clone())
        .unwrap_or_else(|| pod.metadata.name.clone().unwrap_or_default());
    let mut h: String = h.chars().take(63).collect();
    while h.ends_with(['-', '.']) {
        h.pop();
    }
    h
}

/// kubelet's `generatePodSandboxConfig`.
pub fn sandbox_config(pod: &Pod, attempt: u32, env: &SandboxEnv) -> PodSandboxConfig {
    let (name, ns, uid) = labels(pod);
    let default_spec = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&default_spec);
    let mut labels: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    labels.insert(LABEL_POD_NAME.into(), name.clone());
    labels.insert(LABEL_POD_NAMESPACE.into(), ns.clone());
    labels.insert(LABEL_POD_UID.into(), uid.clone());
    let annotations = pod
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let mut port_mappings = Vec::new();
    for c in &spec.containers {
        for p in c.ports.iter().flatten() {
            let host_port = p.host_port.unwrap_or(0);
            if host_port == 0 {
                continue;
            }
            port_mappings.push(PortMapping {
                protocol: match p.protocol.as_deref() {
                    Some("UDP") => Protocol::Udp,
                    Some("SCTP") => Protocol::Sctp,
                    _ => Protocol::Tcp,
                } as i32,
                container_port: p.container_port,
                host_port,
                host_ip: p.host_ip.clone().unwrap_or_default(),
            });
        }
    }
    let psc = spec.security_context.as_ref();
    let privileged = spec.containers.iter().any(|c| {
        c.security_context
            .as_ref()
            .and_then(|s| s.privileged)
            .unwrap_or(false)
    });
    let sysctls = psc
        .and_then(|s| s.sysctls.as_ref())
        .map(|v| {
            v.iter()
                .map(|s| (s.name.clone(), s.value.clone()))
                .collect()
        })
        .unwrap_or_default();
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name,
            uid,
            namespace: ns.clone(),
            attempt,
        }),
        hostname: hostname(pod),
        log_directory: pod_log_dir(&env.pod_logs_dir, pod)
            .to_string_lossy()
            .into_owned(),
        dns_config: dns_config(spec, &ns, env),
        port_mappings,
        labels,
        annotations,
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: env.cgroup_parent.clone(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(spec, env.userns.as_ref())),
                run_as_user: psc
                    .and_then(|s| s.run_as_user)
                    .map(|value| Int64Value { value }),
                run_as_group: psc
                    .and_then(|s| s.run_as_group)
                    .map(|value| Int64Value { value }),
                supplemental_groups: supplemental_groups(spec),
                supplemental_groups_policy: supplemental_groups_policy(spec),
                privileged,
                ..Default::default()
            }),
            sysctls,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// kubelet's `determineEffectiveSupplementalGroupsPolicy` as CRI's enum:
/// Strict when the pod asks for it, else Merge.
pub(super) fn supplemental_groups_policy(spec: &PodSpec) -> i32 {
    use cri_proto::v1::SupplementalGroupsPolicy;
    match spec
        .security_context
        .as_ref()
        .and_then(|s| s.supplemental_groups_policy.as_deref())
    {
        Some("Strict") => SupplementalGroupsPolicy::Strict as i32,
        _ => SupplementalGroupsPolicy::Merge as i32,
    }
}

pub(super) fn supplemental_groups(spec: &PodSpec) -> Vec<i64> {
    let psc = spec.security_context.as_ref();
    let mut g: Vec<i64> = psc
        .and_then(|s| s.supplemental_groups.clone())
        .unwrap_or_default();
    if let Some(fs) = psc.and_then(|s| s.fs_group) {
        g.push(fs);
    }
    g
}

/// kubelet's `getSeccompProfile`: the container's profile, else the
/// pod's, else RuntimeDefault with `seccompDefault`, else none (the runtime
/// runs it unconfined). The runtime leaves privileged containers
/// unconfined whatever this says, as containerd does.
pub(super) fn seccomp(p: Option<&SeccompProfile>, default: bool) -> Option<SecurityProfile> {
    let Some(p) = p else {
        return default.then(|| SecurityProfile {
            profile_type: ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        });
    };
    Some(match p.type_.as_str() {
        "RuntimeDefault" => SecurityProfile {
            profile_type: ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        },
        "Localhost" => SecurityProfile {
            profile_type: ProfileType::Localhost as i32,
            localhost_ref: p.localhost_profile.clone().unwrap_or_default(),
        },
        _ => SecurityProfile {
            profile_type: ProfileType::Unconfined as i32,
            localhost_ref: String::new(),
        },
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::manifest::test_pod as pod;

    #[test]
    fn seccomp_profile_container_then_pod_then_seccomp_default() {
        let prof = |t: &str| SeccompProfile {
            type_: t.into(),
            localhost_profile: (t == "Localhost").then(|| "p.json".into()),
        };
        let ty = |p: Option<SecurityProfile>| p.map(|p| (p.profile_type, p.localhost_ref));
        let rd = Some((ProfileType::RuntimeDefault as i32, String::new()));
        assert_eq!(ty(seccomp(None, true)), rd);
        assert_eq!(
            ty(seccomp(None, false)),
            None,
            "kubelet's default: unconfined"
        );
        let unconfined = prof("Unconfined");
        assert_eq!(
            ty(seccomp(Some(&unconfined), true)),
            Some((ProfileType::Unconfined as i32, String::new())),
            "a pod opts out"
        );
        let local = prof("Localhost");
        assert_eq!(
            ty(seccomp(Some(&local), true)),
            Some((ProfileType::Localhost as i32, "p.json".into()))
        );
        assert_eq!(ty(seccomp(Some(&prof("RuntimeDefault")), false)), rd);
    }

    pub(super) fn node() -> NodeInfo {
        NodeInfo {
            name: "node".into(),
            host_ip: "10.0.0.5".into(),
            cpu_milli: 4000,
            memory_bytes: 8 << 30,
            swap: SwapControl::V1,
        }
    }

    #[test]
    fn sandbox_config_namespaces_and_dns() {
        let p = pod(
            "  hostNetwork: true\n  hostPID: true\n  containers:\n  - name: a\n    image: i\n    ports: [{containerPort: 80, hostPort: 80}]\n",
        );
        let env = SandboxEnv {
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            host_resolv_conf: "nameserver 1.1.1.1\nsearch lan\n".into(),
            ..Default::default()
        };
        let s = sandbox_config(&p, 1, &env);
        let ns = s
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|sc| sc.namespace_options.as_ref())
            .expect("ns");
        assert_eq!(ns.network, NamespaceMode::Node as i32);
        assert_eq!(ns.pid, NamespaceMode::Node as i32);
        assert_eq!(ns.ipc, NamespaceMode::Pod as i32);
        assert_eq!(s.hostname, "");
        assert_eq!(s.port_mappings.len(), 1);
        let dns = s.dns_config.as_ref().expect("dns");
        assert_eq!(dns.servers, ["1.1.1.1"]);
        assert_eq!(s.labels[LABEL_POD_NAME], "p-node");
        assert_eq!(s.labels["app"], "x");
        let uid = p.metadata.uid.clone().expect("uid");
        assert_eq!(
            s.log_directory,
            format!("/var/log/pods/default_p-node_{uid}")
        );
        let env = SandboxEnv {
            cluster_dns: vec!["10.96.0.10".into()],
            cluster_domain: "cluster.local".into(),
            ..env
        };
        let p = pod("  containers:\n  - {name: a, image: i}\n");
        let dns = sandbox_config(&p, 0, &env).dns_config.expect("dns");
        assert_eq!(dns.servers, ["10.96.0.10"]);
        assert_eq!(dns.searches[0], "default.svc.cluster.local");
        assert_eq!(dns.options, ["ndots:5"]);
    }

    #[test]
    fn hash_changes_with_the_spec() {
        let a = pod("  containers:\n  - {name: a, image: 'i:1'}\n");
        let b = pod("  containers:\n  - {name: a, image: 'i:2'}\n");
        let ha = container_hash(&a.spec.as_ref().expect("s").containers[0]);
        let hb = container_hash(&b.spec.as_ref().expect("s").containers[0]);
        assert_ne!(ha, hb);
        assert_eq!(ha.len(), 16);
        // Resources change in place: not in the hash.
        let c = pod("  containers:\n  - {name: a, image: 'i:1', resources: {limits: {cpu: 1}}}\n");
        let c = &c.spec.as_ref().expect("s").containers[0];
        assert_eq!(container_hash(c), ha);
        assert_ne!(legacy_container_hash(c), ha);
    }
}
