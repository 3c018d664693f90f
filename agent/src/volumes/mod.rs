//! Pod volumes: hostPath (with its `type` checks) and emptyDir (a directory
//! under the pod's dir, or a tmpfs for `medium: Memory` with `sizeLimit`),
//! laid out as kubelet does: `<dataDir>/agent/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>`.

pub mod api_objects;
pub mod objects;
pub mod projection;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use edge_config::quantity::parse_quantity;
use k8s_openapi::api::core::v1::Pod;
use nix::mount::{MntFlags, MsFlags};

/// The pod's directory, `<dataDir>/agent/pods/<uid>`.
/// Why a volume could not be prepared or cleaned up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("hostPath type check failed: {} does not exist", path.display())]
    Missing { path: PathBuf },
    #[error("hostPath type check failed: {} is not a {what}", path.display())]
    NotA { path: PathBuf, what: &'static str },
    #[error("hostPath: cannot create {}: {source}", path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("unknown hostPath type {0:?}")]
    UnknownType(String),
    #[error("volume {name:?}: {source}")]
    HostPath { name: String, source: Box<Error> },
    #[error("volume {name:?}: {}: {source}", path.display())]
    EmptyDir {
        name: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("volume {name:?}: mount tmpfs on {}: {source}", path.display())]
    Tmpfs {
        name: String,
        path: PathBuf,
        source: nix::Error,
    },
    #[error("volume {0:?}: unsupported source")]
    Unsupported(String),
    #[error("etc-hosts {}: {source}", path.display())]
    EtcHosts {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("umount {}: {source}", path.display())]
    Umount { path: PathBuf, source: nix::Error },
    #[error("remove {}: {source}", path.display())]
    Remove {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub fn pod_dir(data_dir: &Path, uid: &str) -> PathBuf {
    data_dir.join("agent").join("pods").join(uid)
}

/// Checks a hostPath against its `type`, creating it for the `*OrCreate`
/// types. Pure but for the file system.
pub fn check_host_path(path: &Path, ty: &str) -> Result<(), Error> {
    let meta = fs::metadata(path);
    let ft = meta.as_ref().map(|m| m.file_type());
    let missing = || Error::Missing {
        path: path.to_path_buf(),
    };
    let is = |ok: bool, what: &'static str| {
        if ok {
            Ok(())
        } else {
            Err(Error::NotA {
                path: path.to_path_buf(),
                what,
            })
        }
    };
    let create = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Create { path, source }
    };
    match ty {
        "" => Ok(()),
        "DirectoryOrCreate" => match ft {
            Ok(t) => is(t.is_dir(), "directory"),
            Err(_) => fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(path)
                .map_err(create(path)),
        },
        "FileOrCreate" => match ft {
            Ok(t) => is(t.is_file(), "file"),
            Err(_) => {
                if let Some(parent) = path.parent() {
                    fs::create_dir_all(parent).map_err(create(parent))?;
                }
                fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .and_then(|f| f.set_permissions(fs::Permissions::from_mode(0o644)))
                    .map_err(create(path))
            }
        },
        "Directory" => ft
            .map_err(|_| missing())
            .and_then(|t| is(t.is_dir(), "directory")),
        "File" => ft
            .map_err(|_| missing())
            .and_then(|t| is(t.is_file(), "file")),
        "Socket" => ft
            .map_err(|_| missing())
            .and_then(|t| is(t.is_socket(), "socket")),
        "CharDevice" => ft
            .map_err(|_| missing())
            .and_then(|t| is(t.is_char_device(), "character device")),
        "BlockDevice" => ft
            .map_err(|_| missing())
            .and_then(|t| is(t.is_block_device(), "block device")),
        other => Err(Error::UnknownType(other.to_string())),
    }
}

fn is_mounted(path: &Path) -> bool {
    let Ok(text) = fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.to_string_lossy();
    text.lines()
        .any(|l| l.split(' ').nth(4) == Some(want.as_ref()))
}

