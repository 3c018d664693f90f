//! Pod networking through CNI, as containerd's CRI plugin does it: ADD of
//! the network's plugins at RunPodSandbox with the pinned netns, DEL at
//! StopPodSandbox (and again, harmlessly, at RemovePodSandbox).
//!
//! Crash safety: before the first plugin runs, the attachment (the network
//! list as read, the netns, CNI_ARGS and capability args) is written to
//! `<sandbox dir>/cni.json` atomically; after ADD it is written again with
//! the result. DEL reads only that file, never the config folder, so it
//! runs with the config that did the ADD, after a config change or a shim
//! restart. The file goes only when DEL has succeeded: a shim killed
//! during ADD or DEL leaves it, and recovery runs DEL again.
//!
//! The config folder is read again at every RunPodSandbox and Status (a
//! directory listing and a small file, a few microseconds): a config
//! written, changed or removed takes effect at the next sandbox without a
//! restart, which is what containerd's inotify watch is for.

pub mod builtin;
pub mod config;
pub mod exec;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cri_proto::v1::PodSandboxConfig;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Where the host reaches a netns pin now (the shim's pin space says:
/// `namespaces::PinSpace::locate`), or None when nothing is pinned there.
pub type LocateNetns = dyn Fn(&Path) -> Option<PathBuf> + Send + Sync;

pub use config::{ConfigError, NetworkList};
pub use exec::PluginError;

/// The attachment record in a sandbox's dir.
pub const CACHE: &str = "cni.json";
/// The pod's interface, as containerd names it.
pub const IFNAME: &str = "eth0";

/// Why a pod's network could not be set up or torn down.
#[derive(Debug, thiserror::Error)]
pub enum CniError {
    #[error("CNI config: {0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Plugin(#[from] PluginError),
    #[error("CNI attachment record: {0}")]
    Cache(#[from] images::Error),
    #[error("CNI attachment record {}: {why}", path.display())]
    BadCache { path: PathBuf, why: String },
    /// As containerd, which refuses the sandbox when kubelet's bandwidth
    /// annotations do not parse.
    #[error("config.annotations[{key:?}]: {value:?} is not a bandwidth quantity (e.g. 10M)")]
    BadBandwidth { key: &'static str, value: String },
}

/// One pod's attachment: everything DEL needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attachment {
    pub network: NetworkList,
    pub container_id: String,
    /// The netns pin's path in the pin space (or, for a sandbox made
    /// before it, the host); [`LocateNetns`] says where plugins find it.
    pub netns: PathBuf,
    pub ifname: String,
    pub args: String,
    pub capability_args: Map<String, Value>,
    /// The ADD result; `None` until ADD finished.
    pub result: Option<Value>,
}

/// The shim's CNI settings.
#[derive(Clone)]
pub struct Cni {
    conf_dir: PathBuf,
    bin_dirs: Vec<PathBuf>,
    /// Plugins get a netns pin's path as the host reaches it, found anew
    /// at each call (it names a thread of the shim).
    locate: Arc<LocateNetns>,
}

impl std::fmt::Debug for Cni {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cni")
            .field("conf_dir", &self.conf_dir)
            .field("bin_dirs", &self.bin_dirs)
            .finish_non_exhaustive()
    }
}

impl Cni {
    pub fn new(conf_dir: PathBuf, bin_dirs: Vec<PathBuf>, locate: Arc<LocateNetns>) -> Self {
        Self {
            conf_dir,
            bin_dirs,
            locate,
        }
    }

    /// The network pods get now; `None`: loopback only.
    pub fn network(&self) -> Result<Option<NetworkList>, ConfigError> {
        config::load_dir(&self.conf_dir)
    }

    /// CRI's NetworkReady condition: (ready, reason, message), as containerd.
    pub fn ready(&self) -> (bool, &'static str, String) {
        match self.network() {
            Ok(Some(_)) => (true, "", String::new()),
            Ok(None) => (
                false,
                "NetworkPluginNotReady",
                format!(
                    "cni config load failed: no network config found in {}: pods get loopback only (host-network pods work)",
                    self.conf_dir.display()
                ),
            ),
            Err(e) => (
                false,
                "NetworkPluginNotReady",
                format!("cni config load failed: {e}"),
            ),
        }
    }

    /// ADD of `network` for a sandbox; its IPs, IPv4 first. On failure
    /// what was added is deleted again before the error returns.
    pub async fn setup(
        &self,
        dir: &Path,
        network: NetworkList,
        sandbox_id: &str,
        netns: &Path,
        config: &PodSandboxConfig,
    ) -> Result<Vec<IpAddr>, CniError> {
        let mut att = Attachment {
            network,
            container_id: sandbox_id.to_string(),
            netns: netns.to_path_buf(),
            ifname: IFNAME.into(),
            args: cni_args(sandbox_id, config),
            capability_args: capability_args(config)?,
            result: None,
        };
        // Durable before ADD: a lease the plugins write to disk is released
        // after a power cut only if this record survived it. Its flushes
        // wait on the blocking pool, not on an async worker.
        let (path, bytes) = (dir.join(CACHE), encode(dir, &att)?);
        tokio::task::spawn_blocking(move || images::fsutil::write_atomic(&path, &bytes))
            .await
            .map_err(|e| CniError::BadCache {
                path: dir.join(CACHE),
                why: e.to_string(),
            })??;
        match self.add(&att).await {
            Ok(result) => {
                let ips = config::pod_ips(&result, &att.ifname);
                att.result = Some(result);
                // Not flushed: a power cut may leave the record above, whose
                // DEL has no prevResult, which plugins must take (CNI spec:
                // DEL "should" get it, and after a reboot the netns is gone).
                save_volatile(dir, &att)?;
                Ok(ips)
            }
            Err(e) => {
                if let Err(del) = self.teardown(dir).await {
                    tracing::error!(sandbox = %sandbox_id, error = %del, "DEL after a failed ADD");
                }
                Err(e)
            }
        }
    }

    async fn add(&self, att: &Attachment) -> Result<Value, CniError> {
        let netns = (self.locate)(&att.netns).unwrap_or_else(|| att.netns.clone());
        let call = self.call("ADD", att, &netns);
        let mut prev: Option<Value> = None;
        for i in 0..att.network.plugins.len() {
            let stdin = att
                .network
                .plugin_stdin(i, prev.as_ref(), &att.capability_args);
            let out = exec::run(att.network.plugin_type(i), &call, &stdin).await?;
            prev = out;
        }
        prev.ok_or_else(|| {
            CniError::Plugin(PluginError::BadOutput {
                plugin: att.network.plugin_type(0).into(),
                command: "ADD",
                why: "no result".into(),
            })
        })
    }

    /// DEL of the sandbox's attachment, if it has one. Every plugin gets
    /// its DEL even when one before it failed (libcni stops at the first
    /// failure, leaving the others' leases and rules); a plugin that is not
    /// installed is skipped, as it cannot have added anything. The record
    /// goes only once all have succeeded, so a failure is retried by the
    /// next StopPodSandbox, RemovePodSandbox or shim start. Idempotent.
    pub async fn teardown(&self, dir: &Path) -> Result<(), CniError> {
        let Some(att) = load(dir)? else {
            return Ok(());
        };
        // After a reboot the pinned netns is gone: the spec's empty
        // CNI_NETNS tells plugins to release what lives outside it.
        let netns = (self.locate)(&att.netns).unwrap_or_default();
        let call = self.call("DEL", &att, &netns);
        let prev = att
            .result
            .as_ref()
            .filter(|_| att.network.del_gets_prev_result());
        let mut first_error = None;
        for i in (0..att.network.plugins.len()).rev() {
            let stdin = att.network.plugin_stdin(i, prev, &att.capability_args);
            match exec::run(att.network.plugin_type(i), &call, &stdin).await {
                Ok(_) => {}
                Err(e @ PluginError::NotFound { .. }) => {
                    tracing::warn!(sandbox = %att.container_id, error = %e, "DEL skips a plugin that is not installed");
                }
                Err(e) => {
                    tracing::warn!(sandbox = %att.container_id, error = %e, "DEL failed");
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e.into());
        }
        let path = dir.join(CACHE);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(CniError::BadCache {
                    path,
                    why: format!("remove: {e}"),
                });
            }
        }
        images::fsutil::sync_dir(dir)?;
        Ok(())
    }

    /// A plugin call for `att`, with `netns` as the host reaches its pin.
    fn call<'a>(
        &'a self,
        command: &'static str,
        att: &'a Attachment,
        netns: &'a Path,
    ) -> exec::Call<'a> {
        exec::Call {
            command,
            container_id: &att.container_id,
            netns,
            ifname: &att.ifname,
            args: &att.args,
            bin_dirs: &self.bin_dirs,
        }
    }
}

