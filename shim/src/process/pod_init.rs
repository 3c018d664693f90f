//! `picolet monitor pod-init`: the tiny init of a pod's shared pid namespace
//! (pid mode POD), started only for pods that ask for one. A pid namespace
//! dies with its init, so something must be pid 1 for as long as the pod
//! lives; this is that process: it reaps orphans and exits on SIGTERM.
//! (Other pod namespaces need no process: they are pinned by bind mounts.)
//!
//! Every container of the pod sees it as `/proc/1`, so it is confined as
//! containerd's pause is, and more: it joins the pod's network, IPC and UTS
//! namespaces, lives in a mount namespace of its own whose root is an empty
//! read-only tmpfs (nothing of the host behind `/proc/1/root`,
//! `/proc/1/mountinfo` or `/proc/1/net`), runs as uid and gid 65535 with
//! no capabilities in any set, no_new_privs, and a seccomp filter that lets
//! through only the calls an init makes. Its only descriptors are 0, 1 and
//! 2, all `/dev/null`. It runs from the shim's sealed copy of picolet
//! (`crate::host::exe`), so `/proc/1/exe` is no way to the binary on disk.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, setns, unshare};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Gid, Pid, Uid, fork};

/// Why pod-init could not confine itself (printed on stderr for the shim).
#[derive(Debug, thiserror::Error)]
pub enum PodInitError {
    #[error("open {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Sys {
        what: &'static str,
        #[source]
        source: nix::errno::Errno,
    },
    #[error("the init's seccomp filter: {0}")]
    Filter(#[source] crate::seccomp::SeccompError),
    #[error("join {path}: {source}")]
    Join {
        path: PathBuf,
        #[source]
        source: nix::errno::Errno,
    },
}

/// Opening `path` failed, for `map_err`.
fn open(path: &Path) -> impl FnOnce(std::io::Error) -> PodInitError {
    let path = path.to_path_buf();
    move |source| PodInitError::Open { path, source }
}

/// `what` failed with `source`, for `map_err`.
fn sys(what: &'static str) -> impl FnOnce(nix::errno::Errno) -> PodInitError {
    move |source| PodInitError::Sys { what, source }
}

/// The user and group pod-init runs as (the pause image's).
pub const POD_INIT_ID: u32 = 65535;

/// The pod's namespaces pod-init joins (None: the host's, for a host
/// network or host IPC pod).
#[derive(Debug, Default)]
pub struct PodSpaces {
    pub net: Option<PathBuf>,
    pub ipc: Option<PathBuf>,
    pub uts: Option<PathBuf>,
    /// The pod's own user namespace: joined first, so the PID namespace
    /// made here belongs to it (its containers may mount its /proc).
    pub user: Option<PathBuf>,
}

/// Runs in a fresh, single-threaded `picolet` process. Prints the pid (as
/// seen from the caller's namespace) of the new namespace's init, then exits;
/// the init lives on. `root` is an existing directory (the sandbox's run
/// dir) that the init's empty root is mounted over in its own mount
/// namespace. Returns the exit code.
#[allow(unsafe_code)]
pub fn run(root: &Path, spaces: &PodSpaces) -> i32 {
    let (null, filter) = match confine(root, spaces) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pod-init: {e}");
            return 1;
        }
    };
    // SAFETY: this process is single-threaded (no runtime or threads were
    // started before this point), so the child may run arbitrary code.
    match unsafe { fork() } {
        Ok(ForkResult::Parent { child }) => {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", child.as_raw());
            let _ = out.flush();
            0
        }
        Ok(ForkResult::Child) => {
            serve_as_init(null, &filter);
            0
        }
        Err(e) => {
            eprintln!("pod-init: fork: {e}");
            1
        }
    }
}

