//! Pod sandboxes: pinned namespaces, per-pod hosts/resolv.conf/hostname and
//! /dev/shm. No pause process and no pause image.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use cri_proto::v1::{
    LinuxPodSandboxStatus, Namespace, NamespaceMode, NamespaceOption, PodIp, PodSandbox,
    PodSandboxConfig, PodSandboxFilter, PodSandboxNetworkStatus, PodSandboxState, PodSandboxStatus,
};
use nix::mount::{MsFlags, mount};

use crate::error::Error;
use crate::mutex::lock;
use crate::runtime::namespaces::{self, PodNamespaces};
use crate::runtime::{Claim, Runtime, SandboxEntry};
use crate::state::{self, META, SandboxRecord};

const SHM_SIZE: &str = "size=65536k";

pub(crate) fn ns_options(config: &PodSandboxConfig) -> NamespaceOption {
    config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_default()
}

fn is_node(mode: i32) -> bool {
    mode == NamespaceMode::Node as i32
}

/// resolv.conf from DNSConfig, or `None` to copy the host's.
pub fn resolv_conf(dns: Option<&cri_proto::v1::DnsConfig>) -> Option<String> {
    let dns =
        dns.filter(|d| !d.servers.is_empty() || !d.searches.is_empty() || !d.options.is_empty())?;
    let mut out = String::new();
    if !dns.searches.is_empty() {
        out.push_str(&format!("search {}\n", dns.searches.join(" ")));
    }
    for s in &dns.servers {
        out.push_str(&format!("nameserver {s}\n"));
    }
    if !dns.options.is_empty() {
        out.push_str(&format!("options {}\n", dns.options.join(" ")));
    }
    Some(out)
}

/// The pod's /etc/hosts: localhost entries (the host's file for host network).
pub fn hosts_file(host_network: bool) -> String {
    if host_network && let Ok(h) = fs::read_to_string("/etc/hosts") {
        return h;
    }
    "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n".into()
}

/// Writes one of the sandbox's own files (hostname, hosts, resolv.conf),
/// new in a new folder, before the sandbox is ready: nobody reads it half
/// written, and it needs no fsync (two device flushes each): a power cut
/// also ends the sandbox — its pinned namespaces do not survive a reboot, so
/// it is reported not ready and replaced, files and all.
fn write(path: &Path, data: &str) -> Result<(), Error> {
    fs::write(path, data).map_err(Error::io("write", path))
}

/// Whether what a ready sandbox stands on is still there: its run dir and
/// pinned namespaces (on tmpfs: gone after a reboot) and the pod's pid 1
/// (same start time: not a reused pid).
fn alive(rec: &SandboxRecord, pins: &namespaces::PinSpace) -> bool {
    rec.run_dir.is_dir()
        && [&rec.netns, &rec.ipcns, &rec.utsns, &rec.userns]
            .into_iter()
            .flatten()
            .all(|p| pins.find(p).is_some())
        && rec
            .pod_init
            .is_none_or(|(pid, start)| crate::host::proc_start_time(pid) == Some(start))
}

impl Runtime {
    /// At recovery: a recorded-ready sandbox that is no longer [`alive`]
    /// (after a reboot, or a lost pin) becomes not ready, as containerd
    /// reports a sandbox whose task is gone; kubelet stops it (CNI DEL from
    /// the attachment record) and makes another.
    pub(crate) fn recheck_ready(&self, rec: &mut SandboxRecord) -> Result<(), Error> {
        if rec.ready && !alive(rec, &self.pins) {
            tracing::warn!(sandbox = %rec.id, "namespaces or pod init gone (a reboot?): sandbox not ready");
            rec.ready = false;
            state::save(&rec.dir, META, rec)?;
        }
        Ok(())
    }

