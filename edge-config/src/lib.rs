//! picolet's configuration: the on-disk layout defaults every part agrees on
//! (docs/architecture.md), the config file ([`config`]: a KubeletConfiguration subset
//! plus picolet's own section, with file + field-path errors) and the
//! Kubernetes quantity and duration formats it uses ([`quantity`]).
//!
//! The agent is the first user of [`Config`]; `--config` is wired into the
//! subcommands together with it.

pub mod config;
pub mod devices;
mod error;
pub mod eviction;
pub mod labels;
pub mod owner;
pub mod quantity;
pub mod upgrade;

use std::path::PathBuf;

pub use config::{Config, ConfigError, FieldError};

/// Default data root (`--root`).
pub const DEFAULT_ROOT: &str = "/var/lib/picolet";
/// Where kubelet's device plugins look for `kubelet.sock`.
pub const KUBELET_DEVICE_PLUGINS: &str = "/var/lib/kubelet/device-plugins";
/// Default runtime directory (`--run-dir`).
pub const DEFAULT_RUN_DIR: &str = "/run/picolet";
/// Default CRI socket (`--socket`, `--cri-socket`).
pub const DEFAULT_SOCKET: &str = "/run/picolet/picolet.sock";
/// Default image preload folder (`--images-dir`).
pub const DEFAULT_IMAGES_DIR: &str = "/var/lib/picolet/images";
/// Default registries.yaml (`--registry-config`): k3s's format.
pub const DEFAULT_REGISTRY_CONFIG: &str = "/etc/picolet/registries.yaml";
/// Default docker config.json of registry credentials (`picolet.registryAuthFile`).
pub const DEFAULT_REGISTRY_AUTH_FILE: &str = "/etc/picolet/docker-config.json";

/// Default CNI config folder (`--cni-conf-dir`), containerd's.
pub const DEFAULT_CNI_CONF_DIR: &str = "/etc/cni/net.d";
/// Default CNI plugin folders (`--cni-bin-dir`, comma-separated): the
/// upstream install path, then Debian's `containernetworking-plugins`.
pub const DEFAULT_CNI_BIN_DIR: &str = "/opt/cni/bin,/usr/lib/cni";

/// Default CDI spec folders (`picolet.cdiSpecDirs`), the CDI library's:
/// static specs, then generated ones (which win for the same device).
pub const DEFAULT_CDI_SPEC_DIRS: [&str; 2] = ["/etc/cdi", "/var/run/cdi"];

/// A comma-separated folder list (`--cni-bin-dir`); empty entries are dropped.
/// Creates `dir` (and its parents) and makes it root's alone (0700), also
/// when it already existed with a wider mode: what picolet keeps there —
/// bundles with the pods' environment, container upper dirs and rootfs
/// mounts, volumes — is no other local user's to read or write.
/// Containers do not need to traverse it: their rootfs, volumes and
/// sockets reach them through mounts made by root.
pub fn private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Writes `data` to `path` (mode 0600) so that a crash leaves the old file
/// or the new one, never a part: a temporary file beside it, fsync, rename,
/// fsync of the directory.
pub fn write_atomic(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        // Root's alone: a checkpoint holds pod specs (their env).
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    std::fs::File::open(dir)?.sync_all()
}

pub fn split_dirs(list: &str) -> Vec<PathBuf> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect()
}

/// Where the shim keeps its state, derived from `--root`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShimPaths {
    /// Data root, e.g. `/var/lib/picolet`.
    pub root: PathBuf,
    /// Runtime dir (tmpfs), e.g. `/run/picolet`.
    pub run_dir: PathBuf,
    /// CRI socket.
    pub socket: PathBuf,
    /// Preload folder: every archive here is imported.
    pub images_dir: PathBuf,
    /// CNI network configs; none there: pods get loopback only.
    pub cni_conf_dir: PathBuf,
    /// Where CNI plugins are searched, in order.
    pub cni_bin_dirs: Vec<PathBuf>,
    /// Whether CDI devices are injected (containerd's `enable_cdi`).
    pub enable_cdi: bool,
    /// CDI spec folders, lowest priority first.
    pub cdi_spec_dirs: Vec<PathBuf>,
}

impl Default for ShimPaths {
    fn default() -> Self {
        Self {
            root: PathBuf::from(DEFAULT_ROOT),
            run_dir: PathBuf::from(DEFAULT_RUN_DIR),
            socket: PathBuf::from(DEFAULT_SOCKET),
            images_dir: PathBuf::from(DEFAULT_IMAGES_DIR),
            cni_conf_dir: PathBuf::from(DEFAULT_CNI_CONF_DIR),
            cni_bin_dirs: split_dirs(DEFAULT_CNI_BIN_DIR),
            enable_cdi: true,
            cdi_spec_dirs: DEFAULT_CDI_SPEC_DIRS.iter().map(PathBuf::from).collect(),
        }
    }
}

impl ShimPaths {
    /// The shim's private state directory, `<root>/shim`.
    pub fn shim_dir(&self) -> PathBuf {
        self.root.join("shim")
    }

    /// The image store, `<root>/shim/images`.
    pub fn image_store(&self) -> PathBuf {
        self.shim_dir().join("images")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_lives_under_the_shim_dir() {
        let p = ShimPaths {
            root: PathBuf::from("/x"),
            ..ShimPaths::default()
        };
        assert_eq!(p.image_store(), PathBuf::from("/x/shim/images"));
    }
}
