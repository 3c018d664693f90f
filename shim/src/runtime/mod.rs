//! The runtime's state: sandboxes and containers in memory, mirrored to one
//! record file each, and recovered from them when the shim restarts.
//!
//! Layout: `<root>/shim/{sandboxes,containers}/<id>/meta.json` (persistent),
//! `<run>/{sandboxes,containers}/<id>/` (namespace pins, rootfs mounts) and
//! `<run>/libcontainer/<id>/` (the init's `notify.sock`; the name is
//! libcontainer's, which made containers before).

pub(crate) mod container;
pub(crate) mod exec;
mod exits;
pub(crate) mod host_inputs;
pub(crate) mod namespaces;
pub(crate) mod sandbox;
pub(crate) mod stats;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cri_proto::v1::{ContainerEventResponse, ContainerEventType};
use edge_config::ShimPaths;
use images::ImageStore;
use tokio::sync::broadcast;

use crate::error::Error;
use crate::mutex::lock;
use crate::state::{self, ContainerRecord, ExitRecord, META, SandboxRecord};

/// The container runtime behind CRI RuntimeService.
#[derive(Debug)]
pub struct Runtime {
    pub(crate) paths: ShimPaths,
    pub(crate) store: Arc<ImageStore>,
    pub(crate) sandboxes: Mutex<HashMap<String, SandboxEntry>>,
    pub(crate) containers: Mutex<HashMap<String, ContainerEntry>>,
    /// Sandbox names (namespace, name, uid, attempt) being created: see
    /// [`Claim`].
    pub(crate) creating_sandboxes: Mutex<std::collections::HashSet<String>>,
    /// Container names (sandbox, name, attempt) being created.
    pub(crate) creating_containers: Mutex<std::collections::HashSet<String>>,
    /// Compiled seccomp profiles, written into each bundle.
    pub(crate) seccomp: crate::seccomp::Cache,
    pub(crate) events: broadcast::Sender<ContainerEventResponse>,
    /// The `picolet` binary, run as `picolet monitor`.
    /// The sealed copy of picolet that `monitor_bin` names (kept open).
    pub(crate) monitor_bin: PathBuf,
    _sealed_exe: crate::host::exe::SealedExe,
    /// Forks the container monitors (`picolet monitor spawner`).
    pub(crate) spawner: crate::process::spawner_client::Spawner,
    /// Held by StartContainer from releasing the init until its STARTED
    /// event is out, and by each STOPPED emission: a process that exits at
    /// once (`true`) is never reported STOPPED before STARTED.
    pub(crate) event_order: tokio::sync::Mutex<()>,
    /// The monitors the shim hears exit, and their exits.
    pub(crate) monitors: Monitors,
    /// Pod networking.
    pub(crate) cni: crate::cni::Cni,
    /// Where pods' namespaces are pinned.
    pub(crate) pins: Arc<crate::runtime::namespaces::PinSpace>,
}

/// A container as the shim knows it: its record (`meta.json`) and what the
/// shim learned of it since it started, in one place, gone with it
/// (youki's `Container`, whose `refresh_status` is [`Runtime::state_of`]).
#[derive(Debug)]
pub(crate) struct ContainerEntry {
    pub(crate) record: ContainerRecord,
    /// Its exit once read: an exit is final, so listing a stopped
    /// container reads no file.
    pub(crate) exit: Option<ExitRecord>,
    /// Its STOPPED event went out (each is sent once).
    pub(crate) stopped_sent: bool,
    /// Its overlay rootfs is unmounted (once, at its exit).
    pub(crate) rootfs_released: bool,
    /// The last reading of its CPU time, for usage_nano_cores.
    pub(crate) cpu: Option<stats::CpuSample>,
}

impl ContainerEntry {
    pub(crate) fn new(record: ContainerRecord) -> Self {
        Self {
            record,
            exit: None,
            stopped_sent: false,
            rootfs_released: false,
            cpu: None,
        }
    }
}

/// A sandbox as the shim knows it: its record and its pod cgroup's last
/// CPU reading.
#[derive(Debug)]
pub(crate) struct SandboxEntry {
    pub(crate) record: SandboxRecord,
    pub(crate) cpu: Option<stats::CpuSample>,
}

impl SandboxEntry {
    pub(crate) fn new(record: SandboxRecord) -> Self {
        Self { record, cpu: None }
    }
}

/// A sandbox or container name being created, so two creations of one
/// name cannot both pass the check while neither is in its map yet;
/// released on drop, after the record is in the map (or the creation
/// failed). Creations of different names run side by side: there is no
/// lock across a create.
pub(crate) struct Claim<'a> {
    set: &'a Mutex<std::collections::HashSet<String>>,
    key: String,
}

