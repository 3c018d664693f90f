//! What spec generation needs from the host, read before the pure
//! [`crate::spec::build`]: files of the image rootfs, Localhost seccomp
//! profiles, devices (CRI's and CDI's), our own oom_score_adj.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use cri_proto::v1::ContainerConfig;

use crate::error::Error;
use crate::spec::ResolvedDevice;
use crate::spec::cdi::{self, CdiError};

/// Reads a small file of the image rootfs, refusing symlinks (which could
/// point at the host's files).
pub(crate) fn read_image_file(rootfs: &Path, rel: &str) -> Option<String> {
    let mut p = rootfs.to_path_buf();
    for c in Path::new(rel).components() {
        p.push(c);
        if fs::symlink_metadata(&p).ok()?.file_type().is_symlink() {
            return None;
        }
    }
    fs::read_to_string(p).ok()
}

/// Reads the file a Localhost seccomp profile names (OCI / docker JSON),
/// and checks that it compiles.
pub(crate) fn load_localhost_seccomp(
    config: &ContainerConfig,
) -> Result<Option<serde_json::Value>, Error> {
    use cri_proto::v1::security_profile::ProfileType;
    let field = "linux.security_context.seccomp.localhost_ref";
    let Some(p) = config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.seccomp.as_ref())
    else {
        return Ok(None);
    };
    if p.profile_type != ProfileType::Localhost as i32 {
        return Ok(None);
    }
    let path = p
        .localhost_ref
        .strip_prefix("localhost/")
        .unwrap_or(&p.localhost_ref);
    if !path.starts_with('/') {
        return Err(Error::InvalidArgument(format!(
            "{field}: {path:?} is not an absolute path"
        )));
    }
    let raw =
        fs::read(path).map_err(|e| Error::InvalidArgument(format!("{field}: {path}: {e}")))?;
    let value: serde_json::Value = serde_json::from_slice(&raw)
        .map_err(|e| Error::InvalidArgument(format!("{field}: {path}: {e}")))?;
    let profile: oci_spec::runtime::LinuxSeccomp =
        serde_json::from_value(value.clone()).map_err(|e| {
            Error::InvalidArgument(format!("{field}: {path}: not an OCI seccomp profile: {e}"))
        })?;
    crate::seccomp::compile(&profile)
        .map_err(|e| Error::InvalidArgument(format!("{field}: {path}: {e}")))?;
    Ok(Some(value))
}

pub(crate) fn own_oom_score_adj() -> i64 {
    fs::read_to_string("/proc/self/oom_score_adj")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(-1000)
}

/// Whether containers can get hugepage limits: the hugetlb controller is
/// mounted (cgroup v1) or offered by the root of the unified hierarchy (v2).
/// Kernels without hugepages, and hosts like this CI machine whose v1 hugetlb
/// hierarchy is not mounted, lack it.
pub(crate) fn hugetlb_available() -> bool {
    let root = Path::new("/sys/fs/cgroup");
    match fs::read_to_string(root.join("cgroup.controllers")) {
        Ok(v2) => v2.split_whitespace().any(|c| c == "hugetlb"),
        Err(_) => root.join("hugetlb").is_dir(),
    }
}

/// The shim's capability bounding set (`CapBnd` of /proc/self/status).
pub(crate) fn own_cap_bounding() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapBnd:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(u64::MAX)
}

pub(crate) fn resolve_devices(config: &ContainerConfig) -> Result<Vec<ResolvedDevice>, Error> {
    let mut out = Vec::new();
    for (i, d) in config.devices.iter().enumerate() {
        let m = fs::metadata(&d.host_path).map_err(|e| {
            Error::InvalidArgument(format!("devices[{i}].host_path: {}: {e}", d.host_path))
        })?;
        let ft = m.file_type();
        let kind = if ft.is_char_device() {
            'c'
        } else if ft.is_block_device() {
            'b'
        } else {
            return Err(Error::InvalidArgument(format!(
                "devices[{i}].host_path: {} is not a device",
                d.host_path
            )));
        };
        let rdev = m.rdev();
        let perms = if d.permissions.is_empty() {
            "rwm".to_string()
        } else {
            d.permissions.clone()
        };
        if !perms.chars().all(|c| "rwm".contains(c)) {
            return Err(Error::InvalidArgument(format!(
                "devices[{i}].permissions: {perms:?} (want r, w, m)"
            )));
        }
        out.push(ResolvedDevice {
            container_path: if d.container_path.is_empty() {
                d.host_path.clone()
            } else {
                d.container_path.clone()
            },
            kind,
            // 12 and 20 bits wide in the kernel's dev_t.
            major: i64::try_from(nix::sys::stat::major(rdev)).unwrap_or(i64::MAX),
            minor: i64::try_from(nix::sys::stat::minor(rdev)).unwrap_or(i64::MAX),
            file_mode: m.mode() & 0o777,
            permissions: perms,
        });
    }
    Ok(out)
}

