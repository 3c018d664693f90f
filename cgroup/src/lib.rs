//! Pod and QoS cgroups (`kubepods[/burstable|/besteffort]/pod<uid>`) for
//! cgroup v1 and v2, with the pod-level limits kubelet sets (cpu shares or
//! weight, CFS quota, memory limit, pids limit). Container cgroups below
//! them belong to the runtime, which writes them with [`container`]: one
//! owner per directory.
//!
//! Written directly against cgroupfs rather than through cgroups-rs: the
//! agent needs mkdir, a handful of writes and rmdir, and the parsers of the
//! mount table and of the files stay pure and unit-tested.

pub mod container;
pub mod devices;
pub mod favor;
pub mod procfs;
pub mod stats;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// v1 controllers the agent creates pod cgroups in and writes limits to.
/// (cpuset and the others are left to the runtime, which fills them in.)
const V1_CONTROLLERS: [&str; 4] = ["cpu", "cpuacct", "memory", "pids"];

/// Pod-level limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub cpu_shares: u64,
    pub cpu_quota: Option<i64>,
    pub cpu_period: u64,
    pub memory: Option<u64>,
    /// `podPidsLimit`; negative or zero means unlimited.
    pub pids: i64,
}

/// The cgroup layout of this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    /// v1: mount point per controller (several may share one, `cpu,cpuacct`).
    V1(Vec<(String, PathBuf)>),
    /// v2: the unified mount.
    V2(PathBuf),
}

/// Finds the cgroup mounts from `/proc/self/mountinfo` text. v2 wins only
/// when it is mounted at `/sys/fs/cgroup` itself (not the hybrid
/// `/sys/fs/cgroup/unified`).
pub fn parse_mountinfo(text: &str) -> Option<Hierarchy> {
    let mut v1 = Vec::new();
    let mut v2 = None;
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount_point = left.split(' ').nth(4).unwrap_or("");
        let mut r = right.split(' ');
        let fstype = r.next().unwrap_or("");
        let _source = r.next();
        let options = r.next().unwrap_or("");
        match fstype {
            "cgroup2" if mount_point == "/sys/fs/cgroup" => v2 = Some(PathBuf::from(mount_point)),
            "cgroup" => {
                for opt in options.split(',') {
                    if V1_CONTROLLERS.contains(&opt)
                        || matches!(
                            opt,
                            "cpuset"
                                | "blkio"
                                | "devices"
                                | "freezer"
                                | "net_cls"
                                | "net_prio"
                                | "perf_event"
                                | "hugetlb"
                                | "rdma"
                                | "misc"
                        )
                        || opt == "name=systemd"
                    {
                        v1.push((opt.to_string(), PathBuf::from(mount_point)));
                    }
                }
            }
            _ => {}
        }
    }
    match (v2, v1.is_empty()) {
        (Some(p), _) => Some(Hierarchy::V2(p)),
        (None, false) => Some(Hierarchy::V1(v1)),
        (None, true) => None,
    }
}

/// cpu.shares (2..262144) → cpu.weight (1..10000), as kubelet's
/// `CpuSharesToCpuWeight` converts for pod cgroups; 0 (unset) stays 0,
/// other values are clamped into range first. Container cgroups use runc
/// 1.3's non-linear conversion ([`container::shares_to_weight`]; 512
/// shares: weight 59 there, 20 here).
pub fn shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    1 + ((shares.clamp(2, 262_144) - 2) * 9999) / 262_142
}

impl Hierarchy {
    /// Detects this machine's layout.
    pub fn detect() -> io::Result<Self> {
        let text = fs::read_to_string("/proc/self/mountinfo")?;
        parse_mountinfo(&text)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no cgroup filesystem mounted"))
    }

    fn rel(path: &str) -> &str {
        path.trim_start_matches('/')
    }

    fn v1_dir(&self, controller: &str, path: &str) -> Option<PathBuf> {
        match self {
            Hierarchy::V1(m) => m
                .iter()
                .find(|(c, _)| c == controller)
                .map(|(_, mp)| mp.join(Self::rel(path))),
            Hierarchy::V2(_) => None,
        }
    }

