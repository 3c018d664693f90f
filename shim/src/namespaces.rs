//! Pod namespaces without a pause process: a short-lived thread unshares the
//! network, IPC and UTS namespaces, sets them up (hostname, loopback up,
//! sysctls) and bind-mounts `/proc/thread-self/ns/*` onto files, which keeps
//! the namespaces alive after the thread is gone. Containers join them by path.
//!
//! Needs root (CAP_SYS_ADMIN). Unsharing these three namespaces only changes
//! the calling thread and does not clone, so it is safe in the tokio shim.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, unshare};

use crate::error::Error;

/// Which namespaces a pod gets of its own.
#[derive(Debug, Clone, Default)]
pub struct PodNamespaces {
    pub net: bool,
    pub ipc: bool,
    pub uts: bool,
    pub hostname: String,
    pub sysctls: BTreeMap<String, String>,
}

/// Paths of the pinned namespaces (None = the host's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pinned {
    pub net: Option<PathBuf>,
    pub ipc: Option<PathBuf>,
    pub uts: Option<PathBuf>,
}

/// Creates and pins the requested namespaces under `dir`.
pub fn create(dir: &Path, want: &PodNamespaces) -> Result<Pinned, Error> {
    let dir = dir.to_path_buf();
    let want = want.clone();
    std::thread::Builder::new()
        .name("pod-ns".into())
        .spawn(move || create_on_this_thread(&dir, &want))
        .map_err(|e| Error::Internal(format!("spawn namespace thread: {e}")))?
        .join()
        .map_err(|_| Error::Internal("namespace thread panicked".into()))?
}

fn create_on_this_thread(dir: &Path, want: &PodNamespaces) -> Result<Pinned, Error> {
    let mut flags = CloneFlags::empty();
    if want.net {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    if want.ipc {
        flags |= CloneFlags::CLONE_NEWIPC;
    }
    if want.uts {
        flags |= CloneFlags::CLONE_NEWUTS;
    }
    if flags.is_empty() {
        return Ok(Pinned::default());
    }
    unshare(flags).map_err(|e| Error::Internal(format!("unshare pod namespaces: {e}")))?;
    if want.uts && !want.hostname.is_empty() {
        nix::unistd::sethostname(&want.hostname)
            .map_err(|e| Error::InvalidArgument(format!("hostname: {:?}: {e}", want.hostname)))?;
    }
    if want.net {
        loopback_up().map_err(|e| Error::Internal(format!("bring loopback up: {e}")))?;
    }
    for (key, value) in &want.sysctls {
        apply_sysctl(key, value, want)?;
    }
    let mut pinned = Pinned::default();
    for (kind, on, slot) in [
        ("net", want.net, &mut pinned.net),
        ("ipc", want.ipc, &mut pinned.ipc),
        ("uts", want.uts, &mut pinned.uts),
    ] {
        if !on {
            continue;
        }
        let target = dir.join(kind);
        fs::File::create(&target).map_err(Error::io("create", &target))?;
        let source = format!("/proc/thread-self/ns/{kind}");
        mount(
            Some(source.as_str()),
            &target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| {
            Error::Internal(format!("pin {kind} namespace at {}: {e}", target.display()))
        })?;
        *slot = Some(target);
    }
    Ok(pinned)
}

/// Only namespaced sysctls, and only those of a namespace the pod owns.
fn apply_sysctl(key: &str, value: &str, want: &PodNamespaces) -> Result<(), Error> {
    let bad = |why: &str| Error::InvalidArgument(format!("linux.sysctls[{key}]: {why}"));
    let allowed = (want.net && key.starts_with("net."))
        || (want.ipc
            && (key.starts_with("kernel.shm")
                || key.starts_with("kernel.msg")
                || key == "kernel.sem"
                || key.starts_with("fs.mqueue.")))
        || (want.uts && (key == "kernel.hostname" || key == "kernel.domainname"));
    if !allowed {
        return Err(bad("not a namespaced sysctl of a namespace this pod owns"));
    }
    if key.contains("..") || key.contains('/') {
        return Err(bad("invalid name"));
    }
    let path = Path::new("/proc/sys").join(key.replace('.', "/"));
    fs::write(&path, value).map_err(|e| bad(&format!("write {}: {e}", path.display())))
}

// The ioctl request type is c_ulong with glibc and c_int with musl.
#[allow(clippy::unnecessary_cast)]
const SIOCGIFFLAGS: libc::Ioctl = libc::SIOCGIFFLAGS as libc::Ioctl;
#[allow(clippy::unnecessary_cast)]
const SIOCSIFFLAGS: libc::Ioctl = libc::SIOCSIFFLAGS as libc::Ioctl;

/// Sets IFF_UP on `lo` in this thread's network namespace.
#[allow(unsafe_code)]
fn loopback_up() -> std::io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: plain socket(2); the result is checked and owned right away.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh, valid descriptor that nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ifreq is a plain C struct for which all-zero bytes are valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = libc::c_char::from_ne_bytes([*src]);
    }
    // SAFETY: SIOCGIFFLAGS reads the name and writes ifru_flags of `req`,
    // which lives for the whole call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let up = libc::c_short::try_from(libc::IFF_UP).expect("IFF_UP is 1");
    // SAFETY: the union member ifru_flags was just filled by the kernel.
    unsafe { req.ifr_ifru.ifru_flags |= up };
    // SAFETY: as above; SIOCSIFFLAGS only reads `req`.
    if unsafe { libc::ioctl(sock.as_raw_fd(), SIOCSIFFLAGS, &req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `path` is a pinned namespace (an nsfs bind mount). Pins live on
/// the run dir's tmpfs: after a reboot the path is gone.
pub fn is_pinned(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::NSFS_MAGIC)
}

/// Unpins a namespace or unmounts a tmpfs and removes its mount point;
/// missing is fine.
pub fn release(path: &Path) -> Result<(), Error> {
    match umount2(path, MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => {}
        Err(e) => return Err(Error::sys("unmount", path)(e)),
    }
    match fs::metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir(path),
        Ok(_) => fs::remove_file(path),
        Err(_) => Ok(()),
    }
    .map_err(Error::io("remove", path))
}
