//! CRI `ContainerConfig` + image config + sandbox → OCI runtime spec, as
//! containerd's CRI plugin builds it with runc's defaults. Pure: everything it
//! needs from the host (resolved devices, the image's /etc/passwd, the current
//! oom_score_adj) is passed in, so it is unit-tested with tables.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cri_proto::v1::{
    ContainerConfig, LinuxContainerResources, MountPropagation, NamespaceMode,
    SupplementalGroupsPolicy,
};
use oci_spec::image::ImageConfiguration;
use oci_spec::runtime::Spec;
use serde_json::{Value, json};

use crate::error::Error;
use crate::host::users::{self, User};

pub(crate) mod caps;
pub mod cdi;
pub mod userns;

use caps::cap_name;
pub use caps::capabilities;

/// runc's masked paths.
pub const MASKED_PATHS: [&str; 11] = [
    "/proc/acpi",
    "/proc/asound",
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

/// runc's read-only paths.
pub const READONLY_PATHS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What a container takes from its sandbox.
#[derive(Debug, Clone, Default)]
pub struct SandboxView {
    pub hostname: String,
    /// Pinned namespaces; `None` means the host's.
    pub netns: Option<PathBuf>,
    pub ipcns: Option<PathBuf>,
    pub utsns: Option<PathBuf>,
    /// The pod's shared pid namespace (pid mode POD), when it has one.
    pub pidns: Option<PathBuf>,
    /// The target container's pid namespace (pid mode TARGET).
    pub target_pidns: Option<PathBuf>,
    /// The pod's /dev/shm (a tmpfs), or the host's.
    pub shm: PathBuf,
    pub hosts: PathBuf,
    pub resolv_conf: PathBuf,
    pub hostname_file: PathBuf,
    pub cgroup_parent: String,
    /// The pod's own user namespace (pinned) and its ranges, when it has
    /// one.
    pub userns: Option<(PathBuf, crate::spec::userns::PodUserns)>,
}

/// A host device resolved for the spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedDevice {
    pub container_path: String,
    /// `c` or `b`.
    pub kind: char,
    pub major: i64,
    pub minor: i64,
    pub file_mode: u32,
    pub permissions: String,
}

/// Everything [`build`] needs.
#[derive(Debug)]
pub struct SpecInput<'a> {
    pub id: &'a str,
    pub config: &'a ContainerConfig,
    pub image: &'a ImageConfiguration,
    pub sandbox: &'a SandboxView,
    pub rootfs: &'a Path,
    /// The image's /etc/passwd and /etc/group, when present.
    pub passwd: Option<&'a str>,
    pub group: Option<&'a str>,
    pub devices: &'a [ResolvedDevice],
    /// The runtime's own oom_score_adj: the kernel will not let us go lower.
    pub min_oom_score_adj: i64,
    /// The shim's own capability bounding set (what privileged gets).
    pub cap_bounding: u64,
    /// The file a Localhost seccomp profile names, already read and parsed.
    pub localhost_seccomp: Option<Value>,
    /// Whether the host has the hugetlb cgroup controller.
    pub hugetlb: bool,
    /// The CDI devices' edits, resolved and their nodes filled from the
    /// host (`runtime::host_inputs::resolve_cdi`); applied last, as
    /// containerd's `WithCDI`.
    pub cdi: Option<&'a cdi::ContainerEdits>,
}

fn invalid(field: &str, what: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("{field}: {what}"))
}

/// The process arguments CRI defines: command replaces the entrypoint, args
/// replace Cmd; image Cmd is used only when neither command nor args is set.
pub fn process_args(config: &ContainerConfig, image: &ImageConfiguration) -> Vec<String> {
    let ic = image.config().as_ref();
    let entrypoint = ic.and_then(|c| c.entrypoint().clone()).unwrap_or_default();
    let image_cmd = ic.and_then(|c| c.cmd().clone()).unwrap_or_default();
    let (entry, cmd) = if !config.command.is_empty() {
        (config.command.clone(), config.args.clone())
    } else if !config.args.is_empty() {
        (entrypoint, config.args.clone())
    } else {
        (entrypoint, image_cmd)
    };
    entry.into_iter().chain(cmd).collect()
}

