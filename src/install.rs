//! `picolet install` and `picolet uninstall`: picolet as a service of the
//! device, and back to a device without it (`uninstall` resets first:
//! [`crate::reset`]).
//!
//! `install` puts the binary at `<prefix>/bin/picolet`, writes the config
//! skeletons of `/etc/picolet` that are not there yet (an operator's files
//! are never overwritten), the service file for the machine's manager, and
//! enables and (re)starts the service. `--bundle` takes the binary, the
//! preload images and the examples from an airgap bundle instead.
//!
//! `uninstall` stops the service, resets, and removes the service, the
//! binary and (unless kept) `/etc/picolet`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::service::{Manager, ServiceError};
use crate::{CommonArgs, load_config};

/// The config file skeleton: every field with its default.
const CONFIG_SKELETON: &str = include_str!("../examples/config.yaml");
const REGISTRIES_SKELETON: &str = include_str!("../packaging/registries.yaml");
/// The log file of the OpenRC and init.d scripts (`packaging/`).
const SCRIPT_LOG: &str = "/var/log/picolet.log";
/// The largest file taken from a bundle (an image archive).
const BUNDLE_FILE_MAX: u64 = 2 << 30;

#[derive(Debug, thiserror::Error)]
pub(crate) enum InstallError {
    #[error("must run as root")]
    NotRoot,
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bundle {}: {why}", path.display())]
    Bundle { path: PathBuf, why: String },
    #[error(transparent)]
    Service(#[from] ServiceError),
    #[error(transparent)]
    Upgrade(#[from] crate::upgrade::UpgradeError),
    #[error(transparent)]
    Reset(#[from] crate::reset::ResetError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InstallError + '_ {
    move |source| InstallError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[derive(clap::Args)]
pub(crate) struct InstallArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// The binary goes to <prefix>/bin/picolet, the bundle's examples to
    /// <prefix>/share/picolet.
    #[arg(long, default_value = "/usr/local")]
    prefix: PathBuf,
    /// An airgap bundle (picolet-<version>-<arch>.tar.gz): its binary,
    /// its images (into the preload folder) and its examples.
    #[arg(long)]
    bundle: Option<PathBuf>,
    /// The service manager [default: the one that booted the machine].
    #[arg(long, value_enum)]
    service: Option<Manager>,
    /// Install and enable, but do not start now.
    #[arg(long)]
    no_start: bool,
}

#[derive(clap::Args)]
pub(crate) struct UninstallArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Where `install` put the binary.
    #[arg(long, default_value = "/usr/local")]
    prefix: PathBuf,
    /// The service manager [default: the one that booted the machine].
    #[arg(long, value_enum)]
    service: Option<Manager>,
    /// Keep /etc/picolet (config, manifests, registries).
    #[arg(long)]
    keep_config: bool,
    /// Stop the service and reset, but leave the binary and the service
    /// file (a package's removal script: the package manager owns those).
    #[arg(long, hide = true)]
    package: bool,
}

fn must_be_root() -> Result<(), InstallError> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(InstallError::NotRoot)
    }
}

pub(crate) fn run_install(args: InstallArgs) -> ExitCode {
    match load_config(&args.common) {
        Ok(config) => crate::report("install", install(&args, &config)),
        Err(code) => code,
    }
}

pub(crate) fn run_uninstall(args: UninstallArgs) -> ExitCode {
    match load_config(&args.common) {
        Ok(config) => crate::report("uninstall", uninstall(&args, &config)),
        Err(code) => code,
    }
}

