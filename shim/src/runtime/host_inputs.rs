//! What spec generation needs from the host, read before the pure
//! [`crate::spec::build`]: files of the image rootfs, Localhost seccomp
//! profiles, devices, our own oom_score_adj.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use cri_proto::v1::ContainerConfig;

use crate::error::Error;
use crate::spec::ResolvedDevice;

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
}