fn encode(dir: &Path, att: &Attachment) -> Result<Vec<u8>, CniError> {
    serde_json::to_vec(att).map_err(|e| CniError::BadCache {
        path: dir.join(CACHE),
        why: e.to_string(),
    })
}

/// Writes the attachment record atomically, not flushed.
fn save_volatile(dir: &Path, att: &Attachment) -> Result<(), CniError> {
    images::fsutil::write_atomic_volatile(&dir.join(CACHE), &encode(dir, att)?)?;
    Ok(())
}

fn load(dir: &Path) -> Result<Option<Attachment>, CniError> {
    let path = dir.join(CACHE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(CniError::BadCache {
                path,
                why: e.to_string(),
            });
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| CniError::BadCache {
            path,
            why: e.to_string(),
        })
}

/// `CNI_ARGS` as containerd sets them.
pub fn cni_args(sandbox_id: &str, config: &PodSandboxConfig) -> String {
    let meta = config.metadata.clone().unwrap_or_default();
    format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={sandbox_id};K8S_POD_UID={}",
        meta.namespace, meta.name, meta.uid
    )
}

/// Annotations kubelet reads for the bandwidth plugin.
const INGRESS_BANDWIDTH: &str = "kubernetes.io/ingress-bandwidth";
const EGRESS_BANDWIDTH: &str = "kubernetes.io/egress-bandwidth";

