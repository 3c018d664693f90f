//! `picolet reset`: with picolet stopped, remove what it made and nothing
//! else: its pods (through a shim of its own, so containers, mounts,
//! cgroups and pod networks go the way they came), their volumes and log
//! folders, its data and runtime folders, its CNI config, bridge, iptables
//! chains and empty pod cgroups. Nothing is removed while a mount is left
//! under it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::service::Manager;
use crate::{CommonArgs, load_config};

#[derive(Debug, thiserror::Error)]
pub(crate) enum ResetError {
    #[error("must run as root")]
    NotRoot,
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
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
    #[error("{}: not removed: not an absolute path at least two folders deep", dir.display())]
    NotOurs { dir: PathBuf },
    #[error("{} is still mounted after the pods were removed; not removing {}", mount.display(), dir.display())]
    StillMounted { mount: PathBuf, dir: PathBuf },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ResetError + '_ {
    move |source| ResetError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[derive(clap::Args)]
pub(crate) struct ResetArgs {
    #[command(flatten)]
    common: CommonArgs,
}

pub(crate) fn run_reset(args: ResetArgs) -> ExitCode {
    let config = match load_config(&args.common) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let root = if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(ResetError::NotRoot)
    };
    crate::report("reset", root.and_then(|()| reset(&config, &args.common)))
}

pub(crate) fn remove(path: &Path) -> Result<(), ResetError> {
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
pub(crate) fn remove_tree(dir: &Path) -> Result<(), ResetError> {
    // A data or run dir configured as `/` or `/var` is a mistake to refuse,
    // not a folder to empty: picolet's own are at least two levels deep.
    let depth = dir
        .components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .count();
    if !dir.is_absolute() || depth < 2 || dir.components().any(|c| c.as_os_str() == "..") {
        return Err(ResetError::NotOurs {
            dir: dir.to_path_buf(),
        });
    }
    if !dir.exists() {
        return Ok(());
    }
    if let Some(mount) = mount_under(dir)? {
        return Err(ResetError::StillMounted {
            mount,
            dir: dir.to_path_buf(),
        });
    }
    std::fs::remove_dir_all(dir).map_err(io(dir))?;
    println!("removed {}", dir.display());
    Ok(())
}

/// A mount point at or under `dir`, if any. The mount table must be read:
/// a table that could not be read is an error, never "no mounts".
fn mount_under(dir: &Path) -> Result<Option<PathBuf>, ResetError> {
    let table = Path::new("/proc/self/mountinfo");
    let text = std::fs::read_to_string(table).map_err(io(table))?;
    Ok(shim::host::mountinfo::parse(&text)
        .map(|m| PathBuf::from(m.mount_point))
        .find(|p| p.starts_with(dir)))
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

pub(crate) fn reset(config: &edge_config::Config, common: &CommonArgs) -> Result<(), ResetError> {
    if let Some(s) = crate::notify::read_up_state(&config.run_dir)
        && Path::new(&format!("/proc/{}", s.pid)).exists()
    {
        return Err(ResetError::Running {
            pid: s.pid,
            stop: match Manager::detect() {
                Manager::Systemd => "systemctl stop picolet".into(),
                Manager::Openrc => "rc-service picolet stop".into(),
                Manager::Initd => "/etc/init.d/picolet stop".into(),
            },
        });
    }
    if std::os::unix::net::UnixStream::connect(&config.cri_socket).is_ok() {
        return Err(ResetError::ShimRunning {
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
fn remove_pods(config: &edge_config::Config, common: &CommonArgs) -> Result<(), ResetError> {
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
    let child = cmd.spawn().map_err(|e| ResetError::Shim(e.to_string()))?;
    let mut shim = ResetShim(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::os::unix::net::UnixStream::connect(&config.cri_socket).is_err() {
        if let Ok(Some(status)) = shim.0.try_wait() {
            return Err(ResetError::Shim(format!("exited ({status})")));
        }
        if Instant::now() > deadline {
            return Err(ResetError::Shim("did not serve in 60 s".into()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let removed = remove_sandboxes(&config.cri_socket)?;
    for (ns, name, uid) in &removed {
        println!("removed pod {ns}/{name}");
        // Only the pods removed here.
        match log_folder(ns, name, uid) {
            Some(folder) => remove_tree(&config.pod_logs_dir.join(folder))?,
            None => eprintln!("picolet reset: pod {ns}/{name}: no log folder name; left"),
        }
    }
    drop(shim);
    Ok(())
}

/// The agent's pod folders: their volumes (memory emptyDirs, secrets,
/// projected files) unmounted as the agent does when a pod goes.
fn remove_volumes(data_dir: &Path) -> Result<(), ResetError> {
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

/// kubelet's pod log folder name, `<namespace>_<name>_<uid>`, when it is
/// one folder: the metadata came over CRI, from any client of the socket.
fn log_folder(ns: &str, name: &str, uid: &str) -> Option<String> {
    let folder = format!("{ns}_{name}_{uid}");
    let p = Path::new(&folder);
    (p.components().count() == 1 && p.file_name() == Some(folder.as_ref())).then_some(folder)
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

    /// The mount check is what keeps a left bind mount from taking the
    /// files it shows: with a tmpfs inside, nothing is removed.
    #[test]
    fn a_folder_with_a_mount_inside_is_not_removed() {
        if !nix::unistd::geteuid().is_root() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "this test needs root and CI must not skip it"
            );
            eprintln!("SKIP a_folder_with_a_mount_inside_is_not_removed: needs root (mount)");
            return;
        }
        use nix::mount::{MntFlags, MsFlags, mount, umount2};
        let d = tempfile::tempdir().expect("tempdir");
        let root = d.path().join("data");
        let m = root.join("pods/u/volumes/x");
        std::fs::create_dir_all(&m).expect("mkdir");
        mount(
            Some("tmpfs"),
            &m,
            Some("tmpfs"),
            MsFlags::empty(),
            None::<&str>,
        )
        .expect("mount");
        std::fs::write(m.join("kept"), "x").expect("write");
        let e = remove_tree(&root).expect_err("refused");
        assert!(
            matches!(&e, ResetError::StillMounted { mount, .. } if *mount == m),
            "{e}"
        );
        assert!(
            m.join("kept").exists(),
            "nothing under the mount was touched"
        );
        umount2(&m, MntFlags::MNT_DETACH).expect("umount");
        remove_tree(&root).expect("removed once unmounted");
        assert!(!root.exists());
    }

    #[test]
    fn a_pods_log_folder_is_one_folder_or_none() {
        assert_eq!(
            log_folder("default", "web-n", "u1").as_deref(),
            Some("default_web-n_u1")
        );
        assert_eq!(log_folder("a", "../../etc", "u"), None);
        assert_eq!(log_folder("", "/", ""), None);
    }

    #[test]
    fn a_folder_near_the_root_is_never_removed() {
        for dir in ["/", "/var", "var/lib/picolet", "/var/lib/../.."] {
            let e = remove_tree(Path::new(dir)).expect_err(dir);
            assert!(matches!(e, ResetError::NotOurs { .. }), "{dir}: {e}");
        }
        let d = tempfile::tempdir().expect("tempdir");
        let inner = d.path().join("x");
        std::fs::create_dir_all(inner.join("y")).expect("mkdir");
        remove_tree(&inner).expect("removed");
        assert!(!inner.exists());
    }
}
