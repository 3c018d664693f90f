//! Persistent records of sandboxes and containers, one JSON file per object,
//! written atomically (temp + fsync + rename). CRI configs are stored as
//! received, so a restarted shim answers exactly as before.

use std::path::{Path, PathBuf};

use cri_proto::v1::{ContainerConfig, PodSandboxConfig};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::Error;

pub const META: &str = "meta.json";
pub const EXIT: &str = "exit.json";

/// A pod sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub id: String,
    pub config: PodSandboxConfig,
    pub created_at: i64,
    pub ready: bool,
    /// Pinned namespace files; `None` when the host's is used.
    pub netns: Option<PathBuf>,
    pub ipcns: Option<PathBuf>,
    pub utsns: Option<PathBuf>,
    /// The pod's /dev/shm tmpfs mount point, when it has its own.
    pub shm: Option<PathBuf>,
    /// Persistent dir (hosts, resolv.conf, hostname).
    pub dir: PathBuf,
    /// Runtime dir (namespace files, shm).
    pub run_dir: PathBuf,
    /// Pid 1 of the pod's shared pid namespace (pid mode POD) and its start
    /// time, against pid reuse.
    #[serde(default)]
    pub pod_init: Option<(i32, u64)>,
    /// The pod's IPs from CNI, IPv4 first; empty for loopback-only and
    /// host-network pods.
    #[serde(default)]
    pub ips: Vec<std::net::IpAddr>,
    /// False until every resource is in place: a record left false by a
    /// crash marks a half-created sandbox to clean up.
    pub complete: bool,
}

/// A container.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContainerRecord {
    pub id: String,
    pub sandbox_id: String,
    pub config: ContainerConfig,
    pub image_id: String,
    pub image_ref: String,
    /// The image's first repo tag at create time (containerd's status
    /// `image`); empty for an untagged image and for records written before.
    #[serde(default)]
    pub image_name: String,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub log_path: Option<PathBuf>,
    pub stop_signal: Option<String>,
    /// Container cgroup path (the spec's cgroupsPath).
    pub cgroup: String,
    pub monitor_pid: Option<i32>,
    /// Start time of the monitor, against pid reuse.
    #[serde(default)]
    pub monitor_start_time: Option<u64>,
    pub init_pid: Option<i32>,
    /// Start time (clock ticks since boot) of init, against pid reuse.
    pub init_start_time: Option<u64>,
    pub dir: PathBuf,
    pub rootfs: PathBuf,
    /// False until the container exists in libcontainer: a record left false
    /// by a crash marks a half-created container to clean up.
    pub complete: bool,
}

impl ContainerRecord {
    /// CRI list filters: id and sandbox id by prefix (as crictl's short ids),
    /// every selector label equal.
    pub fn matches(
        &self,
        id: &str,
        sandbox_id: &str,
        labels: &std::collections::HashMap<String, String>,
    ) -> bool {
        self.id.starts_with(id)
            && self.sandbox_id.starts_with(sandbox_id)
            && labels
                .iter()
                .all(|(k, v)| self.config.labels.get(k) == Some(v))
    }
}

/// What the monitor records when the container's init exits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    pub exit_code: i32,
    /// Nanoseconds since the epoch.
    pub finished_at: i64,
    pub oom_killed: bool,
    /// Why we could not observe a real exit (e.g. the monitor died).
    pub reason: Option<String>,
}

pub fn save<T: Serialize>(dir: &Path, name: &str, value: &T) -> Result<(), Error> {
    let raw = serde_json::to_vec_pretty(value)
        .map_err(|e| Error::Internal(format!("encode {name}: {e}")))?;
    images::fsutil::write_atomic(&dir.join(name), &raw).map_err(Error::from)
}

pub fn load<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, Error> {
    match std::fs::read(path) {
        Ok(raw) => serde_json::from_slice(&raw)
            .map(Some)
            .map_err(|e| Error::Internal(format!("corrupt state file {}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("read", path)(e)),
    }
}

/// Removes an object's record directory. It is first renamed to a hidden
/// tombstone, atomically, so nothing can write into it while it is deleted
/// (e.g. an exit record arriving late) and a crash midway leaves no record.
pub fn remove_record_dir(dir: &Path) -> Result<(), Error> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(Error::Internal(format!("bad record dir {}", dir.display())));
    };
    let tomb = parent.join(format!(".{}.removing", name.to_string_lossy()));
    match std::fs::rename(dir, &tomb) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("remove", dir)(e)),
    }
    images::fsutil::remove_dir_all_if_exists(&tomb).map_err(Error::from)
}

/// A new 64-hex-digit object ID, as containerd makes them.
pub fn new_id() -> String {
    let a: u128 = rand::random();
    let b: u128 = rand::random();
    format!("{a:032x}{b:032x}")
}

pub fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
