//! What a container's init does to its mount namespace, worked out from the
//! OCI spec before the fork: mount flags from option words (runc's table),
//! relative destinations, which mounts are binds, and the cgroup
//! directories a process is in. Pure, so it is unit-tested with tables.

use std::path::{Component, Path, PathBuf};

use nix::mount::MsFlags;
use oci_spec::runtime::Spec;

use crate::process::ChildError;

/// `linux.devices[i].<field>` holds `n`, which no device number is.
fn out_of_range(i: usize, field: &str, n: i64) -> ChildError {
    ChildError::invalid(
        format!("linux.devices[{i}].{field}"),
        format!("{n} is out of range"),
    )
}

/// One mount of the spec, ready for the init.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountPlan {
    /// Inside the rootfs, without a leading `/`; `..` and `.` removed.
    pub dest: PathBuf,
    pub kind: Kind,
    /// MS_RDONLY, MS_NOSUID, … (never MS_BIND, MS_REC or propagation).
    pub flags: MsFlags,
    /// What the kernel takes as data (`mode=755,size=65536k`).
    pub data: String,
    /// MS_SHARED/MS_SLAVE/MS_PRIVATE/MS_UNBINDABLE, with MS_REC for the
    /// `r` forms.
    pub propagation: Option<MsFlags>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Bind {
        source: PathBuf,
        recursive: bool,
        /// `rro`: read-only down to every mount under it too
        /// (`mount_setattr` with `AT_RECURSIVE`), not only the top one.
        recursive_readonly: bool,
    },
    /// A new file system: `proc`, `sysfs`, `tmpfs`, `devpts`, `mqueue`, …
    Fs { fstype: String, source: String },
    /// `type: cgroup`: the host's hierarchies as the container sees them.
    Cgroup,
}

/// The option words of a mount: flags to set, flags to clear, the
/// propagation, whether a bind is recursive, and the rest as data.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Options {
    pub set: MsFlags,
    pub clear: MsFlags,
    pub bind: bool,
    pub recursive: bool,
    /// `rro` (runc's word): every mount of the bind read-only.
    pub recursive_readonly: bool,
    pub propagation: Option<MsFlags>,
    pub data: Vec<String>,
}

pub(crate) fn parse_options(words: &[String]) -> Options {
    let mut o = Options {
        set: MsFlags::empty(),
        clear: MsFlags::empty(),
        bind: false,
        recursive: false,
        recursive_readonly: false,
        propagation: None,
        data: Vec::new(),
    };
    for w in words {
        let (set, clear) = match w.as_str() {
            "defaults" => (MsFlags::empty(), MsFlags::empty()),
            "ro" => (MsFlags::MS_RDONLY, MsFlags::empty()),
            "rw" => (MsFlags::empty(), MsFlags::MS_RDONLY),
            "nosuid" => (MsFlags::MS_NOSUID, MsFlags::empty()),
            "suid" => (MsFlags::empty(), MsFlags::MS_NOSUID),
            "nodev" => (MsFlags::MS_NODEV, MsFlags::empty()),
            "dev" => (MsFlags::empty(), MsFlags::MS_NODEV),
            "noexec" => (MsFlags::MS_NOEXEC, MsFlags::empty()),
            "exec" => (MsFlags::empty(), MsFlags::MS_NOEXEC),
            "sync" => (MsFlags::MS_SYNCHRONOUS, MsFlags::empty()),
            "async" => (MsFlags::empty(), MsFlags::MS_SYNCHRONOUS),
            "dirsync" => (MsFlags::MS_DIRSYNC, MsFlags::empty()),
            "mand" => (MsFlags::MS_MANDLOCK, MsFlags::empty()),
            "nomand" => (MsFlags::empty(), MsFlags::MS_MANDLOCK),
            "noatime" => (MsFlags::MS_NOATIME, MsFlags::empty()),
            "atime" => (MsFlags::empty(), MsFlags::MS_NOATIME),
            "nodiratime" => (MsFlags::MS_NODIRATIME, MsFlags::empty()),
            "diratime" => (MsFlags::empty(), MsFlags::MS_NODIRATIME),
            "relatime" => (MsFlags::MS_RELATIME, MsFlags::empty()),
            "norelatime" => (MsFlags::empty(), MsFlags::MS_RELATIME),
            "strictatime" => (MsFlags::MS_STRICTATIME, MsFlags::empty()),
            "nostrictatime" => (MsFlags::empty(), MsFlags::MS_STRICTATIME),
            "rro" => {
                o.recursive_readonly = true;
                continue;
            }
            "rrw" => {
                o.recursive_readonly = false;
                continue;
            }
            "bind" => {
                o.bind = true;
                continue;
            }
            "rbind" => {
                o.bind = true;
                o.recursive = true;
                continue;
            }
            p => {
                if let Some(flag) = propagation(p) {
                    o.propagation = Some(flag);
                } else {
                    o.data.push(p.to_string());
                }
                continue;
            }
        };
        o.set = (o.set | set) & !clear;
        o.clear = (o.clear | clear) & !set;
    }
    o
}