    pub async fn run_pod_sandbox(&self, config: PodSandboxConfig) -> Result<String, Error> {
        let meta = config
            .metadata
            .clone()
            .ok_or_else(|| Error::InvalidArgument("config.metadata: required".into()))?;
        if meta.name.is_empty() || meta.uid.is_empty() || meta.namespace.is_empty() {
            return Err(Error::InvalidArgument(
                "config.metadata: name, uid and namespace are required".into(),
            ));
        }
        // The name is claimed, not locked: the namespaces and the CNI ADD
        // (tens of ms, up to a plugin's timeout) run while other sandboxes
        // and containers are created.
        let key = format!(
            "{}\0{}\0{}\0{}",
            meta.namespace, meta.name, meta.uid, meta.attempt
        );
        let _claim = Claim::take(&self.creating_sandboxes, key, || {
            lock(&self.sandboxes).values().any(|e| {
                e.record.config.metadata.as_ref().is_some_and(|m| {
                    m.name == meta.name
                        && m.namespace == meta.namespace
                        && m.uid == meta.uid
                        && m.attempt == meta.attempt
                })
            })
        })
        .ok_or_else(|| {
            Error::AlreadyExists(format!(
                "sandbox {}/{} (uid {}, attempt {}) exists",
                meta.namespace, meta.name, meta.uid, meta.attempt
            ))
        })?;
        let ns = ns_options(&config);
        crate::spec::userns::of_pod(&ns)?;
        if ns.pid == NamespaceMode::Target as i32 {
            return Err(Error::InvalidArgument(
                "linux.security_context.namespace_options.pid: TARGET applies to containers, not sandboxes".into(),
            ));
        }
        let id = state::new_id();
        let mut rec = SandboxRecord {
            id: id.clone(),
            config: config.clone(),
            created_at: state::now_nanos(),
            ready: false,
            netns: None,
            ipcns: None,
            utsns: None,
            userns: None,
            shm: None,
            dir: self.sandbox_dir(&id),
            run_dir: self.sandbox_run_dir(&id),
            pod_init: None,
            ips: Vec::new(),
            complete: false,
        };
        for d in [&rec.dir, &rec.run_dir] {
            fs::create_dir_all(d).map_err(Error::io("create", d))?;
        }
        // The records until it is ready are volatile (`state` docs): they
        // let a crashed shim undo what a reboot undoes anyway.
        state::save_volatile(&rec.dir, META, &rec)?;
        match self.setup_sandbox(&mut rec).await {
            Ok(()) => {
                rec.complete = true;
                rec.ready = true;
                state::save_async(&rec.dir, META, &rec).await?;
                lock(&self.sandboxes).insert(id.clone(), SandboxEntry::new(rec));
                Ok(id)
            }
            Err(e) => {
                if let Err(cleanup) = self.destroy_sandbox_resources(&rec).await {
                    tracing::error!(sandbox = %id, error = %cleanup, "cleanup after failed RunPodSandbox");
                }
                Err(e)
            }
        }
    }

