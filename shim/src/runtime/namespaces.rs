//! Pod namespaces without a pause process: a short-lived thread unshares the
//! network, IPC and UTS namespaces, sets them up (hostname, loopback up,
//! sysctls) and bind-mounts `/proc/thread-self/ns/*` onto files, which keeps
//! the namespaces alive after the thread is gone. Containers join them by path.
//!
//! The pins are made in the [`PinSpace`], a mount namespace of the shim's
//! own, so that the host's mount table, which every container's init copies
//! and tears down, does not grow by them; the host (CNI plugins, monitors)
//! reaches them by a path through a thread of the shim.
//!
//! Needs root (CAP_SYS_ADMIN). Unsharing these three namespaces only changes
//! the calling thread and does not clone, so it is safe in the tokio shim;
//! so is a thread's joining a mount namespace once it has its own root and
//! working directory (`unshare(CLONE_FS)`).

use std::collections::BTreeMap;
use std::fs;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, setns, unshare};

use crate::error::Error;
use crate::mutex::lock;

/// Which namespaces a pod gets of its own.
#[derive(Debug, Clone, Default)]
pub struct PodNamespaces {
    pub net: bool,
    pub ipc: bool,
    pub uts: bool,
    pub hostname: String,
    pub sysctls: BTreeMap<String, String>,
    /// A user namespace of the pod's own: the others are made inside it,
    /// so they belong to it (the pod's root may mount sysfs, proc and
    /// mqueue for them).
    pub user: Option<crate::spec::userns::PodUserns>,
}

/// Paths of the pinned namespaces (None = the host's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pinned {
    pub net: Option<PathBuf>,
    pub ipc: Option<PathBuf>,
    pub uts: Option<PathBuf>,
    pub user: Option<PathBuf>,
}

/// Creates and pins the requested namespaces under `dir`, in `space` (in
/// the host's mount namespace without one).
pub fn create(
    dir: &Path,
    want: &PodNamespaces,
    space: Option<Arc<Space>>,
) -> Result<Pinned, Error> {
    let dir = dir.to_path_buf();
    let want = want.clone();
    std::thread::Builder::new()
        .name("pod-ns".into())
        .spawn(move || create_on_this_thread(&dir, &want, space.as_deref()))
        .map_err(Error::os("spawn namespace thread"))?
        .join()
        .map_err(|_| Error::Internal("namespace thread panicked".into()))?
}

fn create_on_this_thread(
    dir: &Path,
    want: &PodNamespaces,
    space: Option<&Space>,
) -> Result<Pinned, Error> {
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
    if flags.is_empty() && want.user.is_none() {
        return Ok(Pinned::default());
    }
    // In a user namespace, the helper makes them all; this thread joins
    // the others (a thread may not join a user namespace) to set them up.
    let helper = match &want.user {
        Some(maps) => Some(UsernsHelper::start(flags, maps)?),
        None => None,
    };
    match &helper {
        Some(h) => {
            for (kind, flag) in [
                ("net", CloneFlags::CLONE_NEWNET),
                ("ipc", CloneFlags::CLONE_NEWIPC),
                ("uts", CloneFlags::CLONE_NEWUTS),
            ] {
                if flags.contains(flag) {
                    let ns = h.open(kind)?;
                    setns(ns.as_fd(), flag)
                        .map_err(Error::errno(format!("join the pod's new {kind} namespace")))?;
                }
            }
        }
        None => unshare(flags).map_err(Error::errno("unshare pod namespaces"))?,
    }
    if want.uts && !want.hostname.is_empty() {
        nix::unistd::sethostname(&want.hostname)
            .map_err(|e| Error::InvalidArgument(format!("hostname: {:?}: {e}", want.hostname)))?;
    }
    if want.net {
        loopback_up().map_err(Error::os("bring loopback up"))?;
    }
    for (key, value) in &want.sysctls {
        apply_sysctl(key, value, want)?;
    }
    let mut pinned = Pinned::default();
    let mut in_space = false;
    for (kind, on, slot) in [
        ("net", want.net, &mut pinned.net),
        ("ipc", want.ipc, &mut pinned.ipc),
        ("uts", want.uts, &mut pinned.uts),
    ] {
        if !on {
            continue;
        }
        // Only now does this thread move into the pin space: its setup
        // above (sysctls) used the host's /proc.
        if !in_space && let Some(space) = space {
            space.join_on_this_thread()?;
            in_space = true;
        }
        let target = dir.join(kind);
        pin_at(&format!("/proc/thread-self/ns/{kind}"), &target)?;
        *slot = Some(target);
    }
    if let Some(h) = &helper {
        let user = h.open("user")?;
        if !in_space && let Some(space) = space {
            space.join_on_this_thread()?;
        }
        let target = dir.join("user");
        pin_at(
            &format!("/proc/thread-self/fd/{}", user.as_raw_fd()),
            &target,
        )?;
        pinned.user = Some(target);
    }
    Ok(pinned)
}