/// Image env, then CRI env overriding by name, plus PATH and HOSTNAME defaults.
pub fn process_env(
    config: &ContainerConfig,
    image: &ImageConfiguration,
    hostname: &str,
) -> Vec<String> {
    let mut env: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: &str| match env.iter_mut().find(|(ek, _)| ek == k) {
        Some(e) => e.1 = v.to_string(),
        None => env.push((k.to_string(), v.to_string())),
    };
    if !hostname.is_empty() {
        set("HOSTNAME", hostname);
    }
    for kv in image
        .config()
        .as_ref()
        .and_then(|c| c.env().clone())
        .unwrap_or_default()
    {
        let (k, v) = kv.split_once('=').unwrap_or((&kv, ""));
        set(k, v);
    }
    // A terminal gets TERM=xterm, as containerd's WithTTY; the pod's own
    // env may say otherwise.
    if config.tty {
        set("TERM", "xterm");
    }
    for kv in &config.envs {
        set(&kv.key, &kv.value);
    }
    if !env.iter().any(|(k, _)| k == "PATH") {
        let (k, v) = DEFAULT_PATH.split_once('=').unwrap_or(("PATH", ""));
        env.insert(0, (k.to_string(), v.to_string()));
    }
    env.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// Builds the OCI runtime spec.
pub fn build(input: &SpecInput<'_>) -> Result<Spec, Error> {
    let c = input.config;
    let linux = c.linux.clone().unwrap_or_default();
    let sc = linux.security_context.clone().unwrap_or_default();
    let res = linux.resources.clone().unwrap_or_default();
    let sb = input.sandbox;

    let args = process_args(c, input.image);
    if args.is_empty() {
        return Err(invalid(
            "command",
            "no command given and the image has no Entrypoint or Cmd",
        ));
    }
    let env = process_env(c, input.image, &sb.hostname);
    let cwd = if !c.working_dir.is_empty() {
        c.working_dir.clone()
    } else {
        input
            .image
            .config()
            .as_ref()
            .and_then(|ic| ic.working_dir().clone())
            .filter(|w| !w.is_empty())
            .unwrap_or_else(|| "/".into())
    };
    if !cwd.starts_with('/') {
        return Err(invalid("working_dir", format!("{cwd:?} is not absolute")));
    }

    let user = resolve_user(input, &sc)?;
    let caps = capabilities(
        &sc.capabilities
            .as_ref()
            .map(|k| k.add_capabilities.clone())
            .unwrap_or_default(),
        &sc.capabilities
            .as_ref()
            .map(|k| k.drop_capabilities.clone())
            .unwrap_or_default(),
        sc.privileged,
        input.cap_bounding,
    )?;
    let ambient: Vec<String> = sc
        .capabilities
        .as_ref()
        .map(|k| {
            k.add_ambient_capabilities
                .iter()
                .map(|a| cap_name(a))
                .collect()
        })
        .unwrap_or_default();

    // No namespace options at all: share the pod's pid namespace when it
    // has one (the proto default, POD), else the container gets its own.
    let pid_mode = match &sc.namespace_options {
        Some(ns) => NamespaceMode::try_from(ns.pid).unwrap_or(NamespaceMode::Container),
        None if sb.pidns.is_some() => NamespaceMode::Pod,
        None => NamespaceMode::Container,
    };
    let mut namespaces = vec![json!({"type": "mount"})];
    match pid_mode {
        NamespaceMode::Node => {}
        NamespaceMode::Container => namespaces.push(json!({"type": "pid"})),
        NamespaceMode::Pod => match &sb.pidns {
            Some(p) => namespaces.push(json!({"type": "pid", "path": p})),
            None => {
                return Err(Error::FailedPrecondition(
                    "linux.security_context.namespace_options.pid: POD, but the sandbox was created without a shared pid namespace".into(),
                ));
            }
        },
        NamespaceMode::Target => match &sb.target_pidns {
            Some(p) => namespaces.push(json!({"type": "pid", "path": p})),
            None => {
                return Err(invalid(
                    "linux.security_context.namespace_options.target_id",
                    "no running container with that id in this sandbox",
                ));
            }
        },
    }
    for (kind, path) in [
        ("network", &sb.netns),
        ("ipc", &sb.ipcns),
        ("uts", &sb.utsns),
    ] {
        if let Some(p) = path {
            namespaces.push(json!({"type": kind, "path": p}));
        }
    }
    let (uid_mappings, gid_mappings) = match &sb.userns {
        Some((path, maps)) => {
            if sc.privileged {
                return Err(invalid(
                    "linux.security_context.privileged",
                    "a privileged container in a pod with a user namespace of its own",
                ));
            }
            // First: the others are joined with its privileges.
            namespaces.insert(0, json!({"type": "user", "path": path}));
            let range = |m: &crate::spec::userns::IdMap| json!([{"containerID": m.container, "hostID": m.host, "size": m.len}]);
            (range(&maps.uids), range(&maps.gids))
        }
        None => (json!([]), json!([])),
    };

    let mut mounts = default_mounts(sc.privileged, sb);
    let overridden = |dest: &str| c.mounts.iter().any(|m| m.container_path == dest);
    for (dest, src) in [
        ("/etc/hosts", &sb.hosts),
        ("/etc/resolv.conf", &sb.resolv_conf),
        ("/etc/hostname", &sb.hostname_file),
    ] {
        if !overridden(dest) {
            mounts.push(json!({"destination": dest, "type": "bind", "source": src, "options": ["rbind", "rprivate", "rw"]}));
        }
    }
    check_mounts(c)?;
    mounts_map_as_the_pod(c, sb.userns.as_ref().map(|(_, maps)| maps))?;
    for m in &c.mounts {
        let propagation = match MountPropagation::try_from(m.propagation)
            .unwrap_or(MountPropagation::PropagationPrivate)
        {
            MountPropagation::PropagationPrivate => "rprivate",
            MountPropagation::PropagationHostToContainer => "rslave",
            MountPropagation::PropagationBidirectional => "rshared",
        };
        let mode = if m.readonly { "ro" } else { "rw" };
        let mut options = vec!["rbind", propagation, mode];
        if m.recursive_read_only {
            options.push("rro");
        }
        mounts.retain(|x| x["destination"] != json!(m.container_path));
        mounts.push(json!({"destination": m.container_path, "type": "bind", "source": m.host_path, "options": options}));
    }

    let mut device_rules = vec![json!({"allow": false, "access": "rwm"})];
    for (kind, major, minor) in [
        ("c", Some(1), Some(3)),
        ("c", Some(1), Some(5)),
        ("c", Some(1), Some(7)),
        ("c", Some(1), Some(8)),
        ("c", Some(1), Some(9)),
        ("c", Some(5), Some(0)),
        ("c", Some(5), Some(2)),
        ("c", Some(136), None),
    ] {
        device_rules.push(
            json!({"allow": true, "type": kind, "major": major, "minor": minor, "access": "rwm"}),
        );
    }
    let mut devices = Vec::new();
    for d in input.devices {
        devices.push(json!({"path": d.container_path, "type": d.kind.to_string(), "major": d.major, "minor": d.minor, "fileMode": d.file_mode, "uid": 0, "gid": 0}));
        device_rules.push(json!({"allow": true, "type": d.kind.to_string(), "major": d.major, "minor": d.minor, "access": d.permissions}));
    }
    if sc.privileged {
        device_rules = vec![json!({"allow": true, "access": "rwm"})];
    }

    let mut resources = resources_json(&res, input.hugetlb, input.id);
    resources["devices"] = json!(device_rules);

    let (masked, readonly): (Vec<String>, Vec<String>) = if sc.privileged {
        (vec![], vec![])
    } else if sb.userns.is_some() {
        // As containerd reads them: kubelet sends none for `procMount:
        // Unmasked`, which it allows only with a pod's own user namespace
        // (whose root the kernel keeps from the host's /proc anyway).
        // Elsewhere none sent means runc's defaults (crictl sends none).
        (sc.masked_paths.clone(), sc.readonly_paths.clone())
    } else {
        (
            if sc.masked_paths.is_empty() {
                MASKED_PATHS.iter().map(|s| s.to_string()).collect()
            } else {
                sc.masked_paths.clone()
            },
            if sc.readonly_paths.is_empty() {
                READONLY_PATHS.iter().map(|s| s.to_string()).collect()
            } else {
                sc.readonly_paths.clone()
            },
        )
    };
    let seccomp = seccomp_section(&sc, &caps, input.localhost_seccomp.as_ref())?;
    let oom = res
        .oom_score_adj
        .clamp(-1000, 1000)
        .max(input.min_oom_score_adj);
    let cgroup_parent = if sb.cgroup_parent.is_empty() {
        "/picolet"
    } else {
        sb.cgroup_parent.trim_end_matches('/')
    };

    let mut spec = json!({
        "ociVersion": "1.0.2",
        "process": {
            // A tty container gets a pty from its init (in the
            // container's devpts, its /dev/console), handed to the monitor.
            "terminal": c.tty,
            "user": {"uid": user.uid, "gid": user.gid, "additionalGids": user.additional_gids},
            "args": args,
            "env": env,
            "cwd": cwd,
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps, "ambient": ambient},
            "noNewPrivileges": sc.no_new_privs,
            "oomScoreAdj": oom,
        },
        "root": {"path": input.rootfs, "readonly": sc.readonly_rootfs},
        "mounts": mounts,
        "annotations": c.annotations,
        "linux": {
            "namespaces": namespaces,
            "uidMappings": uid_mappings,
            "gidMappings": gid_mappings,
            "cgroupsPath": format!("{cgroup_parent}/{}", input.id),
            "resources": resources,
            "devices": devices,
            "maskedPaths": masked,
            "readonlyPaths": readonly,
            "rootfsPropagation": rootfs_propagation(c),
            "seccomp": seccomp,
        },
    });
    if let Some(edits) = input.cdi {
        cdi::apply(&mut spec, edits);
    }
    serde_json::from_value(spec).map_err(Error::json("generated spec does not parse"))
}

