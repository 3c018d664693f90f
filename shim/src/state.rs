//! Persistent records of sandboxes and containers, one JSON file per object,
//! written atomically (temp + fsync + rename). CRI configs are stored as
//! received, so a restarted shim answers exactly as before.
//!
//! Two kinds of write. What must outlive a power cut is [`save`]d durably
//! before the RPC that made it returns: the finished sandbox, the started
//! container, the exit. A reboot ends every container, so what a container
//! record must carry across one is that it ran (kubelet does not run a
//! `restartPolicy: Never` container twice) and how it ended. The records
//! written on the way there only let a crashed shim undo a half-made object
//! or find a created one, and what they name (pinned namespaces, mounts,
//! processes) a reboot ends anyway: they are [`save_volatile`]d, atomic for
//! other processes but not fsynced. That includes the created container: a
//! power cut before its start may lose it, and kubelet, finding no such
//! container, creates it again. Each fsync here is a device flush (2–8 ms
//! on this VM's disk); a pod paid eight of them for records that needed none.
//! StartContainer flushes its record while the init is released to exec
//! the container ([`stage`]) and renames it into place once the start succeeded.

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
    /// The pod's own user namespace, pinned (`userns_options` mode POD);
    /// none in records written before.
    #[serde(default)]
    pub userns: Option<PathBuf>,
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
    /// Who the container's process runs as, as its spec says
    /// (ContainerStatus `user`); none in records written before.
    #[serde(default)]
    pub user: Option<ProcessUser>,
    /// The images its image volumes (CRI `Mount.image`) show, by ID:
    /// pinned with its own while it exists.
    #[serde(default)]
    pub image_volumes: Vec<String>,
    /// False until the container's init is made: a record left false
    /// by a crash marks a half-created container to clean up.
    pub complete: bool,
}

impl ContainerRecord {
    /// Every image it uses: its own and its image volumes' (pinned in the
    /// store while it exists).
    pub fn images(&self) -> impl Iterator<Item = images::Digest> + '_ {
        std::iter::once(&self.image_id)
            .chain(&self.image_volumes)
            .filter_map(|d| images::Digest::parse(d).ok())
    }

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

/// The spec's `process.user`: what ContainerStatus reports as `user`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessUser {
    pub uid: u32,
    pub gid: u32,
    pub additional_gids: Vec<u32>,
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

/// Writes a record durably: temp, fsync, rename, fsync of the folder.
pub fn save<T: Serialize>(dir: &Path, name: &str, value: &T) -> Result<(), Error> {
    let raw = encode(name, value)?;
    images::fsutil::write_atomic(&dir.join(name), &raw).map_err(Error::from)
}

/// [`save`] on tokio's blocking pool. Its two flushes wait for the
/// journal commit, milliseconds each, and far longer when a hundred pods
/// are made at once; on an async worker (one per core) that wait stalled
/// every other RPC of the shim and left the CPU idle (a cold
/// start).
pub async fn save_async<T: Serialize>(dir: &Path, name: &str, value: &T) -> Result<(), Error> {
    let raw = encode(name, value)?;
    let path = dir.join(name);
    tokio::task::spawn_blocking(move || images::fsutil::write_atomic(&path, &raw))
        .await
        .map_err(Error::task(format!("write {name}")))?
        .map_err(Error::from)
}

/// Writes a record atomically but not durably (module docs): a power cut
/// may leave the previous record, none, or an empty file, which [`load`]
/// reads as none.
pub fn save_volatile<T: Serialize>(dir: &Path, name: &str, value: &T) -> Result<(), Error> {
    let raw = encode(name, value)?;
    images::fsutil::write_atomic_volatile(&dir.join(name), &raw).map_err(Error::from)
}

/// [`save`] in two halves ([`images::fsutil::stage_atomic`]): flushed now,
/// in place once [`images::fsutil::Staged::commit`]ted.
pub fn stage<T: Serialize>(
    dir: &Path,
    name: &str,
    value: &T,
) -> Result<images::fsutil::Staged, Error> {
    let raw = encode(name, value)?;
    images::fsutil::stage_atomic(&dir.join(name), &raw).map_err(Error::from)
}

fn encode<T: Serialize>(name: &str, value: &T) -> Result<Vec<u8>, Error> {
    serde_json::to_vec_pretty(value).map_err(Error::json(format!("encode {name}")))
}

/// Reads a record; an empty file is none: a [`save_volatile`]d record whose
/// data a power cut lost after its rename reached the disk.
pub fn load<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, Error> {
    match std::fs::read(path) {
        Ok(raw) if raw.is_empty() => Ok(None),
        Ok(raw) => serde_json::from_slice(&raw)
            .map(Some)
            .map_err(|source| Error::Corrupt {
                path: path.to_path_buf(),
                source,
            }),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volatile_record_reads_back_and_an_empty_one_is_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        save_volatile(dir.path(), META, &vec![1, 2, 3]).expect("save");
        assert_eq!(
            load::<Vec<i32>>(&dir.path().join(META)).expect("ok"),
            Some(vec![1, 2, 3])
        );
        save(dir.path(), EXIT, &7).expect("save");
        assert_eq!(load::<i32>(&dir.path().join(EXIT)).expect("ok"), Some(7));
        // What a power cut can leave of a volatile record: its name, no data.
        std::fs::write(dir.path().join(META), b"").expect("write");
        assert_eq!(load::<Vec<i32>>(&dir.path().join(META)).expect("ok"), None);
        // Anything else unreadable stays an error.
        std::fs::write(dir.path().join(META), b"{").expect("write");
        assert!(load::<Vec<i32>>(&dir.path().join(META)).is_err());
        // No temporary file is left beside them.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("ok")
            .map(|e| e.expect("ok").file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }
}