/// A child of the shim that made a user namespace with the pod's ranges
/// and, inside it, the pod's other new namespaces, and waits: its
/// namespaces are opened from `/proc/<pid>/ns` while it lives, and it
/// exits when this is dropped. A child, because a thread of a process with
/// several cannot make or join a user namespace.
struct UsernsHelper {
    pid: nix::unistd::Pid,
    /// Closed (dropped) to let the child exit.
    hold: Option<OwnedFd>,
}

impl UsernsHelper {
    #[allow(unsafe_code)]
    fn start(flags: CloneFlags, maps: &crate::spec::userns::PodUserns) -> Result<Self, Error> {
        use nix::unistd::{ForkResult, fork, pipe2, read, write};
        let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
        let (ready_r, ready_w) = pipe2(cloexec).map_err(Error::errno("pipe"))?;
        let (hold_r, hold_w) = pipe2(cloexec).map_err(Error::errno("pipe"))?;
        let flags = flags | CloneFlags::CLONE_NEWUSER;
        // SAFETY: the shim has other threads, so the child makes only
        // async-signal-safe system calls (unshare, write, read, _exit) and
        // allocates nothing before it exits.
        match unsafe { fork() }.map_err(Error::errno("fork the user namespace helper"))? {
            ForkResult::Child => {
                drop(ready_r);
                drop(hold_w);
                let said: &[u8] = if unshare(flags).is_ok() { b"r" } else { b"e" };
                let _ = write(&ready_w, said);
                let mut b = [0u8; 1];
                let _ = read(hold_r.as_raw_fd(), &mut b);
                // SAFETY: ends the child without running the parent's
                // atexit handlers or destructors.
                unsafe { libc::_exit(0) }
            }
            ForkResult::Parent { child } => {
                drop(ready_w);
                drop(hold_r);
                let helper = Self {
                    pid: child,
                    hold: Some(hold_w),
                };
                let mut said = [0u8; 1];
                let n = read(ready_r.as_raw_fd(), &mut said)
                    .map_err(Error::errno("read the helper's word"))?;
                if n != 1 || said[0] != b'r' {
                    return Err(Error::Internal(
                        "the user namespace helper could not make the pod's namespaces".into(),
                    ));
                }
                // Written by the shim (root outside): any range, and
                // setgroups stays allowed.
                let proc_dir = PathBuf::from(format!("/proc/{child}"));
                for (file, map) in [("uid_map", &maps.uids), ("gid_map", &maps.gids)] {
                    let path = proc_dir.join(file);
                    fs::write(&path, map.line()).map_err(Error::io("write", &path))?;
                }
                Ok(helper)
            }
        }
    }

    /// The helper's namespace `kind`, opened (checked to be the helper's
    /// still: its pid is our unreaped child, so not reused).
    fn open(&self, kind: &str) -> Result<OwnedFd, Error> {
        let path = PathBuf::from(format!("/proc/{}/ns/{kind}", self.pid));
        fs::File::open(&path)
            .map(OwnedFd::from)
            .map_err(Error::io("open", &path))
    }
}

impl Drop for UsernsHelper {
    fn drop(&mut self) {
        drop(self.hold.take());
        let _ = nix::sys::wait::waitpid(self.pid, None);
    }
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

/// Pins the namespace `source` (a `/proc/.../ns/` link) at `target`, made
/// an empty file for it.
fn pin_at(source: &str, target: &Path) -> Result<(), Error> {
    fs::File::create(target).map_err(Error::io("create", target))?;
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(Error::errno(format!(
        "pin {source} at {}",
        target.display()
    )))
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
    detach(path)?;
    match fs::metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir(path),
        Ok(_) => fs::remove_file(path),
        Err(_) => Ok(()),
    }
    .map_err(Error::io("remove", path))
}