/// The OCI `linux.resources` for CRI resources, without devices: memory,
/// CPU, cpuset, hugepages (only with a `hugetlb` controller) and unified.
fn resources_json(res: &LinuxContainerResources, hugetlb: bool, id: &str) -> Value {
    let mut resources = json!({});
    let mut memory = serde_json::Map::new();
    if res.memory_limit_in_bytes > 0 {
        memory.insert("limit".into(), json!(res.memory_limit_in_bytes));
    }
    if res.memory_swap_limit_in_bytes > 0 {
        memory.insert("swap".into(), json!(res.memory_swap_limit_in_bytes));
    }
    if !memory.is_empty() {
        resources["memory"] = Value::Object(memory);
    }
    let mut cpu = serde_json::Map::new();
    if res.cpu_shares > 0 {
        cpu.insert("shares".into(), json!(res.cpu_shares));
    }
    if res.cpu_quota != 0 {
        cpu.insert("quota".into(), json!(res.cpu_quota));
    }
    if res.cpu_period > 0 {
        cpu.insert("period".into(), json!(res.cpu_period));
    }
    if !res.cpuset_cpus.is_empty() {
        cpu.insert("cpus".into(), json!(res.cpuset_cpus));
    }
    if !res.cpuset_mems.is_empty() {
        cpu.insert("mems".into(), json!(res.cpuset_mems));
    }
    if !cpu.is_empty() {
        resources["cpu"] = Value::Object(cpu);
    }
    // The kubelet sends a limit for every page size the kernel offers. Where
    // the hugetlb controller is missing, drop them as containerd does
    // (libcontainer refuses the container: "cgroup hugetlb is required").
    if !res.hugepage_limits.is_empty() {
        if hugetlb {
            resources["hugepageLimits"] = res
                .hugepage_limits
                .iter()
                .map(|h| json!({"pageSize": h.page_size, "limit": h.limit}))
                .collect();
        } else {
            tracing::debug!(
                container = id,
                "no hugetlb cgroup controller: hugepage limits dropped"
            );
        }
    }
    if !res.unified.is_empty() {
        resources["unified"] = json!(res.unified.iter().collect::<BTreeMap<_, _>>());
    }
    resources
}

