//! What the built-in generic device plugin offers now: each group's
//! device sets found on the host (paths by glob, USB devices by ID in
//! sysfs), each offered `count` times, with stable IDs. The filesystem is
//! read; the rest is plain functions.

use std::collections::BTreeMap;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use cri_proto::deviceplugin::{ContainerAllocateResponse, DeviceSpec, Mount};
use edge_config::devices::{DeviceSpec as Resource, PathKind, PathSpec};
use sha2::{Digest, Sha256};

/// Where USB devices are listed, and their nodes.
const SYS_USB: &str = "/sys/bus/usb/devices";
const DEV_USB: &str = "/dev/bus/usb";

/// One host file of a device and how the container sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub host: PathBuf,
    pub container: String,
    pub kind: PathKind,
    pub permissions: String,
    pub read_only: bool,
}

/// The resource's devices now: ID → its members.
pub type Devices = BTreeMap<String, Vec<Member>>;

/// The devices `r` has on this host now.
pub fn devices(r: &Resource) -> Devices {
    let mut out = Devices::new();
    for g in &r.groups {
        let mut sets: Vec<Vec<Member>> = Vec::new();
        if !g.paths.is_empty() {
            // The n-th match of each pattern makes the n-th device.
            let matched: Vec<Vec<Member>> = g.paths.iter().map(members).collect();
            let n = matched.iter().map(Vec::len).min().unwrap_or(0);
            sets.extend((0..n).map(|i| matched.iter().map(|m| m[i].clone()).collect()));
        }
        for u in &g.usb {
            sets.extend(
                usb(&u.vendor, &u.product, u.serial.as_deref())
                    .into_iter()
                    .map(|host| {
                        vec![Member {
                            container: host.display().to_string(),
                            host,
                            kind: PathKind::Device,
                            permissions: "rw".into(),
                            read_only: false,
                        }]
                    }),
            );
        }
        for set in sets {
            let base = id_of(&set);
            for copy in 0..g.count {
                let id = if g.count == 1 {
                    base.clone()
                } else {
                    format!("{base}-{copy}")
                };
                out.insert(id, set.clone());
            }
        }
    }
    out
}