/// Prepares every volume of the pod: volume name → host path.
/// Writes the pod's managed hosts file, `<pod dir>/etc-hosts` (temp file,
/// rename: a container never sees half of it), unless it already holds
/// `content`; returns its path.
pub fn write_etc_hosts(data_dir: &Path, uid: &str, content: &str) -> Result<PathBuf, Error> {
    let dir = pod_dir(data_dir, uid);
    let path = dir.join("etc-hosts");
    if fs::read_to_string(&path).is_ok_and(|old| old == content) {
        return Ok(path);
    }
    let tmp = dir.join(".etc-hosts.tmp");
    let err = |source| Error::EtcHosts {
        path: path.clone(),
        source,
    };
    fs::create_dir_all(&dir).map_err(err)?;
    fs::write(&tmp, content).map_err(err)?;
    // 0644 whatever the umask: every container user reads it.
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644)).map_err(err)?;
    fs::rename(&tmp, &path).map_err(err)?;
    Ok(path)
}

pub fn prepare(pod: &Pod, data_dir: &Path) -> Result<BTreeMap<String, PathBuf>, Error> {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let base = pod_dir(data_dir, uid).join("volumes");
    let mut out = BTreeMap::new();
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    for v in volumes.into_iter().flatten() {
        if let Some(hp) = &v.host_path {
            let path = PathBuf::from(&hp.path);
            check_host_path(&path, hp.type_.as_deref().unwrap_or("")).map_err(|e| {
                Error::HostPath {
                    name: v.name.clone(),
                    source: Box::new(e),
                }
            })?;
            out.insert(v.name.clone(), path);
        } else if let Some(ed) = &v.empty_dir {
            let dir = base.join("kubernetes.io~empty-dir").join(&v.name);
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o777)
                .create(&dir)
                .map_err(|source| Error::EmptyDir {
                    name: v.name.clone(),
                    path: dir.clone(),
                    source,
                })?;
            // 0777 like kubelet, whatever the umask.
            let _ = fs::set_permissions(&dir, fs::Permissions::from_mode(0o777));
            if ed.medium.as_deref() == Some("Memory") && !is_mounted(&dir) {
                let mut data = String::from("mode=0777");
                if let Some(size) = ed.size_limit.as_ref().and_then(|q| parse_quantity(&q.0)) {
                    data.push_str(&format!(",size={size}"));
                }
                nix::mount::mount(
                    Some("tmpfs"),
                    &dir,
                    Some("tmpfs"),
                    MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                    Some(data.as_str()),
                )
                .map_err(|source| Error::Tmpfs {
                    name: v.name.clone(),
                    path: dir.clone(),
                    source,
                })?;
            }
            out.insert(v.name.clone(), dir);
        } else if v.image.is_some() {
            // The runtime mounts it (CRI Mount.image): nothing here.
        } else if !crate::volumes::projection::is_projected(v) {
            // Projected kinds: [`write_projected`].
            return Err(Error::Unsupported(v.name.clone()));
        }
    }
    Ok(out)
}

/// The directory of an API-backed volume, by kubelet's plugin names.
fn projected_dir(base: &Path, v: &k8s_openapi::api::core::v1::Volume) -> PathBuf {
    let plugin = if v.config_map.is_some() {
        "kubernetes.io~configmap"
    } else if v.secret.is_some() {
        "kubernetes.io~secret"
    } else if v.downward_api.is_some() {
        "kubernetes.io~downward-api"
    } else {
        "kubernetes.io~projected"
    };
    base.join(plugin).join(&v.name)
}