/// CRI resources as OCI `LinuxResources` for a live update (written with
/// `cgroup::container`, as at create).
pub fn linux_resources(
    res: &LinuxContainerResources,
    hugetlb: bool,
    id: &str,
) -> Result<oci_spec::runtime::LinuxResources, Error> {
    serde_json::from_value(resources_json(res, hugetlb, id))
        .map_err(|e| invalid("linux.resources", e))
}

/// The propagation of the container's mount namespace, as containerd sets
/// it: a bidirectional mount needs the namespace shared and one from the host
/// to the container needs it slave, or the bind mount's source loses its
/// host peer group when the namespace is made private and nothing
/// propagates. Private otherwise: host mounts made later stay out of every
/// container (and out of the mount tables libcontainer walks).
fn rootfs_propagation(c: &ContainerConfig) -> &'static str {
    let wants = |p: MountPropagation| c.mounts.iter().any(|m| m.propagation == p as i32);
    if wants(MountPropagation::PropagationBidirectional) {
        "shared"
    } else if wants(MountPropagation::PropagationHostToContainer) {
        "slave"
    } else {
        "private"
    }
}

/// The OCI seccomp section: none for Unconfined, privileged or no profile
/// (as containerd), containerd's default for RuntimeDefault, the named
/// file's profile for Localhost.
fn seccomp_section(
    sc: &cri_proto::v1::LinuxContainerSecurityContext,
    caps: &[String],
    localhost: Option<&Value>,
) -> Result<Value, Error> {
    use cri_proto::v1::security_profile::ProfileType;
    let Some(p) = &sc.seccomp else {
        return Ok(Value::Null);
    };
    if sc.privileged {
        return Ok(Value::Null);
    }
    match ProfileType::try_from(p.profile_type) {
        Ok(ProfileType::Unconfined) => Ok(Value::Null),
        Ok(ProfileType::RuntimeDefault) => Ok(crate::seccomp::runtime_default(caps)),
        Ok(ProfileType::Localhost) => localhost.cloned().ok_or_else(|| {
            invalid(
                "linux.security_context.seccomp.localhost_ref",
                "profile not loaded",
            )
        }),
        Err(_) => Err(invalid(
            "linux.security_context.seccomp.profile_type",
            p.profile_type,
        )),
    }
}