/// The CDI edits a container asks for (none when it asks for no device or
/// CDI is off, as containerd ignores the requests then): the spec folders
/// read anew (as the CDI library refreshes its cache on change), the
/// devices resolved, their nodes' type and numbers filled from the host.
pub(crate) fn resolve_cdi(
    config: &ContainerConfig,
    enabled: bool,
    dirs: &[PathBuf],
) -> Result<Option<cdi::ContainerEdits>, Error> {
    if !enabled {
        return Ok(None);
    }
    let names = cdi::requested(config)?;
    if names.is_empty() {
        return Ok(None);
    }
    let registry = load_cdi_specs(dirs);
    let mut edits = registry.resolve(&names)?;
    for d in &mut edits.device_nodes {
        fill_device_node(d)?;
    }
    tracing::debug!(devices = ?names, "CDI devices resolved");
    Ok(Some(edits))
}

/// Every `*.json`, `*.yaml` and `*.yml` file directly in `dirs` (later
/// folders win), in name order. A file that does not load is skipped with a
/// warning naming it and the field; a missing folder is none.
pub(crate) fn load_cdi_specs(dirs: &[PathBuf]) -> cdi::Registry {
    let mut specs = Vec::new();
    for (priority, dir) in dirs.iter().enumerate() {
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "CDI spec folder skipped");
                continue;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension()
                    .is_some_and(|x| x == "json" || x == "yaml" || x == "yml")
                    && p.is_file()
            })
            .collect();
        files.sort();
        for file in files {
            match read_cdi_spec(&file) {
                Ok(spec) => specs.push((file, priority, spec)),
                Err(e) => tracing::warn!(error = %e, "CDI spec file skipped"),
            }
        }
    }
    let (registry, conflicts) = cdi::Registry::new(specs);
    for c in conflicts {
        tracing::warn!("{c}");
    }
    registry
}