/// Writes the files of the pod's configMap, secret, downwardAPI and
/// projected volumes (`files`, by volume name: [`crate::volumes::projection`]):
/// secrets and projected volumes on a tmpfs (never on flash), each set with
/// kubelet's atomic writer. Returns volume name → host path.
pub fn write_projected(
    pod: &Pod,
    data_dir: &Path,
    files: &BTreeMap<String, crate::volumes::projection::Files>,
) -> Result<BTreeMap<String, PathBuf>, Error> {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let base = pod_dir(data_dir, uid).join("volumes");
    let mut out = BTreeMap::new();
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    for v in volumes.into_iter().flatten() {
        let Some(set) = files.get(&v.name) else {
            continue;
        };
        let dir = projected_dir(&base, v);
        let err = |source| Error::EmptyDir {
            name: v.name.clone(),
            path: dir.clone(),
            source,
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir)
            .map_err(err)?;
        if crate::volumes::projection::in_memory(v) && !is_mounted(&dir) {
            nix::mount::mount(
                Some("tmpfs"),
                &dir,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some("mode=0755"),
            )
            .map_err(|source| Error::Tmpfs {
                name: v.name.clone(),
                path: dir.clone(),
                source,
            })?;
        }
        atomic_write(&dir, set).map_err(err)?;
        out.insert(v.name.clone(), dir);
    }
    Ok(out)
}

const DATA: &str = "..data";

/// kubelet's `AtomicWriter`: the files go into a new hidden directory
/// (`..<time>`), a `..data` symlink is swapped to it with one rename, and
/// each top-level name is a symlink through `..data`: a reader sees the
/// old set or the new one, never a mix, whenever this stops. Returns
/// whether anything changed (the same set again writes nothing).
pub fn atomic_write(
    dir: &Path,
    files: &crate::volumes::projection::Files,
) -> std::io::Result<bool> {
    let current = fs::read_link(dir.join(DATA)).ok();
    if let Some(cur) = &current
        && read_set(&dir.join(cur)).is_ok_and(|have| have == *files)
    {
        return Ok(false);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let name = format!("..{}_{:09}", now.as_secs(), now.subsec_nanos());
    let ts = dir.join(&name);
    fs::DirBuilder::new().mode(0o755).create(&ts)?;
    for (path, f) in files {
        let p = ts.join(path);
        if let Some(parent) = p.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)?;
        }
        let mut file = fs::File::create(&p)?;
        std::io::Write::write_all(&mut file, &f.data)?;
        file.set_permissions(fs::Permissions::from_mode(f.mode))?;
        file.sync_all()?;
    }
    fs::File::open(&ts)?.sync_all()?;
    let tmp = dir.join("..data_tmp");
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&name, &tmp)?;
    fs::rename(&tmp, dir.join(DATA))?;
    // The user-visible names: a symlink per top-level entry.
    let top: std::collections::BTreeSet<&str> =
        files.keys().filter_map(|p| p.split('/').next()).collect();
    for t in &top {
        let link = dir.join(t);
        if fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new(DATA).join(t), &link)?;
        }
    }
    for entry in fs::read_dir(dir)?.flatten() {
        let n = entry.file_name();
        let n = n.to_string_lossy();
        if n.starts_with("..") {
            // Old sets (not the new one).
            if n != name && n != DATA && entry.path().is_dir() && !entry.path().is_symlink() {
                let _ = fs::remove_dir_all(entry.path());
            }
        } else if !top.contains(n.as_ref()) {
            let _ = fs::remove_file(entry.path());
        }
    }
    fs::File::open(dir)?.sync_all()?;
    Ok(true)
}

/// The files under `dir` (relative path → content and mode).
fn read_set(dir: &Path) -> std::io::Result<crate::volumes::projection::Files> {
    let mut out = crate::volumes::projection::Files::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                stack.push(entry.path());
                continue;
            }
            let rel = entry
                .path()
                .strip_prefix(dir)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            out.insert(
                rel,
                crate::volumes::projection::File {
                    data: fs::read(entry.path())?,
                    mode: meta.permissions().mode() & 0o777,
                },
            );
        }
    }
    Ok(out)
}