/// Unmounts what is mounted at `path` (lazily); nothing mounted or nothing
/// there is fine.
fn detach(path: &Path) -> Result<(), Error> {
    match umount2(path, MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => Ok(()),
        Err(e) => Err(Error::sys("unmount", path)(e)),
    }
}

/// The mount namespace where the pods' network, IPC and UTS namespaces are
/// pinned, instead of the host's. Every container's init copies the host's
/// mount table when it makes its own and tears the copy down after
/// pivot_root, both O(mounts), under the kernel's one namespace lock; 300
/// more mounts there (three pins for each of 100 pods) cost +1.5 ms of CPU
/// per pod at a cold start of 100 (BENCHMARKS.md).
///
/// The space is a private copy of the host's mount namespace cut down to
/// `/`, the run dir's mounts and `/proc` ([`make_space`]: it holds no
/// filesystem the host may let go of, and its mounts never reach the
/// host), made at the first pod that needs it. It is
/// pinned at `<run>/pins/mnt`, on a private bind mount of `<run>/pins`: a
/// mount namespace's pin must not propagate (the kernel refuses it), and
/// the pin keeps the space, and so the pods' namespaces, across restarts of
/// the shim, like any pin. A pin keeps its path inside the space; from the
/// host it is reached through a parked thread of the shim that lives in the
/// space ([`PinSpace::locate`]: `/proc/<shim>/task/<thread>/root/<path>`).
#[derive(Debug)]
pub struct PinSpace {
    /// `<run>/pins`.
    dir: PathBuf,
    space: Mutex<Option<Arc<Space>>>,
}

/// Where a space's thread goes: into a space opened from its pin, or into
/// a new one ([`make_space`]) for the run dir.
#[derive(Debug)]
enum Origin {
    Open(OwnedFd),
    Make(PathBuf),
}

/// An open pin space and the thread that lives in it.
#[derive(Debug)]
pub struct Space {
    ns: OwnedFd,
    /// The space's root as seen from the host: its thread's root.
    root: PathBuf,
    /// Dropped with the space; the thread then ends.
    _stop: mpsc::SyncSender<()>,
}

impl PinSpace {
    /// The pin space under `run_dir`; nothing is made before it is needed.
    pub fn new(run_dir: &Path) -> Self {
        let run_dir = std::path::absolute(run_dir).unwrap_or_else(|_| run_dir.to_path_buf());
        Self {
            dir: run_dir.join("pins"),
            space: Mutex::new(None),
        }
    }

    fn pin(&self) -> PathBuf {
        self.dir.join("mnt")
    }

    fn run_dir(&self) -> &Path {
        self.dir.parent().unwrap_or(&self.dir)
    }

    /// The space: open, opened from its pin, or (with `make`) made and
    /// pinned. None when there is none and `make` is false.
    pub fn get(&self, make: bool) -> Result<Option<Arc<Space>>, Error> {
        let mut slot = lock(&self.space);
        if let Some(space) = &*slot {
            return Ok(Some(space.clone()));
        }
        let pin = self.pin();
        let space = if is_pinned(&pin) {
            let ns = fs::File::open(&pin).map_err(Error::io("open", &pin))?;
            Space::hold(Origin::Open(ns.into()))?.0
        } else if make {
            fs::create_dir_all(&self.dir).map_err(Error::io("create", &self.dir))?;
            private_mount(&self.dir)?;
            let (space, tid) = Space::hold(Origin::Make(self.run_dir().to_path_buf()))?;
            pin_at(&format!("/proc/self/task/{tid}/ns/mnt"), &pin)?;
            space
        } else {
            return Ok(None);
        };
        let space = Arc::new(space);
        *slot = Some(space.clone());
        Ok(Some(space))
    }