impl<'a> Claim<'a> {
    /// Claims `key` unless it is claimed or `exists()`. `exists` looks at
    /// the records with `set` locked: a creation that finishes meanwhile
    /// enters its map before it drops its claim, so one of the two is seen.
    pub(crate) fn take(
        set: &'a Mutex<std::collections::HashSet<String>>,
        key: String,
        exists: impl FnOnce() -> bool,
    ) -> Option<Self> {
        let mut claimed = lock(set);
        if exists() || !claimed.insert(key.clone()) {
            return None;
        }
        Some(Self { set, key })
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        lock(self.set).remove(&self.key);
    }
}

/// Monitor exits kept for a receiver that has not read them yet.
pub(crate) const MONITOR_EXITS_KEPT: usize = 1024;

/// The monitors whose exit the shim hears at once (our children, reaped by
/// a task; after a restart, pidfds), and each exit as it comes.
///
/// A watched monitor is alive, and so is its container: the monitor records
/// the container's exit before it exits itself, and then [`Monitors::exited`]
/// tells `watch_exits` and StopContainer, which look at that container at
/// once instead of polling, and at no other (a mass teardown of n
/// containers costs n looks, not n²). A receiver that fell behind
/// ([`MONITOR_EXITS_KEPT`]) looks at everything once. So a listing of a
/// watched container costs one stat of its exit record and no /proc read:
/// at 30 idle pods the shim had opened ~2,900 exit records and /proc stats
/// a minute for answers it already had.
#[derive(Debug, Clone)]
pub(crate) struct Monitors {
    watched: Arc<Mutex<std::collections::HashSet<Arc<str>>>>,
    exits: broadcast::Sender<Arc<str>>,
}

impl Monitors {
    fn new() -> Self {
        Self {
            watched: Arc::default(),
            exits: broadcast::channel(MONITOR_EXITS_KEPT).0,
        }
    }

    /// The shim now hears when `id`'s monitor exits.
    pub(crate) fn watching(&self, id: &Arc<str>) {
        lock(&self.watched).insert(id.clone());
    }

    /// `id`'s monitor exited (or, after a restart, was found gone).
    pub(crate) fn exited(&self, id: Arc<str>) {
        lock(&self.watched).remove(&id);
        let _ = self.exits.send(id);
    }

    /// Whether `id`'s monitor is alive and watched.
    pub(crate) fn is_watched(&self, id: &str) -> bool {
        lock(&self.watched).contains(id)
    }

    /// Each monitor exit from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.exits.subscribe()
    }
}

impl Runtime {
    pub fn new(paths: ShimPaths, store: Arc<ImageStore>) -> Result<Self, Error> {
        let own = std::env::current_exe().map_err(Error::os("own binary path"))?;
        // What runs near containers runs from a sealed copy (crate::host::exe).
        let exe = crate::host::exe::SealedExe::copy_of(&own).map_err(|e| Error::Host {
            op: "the sealed copy of picolet",
            source: Box::new(e),
        })?;
        let monitor_bin = exe.path();
        for d in [
            paths.shim_dir().join("sandboxes"),
            paths.shim_dir().join("containers"),
        ] {
            std::fs::create_dir_all(&d).map_err(Error::io("create", &d))?;
        }
        // Private to root, and fixed at every start: records, bundles
        // (the pods' environment), the image store and upper dirs; in the
        // run dir, rootfs mounts, the pods' /dev/shm, attach sockets.
        for d in [
            paths.shim_dir(),
            paths.run_dir.join("sandboxes"),
            paths.run_dir.join("containers"),
            paths.run_dir.join("libcontainer"),
        ] {
            edge_config::private_dir(&d).map_err(Error::io("make private", &d))?;
        }
        let (events, _) = broadcast::channel(1024);
        let pins = Arc::new(crate::runtime::namespaces::PinSpace::new(&paths.run_dir));
        let located = pins.clone();
        let cni = crate::cni::Cni::new(
            paths.cni_conf_dir.clone(),
            paths.cni_bin_dirs.clone(),
            Arc::new(move |pin: &std::path::Path| located.find(pin)),
        );
        Ok(Self {
            cni,
            pins,
            paths,
            store,
            sandboxes: Mutex::new(HashMap::new()),
            containers: Mutex::new(HashMap::new()),
            creating_sandboxes: Mutex::new(std::collections::HashSet::new()),
            creating_containers: Mutex::new(std::collections::HashSet::new()),
            seccomp: crate::seccomp::Cache::default(),
            events,
            spawner: crate::process::spawner_client::Spawner::new(monitor_bin.clone())
                .map_err(Error::os("start the spawner thread"))?,
            monitor_bin,
            _sealed_exe: exe,
            event_order: tokio::sync::Mutex::new(()),
            monitors: Monitors::new(),
        })
    }