fn install(args: &InstallArgs, config: &edge_config::Config) -> Result<(), InstallError> {
    must_be_root()?;
    let bin = args.prefix.join("bin/picolet");
    let bin_dir = args.prefix.join("bin");
    std::fs::create_dir_all(&bin_dir).map_err(io(&bin_dir))?;
    let unpacked = match &args.bundle {
        Some(b) => Some(unpack_bundle(b, &args.prefix, &config.images_dir)?),
        None => None,
    };
    let source = match &unpacked {
        Some(u) => u.binary.clone(),
        None => std::env::current_exe().map_err(io(Path::new("/proc/self/exe")))?,
    };
    let same = std::fs::canonicalize(&bin).ok() == std::fs::canonicalize(&source).ok();
    if !same {
        let staged = bin_dir.join(format!(".picolet.{}.new", std::process::id()));
        crate::upgrade::stage_copy(&source, &staged)?;
        std::fs::rename(&staged, &bin).map_err(io(&bin))?;
        crate::upgrade::sync_dir(&bin)?;
        println!("installed {}", bin.display());
    }
    if let Some(u) = &unpacked {
        let _ = std::fs::remove_file(&u.binary);
        for i in &u.images {
            println!("preload image {}", i.display());
        }
    }
    let etc = Path::new("/etc/picolet");
    // registries.yaml holds credentials: root's alone.
    for (path, text, mode) in [
        (etc.join("config.yaml"), CONFIG_SKELETON, 0o644),
        (etc.join("registries.yaml"), REGISTRIES_SKELETON, 0o600),
    ] {
        if write_new(&path, text.as_bytes(), mode)? {
            println!("wrote {}", path.display());
        } else {
            println!("kept {}", path.display());
        }
    }
    let manifests = etc.join("manifests");
    std::fs::create_dir_all(&manifests).map_err(io(&manifests))?;
    let manager = args.service.unwrap_or_else(Manager::detect);
    let file = manager.write(Path::new("/"), &bin)?;
    println!("wrote {} ({manager:?})", file.display());
    manager.enable()?;
    if !args.no_start {
        manager.restart(&file)?;
        println!("started the picolet service");
    }
    Ok(())
}

/// Writes `path` only when it does not exist; true when it wrote.
fn write_new(path: &Path, data: &[u8], mode: u32) -> Result<bool, InstallError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path);
    match f {
        Ok(mut f) => {
            f.write_all(data)
                .and_then(|()| f.sync_all())
                .map_err(io(path))?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io(path)(e)),
    }
}

struct Unpacked {
    binary: PathBuf,
    images: Vec<PathBuf>,
}

/// What a bundle may hold, under its one top folder: `picolet`,
/// `images/<name>.tar`, `examples/…`, `packaging/…`. Anything else (or a
/// link, a device, a `..`) makes the bundle bad; nothing is written
/// outside the destinations named here.
fn unpack_bundle(path: &Path, prefix: &Path, images_dir: &Path) -> Result<Unpacked, InstallError> {
    let bad = |why: String| InstallError::Bundle {
        path: path.to_path_buf(),
        why,
    };
    let file = std::fs::File::open(path).map_err(io(path))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let bin_dir = prefix.join("bin");
    let share = prefix.join("share/picolet");
    let mut out = Unpacked {
        binary: bin_dir.join(format!(".picolet.{}.bundle", std::process::id())),
        images: Vec::new(),
    };
    let mut has_binary = false;
    let entries = archive.entries().map_err(|e| bad(e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| bad(e.to_string()))?;
        let name = entry.path().map_err(|e| bad(e.to_string()))?.into_owned();
        let kind = entry.header().entry_type();
        let parts: Vec<&str> = name
            .components()
            .map(|c| match c {
                std::path::Component::Normal(s) => s.to_str().unwrap_or("\u{0}"),
                _ => "\u{0}",
            })
            .collect();
        if parts.iter().any(|p| *p == "\u{0}" || p.is_empty()) || parts.len() < 2 {
            if kind.is_dir() && parts.len() == 1 && !parts[0].contains('\u{0}') {
                continue;
            }
            return Err(bad(format!(
                "entry {}: not inside one top folder",
                name.display()
            )));
        }
        let rest = &parts[1..];
        if kind.is_dir() {
            continue;
        }
        if !kind.is_file() {
            return Err(bad(format!("entry {}: not a regular file", name.display())));
        }
        if entry.size() > BUNDLE_FILE_MAX {
            return Err(bad(format!("entry {}: over 2 GiB", name.display())));
        }
        let dest = match rest {
            ["picolet"] => {
                has_binary = true;
                out.binary.clone()
            }
            ["images", f] if f.ends_with(".tar") => {
                let p = images_dir.join(f);
                out.images.push(p.clone());
                p
            }
            ["examples", ..] | ["packaging", ..] => share.join(rest.join("/")),
            _ => {
                return Err(bad(format!(
                    "entry {}: not part of a bundle",
                    name.display()
                )));
            }
        };
        if let Some(d) = dest.parent() {
            std::fs::create_dir_all(d).map_err(io(d))?;
        }
        let mode = if rest == ["picolet"] { 0o755 } else { 0o644 };
        write_entry(&mut entry, &dest, mode)?;
    }
    if !has_binary {
        return Err(bad("no `picolet` binary in it".into()));
    }
    Ok(out)
}