fn propagation(word: &str) -> Option<MsFlags> {
    let (rec, base) = match word.strip_prefix('r') {
        Some(b @ ("private" | "shared" | "slave" | "unbindable")) => (MsFlags::MS_REC, b),
        _ => (MsFlags::empty(), word),
    };
    let flag = match base {
        "private" => MsFlags::MS_PRIVATE,
        "shared" => MsFlags::MS_SHARED,
        "slave" => MsFlags::MS_SLAVE,
        "unbindable" => MsFlags::MS_UNBINDABLE,
        _ => return None,
    };
    Some(flag | rec)
}

/// `dest` as a path inside the root: absolute, with `.` and `..` resolved
/// lexically (a `..` at the top stays at the top), no leading `/`.
pub(crate) fn inside(dest: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in dest.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The spec's mounts, in order.
pub(crate) fn mounts(spec: &Spec) -> Result<Vec<MountPlan>, ChildError> {
    let mut out = Vec::new();
    for (i, m) in spec.mounts().iter().flatten().enumerate() {
        let o = parse_options(m.options().as_deref().unwrap_or_default());
        let typ = m.typ().as_deref().unwrap_or("");
        let dest = inside(m.destination());
        if !m.destination().is_absolute() {
            return Err(ChildError::invalid(
                format!("mounts[{i}].destination"),
                format!("{:?} is not absolute", m.destination()),
            ));
        }
        let kind = if o.bind || typ == "bind" {
            let source = m.source().clone().ok_or_else(|| {
                ChildError::invalid(format!("mounts[{i}]"), "a bind mount without a source")
            })?;
            Kind::Bind {
                source,
                recursive: o.recursive,
                recursive_readonly: o.recursive_readonly,
            }
        } else if o.recursive_readonly {
            return Err(ChildError::invalid(
                format!("mounts[{i}].options"),
                "rro is for bind mounts only",
            ));
        } else if typ == "cgroup" {
            Kind::Cgroup
        } else if typ.is_empty() {
            return Err(ChildError::invalid(format!("mounts[{i}]"), "no type"));
        } else {
            Kind::Fs {
                fstype: typ.to_string(),
                source: m
                    .source()
                    .as_ref()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| typ.to_string()),
            }
        };
        if dest.starts_with("proc") && !allowed_in_proc(&dest, &kind) {
            return Err(ChildError::invalid(
                format!("mounts[{i}].destination"),
                format!(
                    "{:?} is inside /proc: only a procfs at /proc \
                     and binds onto the files LXCFS serves may go there",
                    m.destination()
                ),
            ));
        }
        let mut flags = o.set;
        // /dev is written to by the init (devices, links): never read-only
        // while it is being made (libcontainer and runc alike).
        if dest == Path::new("dev") {
            flags.remove(MsFlags::MS_RDONLY);
        }
        out.push(MountPlan {
            dest,
            kind,
            flags,
            data: o.data.join(","),
            propagation: o.propagation,
        });
    }
    Ok(out)
}

/// The files under /proc a bind may cover (runc's list, LXCFS's files).
const PROC_BINDS: [&str; 10] = [
    "proc/cpuinfo",
    "proc/diskstats",
    "proc/meminfo",
    "proc/stat",
    "proc/swaps",
    "proc/uptime",
    "proc/loadavg",
    "proc/slabinfo",
    "proc/net/dev",
    "proc/sys/kernel/ns_last_pid",
];

/// Whether a mount at `dest` inside /proc is one runc allows: a procfs at
/// /proc itself, or a bind onto one of [`PROC_BINDS`]. Anything else there
/// would cover the procfs files the init and the kernel's checks rely on
/// (runc's CVE-2019-19921 / CVE-2023-27561: a volume's link turning a
/// mount into one over /proc, and the init's later writes through it).
fn allowed_in_proc(dest: &Path, kind: &Kind) -> bool {
    match kind {
        Kind::Fs { fstype, .. } => fstype == "proc" && dest == Path::new("proc"),
        Kind::Bind { .. } => PROC_BINDS.iter().any(|p| dest == Path::new(p)),
        Kind::Cgroup => false,
    }
}