    /// Where the pin at `path` is reached from the host: `path` itself if it
    /// is pinned there (a sandbox made by a picolet before the pin space),
    /// else its place in the space. Names a thread of this process: not a
    /// path to keep.
    pub fn locate(&self, path: &Path) -> PathBuf {
        if is_pinned(path) {
            return path.to_path_buf();
        }
        match self.get(false) {
            Ok(Some(space)) => space.path(path),
            Ok(None) => path.to_path_buf(),
            Err(e) => {
                tracing::warn!(error = %e, "pin space unavailable");
                path.to_path_buf()
            }
        }
    }

    /// Where the pin at `path` is reached from the host, if a namespace is
    /// pinned there at all ([`Self::locate`]).
    pub fn find(&self, path: &Path) -> Option<PathBuf> {
        let at = self.locate(path);
        is_pinned(&at).then_some(at)
    }

    /// Unpins each of `paths` wherever it is pinned and removes the files;
    /// missing is fine. One thread joins the space for all of them.
    pub fn release<P: AsRef<Path>>(&self, paths: &[P]) -> Result<(), Error> {
        let elsewhere: Vec<&Path> = paths
            .iter()
            .map(AsRef::as_ref)
            .filter(|p| !is_pinned(p))
            .collect();
        if !elsewhere.is_empty()
            && let Some(space) = self.get(false)?
        {
            space.run(|| elsewhere.iter().try_for_each(|p| detach(p)))?;
        }
        paths.iter().try_for_each(|p| release(p.as_ref()))
    }

    /// Unpins the space itself (a clean stop with no sandbox left): the
    /// host's mount table is as before the first pod. Its pins, if a crash
    /// left any, go with it.
    pub fn retire(&self) -> Result<(), Error> {
        let pin = self.pin();
        *lock(&self.space) = None;
        if is_pinned(&pin) {
            release(&pin)?;
        }
        detach(&self.dir)
    }
}

impl Space {
    /// Starts the space's thread, in the space `from` names. Returns the
    /// space and the thread's id.
    fn hold(from: Origin) -> Result<(Self, i32), Error> {
        let (ready_tx, ready_rx) = mpsc::channel();
        let (stop, stopped) = mpsc::sync_channel::<()>(0);
        std::thread::Builder::new()
            .name("pin-space".into())
            .spawn(move || {
                let entered = match &from {
                    Origin::Open(ns) => enter(ns),
                    Origin::Make(run_dir) => make_space(run_dir),
                };
                let ok = entered.is_ok();
                let _ = ready_tx.send(entered.map(|()| nix::unistd::gettid().as_raw()));
                if ok {
                    // Parked until the space is dropped (the sender goes).
                    let _ = stopped.recv();
                }
            })
            .map_err(Error::os("spawn the pin space thread"))?;
        let tid = ready_rx
            .recv()
            .map_err(|_| Error::Internal("the pin space thread died".into()))??;
        let ns_path = PathBuf::from(format!("/proc/self/task/{tid}/ns/mnt"));
        let ns = fs::File::open(&ns_path).map_err(Error::io("open", &ns_path))?;
        let space = Self {
            ns: ns.into(),
            root: PathBuf::from(format!("/proc/{}/task/{tid}/root", std::process::id())),
            _stop: stop,
        };
        Ok((space, tid))
    }

    /// `path` (absolute) inside the space, as seen from the host.
    pub fn path(&self, path: &Path) -> PathBuf {
        self.root.join(path.strip_prefix("/").unwrap_or(path))
    }

    /// Moves the calling thread into the space for good: only for threads
    /// that end with the work they were made for.
    pub fn join_on_this_thread(&self) -> Result<(), Error> {
        enter(&self.ns)
    }

    /// Runs `work` on a new thread inside the space.
    fn run<T: Send>(&self, work: impl FnOnce() -> Result<T, Error> + Send) -> Result<T, Error> {
        std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("pin-space-op".into())
                .spawn_scoped(s, || {
                    self.join_on_this_thread()?;
                    work()
                })
                .map_err(Error::os("spawn a pin space thread"))?
                .join()
                .map_err(|_| Error::Internal("a pin space thread panicked".into()))?
        })
    }
}