/// Removes the pod's directory: unmounts the volumes mounted there (memory
/// emptyDirs, secrets, projected volumes), then deletes.
pub fn cleanup(data_dir: &Path, uid: &str) -> Result<(), Error> {
    let dir = pod_dir(data_dir, uid);
    for plugin in fs::read_dir(dir.join("volumes"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for entry in fs::read_dir(plugin.path()).into_iter().flatten().flatten() {
            let p = entry.path();
            if is_mounted(&p) {
                nix::mount::umount2(&p, MntFlags::MNT_DETACH).map_err(|source| Error::Umount {
                    path: p.clone(),
                    source,
                })?;
            }
        }
    }
    match fs::remove_dir_all(&dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Remove { path: dir, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volumes::projection::{File, Files};

    fn set(entries: &[(&str, &str, u32)]) -> Files {
        entries
            .iter()
            .map(|(p, d, m)| {
                (
                    p.to_string(),
                    File {
                        data: d.as_bytes().to_vec(),
                        mode: *m,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn the_atomic_writer_swaps_whole_sets_and_leaves_the_old_one_readable_until_then() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path();
        let one = set(&[("app.conf", "port=1", 0o644), ("certs/ca.crt", "CA", 0o600)]);
        assert!(atomic_write(d, &one).expect("write"));
        assert_eq!(
            fs::read_to_string(d.join("app.conf")).expect("read"),
            "port=1"
        );
        assert_eq!(
            fs::read_to_string(d.join("certs/ca.crt")).expect("read"),
            "CA"
        );
        assert!(
            fs::symlink_metadata(d.join("app.conf"))
                .expect("meta")
                .is_symlink()
        );
        let mode = fs::metadata(d.join("certs/ca.crt"))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(
            !atomic_write(d, &one).expect("again"),
            "the same set writes nothing"
        );
        // A crash after the new set was written but before the swap: the
        // readers still see the old set, whole.
        let first = fs::read_link(d.join(DATA)).expect("..data");
        let stale = d.join("..999_000000000");
        fs::create_dir(&stale).expect("mkdir");
        fs::write(stale.join("app.conf"), "half").expect("write");
        std::os::unix::fs::symlink("..999_000000000", d.join("..data_tmp")).expect("symlink");
        assert_eq!(
            fs::read_to_string(d.join("app.conf")).expect("read"),
            "port=1"
        );
        // The next write recovers: new set in, old ones and leftovers gone,
        // a key no longer in the set disappears.
        let two = set(&[("app.conf", "port=2", 0o644)]);
        assert!(atomic_write(d, &two).expect("write"));
        assert_eq!(
            fs::read_to_string(d.join("app.conf")).expect("read"),
            "port=2"
        );
        assert!(fs::symlink_metadata(d.join("certs")).is_err());
        assert!(!d.join(&first).exists() && !stale.exists());
        let names: Vec<String> = fs::read_dir(d)
            .expect("ls")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 3, "..data, one set, app.conf: {names:?}");
    }

    #[test]
    fn host_path_types() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path().join("made/dir");
        check_host_path(&d, "DirectoryOrCreate").expect("created");
        assert!(d.is_dir());
        let f = tmp.path().join("made/file");
        check_host_path(&f, "FileOrCreate").expect("created");
        assert!(f.is_file());
        check_host_path(&d, "Directory").expect("dir");
        let e = check_host_path(&f, "Directory")
            .expect_err("not a dir")
            .to_string();
        assert!(e.ends_with("is not a directory"), "{e}");
        let e = check_host_path(&tmp.path().join("nope"), "File")
            .expect_err("missing")
            .to_string();
        assert!(e.ends_with("does not exist"), "{e}");
        check_host_path(&tmp.path().join("nope"), "").expect("no check");
        let e = check_host_path(&f, "Socket")
            .expect_err("not a socket")
            .to_string();
        assert!(e.ends_with("is not a socket"), "{e}");
    }
}