/// Everything about the container's root: its mounts, devices and what is
/// masked or made read-only.
#[derive(Debug, Clone)]
pub(crate) struct RootPlan {
    pub rootfs: PathBuf,
    /// For `/` of the new mount namespace before anything is mounted.
    pub propagation: MsFlags,
    /// For `/` after pivot_root (`shared` and `unbindable` only).
    pub after_pivot: Option<MsFlags>,
    pub mounts: Vec<MountPlan>,
    pub devices: Vec<DevicePlan>,
    pub readonly: bool,
    pub masked: Vec<PathBuf>,
    pub readonly_paths: Vec<PathBuf>,
    /// The container joins a user namespace of its pod's: it may not make
    /// device nodes there, so the host's are bound instead (as runc).
    pub in_userns: bool,
}

/// A device node the init makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DevicePlan {
    /// Inside the root, no leading `/`.
    pub dest: PathBuf,
    pub block: bool,
    pub major: u64,
    pub minor: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// runc's default devices, made unless the spec has one at the same path.
const DEFAULT_DEVICES: [(&str, u64, u64); 6] = [
    ("dev/null", 1, 3),
    ("dev/zero", 1, 5),
    ("dev/full", 1, 7),
    ("dev/tty", 5, 0),
    ("dev/urandom", 1, 9),
    ("dev/random", 1, 8),
];