/// Makes this thread's own mount namespace for the pins: a private copy of
/// the host's (its mounts and unmounts never reach the host, nor the
/// host's it), cut down to what pins need: `/`, the mounts the run dir
/// lies on, and `/proc` (the pins' source, `/proc/thread-self/ns/*`). A
/// full copy would keep every filesystem mounted at its making alive for
/// as long as the space lives, after the host let it go: a USB stick, an
/// old container's rootfs, an older picolet's pins (the host's `/` is
/// private on hosts without systemd, so no unmount would reach a slave
/// copy either), and on a shared `/` every later host mount (each
/// container's rootfs and /dev/shm) would be copied into it.
fn make_space(run_dir: &Path) -> Result<(), Error> {
    unshare(CloneFlags::CLONE_NEWNS).map_err(Error::errno("make the pin space"))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_PRIVATE | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(Error::errno("make the pin space private"))?;
    let run_dir = fs::canonicalize(run_dir).map_err(Error::io("resolve", run_dir))?;
    // A pass detaches every extra mount it can reach by its path; a mount
    // hidden under another one is reached in the next pass.
    let mut left = Vec::new();
    for _ in 0..4 {
        let table = fs::read_to_string("/proc/thread-self/mountinfo").map_err(Error::io(
            "read the pin space's",
            Path::new("/proc/thread-self/mountinfo"),
        ))?;
        let extra: Vec<String> = crate::host::mountinfo::parse(&table)
            .map(|m| m.mount_point)
            .filter(|at| !space_keeps(Path::new(at), &run_dir))
            .collect();
        let before = extra.len();
        // Children come after their parents in mountinfo: last first.
        left = extra
            .into_iter()
            .rev()
            .filter(|at| umount2(at.as_str(), MntFlags::MNT_DETACH).is_err())
            .collect();
        if left.is_empty() || left.len() == before {
            break;
        }
    }
    if !left.is_empty() {
        tracing::warn!(mounts = ?left, "mounts the pin space could not let go of");
    }
    Ok(())
}

/// Whether the pin space keeps the mount at `at`: `/` and the others the
/// run dir (resolved) lies on, and `/proc`.
fn space_keeps(at: &Path, run_dir: &Path) -> bool {
    at == Path::new("/proc") || run_dir.starts_with(at)
}

/// Joins the mount namespace `ns` on this thread: first a root and working
/// directory of its own, which a thread of a process shares until then.
fn enter(ns: &OwnedFd) -> Result<(), Error> {
    unshare(CloneFlags::CLONE_FS).map_err(Error::errno("unshare fs"))?;
    setns(ns.as_fd(), CloneFlags::CLONE_NEWNS).map_err(Error::errno("join the pin space"))
}

/// Makes `dir` a private mount: bind-mounted onto itself unless it is a
/// mount point already.
fn private_mount(dir: &Path) -> Result<(), Error> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")
        .map_err(Error::io("read", Path::new("/proc/self/mountinfo")))?;
    let real = fs::canonicalize(dir).map_err(Error::io("resolve", dir))?;
    let is_mount_point =
        crate::host::mountinfo::parse(&mountinfo).any(|m| Path::new(&m.mount_point) == real);
    if !is_mount_point {
        mount(Some(dir), dir, None::<&str>, MsFlags::MS_BIND, None::<&str>)
            .map_err(Error::sys("bind-mount", dir))?;
    }
    mount(
        None::<&str>,
        dir,
        None::<&str>,
        MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(Error::sys("make private", dir))
}

#[cfg(test)]
mod tests {
    use super::space_keeps;
    use std::path::Path;

    #[test]
    fn the_pin_space_keeps_only_the_run_dirs_mounts_and_proc() {
        let run = Path::new("/run/picolet");
        for at in ["/", "/run", "/run/picolet", "/proc"] {
            assert!(space_keeps(Path::new(at), run), "{at}");
        }
        for at in [
            "/run/picolet/pins",
            "/run/picolet/sandboxes/a/shm",
            "/run/user/0",
            "/ru",
            "/run/pic",
            "/proc/sys/fs/binfmt_misc",
            "/sys",
            "/media/usb",
            "/var/lib/picolet/overlay/x/rootfs",
        ] {
            assert!(!space_keeps(Path::new(at), run), "{at}");
        }
    }
}