fn write_entry(entry: &mut impl Read, dest: &Path, mode: u32) -> Result<(), InstallError> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = dest.with_extension("part");
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        std::io::copy(&mut entry.take(BUNDLE_FILE_MAX), &mut f)?;
        f.sync_all()?;
        std::fs::rename(&tmp, dest)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(io(dest))
}

fn uninstall(args: &UninstallArgs, config: &edge_config::Config) -> Result<(), InstallError> {
    must_be_root()?;
    let manager = args.service.unwrap_or_else(Manager::detect);
    let file = manager.file(Path::new("/"));
    if !args.package {
        manager.stop_and_disable(&file)?;
        println!("stopped the picolet service");
    }
    crate::reset::reset(config, &args.common)?;
    if !args.package {
        crate::reset::remove(&file)?;
        if manager == Manager::Systemd {
            crate::service::run(&["systemctl", "daemon-reload"])?;
        }
        let bin = args.prefix.join("bin/picolet");
        crate::reset::remove(&bin)?;
        let mut prev = bin.into_os_string();
        prev.push(".prev");
        crate::reset::remove(Path::new(&prev))?;
        crate::reset::remove_tree(&args.prefix.join("share/picolet"))?;
        // Where the OpenRC and init.d scripts send `up`'s log.
        crate::reset::remove(Path::new(SCRIPT_LOG))?;
    }
    if !args.keep_config {
        crate::reset::remove_tree(Path::new("/etc/picolet"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(entries: &[(&str, &[u8], tar::EntryType)]) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().expect("tempdir");
        let path = d.path().join("b.tar.gz");
        let gz = flate2::write::GzEncoder::new(
            std::fs::File::create(&path).expect("create"),
            flate2::Compression::fast(),
        );
        let mut t = tar::Builder::new(gz);
        for (name, data, kind) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            // set_path refuses `..`: write the name bytes as a hostile
            // archive would.
            let raw = &mut h.as_old_mut().name;
            raw[..name.len()].copy_from_slice(name.as_bytes());
            h.set_cksum();
            t.append(&h, *data).expect("append");
        }
        t.into_inner().expect("tar").finish().expect("gz");
        (d, path)
    }

    #[test]
    fn a_bundle_installs_its_binary_images_and_examples_and_nothing_else() {
        let (d, path) = bundle(&[
            ("picolet-1-x86_64/picolet", b"ELF", tar::EntryType::Regular),
            (
                "picolet-1-x86_64/images/busybox.tar",
                b"img",
                tar::EntryType::Regular,
            ),
            (
                "picolet-1-x86_64/examples/manifests/hello.yaml",
                b"pod",
                tar::EntryType::Regular,
            ),
        ]);
        let prefix = d.path().join("usr");
        let images = d.path().join("images");
        let u = unpack_bundle(&path, &prefix, &images).expect("unpacks");
        assert_eq!(std::fs::read(&u.binary).expect("bin"), b"ELF");
        assert_eq!(u.images, vec![images.join("busybox.tar")]);
        assert_eq!(
            std::fs::read(prefix.join("share/picolet/examples/manifests/hello.yaml"))
                .expect("example"),
            b"pod"
        );
    }

    #[test]
    fn a_hostile_bundle_is_refused() {
        for (name, kind, why) in [
            (
                "picolet-1/../../etc/passwd",
                tar::EntryType::Regular,
                "top folder",
            ),
            ("/etc/passwd", tar::EntryType::Regular, "top folder"),
            (
                "picolet-1/images/x.tar",
                tar::EntryType::Symlink,
                "regular file",
            ),
            (
                "picolet-1/etc/shadow",
                tar::EntryType::Regular,
                "not part of",
            ),
        ] {
            let (d, path) = bundle(&[(name, b"x", kind)]);
            let e = unpack_bundle(&path, &d.path().join("usr"), &d.path().join("images"))
                .err()
                .unwrap_or_else(|| panic!("{name} accepted"));
            assert!(e.to_string().contains(why), "{name}: {e}");
            assert!(!d.path().join("etc").exists());
        }
        let (d, path) = bundle(&[("picolet-1/examples/a", b"x", tar::EntryType::Regular)]);
        let e = unpack_bundle(&path, &d.path().join("usr"), &d.path().join("images"))
            .err()
            .expect("no binary");
        assert!(e.to_string().contains("no `picolet` binary"), "{e}");
    }
}