    /// Creates the pod cgroup `path` (e.g. `/kubepods/burstable/pod<uid>`)
    /// with its parents, and writes `limits`.
    pub fn ensure_pod(&self, path: &str, limits: &Limits) -> io::Result<()> {
        match self {
            Hierarchy::V1(_) => {
                let mut writes: Vec<(&str, &str, String)> =
                    vec![("cpu", "cpu.shares", limits.cpu_shares.max(2).to_string())];
                if let Some(q) = limits.cpu_quota {
                    writes.push(("cpu", "cpu.cfs_period_us", limits.cpu_period.to_string()));
                    writes.push(("cpu", "cpu.cfs_quota_us", q.to_string()));
                }
                if let Some(m) = limits.memory {
                    writes.push(("memory", "memory.limit_in_bytes", m.to_string()));
                }
                if limits.pids > 0 {
                    writes.push(("pids", "pids.max", limits.pids.to_string()));
                }
                for c in V1_CONTROLLERS {
                    if let Some(d) = self.v1_dir(c, path) {
                        fs::create_dir_all(&d)?;
                    }
                }
                for (c, file, value) in writes {
                    if let Some(d) = self.v1_dir(c, path) {
                        write(&d.join(file), &value)?;
                    }
                }
                Ok(())
            }
            Hierarchy::V2(root) => {
                let dir = root.join(Self::rel(path));
                // Enable the controllers down the chain of parents.
                let mut cur = root.clone();
                for part in Path::new(Self::rel(path)).components() {
                    let avail =
                        fs::read_to_string(cur.join("cgroup.controllers")).unwrap_or_default();
                    let want: Vec<String> = ["cpu", "memory", "pids", "io"]
                        .iter()
                        .filter(|c| avail.split_whitespace().any(|a| a == **c))
                        .map(|c| format!("+{c}"))
                        .collect();
                    if !want.is_empty() {
                        // Best effort: a parent with processes refuses (EBUSY).
                        let _ = fs::write(cur.join("cgroup.subtree_control"), want.join(" "));
                    }
                    cur = cur.join(part);
                    fs::create_dir_all(&cur)?;
                }
                write(
                    &dir.join("cpu.weight"),
                    &shares_to_weight(limits.cpu_shares.max(2)).to_string(),
                )?;
                let max = match limits.cpu_quota {
                    Some(q) => format!("{q} {}", limits.cpu_period),
                    None => format!("max {}", limits.cpu_period),
                };
                write(&dir.join("cpu.max"), &max)?;
                write(
                    &dir.join("memory.max"),
                    &limits.memory.map_or("max".into(), |m| m.to_string()),
                )?;
                let pids = if limits.pids > 0 {
                    limits.pids.to_string()
                } else {
                    "max".into()
                };
                write(&dir.join("pids.max"), &pids)?;
                Ok(())
            }
        }
    }

