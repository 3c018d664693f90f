//! `picolet install`, `picolet uninstall` and `picolet reset`: picolet as a
//! service of the device, and back to a device without it.
//!
//! `install` puts the binary at `<prefix>/bin/picolet`, writes the config
//! skeletons of `/etc/picolet` that are not there yet (an operator's files
//! are never overwritten), the service file for the machine's manager, and
//! enables and (re)starts the service. `--bundle` takes the binary, the
//! preload images and the examples from an airgap bundle instead.
//!
//! `reset` removes what picolet made and nothing else: its pods (through
//! its own shim, so containers, mounts, cgroups and pod networks go the way
//! they came), their log folders, its data and runtime folders, its CNI
//! config, bridge and iptables chains. `uninstall` stops the service, resets,
//! and removes the service, the binary and (unless kept) `/etc/picolet`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::service::{Manager, ServiceError};
use crate::{CommonArgs, load_config};

/// The config file skeleton: every field with its default.
const CONFIG_SKELETON: &str = include_str!("../examples/config.yaml");
const REGISTRIES_SKELETON: &str = include_str!("../packaging/registries.yaml");
/// The log file of the OpenRC and init.d scripts (`packaging/`).
const SCRIPT_LOG: &str = "/var/log/picolet.log";
/// The largest file taken from a bundle (an image archive).
const BUNDLE_FILE_MAX: u64 = 2 << 30;

#[derive(Debug, thiserror::Error)]
pub(crate) enum InstallError {
    #[error("must run as root")]
    NotRoot,
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bundle {}: {why}", path.display())]
    Bundle { path: PathBuf, why: String },
    #[error(transparent)]
    Service(#[from] ServiceError),
    #[error(transparent)]
    Upgrade(#[from] crate::upgrade::UpgradeError),
    #[error("picolet is running (`up` pid {pid}): stop it first (`{stop}`)")]
    Running { pid: u32, stop: String },
    #[error("a shim serves {}: stop picolet first", socket.display())]
    ShimRunning { socket: PathBuf },
    #[error("the shim for the reset: {0}")]
    Shim(String),
    #[error("the pod volumes: {0}")]
    Volumes(#[from] agent::volumes::Error),
    #[error("remove the pods: {0}")]
    Cri(#[from] crate::upgrade::CriCallError),
    #[error("{} is still mounted after the pods were removed; not removing {}", mount.display(), dir.display())]
    StillMounted { mount: PathBuf, dir: PathBuf },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InstallError + '_ {
    move |source| InstallError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[derive(clap::Args)]
pub(crate) struct InstallArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// The binary goes to <prefix>/bin/picolet, the bundle's examples to
    /// <prefix>/share/picolet.
    #[arg(long, default_value = "/usr/local")]
    prefix: PathBuf,
    /// An airgap bundle (picolet-<version>-<arch>.tar.gz): its binary,
    /// its images (into the preload folder) and its examples.
    #[arg(long)]
    bundle: Option<PathBuf>,
    /// The service manager [default: the one that booted the machine].
    #[arg(long, value_enum)]
    service: Option<Manager>,
    /// Install and enable, but do not start now.
    #[arg(long)]
    no_start: bool,
}

#[derive(clap::Args)]
pub(crate) struct UninstallArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Where `install` put the binary.
    #[arg(long, default_value = "/usr/local")]
    prefix: PathBuf,
    /// The service manager [default: the one that booted the machine].
    #[arg(long, value_enum)]
    service: Option<Manager>,
    /// Keep /etc/picolet (config, manifests, registries).
    #[arg(long)]
    keep_config: bool,
    /// Stop the service and reset, but leave the binary and the service
    /// file (a package's removal script: the package manager owns those).
    #[arg(long, hide = true)]
    package: bool,
}

#[derive(clap::Args)]
pub(crate) struct ResetArgs {
    #[command(flatten)]
    common: CommonArgs,
}

fn must_be_root() -> Result<(), InstallError> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(InstallError::NotRoot)
    }
}

fn report(what: &str, r: Result<(), InstallError>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("picolet {what}: {e}");
            ExitCode::FAILURE
        }
    }
}

pub(crate) fn run_install(args: InstallArgs) -> ExitCode {
    match load_config(&args.common) {
        Ok(config) => report("install", install(&args, &config)),
        Err(code) => code,
    }
}

