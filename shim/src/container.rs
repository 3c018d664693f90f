//! Containers: CRI config → OCI spec → `picolet monitor` (libcontainer
//! create) → start/stop/remove through `Container::load`, which never forks.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use cri_proto::v1::{
    Container, ContainerConfig, ContainerEventType, ContainerFilter, ContainerState,
    ContainerStatus, ImageSpec, LinuxContainerResources, PodSandboxConfig,
};
use libcontainer::container::Container as LcContainer;
use nix::mount::{MsFlags, mount};
use nix::sys::signal::Signal;
use tokio::io::AsyncBufReadExt;

use crate::error::Error;
use crate::host::proc_start_time;
use crate::monitor::Handshake;
use crate::runtime::Runtime;
use crate::spec::{self, SandboxView, SpecInput};
use crate::state::{self, ContainerRecord, EXIT, ExitRecord, META, SandboxRecord};

impl Runtime {
    /// A snapshot of every container record.
    pub(crate) fn all_containers(&self) -> Vec<ContainerRecord> {
        self.containers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    pub(crate) fn container(&self, id: &str) -> Result<ContainerRecord, Error> {
        self.containers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("container {id:?} not found")))
    }

    fn put(&self, rec: ContainerRecord) -> Result<(), Error> {
        state::save(&rec.dir, META, &rec)?;
        self.containers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(rec.id.clone(), rec);
        Ok(())
    }

    pub async fn create_container(
        &self,
        sandbox_id: &str,
        config: ContainerConfig,
        _sandbox_config: Option<PodSandboxConfig>,
    ) -> Result<String, Error> {
        let meta = config
            .metadata
            .clone()
            .ok_or_else(|| Error::InvalidArgument("config.metadata: required".into()))?;
        if meta.name.is_empty() {
            return Err(Error::InvalidArgument(
                "config.metadata.name: required".into(),
            ));
        }
        let image_ref = config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        if image_ref.is_empty() {
            return Err(Error::InvalidArgument(
                "config.image.image: required".into(),
            ));
        }
        let _guard = self.create_lock.lock().await;
        let sandbox = self
            .sandboxes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(sandbox_id)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("pod sandbox {sandbox_id:?} not found")))?;
        if !sandbox.ready {
            return Err(Error::FailedPrecondition(format!(
                "pod sandbox {sandbox_id} is not ready"
            )));
        }
        let clash = self
            .containers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .any(|c| {
                c.sandbox_id == sandbox_id
                    && c.config
                        .metadata
                        .as_ref()
                        .is_some_and(|m| m.name == meta.name && m.attempt == meta.attempt)
            });
        if clash {
            return Err(Error::AlreadyExists(format!(
                "container {:?} attempt {} exists in sandbox {sandbox_id}",
                meta.name, meta.attempt
            )));
        }
        let image = self
            .store
            .get(&image_ref)
            .ok_or_else(|| Error::NotFound(format!("image {image_ref:?} not found")))?;
        let image_config = self.store.config(&image)?;

        let id = state::new_id();
        let dir = self.container_dir(&id);
        let run_dir = self.container_run_dir(&id);
        let rootfs = run_dir.join("rootfs");
        let log_path = match (
            sandbox.config.log_directory.as_str(),
            config.log_path.as_str(),
        ) {
            (d, p) if !d.is_empty() && !p.is_empty() => Some(Path::new(d).join(p)),
            _ => None,
        };
        let cgroup_parent = sandbox
            .config
            .linux
            .as_ref()
            .map(|l| l.cgroup_parent.clone())
            .unwrap_or_default();
        let cgroup = format!(
            "{}/{id}",
            if cgroup_parent.is_empty() {
                "/picolet"
            } else {
                cgroup_parent.trim_end_matches('/')
            }
        );
        let mut rec = ContainerRecord {
            id: id.clone(),
            sandbox_id: sandbox_id.to_string(),
            config: config.clone(),
            image_id: image.id.to_string(),
            image_ref: image
                .repo_digests
                .first()
                .cloned()
                .unwrap_or_else(|| image.id.to_string()),
            image_name: image.repo_tags.first().cloned().unwrap_or_default(),
            created_at: state::now_nanos(),
            started_at: None,
            log_path,
            stop_signal: image_config
                .config()
                .as_ref()
                .and_then(|c| c.stop_signal().clone()),
            cgroup,
            monitor_pid: None,
            monitor_start_time: None,
            init_pid: None,
            init_start_time: None,
            dir: dir.clone(),
            rootfs: rootfs.clone(),
            complete: false,
        };
        fs::create_dir_all(&dir)
            .map_err(|e| Error::Internal(format!("create {}: {e}", dir.display())))?;
        state::save(&dir, META, &rec)?;
        match self
            .setup_container(&mut rec, &sandbox, &image, &image_config)
            .await
        {
            Ok(()) => {
                rec.complete = true;
                self.store.pin(&image.id);
                self.put(rec)?;
                self.emit(&id, ContainerEventType::ContainerCreatedEvent);
                Ok(id)
            }
            Err(e) => {
                if let Err(cleanup) = self.destroy_container_resources(&rec).await {
                    tracing::error!(container = %id, error = %cleanup, "cleanup after failed CreateContainer");
                }
                Err(e)
            }
        }
    }

    async fn setup_container(
        &self,
        rec: &mut ContainerRecord,
        sandbox: &SandboxRecord,
        image: &images::ImageRecord,
        image_config: &oci_spec::image::ImageConfiguration,
    ) -> Result<(), Error> {
        let upper = rec.dir.join("upper");
        let work = rec.dir.join("work");
        for d in [&upper, &work, &rec.rootfs] {
            fs::create_dir_all(d)
                .map_err(|e| Error::Internal(format!("create {}: {e}", d.display())))?;
        }
        let opts = images::overlay_options(&self.store.layer_dirs(image), &upper, &work);
        mount(
            Some("overlay"),
            &rec.rootfs,
            Some("overlay"),
            MsFlags::empty(),
            Some(opts.as_str()),
        )
        .map_err(|e| Error::Internal(format!("mount rootfs at {}: {e}", rec.rootfs.display())))?;

        let devices = crate::host_inputs::resolve_devices(&rec.config)?;
        for (i, m) in rec.config.mounts.iter().enumerate() {
            // As containerd: a missing host path becomes a directory.
            if !m.host_path.is_empty() && !Path::new(&m.host_path).exists() {
                fs::create_dir_all(&m.host_path).map_err(|e| {
                    Error::InvalidArgument(format!(
                        "mounts[{i}].host_path: cannot create {}: {e}",
                        m.host_path
                    ))
                })?;
            }
        }
        crate::host_inputs::check_mount_propagation(&rec.config)?;
        let view = SandboxView {
            hostname: sandbox.config.hostname.clone(),
            netns: sandbox.netns.clone(),
            ipcns: sandbox.ipcns.clone(),
            utsns: sandbox.utsns.clone(),
            pidns: Runtime::pod_pidns(sandbox),
            target_pidns: self.target_pidns(sandbox, &rec.config),
            shm: sandbox
                .shm
                .clone()
                .unwrap_or_else(|| PathBuf::from("/dev/shm")),
            hosts: sandbox.dir.join("hosts"),
            resolv_conf: sandbox.dir.join("resolv.conf"),
            hostname_file: sandbox.dir.join("hostname"),
            cgroup_parent: sandbox
                .config
                .linux
                .as_ref()
                .map(|l| l.cgroup_parent.clone())
                .unwrap_or_default(),
        };
        let passwd = crate::host_inputs::read_image_file(&rec.rootfs, "etc/passwd");
        let group = crate::host_inputs::read_image_file(&rec.rootfs, "etc/group");
        let spec = spec::build(&SpecInput {
            id: &rec.id,
            config: &rec.config,
            image: image_config,
            sandbox: &view,
            rootfs: &rec.rootfs,
            passwd: passwd.as_deref(),
            group: group.as_deref(),
            devices: &devices,
            min_oom_score_adj: crate::host_inputs::own_oom_score_adj(),
            cap_bounding: crate::host_inputs::own_cap_bounding(),
            localhost_seccomp: crate::host_inputs::load_localhost_seccomp(&rec.config)?,
            hugetlb: crate::host_inputs::hugetlb_available(),
        })?;
        let bundle = rec.dir.join("bundle");
        fs::create_dir_all(&bundle)
            .map_err(|e| Error::Internal(format!("create {}: {e}", bundle.display())))?;
        let raw = serde_json::to_vec_pretty(&spec)
            .map_err(|e| Error::Internal(format!("encode spec: {e}")))?;
        images::fsutil::write_atomic(&bundle.join("config.json"), &raw)?;

        let mut cmd = tokio::process::Command::new(&self.monitor_bin);
        cmd.arg("monitor")
            .arg("create")
            .arg("--id")
            .arg(&rec.id)
            .arg("--bundle")
            .arg(&bundle)
            .arg("--state-root")
            .arg(self.libcontainer_root())
            .arg("--exit-file")
            .arg(rec.dir.join(EXIT))
            .arg("--cgroup")
            .arg(&rec.cgroup);
        if let Some(l) = &rec.log_path {
            cmd.arg("--log").arg(l);
        }
        let monitor_log = fs::File::create(rec.dir.join("monitor.log"))
            .map_err(|e| Error::Internal(format!("create monitor log: {e}")))?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(monitor_log)
            // Errors only: libcontainer also logs from inside the container's
            // init, after its stderr became the container's.
            .env("PICOLET_LOG", "error")
            // Its own process group: signals to the shim's group leave it alone.
            .process_group(0)
            .kill_on_drop(false);
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::Internal(format!("start monitor: {e}")))?;
        rec.monitor_pid = child.id().map(|p| p as i32);
        rec.monitor_start_time = rec.monitor_pid.and_then(proc_start_time);
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::Internal("monitor stdout".into()))?;
        let mut line = String::new();
        let read = tokio::time::timeout(
            Duration::from_secs(60),
            tokio::io::BufReader::new(stdout).read_line(&mut line),
        )
        .await;
        // Reap the monitor whenever it exits, so it never lingers as a
        // zombie, and have `watch_exits` look at once: the container exited.
        let exited = self.monitor_exited.clone();
        tokio::spawn(async move {
            let _ = child.wait().await;
            exited.notify_one();
        });
        match read {
            Ok(Ok(_)) => {}
            _ => {
                return Err(Error::Internal(format!(
                    "monitor did not report; see {}",
                    rec.dir.join("monitor.log").display()
                )));
            }
        }
        let hs: Handshake = serde_json::from_str(line.trim()).map_err(|_| {
            Error::Internal(format!(
                "monitor said {line:?}; see {}",
                rec.dir.join("monitor.log").display()
            ))
        })?;
        if let Some(err) = hs.error {
            let detail = fs::read_to_string(rec.dir.join("monitor.log")).unwrap_or_default();
            let detail = detail
                .lines()
                .filter(|l| l.contains("ERROR"))
                .collect::<Vec<_>>()
                .join(" | ");
            return Err(Error::Internal(
                format!("create container: {err} {detail}")
                    .trim_end()
                    .to_string(),
            ));
        }
        rec.init_pid = hs.pid;
        rec.init_start_time = hs.start_time;
        Ok(())
    }

    /// The pid namespace of the container a TARGET pid mode names.
    fn target_pidns(&self, sandbox: &SandboxRecord, config: &ContainerConfig) -> Option<PathBuf> {
        let target = config
            .linux
            .as_ref()?
            .security_context
            .as_ref()?
            .namespace_options
            .as_ref()
            .map(|n| n.target_id.clone())
            .filter(|t| !t.is_empty())?;
        let rec = self
            .container(&target)
            .ok()
            .filter(|c| c.sandbox_id == sandbox.id)?;
        let (pid, start) = (rec.init_pid?, rec.init_start_time?);
        (proc_start_time(pid) == Some(start)).then(|| PathBuf::from(format!("/proc/{pid}/ns/pid")))
    }

    /// Kills, deletes and unmounts whatever exists of a container.
    pub(crate) async fn destroy_container_resources(
        &self,
        rec: &ContainerRecord,
    ) -> Result<(), Error> {
        let lc_dir = self.libcontainer_root().join(&rec.id);
        if lc_dir.exists() {
            let dir = lc_dir.clone();
            let res = tokio::task::spawn_blocking(move || -> Result<(), String> {
                let mut c = LcContainer::load(dir).map_err(|e| e.to_string())?;
                c.delete(true).map_err(|e| e.to_string())
            })
            .await?;
            if let Err(e) = res {
                tracing::warn!(container = %rec.id, error = %e, "libcontainer delete");
                let _ = images::fsutil::remove_dir_all_if_exists(&lc_dir);
            }
        }
        crate::namespaces::release(&rec.rootfs)?;
        images::fsutil::remove_dir_all_if_exists(&self.container_run_dir(&rec.id))?;
        crate::state::remove_record_dir(&rec.dir)?;
        Ok(())
    }

    pub async fn start_container(&self, id: &str) -> Result<(), Error> {
        let mut rec = self.container(id)?;
        let (st, _) = self.state_of(&rec);
        if st != ContainerState::ContainerCreated {
            return Err(Error::FailedPrecondition(format!(
                "container {id} is {} and cannot be started",
                state_name(st)
            )));
        }
        let dir = self.libcontainer_root().join(id);
        // Taken before the start: a quick process may finish before start returns.
        let started_at = state::now_nanos();
        tokio::task::spawn_blocking(move || -> Result<(), String> {
            let mut c = LcContainer::load(dir).map_err(|e| e.to_string())?;
            c.start().map_err(|e| e.to_string())
        })
        .await?
        .map_err(|e| Error::Internal(format!("start container {id}: {e}")))?;
        rec.started_at = Some(started_at);
        self.put(rec)?;
        self.emit(id, ContainerEventType::ContainerStartedEvent);
        Ok(())
    }

    /// The exit record, if the container has exited.
    fn exit_of(&self, rec: &ContainerRecord) -> Option<ExitRecord> {
        let cached = self
            .exits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&rec.id)
            .cloned();
        if cached.is_some() {
            return cached;
        }
        let exit = state::load::<ExitRecord>(&rec.dir.join(EXIT))
            .ok()
            .flatten()?;
        self.remember_exit(&rec.id, &exit);
        Some(exit)
    }

    fn remember_exit(&self, id: &str, exit: &ExitRecord) {
        self.exits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), exit.clone());
    }

    /// Current state; repairs the record when the monitor died unseen.
    pub(crate) fn state_of(&self, rec: &ContainerRecord) -> (ContainerState, Option<ExitRecord>) {
        if !rec.complete {
            return (ContainerState::ContainerUnknown, None);
        }
        if let Some(exit) = self.exit_of(rec) {
            return (ContainerState::ContainerExited, Some(exit));
        }
        // A pid counts only with the start time we recorded: pids get reused.
        let alive = |pid: Option<i32>, start: Option<u64>| {
            pid.is_some_and(|p| start.is_some() && proc_start_time(p) == start)
        };
        let init_alive = alive(rec.init_pid, rec.init_start_time);
        let monitor_alive = alive(rec.monitor_pid, rec.monitor_start_time);
        if !init_alive && !monitor_alive {
            // Nobody will ever record this exit: do it ourselves.
            let exit = ExitRecord {
                exit_code: 255,
                finished_at: state::now_nanos(),
                oom_killed: false,
                reason: Some("the container's monitor exited without recording its exit".into()),
            };
            let _ = state::save(&rec.dir, EXIT, &exit);
            self.remember_exit(&rec.id, &exit);
            return (ContainerState::ContainerExited, Some(exit));
        }
        if rec.started_at.is_some() {
            (ContainerState::ContainerRunning, None)
        } else {
            (ContainerState::ContainerCreated, None)
        }
    }

    async fn wait_exit(&self, rec: &ContainerRecord, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.state_of(rec).0 == ContainerState::ContainerExited {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn signal(&self, id: &str, sig: Signal, all: bool) -> Result<(), Error> {
        let dir = self.libcontainer_root().join(id);
        let mut c = LcContainer::load(dir)
            .map_err(|e| Error::Internal(format!("load container {id}: {e}")))?;
        c.kill(sig, all)
            .map_err(|e| Error::Internal(format!("signal {sig} to container {id}: {e}")))
    }

    /// Stop signal, then SIGKILL after `timeout` seconds. Idempotent.
    pub async fn stop_container(&self, id: &str, timeout: i64) -> Result<(), Error> {
        let rec = self.container(id)?;
        if self.state_of(&rec).0 == ContainerState::ContainerExited {
            return Ok(());
        }
        if timeout > 0 {
            let sig = rec
                .stop_signal
                .as_deref()
                .and_then(parse_signal)
                .unwrap_or(Signal::SIGTERM);
            if let Err(e) = self.signal(id, sig, false) {
                tracing::debug!(container = %id, error = %e, "stop signal");
            }
            if self
                .wait_exit(&rec, Duration::from_secs(timeout as u64))
                .await
            {
                return Ok(());
            }
        }
        if let Err(e) = self.signal(id, Signal::SIGKILL, true) {
            tracing::debug!(container = %id, error = %e, "SIGKILL");
        }
        if !self.wait_exit(&rec, Duration::from_secs(10)).await {
            return Err(Error::Internal(format!(
                "container {id} did not exit after SIGKILL"
            )));
        }
        Ok(())
    }

    /// Removes a container, stopping it first if needed. Idempotent.
    pub async fn remove_container(&self, id: &str) -> Result<(), Error> {
        let Ok(rec) = self.container(id) else {
            return Ok(());
        };
        if self.state_of(&rec).0 != ContainerState::ContainerExited {
            self.stop_container(id, 0).await?;
        }
        self.emit_stopped_once(id);
        self.destroy_container_resources(&rec).await?;
        if let Ok(d) = images::Digest::parse(&rec.image_id) {
            self.store.unpin(&d);
        }
        self.emit(id, ContainerEventType::ContainerDeletedEvent);
        self.containers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        Ok(())
    }

    pub(crate) fn container_status_of(&self, rec: &ContainerRecord) -> ContainerStatus {
        let (st, exit) = self.state_of(rec);
        let (reason, message) = match &exit {
            Some(e) if e.oom_killed => ("OOMKilled".to_string(), String::new()),
            Some(e) if e.exit_code == 0 => ("Completed".to_string(), String::new()),
            Some(e) => ("Error".to_string(), e.reason.clone().unwrap_or_default()),
            None => (String::new(), String::new()),
        };
        ContainerStatus {
            id: rec.id.clone(),
            metadata: rec.config.metadata.clone(),
            state: st as i32,
            created_at: rec.created_at,
            started_at: rec.started_at.unwrap_or(0),
            finished_at: exit.as_ref().map_or(0, |e| e.finished_at),
            exit_code: exit.as_ref().map_or(0, |e| e.exit_code),
            // As containerd: the image's tag (kubelet shows it as the
            // container status' image), its ID when it has none.
            image: Some(ImageSpec {
                image: if rec.image_name.is_empty() {
                    rec.image_id.clone()
                } else {
                    rec.image_name.clone()
                },
                user_specified_image: rec
                    .config
                    .image
                    .as_ref()
                    .map(|i| i.image.clone())
                    .unwrap_or_default(),
                ..Default::default()
            }),
            image_ref: rec.image_ref.clone(),
            image_id: rec.image_id.clone(),
            reason,
            message,
            labels: rec.config.labels.clone(),
            annotations: rec.config.annotations.clone(),
            mounts: rec.config.mounts.clone(),
            log_path: rec
                .log_path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            resources: rec
                .config
                .linux
                .as_ref()
                .and_then(|l| l.resources.clone())
                .map(|r| cri_proto::v1::ContainerResources {
                    linux: Some(r),
                    ..Default::default()
                }),
            user: None,
        }
    }

    pub fn container_status(&self, id: &str) -> Result<ContainerStatus, Error> {
        Ok(self.container_status_of(&self.container(id)?))
    }

    pub fn list_containers(&self, filter: Option<ContainerFilter>) -> Vec<Container> {
        let f = filter.unwrap_or_default();
        let recs = self.all_containers();
        let mut out: Vec<Container> = recs
            .iter()
            .filter(|c| c.matches(&f.id, &f.pod_sandbox_id, &f.label_selector))
            .map(|c| (c, self.state_of(c).0))
            .filter(|(_, st)| f.state.as_ref().is_none_or(|s| s.state == *st as i32))
            .map(|(c, st)| Container {
                id: c.id.clone(),
                pod_sandbox_id: c.sandbox_id.clone(),
                metadata: c.config.metadata.clone(),
                image: Some(ImageSpec {
                    image: c.image_id.clone(),
                    ..Default::default()
                }),
                image_ref: c.image_ref.clone(),
                state: st as i32,
                created_at: c.created_at,
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
                image_id: c.image_id.clone(),
            })
            .collect();
        out.sort_by_key(|c| c.created_at);
        out
    }

    /// Asks the monitor to reopen the log file (after rotation) and returns
    /// once it has: the log path exists and the monitor holds that file open,
    /// as containerd returns after its own writer reopened it (critest reads
    /// the new file right after the call).
    pub async fn reopen_container_log(&self, id: &str) -> Result<(), Error> {
        let rec = self.container(id)?;
        if self.state_of(&rec).0 != ContainerState::ContainerRunning {
            return Err(Error::FailedPrecondition(format!(
                "container {id} is not running"
            )));
        }
        let pid = rec
            .monitor_pid
            .ok_or_else(|| Error::Internal("no monitor".into()))?;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGUSR1)
            .map_err(|e| Error::Internal(format!("signal monitor: {e}")))?;
        let Some(log) = &rec.log_path else {
            return Ok(()); // no log: nothing to wait for
        };
        // The monitor reopens as soon as poll(2) returns on its signalfd;
        // 5 s is for a loaded device.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !holds_open(pid, log) {
            if Instant::now() > deadline {
                return Err(Error::Internal(format!(
                    "the monitor of container {id} did not reopen {} within 5 s (see its monitor.log)",
                    log.display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(())
    }

    /// Updates the live cgroup (cgroup v1 or v2 files) and the stored config.
    pub fn update_container_resources(
        &self,
        id: &str,
        r: LinuxContainerResources,
    ) -> Result<(), Error> {
        let mut rec = self.container(id)?;
        crate::cgroupfs::apply(&rec.cgroup, &r)?;
        if let Some(l) = rec.config.linux.as_mut() {
            l.resources = Some(r);
        }
        self.put(rec)
    }

    /// Emits STOPPED events for containers whose exit appeared: at once
    /// when a monitor exits (our child, or its pidfd after a shim restart),
    /// and every few seconds anyway (a monitor killed with its container
    /// still running, kernels without pidfds). Runs forever.
    pub async fn watch_exits(self: std::sync::Arc<Self>) {
        loop {
            let recs = self.all_containers();
            let known = |id: &String| recs.iter().any(|r| &r.id == id);
            self.stopped_sent
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(known);
            self.exits
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|id, _| known(id));
            for r in recs {
                if self.state_of(&r).0 == ContainerState::ContainerExited {
                    self.emit_stopped_once(&r.id);
                }
            }
            tokio::select! {
                () = self.monitor_exited.notified() => {}
                () = tokio::time::sleep(Duration::from_secs(5)) => {}
            }
        }
    }
}

fn state_name(s: ContainerState) -> &'static str {
    match s {
        ContainerState::ContainerCreated => "created",
        ContainerState::ContainerRunning => "running",
        ContainerState::ContainerExited => "exited",
        ContainerState::ContainerUnknown => "unknown",
    }
}

/// `SIGTERM`, `TERM` or `15`.
pub fn parse_signal(s: &str) -> Option<Signal> {
    if let Ok(n) = s.parse::<i32>() {
        return Signal::try_from(n).ok();
    }
    let up = s.to_ascii_uppercase();
    let name = if up.starts_with("SIG") {
        up
    } else {
        format!("SIG{up}")
    };
    name.parse().ok()
}

/// Whether process `pid` has the file now at `path` open (same device and
/// inode through one of its /proc fd links).
fn holds_open(pid: i32, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(want) = fs::metadata(path) else {
        return false;
    };
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        fs::metadata(fd.path()).is_ok_and(|m| m.dev() == want.dev() && m.ino() == want.ino())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals() {
        assert_eq!(parse_signal("SIGTERM"), Some(Signal::SIGTERM));
        assert_eq!(parse_signal("quit"), Some(Signal::SIGQUIT));
        assert_eq!(parse_signal("9"), Some(Signal::SIGKILL));
        assert_eq!(parse_signal("SIGNOPE"), None);
    }
}
