//! Helpers for end-to-end tests that drive the real `picolet` binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

pub mod agent;
pub mod containerd;
pub mod cri;
pub mod rt;
pub mod wait;

pub use wait::{consistently, eventually, eventually_async};

use cri_proto::v1::image_service_client::ImageServiceClient;
use cri_proto::v1::{Image, ImageSpec, ImageStatusRequest, ListImagesRequest};

/// Skips a test that needs root, saying why; in CI (`CI=true`) a skip fails.
#[macro_export]
macro_rules! require_root {
    () => {
        if !nix::unistd::geteuid().is_root() {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("this test needs root and CI must not skip it");
            }
            eprintln!(
                "SKIP {}: needs root (overlayfs, whiteout device nodes, chown)",
                module_path!()
            );
            return;
        }
    };
}

pub fn picolet() -> &'static str {
    env!("CARGO_BIN_EXE_picolet")
}

/// The project's test images, built once per test binary.
///
/// Their folder is removed when the test binary exits (statics are never
/// dropped, so a plain `TempDir` here left one folder in /tmp per run).
#[allow(unsafe_code)]
pub fn test_images() -> &'static xtask::TestImages {
    static DIR: std::sync::Mutex<Option<tempfile::TempDir>> = std::sync::Mutex::new(None);
    static IMAGES: OnceLock<xtask::TestImages> = OnceLock::new();
    extern "C" fn remove_dir() {
        if let Ok(mut dir) = DIR.lock() {
            drop(dir.take());
        }
    }
    IMAGES.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("picolet-images-")
            .tempdir()
            .expect("tempdir");
        let busybox = std::env::var("BUSYBOX").unwrap_or_else(|_| "/bin/busybox".into());
        let t = xtask::build_test_images(Path::new(&busybox), dir.path())
            .expect("build test images (needs busybox-static)");
        *DIR.lock().expect("images dir lock") = Some(dir);
        // SAFETY: registers a plain function that takes no arguments.
        unsafe { libc::atexit(remove_dir) };
        t
    })
}

/// A running `picolet shim` on private paths; killed (by PID) and cleaned up on drop.
///
/// Its CNI config folder is `<dir>/cni/net.d` (empty: pods get loopback
/// only) and its plugins are searched in `<dir>/cni/bin`, then Debian's
/// `/usr/lib/cni`.
pub struct Shim {
    pub dir: tempfile::TempDir,
    pub child: Option<Child>,
    /// A process holding the network namespace the shim runs in (its
    /// "host" network), for tests whose bridges, routes and iptables rules
    /// must stay off the real host; killed by PID on drop.
    pub netns_holder: Option<Child>,
    /// A folder the shim is started holding open as [`LEAKED_FD`], without
    /// close-on-exec: what a careless parent (an init system, a shell)
    /// hands a runtime. Nothing of it may reach a container.
    pub leak: Option<PathBuf>,
}

/// The descriptor number [`Shim::leak`] is handed on as.
pub const LEAKED_FD: i32 = 9;

impl Shim {
    pub fn start() -> Self {
        let mut s = Self::prepare();
        s.spawn();
        s
    }

    /// Starts the shim with this config file text (else none: defaults).
    pub fn start_with_config(config: &str) -> Self {
        let mut s = Self::prepare();
        std::fs::write(s.dir.path().join("config.yaml"), config).expect("config");
        s.spawn();
        s
    }

    /// Starts the shim in a network namespace of its own (kept across
    /// restarts of the shim).
    pub fn start_in_own_netns() -> Self {
        let mut s = Self::prepare();
        s.netns_holder = Some(netns_holder());
        s.spawn();
        s
    }

