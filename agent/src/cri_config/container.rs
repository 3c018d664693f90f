//! The `ContainerConfig` kubelet's `kuberuntime` builds for one container:
//! labels and annotations, env with `$(VAR)` expansion and field refs,
//! mounts, resources with the QoS arithmetic of [`crate::qos`], and the
//! security context. Pure.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use cri_proto::v1::{
    Capability, CdiDevice, ContainerConfig, ContainerMetadata, Device, ImageSpec, Int64Value,
    KeyValue, LinuxContainerConfig, LinuxContainerResources, LinuxContainerSecurityContext, Mount,
};
use edge_config::quantity::{parse_quantity, parse_quantity_milli};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};

use super::{
    ANN_CONTAINER_HASH, ANN_GRACE, ANN_RESTART_COUNT, ANN_TERMINATION_MESSAGE_PATH,
    LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID, NodeInfo,
    SwapControl, container_hash, labels, namespace_options, seccomp, supplemental_groups,
    supplemental_groups_policy,
};

use crate::qos::{
    CPU_PERIOD_US, Qos, all_containers, effective_limit, milli_cpu_to_quota, milli_cpu_to_shares,
    oom_score_adj, quantity,
};

/// kubelet's default masked and read-only paths for unprivileged containers.
const MASKED_PATHS: [&str; 11] = [
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

const READONLY_PATHS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Everything about the running pod that a container config depends on.
#[derive(Debug, Clone)]
pub struct ContainerEnv<'a> {
    /// What the container's device plugins' Allocate answered.
    pub devices: &'a crate::devicemanager::pod_devices::ContainerDevices,
    pub node: &'a NodeInfo,
    pub pod_ip: &'a str,
    /// Volume name → host path, prepared by the agent.
    pub volumes: &'a BTreeMap<String, PathBuf>,
    /// The pod's managed /etc/hosts ([`super::hosts`]), when it has one.
    pub etc_hosts: Option<&'a std::path::Path>,
    pub qos: Qos,
    /// What the container's env takes from configMaps and secrets
    /// (resolved by the agent; empty for a static pod).
    pub objects: &'a crate::volumes::projection::ObjectEnv,
    /// `seccompDefault`: no profile means RuntimeDefault, not Unconfined.
    pub seccomp_default: bool,
    /// The pod's own user namespace (`hostUsers: false`), the sandbox's.
    pub userns: Option<&'a cri_proto::v1::UserNamespace>,
    /// Image volumes: volume name → the image ref PullImage answered
    /// (kubelet's ImageVolume: the runtime mounts the image).
    pub image_volumes: &'a BTreeMap<String, String>,
}