/// The capability args containerd passes: `portMappings` (ports with a
/// host port), `bandwidth` (from the pod's annotations, burst unlimited as
/// kubelet's) and `dns`.
pub fn capability_args(config: &PodSandboxConfig) -> Result<Map<String, Value>, CniError> {
    let mut caps = Map::new();
    let ports: Vec<Value> = config
        .port_mappings
        .iter()
        .filter(|p| p.host_port > 0)
        .map(|p| {
            let protocol = match cri_proto::v1::Protocol::try_from(p.protocol) {
                Ok(cri_proto::v1::Protocol::Udp) => "udp",
                Ok(cri_proto::v1::Protocol::Sctp) => "sctp",
                _ => "tcp",
            };
            json!({
                "hostPort": p.host_port,
                "containerPort": p.container_port,
                "protocol": protocol,
                "hostIP": p.host_ip,
            })
        })
        .collect();
    if !ports.is_empty() {
        caps.insert("portMappings".into(), Value::Array(ports));
    }
    let rate = |key: &'static str| -> Result<Option<u64>, CniError> {
        let Some(q) = config.annotations.get(key) else {
            return Ok(None);
        };
        edge_config::quantity::parse_quantity(q)
            .and_then(|r| u64::try_from(r).ok())
            .map(Some)
            .ok_or_else(|| CniError::BadBandwidth {
                key,
                value: q.clone(),
            })
    };
    let mut bw = Map::new();
    if let Some(r) = rate(INGRESS_BANDWIDTH)? {
        bw.insert("ingressRate".into(), r.into());
        bw.insert("ingressBurst".into(), u64::from(u32::MAX).into());
    }
    if let Some(r) = rate(EGRESS_BANDWIDTH)? {
        bw.insert("egressRate".into(), r.into());
        bw.insert("egressBurst".into(), u64::from(u32::MAX).into());
    }
    if !bw.is_empty() {
        caps.insert("bandwidth".into(), Value::Object(bw));
    }
    if let Some(dns) = &config.dns_config {
        caps.insert(
            "dns".into(),
            json!({"servers": dns.servers, "searches": dns.searches, "options": dns.options}),
        );
    }
    Ok(caps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cri_proto::v1::{DnsConfig, PodSandboxMetadata, PortMapping, Protocol};

    fn config() -> PodSandboxConfig {
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: "web".into(),
                uid: "u1".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            port_mappings: vec![
                PortMapping {
                    protocol: Protocol::Tcp as i32,
                    container_port: 80,
                    host_port: 8080,
                    host_ip: String::new(),
                },
                PortMapping {
                    protocol: Protocol::Udp as i32,
                    container_port: 53,
                    host_port: 5353,
                    host_ip: "127.0.0.1".into(),
                },
                // No host port: nothing to map.
                PortMapping {
                    protocol: Protocol::Tcp as i32,
                    container_port: 9090,
                    host_port: 0,
                    host_ip: String::new(),
                },
            ],
            annotations: [(INGRESS_BANDWIDTH.to_string(), "10M".to_string())].into(),
            dns_config: Some(DnsConfig {
                servers: vec!["10.0.0.10".into()],
                searches: vec!["svc.cluster.local".into()],
                options: vec!["ndots:5".into()],
            }),
            ..Default::default()
        }
    }

    #[test]
    fn args_as_containerd() {
        assert_eq!(
            cni_args("sb1", &config()),
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=sb1;K8S_POD_UID=u1"
        );
    }

    #[test]
    fn capability_args_from_the_sandbox_config() {
        let caps = capability_args(&config()).expect("valid");
        assert_eq!(
            caps["portMappings"],
            json!([
                {"hostPort": 8080, "containerPort": 80, "protocol": "tcp", "hostIP": ""},
                {"hostPort": 5353, "containerPort": 53, "protocol": "udp", "hostIP": "127.0.0.1"}
            ])
        );
        assert_eq!(
            caps["bandwidth"],
            json!({"ingressRate": 10_000_000u64, "ingressBurst": 4_294_967_295u64})
        );
        assert_eq!(
            caps["dns"],
            json!({"servers": ["10.0.0.10"], "searches": ["svc.cluster.local"], "options": ["ndots:5"]})
        );
        assert!(
            capability_args(&PodSandboxConfig::default())
                .expect("valid")
                .is_empty()
        );
        let mut bad = config();
        bad.annotations
            .insert(EGRESS_BANDWIDTH.into(), "fast".into());
        let e = capability_args(&bad).expect_err("not a quantity");
        assert_eq!(
            e.to_string(),
            "config.annotations[\"kubernetes.io/egress-bandwidth\"]: \"fast\" is not a bandwidth quantity (e.g. 10M)"
        );
    }
}
