//! The config file: kubelet's `KubeletConfiguration`
//! (kubelet.config.k8s.io/v1beta1) as far as it applies to picolet, plus a
//! `picolet:` section. Unknown or invalid fields are errors that name the
//! file, the field path and what was expected; nothing starts with a
//! half-understood config.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod api_port;
mod devices;
mod raw;

use raw::Raw;

use crate::labels::check_node_label;
pub use crate::labels::parse_node_labels;
use crate::quantity::{parse_duration, parse_quantity, parse_quantity_milli};
pub use api_port::{Authentication, Authorization, AuthorizationMode};

/// kubelet's `configMapAndSecretChangeDetectionStrategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChangeDetection {
    /// One watch per object in use (one request an hour or less when it
    /// does not change); reads are local.
    #[default]
    Watch,
    /// Each object read again when a pod needs it and the last read is
    /// over a minute old.
    Cache,
    /// Each object read every time a pod needs it (every `syncFrequency`
    /// for volumes).
    Get,
}

pub use crate::error::{ConfigError, FieldError};

pub use crate::eviction::EVICTION_SIGNALS;

/// The validated configuration, defaults as kubelet's.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub static_pod_path: PathBuf,
    pub file_check_frequency: Duration,
    pub sync_frequency: Duration,
    pub healthz_bind_address: IpAddr,
    pub healthz_port: u16,
    /// `address`: where the API port binds. None: 0.0.0.0 in cluster
    /// mode (the API server reaches the node there), 127.0.0.1 otherwise
    /// ([`Config::api_address`]).
    pub address: Option<IpAddr>,
    /// The API port: HTTPS, every request authenticated and authorized.
    pub port: u16,
    /// `readOnlyPort` (0, the default: off): plain HTTP on `address`
    /// without authentication, the read-only endpoints only (`/pods`,
    /// `/stats/summary`, `/metrics*`, `/healthz`), as kubelet's. For a
    /// Prometheus on the device that has no client certificate.
    pub read_only_port: u16,
    /// `tlsCertFile` + `tlsPrivateKeyFile` (PEM): the API port's serving
    /// certificate. None: a self-signed one in `<dataDir>/agent/pki`.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// `serverTLSBootstrap` (default false): in cluster mode, the serving
    /// certificate comes from a `kubernetes.io/kubelet-serving` CSR (an
    /// admin approves it) and is renewed; self-signed until then.
    pub server_tls_bootstrap: bool,
    /// `authentication`: who a request on the API port is.
    pub authentication: Authentication,
    /// `authorization`: what they may do there.
    pub authorization: Authorization,
    pub max_pods: u32,
    pub cgroups_per_qos: bool,
    pub cgroup_root: String,
    pub pod_pids_limit: i64,
    pub container_log_max_size: u128,
    pub container_log_max_files: u32,
    /// How often container logs are checked for rotation (kubelet: 10s, at least 3s).
    pub container_log_monitor_interval: Duration,
    /// `evictionHard`, `evictionSoft` (+ grace periods),
    /// `evictionMinimumReclaim`, by signal.
    pub eviction: crate::eviction::Eviction,
    /// How long a pressure condition stays after its signal recovered (kubelet: 5m).
    pub eviction_pressure_transition_period: Duration,
    /// The most grace a soft eviction gives a pod, seconds (kubelet: 0).
    pub eviction_max_pod_grace_period: i64,
    pub image_gc_high_threshold_percent: u8,
    pub image_gc_low_threshold_percent: u8,
    pub image_minimum_gc_age: Duration,
    pub runtime_request_timeout: Duration,
    pub cluster_dns: Vec<IpAddr>,
    pub cluster_domain: String,
    pub resolv_conf: PathBuf,
    pub node_status_update_frequency: Duration,
    /// A node status that did not change is still posted this often.
    pub node_status_report_frequency: Duration,
    /// The node lease's duration; it is renewed every quarter of it.
    pub node_lease_duration_seconds: u32,
    /// `configMapAndSecretChangeDetectionStrategy` (kubelet's default
    /// `Watch`): how the configMaps and secrets pods use are kept current.
    pub change_detection: ChangeDetection,
    pub serialize_image_pulls: bool,
    /// `maxParallelImagePulls`: pulls at once when `serializeImagePulls` is
    /// false (none: no limit).
    pub max_parallel_image_pulls: Option<u32>,
    /// `seccompDefault`: a container with no seccomp profile (its own or
    /// its pod's) runs with the runtime's default profile, not unconfined.
    /// picolet: true (kubelet: false) — an edge device is secure by
    /// default; `false` or a pod's `Unconfined` profile opts out.
    pub seccomp_default: bool,
    /// `podLogsDir`: where container logs go (kubelet: /var/log/pods).
    pub pod_logs_dir: PathBuf,
    /// `userNamespaces.idsPerPod` (kubelet: 65536): the host IDs each
    /// `hostUsers: false` pod gets, a multiple of 65536.
    pub user_namespace_ids_per_pod: u32,
    /// `failCgroupV1`: refuse to start on a cgroup v1 host. kubelet ≥ 1.35
    /// defaults to true; picolet to false (many devices run v1).
    pub fail_cgroup_v1: bool,
    pub node_name: String,
    /// `picolet.kubeconfig` (kubelet's `--kubeconfig`): the API server to
    /// join as a node; None: static pods only.
    pub kubeconfig: Option<PathBuf>,
    /// `picolet.bootstrapKubeconfig` (kubelet's `--bootstrap-kubeconfig`):
    /// when the kubeconfig does not exist, get a client certificate with
    /// this kubeconfig's bootstrap token and write the kubeconfig (default
    /// `<dataDir>/agent/kubeconfig`).
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// `picolet.nodeLabels` (kubelet's `--node-labels`): registered with
    /// the Node besides kubelet's own labels.
    pub node_labels: BTreeMap<String, String>,
    /// `rotateCertificates` (default true; kubelet's false, but kubeadm
    /// turns it on and a device that joined with a bootstrap token must
    /// not lose its cluster when its certificate expires): renew the
    /// bootstrapped client certificate at 70–90 % of its life.
    pub rotate_certificates: bool,
    /// `registerWithTaints`: the Node's taints at registration.
    pub register_with_taints: Vec<Taint>,
    /// `kubeReserved` + `systemReserved`: what allocatable keeps back
    /// besides `evictionHard`.
    pub reserved: Reserved,
    /// `picolet.nodeIP` (kubelet's `--node-ip`): the node's address, the
    /// pod IP of host-network pods. `None`: the first non-loopback IPv4
    /// address of an interface that is up.
    pub node_ip: Option<IpAddr>,
    pub cri_socket: PathBuf,
    pub data_dir: PathBuf,
    /// `picolet.devicePluginDirs`: each gets a `kubelet.sock` device
    /// plugins register on. Default: `<dataDir>/device-plugins`, and with
    /// the default data dir also kubelet's `/var/lib/kubelet/device-plugins`
    /// (unless a kubelet serves there), so unmodified plugins find it.
    pub device_plugin_dirs: Vec<PathBuf>,
    /// `picolet.devices`: the built-in generic device plugin's resources.
    pub devices: Vec<crate::devices::DeviceSpec>,
    pub images_dir: PathBuf,
    /// `picolet.registryConfig`: the shim's registries.yaml (k3s format).
    pub registry_config: PathBuf,
    /// `picolet.registryAuthFile`: a docker config.json for pulls without
    /// credentials of their own.
    pub registry_auth_file: PathBuf,
    pub run_dir: PathBuf,
    /// `picolet.cniConfDir`: the shim's CNI network configs.
    pub cni_conf_dir: PathBuf,
    /// `picolet.cniBinDir` (comma-separated): where CNI plugins are searched.
    pub cni_bin_dirs: Vec<PathBuf>,
    /// `picolet.defaultNetwork` (default true): `picolet up` writes the
    /// built-in network's conflist into `cniConfDir` when it has none.
    pub default_network: bool,
    /// `picolet.cgroupFavorDynmods` (default true): the shim sets the
    /// kernel's cgroup2 `favordynmods` flag at start, so moving a process
    /// into a container's cgroups (every create and exec) does not wait for
    /// an RCU grace period; forks and exits machine-wide pay a little more
    /// (kubelet changes kernel defaults the same way, with sysctls).
    pub cgroup_favor_dynmods: bool,
    /// `picolet.enableCDI` (default true, as containerd 2.x): the shim
    /// injects the CDI devices a container asks for (CRI `CDI_devices`,
    /// `cdi.k8s.io/*` annotations).
    pub enable_cdi: bool,
    /// `picolet.cdiSpecDirs` (default `/etc/cdi`, `/var/run/cdi`): where
    /// CDI spec files are read; a later folder's device wins over an
    /// earlier one's of the same name.
    pub cdi_spec_dirs: Vec<PathBuf>,
    pub restart_backoff_initial: Duration,
    pub restart_backoff_max: Duration,
    /// How often unused images are garbage collected (kubelet: 5m).
    pub image_gc_period: Duration,
    /// `picolet.maxLayerSize`: most bytes one layer may unpack to (none:
    /// only the filesystem's free space, less 5%, bounds it).
    pub max_layer_bytes: Option<u64>,
}