    async fn setup_sandbox(&self, rec: &mut SandboxRecord) -> Result<(), Error> {
        let ns = ns_options(&rec.config);
        let host_net = is_node(ns.network);
        let host_ipc = is_node(ns.ipc);
        let sysctls: BTreeMap<String, String> = rec
            .config
            .linux
            .as_ref()
            .map(|l| {
                l.sysctls
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let want = PodNamespaces {
            net: !host_net,
            ipc: !host_ipc,
            // A host-network pod shares the host's UTS namespace, as with containerd.
            uts: !host_net,
            hostname: rec.config.hostname.clone(),
            sysctls,
            user: crate::spec::userns::of_pod(&ns)?,
        };
        let run_dir = rec.run_dir.clone();
        let space = if want.net || want.ipc || want.uts || want.user.is_some() {
            self.pins.get(true)?
        } else {
            None
        };
        let pinned =
            tokio::task::spawn_blocking(move || namespaces::create(&run_dir, &want, space))
                .await??;
        rec.netns = pinned.net;
        rec.ipcns = pinned.ipc;
        rec.utsns = pinned.uts;
        rec.userns = pinned.user;
        // Record the pins at once so a crash from here on can release them.
        state::save_volatile(&rec.dir, META, &*rec)?;

        // The network before anything else runs in it, as containerd; no
        // config: loopback only. The attachment record CNI keeps in the
        // sandbox dir lets a crash from here on DEL what ADD did.
        if let Some(netns) = rec.netns.clone()
            && let Some(network) = self.cni.network().map_err(crate::cni::CniError::from)?
        {
            rec.ips = self
                .cni
                .setup(&rec.dir, network, &rec.id, &netns, &rec.config)
                .await?;
            state::save_volatile(&rec.dir, META, &*rec)?;
        }

        let hostname = if host_net {
            nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default()
        } else {
            rec.config.hostname.clone()
        };
        write(&rec.dir.join("hostname"), &format!("{hostname}\n"))?;
        write(&rec.dir.join("hosts"), &hosts_file(host_net))?;
        let resolv = match resolv_conf(rec.config.dns_config.as_ref()) {
            Some(r) => r,
            None => fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
        };
        write(&rec.dir.join("resolv.conf"), &resolv)?;

        if ns.pid == NamespaceMode::Pod as i32 {
            rec.pod_init = Some(self.start_pod_init(rec).await?);
            state::save_volatile(&rec.dir, META, &*rec)?;
        }

        if !host_ipc {
            let shm = rec.run_dir.join("shm");
            fs::create_dir_all(&shm).map_err(Error::io("create", &shm))?;
            mount(
                Some("shm"),
                &shm,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                Some(format!("mode=1777,{SHM_SIZE}").as_str()),
            )
            .map_err(Error::sys("mount pod /dev/shm at", &shm))?;
            rec.shm = Some(shm);
        }
        Ok(())
    }

    /// Starts `picolet monitor pod-init` in the pod's namespaces; returns
    /// its init's pid and start time.
    async fn start_pod_init(&self, rec: &SandboxRecord) -> Result<(i32, u64), Error> {
        let mut cmd = tokio::process::Command::new(&self.monitor_bin);
        cmd.arg0("picolet")
            .args(["monitor", "pod-init", "--sandbox"])
            .arg(&rec.run_dir);
        for (flag, pin) in [
            ("--user", &rec.userns),
            ("--net", &rec.netns),
            ("--ipc", &rec.ipcns),
            ("--uts", &rec.utsns),
        ] {
            if let Some(p) = pin {
                cmd.arg(flag).arg(self.pins.locate(p));
            }
        }
        let out = cmd
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .output()
            .await
            .map_err(Error::os("start pod init"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let pid: i32 = text.trim().parse().map_err(|_| {
            Error::Internal(format!(
                "pod init failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        })?;
        let start = crate::host::proc_start_time(pid)
            .ok_or_else(|| Error::Internal(format!("pod init {pid} exited at once")))?;
        Ok((pid, start))
    }

    /// The pod's shared pid namespace, while its init lives.
    pub(crate) fn pod_pidns(rec: &SandboxRecord) -> Option<std::path::PathBuf> {
        let (pid, start) = rec.pod_init?;
        (crate::host::proc_start_time(pid) == Some(start))
            .then(|| std::path::PathBuf::from(format!("/proc/{pid}/ns/pid")))
    }

    /// Unmounts and removes everything a sandbox record points at.
    pub(crate) async fn destroy_sandbox_resources(&self, rec: &SandboxRecord) -> Result<(), Error> {
        // DEL while the netns is still there; an error keeps everything for
        // the next try (the attachment record says what to delete).
        self.cni.teardown(&rec.dir).await?;
        if let Some((pid, start)) = rec.pod_init
            && crate::host::proc_start_time(pid) == Some(start)
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        // What the record names, and anything pinned or mounted before the
        // record learnt of it.
        let mut pins: Vec<PathBuf> = [&rec.netns, &rec.ipcns, &rec.utsns, &rec.userns]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        let mut shms: Vec<PathBuf> = rec.shm.iter().cloned().collect();
        let also = |list: &mut Vec<PathBuf>, kind: &str| {
            let p = rec.run_dir.join(kind);
            if !list.contains(&p) && p.exists() {
                list.push(p);
            }
        };
        for kind in ["net", "ipc", "uts", "user"] {
            also(&mut pins, kind);
        }
        also(&mut shms, "shm");
        self.pins.release(&pins)?;
        shms.iter().try_for_each(|p| namespaces::release(p))?;
        images::fsutil::remove_dir_all_if_exists(&rec.run_dir)?;
        crate::state::remove_record_dir(&rec.dir)
    }

    /// At a clean stop with no sandbox left: unpins the pin space, so a
    /// stopped picolet leaves no mount of its own behind.
    pub(crate) fn retire_pin_space(&self) {
        if lock(&self.sandboxes).is_empty()
            && lock(&self.creating_sandboxes).is_empty()
            && let Err(e) = self.pins.retire()
        {
            tracing::warn!(error = %e, "unpin the pin space");
        }
    }

    pub(crate) fn sandbox(&self, id: &str) -> Result<SandboxRecord, Error> {
        lock(&self.sandboxes)
            .get(id)
            .map(|e| e.record.clone())
            .ok_or_else(|| Error::NotFound(format!("pod sandbox {id:?} not found")))
    }

    pub(crate) fn containers_of(&self, sandbox_id: &str) -> Vec<String> {
        lock(&self.containers)
            .values()
            .filter(|e| e.record.sandbox_id == sandbox_id)
            .map(|e| e.record.id.clone())
            .collect()
    }

    /// Stops every container of the sandbox and marks it not ready. Idempotent.
    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), Error> {
        let Ok(mut rec) = self.sandbox(id) else {
            return Ok(()); // CRI: stopping an unknown sandbox succeeds
        };
        for c in self.containers_of(id) {
            self.stop_container(&c, 0).await?;
        }
        // As containerd: the network goes at stop; the netns stays pinned
        // until RemovePodSandbox, which deletes again if this failed.
        self.cni.teardown(&rec.dir).await?;
        if rec.ready {
            rec.ready = false;
            state::save_async(&rec.dir, META, &rec).await?;
            if let Some(e) = lock(&self.sandboxes).get_mut(id) {
                e.record = rec;
            }
        }
        Ok(())
    }

    /// Removes the sandbox and its containers (forcibly). Idempotent.
    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<(), Error> {
        let Ok(rec) = self.sandbox(id) else {
            return Ok(());
        };
        for c in self.containers_of(id) {
            self.remove_container(&c).await?;
        }
        self.destroy_sandbox_resources(&rec).await?;
        lock(&self.sandboxes).remove(id);
        Ok(())
    }

    pub(crate) fn sandbox_status_of(&self, rec: &SandboxRecord) -> PodSandboxStatus {
        let ns = ns_options(&rec.config);
        PodSandboxStatus {
            id: rec.id.clone(),
            metadata: rec.config.metadata.clone(),
            state: if rec.ready {
                PodSandboxState::SandboxReady
            } else {
                PodSandboxState::SandboxNotready
            } as i32,
            created_at: rec.created_at,
            network: Some(PodSandboxNetworkStatus {
                ip: rec.ips.first().map(|ip| ip.to_string()).unwrap_or_default(),
                additional_ips: rec
                    .ips
                    .iter()
                    .skip(1)
                    .map(|ip| PodIp { ip: ip.to_string() })
                    .collect(),
            }),
            linux: Some(LinuxPodSandboxStatus {
                namespaces: Some(Namespace { options: Some(ns) }),
            }),
            labels: rec.config.labels.clone(),
            annotations: rec.config.annotations.clone(),
            runtime_handler: String::new(),
        }
    }

    /// PodSandboxStatus; with `verbose`, also its info (`crictl inspectp`).
    pub fn pod_sandbox_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> Result<(PodSandboxStatus, Option<serde_json::Value>), Error> {
        let rec = self.sandbox(id)?;
        Ok((
            self.sandbox_status_of(&rec),
            verbose.then(|| sandbox_info(&rec)),
        ))
    }

    pub fn list_pod_sandbox(&self, filter: Option<PodSandboxFilter>) -> Vec<PodSandbox> {
        let f = filter.unwrap_or_default();
        let mut out: Vec<PodSandbox> = lock(&self.sandboxes)
            .values()
            .map(|e| &e.record)
            .filter(|s| f.id.is_empty() || s.id.starts_with(&f.id))
            .filter(|s| {
                f.state
                    .as_ref()
                    .is_none_or(|st| st.state == if s.ready { 0 } else { 1 })
            })
            .filter(|s| {
                f.label_selector
                    .iter()
                    .all(|(k, v)| s.config.labels.get(k) == Some(v))
            })
            .map(|s| PodSandbox {
                id: s.id.clone(),
                metadata: s.config.metadata.clone(),
                state: if s.ready { 0 } else { 1 },
                created_at: s.created_at,
                labels: s.config.labels.clone(),
                annotations: s.config.annotations.clone(),
                runtime_handler: String::new(),
            })
            .collect();
        out.sort_by_key(|s| s.created_at);
        out
    }
}

/// A sandbox's verbose info, in the shape of containerd's `info` where
/// picolet has the same thing: the sandbox's process (`pid`: containerd's
/// pause; here the pod's init, which only a shared pid namespace has, else
/// 0), the config it was made from, its namespace files, its folders.
fn sandbox_info(rec: &SandboxRecord) -> serde_json::Value {
    let path = |p: &Option<PathBuf>| {
        p.as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    };
    serde_json::json!({
        "pid": rec.pod_init.map_or(0, |(pid, _)| pid),
        "runtimeHandler": "",
        "runtimeType": "picolet",
        "config": rec.config,
        // Empty: the host's namespace.
        "netNamespacePath": path(&rec.netns),
        "namespaces": {
            "network": path(&rec.netns),
            "ipc": path(&rec.ipcns),
            "uts": path(&rec.utsns),
            "user": path(&rec.userns),
        },
        "ips": rec.ips,
        "shmPath": path(&rec.shm),
        "sandboxDir": rec.dir,
        "runtimeDir": rec.run_dir,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cri_proto::v1::DnsConfig;

    #[test]
    fn verbose_info_names_the_sandboxs_process_config_and_files() {
        let config = PodSandboxConfig {
            hostname: "hello".into(),
            ..Default::default()
        };
        let rec = SandboxRecord {
            id: "abc".into(),
            config,
            created_at: 1,
            ready: true,
            netns: Some("/run/picolet/sandboxes/abc/netns".into()),
            ipcns: Some("/run/picolet/sandboxes/abc/ipcns".into()),
            utsns: None,
            userns: None,
            shm: Some("/run/picolet/sandboxes/abc/shm".into()),
            dir: "/var/lib/picolet/shim/sandboxes/abc".into(),
            run_dir: "/run/picolet/sandboxes/abc".into(),
            pod_init: Some((4242, 7)),
            ips: vec!["10.42.0.5".parse().expect("ip")],
            complete: true,
        };
        let info = sandbox_info(&rec);
        assert_eq!(info["pid"], 4242);
        assert_eq!(info["netNamespacePath"], "/run/picolet/sandboxes/abc/netns");
        assert_eq!(info["namespaces"]["uts"], "", "the host's");
        assert_eq!(info["ips"][0], "10.42.0.5");
        assert_eq!(info["runtimeDir"], "/run/picolet/sandboxes/abc");
        assert_eq!(info["sandboxDir"], "/var/lib/picolet/shim/sandboxes/abc");
        assert_eq!(
            info["config"],
            serde_json::to_value(&rec.config).expect("config")
        );
        assert_eq!(
            sandbox_info(&SandboxRecord {
                pod_init: None,
                ..rec
            })["pid"],
            0
        );
    }

    #[test]
    fn resolv_conf_from_dns_config() {
        let dns = DnsConfig {
            servers: vec!["10.0.0.10".into()],
            searches: vec![
                "default.svc.cluster.local".into(),
                "svc.cluster.local".into(),
            ],
            options: vec!["ndots:5".into()],
        };
        assert_eq!(
            resolv_conf(Some(&dns)).expect("some"),
            "search default.svc.cluster.local svc.cluster.local\nnameserver 10.0.0.10\noptions ndots:5\n"
        );
        assert!(resolv_conf(Some(&DnsConfig::default())).is_none());
        assert!(resolv_conf(None).is_none());
    }

    #[test]
    fn hosts_has_localhost() {
        assert!(hosts_file(false).starts_with("127.0.0.1\tlocalhost\n"));
    }
}