pub(crate) fn run_uninstall(args: UninstallArgs) -> ExitCode {
    match load_config(&args.common) {
        Ok(config) => report("uninstall", uninstall(&args, &config)),
        Err(code) => code,
    }
}

pub(crate) fn run_reset(args: ResetArgs) -> ExitCode {
    let config = match load_config(&args.common) {
        Ok(c) => c,
        Err(code) => return code,
    };
    report(
        "reset",
        must_be_root().and_then(|()| reset(&config, &args.common)),
    )
}

fn install(args: &InstallArgs, config: &edge_config::Config) -> Result<(), InstallError> {
    must_be_root()?;
    let bin = args.prefix.join("bin/picolet");
    let bin_dir = args.prefix.join("bin");
    std::fs::create_dir_all(&bin_dir).map_err(io(&bin_dir))?;
    let unpacked = match &args.bundle {
        Some(b) => Some(unpack_bundle(b, &args.prefix, &config.images_dir)?),
        None => None,
    };
    let source = match &unpacked {
        Some(u) => u.binary.clone(),
        None => std::env::current_exe().map_err(io(Path::new("/proc/self/exe")))?,
    };
    let same = std::fs::canonicalize(&bin).ok() == std::fs::canonicalize(&source).ok();
    if !same {
        let staged = bin_dir.join(format!(".picolet.{}.new", std::process::id()));
        crate::upgrade::stage_copy(&source, &staged)?;
        std::fs::rename(&staged, &bin).map_err(io(&bin))?;
        crate::upgrade::sync_dir(&bin)?;
        println!("installed {}", bin.display());
    }
    if let Some(u) = &unpacked {
        let _ = std::fs::remove_file(&u.binary);
        for i in &u.images {
            println!("preload image {}", i.display());
        }
    }
    let etc = Path::new("/etc/picolet");
    // registries.yaml holds credentials: root's alone.
    for (path, text, mode) in [
        (etc.join("config.yaml"), CONFIG_SKELETON, 0o644),
        (etc.join("registries.yaml"), REGISTRIES_SKELETON, 0o600),
    ] {
        if write_new(&path, text.as_bytes(), mode)? {
            println!("wrote {}", path.display());
        } else {
            println!("kept {}", path.display());
        }
    }
    let manifests = etc.join("manifests");
    std::fs::create_dir_all(&manifests).map_err(io(&manifests))?;
    let manager = args.service.unwrap_or_else(Manager::detect);
    let file = manager.write(Path::new("/"), &bin)?;
    println!("wrote {} ({manager:?})", file.display());
    manager.enable()?;
    if !args.no_start {
        manager.restart(&file)?;
        println!("started the picolet service");
    }
    Ok(())
}

/// Writes `path` only when it does not exist; true when it wrote.
fn write_new(path: &Path, data: &[u8], mode: u32) -> Result<bool, InstallError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path);
    match f {
        Ok(mut f) => {
            f.write_all(data)
                .and_then(|()| f.sync_all())
                .map_err(io(path))?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io(path)(e)),
    }
}

struct Unpacked {
    binary: PathBuf,
    images: Vec<PathBuf>,
}

