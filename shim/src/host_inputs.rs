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
            major: nix::sys::stat::major(rdev) as i64,
            minor: nix::sys::stat::minor(rdev) as i64,
            file_mode: m.mode() & 0o777,
            permissions: perms,
        });
    }
    Ok(out)
}
