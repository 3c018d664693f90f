//! `/stats/summary` as typed records, kubelet's
//! `pkg/kubelet/apis/stats/v1alpha1/types.go`: what the API port serves
//! (serialized with kubelet's JSON names) and what the eviction manager
//! reads its signals from, one shape for both. A field kubelet marks
//! optional is an `Option` and left out when unknown: a missing figure is
//! never a zero. Pure.

use serde::{Deserialize, Serialize};

/// The whole summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub node: NodeStats,
    #[serde(default)]
    pub pods: Vec<PodStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    #[serde(default)]
    pub node_name: String,
    /// RFC 3339: when the node booted.
    #[serde(default)]
    pub start_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// The filesystem of the node's data (nodefs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    /// The filesystem of the images (imagefs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
}

/// The node's process ids (kubelet's `RlimitStats`; lower-case names as
/// kubelet writes them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RlimitStats {
    #[serde(default)]
    pub time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maxpid: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub curproc: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    #[serde(default)]
    pub time: String,
    /// The rate since the previous reading; unknown at the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    #[serde(default)]
    pub time: String,
    /// The limit (or the node's memory) less the working set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
}

/// The default interface's figures inline, and every interface.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkStats {
    #[serde(default)]
    pub time: String,
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub default: Option<InterfaceStats>,
    #[serde(default)]
    pub interfaces: Vec<InterfaceStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    #[serde(default)]
    pub time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    pub pod_ref: PodReference,
    #[serde(default)]
    pub start_time: String,
    #[serde(default)]
    pub containers: Vec<ContainerStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume: Vec<VolumeStats>,
    /// rootfs + logs + disk-backed emptyDirs, as kubelet counts them.
    #[serde(
        rename = "ephemeral-storage",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ephemeral_storage: Option<FsStats>,
    #[serde(
        rename = "process_stats",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub process_stats: Option<ProcessStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PodReference {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    pub uid: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessStats {
    #[serde(
        rename = "process_count",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub process_count: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    pub name: String,
    #[serde(default)]
    pub start_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// The writable layer, on imagefs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VolumeStats {
    pub name: String,
    #[serde(flatten)]
    pub fs: FsStats,
}

/// Disk usage of a directory or a writable layer: what CRI's
/// `FilesystemUsage` and a walk of a directory give.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    pub bytes: u64,
    pub inodes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelets_names_on_the_wire_and_unknown_figures_left_out() {
        let s = Summary {
            node: NodeStats {
                node_name: "edge".into(),
                rlimit: Some(RlimitStats {
                    time: "t".into(),
                    maxpid: Some(10),
                    curproc: None,
                }),
                network: Some(NetworkStats {
                    time: "t".into(),
                    default: Some(InterfaceStats {
                        name: "eth0".into(),
                        rx_bytes: Some(1),
                        ..Default::default()
                    }),
                    interfaces: Vec::new(),
                }),
                ..Default::default()
            },
            pods: vec![PodStats {
                pod_ref: PodReference {
                    uid: "u".into(),
                    ..Default::default()
                },
                ephemeral_storage: Some(FsStats {
                    used_bytes: Some(7),
                    ..Default::default()
                }),
                process_stats: Some(ProcessStats {
                    process_count: Some(3),
                }),
                volume: vec![VolumeStats {
                    name: "cache".into(),
                    fs: FsStats {
                        used_bytes: Some(1),
                        ..Default::default()
                    },
                }],
                ..Default::default()
            }],
        };
        let v = serde_json::to_value(&s).expect("json");
        assert_eq!(v["node"]["nodeName"], "edge");
        assert_eq!(v["node"]["rlimit"]["maxpid"], 10);
        assert!(v["node"]["rlimit"].get("curproc").is_none());
        assert!(v["node"].get("cpu").is_none());
        assert_eq!(v["node"]["network"]["name"], "eth0");
        assert_eq!(v["node"]["network"]["rxBytes"], 1);
        let p = &v["pods"][0];
        assert_eq!(p["podRef"]["uid"], "u");
        assert_eq!(p["ephemeral-storage"]["usedBytes"], 7);
        assert_eq!(p["process_stats"]["process_count"], 3);
        assert_eq!(p["volume"][0]["name"], "cache");
        assert_eq!(p["volume"][0]["usedBytes"], 1);
        let back: Summary = serde_json::from_value(v).expect("reads back");
        assert_eq!(back, s);
    }
}