    /// Removes cgroup `path` from every hierarchy: a pod's (the runtime has
    /// removed the container cgroups below it) or a container's, once its
    /// processes are gone. Missing directories are fine.
    pub fn remove_pod(&self, path: &str) -> io::Result<()> {
        let dirs: Vec<PathBuf> = match self {
            Hierarchy::V1(m) => m.iter().map(|(_, mp)| mp.join(Self::rel(path))).collect(),
            Hierarchy::V2(root) => vec![root.join(Self::rel(path))],
        };
        let mut first_err = None;
        for d in dirs {
            if let Err(e) = remove_tree(&d)
                && first_err.is_none()
            {
                first_err = Some(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// The pod cgroup's directories that exist (for checks and stats).
    pub fn pod_dirs(&self, path: &str) -> Vec<PathBuf> {
        let dirs: Vec<PathBuf> = match self {
            Hierarchy::V1(m) => m.iter().map(|(_, mp)| mp.join(Self::rel(path))).collect(),
            Hierarchy::V2(root) => vec![root.join(Self::rel(path))],
        };
        dirs.into_iter().filter(|d| d.is_dir()).collect()
    }
}

/// An I/O error on a cgroup file or directory, as libcgroups'
/// `WrappedIoError`: the path (and the value written) with the error whole
/// as its source. The crate's functions return `io::Result` with this
/// inside under the error's own kind ([`io::Error::get_ref`] downcasts to
/// it), printed as the text they gave before.
#[derive(Debug, thiserror::Error)]
pub enum WrappedIoError {
    #[error("{}: {value}: {source}", path.display())]
    Write {
        path: PathBuf,
        value: String,
        source: io::Error,
    },
    /// `mkdir`, `rmdir`, `open`, `attach to`.
    #[error("{op} {}: {source}", path.display())]
    Op {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

impl WrappedIoError {
    /// A write of `value` to `path` that failed.
    pub(crate) fn write(path: &Path, value: &str) -> impl FnOnce(io::Error) -> io::Error {
        let (path, value) = (path.to_path_buf(), value.to_string());
        move |source| {
            WrappedIoError::Write {
                path,
                value,
                source,
            }
            .into()
        }
    }

    /// `op` on `path` that failed.
    pub(crate) fn op(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> io::Error {
        let path = path.to_path_buf();
        move |source| WrappedIoError::Op { op, path, source }.into()
    }
}

impl From<WrappedIoError> for io::Error {
    fn from(e: WrappedIoError) -> io::Error {
        let (WrappedIoError::Write { source, .. } | WrappedIoError::Op { source, .. }) = &e;
        io::Error::new(source.kind(), e)
    }
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value).map_err(WrappedIoError::write(path, value))
}

/// rmdir of a cgroup directory and any empty child cgroups, deepest first.
fn remove_tree(dir: &Path) -> io::Result<()> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in rd.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path())?;
        }
    }
    match fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(WrappedIoError::op("rmdir", dir)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
25 30 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate
28 25 0:25 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu
29 25 0:26 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct
30 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
31 25 0:28 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
32 25 0:29 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset
";

    const UNIFIED: &str = "25 30 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";

    const COMBINED: &str =
        "28 25 0:25 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n";

    #[test]
    fn mount_tables() {
        let Some(Hierarchy::V1(m)) = parse_mountinfo(HYBRID) else {
            panic!("v1 expected");
        };
        assert!(m.contains(&("memory".into(), PathBuf::from("/sys/fs/cgroup/memory"))));
        assert!(m.contains(&("cpuset".into(), PathBuf::from("/sys/fs/cgroup/cpuset"))));
        assert_eq!(
            parse_mountinfo(UNIFIED),
            Some(Hierarchy::V2(PathBuf::from("/sys/fs/cgroup")))
        );
        let Some(Hierarchy::V1(m)) = parse_mountinfo(COMBINED) else {
            panic!("v1 expected");
        };
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].1, m[1].1);
        assert_eq!(parse_mountinfo(""), None);
    }

    #[test]
    fn weights() {
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(262_144), 10_000);
        assert_eq!(shares_to_weight(0), 0);
        assert_eq!(shares_to_weight(1), 1);
        assert_eq!(shares_to_weight(1 << 30), 10_000);
    }

    #[test]
    fn v2_files_on_a_fixture_tree() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path().to_path_buf();
        fs::write(root.join("cgroup.controllers"), "cpuset cpu io memory pids").expect("w");
        let h = Hierarchy::V2(root.clone());
        let limits = Limits {
            cpu_shares: 1024,
            cpu_quota: Some(50_000),
            cpu_period: 100_000,
            memory: Some(64 << 20),
            pids: 100,
        };
        h.ensure_pod("/kubepods/burstable/podu", &limits)
            .expect("ensure");
        let dir = root.join("kubepods/burstable/podu");
        let read = |f: &str| fs::read_to_string(dir.join(f)).expect("read");
        assert_eq!(read("cpu.weight"), "39");
        assert_eq!(read("cpu.max"), "50000 100000");
        assert_eq!(read("memory.max"), (64u64 << 20).to_string());
        assert_eq!(read("pids.max"), "100");
        assert_eq!(
            fs::read_to_string(root.join("cgroup.subtree_control")).expect("read"),
            "+cpu +memory +pids +io"
        );
        assert_eq!(h.pod_dirs("/kubepods/burstable/podu"), vec![dir.clone()]);
    }
}