fn default_mounts(privileged: bool, sb: &SandboxView) -> Vec<Value> {
    let sys_mode = if privileged { "rw" } else { "ro" };
    vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", sys_mode]}),
        json!({"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["nosuid", "noexec", "nodev", "relatime", sys_mode]}),
        json!({"destination": "/dev/shm", "type": "bind", "source": sb.shm, "options": ["rbind", "rprivate", "rw"]}),
    ]
}

/// The CRI mounts' own fields, before anything is looked at on the host:
/// absolute paths, and what recursive read-only needs.
pub fn check_mounts(c: &ContainerConfig) -> Result<(), Error> {
    for (i, m) in c.mounts.iter().enumerate() {
        if !m.container_path.starts_with('/') {
            return Err(invalid(
                &format!("mounts[{i}].container_path"),
                format!("{:?} is not absolute", m.container_path),
            ));
        }
        if m.image.is_some() {
            // An image volume: read-only by definition, no host path.
            if !m.host_path.is_empty() {
                return Err(invalid(
                    &format!("mounts[{i}].host_path"),
                    "set with image (they exclude each other)",
                ));
            }
        } else if !m.host_path.starts_with('/') {
            return Err(invalid(
                &format!("mounts[{i}].host_path"),
                format!("{:?} is not absolute", m.host_path),
            ));
        }
        if m.recursive_read_only {
            // As containerd: read-only all the way down needs the top
            // read-only, and a private mount (mounts arriving later under
            // a shared or slave one would be writable).
            if !m.readonly {
                return Err(invalid(
                    &format!("mounts[{i}].recursive_read_only"),
                    "needs readonly too",
                ));
            }
            if m.propagation != MountPropagation::PropagationPrivate as i32 {
                return Err(invalid(
                    &format!("mounts[{i}].recursive_read_only"),
                    "needs private propagation",
                ));
            }
        }
    }
    Ok(())
}

/// A mount's own ID mappings (kubelet 1.36 sends the pod's on each) are
/// honoured as the pod's: every bind of a pod with a user namespace of
/// its own is seen through it. Other mappings, or any without one, are
/// refused rather than ignored.
fn mounts_map_as_the_pod(
    c: &ContainerConfig,
    userns: Option<&userns::PodUserns>,
) -> Result<(), Error> {
    let as_cri = |m: &userns::IdMap| {
        vec![cri_proto::v1::IdMapping {
            host_id: m.host,
            container_id: m.container,
            length: m.len,
        }]
    };
    for (i, m) in c.mounts.iter().enumerate() {
        for (field, got, pod) in [
            (
                "uid_mappings",
                &m.uid_mappings,
                userns.map(|u| as_cri(&u.uids)),
            ),
            (
                "gid_mappings",
                &m.gid_mappings,
                userns.map(|u| as_cri(&u.gids)),
            ),
        ] {
            if !got.is_empty() && pod.as_ref() != Some(got) {
                return Err(invalid(
                    &format!("mounts[{i}].{field}"),
                    "not the pod's user namespace ranges",
                ));
            }
        }
    }
    Ok(())
}

fn resolve_user(
    input: &SpecInput<'_>,
    sc: &cri_proto::v1::LinuxContainerSecurityContext,
) -> Result<User, Error> {
    // As containerd: a group alone would silently run as the image's user
    // with another group; CRI asks for it with a user only.
    if sc.run_as_group.is_some() && sc.run_as_user.is_none() && sc.run_as_username.is_empty() {
        return Err(invalid(
            "linux.security_context.run_as_group",
            "set without run_as_user or run_as_username",
        ));
    }
    let passwd = input.passwd.unwrap_or("");
    let group = input.group.unwrap_or("");
    let mut user = if !sc.run_as_username.is_empty() {
        users::lookup(&sc.run_as_username, passwd, group)
            .map_err(|e| invalid("linux.security_context.run_as_username", e))?
    } else if let Some(uid) = &sc.run_as_user {
        let uid = u32::try_from(uid.value)
            .map_err(|_| invalid("linux.security_context.run_as_user", "out of range"))?;
        users::lookup(&uid.to_string(), passwd, group)
            .map_err(|e| invalid("linux.security_context.run_as_user", e))?
    } else {
        let image_user = input
            .image
            .config()
            .as_ref()
            .and_then(|c| c.user().clone())
            .unwrap_or_default();
        users::lookup(&image_user, passwd, group).map_err(|e| invalid("image config User", e))?
    };
    if let Some(g) = &sc.run_as_group {
        user.gid = u32::try_from(g.value)
            .map_err(|_| invalid("linux.security_context.run_as_group", "out of range"))?;
    }
    let policy =
        SupplementalGroupsPolicy::try_from(sc.supplemental_groups_policy).map_err(|_| {
            invalid(
                "linux.security_context.supplemental_groups_policy",
                format!(
                    "{} is neither Merge (0) nor Strict (1)",
                    sc.supplemental_groups_policy
                ),
            )
        })?;
    // Strict: only the groups the pod names, none the image's /etc/group
    // gives the user.
    if policy == SupplementalGroupsPolicy::Strict {
        user.additional_gids.clear();
    }
    for g in &sc.supplemental_groups {
        let g = u32::try_from(*g)
            .map_err(|_| invalid("linux.security_context.supplemental_groups", "out of range"))?;
        user.additional_gids.push(g);
    }
    // As containerd 2: the primary group is a supplementary one too (else
    // a setgid program drops it and escapes a group-denying mode bits,
    // CVE-2023-25173), and the list is sorted without repeats.
    user.additional_gids.push(user.gid);
    user.additional_gids.sort_unstable();
    user.additional_gids.dedup();
    Ok(user)
}

#[cfg(test)]
mod tests;
