//! CreateContainer: CRI config → OCI spec → a `picolet monitor` that
//! creates the container (`crate::process::init`) and reports its init PID; and
//! the cleanup of what a failed or removed container had.

use std::ffi::OsString;
use std::fs;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::time::Duration;

use cri_proto::v1::{ContainerConfig, ContainerEventType, PodSandboxConfig};
use nix::fcntl::OFlag;
use tokio::io::{AsyncBufReadExt, AsyncRead};

use crate::error::Error;
use crate::host::proc_start_time;
use crate::mutex::lock;
use crate::process::monitor::Handshake;
use crate::runtime::{Claim, Runtime};
use crate::spec::{self, SandboxView, SpecInput};
use crate::state::{self, ContainerRecord, EXIT, META, SandboxRecord};

/// A started monitor: its pid, its stdout (the handshake) and its exit.
struct Launched {
    pid: i32,
    stdout: Pin<Box<dyn AsyncRead + Send>>,
    exited: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl Runtime {
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
        let key = format!("{sandbox_id}\0{}\0{}", meta.name, meta.attempt);
        let _claim = Claim::take(&self.creating_containers, key, || {
            lock(&self.containers).values().map(|e| &e.record).any(|c| {
                c.sandbox_id == sandbox_id
                    && c.config
                        .metadata
                        .as_ref()
                        .is_some_and(|m| m.name == meta.name && m.attempt == meta.attempt)
            })
        })
        .ok_or_else(|| {
            Error::AlreadyExists(format!(
                "container {:?} attempt {} exists in sandbox {sandbox_id}",
                meta.name, meta.attempt
            ))
        })?;
        let sandbox = self.sandbox(sandbox_id)?;
        if !sandbox.ready {
            return Err(Error::FailedPrecondition(format!(
                "pod sandbox {sandbox_id} is not ready"
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
            user: None,
            image_volumes: Vec::new(),
            complete: false,
        };
        fs::create_dir_all(&dir).map_err(Error::io("create", &dir))?;
        // Volatile (`state` docs): a crash leaves it incomplete, to undo.
        state::save_volatile(&dir, META, &rec)?;
        let made = self
            .setup_container(&mut rec, &sandbox, &image, &image_config)
            .await
            .and_then(|()| {
                rec.complete = true;
                // Not durable (`state` docs): StartContainer's record is.
                let saved = state::save_volatile(&dir, META, &rec);
                // Unsaved, it is undone as a half-made one.
                rec.complete = saved.is_ok();
                saved
            });
        match made {
            Ok(()) => {
                rec.images().for_each(|d| self.store.pin(&d));
                self.keep(rec);
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

    /// Mounts each image volume (CRI `Mount.image`, kubelet's `image`
    /// volume source) read-only under the container's run dir, and returns
    /// the container's config with them as read-only binds from there; the
    /// images are recorded, to be pinned with the container's own.
    fn mount_image_volumes(&self, rec: &mut ContainerRecord) -> Result<ContainerConfig, Error> {
        let mut config = rec.config.clone();
        for (i, m) in config.mounts.iter_mut().enumerate() {
            let Some(wanted) = m.image.take() else {
                continue;
            };
            let image = self.store.get(&wanted.image).ok_or_else(|| {
                Error::NotFound(format!(
                    "mounts[{i}].image: {:?} is not in the store (pull it first)",
                    wanted.image
                ))
            })?;
            let at = self
                .container_run_dir(&rec.id)
                .join("image-volumes")
                .join(i.to_string());
            fs::create_dir_all(&at).map_err(Error::io("create", &at))?;
            super::rootfs::mount_image(&self.store.layer_dirs(&image), &at)?;
            rec.image_volumes.push(image.id.to_string());
            m.host_path = at.display().to_string();
            m.readonly = true;
        }
        Ok(config)
    }

    /// The sandbox's own user namespace, as the host reaches its pin, and
    /// its ranges; none for a pod in the host's.
    fn pod_userns(
        &self,
        sandbox: &SandboxRecord,
    ) -> Result<Option<(PathBuf, crate::spec::userns::PodUserns)>, Error> {
        let maps =
            crate::spec::userns::of_pod(&crate::runtime::sandbox::ns_options(&sandbox.config))?;
        match (&sandbox.userns, maps) {
            (Some(pin), Some(maps)) => Ok(Some((self.pins.locate(pin), maps))),
            (None, None) => Ok(None),
            _ => Err(Error::FailedPrecondition(format!(
                "sandbox {}: its user namespace is not what its config asks",
                sandbox.id
            ))),
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
            fs::create_dir_all(d).map_err(Error::io("create", d))?;
        }
        let userns = self.pod_userns(sandbox)?;
        super::rootfs::mount_rootfs(
            &rec.rootfs,
            &self.store.layer_dirs(image),
            &upper,
            &work,
            userns.as_ref(),
            &rec.dir.join("idmapped"),
        )?;

        let config = self.mount_image_volumes(rec)?;
        let devices = crate::runtime::host_inputs::resolve_devices(&rec.config)?;
        let cdi = crate::runtime::host_inputs::resolve_cdi(
            &rec.config,
            self.paths.enable_cdi,
            &self.paths.cdi_spec_dirs,
        )?;
        spec::check_mounts(&rec.config)?;
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
        crate::runtime::host_inputs::check_mount_propagation(&rec.config)?;
        let view = SandboxView {
            hostname: sandbox.config.hostname.clone(),
            netns: sandbox.netns.as_deref().map(|p| self.pins.locate(p)),
            ipcns: sandbox.ipcns.as_deref().map(|p| self.pins.locate(p)),
            utsns: sandbox.utsns.as_deref().map(|p| self.pins.locate(p)),
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
            userns: userns.clone(),
        };
        let passwd = crate::runtime::host_inputs::read_image_file(&rec.rootfs, "etc/passwd");
        let group = crate::runtime::host_inputs::read_image_file(&rec.rootfs, "etc/group");
        let spec = spec::build(&SpecInput {
            id: &rec.id,
            config: &config,
            image: image_config,
            sandbox: &view,
            rootfs: &rec.rootfs,
            passwd: passwd.as_deref(),
            group: group.as_deref(),
            devices: &devices,
            min_oom_score_adj: crate::runtime::host_inputs::own_oom_score_adj(),
            cap_bounding: crate::runtime::host_inputs::own_cap_bounding(),
            localhost_seccomp: crate::runtime::host_inputs::load_localhost_seccomp(&rec.config)?,
            hugetlb: crate::runtime::host_inputs::hugetlb_available(),
            cdi: cdi.as_ref(),
        })?;
        rec.user = spec.process().as_ref().map(|p| state::ProcessUser {
            uid: p.user().uid(),
            gid: p.user().gid(),
            additional_gids: p.user().additional_gids().clone().unwrap_or_default(),
        });
        let bundle = rec.dir.join("bundle");
        fs::create_dir_all(&bundle).map_err(Error::io("create", &bundle))?;
        let raw = serde_json::to_vec(&spec).map_err(Error::json("encode spec"))?;
        // Read by the monitor's create and each exec; a reboot ends the
        // container. The seccomp filters go compiled beside it.
        images::fsutil::write_atomic_volatile(&bundle.join("config.json"), &raw)?;
        if let Some(profile) = spec.linux().as_ref().and_then(|l| l.seccomp().as_ref()) {
            let bpf = self
                .seccomp
                .encoded(profile)
                .map_err(|e| Error::InvalidArgument(format!("seccomp profile: {e}")))?;
            images::fsutil::write_atomic_volatile(&bundle.join(crate::seccomp::BUNDLE_FILE), &bpf)?;
        }

        let mut argv: Vec<OsString> = vec![
            self.monitor_bin.clone().into(),
            "monitor".into(),
            "create".into(),
            "--id".into(),
            rec.id.clone().into(),
            "--bundle".into(),
            bundle.into(),
            "--state-root".into(),
            self.libcontainer_root().into(),
            "--exit-file".into(),
            rec.dir.join(EXIT).into(),
            "--cgroup".into(),
            rec.cgroup.clone().into(),
        ];
        if let Some(l) = &rec.log_path {
            argv.extend(["--log".into(), l.into()]);
        }
        argv.extend(["--attach".into(), self.attach_socket(&rec.id).into()]);
        if rec.config.tty {
            argv.push("--tty".into());
        }
        if rec.config.stdin {
            argv.push("--stdin".into());
            if rec.config.stdin_once {
                argv.push("--stdin-once".into());
            }
        }
        let monitor_log = fs::File::create(rec.dir.join("monitor.log"))
            .map_err(Error::os("create monitor log"))?;
        let launched = self.launch_monitor(argv, monitor_log).await?;
        rec.monitor_pid = Some(launched.pid);
        rec.monitor_start_time = proc_start_time(launched.pid);
        let mut line = String::new();
        let read = tokio::time::timeout(
            Duration::from_secs(60),
            tokio::io::BufReader::new(launched.stdout).read_line(&mut line),
        )
        .await;
        // Reap the monitor whenever it exits, so it never lingers as a
        // zombie, and have `watch_exits` look at once: the container exited.
        let monitors = self.monitors.clone();
        let id: std::sync::Arc<str> = rec.id.as_str().into();
        monitors.watching(&id);
        let exited = launched.exited;
        tokio::spawn(async move {
            exited.await;
            monitors.exited(id);
        });
        let see = rec.dir.join("monitor.log");
        match read {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(Error::os(format!(
                    "monitor did not report; see {}",
                    see.display()
                ))(e));
            }
            Err(_) => {
                return Err(Error::Internal(format!(
                    "monitor did not report; see {}",
                    see.display()
                )));
            }
        }
        let hs: Handshake = serde_json::from_str(line.trim()).map_err(Error::json(format!(
            "monitor said {line:?}; see {}",
            see.display()
        )))?;
        if let Some(err) = hs.error {
            let detail = fs::read_to_string(rec.dir.join("monitor.log")).unwrap_or_default();
            let detail = detail
                .lines()
                .filter(|l| l.contains("ERROR"))
                .collect::<Vec<_>>()
                .join(" | ");
            let errno = err.errno;
            return Err(Error::child(err, errno, &detail));
        }
        rec.init_pid = hs.pid;
        rec.init_start_time = hs.start_time;
        Ok(())
    }

    /// Starts `picolet monitor create` (`argv`, from the binary's path on),
    /// its stderr into `log`. The spawner forks it; when the spawner
    /// cannot (or a path is not UTF-8), the binary is exec'd as before.
    async fn launch_monitor(&self, argv: Vec<OsString>, log: fs::File) -> Result<Launched, Error> {
        let os = |what: &str| Error::os(format!("start monitor: {what}"));
        let (out_r, out_w) =
            nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(Error::errno("start monitor: pipe"))?;
        let null = fs::File::open("/dev/null").map_err(os("/dev/null"))?;
        let err = log.try_clone().map_err(os("log"))?;
        let stdio = [null.into(), out_w, err.into()];
        if let Some(s) = self.spawner.try_spawn(&argv, stdio, None).await {
            let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(out_r)
                .map_err(os("handshake pipe"))?;
            return Ok(Launched {
                pid: s.pid,
                stdout: Box::pin(stdout),
                exited: Box::pin(s.exited()),
            });
        }
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.arg0("picolet")
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            // Errors only: libcontainer also logs from inside the container's
            // init, after its stderr became the container's.
            .env("PICOLET_LOG", "error")
            // Its own process group: signals to the shim's group leave it alone.
            .process_group(0)
            .kill_on_drop(false);
        // Until its handshake the monitor dies with the shim: one left
        // creating by a shim that died would go on to make a container no
        // record names (bench/faults.sh found its init waiting for a start
        // that never came, in the cgroup that recovery had already emptied).
        // After the handshake it clears this and outlives shim restarts.
        crate::host::die_with_parent(cmd.as_std_mut(), nix::sys::signal::Signal::SIGKILL);
        let mut child = cmd.spawn().map_err(os("spawn"))?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| Error::Internal("start monitor: no pid".into()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::Internal("monitor stdout".into()))?;
        Ok(Launched {
            pid,
            stdout: Box::pin(stdout),
            exited: Box::pin(async move {
                let _ = child.wait().await;
            }),
        })
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
        // Whatever still runs for it goes first. A shim that died mid-create
        // leaves libcontainer's intermediate process going on without its
        // monitor: it joins the cgroup and forks an init that waits for a
        // start forever, outside CRI's view (bench/faults.sh found two, after
        // kills of `up`). Until the init execs, both carry the monitor's
        // command line: kill those (again, until none is left: a dying
        // parent may have forked), then what is in the cgroup, which every
        // later process of the container was born in.
        if !rec.complete {
            kill_until_gone(|| creators_of(&rec.id)).await;
        }
        if let Some(h) = crate::host::cgroupfs::hierarchy() {
            let dirs = h.pod_dirs(&rec.cgroup);
            kill_until_gone(|| {
                dirs.iter()
                    .flat_map(|d| {
                        fs::read_to_string(d.join("cgroup.procs"))
                            .unwrap_or_default()
                            .lines()
                            .filter_map(|l| l.trim().parse::<i32>().ok())
                            .collect::<Vec<_>>()
                    })
                    .collect()
            })
            .await;
        }
        // What libcontainer's delete would do now that nothing runs, without
        // loading its state (its cgroup manager reads the mount table once
        // per controller, ~2 ms here): the container's cgroup, then
        // libcontainer's folder.
        if let Some(h) = crate::host::cgroupfs::hierarchy() {
            remove_cgroup(h, &rec.cgroup, &rec.id).await;
        }
        images::fsutil::remove_dir_all_if_exists(&self.libcontainer_root().join(&rec.id))?;
        crate::runtime::namespaces::release(&rec.rootfs)?;
        let volumes = self.container_run_dir(&rec.id).join("image-volumes");
        if let Ok(dir) = fs::read_dir(&volumes) {
            for v in dir.flatten() {
                crate::runtime::namespaces::release(&v.path())?;
            }
        }
        images::fsutil::remove_dir_all_if_exists(&self.container_run_dir(&rec.id))?;
        crate::state::remove_record_dir(&rec.dir)?;
        Ok(())
    }
}

/// Processes still creating container `id`: its `picolet monitor create`,
/// and libcontainer's intermediate and init until the init execs (forks keep
/// the monitor's command line).
fn creators_of(id: &str) -> Vec<i32> {
    let needle = format!("\0monitor\0create\0--id\0{id}\0");
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle.as_bytes()))
        })
        .collect()
}

/// rmdir of container `id`'s cgroup `path` in every hierarchy. A cgroup
/// whose last process is still exiting is busy for a moment: tried again
/// for up to 1 s. Only a path that ends in the container's ID is touched.
async fn remove_cgroup(h: &cgroup::Hierarchy, path: &str, id: &str) {
    if id.is_empty() || path.rsplit('/').next() != Some(id) {
        tracing::error!(
            cgroup = path,
            container = id,
            "not a container cgroup; left alone"
        );
        return;
    }
    for _ in 0..50 {
        match h.remove_pod(path) {
            Ok(()) => return,
            Err(e) if e.raw_os_error() == Some(nix::errno::Errno::EBUSY as i32) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => {
                tracing::warn!(cgroup = path, error = %e, "remove container cgroup");
                return;
            }
        }
    }
    tracing::warn!(cgroup = path, "container cgroup still busy after 1 s");
}

/// SIGKILLs what `pids` lists until it lists nothing (a process killed
/// mid-fork may leave a child to find on the next look); gives up after 2 s.
async fn kill_until_gone(mut pids: impl FnMut() -> Vec<i32>) {
    for _ in 0..100 {
        let now = pids();
        if now.is_empty() {
            return;
        }
        for pid in now {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::warn!("processes still there after 2 s of SIGKILL");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn creators_are_found_by_their_command_line_and_killed() {
        let id = format!("c{}", std::process::id());
        // A process with a monitor's arguments (what libcontainer's forks of
        // one carry until the init execs), blocked in a builtin: no children.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read x", "monitor", "create", "--id", &id])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("sh");
        let pid = i32::try_from(child.id()).expect("pid");
        // spawn returns once the child's exec released the parent (vfork),
        // before the kernel set the new arguments: /proc/<pid>/cmdline may
        // read empty for a moment (CI hit it once). Wait for it, 2 s at most.
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.is_empty())
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(creators_of(&id), vec![pid]);
        assert!(
            creators_of(&format!("{id}x")).is_empty(),
            "an id is matched whole"
        );
        kill_until_gone(|| {
            // Reaped here, as the shim's children are by their watchers.
            let _ = child.try_wait();
            creators_of(&id)
        })
        .await;
        assert!(child.try_wait().expect("wait").is_some(), "not killed");
    }
}