/// What a bundle may hold, under its one top folder: `picolet`,
/// `images/<name>.tar`, `examples/…`, `packaging/…`. Anything else (or a
/// link, a device, a `..`) makes the bundle bad; nothing is written
/// outside the destinations named here.
fn unpack_bundle(path: &Path, prefix: &Path, images_dir: &Path) -> Result<Unpacked, InstallError> {
    let bad = |why: String| InstallError::Bundle {
        path: path.to_path_buf(),
        why,
    };
    let file = std::fs::File::open(path).map_err(io(path))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let bin_dir = prefix.join("bin");
    let share = prefix.join("share/picolet");
    let mut out = Unpacked {
        binary: bin_dir.join(format!(".picolet.{}.bundle", std::process::id())),
        images: Vec::new(),
    };
    let mut has_binary = false;
    let entries = archive.entries().map_err(|e| bad(e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| bad(e.to_string()))?;
        let name = entry.path().map_err(|e| bad(e.to_string()))?.into_owned();
        let kind = entry.header().entry_type();
        let parts: Vec<&str> = name
            .components()
            .map(|c| match c {
                std::path::Component::Normal(s) => s.to_str().unwrap_or("\u{0}"),
                _ => "\u{0}",
            })
            .collect();
        if parts.iter().any(|p| *p == "\u{0}" || p.is_empty()) || parts.len() < 2 {
            if kind.is_dir() && parts.len() == 1 && !parts[0].contains('\u{0}') {
                continue;
            }
            return Err(bad(format!(
                "entry {}: not inside one top folder",
                name.display()
            )));
        }
        let rest = &parts[1..];
        if kind.is_dir() {
            continue;
        }
        if !kind.is_file() {
            return Err(bad(format!("entry {}: not a regular file", name.display())));
        }
        if entry.size() > BUNDLE_FILE_MAX {
            return Err(bad(format!("entry {}: over 2 GiB", name.display())));
        }
        let dest = match rest {
            ["picolet"] => {
                has_binary = true;
                out.binary.clone()
            }
            ["images", f] if f.ends_with(".tar") => {
                let p = images_dir.join(f);
                out.images.push(p.clone());
                p
            }
            ["examples", ..] | ["packaging", ..] => share.join(rest.join("/")),
            _ => {
                return Err(bad(format!(
                    "entry {}: not part of a bundle",
                    name.display()
                )));
            }
        };
        if let Some(d) = dest.parent() {
            std::fs::create_dir_all(d).map_err(io(d))?;
        }
        let mode = if rest == ["picolet"] { 0o755 } else { 0o644 };
        write_entry(&mut entry, &dest, mode)?;
    }
    if !has_binary {
        return Err(bad("no `picolet` binary in it".into()));
    }
    Ok(out)
}

fn write_entry(entry: &mut impl Read, dest: &Path, mode: u32) -> Result<(), InstallError> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = dest.with_extension("part");
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        std::io::copy(&mut entry.take(BUNDLE_FILE_MAX), &mut f)?;
        f.sync_all()?;
        std::fs::rename(&tmp, dest)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(io(dest))
}

fn uninstall(args: &UninstallArgs, config: &edge_config::Config) -> Result<(), InstallError> {
    must_be_root()?;
    let manager = args.service.unwrap_or_else(Manager::detect);
    let file = manager.file(Path::new("/"));
    if !args.package {
        manager.stop_and_disable(&file)?;
        println!("stopped the picolet service");
    }
    reset(config, &args.common)?;
    if !args.package {
        remove(&file)?;
        if manager == Manager::Systemd {
            crate::service::run(&["systemctl", "daemon-reload"])?;
        }
        let bin = args.prefix.join("bin/picolet");
        remove(&bin)?;
        let mut prev = bin.into_os_string();
        prev.push(".prev");
        remove(Path::new(&prev))?;
        remove_tree(&args.prefix.join("share/picolet"))?;
        // Where the OpenRC and init.d scripts send `up`'s log.
        remove(Path::new(SCRIPT_LOG))?;
    }
    if !args.keep_config {
        remove_tree(Path::new("/etc/picolet"))?;
    }
    Ok(())
}

fn remove(path: &Path) -> Result<(), InstallError> {
    match std::fs::remove_file(path) {
        Ok(()) => {
            println!("removed {}", path.display());
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(path)(e)),
    }
}

/// Removes a folder that holds no mount (checked first: a bind mount left
/// under it would take the files of whatever it shows with it).
fn remove_tree(dir: &Path) -> Result<(), InstallError> {
    if !dir.exists() {
        return Ok(());
    }
    if let Some(mount) = mounts_under(dir).into_iter().next() {
        return Err(InstallError::StillMounted {
            mount,
            dir: dir.to_path_buf(),
        });
    }
    std::fs::remove_dir_all(dir).map_err(io(dir))?;
    println!("removed {}", dir.display());
    Ok(())
}

/// Mount points at or under `dir`, deepest first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mount)
        .filter(|p| p.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape_mount(s: &str) -> PathBuf {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..=i + 3].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from(
        <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&out),
    ))
}

/// A shim of our own for the reset, on this data root, stopped on drop.
struct ResetShim(std::process::Child);