/// Everything but the fork: the pod's namespaces, the empty root, the new
/// PID namespace for the next child, then no privilege left. Returns the
/// host's `/dev/null`, opened while it is in reach, and the init's seccomp
/// filter, compiled here so that a failure is reported, not a silent exit
/// of the pod's PID 1.
fn confine(
    root: &Path,
    spaces: &PodSpaces,
) -> Result<(OwnedFd, seccompiler::BpfProgram), PodInitError> {
    let filter = crate::seccomp::allow_only(INIT_CALLS).map_err(PodInitError::Filter)?;
    let null = File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(open(Path::new("/dev/null")))?;
    // All opened before any is joined: in the pod's user namespace the
    // shim's paths to them are out of reach.
    let mut join = Vec::new();
    for (path, flag) in [
        (&spaces.user, CloneFlags::CLONE_NEWUSER),
        (&spaces.net, CloneFlags::CLONE_NEWNET),
        (&spaces.ipc, CloneFlags::CLONE_NEWIPC),
        (&spaces.uts, CloneFlags::CLONE_NEWUTS),
    ] {
        if let Some(p) = path {
            join.push((p, flag, File::open(p).map_err(open(p))?));
        }
    }
    for (p, flag, ns) in join {
        setns(ns.as_fd(), flag).map_err(|source| PodInitError::Join {
            path: p.clone(),
            source,
        })?;
    }
    empty_root(root)?;
    unshare(CloneFlags::CLONE_NEWPID).map_err(sys("unshare the pid namespace"))?;
    drop_privileges()?;
    Ok((null.into(), filter))
}

/// A mount namespace of our own whose `/` is an empty, read-only tmpfs:
/// the host's mounts are copied by the unshare and dropped by the pivot,
/// with nothing propagated back (everything made private first).
fn empty_root(at: &Path) -> Result<(), PodInitError> {
    unshare(CloneFlags::CLONE_NEWNS).map_err(sys("unshare the mount namespace"))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(sys("make / private"))?;
    let ro = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(
        Some("pod-init"),
        at,
        Some("tmpfs"),
        ro,
        Some("size=4k,nr_inodes=1,mode=0555"),
    )
    .map_err(sys("mount the empty root"))?;
    nix::unistd::chdir(at).map_err(sys("chdir into the empty root"))?;
    nix::unistd::pivot_root(".", ".").map_err(sys("pivot_root"))?;
    // The old root is stacked under the new one at ".": let it go.
    umount2(".", MntFlags::MNT_DETACH).map_err(sys("unmount the old root"))?;
    nix::unistd::chdir("/").map_err(sys("chdir /"))
}

/// uid/gid 65535, no supplementary groups, every capability gone from
/// every set (the bounding set first, while CAP_SETPCAP is held), and
/// no_new_privs.
#[allow(unsafe_code)]
fn drop_privileges() -> Result<(), PodInitError> {
    for cap in 0..64u64 {
        // SAFETY: PR_CAPBSET_DROP takes one integer; EINVAL past the last.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } < 0 {
            break;
        }
    }
    // SAFETY: PR_CAP_AMBIENT_CLEAR_ALL takes no further arguments.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    let (uid, gid) = (Uid::from_raw(POD_INIT_ID), Gid::from_raw(POD_INIT_ID));
    nix::unistd::setgroups(&[]).map_err(sys("setgroups"))?;
    nix::unistd::setresgid(gid, gid, gid).map_err(sys("setresgid"))?;
    // From uid 0 to another uid in all three: the kernel clears the
    // permitted and effective sets (no keepcaps), and exec could not
    // give any back with an empty bounding set.
    nix::unistd::setresuid(uid, uid, uid).map_err(sys("setresuid"))?;
    nix::sys::prctl::set_no_new_privs().map_err(sys("no_new_privs"))
}

/// The calls pid 1 makes: wait for signals, reap, exit; the allocator's
/// memory calls, and the writes and closes of its standard streams.
const INIT_CALLS: &[i64] = &[
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_rt_sigreturn,
    libc::SYS_restart_syscall,
    libc::SYS_wait4,
    libc::SYS_waitid,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_write,
    libc::SYS_close,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_brk,
    libc::SYS_madvise,
    libc::SYS_futex,
    libc::SYS_sigaltstack,
    libc::SYS_getpid,
];

/// Pid 1 of the pod: reap children, exit on SIGTERM or SIGINT.
fn serve_as_init(null: OwnedFd, filter: &seccompiler::BpfProgram) {
    // Let go of the caller's pipes: it waits for their EOF.
    for fd in 0..=2 {
        let _ = nix::unistd::dup2(null.as_raw_fd(), fd);
    }
    drop(null);
    let _ = nix::unistd::setsid();
    let mut mask = SigSet::empty();
    for s in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
    ] {
        mask.add(s);
    }
    if mask.thread_block().is_err() {
        return;
    }
    if seccompiler::apply_filter(filter).is_err() {
        return;
    }
    loop {
        match mask.wait() {
            Ok(Signal::SIGCHLD) => loop {
                match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) | Err(_) => break,
                    Ok(_) => {}
                }
            },
            Ok(Signal::SIGHUP) => {}
            _ => return,
        }
    }
}