pub(crate) fn root(spec: &Spec) -> Result<RootPlan, ChildError> {
    let root = spec
        .root()
        .as_ref()
        .ok_or_else(|| ChildError::invalid("root", "missing from the spec"))?;
    let linux = spec
        .linux()
        .as_ref()
        .ok_or_else(|| ChildError::invalid("linux", "missing from the spec"))?;
    let (propagation, after_pivot) = match linux.rootfs_propagation().as_deref() {
        Some("shared") => (MsFlags::MS_SHARED, Some(MsFlags::MS_SHARED)),
        Some("private") => (MsFlags::MS_PRIVATE, None),
        Some("slave") | None => (MsFlags::MS_SLAVE, None),
        Some("unbindable") => (MsFlags::MS_SLAVE, Some(MsFlags::MS_UNBINDABLE)),
        Some(other) => {
            return Err(ChildError::invalid(
                "linux.rootfsPropagation",
                format!("unknown {other:?}"),
            ));
        }
    };
    let mut devices = Vec::new();
    for (i, d) in linux.devices().iter().flatten().enumerate() {
        use oci_spec::runtime::LinuxDeviceType as T;
        let block = match d.typ() {
            T::B => true,
            T::C | T::U => false,
            other => {
                return Err(ChildError::invalid(
                    format!("linux.devices[{i}].type"),
                    format!("{other:?} is not supported"),
                ));
            }
        };
        devices.push(DevicePlan {
            dest: inside(d.path()),
            block,
            major: u64::try_from(d.major()).map_err(|_| out_of_range(i, "major", d.major()))?,
            minor: u64::try_from(d.minor()).map_err(|_| out_of_range(i, "minor", d.minor()))?,
            mode: d.file_mode().unwrap_or(0o666) & 0o7777,
            uid: d.uid().unwrap_or(0),
            gid: d.gid().unwrap_or(0),
        });
    }
    for (path, major, minor) in DEFAULT_DEVICES {
        if !devices.iter().any(|d| d.dest == Path::new(path)) {
            devices.push(DevicePlan {
                dest: path.into(),
                block: false,
                major,
                minor,
                mode: 0o666,
                uid: 0,
                gid: 0,
            });
        }
    }
    let paths = |p: &Option<Vec<String>>| -> Vec<PathBuf> {
        p.iter()
            .flatten()
            .map(|s| PathBuf::from("/").join(inside(Path::new(s))))
            .collect()
    };
    Ok(RootPlan {
        rootfs: root.path().clone(),
        propagation,
        after_pivot,
        mounts: mounts(spec)?,
        devices,
        readonly: root.readonly().unwrap_or(false),
        masked: paths(linux.masked_paths()),
        readonly_paths: paths(linux.readonly_paths()),
        in_userns: linux
            .namespaces()
            .iter()
            .flatten()
            .any(|n| n.typ() == oci_spec::runtime::LinuxNamespaceType::User),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn option_words_become_flags_propagation_and_data() {
        let o = parse_options(&words(&[
            "nosuid",
            "strictatime",
            "mode=755",
            "size=65536k",
        ]));
        assert_eq!(o.set, MsFlags::MS_NOSUID | MsFlags::MS_STRICTATIME);
        assert_eq!(o.data, words(&["mode=755", "size=65536k"]));
        assert!(!o.bind);

        let o = parse_options(&words(&["rbind", "rslave", "ro"]));
        assert!(o.bind && o.recursive);
        assert_eq!(o.propagation, Some(MsFlags::MS_SLAVE | MsFlags::MS_REC));
        assert_eq!(o.set, MsFlags::MS_RDONLY);

        // The later word wins.
        let o = parse_options(&words(&["ro", "rw", "private"]));
        assert_eq!(o.set, MsFlags::empty());
        assert_eq!(o.clear, MsFlags::MS_RDONLY);
        assert_eq!(o.propagation, Some(MsFlags::MS_PRIVATE));
        assert!(
            parse_options(&words(&["runbindable"]))
                .propagation
                .is_some()
        );
        let o = parse_options(&words(&["rbind", "ro", "rro"]));
        assert!(o.recursive_readonly);
        assert_eq!(o.set, MsFlags::MS_RDONLY);
        assert!(!parse_options(&words(&["rro", "rrw"])).recursive_readonly);
        // Not a propagation: data.
        assert_eq!(
            parse_options(&words(&["rsize=1"])).data,
            words(&["rsize=1"])
        );
    }

    #[test]
    fn destinations_stay_inside_the_root() {
        assert_eq!(inside(Path::new("/dev/pts")), PathBuf::from("dev/pts"));
        assert_eq!(inside(Path::new("/../../etc/./x/..")), PathBuf::from("etc"));
        assert_eq!(inside(Path::new("/")), PathBuf::new());
    }

    #[test]
    fn spec_mounts_are_planned_in_order() {
        let spec: Spec = serde_json::from_value(serde_json::json!({
            "ociVersion": "1.0.2",
            "root": {"path": "/r"},
            "mounts": [
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "ro", "mode=755"]},
                {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["ro"]},
                {"destination": "/data", "type": "bind", "source": "/srv/data", "options": ["rbind", "rshared", "ro"]},
                {"destination": "/x", "source": "/srv/x", "options": ["bind"]},
            ],
        }))
        .expect("spec");
        let m = mounts(&spec).expect("plan");
        assert_eq!(m[0].dest, PathBuf::from("dev"));
        // /dev is never made read-only.
        assert_eq!(m[0].flags, MsFlags::MS_NOSUID);
        assert_eq!(m[0].data, "mode=755");
        assert_eq!(m[1].kind, Kind::Cgroup);
        assert_eq!(m[1].flags, MsFlags::MS_RDONLY);
        assert_eq!(
            m[2].kind,
            Kind::Bind {
                source: "/srv/data".into(),
                recursive: true,
                recursive_readonly: false,
            }
        );
        assert_eq!(m[2].propagation, Some(MsFlags::MS_SHARED | MsFlags::MS_REC));
        assert_eq!(
            m[3].kind,
            Kind::Bind {
                source: "/srv/x".into(),
                recursive: false,
                recursive_readonly: false,
            }
        );
        let rro_fs: Spec = serde_json::from_value(serde_json::json!({
            "ociVersion": "1.0.2",
            "mounts": [{"destination": "/t", "type": "tmpfs", "options": ["ro", "rro"]}],
        }))
        .expect("spec");
        let e = mounts(&rro_fs).expect_err("rro on a new file system");
        assert!(e.to_string().contains("mounts[0].options"), "{e}");
        let bad: Spec = serde_json::from_value(serde_json::json!({
            "ociVersion": "1.0.2",
            "mounts": [{"destination": "/y", "options": ["rw"]}],
        }))
        .expect("spec");
        assert!(
            mounts(&bad)
                .expect_err("no type")
                .to_string()
                .contains("mounts[0]")
        );
    }

    #[test]
    fn nothing_but_procfs_and_lxcfs_binds_goes_inside_proc() {
        let plan = |dest: &str, typ: &str, options: &[&str]| {
            let spec: Spec = serde_json::from_value(serde_json::json!({
                "ociVersion": "1.0.2",
                "mounts": [{"destination": dest, "type": typ, "source": "/srv/x", "options": options}],
            }))
            .expect("spec");
            mounts(&spec).map(|_| ())
        };
        assert_eq!(plan("/proc", "proc", &[]), Ok(()));
        assert_eq!(plan("/proc/meminfo", "bind", &["rbind"]), Ok(()));
        assert_eq!(plan("/procfoo", "bind", &["rbind"]), Ok(()));
        for (dest, typ) in [
            ("/proc", "bind"),
            ("/proc/self", "bind"),
            ("/proc/sys/kernel/core_pattern", "bind"),
            ("/proc/../proc/self/fd", "bind"),
            ("/proc/sys", "tmpfs"),
            ("/proc/1", "proc"),
        ] {
            let err = plan(dest, typ, &["rbind"]).expect_err(dest).to_string();
            assert!(
                err.contains("mounts[0].destination") && err.contains("inside /proc"),
                "{err}"
            );
        }
    }
}