impl Drop for ResetShim {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id().cast_signed());
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn reset(config: &edge_config::Config, common: &CommonArgs) -> Result<(), InstallError> {
    if let Some(s) = crate::notify::read_up_state(&config.run_dir)
        && Path::new(&format!("/proc/{}", s.pid)).exists()
    {
        return Err(InstallError::Running {
            pid: s.pid,
            stop: match Manager::detect() {
                Manager::Systemd => "systemctl stop picolet".into(),
                Manager::Openrc => "rc-service picolet stop".into(),
                Manager::Initd => "/etc/init.d/picolet stop".into(),
            },
        });
    }
    if std::os::unix::net::UnixStream::connect(&config.cri_socket).is_ok() {
        return Err(InstallError::ShimRunning {
            socket: config.cri_socket.clone(),
        });
    }
    if config.data_dir.exists() {
        remove_pods(config, common)?;
        remove_volumes(&config.data_dir)?;
    }
    remove_network(config);
    remove_cgroups(&config.cgroup_root);
    for dir in [&config.run_dir, &config.data_dir] {
        remove_tree(dir)?;
    }
    Ok(())
}

/// Every sandbox of this data root, stopped and removed by a shim of ours,
/// and the pods' log folders.
fn remove_pods(config: &edge_config::Config, common: &CommonArgs) -> Result<(), InstallError> {
    let exe = std::env::current_exe().map_err(io(Path::new("/proc/self/exe")))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("shim");
    if let Some(c) = &common.config {
        cmd.arg("--config").arg(c);
    }
    if let Some(r) = &common.root {
        cmd.arg("--root").arg(r);
    }
    // Its warnings only: what it removes is said here.
    cmd.env("PICOLET_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    let child = cmd.spawn().map_err(|e| InstallError::Shim(e.to_string()))?;
    let mut shim = ResetShim(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::os::unix::net::UnixStream::connect(&config.cri_socket).is_err() {
        if let Ok(Some(status)) = shim.0.try_wait() {
            return Err(InstallError::Shim(format!("exited ({status})")));
        }
        if Instant::now() > deadline {
            return Err(InstallError::Shim("did not serve in 60 s".into()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let removed = remove_sandboxes(&config.cri_socket)?;
    for (ns, name, uid) in &removed {
        println!("removed pod {ns}/{name}");
        // kubelet's pod log folder name; only the pods removed here.
        let logs = config.pod_logs_dir.join(format!("{ns}_{name}_{uid}"));
        remove_tree(&logs)?;
    }
    drop(shim);
    Ok(())
}

/// The agent's pod folders: their volumes (memory emptyDirs, secrets,
/// projected files) unmounted as the agent does when a pod goes.
fn remove_volumes(data_dir: &Path) -> Result<(), InstallError> {
    let pods = data_dir.join("agent/pods");
    for e in std::fs::read_dir(&pods).into_iter().flatten().flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let uid = e.file_name().to_string_lossy().into_owned();
        agent::volumes::cleanup(data_dir, &uid)?;
    }
    Ok(())
}

fn remove_sandboxes(
    socket: &Path,
) -> Result<Vec<(String, String, String)>, crate::upgrade::CriCallError> {
    use crate::upgrade::CriCallError;
    let call = |what: String| {
        move |s: tonic::Status| CriCallError::Call {
            what,
            message: s.message().to_string(),
        }
    };
    use cri_proto::v1::runtime_service_client::RuntimeServiceClient;
    use cri_proto::v1::{
        ListContainersRequest, ListPodSandboxRequest, RemoveContainerRequest,
        RemovePodSandboxRequest, StopPodSandboxRequest,
    };
    let rt = crate::upgrade::cri_runtime()?;
    rt.block_on(async {
        let channel = cri_proto::connect(socket).await?;
        let mut rs = RuntimeServiceClient::new(channel);
        let pods = rs
            .list_pod_sandbox(ListPodSandboxRequest::default())
            .await
            .map_err(call("ListPodSandbox".into()))?
            .into_inner()
            .items;
        let mut removed = Vec::new();
        for p in pods {
            let id = p.id.clone();
            rs.stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await
            .map_err(call(format!("stop pod {id}")))?;
            rs.remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await
            .map_err(call(format!("remove pod {id}")))?;
            let m = p.metadata.unwrap_or_default();
            removed.push((m.namespace, m.name, m.uid));
        }
        // Containers whose sandbox was already gone.
        let left = rs
            .list_containers(ListContainersRequest::default())
            .await
            .map_err(call("ListContainers".into()))?
            .into_inner()
            .containers;
        for c in left {
            rs.remove_container(RemoveContainerRequest {
                container_id: c.id.clone(),
            })
            .await
            .map_err(call(format!("remove container {}", c.id)))?;
        }
        Ok(removed)
    })
}

/// picolet's own network: the built-in conflist (only if it is still
/// picolet's), the bridge, the iptables chains. Each step says what it did;
/// one that cannot is a warning, not a stop.
fn remove_network(config: &edge_config::Config) {
    let conflist = config.cni_conf_dir.join("10-picolet.conflist");
    if std::fs::read_to_string(&conflist).is_ok_and(|t| t.contains("\"type\": \"picolet\""))
        && let Err(e) = remove(&conflist)
    {
        eprintln!("picolet reset: {e}");
    }
    let bridge = shim::cni_plugin::DEFAULT_BRIDGE;
    let deleted = shim::cni_plugin::netlink::Netlink::open().and_then(|mut nl| {
        match nl.link_index(bridge)? {
            Some(i) => nl.delete_link(i).map(|()| true),
            None => Ok(false),
        }
    });
    match deleted {
        Ok(true) => println!("removed the bridge {bridge}"),
        Ok(false) => {}
        Err(e) => eprintln!("picolet reset: delete the bridge {bridge}: {e}"),
    }
    if let Some(iptables) = shim::cni_plugin::iptables::find() {
        remove_chains(&iptables);
    }
}

const PICOLET_CHAINS: [&str; 2] = [
    shim::cni_plugin::iptables::HOSTPORTS,
    shim::cni_plugin::iptables::MASQ,
];

/// Deletes the jumps to picolet's nat chains, then the chains.
fn remove_chains(iptables: &Path) {
    let ipt = iptables.display().to_string();
    let Ok(out) = std::process::Command::new(iptables)
        .args(["-t", "nat", "-S"])
        .output()
    else {
        return;
    };
    let listing = String::from_utf8_lossy(&out.stdout);
    for (chain, rule) in chain_jumps(&listing) {
        let mut argv = vec![ipt.as_str(), "-t", "nat", "-D", chain.as_str()];
        argv.extend(rule.split(' '));
        if let Err(e) = crate::service::run(&argv) {
            eprintln!("picolet reset: {e}");
        }
    }
    for chain in PICOLET_CHAINS {
        if listing.lines().any(|l| l == format!("-N {chain}")) {
            let flushed = crate::service::run(&[&ipt, "-t", "nat", "-F", chain])
                .and_then(|()| crate::service::run(&[&ipt, "-t", "nat", "-X", chain]));
            match flushed {
                Ok(()) => println!("removed the iptables chain {chain}"),
                Err(e) => eprintln!("picolet reset: {e}"),
            }
        }
    }
}

/// The rules of other chains that jump to picolet's: (chain, rule after it).
fn chain_jumps(listing: &str) -> Vec<(String, String)> {
    listing
        .lines()
        .filter_map(|l| l.strip_prefix("-A "))
        .filter_map(|l| l.split_once(' '))
        .filter(|(chain, rule)| {
            !chain.starts_with("PICOLET-")
                && PICOLET_CHAINS
                    .iter()
                    .any(|c| rule.ends_with(&format!("-j {c}")))
        })
        .map(|(c, r)| (c.to_string(), r.to_string()))
        .collect()
}

/// The pod cgroups' parent (`kubepods` under `cgroupRoot`) in every
/// hierarchy, emptied bottom-up: only empty cgroups can be removed, so a
/// tree another runtime still uses stays.
fn remove_cgroups(cgroup_root: &str) {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut mounts: Vec<PathBuf> = match cgroup::parse_mountinfo(&text) {
        Some(cgroup::Hierarchy::V2(p)) => vec![p],
        Some(cgroup::Hierarchy::V1(list)) => list.into_iter().map(|(_, p)| p).collect(),
        None => Vec::new(),
    };
    mounts.sort();
    mounts.dedup();
    for m in mounts {
        let top = m.join(cgroup_root.trim_start_matches('/')).join("kubepods");
        if top.is_dir() && rmdir_tree(&top) {
            println!("removed the cgroup {}", top.display());
        }
    }
}

/// rmdir of a cgroup tree, children first; true when all of it went.
fn rmdir_tree(dir: &Path) -> bool {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                rmdir_tree(&e.path());
            }
        }
    }
    std::fs::remove_dir(dir).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_jumps_into_picolets_chains_are_deleted() {
        let listing = "-P PREROUTING ACCEPT\n-N PICOLET-HOSTPORTS\n-N PICOLET-MASQ\n-N DOCKER\n\
            -A PREROUTING -m addrtype --dst-type LOCAL -j PICOLET-HOSTPORTS\n\
            -A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER\n\
            -A OUTPUT -m addrtype --dst-type LOCAL -j PICOLET-HOSTPORTS\n\
            -A POSTROUTING -j PICOLET-MASQ\n\
            -A PICOLET-MASQ -s 10.42.0.0/16 -j MASQUERADE\n";
        assert_eq!(
            chain_jumps(listing),
            vec![
                (
                    "PREROUTING".into(),
                    "-m addrtype --dst-type LOCAL -j PICOLET-HOSTPORTS".into()
                ),
                (
                    "OUTPUT".into(),
                    "-m addrtype --dst-type LOCAL -j PICOLET-HOSTPORTS".into()
                ),
                ("POSTROUTING".into(), "-j PICOLET-MASQ".into()),
            ]
        );
    }

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(
            unescape_mount("/var/lib/a\\040b\\134c"),
            PathBuf::from("/var/lib/a b\\c")
        );
        assert_eq!(unescape_mount("/x\\04"), PathBuf::from("/x\\04"));
    }

    fn bundle(entries: &[(&str, &[u8], tar::EntryType)]) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().expect("tempdir");
        let path = d.path().join("b.tar.gz");
        let gz = flate2::write::GzEncoder::new(
            std::fs::File::create(&path).expect("create"),
            flate2::Compression::fast(),
        );
        let mut t = tar::Builder::new(gz);
        for (name, data, kind) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            // set_path refuses `..`: write the name bytes as a hostile
            // archive would.
            let raw = &mut h.as_old_mut().name;
            raw[..name.len()].copy_from_slice(name.as_bytes());
            h.set_cksum();
            t.append(&h, *data).expect("append");
        }
        t.into_inner().expect("tar").finish().expect("gz");
        (d, path)
    }

    #[test]
    fn a_bundle_installs_its_binary_images_and_examples_and_nothing_else() {
        let (d, path) = bundle(&[
            ("picolet-1-x86_64/picolet", b"ELF", tar::EntryType::Regular),
            (
                "picolet-1-x86_64/images/busybox.tar",
                b"img",
                tar::EntryType::Regular,
            ),
            (
                "picolet-1-x86_64/examples/manifests/hello.yaml",
                b"pod",
                tar::EntryType::Regular,
            ),
        ]);
        let prefix = d.path().join("usr");
        let images = d.path().join("images");
        let u = unpack_bundle(&path, &prefix, &images).expect("unpacks");
        assert_eq!(std::fs::read(&u.binary).expect("bin"), b"ELF");
        assert_eq!(u.images, vec![images.join("busybox.tar")]);
        assert_eq!(
            std::fs::read(prefix.join("share/picolet/examples/manifests/hello.yaml"))
                .expect("example"),
            b"pod"
        );
    }

    #[test]
    fn a_hostile_bundle_is_refused() {
        for (name, kind, why) in [
            (
                "picolet-1/../../etc/passwd",
                tar::EntryType::Regular,
                "top folder",
            ),
            ("/etc/passwd", tar::EntryType::Regular, "top folder"),
            (
                "picolet-1/images/x.tar",
                tar::EntryType::Symlink,
                "regular file",
            ),
            (
                "picolet-1/etc/shadow",
                tar::EntryType::Regular,
                "not part of",
            ),
        ] {
            let (d, path) = bundle(&[(name, b"x", kind)]);
            let e = unpack_bundle(&path, &d.path().join("usr"), &d.path().join("images"))
                .err()
                .unwrap_or_else(|| panic!("{name} accepted"));
            assert!(e.to_string().contains(why), "{name}: {e}");
            assert!(!d.path().join("etc").exists());
        }
        let (d, path) = bundle(&[("picolet-1/examples/a", b"x", tar::EntryType::Regular)]);
        let e = unpack_bundle(&path, &d.path().join("usr"), &d.path().join("images"))
            .err()
            .expect("no binary");
        assert!(e.to_string().contains("no `picolet` binary"), "{e}");
    }
}