/// A readable, stable ID of at most 63 characters: the members' file
/// names, or a digest of their paths when that is too long.
fn id_of(set: &[Member]) -> String {
    let names: Vec<String> = set
        .iter()
        .map(|m| {
            m.host
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .collect();
    let id = names.join("+");
    let readable = !id.is_empty()
        && id.len() <= 52
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-_.".contains(&b));
    let digest = Sha256::digest(
        set.iter()
            .map(|m| m.host.display().to_string())
            .collect::<Vec<_>>()
            .join("\0"),
    );
    let short: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    if readable {
        // Unique across groups whose files share a name.
        format!("{id}-{short}")
    } else {
        digest[..16].iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The files one path pattern matches now, in name order.
fn members(p: &PathSpec) -> Vec<Member> {
    glob(Path::new(&p.path))
        .into_iter()
        .filter(|host| match p.kind {
            // A device group offers device nodes only: a file that is
            // not one would fail the container's create.
            PathKind::Device => std::fs::metadata(host)
                .is_ok_and(|m| m.file_type().is_char_device() || m.file_type().is_block_device()),
            PathKind::Mount => host.exists(),
        })
        .map(|host| Member {
            container: container_path(&host, p.mount_path.as_deref()),
            kind: p.kind,
            permissions: p.permissions.clone().unwrap_or_else(|| "rw".into()),
            read_only: p.read_only,
            host,
        })
        .collect()
}

/// The path in the container: `mountPath`, with the file's name after a
/// trailing `/`; the host path without one.
pub fn container_path(host: &Path, mount: Option<&str>) -> String {
    match mount {
        None => host.display().to_string(),
        Some(m) if m.ends_with('/') => format!(
            "{m}{}",
            host.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
        Some(m) => m.to_string(),
    }
}

/// Paths matching `pattern` (`*` and `?` in any component), sorted.
pub fn glob(pattern: &Path) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::from("/")];
    for part in pattern.components().skip(1) {
        let part = part.as_os_str().to_string_lossy();
        let mut next = Vec::new();
        for dir in &found {
            if !part.contains(['*', '?']) {
                let p = dir.join(part.as_ref());
                if std::fs::symlink_metadata(&p).is_ok() {
                    next.push(p);
                }
                continue;
            }
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.') && matches(&part, n))
                .collect();
            names.sort();
            next.extend(names.into_iter().map(|n| dir.join(n)));
        }
        found = next;
    }
    found
}

/// Shell-style matching of one name: `*` any run, `?` one character.
pub fn matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut i, mut j) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

/// The nodes of USB devices with this vendor and product (hex IDs).
fn usb(vendor: &str, product: &str, serial: Option<&str>) -> Vec<PathBuf> {
    let id = |s: &str| u16::from_str_radix(s.trim(), 16).ok();
    let read = |d: &Path, f: &str| std::fs::read_to_string(d.join(f)).unwrap_or_default();
    let mut out = Vec::new();
    for e in std::fs::read_dir(SYS_USB).into_iter().flatten().flatten() {
        let d = e.path();
        if id(&read(&d, "idVendor")) != id(vendor) || id(&read(&d, "idProduct")) != id(product) {
            continue;
        }
        if serial.is_some_and(|s| read(&d, "serial").trim() != s) {
            continue;
        }
        let (Ok(bus), Ok(dev)) = (
            read(&d, "busnum").trim().parse::<u32>(),
            read(&d, "devnum").trim().parse::<u32>(),
        ) else {
            continue;
        };
        out.push(PathBuf::from(format!("{DEV_USB}/{bus:03}/{dev:03}")));
    }
    out.sort();
    out
}

/// A device asked for that the host no longer has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no device {0:?} (it went away)")]
pub struct Gone(pub String);

/// Allocate's answer for one container: its devices' nodes and mounts.
pub fn allocate(devices: &Devices, ids: &[String]) -> Result<ContainerAllocateResponse, Gone> {
    let mut r = ContainerAllocateResponse::default();
    for id in ids {
        let members = devices.get(id).ok_or_else(|| Gone(id.clone()))?;
        for m in members {
            let host = m.host.display().to_string();
            match m.kind {
                PathKind::Device => r.devices.push(DeviceSpec {
                    container_path: m.container.clone(),
                    host_path: host,
                    permissions: m.permissions.clone(),
                }),
                PathKind::Mount => r.mounts.push(Mount {
                    container_path: m.container.clone(),
                    host_path: host,
                    read_only: m.read_only,
                }),
            }
        }
    }
    // A shareable device offered twice to one container: once.
    r.devices
        .dedup_by(|a, b| a.container_path == b.container_path);
    r.mounts
        .dedup_by(|a, b| a.container_path == b.container_path);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> Resource {
        serde_yaml::from_str(yaml).expect("spec")
    }

    #[test]
    fn globs_match_any_component_in_name_order() {
        assert!(matches("ttyUSB*", "ttyUSB0"));
        assert!(matches("tty?SB*", "ttyUSB12"));
        assert!(matches("*", "x"));
        assert!(!matches("ttyUSB*", "ttyACM0"));
        assert!(!matches("video?", "video10"));
        assert_eq!(glob(Path::new("/dev/nul?")), [PathBuf::from("/dev/null")]);
        assert_eq!(glob(Path::new("/d*/null")), [PathBuf::from("/dev/null")]);
        assert!(glob(Path::new("/dev/picolet-nothing-*")).is_empty());
    }

    #[test]
    fn device_nodes_make_devices_offered_count_times_with_stable_ids() {
        let r = spec(
            "name: nul\ngroups:\n- paths: [{path: /dev/nul?, mountPath: /dev/x/}]\n  count: 2\n",
        );
        let d = devices(&r);
        let ids: Vec<&String> = d.keys().collect();
        assert_eq!(ids.len(), 2, "{ids:?}");
        assert!(
            ids[0].starts_with("null-") && ids[0].ends_with("-0"),
            "{ids:?}"
        );
        assert_eq!(devices(&r), d, "the same IDs every scan");
        let m = &d[ids[0]][0];
        assert_eq!(m.host, PathBuf::from("/dev/null"));
        assert_eq!(m.container, "/dev/x/null");
        assert_eq!(m.permissions, "rw");
        let ans = allocate(&d, &[ids[0].clone(), ids[1].clone()]).expect("allocated");
        assert_eq!(ans.devices.len(), 1, "one node for two shares");
        assert_eq!(ans.devices[0].host_path, "/dev/null");
        assert!(allocate(&d, &["gone".into()]).is_err());
    }

    #[test]
    fn a_device_group_takes_device_nodes_only_and_pairs_patterns() {
        // /etc/hostname is no device node: no device.
        let r = spec("name: x\ngroups:\n- paths: [{path: /etc/hostnam?}]\n");
        assert!(devices(&r).is_empty());
        // As a mount it is one.
        let r = spec(
            "name: x\ngroups:\n- paths: [{path: /etc/hostnam?, type: Mount, readOnly: true}]\n",
        );
        let d = devices(&r);
        let ans = allocate(&d, &d.keys().cloned().collect::<Vec<_>>()).expect("allocated");
        assert_eq!(ans.mounts.len(), 1);
        assert!(ans.mounts[0].read_only);
        // Two patterns: the n-th of each makes a device; the shorter list
        // says how many.
        let r = spec("name: x\ngroups:\n- paths: [{path: /dev/nul?}, {path: /dev/zer?}]\n");
        let d = devices(&r);
        assert_eq!(d.len(), 1);
        let (id, members) = d.iter().next().expect("one");
        assert!(id.starts_with("null+zero-"), "{id}");
        assert_eq!(members.len(), 2);
    }

    #[test]
    fn container_paths_follow_mount_path() {
        let h = Path::new("/dev/ttyUSB0");
        assert_eq!(container_path(h, None), "/dev/ttyUSB0");
        assert_eq!(
            container_path(h, Some("/dev/serial/")),
            "/dev/serial/ttyUSB0"
        );
        assert_eq!(container_path(h, Some("/dev/gps")), "/dev/gps");
    }
}