/// Expands `$(VAR)` as kubelet does (`$$` escapes; unknown stays as is).
pub fn expand(s: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(a) = after.strip_prefix('$') {
            out.push('$');
            rest = a;
        } else if let Some(a) = after.strip_prefix('(')
            && let Some(end) = a.find(')')
        {
            let name = &a[..end];
            match vars.get(name) {
                Some(v) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &a[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Why a container's config cannot be built: kubelet's
/// `CreateContainerConfigError`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("unsupported fieldRef {0:?}")]
    FieldRef(String),
    #[error("bad resource {0:?}")]
    Resource(String),
    #[error("bad divisor {0:?}")]
    Divisor(Option<String>),
    #[error("env {env}: no container {container:?}")]
    NoContainer { env: String, container: String },
    #[error("env {0}: unsupported valueFrom")]
    ValueFrom(String),
    #[error("volume {0:?} is not prepared")]
    VolumeNotPrepared(String),
    #[error("volume {0:?}: subPath in an image volume is not supported yet")]
    ImageSubPath(String),
    #[error("the pod has no spec")]
    NoSpec,
    #[error("resourceFieldRef: no container {0:?}")]
    NoResourceContainer(String),
}

fn field_ref(pod: &Pod, path: &str, env: &ContainerEnv<'_>) -> Result<String, ConfigError> {
    let lookup = |map: &Option<BTreeMap<String, String>>, key: &str| {
        map.as_ref()
            .and_then(|m| m.get(key).cloned())
            .unwrap_or_default()
    };
    let key_of = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_suffix("']"))
            .map(String::from)
    };
    let spec = pod.spec.as_ref();
    Ok(match path {
        "metadata.name" => pod.metadata.name.clone().unwrap_or_default(),
        "metadata.namespace" => pod.metadata.namespace.clone().unwrap_or_default(),
        "metadata.uid" => pod.metadata.uid.clone().unwrap_or_default(),
        "spec.nodeName" => env.node.name.clone(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.podIPs" => env.pod_ip.to_string(),
        "status.hostIP" | "status.hostIPs" => env.node.host_ip.clone(),
        p => {
            if let Some(k) = key_of("metadata.labels['") {
                lookup(&pod.metadata.labels, &k)
            } else if let Some(k) = key_of("metadata.annotations['") {
                lookup(&pod.metadata.annotations, &k)
            } else {
                return Err(ConfigError::FieldRef(p.to_string()));
            }
        }
    })
}

/// A container's resource value for a downwardAPI volume item
/// (`resourceFieldRef` with its `containerName`).
pub fn container_resource(
    pod: &Pod,
    container: &str,
    resource: &str,
    divisor: Option<&str>,
    node: &NodeInfo,
) -> Result<String, ConfigError> {
    let spec = pod.spec.as_ref().ok_or(ConfigError::NoSpec)?;
    let c = all_containers(spec)
        .find(|c| c.name == container)
        .ok_or_else(|| ConfigError::NoResourceContainer(container.to_string()))?;
    resource_field_ref(spec, c, resource, divisor, node)
}

fn resource_field_ref(
    spec: &PodSpec,
    c: &Container,
    resource: &str,
    divisor: Option<&str>,
    node: &NodeInfo,
) -> Result<String, ConfigError> {
    let (kind, res) = resource
        .split_once('.')
        .ok_or_else(|| ConfigError::Resource(resource.to_string()))?;
    let cpu = res == "cpu";
    // A limit the container does not set: the pod's (`spec.resources`),
    // else the node's (kubelet's `containerResourceRuntimeValue`).
    let value = match (kind, res) {
        ("limits", "cpu" | "memory") => effective_limit(spec, c, res).unwrap_or(if cpu {
            node.cpu_milli
        } else {
            node.memory_bytes
        }),
        _ => quantity(c, kind, res).unwrap_or(0),
    };
    let div = match divisor {
        Some(d) if cpu => parse_quantity_milli(d),
        Some(d) => parse_quantity(d),
        None if cpu => Some(1000),
        None => Some(1),
    }
    .filter(|d| *d > 0)
    .ok_or_else(|| ConfigError::Divisor(divisor.map(String::from)))?;
    Ok(value.div_ceil(div).to_string())
}

/// kubelet's `generateContainerConfig`. An error is a
/// `CreateContainerConfigError`.
/// A container's CPU and memory for the runtime, at create and at an
/// in-place resize (kubelet's `generateLinuxContainerResources`): limits
/// its own or else the pod's (`spec.resources`); shares from its CPU
/// request, or from that limit when it has no request at all (kubelet's
/// `calculateLinuxResources`).
pub fn linux_resources(
    spec: &PodSpec,
    c: &Container,
    qos: Qos,
    node: &NodeInfo,
) -> LinuxContainerResources {
    let cpu_limit = effective_limit(spec, c, "cpu");
    let shares = match quantity(c, "requests", "cpu") {
        Some(r) => milli_cpu_to_shares(r),
        None => milli_cpu_to_shares(cpu_limit.unwrap_or(0)),
    };
    let mut resources = LinuxContainerResources {
        cpu_period: CPU_PERIOD_US,
        cpu_shares: i64::try_from(shares).unwrap_or(2),
        oom_score_adj: oom_score_adj(spec, qos, c, node.memory_bytes),
        ..Default::default()
    };
    if let Some(l) = cpu_limit {
        resources.cpu_quota = milli_cpu_to_quota(l);
    }
    if let Some(m) = effective_limit(spec, c, "memory") {
        resources.memory_limit_in_bytes = i64::try_from(m).unwrap_or(i64::MAX);
    }
    // No swap for containers (kubelet's NoSwap, its default).
    match node.swap {
        SwapControl::V1 => resources.memory_swap_limit_in_bytes = resources.memory_limit_in_bytes,
        SwapControl::V2 => {
            resources
                .unified
                .insert("memory.swap.max".into(), "0".into());
        }
        SwapControl::Unavailable => {}
    }
    resources
}

pub fn container_config(
    pod: &Pod,
    c: &Container,
    restart_count: u32,
    image_ref: &str,
    env: &ContainerEnv<'_>,
) -> Result<ContainerConfig, ConfigError> {
    let (name, ns, uid) = labels(pod);
    let default_spec = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&default_spec);
    // Environment, in order; later entries may refer to earlier ones.
    let mut vars: HashMap<String, String> = HashMap::new();
    let mut envs: Vec<KeyValue> = Vec::new();
    // envFrom first; an `env` entry of the same name replaces it.
    for (k, v) in &env.objects.from {
        vars.insert(k.clone(), v.clone());
        envs.push(KeyValue {
            key: k.clone(),
            value: v.clone(),
        });
    }
    for e in c.env.iter().flatten() {
        let value = match &e.value_from {
            Some(vf) if vf.config_map_key_ref.is_some() || vf.secret_key_ref.is_some() => {
                match env.objects.refs.get(&e.name) {
                    Some(v) => v.clone(),
                    // An optional reference that found nothing: no variable.
                    None => continue,
                }
            }
            None => expand(e.value.as_deref().unwrap_or(""), &vars),
            Some(vf) => match (&vf.field_ref, &vf.resource_field_ref) {
                (Some(f), _) => field_ref(pod, &f.field_path, env)?,
                (None, Some(r)) => {
                    let target = match r.container_name.as_deref() {
                        Some(n) if !n.is_empty() => all_containers(spec)
                            .find(|x| x.name == n)
                            .ok_or_else(|| ConfigError::NoContainer {
                                env: e.name.clone(),
                                container: n.to_string(),
                            })?,
                        _ => c,
                    };
                    resource_field_ref(
                        spec,
                        target,
                        &r.resource,
                        r.divisor.as_ref().map(|d| d.0.as_str()),
                        env.node,
                    )?
                }
                _ => return Err(ConfigError::ValueFrom(e.name.clone())),
            },
        };
        vars.insert(e.name.clone(), value.clone());
        match envs.iter_mut().find(|kv| kv.key == e.name) {
            Some(kv) => kv.value = value,
            None => envs.push(KeyValue {
                key: e.name.clone(),
                value,
            }),
        }
    }
    // The device plugins' env first, as kubelet's run options carry it;
    // the container's own variables win.
    let from_devices = env
        .devices
        .envs
        .iter()
        .filter(|(k, _)| !envs.iter().any(|kv| &kv.key == *k))
        .map(|(k, v)| KeyValue {
            key: k.clone(),
            value: v.clone(),
        })
        .collect::<Vec<_>>();
    envs.splice(0..0, from_devices);
    let command = c
        .command
        .iter()
        .flatten()
        .map(|s| expand(s, &vars))
        .collect();
    let args = c.args.iter().flatten().map(|s| expand(s, &vars)).collect();
    // Device plugins' mounts, then the volumes (kubelet's order).
    let mut mounts: Vec<Mount> = env
        .devices
        .mounts
        .iter()
        .map(|m| Mount {
            container_path: m.container_path.clone(),
            host_path: m.host_path.clone(),
            readonly: m.read_only,
            ..Default::default()
        })
        .collect();
    for m in c.volume_mounts.iter().flatten() {
        if let Some(image) = env.image_volumes.get(&m.name) {
            if m.sub_path.as_deref().is_some_and(|s| !s.is_empty()) {
                return Err(ConfigError::ImageSubPath(m.name.clone()));
            }
            mounts.push(Mount {
                container_path: m.mount_path.clone(),
                readonly: true,
                image: Some(ImageSpec {
                    image: image.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            });
            continue;
        }
        let base = env
            .volumes
            .get(&m.name)
            .ok_or_else(|| ConfigError::VolumeNotPrepared(m.name.clone()))?;
        let host = match m.sub_path.as_deref() {
            Some(sp) if !sp.is_empty() => base.join(expand(sp, &vars)),
            _ => base.clone(),
        };
        mounts.push(Mount {
            container_path: m.mount_path.clone(),
            host_path: host.to_string_lossy().into_owned(),
            readonly: m.read_only.unwrap_or(false),
            ..Default::default()
        });
    }
    if let Some(h) = env.etc_hosts
        && super::hosts::mounted(c, env.pod_ip)
    {
        mounts.push(Mount {
            container_path: super::hosts::ETC_HOSTS.into(),
            host_path: h.to_string_lossy().into_owned(),
            readonly: false,
            ..Default::default()
        });
    }
    let mut labels = HashMap::from([
        (LABEL_POD_NAME.to_string(), name),
        (LABEL_POD_NAMESPACE.to_string(), ns),
        (LABEL_POD_UID.to_string(), uid),
        (LABEL_CONTAINER_NAME.to_string(), c.name.clone()),
    ]);
    labels.retain(|_, v| !v.is_empty());
    let mut annotations = HashMap::from([
        (ANN_CONTAINER_HASH.to_string(), container_hash(c)),
        (ANN_RESTART_COUNT.to_string(), restart_count.to_string()),
        (
            ANN_GRACE.to_string(),
            spec.termination_grace_period_seconds
                .unwrap_or(30)
                .to_string(),
        ),
        (
            ANN_TERMINATION_MESSAGE_PATH.to_string(),
            c.termination_message_path.clone().unwrap_or_default(),
        ),
    ]);
    for (k, v) in &env.devices.annotations {
        annotations.entry(k.clone()).or_insert_with(|| v.clone());
    }
    // Security context: the container's fields override the pod's.
    let psc = spec.security_context.as_ref();
    let csc = c.security_context.as_ref();
    let unmasked = csc.and_then(|s| s.proc_mount.as_deref()) == Some("Unmasked");
    let privileged = csc.and_then(|s| s.privileged).unwrap_or(false);
    let run_as_user = csc
        .and_then(|s| s.run_as_user)
        .or_else(|| psc.and_then(|s| s.run_as_user));
    let run_as_group = csc
        .and_then(|s| s.run_as_group)
        .or_else(|| psc.and_then(|s| s.run_as_group));
    let seccomp = seccomp(
        csc.and_then(|s| s.seccomp_profile.as_ref())
            .or_else(|| psc.and_then(|s| s.seccomp_profile.as_ref())),
        env.seccomp_default,
    );
    let caps = csc.and_then(|s| s.capabilities.as_ref());
    let no_spec = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&no_spec);
    let resources = linux_resources(spec, c, env.qos, env.node);
    Ok(ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: c.name.clone(),
            attempt: restart_count,
        }),
        image: Some(ImageSpec {
            image: image_ref.to_string(),
            user_specified_image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command,
        args,
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs,
        mounts,
        labels,
        annotations,
        devices: env
            .devices
            .devices
            .iter()
            .map(|d| Device {
                container_path: d.container_path.clone(),
                host_path: d.host_path.clone(),
                permissions: d.permissions.clone(),
            })
            .collect(),
        cdi_devices: env
            .devices
            .cdi_devices
            .iter()
            .map(|name| CdiDevice { name: name.clone() })
            .collect(),
        log_path: format!("{}/{restart_count}.log", c.name),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(LinuxContainerConfig {
            resources: Some(resources),
            security_context: Some(LinuxContainerSecurityContext {
                capabilities: caps.map(|k| Capability {
                    add_capabilities: k.add.clone().unwrap_or_default(),
                    drop_capabilities: k.drop.clone().unwrap_or_default(),
                    ..Default::default()
                }),
                privileged,
                namespace_options: Some(namespace_options(spec, env.userns)),
                run_as_user: run_as_user.map(|value| Int64Value { value }),
                run_as_group: run_as_group.map(|value| Int64Value { value }),
                readonly_rootfs: csc
                    .and_then(|s| s.read_only_root_filesystem)
                    .unwrap_or(false),
                supplemental_groups: supplemental_groups(spec),
                supplemental_groups_policy: supplemental_groups_policy(spec),
                no_new_privs: csc.and_then(|s| s.allow_privilege_escalation) == Some(false),
                // kubelet's convertToRuntimeMaskedPaths/ReadonlyPaths:
                // none for privileged or `procMount: Unmasked`.
                masked_paths: if privileged || unmasked {
                    Vec::new()
                } else {
                    MASKED_PATHS.iter().map(|s| s.to_string()).collect()
                },
                readonly_paths: if privileged || unmasked {
                    Vec::new()
                } else {
                    READONLY_PATHS.iter().map(|s| s.to_string()).collect()
                },
                seccomp,
                ..Default::default()
            }),
        }),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::manifest::test_pod as pod;
    use crate::cri_config::tests::node;

    #[test]
    fn env_from_config_maps_and_secrets_comes_first_and_env_wins() {
        // An API server's pod (static pods may not refer to configMaps).
        let p = crate::config::manifest::api_pod(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{
                "name": "c", "image": "busybox:1", "args": ["$(GREETING) $(PASSWORD)"],
                "envFrom": [{"configMapRef": {"name": "cm"}}],
                "env": [
                    {"name": "GREETING", "value": "env wins"},
                    {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}},
                    {"name": "MAYBE", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "nope", "optional": true}}},
                ],
            }]},
        }))
        .expect("valid");
        let objects = crate::volumes::projection::ObjectEnv {
            from: BTreeMap::from([
                ("GREETING".to_string(), "from the configmap".to_string()),
                ("LEVEL".to_string(), "debug".to_string()),
            ]),
            refs: BTreeMap::from([("PASSWORD".to_string(), "s3cr3t".to_string())]),
        };
        let n = node();
        let env = ContainerEnv {
            devices: &crate::devicemanager::pod_devices::ContainerDevices::default(),
            node: &n,
            pod_ip: "10.1.0.2",
            etc_hosts: None,
            volumes: &BTreeMap::new(),
            qos: Qos::BestEffort,
            objects: &objects,
            seccomp_default: false,
            userns: None,
            image_volumes: &BTreeMap::new(),
        };
        let spec = p.spec.as_ref().expect("spec");
        let cfg = container_config(&p, &spec.containers[0], 0, "sha256:abc", &env).expect("ok");
        let envs: Vec<(&str, &str)> = cfg
            .envs
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(
            envs,
            [
                ("GREETING", "env wins"),
                ("LEVEL", "debug"),
                ("PASSWORD", "s3cr3t")
            ]
        );
        assert_eq!(cfg.args, ["env wins s3cr3t"]);
    }

    /// `f` with a container environment of `qos` and `volumes` on node
    /// 10.1.0.2, nothing else.
    fn with_env<R>(
        qos: Qos,
        volumes: &BTreeMap<String, PathBuf>,
        f: impl FnOnce(&ContainerEnv<'_>) -> R,
    ) -> R {
        let n = node();
        f(&ContainerEnv {
            devices: &crate::devicemanager::pod_devices::ContainerDevices::default(),
            node: &n,
            pod_ip: "10.1.0.2",
            etc_hosts: None,
            volumes,
            qos,
            objects: &Default::default(),
            seccomp_default: true,
            userns: None,
            image_volumes: &BTreeMap::new(),
        })
    }

    #[test]
    fn unmasked_proc_sends_no_masked_or_read_only_paths() {
        let paths = |proc_mount: &str| {
            let p = pod(&format!(
                "  hostUsers: false\n  containers:\n  - name: c\n    image: busybox:1\n    \
                 securityContext: {{procMount: {proc_mount}}}\n"
            ));
            let spec = p.spec.as_ref().expect("spec");
            let cfg = with_env(Qos::BestEffort, &BTreeMap::new(), |env| {
                container_config(&p, &spec.containers[0], 0, "sha256:abc", env)
            })
            .expect("ok");
            let sc = cfg.linux.and_then(|l| l.security_context).expect("sc");
            (sc.masked_paths.len(), sc.readonly_paths.len())
        };
        assert_eq!(paths("Unmasked"), (0, 0));
        assert_eq!(paths("Default"), (MASKED_PATHS.len(), READONLY_PATHS.len()));
    }

    #[test]
    fn container_config_as_kubelet_builds_it() {
        let p = pod(concat!(
            "  volumes:\n  - {name: data, emptyDir: {}}\n",
            "  containers:\n  - name: c\n    image: busybox:1\n",
            "    command: [sh, -c]\n    args: ['echo $(GREETING) $(NODE) $$(x) $(NOPE)']\n",
            "    env:\n    - {name: NAME, value: world}\n    - {name: GREETING, value: 'hi $(NAME)'}\n",
            "    - name: NODE\n      valueFrom: {fieldRef: {fieldPath: spec.nodeName}}\n",
            "    - name: POD\n      valueFrom: {fieldRef: {fieldPath: metadata.name}}\n",
            "    - name: APP\n      valueFrom: {fieldRef: {fieldPath: \"metadata.labels['app']\"}}\n",
            "    - name: MEM\n      valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}\n",
            "    - name: CPU\n      valueFrom: {resourceFieldRef: {resource: limits.cpu}}\n",
            "    resources: {limits: {memory: 64Mi, cpu: 1500m}}\n",
            "    volumeMounts:\n    - {name: data, mountPath: /data, subPath: sub, readOnly: true}\n",
        ));
        let volumes = BTreeMap::from([("data".to_string(), PathBuf::from("/v/data"))]);
        let spec = p.spec.as_ref().expect("spec");
        let cfg = with_env(Qos::Guaranteed, &volumes, |env| {
            container_config(&p, &spec.containers[0], 3, "sha256:abc", env)
        })
        .expect("ok");
        assert_eq!(cfg.command, ["sh", "-c"]);
        assert_eq!(cfg.args, ["echo hi world node $(x) $(NOPE)"]);
        let env_of = |k: &str| {
            cfg.envs
                .iter()
                .find(|e| e.key == k)
                .map(|e| e.value.clone())
        };
        assert_eq!(env_of("POD").as_deref(), Some("p-node"));
        assert_eq!(env_of("APP").as_deref(), Some("x"));
        assert_eq!(env_of("MEM").as_deref(), Some("64"));
        assert_eq!(env_of("CPU").as_deref(), Some("2"));
        assert_eq!(cfg.mounts[0].host_path, "/v/data/sub");
        assert!(cfg.mounts[0].readonly);
        assert_eq!(cfg.log_path, "c/3.log");
        assert_eq!(cfg.metadata.as_ref().map(|m| m.attempt), Some(3));
        assert_eq!(cfg.labels[LABEL_CONTAINER_NAME], "c");
        assert_eq!(cfg.annotations[ANN_RESTART_COUNT], "3");
        let r = cfg
            .linux
            .as_ref()
            .and_then(|l| l.resources.as_ref())
            .expect("resources");
        assert_eq!(
            (r.cpu_quota, r.cpu_shares, r.memory_limit_in_bytes),
            (150_000, 1536, 64 << 20)
        );
        assert_eq!(r.oom_score_adj, -997);
    }
}