/// A Node taint (`registerWithTaints`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    /// NoSchedule, PreferNoSchedule or NoExecute.
    pub effect: String,
}

/// Resources kept back from pods (`kubeReserved` + `systemReserved`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reserved {
    pub cpu_milli: u128,
    pub memory: u128,
    pub ephemeral: u128,
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_lowercase())
        .unwrap_or_else(|_| "localhost".into())
}

impl Default for Config {
    fn default() -> Self {
        Self::from_raw(Raw::default(), Path::new("<defaults>")).expect("the defaults are valid")
    }
}

impl Config {
    /// Loads `path`. A missing file gives the defaults when `must_exist` is
    /// false (the default path); otherwise it is an error.
    pub fn load(path: &Path, must_exist: bool) -> Result<Self, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !must_exist => {
                return Ok(Self::default());
            }
            Err(source) => {
                return Err(ConfigError::Read {
                    file: path.to_path_buf(),
                    source,
                });
            }
        };
        Ok(Self::parse(&text, path)?)
    }

    /// Parses config text (YAML or JSON); `file` names it in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Self, FieldError> {
        let raw: Raw = if text.trim().is_empty() {
            Raw::default()
        } else {
            let de = serde_yaml::Deserializer::from_str(text);
            serde_path_to_error::deserialize(de).map_err(|e| {
                let field = e.path().to_string();
                let inner = e.into_inner().to_string();
                // serde_yaml appends " at line L column C"; keep it, it helps.
                FieldError {
                    file: file.to_path_buf(),
                    field,
                    message: inner,
                }
            })?
        };
        Self::from_raw(raw, file)
    }

    fn from_raw(raw: Raw, file: &Path) -> Result<Self, FieldError> {
        let err = |field: &str, message: String| FieldError {
            file: file.to_path_buf(),
            field: field.into(),
            message,
        };
        if let Some(k) = &raw.kind
            && k != "KubeletConfiguration"
        {
            return Err(err(
                "kind",
                format!("{k:?} (want \"KubeletConfiguration\")"),
            ));
        }
        if let Some(v) = &raw.api_version
            && v != "kubelet.config.k8s.io/v1beta1"
        {
            return Err(err(
                "apiVersion",
                format!("{v:?} (want \"kubelet.config.k8s.io/v1beta1\")"),
            ));
        }
        let dur =
            |field: &str, v: &Option<String>, default: &str| -> Result<Duration, FieldError> {
                let s = v.as_deref().unwrap_or(default);
                parse_duration(s).ok_or_else(|| {
                    err(
                        field,
                        format!("{s:?} is not a duration (e.g. \"20s\", \"1m30s\")"),
                    )
                })
            };
        let ip = |field: &str, v: &Option<String>, default: &str| -> Result<IpAddr, FieldError> {
            let s = v.as_deref().unwrap_or(default);
            s.parse()
                .map_err(|_| err(field, format!("{s:?} is not an IP address")))
        };
        if let Some(d) = &raw.cgroup_driver
            && d != "cgroupfs"
        {
            return Err(err(
                "cgroupDriver",
                format!("{d:?} is not supported (picolet manages cgroups itself: \"cgroupfs\")"),
            ));
        }
        let eviction = crate::eviction::parse(&crate::eviction::Raw {
            hard: raw.eviction_hard.as_ref(),
            soft: raw.eviction_soft.as_ref(),
            soft_grace: raw.eviction_soft_grace_period.as_ref(),
            minimum_reclaim: raw.eviction_minimum_reclaim.as_ref(),
        })
        .map_err(|(field, message)| err(&field, message))?;
        let eviction_pressure_transition_period = dur(
            "evictionPressureTransitionPeriod",
            &raw.eviction_pressure_transition_period,
            "5m",
        )?;
        let eviction_max_pod_grace_period = raw.eviction_max_pod_grace_period.unwrap_or(0);
        if eviction_max_pod_grace_period < 0 {
            return Err(err(
                "evictionMaxPodGracePeriod",
                format!("{eviction_max_pod_grace_period} is negative"),
            ));
        }
        let high = raw.image_gc_high_threshold_percent.unwrap_or(85);
        let low = raw.image_gc_low_threshold_percent.unwrap_or(80);
        if high > 100 {
            return Err(err(
                "imageGCHighThresholdPercent",
                format!("{high} is over 100"),
            ));
        }
        if low > high {
            return Err(err(
                "imageGCLowThresholdPercent",
                format!("{low} is above imageGCHighThresholdPercent ({high})"),
            ));
        }
        let log_size = raw.container_log_max_size.as_deref().unwrap_or("10Mi");
        let container_log_max_size =
            parse_quantity(log_size).filter(|v| *v > 0).ok_or_else(|| {
                err(
                    "containerLogMaxSize",
                    format!("{log_size:?} is not a quantity"),
                )
            })?;
        let container_log_max_files = raw.container_log_max_files.unwrap_or(5);
        if container_log_max_files < 2 {
            return Err(err(
                "containerLogMaxFiles",
                format!("{container_log_max_files} (must be at least 2)"),
            ));
        }
        let container_log_monitor_interval = dur(
            "containerLogMonitorInterval",
            &raw.container_log_monitor_interval,
            "10s",
        )?;
        if container_log_monitor_interval < Duration::from_secs(3) {
            return Err(err(
                "containerLogMonitorInterval",
                format!("{container_log_monitor_interval:?} (must be at least 3s)"),
            ));
        }
        let mut cluster_dns = Vec::new();
        for (i, s) in raw.cluster_dns.iter().flatten().enumerate() {
            cluster_dns.push(s.parse().map_err(|_| {
                err(
                    &format!("clusterDNS[{i}]"),
                    format!("{s:?} is not an IP address"),
                )
            })?);
        }
        let p = raw.picolet.unwrap_or_default();
        let node_name = p.node_name.unwrap_or_else(hostname);
        if node_name.is_empty()
            || node_name.len() > 253
            || !node_name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        {
            return Err(err(
                "picolet.nodeName",
                format!("{node_name:?} is not a valid DNS subdomain"),
            ));
        }
        let devices = devices::check(p.devices.clone().unwrap_or_default(), &err)?;
        let cdi_spec_dirs = devices::cdi_spec_dirs(p.cdi_spec_dirs.clone(), &err)?;
        let node_ip = match p.node_ip.as_deref() {
            None => None,
            Some(t) => Some(
                t.parse::<IpAddr>()
                    .map_err(|_| err("picolet.nodeIP", format!("{t:?} is not an IP address")))?,
            ),
        };
        // kubelet's: a multiple of 65536, and room for maxPods ranges below
        // ID 2^32.
        let ids_per_pod = match raw.user_namespaces.as_ref().and_then(|u| u.ids_per_pod) {
            None => 65536,
            Some(n) if n >= 65536 && n % 65536 == 0 && n <= i64::from(u32::MAX) => {
                u32::try_from(n).unwrap_or(65536)
            }
            Some(n) => {
                return Err(err(
                    "userNamespaces.idsPerPod",
                    format!("{n}: must be a positive multiple of 65536 below 2^32"),
                ));
            }
        };
        if (u64::from(u32::MAX) + 1) / u64::from(ids_per_pod) - 1
            < u64::from(raw.max_pods.unwrap_or(110))
        {
            return Err(err(
                "userNamespaces.idsPerPod",
                format!("{ids_per_pod}: too many for maxPods ranges below ID 2^32"),
            ));
        }
        // One socket serves both CRI services; kubelet's endpoint fields
        // may name it (a `unix://` URL), as `picolet.criSocket` does.
        let mut cri_socket = p.cri_socket.clone();
        for (field, url) in [
            ("containerRuntimeEndpoint", &raw.container_runtime_endpoint),
            ("imageServiceEndpoint", &raw.image_service_endpoint),
        ] {
            let Some(url) = url else { continue };
            let path = url.strip_prefix("unix://").unwrap_or(url).to_string();
            if !path.starts_with('/') {
                return Err(err(field, format!("{url:?}: want unix:///path/to/socket")));
            }
            match &cri_socket {
                Some(s) if *s != path => {
                    return Err(err(
                        field,
                        format!("{url:?}: not the one socket picolet serves ({s})"),
                    ));
                }
                _ => cri_socket = Some(path),
            }
        }
        // kubelet's validation of the two pull settings.
        let serialize_image_pulls = raw.serialize_image_pulls.unwrap_or(true);
        match raw.max_parallel_image_pulls {
            Some(0) => return Err(err("maxParallelImagePulls", "must be at least 1".into())),
            Some(n) if n > 1 && serialize_image_pulls => {
                return Err(err(
                    "maxParallelImagePulls",
                    format!("{n}: must be 1 or unset while serializeImagePulls is true"),
                ));
            }
            _ => {}
        }
        let backoff_initial = dur(
            "picolet.restartBackoffInitial",
            &p.restart_backoff_initial,
            "10s",
        )?;
        let backoff_max = dur("picolet.restartBackoffMax", &p.restart_backoff_max, "300s")?;
        if backoff_max < backoff_initial {
            return Err(err(
                "picolet.restartBackoffMax",
                "is shorter than restartBackoffInitial".into(),
            ));
        }
        let image_gc_period = dur("picolet.imageGCPeriod", &p.image_gc_period, "5m")?;
        if image_gc_period.is_zero() {
            return Err(err(
                "picolet.imageGCPeriod",
                "must be longer than 0s".into(),
            ));
        }
        let max_layer_bytes = p
            .max_layer_size
            .as_deref()
            .map(|q| {
                parse_quantity(q)
                    .filter(|v| *v > 0)
                    .map(|v| u64::try_from(v).unwrap_or(u64::MAX))
                    .ok_or_else(|| {
                        err(
                            "picolet.maxLayerSize",
                            format!("{q:?} is not a positive quantity"),
                        )
                    })
            })
            .transpose()?;
        let node_lease_duration_seconds = raw.node_lease_duration_seconds.unwrap_or(40);
        if node_lease_duration_seconds == 0 {
            return Err(err("nodeLeaseDurationSeconds", "must be at least 1".into()));
        }
        let mut node_labels = BTreeMap::new();
        for (k, v) in p.node_labels.iter().flatten() {
            check_node_label(k, v)
                .map_err(|m| err(&format!("picolet.nodeLabels.{k}"), m.to_string()))?;
            node_labels.insert(k.clone(), v.clone());
        }
        let mut register_with_taints = Vec::new();
        for (i, t) in raw.register_with_taints.iter().flatten().enumerate() {
            let field = format!("registerWithTaints[{i}]");
            if !matches!(
                t.effect.as_str(),
                "NoSchedule" | "PreferNoSchedule" | "NoExecute"
            ) {
                return Err(err(
                    &format!("{field}.effect"),
                    format!(
                        "{:?} (want NoSchedule, PreferNoSchedule or NoExecute)",
                        t.effect
                    ),
                ));
            }
            let value = t.value.clone().unwrap_or_default();
            check_node_label(&t.key, &value).map_err(|m| err(&field, format!("taint {m}")))?;
            register_with_taints.push(Taint {
                key: t.key.clone(),
                value,
                effect: t.effect.clone(),
            });
        }
        let mut reserved = Reserved::default();
        for (section, map) in [
            ("kubeReserved", &raw.kube_reserved),
            ("systemReserved", &raw.system_reserved),
        ] {
            for (res, q) in map.iter().flatten() {
                let field = format!("{section}.{res}");
                let (slot, v) = match res.as_str() {
                    "cpu" => (&mut reserved.cpu_milli, parse_quantity_milli(q)),
                    "memory" => (&mut reserved.memory, parse_quantity(q)),
                    "ephemeral-storage" => (&mut reserved.ephemeral, parse_quantity(q)),
                    _ => {
                        return Err(err(
                            &field,
                            "unknown resource (known: cpu, memory, ephemeral-storage)".into(),
                        ));
                    }
                };
                let v = v.ok_or_else(|| err(&field, format!("{q:?} is not a quantity")))?;
                *slot = slot.saturating_add(v);
            }
        }
        let (authentication, authorization) =
            api_port::parse(raw.authentication, raw.authorization, &dur, &err)?;
        let max_pods = raw.max_pods.unwrap_or(110);
        if max_pods == 0 {
            return Err(err("maxPods", "must be at least 1".into()));
        }
        Ok(Self {
            static_pod_path: PathBuf::from(
                raw.static_pod_path
                    .unwrap_or_else(|| "/etc/picolet/manifests".into()),
            ),
            file_check_frequency: dur("fileCheckFrequency", &raw.file_check_frequency, "20s")?,
            sync_frequency: dur("syncFrequency", &raw.sync_frequency, "1m")?,
            healthz_bind_address: ip("healthzBindAddress", &raw.healthz_bind_address, "127.0.0.1")?,
            healthz_port: raw.healthz_port.unwrap_or(10248),
            address: raw
                .address
                .is_some()
                .then(|| ip("address", &raw.address, ""))
                .transpose()?,
            port: raw.port.unwrap_or(10250),
            read_only_port: raw.read_only_port.unwrap_or(0),
            tls: match (raw.tls_cert_file, raw.tls_private_key_file) {
                (None, None) => None,
                (Some(c), Some(k)) => Some((PathBuf::from(c), PathBuf::from(k))),
                (Some(_), None) => {
                    return Err(err(
                        "tlsPrivateKeyFile",
                        "missing: tlsCertFile needs its key".into(),
                    ));
                }
                (None, Some(_)) => {
                    return Err(err(
                        "tlsCertFile",
                        "missing: tlsPrivateKeyFile needs its certificate".into(),
                    ));
                }
            },
            server_tls_bootstrap: raw.server_tls_bootstrap.unwrap_or(false),
            authentication,
            authorization,
            max_pods,
            cgroups_per_qos: raw.cgroups_per_qos.unwrap_or(true),
            cgroup_root: raw.cgroup_root.unwrap_or_else(|| "/".into()),
            pod_pids_limit: raw.pod_pids_limit.unwrap_or(-1),
            container_log_max_size,
            container_log_max_files,
            container_log_monitor_interval,
            eviction,
            eviction_pressure_transition_period,
            eviction_max_pod_grace_period,
            image_gc_high_threshold_percent: high,
            image_gc_low_threshold_percent: low,
            image_minimum_gc_age: dur("imageMinimumGCAge", &raw.image_minimum_gc_age, "2m")?,
            runtime_request_timeout: dur(
                "runtimeRequestTimeout",
                &raw.runtime_request_timeout,
                "2m",
            )?,
            cluster_dns,
            cluster_domain: raw.cluster_domain.unwrap_or_default(),
            resolv_conf: PathBuf::from(
                raw.resolv_conf.unwrap_or_else(|| "/etc/resolv.conf".into()),
            ),
            node_status_update_frequency: dur(
                "nodeStatusUpdateFrequency",
                &raw.node_status_update_frequency,
                "10s",
            )?,
            node_status_report_frequency: dur(
                "nodeStatusReportFrequency",
                &raw.node_status_report_frequency,
                "5m",
            )?,
            node_lease_duration_seconds,
            change_detection: match raw
                .config_map_and_secret_change_detection_strategy
                .as_deref()
            {
                None | Some("Watch") => ChangeDetection::Watch,
                Some("Cache") => ChangeDetection::Cache,
                Some("Get") => ChangeDetection::Get,
                Some(s) => {
                    return Err(err(
                        "configMapAndSecretChangeDetectionStrategy",
                        format!("{s:?} (want \"Watch\", \"Cache\" or \"Get\")"),
                    ));
                }
            },
            serialize_image_pulls,
            max_parallel_image_pulls: raw.max_parallel_image_pulls,
            seccomp_default: raw.seccomp_default.unwrap_or(true),
            pod_logs_dir: PathBuf::from(raw.pod_logs_dir.unwrap_or_else(|| "/var/log/pods".into())),
            user_namespace_ids_per_pod: ids_per_pod,
            fail_cgroup_v1: raw.fail_cgroup_v1.unwrap_or(false),
            node_name,
            kubeconfig: p.kubeconfig.map(PathBuf::from),
            bootstrap_kubeconfig: p.bootstrap_kubeconfig.map(PathBuf::from),
            node_labels,
            rotate_certificates: raw.rotate_certificates.unwrap_or(true),
            register_with_taints,
            reserved,
            node_ip,
            cri_socket: PathBuf::from(cri_socket.unwrap_or_else(|| crate::DEFAULT_SOCKET.into())),
            devices,
            device_plugin_dirs: match p.device_plugin_dirs {
                Some(dirs) => dirs.into_iter().map(PathBuf::from).collect(),
                None => {
                    let root = p.data_dir.as_deref().unwrap_or(crate::DEFAULT_ROOT);
                    let mut dirs = vec![Path::new(root).join("device-plugins")];
                    if root == crate::DEFAULT_ROOT {
                        dirs.push(PathBuf::from(crate::KUBELET_DEVICE_PLUGINS));
                    }
                    dirs
                }
            },
            data_dir: PathBuf::from(p.data_dir.unwrap_or_else(|| crate::DEFAULT_ROOT.into())),
            images_dir: PathBuf::from(
                p.images_dir
                    .unwrap_or_else(|| crate::DEFAULT_IMAGES_DIR.into()),
            ),
            registry_config: PathBuf::from(
                p.registry_config
                    .unwrap_or_else(|| crate::DEFAULT_REGISTRY_CONFIG.into()),
            ),
            registry_auth_file: PathBuf::from(
                p.registry_auth_file
                    .unwrap_or_else(|| crate::DEFAULT_REGISTRY_AUTH_FILE.into()),
            ),
            run_dir: PathBuf::from(p.run_dir.unwrap_or_else(|| crate::DEFAULT_RUN_DIR.into())),
            cni_conf_dir: PathBuf::from(
                p.cni_conf_dir
                    .unwrap_or_else(|| crate::DEFAULT_CNI_CONF_DIR.into()),
            ),
            cni_bin_dirs: crate::split_dirs(
                p.cni_bin_dir
                    .as_deref()
                    .unwrap_or(crate::DEFAULT_CNI_BIN_DIR),
            ),
            default_network: p.default_network.unwrap_or(true),
            cgroup_favor_dynmods: p.cgroup_favor_dynmods.unwrap_or(true),
            enable_cdi: p.enable_cdi.unwrap_or(true),
            cdi_spec_dirs: cdi_spec_dirs.into_iter().map(PathBuf::from).collect(),
            restart_backoff_initial: backoff_initial,
            restart_backoff_max: backoff_max,
            image_gc_period,
            max_layer_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::Threshold;

    fn parse(text: &str) -> Result<Config, FieldError> {
        Config::parse(text, Path::new("/etc/picolet/config.yaml"))
    }

    /// kubelet 1.36's fields picolet takes: the user namespace size, the
    /// cgroup v1 refusal, and the CRI endpoints as the one socket.
    #[test]
    fn kubelet_1_36_fields() {
        let c = parse("").expect("defaults");
        assert_eq!(
            (c.user_namespace_ids_per_pod, c.fail_cgroup_v1),
            (65536, false)
        );
        let c = parse(
            "userNamespaces: {idsPerPod: 131072}\nfailCgroupV1: true\n\
             containerRuntimeEndpoint: unix:///run/x/cri.sock\n\
             imageServiceEndpoint: unix:///run/x/cri.sock\n",
        )
        .expect("valid");
        assert_eq!(c.user_namespace_ids_per_pod, 131_072);
        assert!(c.fail_cgroup_v1);
        assert_eq!(c.cri_socket, Path::new("/run/x/cri.sock"));
        for (text, field) in [
            (
                "userNamespaces: {idsPerPod: 1000}\n",
                "userNamespaces.idsPerPod",
            ),
            (
                "userNamespaces: {idsPerPod: 0}\n",
                "userNamespaces.idsPerPod",
            ),
            (
                "userNamespaces: {idsPerPod: 2147483648}\n",
                "userNamespaces.idsPerPod",
            ),
            (
                "containerRuntimeEndpoint: tcp://1.2.3.4:1\n",
                "containerRuntimeEndpoint",
            ),
            (
                "configMapAndSecretChangeDetectionStrategy: Poll\n",
                "configMapAndSecretChangeDetectionStrategy",
            ),
            (
                "containerRuntimeEndpoint: unix:///a.sock\nimageServiceEndpoint: unix:///b.sock\n",
                "imageServiceEndpoint",
            ),
            (
                "containerRuntimeEndpoint: unix:///a.sock\npicolet: {criSocket: /b.sock}\n",
                "containerRuntimeEndpoint",
            ),
        ] {
            let e = parse(text).expect_err(text);
            assert_eq!(e.field, field, "{text}: {e}");
        }
    }

    #[test]
    fn defaults_are_kubelets() {
        let c = parse("").expect("empty is defaults");
        assert_eq!(c.file_check_frequency, Duration::from_secs(20));
        assert_eq!(c.sync_frequency, Duration::from_secs(60));
        assert_eq!((c.healthz_port, c.port, c.max_pods), (10248, 10250, 110));
        assert_eq!(c.container_log_max_size, 10 << 20);
        assert_eq!(c.container_log_monitor_interval, Duration::from_secs(10));
        assert_eq!(c.image_gc_period, Duration::from_secs(300));
        assert!(c.default_network);
        assert_eq!(
            c.eviction.hard.get("memory.available"),
            Some(&Threshold::Quantity(100 << 20))
        );
        assert_eq!(
            c.eviction.hard.get("nodefs.available"),
            Some(&Threshold::Percent(10.0))
        );
        assert_eq!(
            (
                c.image_gc_high_threshold_percent,
                c.image_gc_low_threshold_percent
            ),
            (85, 80)
        );
        assert_eq!(c.restart_backoff_initial, Duration::from_secs(10));
        assert_eq!(c.change_detection, ChangeDetection::Watch);
        assert_eq!(
            parse("configMapAndSecretChangeDetectionStrategy: Get\n")
                .expect("valid")
                .change_detection,
            ChangeDetection::Get
        );
        assert_eq!(c, Config::default());
    }

    #[test]
    fn cdi_is_on_with_the_cdi_librarys_folders_by_default() {
        let c = parse("").expect("defaults");
        assert!(c.enable_cdi);
        assert_eq!(
            c.cdi_spec_dirs,
            [PathBuf::from("/etc/cdi"), PathBuf::from("/var/run/cdi")]
        );
        let c = parse("picolet:\n  enableCDI: false\n  cdiSpecDirs: [/opt/cdi]\n").expect("valid");
        assert!(!c.enable_cdi);
        assert_eq!(c.cdi_spec_dirs, [PathBuf::from("/opt/cdi")]);
    }

    #[test]
    fn the_example_config_spells_out_the_defaults() {
        let text = include_str!("../../examples/config.yaml");
        assert_eq!(parse(text), Ok(Config::default()));
    }

    #[test]
    fn a_kubelet_file_works() {
        let text = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: /etc/kubernetes/manifests\nfileCheckFrequency: 5s\ncgroupDriver: cgroupfs\ncgroupsPerQOS: true\nclusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\nimageGCHighThresholdPercent: 90\nevictionHard:\n  memory.available: 200Mi\n  pid.available: 10%\npicolet:\n  nodeName: edge-1\n  restartBackoffInitial: 1s\n";
        let c = parse(text).expect("valid");
        assert_eq!(
            c.static_pod_path,
            PathBuf::from("/etc/kubernetes/manifests")
        );
        assert_eq!(c.file_check_frequency, Duration::from_secs(5));
        assert_eq!(
            c.cluster_dns,
            vec!["10.96.0.10".parse::<IpAddr>().expect("ip")]
        );
        assert_eq!(c.node_name, "edge-1");
        assert_eq!(c.eviction.hard.len(), 2);
        assert_eq!(c.restart_backoff_initial, Duration::from_secs(1));
    }

    #[test]
    fn errors_name_file_field_and_expectation() {
        let cases = [
            (
                "evictionHard:\n  memory.available: 100Zi\n",
                "/etc/picolet/config.yaml: evictionHard.memory.available: \"100Zi\" is not a quantity",
            ),
            (
                "fileCheckFrequency: soon\n",
                "fileCheckFrequency: \"soon\" is not a duration",
            ),
            ("staticPodPth: /x\n", "unknown field `staticPodPth`"),
            (
                "picolet:\n  nodeName: Edge_1\n",
                "picolet.nodeName: \"Edge_1\" is not a valid DNS subdomain",
            ),
            ("healthzPort: lots\n", "healthzPort: invalid type"),
            (
                "kind: Pod\n",
                "kind: \"Pod\" (want \"KubeletConfiguration\")",
            ),
            (
                "cgroupDriver: systemd\n",
                "cgroupDriver: \"systemd\" is not supported",
            ),
            (
                "imageGCLowThresholdPercent: 95\n",
                "imageGCLowThresholdPercent: 95 is above",
            ),
            (
                "clusterDNS: [10.0.0.300]\n",
                "clusterDNS[0]: \"10.0.0.300\" is not an IP address",
            ),
            (
                "evictionHard:\n  memory.free: 1Gi\n",
                "evictionHard.memory.free: unknown eviction signal",
            ),
            (
                "containerLogMonitorInterval: 1s\n",
                "containerLogMonitorInterval: 1s (must be at least 3s)",
            ),
            (
                "picolet:\n  criSockt: /x\n",
                "picolet: unknown field `criSockt`",
            ),
            (
                "picolet:\n  cdiSpecDirs: [/etc/cdi, run/cdi]\n",
                "picolet.cdiSpecDirs[1]: \"run/cdi\" is not an absolute path",
            ),
            (
                "picolet:\n  cdiSpecDirs: []\n",
                "picolet.cdiSpecDirs: empty (enableCDI: false turns CDI off)",
            ),
            (
                "picolet:\n  enableCdi: false\n",
                "picolet: unknown field `enableCdi`",
            ),
            (
                "picolet:\n  maxLayerSize: lots\n",
                "picolet.maxLayerSize: \"lots\" is not a positive quantity",
            ),
            (
                "picolet:\n  nodeLabels:\n    node-role.kubernetes.io/edge: \"\"\n",
                "picolet.nodeLabels.node-role.kubernetes.io/edge: label \"node-role.kubernetes.io/edge\": a node may not set labels in the kubernetes.io",
            ),
            (
                "picolet:\n  nodeLabels:\n    site: \"two words\"\n",
                "picolet.nodeLabels.site: label value \"two words\"",
            ),
            (
                "registerWithTaints:\n- key: edge\n  effect: NoRun\n",
                "registerWithTaints[0].effect: \"NoRun\" (want NoSchedule",
            ),
            (
                "kubeReserved:\n  gpu: 1\n",
                "kubeReserved.gpu: unknown resource",
            ),
            (
                "systemReserved:\n  memory: much\n",
                "systemReserved.memory: \"much\" is not a quantity",
            ),
        ];
        for (text, want) in cases {
            let e = parse(text).expect_err(text).to_string();
            assert!(
                e.contains(want),
                "{text:?}: got {e:?}, want it to contain {want:?}"
            );
        }
    }

    #[test]
    fn node_labels_taints_and_reservations() {
        let c = parse("kubeReserved:\n  cpu: 100m\n  memory: 100Mi\nsystemReserved:\n  cpu: 150m\n  ephemeral-storage: 1Gi\nregisterWithTaints:\n- key: edge.example.com/uplink\n  value: metered\n  effect: NoSchedule\npicolet:\n  nodeLabels:\n    site: berlin-3\n    node.kubernetes.io/exclude-from-external-load-balancers: \"\"\n").expect("valid");
        assert_eq!(
            c.reserved,
            Reserved {
                cpu_milli: 250,
                memory: 100 << 20,
                ephemeral: 1 << 30
            }
        );
        assert_eq!(c.register_with_taints[0].effect, "NoSchedule");
        assert_eq!(c.node_labels.len(), 2);
    }

    #[test]
    fn max_layer_size_is_a_quantity_and_unset_by_default() {
        assert_eq!(Config::default().max_layer_bytes, None);
        let pulls = |text: &str| {
            Config::parse(text, Path::new("c.yaml"))
                .map(|c| (c.serialize_image_pulls, c.max_parallel_image_pulls))
        };
        assert_eq!(pulls(""), Ok((true, None)));
        assert_eq!(
            pulls("serializeImagePulls: false\nmaxParallelImagePulls: 3"),
            Ok((false, Some(3)))
        );
        assert!(
            pulls("maxParallelImagePulls: 3")
                .expect_err("serialized")
                .to_string()
                .contains("maxParallelImagePulls")
        );
        assert!(pulls("serializeImagePulls: false\nmaxParallelImagePulls: 0").is_err());
        let c = parse("picolet:\n  maxLayerSize: 2Gi\n").expect("parse");
        assert_eq!(c.max_layer_bytes, Some(2 << 30));
    }

    #[test]
    fn missing_default_file_is_defaults_but_missing_named_file_is_an_error() {
        let p = Path::new("/nonexistent/picolet.yaml");
        assert_eq!(Config::load(p, false).expect("defaults"), Config::default());
        let e = Config::load(p, true).expect_err("must exist");
        assert!(
            e.to_string()
                .starts_with("/nonexistent/picolet.yaml: cannot read: "),
            "{e}"
        );
        // The I/O error stays whole: the caller can tell its kind.
        assert!(
            matches!(&e, ConfigError::Read { file, source }
                if file == p && source.kind() == std::io::ErrorKind::NotFound),
            "{e:?}"
        );
        // A bad field is the FieldError, printed as before.
        let dir = std::env::temp_dir().join(format!("picolet-config-{}", std::process::id()));
        fs_write(&dir.join("c.yaml"), "maxPods: many\n");
        let e = Config::load(&dir.join("c.yaml"), true).expect_err("bad field");
        assert!(
            matches!(&e, ConfigError::Field(f) if f.field == "maxPods"),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("{}: maxPods: ", dir.join("c.yaml").display()))
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn fs_write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
}