    pub(crate) fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.paths.shim_dir().join("sandboxes").join(id)
    }
    pub(crate) fn sandbox_run_dir(&self, id: &str) -> PathBuf {
        self.paths.run_dir.join("sandboxes").join(id)
    }
    pub(crate) fn container_dir(&self, id: &str) -> PathBuf {
        self.paths.shim_dir().join("containers").join(id)
    }
    pub(crate) fn container_run_dir(&self, id: &str) -> PathBuf {
        self.paths.run_dir.join("containers").join(id)
    }
    /// The container's attach socket, served by its monitor.
    pub(crate) fn attach_socket(&self, id: &str) -> PathBuf {
        self.container_run_dir(id).join("attach")
    }
    pub(crate) fn libcontainer_root(&self) -> PathBuf {
        self.paths.run_dir.join("libcontainer")
    }

    /// Loads every record; finishes off objects a crash left half-created.
    pub async fn recover(&self) -> Result<(), Error> {
        for mut sb in load_all::<SandboxRecord>(&self.paths.shim_dir().join("sandboxes"))? {
            if sb.complete {
                self.recheck_ready(&mut sb)?;
                lock(&self.sandboxes).insert(sb.id.clone(), SandboxEntry::new(sb));
            } else {
                tracing::warn!(sandbox = %sb.id, "cleaning up half-created sandbox");
                if let Err(e) = self.destroy_sandbox_resources(&sb).await {
                    // Its record stays: the next start tries again.
                    tracing::error!(sandbox = %sb.id, error = %e, "cannot clean up half-created sandbox");
                }
            }
        }
        for c in load_all::<ContainerRecord>(&self.paths.shim_dir().join("containers"))? {
            if c.complete {
                c.images().for_each(|id| self.store.pin(&id));
                // Its monitor is no longer our child: watch it by pidfd.
                if let Some(pid) = c.monitor_pid {
                    let (monitors, exited) = (self.monitors.clone(), self.monitors.clone());
                    let id: Arc<str> = c.id.as_str().into();
                    let watched = id.clone();
                    tokio::spawn(exits::notify_on_exit(
                        pid,
                        c.monitor_start_time,
                        move || monitors.watching(&watched),
                        move || exited.exited(id),
                    ));
                }
                lock(&self.containers).insert(c.id.clone(), ContainerEntry::new(c));
            } else {
                tracing::warn!(container = %c.id, "cleaning up half-created container");
                self.destroy_container_resources(&c).await?;
            }
        }
        Ok(())
    }

    pub(crate) fn emit(&self, container_id: &str, kind: ContainerEventType) {
        let c = self.container(container_id).ok();
        let sandbox = c.as_ref().and_then(|c| self.sandbox(&c.sandbox_id).ok());
        let _ = self.events.send(ContainerEventResponse {
            container_id: container_id.to_string(),
            container_event_type: kind as i32,
            created_at: state::now_nanos(),
            pod_sandbox_status: sandbox.map(|s| self.sandbox_status_of(&s)),
            containers_statuses: c
                .map(|c| vec![self.container_status_of(&c)])
                .unwrap_or_default(),
        });
    }

    /// Sends the STOPPED event of a container once.
    pub(crate) async fn emit_stopped_once(&self, container_id: &str) {
        let _order = self.event_order.lock().await;
        let first = lock(&self.containers)
            .get_mut(container_id)
            .is_some_and(|e| !std::mem::replace(&mut e.stopped_sent, true));
        if first {
            self.emit(container_id, ContainerEventType::ContainerStoppedEvent);
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<ContainerEventResponse> {
        self.events.subscribe()
    }
}

fn load_all<T: serde::de::DeserializeOwned>(dir: &std::path::Path) -> Result<Vec<T>, Error> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(Error::io("list", dir))?;
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with('.') {
            // A tombstone a crash left mid-removal.
            let _ = images::fsutil::remove_dir_all_if_exists(&e.path());
            continue;
        }
        match state::load::<T>(&e.path().join(META)) {
            Ok(Some(r)) => out.push(r),
            Ok(None) => {
                // A directory without a record: created before the record was
                // written. Nothing else can reference it.
                tracing::warn!(dir = %e.path().display(), "removing directory without a record");
                let _ = images::fsutil::remove_dir_all_if_exists(&e.path());
            }
            Err(err) => tracing::error!(error = %err, "skipping unreadable record"),
        }
    }
    Ok(out)
}
