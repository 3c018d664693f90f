//! The config file as it is read: kubelet's field names, everything
//! optional, unknown fields refused. [`super::Config::from_raw`] checks it.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::api_port;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Raw {
    pub(super) api_version: Option<String>,
    pub(super) kind: Option<String>,
    pub(super) static_pod_path: Option<String>,
    pub(super) file_check_frequency: Option<String>,
    pub(super) sync_frequency: Option<String>,
    pub(super) healthz_bind_address: Option<String>,
    pub(super) healthz_port: Option<u16>,
    pub(super) address: Option<String>,
    pub(super) port: Option<u16>,
    pub(super) max_pods: Option<u32>,
    pub(super) cgroup_driver: Option<String>,
    #[serde(rename = "cgroupsPerQOS")]
    pub(super) cgroups_per_qos: Option<bool>,
    pub(super) cgroup_root: Option<String>,
    pub(super) pod_pids_limit: Option<i64>,
    pub(super) container_log_max_size: Option<String>,
    pub(super) container_log_max_files: Option<u32>,
    pub(super) container_log_monitor_interval: Option<String>,
    pub(super) eviction_hard: Option<BTreeMap<String, String>>,
    pub(super) eviction_soft: Option<BTreeMap<String, String>>,
    pub(super) eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    pub(super) eviction_minimum_reclaim: Option<BTreeMap<String, String>>,
    pub(super) eviction_pressure_transition_period: Option<String>,
    pub(super) eviction_max_pod_grace_period: Option<i64>,
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub(super) image_gc_high_threshold_percent: Option<u8>,
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub(super) image_gc_low_threshold_percent: Option<u8>,
    #[serde(rename = "imageMinimumGCAge")]
    pub(super) image_minimum_gc_age: Option<String>,
    pub(super) runtime_request_timeout: Option<String>,
    #[serde(rename = "clusterDNS")]
    pub(super) cluster_dns: Option<Vec<String>>,
    pub(super) cluster_domain: Option<String>,
    pub(super) resolv_conf: Option<String>,
    pub(super) node_status_update_frequency: Option<String>,
    pub(super) node_status_report_frequency: Option<String>,
    pub(super) node_lease_duration_seconds: Option<u32>,
    pub(super) config_map_and_secret_change_detection_strategy: Option<String>,
    pub(super) serialize_image_pulls: Option<bool>,
    pub(super) max_parallel_image_pulls: Option<u32>,
    pub(super) seccomp_default: Option<bool>,
    pub(super) pod_logs_dir: Option<String>,
    pub(super) register_with_taints: Option<Vec<RawTaint>>,
    pub(super) rotate_certificates: Option<bool>,
    pub(super) read_only_port: Option<u16>,
    pub(super) tls_cert_file: Option<String>,
    pub(super) tls_private_key_file: Option<String>,
    #[serde(rename = "serverTLSBootstrap")]
    pub(super) server_tls_bootstrap: Option<bool>,
    pub(super) authentication: Option<api_port::RawAuthentication>,
    pub(super) authorization: Option<api_port::RawAuthorization>,
    pub(super) kube_reserved: Option<BTreeMap<String, String>>,
    pub(super) system_reserved: Option<BTreeMap<String, String>>,
    pub(super) user_namespaces: Option<RawUserNamespaces>,
    #[serde(rename = "failCgroupV1")]
    pub(super) fail_cgroup_v1: Option<bool>,
    pub(super) container_runtime_endpoint: Option<String>,
    pub(super) image_service_endpoint: Option<String>,
    pub(super) picolet: Option<RawPicolet>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawUserNamespaces {
    pub(super) ids_per_pod: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTaint {
    pub(super) key: String,
    pub(super) value: Option<String>,
    pub(super) effect: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawPicolet {
    pub(super) node_name: Option<String>,
    /// kubelet's `--kubeconfig`: join the cluster of this API server.
    pub(super) kubeconfig: Option<String>,
    /// kubelet's `--node-labels`: labels the Node is registered with.
    pub(super) node_labels: Option<BTreeMap<String, String>>,
    /// kubelet's `--bootstrap-kubeconfig`: join with a bootstrap token.
    pub(super) bootstrap_kubeconfig: Option<String>,
    #[serde(rename = "nodeIP")]
    pub(super) node_ip: Option<String>,
    pub(super) cri_socket: Option<String>,
    pub(super) data_dir: Option<String>,
    pub(super) images_dir: Option<String>,
    /// k3s-style registries.yaml: mirrors, rewrites, per-registry auth and TLS.
    pub(super) registry_config: Option<String>,
    /// A docker config.json whose `auths` serve pulls that bring no credentials.
    pub(super) registry_auth_file: Option<String>,
    pub(super) run_dir: Option<String>,
    /// CNI network configs (containerd's `conf_dir`): the first in lexical order is used.
    pub(super) cni_conf_dir: Option<String>,
    /// Where CNI plugins are searched, comma-separated (containerd's `bin_dir`).
    pub(super) cni_bin_dir: Option<String>,
    /// `picolet up` writes the built-in network's conflist when
    /// `cniConfDir` has none.
    pub(super) default_network: Option<bool>,
    /// The shim sets the cgroup2 root's `favordynmods` at start.
    pub(super) cgroup_favor_dynmods: Option<bool>,
    /// CDI devices (containerd's `enable_cdi`).
    #[serde(rename = "enableCDI")]
    pub(super) enable_cdi: Option<bool>,
    /// Where CDI spec files are read (containerd's `cdi_spec_dirs`).
    #[serde(rename = "cdiSpecDirs")]
    pub(super) cdi_spec_dirs: Option<Vec<String>>,
    /// First restart back-off (kubelet: 10s); tests shorten it.
    pub(super) restart_backoff_initial: Option<String>,
    /// Back-off cap (kubelet: 300s).
    pub(super) restart_backoff_max: Option<String>,
    /// How often images are garbage collected (kubelet: 5m, fixed).
    #[serde(rename = "imageGCPeriod")]
    pub(super) image_gc_period: Option<String>,
    /// Most bytes one image layer may unpack to (a quantity); free space
    /// bounds it too.
    pub(super) max_layer_size: Option<String>,
    /// Where device plugins register (`kubelet.sock`) and keep their
    /// sockets.
    pub(super) device_plugin_dirs: Option<Vec<String>>,
    /// The built-in generic device plugin's resources.
    pub(super) devices: Option<Vec<crate::devices::DeviceSpec>>,
}