/// Reads and parses one spec file, at most [`cdi::MAX_SPEC_BYTES`].
fn read_cdi_spec(file: &Path) -> Result<cdi::Spec, CdiError> {
    let read = |source| CdiError::Read {
        file: file.to_path_buf(),
        source,
    };
    let mut data = Vec::new();
    fs::File::open(file)
        .map_err(read)?
        .take(cdi::MAX_SPEC_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(read)?;
    if u64::try_from(data.len()).unwrap_or(u64::MAX) > cdi::MAX_SPEC_BYTES {
        return Err(CdiError::TooLarge {
            file: file.to_path_buf(),
            limit: cdi::MAX_SPEC_BYTES,
        });
    }
    cdi::parse_spec(&data, file)
}

/// Fills a CDI device node's host path, type and numbers from the host
/// device when the spec leaves them out, as the CDI library does: the
/// type when empty (and it must match when given), the numbers when the
/// major is 0.
fn fill_device_node(d: &mut cdi::DeviceNode) -> Result<(), CdiError> {
    if d.host_path.is_empty() {
        d.host_path.clone_from(&d.path);
    }
    if !d.kind.is_empty() && d.major != 0 {
        return Ok(());
    }
    let m = fs::metadata(&d.host_path).map_err(|source| CdiError::Stat {
        path: d.path.clone(),
        host_path: d.host_path.clone(),
        source,
    })?;
    let ft = m.file_type();
    let host = if ft.is_char_device() {
        "c"
    } else if ft.is_block_device() {
        "b"
    } else {
        return Err(CdiError::HostDevice {
            path: d.path.clone(),
            host_path: d.host_path.clone(),
            why: "not a device".into(),
        });
    };
    if d.kind.is_empty() {
        d.kind = host.into();
    } else if !(d.kind == host || (d.kind == "u" && host == "c")) {
        return Err(CdiError::HostDevice {
            path: d.path.clone(),
            host_path: d.host_path.clone(),
            why: format!("type {} on the host, {} in the spec", host, d.kind),
        });
    }
    if d.major == 0 {
        let rdev = m.rdev();
        // 12 and 20 bits wide in the kernel's dev_t.
        d.major = i64::try_from(nix::sys::stat::major(rdev)).unwrap_or(i64::MAX);
        d.minor = i64::try_from(nix::sys::stat::minor(rdev)).unwrap_or(i64::MAX);
    }
    Ok(())
}

/// Checks that the host side of each mount can propagate as asked, as
/// containerd does: BIDIRECTIONAL needs its source on a shared mount,
/// HOST_TO_CONTAINER on a shared or slave one. Otherwise the container would
/// run and silently see nothing propagate.
pub(crate) fn check_mount_propagation(config: &ContainerConfig) -> Result<(), Error> {
    use cri_proto::v1::MountPropagation;
    let wanted: Vec<_> = config
        .mounts
        .iter()
        .enumerate()
        .filter(|(_, m)| m.propagation != MountPropagation::PropagationPrivate as i32)
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")
        .map_err(Error::io("read", Path::new("/proc/self/mountinfo")))?;
    for (i, m) in wanted {
        let field = format!("mounts[{i}].propagation");
        let source = fs::canonicalize(&m.host_path).map_err(|e| {
            Error::InvalidArgument(format!("mounts[{i}].host_path: {}: {e}", m.host_path))
        })?;
        let Some((mount_point, tags)) = mount_of(&mountinfo, &source) else {
            return Err(Error::Internal(format!(
                "{field}: no mount holds {}",
                source.display()
            )));
        };
        let shared = tags.iter().any(|t| t.starts_with("shared:"));
        let slave = tags.iter().any(|t| t.starts_with("master:"));
        let (ok, need) = if m.propagation == MountPropagation::PropagationBidirectional as i32 {
            (shared, "shared")
        } else {
            (shared || slave, "shared or slave")
        };
        if !ok {
            return Err(Error::InvalidArgument(format!(
                "{field}: {} is on the mount {mount_point}, which is not {need} \
                 (e.g. mount --make-rshared {mount_point})",
                m.host_path
            )));
        }
    }
    Ok(())
}

/// The mount (from /proc/self/mountinfo text) that holds `path`, an absolute
/// path without symlinks: the deepest mount point above it, the last mounted
/// when several share it; with its propagation tags (`shared:N`, `master:N`).
fn mount_of<'a>(mountinfo: &'a str, path: &Path) -> Option<(String, Vec<&'a str>)> {
    let mut best: Option<(String, Vec<&str>)> = None;
    for m in crate::host::mountinfo::parse(mountinfo) {
        if !path.starts_with(&m.mount_point) {
            continue;
        }
        let deeper = best.as_ref().is_none_or(|(b, _)| {
            Path::new(&m.mount_point).components().count() >= Path::new(b).components().count()
        });
        if deeper {
            best = Some((m.mount_point, m.tags));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    // From this machine's /proc/self/mountinfo, trimmed; critest's shared
    // mount last.
    const MOUNTINFO: &str = "\
22 1 252:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
25 22 0:5 / /dev rw,nosuid master:2 - devtmpfs udev rw
30 22 0:26 / /tmp rw,nosuid,nodev - tmpfs tmpfs rw
91 30 252:0 /tmp/a\\040b /tmp/a\\040b rw,relatime shared:90 - ext4 /dev/vda rw
92 30 252:0 /tmp/x /tmp/x rw,relatime - ext4 /dev/vda rw
93 92 252:0 /tmp/x /tmp/x rw,relatime shared:91 - ext4 /dev/vda rw
";

    #[test]
    fn the_deepest_and_latest_mount_holds_a_path() {
        let of = |p: &str| mount_of(MOUNTINFO, Path::new(p)).map(|(m, t)| (m, t.join(" ")));
        assert_eq!(of("/etc/x"), Some(("/".into(), "shared:1".into())));
        assert_eq!(of("/dev/null"), Some(("/dev".into(), "master:2".into())));
        assert_eq!(of("/tmp/y"), Some(("/tmp".into(), String::new())));
        assert_eq!(
            of("/tmp/a b/c"),
            Some(("/tmp/a b".into(), "shared:90".into()))
        );
        // Mounted over: the later mount at the same point wins.
        assert_eq!(
            of("/tmp/x/mnt"),
            Some(("/tmp/x".into(), "shared:91".into()))
        );
        // A sibling with a common prefix is not a parent.
        assert_eq!(of("/tmp/xy"), Some(("/tmp".into(), String::new())));
    }

    fn write(dir: &Path, name: &str, text: &str) {
        fs::write(dir.join(name), text).expect("write spec");
    }

    fn spec(kind: &str, name: &str, env: &str) -> String {
        format!(
            "cdiVersion: 0.6.0\nkind: {kind}\ndevices:\n- name: {name}\n  containerEdits:\n    env: [{env}]\n"
        )
    }

    #[test]
    fn cdi_spec_folders_later_wins_bad_files_are_skipped() {
        let etc = tempfile::tempdir().expect("tempdir");
        let run = tempfile::tempdir().expect("tempdir");
        write(etc.path(), "a.yaml", &spec("v.com/c", "x", "W=etc"));
        write(etc.path(), "b.yml", &spec("v.com/c", "y", "W=etc-y"));
        write(etc.path(), "broken.yaml", "cdiVersion: 0.6.0\nkind: nope\n");
        write(etc.path(), "ignored.txt", &spec("v.com/c", "t", "W=t"));
        write(
            run.path(),
            "a.json",
            r#"{"cdiVersion":"0.8.0","kind":"v.com/c","devices":[{"name":"x","containerEdits":{"env":["W=run"]}}]}"#,
        );
        // Over the size bound: skipped, not read whole.
        let big = format!(
            "{}#{}\n",
            spec("v.com/c", "big", "W=big"),
            "x".repeat(1 << 20)
        );
        write(run.path(), "big.yaml", &big);
        let missing = etc.path().join("missing");
        let reg = load_cdi_specs(&[etc.path().to_path_buf(), run.path().to_path_buf(), missing]);
        assert_eq!(
            reg.device_names().collect::<Vec<_>>(),
            ["v.com/c=x", "v.com/c=y"]
        );
        assert_eq!(
            reg.file_of("v.com/c=x"),
            Some(run.path().join("a.json").as_path())
        );
        let e = read_cdi_spec(&etc.path().join("broken.yaml")).expect_err("bad kind");
        assert_eq!(
            e.to_string(),
            format!(
                "{}: kind: \"nope\" is not vendor/class",
                etc.path().join("broken.yaml").display()
            )
        );
        let e = read_cdi_spec(&run.path().join("big.yaml")).expect_err("too big");
        assert!(
            e.to_string()
                .ends_with("big.yaml: larger than 1048576 bytes"),
            "{e}"
        );
    }

    #[test]
    fn cdi_device_nodes_take_type_and_numbers_from_the_host() {
        let mut d = cdi::DeviceNode {
            path: "/dev/mynull".into(),
            host_path: "/dev/null".into(),
            ..Default::default()
        };
        fill_device_node(&mut d).expect("stat /dev/null");
        assert_eq!((d.kind.as_str(), d.major, d.minor), ("c", 1, 3));
        // Given numbers stay; a wrong type is an error naming both.
        let mut d = cdi::DeviceNode {
            path: "/dev/null".into(),
            kind: "b".into(),
            ..Default::default()
        };
        let e = fill_device_node(&mut d).expect_err("not a block device");
        assert_eq!(
            e.to_string(),
            "CDI device node /dev/null: host device /dev/null: type c on the host, b in the spec"
        );
        let mut d = cdi::DeviceNode {
            path: "/dev/nope".into(),
            ..Default::default()
        };
        let e = fill_device_node(&mut d).expect_err("missing");
        assert!(
            e.to_string()
                .starts_with("CDI device node /dev/nope: cannot stat host device /dev/nope: "),
            "{e}"
        );
        let mut d = cdi::DeviceNode {
            path: "/dev/x".into(),
            kind: "c".into(),
            major: 10,
            minor: 200,
            host_path: "/nonexistent".into(),
            ..Default::default()
        };
        fill_device_node(&mut d).expect("complete: no stat");
        let file = tempfile::NamedTempFile::new().expect("file");
        let mut d = cdi::DeviceNode {
            path: "/dev/x".into(),
            host_path: file.path().display().to_string(),
            ..Default::default()
        };
        let e = fill_device_node(&mut d).expect_err("a file").to_string();
        assert!(e.ends_with(": not a device"), "{e}");
    }
}