    fn prepare() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("picolet-e2e-")
            .tempdir()
            .expect("tempdir");
        for d in ["images", "cni/net.d", "cni/bin"] {
            std::fs::create_dir_all(dir.path().join(d)).expect("mkdir");
        }
        Self {
            dir,
            child: None,
            netns_holder: None,
            leak: None,
        }
    }

    /// Starts the shim holding `dir` open as [`LEAKED_FD`].
    pub fn start_leaking(dir: &Path) -> Self {
        let mut s = Self::prepare();
        s.leak = Some(dir.to_path_buf());
        s.spawn();
        s
    }

    /// The shim's network namespace (`/proc/<holder>/ns/net`), when it has its own.
    pub fn netns(&self) -> Option<PathBuf> {
        self.netns_holder
            .as_ref()
            .map(|h| PathBuf::from(format!("/proc/{}/ns/net", h.id())))
    }

    pub fn cni_conf_dir(&self) -> PathBuf {
        self.dir.path().join("cni/net.d")
    }
    pub fn cni_bin_dir(&self) -> PathBuf {
        self.dir.path().join("cni/bin")
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("run/picolet.sock")
    }
    pub fn images_dir(&self) -> PathBuf {
        self.dir.path().join("images")
    }
    pub fn store(&self) -> PathBuf {
        self.root().join("shim/images")
    }
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("shim.log")).unwrap_or_default()
    }

    /// Starts the shim process and waits for its socket.
    #[allow(unsafe_code)]
    pub fn spawn(&mut self) {
        let _ = std::fs::remove_file(self.socket());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("shim.log"))
            .expect("log");
        // nsenter execs the shim: the child's pid is the shim's.
        let mut cmd = match self.netns() {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net={}", ns.display())).arg(picolet());
                c
            }
            None => Command::new(picolet()),
        };
        let config = self.dir.path().join("config.yaml");
        let config = if config.exists() {
            config
        } else {
            PathBuf::from("/dev/null")
        };
        let leaked = self
            .leak
            .as_ref()
            .map(|d| std::fs::File::open(d).expect("open the folder to leak"));
        if let Some(f) = &leaked {
            use std::os::fd::AsRawFd;
            use std::os::unix::process::CommandExt;
            let raw = f.as_raw_fd();
            // SAFETY: dup2 is async-signal-safe; the new descriptor has no
            // close-on-exec flag, as a careless parent's would not.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::dup2(raw, LEAKED_FD) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd
            .args(["shim", "--config"])
            .arg(config)
            .arg("--root")
            .arg(self.root())
            .arg("--cni-conf-dir")
            .arg(self.cni_conf_dir())
            .arg("--cni-bin-dir")
            .arg(format!("{},/usr/lib/cni", self.cni_bin_dir().display()))
            .arg("--run-dir")
            .arg(self.dir.path().join("run"))
            .arg("--socket")
            .arg(self.socket())
            .arg("--images-dir")
            .arg(self.images_dir())
            // PICOLET_LOG passes through; unset, picolet's own default.
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn picolet shim");
        self.child = Some(child);
        eventually(
            "the shim's socket",
            Duration::from_secs(20),
            || self.socket().exists(),
            || format!("shim log:\n{}", self.log()),
        );
    }

    /// SIGKILLs the shim we started.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Runs `picolet ctl --socket <ours> ARGS`.
    pub fn ctl(&self, args: &[&str]) -> Output {
        Command::new(picolet())
            .arg("ctl")
            .arg("--socket")
            .arg(self.socket())
            .args(args)
            .output()
            .expect("run picolet ctl")
    }

    /// `ctl import`, asserting success.
    pub fn import(&self, path: &Path) -> String {
        let out = self.ctl(&["import", path.to_str().expect("utf8")]);
        assert!(
            out.status.success(),
            "import {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub async fn client(&self) -> ImageServiceClient<cri_proto::Channel> {
        ImageServiceClient::new(cri_proto::connect(self.socket()).await.expect("connect"))
    }

    pub async fn list(&self) -> Vec<Image> {
        let mut images = self
            .client()
            .await
            .list_images(ListImagesRequest { filter: None })
            .await
            .expect("ListImages")
            .into_inner()
            .images;
        images.sort_by(|a, b| a.repo_tags.cmp(&b.repo_tags));
        images
    }

    pub async fn status(&self, image: &str) -> Option<(Image, Option<serde_json::Value>)> {
        let resp = self
            .client()
            .await
            .image_status(ImageStatusRequest {
                image: Some(spec(image)),
                verbose: true,
            })
            .await
            .expect("ImageStatus")
            .into_inner();
        let info = resp
            .info
            .get("info")
            .map(|s| serde_json::from_str(s).expect("verbose info is json"));
        resp.image.map(|i| (i, info))
    }

    /// Snapshot directory of each layer (bottom first) of an image.
    pub async fn layer_dirs(&self, image: &str) -> Vec<PathBuf> {
        let (_, info) = self.status(image).await.expect("image present");
        let info = info.expect("verbose info");
        info["layers"]
            .as_array()
            .expect("layers")
            .iter()
            .map(|l| {
                let diff = l["diff_id"].as_str().expect("diff_id");
                self.store()
                    .join("snapshots/sha256")
                    .join(diff.trim_start_matches("sha256:"))
            })
            .collect()
    }

    /// Names of files in a store subdirectory (e.g. `blobs/sha256`).
    pub fn store_entries(&self, sub: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.store().join(sub))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

impl Shim {
    /// This shim's directory name: unique, and names its test cgroups.
    pub fn name(&self) -> String {
        self.dir
            .path()
            .file_name()
            .expect("tempdir has a name")
            .to_string_lossy()
            .into_owned()
    }

    /// Mount points under this shim's directory: the host's, and those of
    /// the shim's pin space (where pods' namespaces are pinned, seen
    /// through the shim's threads), less the pin space's own two.
    fn mounts_under_dir(&self) -> Vec<String> {
        let mut tables =
            vec![std::fs::read_to_string("/proc/self/mountinfo").expect("read own mountinfo")];
        if let Some(c) = &self.child {
            let tasks = std::fs::read_dir(format!("/proc/{}/task", c.id()));
            for t in tasks.into_iter().flatten().flatten() {
                // A thread that ended since the listing has no table.
                if let Ok(table) = std::fs::read_to_string(t.path().join("mountinfo")) {
                    tables.push(table);
                }
            }
        }
        let pins = self.dir.path().join("run/pins");
        let mut mounts: Vec<String> = tables
            .iter()
            .flat_map(|t| {
                t.lines()
                    .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
            })
            .filter(|m| Path::new(m).starts_with(self.dir.path()))
            .filter(|m| Path::new(m) != pins && Path::new(m) != pins.join("mnt"))
            .collect();
        mounts.sort();
        mounts.dedup();
        mounts
    }

    /// A cgroup parent for a test pod, unique to this shim; removed on drop.
    pub fn cgroup_parent(&self, pod: &str) -> String {
        format!(
            "/picolet-test/{}/{pod}",
            self.dir.path().file_name().expect("name").to_string_lossy()
        )
    }

    /// Kills what is left in this shim's test cgroups and removes them, and
    /// unmounts everything under its directory: a failed test leaks nothing.
    fn cleanup_host(&self) {
        let name = self.name();
        let mut roots: Vec<PathBuf> = std::fs::read_dir("/sys/fs/cgroup")
            .map(|d| {
                d.flatten()
                    .map(|e| e.path().join("picolet-test").join(&name))
                    .collect()
            })
            .unwrap_or_default();
        roots.push(PathBuf::from("/sys/fs/cgroup/picolet-test").join(&name));
        for root in roots.iter().filter(|r| r.is_dir()) {
            let mut dirs = Vec::new();
            let mut stack = vec![root.clone()];
            while let Some(d) = stack.pop() {
                for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                    if e.path().is_dir() {
                        stack.push(e.path());
                    }
                }
                dirs.push(d);
            }
            for d in &dirs {
                for pid in std::fs::read_to_string(d.join("cgroup.procs"))
                    .unwrap_or_default()
                    .lines()
                {
                    if let Ok(pid) = pid.trim().parse::<i32>() {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                }
            }
            // Killed processes leave their cgroups when they are reaped.
            wait::within(Duration::from_secs(2), || {
                dirs.iter().all(|d| {
                    std::fs::read_to_string(d.join("cgroup.procs"))
                        .map_or(true, |p| p.trim().is_empty())
                })
            });
            dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
            for d in dirs {
                let _ = std::fs::remove_dir(d);
            }
            if let Some(parent) = root.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
        let mut mounts = self.mounts_under_dir();
        let pins = self.dir.path().join("run/pins");
        mounts.extend([pins.join("mnt"), pins].map(|p| p.to_string_lossy().into_owned()));
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

impl Shim {
    /// Asserts that nothing of this shim's pods remains on the host: no
    /// mounts under its dirs, no container cgroups, no processes (monitors
    /// or containers) still running, no libcontainer state, beyond the shim
    /// itself.
    pub fn assert_host_clean(&self) {
        let mounts = self.mounts_under_dir();
        assert!(mounts.is_empty(), "mounts left: {mounts:?}");
        let lc_root = self.dir.path().join("run/libcontainer");
        let lc_state: Vec<_> = match std::fs::read_dir(&lc_root) {
            Ok(rd) => rd
                .map(|e| e.expect("libcontainer state entry").file_name())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("list {}: {e}", lc_root.display()),
        };
        assert!(lc_state.is_empty(), "libcontainer state left: {lc_state:?}");
        let name = self.name();
        let mut hierarchies: Vec<PathBuf> = std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        hierarchies.push(PathBuf::from("/sys/fs/cgroup"));
        for hierarchy in hierarchies {
            let root = hierarchy.join("picolet-test").join(&name);
            for pod in std::fs::read_dir(&root).into_iter().flatten().flatten() {
                let children: Vec<String> = std::fs::read_dir(pod.path())
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                assert!(
                    children.is_empty(),
                    "container cgroups left in {}: {children:?}",
                    pod.path().display()
                );
                let procs =
                    std::fs::read_to_string(pod.path().join("cgroup.procs")).unwrap_or_default();
                assert!(
                    procs.trim().is_empty(),
                    "processes left in {}: {procs}",
                    pod.path().display()
                );
            }
        }
        let shim_pid = self.child.as_ref().map(|c| c.id());
        let dir = self.dir.path().to_string_lossy().into_owned();
        let mut left = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if Some(pid) == shim_pid {
                continue;
            }
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&dir) {
                left.push(pid);
            }
        }
        assert!(
            left.is_empty(),
            "processes of this test still running: {left:?}"
        );
    }
}

impl Drop for Shim {
    fn drop(&mut self) {
        self.stop();
        self.cleanup_host();
        if let Some(mut h) = self.netns_holder.take() {
            let _ = h.kill();
            let _ = h.wait();
        }
    }
}

impl Shim {
    /// Stops the shim we started: SIGTERM, then SIGKILL after 5 s.
    pub fn stop(&mut self) {
        if let Some(c) = self.child.take() {
            terminate(c);
        }
    }
}

/// A process in a network namespace of its own (`unshare --net busybox
/// sleep`, one pid): holds the namespace while it lives.
pub fn netns_holder() -> Child {
    let child = Command::new("unshare")
        .args(["--net", "/bin/busybox", "sleep", "100000"])
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn a netns holder (unshare)");
    let pid = child.id();
    eventually(
        "the holder's own netns",
        Duration::from_secs(5),
        || {
            std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()
                != std::fs::read_link("/proc/self/ns/net").ok()
        },
        String::new,
    );
    let lo = Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .args(["ip", "link", "set", "lo", "up"])
        .status()
        .expect("nsenter ip");
    assert!(lo.success(), "lo up in the new netns");
    child
}

/// Ends a child we started: SIGTERM (so it shuts down cleanly), then
/// SIGKILL if it is still there after 5 s.
pub fn terminate(mut c: Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(c.id()).expect("pid")),
        nix::sys::signal::Signal::SIGTERM,
    );
    if wait::within(Duration::from_secs(5), || {
        matches!(c.try_wait(), Ok(Some(_)))
    }) {
        return;
    }
    let _ = c.kill();
    let _ = c.wait();
}

pub fn spec(image: &str) -> ImageSpec {
    ImageSpec {
        image: image.to_string(),
        ..Default::default()
    }
}

/// An overlay mount, unmounted on drop.
pub struct Overlay {
    pub target: PathBuf,
}

impl Overlay {
    pub fn mount(lowers_top_first: &[PathBuf], scratch: &Path) -> Self {
        let upper = scratch.join("upper");
        let work = scratch.join("work");
        let target = scratch.join("merged");
        for d in [&upper, &work, &target] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        let opts = images::overlay_options(lowers_top_first, &upper, &work);
        nix::mount::mount(
            Some("overlay"),
            &target,
            Some("overlay"),
            nix::mount::MsFlags::empty(),
            Some(opts.as_str()),
        )
        .unwrap_or_else(|e| panic!("mount overlay {opts}: {e}"));
        Self { target }
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.target, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Whether a command exists on PATH.
pub fn have(cmd: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `picolet check --store` on a shim's root (no shim running): whether it
/// passed, and what it printed.
pub fn check_store(root: &Path) -> (bool, String) {
    let out = std::process::Command::new(picolet())
        .args(["check", "--config", "/dev/null", "--store", "--root"])
        .arg(root)
        .output()
        .expect("picolet check --store");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}
