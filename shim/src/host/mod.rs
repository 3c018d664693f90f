//! Host facts and process state the post-fork paths share: a process's
//! start time (to tell a PID from its reuse) and the signal state a
//! process must have right before exec. No tokio here: these run in forked
//! children.

pub mod cgroupfs;
pub mod child_error;
pub mod devices;
pub mod exe;
pub mod mount_api;
pub mod mountinfo;
pub mod pidfd;
pub mod users;

use nix::sys::signal::SigSet;

pub use child_error::ChildError;

/// Field 22 of /proc/<pid>/stat: start time in clock ticks since boot.
pub fn proc_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// The child gets `signal` when the thread that spawns it dies, however it
/// dies (kill -9 included). The death signal is tied to the forking
/// thread: spawn from a thread that lives as long as the parent (`up`'s
/// only thread, a tokio worker of the shim). If the parent died before the
/// prctl, nobody would send the signal: the spawn fails instead.
#[allow(unsafe_code)]
pub fn die_with_parent(cmd: &mut std::process::Command, signal: nix::sys::signal::Signal) {
    use std::os::unix::process::CommandExt;
    let parent = nix::unistd::Pid::this();
    // SAFETY: the closure runs in the child between fork and exec; it calls
    // only prctl(2) and getppid(2), which are async-signal-safe, and builds
    // its error from an errno without allocating.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(signal).map_err(std::io::Error::from)?;
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from(nix::errno::Errno::ESRCH));
            }
            Ok(())
        });
    }
}

/// The `[stack]` mapping's range in `/proc/self/maps` text.
pub(crate) fn stack_range(maps: &str) -> Option<(usize, usize)> {
    let line = maps.lines().find(|l| l.ends_with("[stack]"))?;
    let (start, end) = line.split(' ').next()?.split_once('-')?;
    Some((
        usize::from_str_radix(start, 16).ok()?,
        usize::from_str_radix(end, 16).ok()?,
    ))
}

/// Stack kept below the caller's frame by [`release_stack_below`], far more
/// than a red zone (128 bytes) and this function's own calls need; deeper
/// calls after it fault their pages back in.
const STACK_KEPT: usize = 16 << 10;

/// Gives the kernel back the main thread's stack pages more than
/// [`STACK_KEPT`] below the caller's frame: the monitor's create is deep
/// (oci-spec, seccomp, the init) and then the monitor idles in a
/// shallow loop for the container's life; those pages were 184 of its 348
/// KiB of private memory. A page touched again is a fresh zero page. Only
/// for a single-threaded process's main thread.
///
/// Never inlined: `here` must be in this function's own frame, below every
/// byte of the caller's. Inlined into the monitor's `run`, whose frame is
/// large, `here` could sit above live locals of `run` that the madvise
/// would then zero.
#[allow(unsafe_code)]
#[inline(never)]
pub fn release_stack_below() {
    let here = 0u8;
    let sp = std::ptr::addr_of!(here) as usize;
    let Some((start, end)) = std::fs::read_to_string("/proc/self/maps")
        .ok()
        .as_deref()
        .and_then(stack_range)
    else {
        return;
    };
    let page = 4096;
    let top = sp.saturating_sub(STACK_KEPT) & !(page - 1);
    if !(start < top && top < end) {
        return;
    }
    // SAFETY: [start, top) is this thread's own stack below every live
    // frame (the caller's is above `sp`, and STACK_KEPT more is left);
    // MADV_DONTNEED on private anonymous memory only turns those pages
    // back into zero-fill-on-demand ones.
    unsafe {
        libc::madvise(start as *mut libc::c_void, top - start, libc::MADV_DONTNEED);
    }
}

/// As a freshly started process: every signal at its default disposition
/// and none blocked. exec keeps ignored signals ignored and the mask as it
/// is; Rust ignores SIGPIPE in the picolet binary, and what started the
/// shim may have ignored others. Called right before exec, in the
/// container's init too (`nsexec::become_the_container`).
#[allow(unsafe_code)]
pub(crate) fn reset_signals() -> Result<(), ChildError> {
    // The raw syscall: libc refuses its own reserved signals (32–34), which
    // can still arrive ignored. SIG_DFL with no flags, restorer or mask is an
    // all-zero kernel `struct sigaction` on both x86_64 and aarch64.
    let default = [0u64; 4];
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: `default` outlives the call and is at least as large as
        // the kernel's struct; no old action is asked for.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                default.as_ptr(),
                std::ptr::null_mut::<u64>(),
                8usize,
            )
        };
    }
    SigSet::empty()
        .thread_set_mask()
        .map_err(ChildError::errno("set the signal mask"))
}

/// Sends `fd` over the unix socket `sock` (SCM_RIGHTS), with one byte.
pub fn send_fd(
    sock: std::os::fd::BorrowedFd<'_>,
    fd: std::os::fd::BorrowedFd<'_>,
) -> Result<(), ChildError> {
    use std::os::fd::AsRawFd;
    let fds = [fd.as_raw_fd()];
    let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
    let iov = [std::io::IoSlice::new(b"t")];
    nix::sys::socket::sendmsg::<nix::sys::socket::UnixAddr>(
        sock.as_raw_fd(),
        &iov,
        &cmsg,
        nix::sys::socket::MsgFlags::empty(),
        None,
    )
    .map(|_| ())
    .map_err(ChildError::errno("send the terminal"))
}

/// Receives a descriptor sent over the unix socket `sock` (SCM_RIGHTS);
/// `Ok(None)` when the peer closed without sending one. `sock` may be
/// non-blocking (then EAGAIN comes back as an error of kind WouldBlock).
#[allow(unsafe_code)]
pub fn recv_fd(sock: std::os::fd::BorrowedFd<'_>) -> std::io::Result<Option<std::os::fd::OwnedFd>> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, UnixAddr, recvmsg};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    let mut buf = [0u8; 256];
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; 2]);
    let msg = recvmsg::<UnixAddr>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(std::io::Error::from)?;
    let mut got = None;
    for c in msg.cmsgs().map_err(std::io::Error::from)? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            for fd in fds {
                // SAFETY: SCM_RIGHTS just installed `fd` in this process and
                // nothing else refers to it: we own it (extras are closed).
                let owned = unsafe { OwnedFd::from_raw_fd(fd) };
                if got.is_none() {
                    got = Some(owned);
                }
            }
        }
    }
    Ok(got)
}

/// `path` reached through /proc/self/fd of its folder, for a unix socket
/// whose path is longer than the 107 bytes a socket address holds; the
/// folder stays open as long as the returned file lives.
pub fn via_dir_fd(path: &std::path::Path) -> std::io::Result<(std::fs::File, std::path::PathBuf)> {
    use std::os::fd::AsRawFd;
    let dir = std::fs::File::open(path.parent().unwrap_or(std::path::Path::new("/")))?;
    let via = std::path::Path::new("/proc/self/fd")
        .join(dir.as_raw_fd().to_string())
        .join(path.file_name().unwrap_or_default());
    Ok((dir, via))
}

/// Why [`in_netns`] failed: entering the namespace, or `work`'s own
/// error `E`.
#[derive(Debug, thiserror::Error)]
pub enum InNetnsError<E> {
    #[error("open {}: {source}", path.display())]
    Open {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("join {}: {source}", path.display())]
    Join {
        path: std::path::PathBuf,
        source: nix::Error,
    },
    #[error("spawn a thread for {}: {source}", path.display())]
    Spawn {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("the thread in {} panicked", path.display())]
    Panicked { path: std::path::PathBuf },
    #[error(transparent)]
    Work(E),
}

/// Runs `work` on a new thread that joined the network namespace at
/// `netns` and returns its result. setns of a network namespace changes
/// only the calling thread, and that thread ends with `work`: nothing
/// else ever runs in the pod's namespace by mistake.
pub fn in_netns<T: Send, E: Send>(
    netns: &std::path::Path,
    work: impl FnOnce() -> Result<T, E> + Send,
) -> Result<T, InNetnsError<E>> {
    use std::os::fd::AsFd;
    let path = || netns.to_path_buf();
    let ns = std::fs::File::open(netns).map_err(|source| InNetnsError::Open {
        path: path(),
        source,
    })?;
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("netns".into())
            .spawn_scoped(s, || {
                nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).map_err(
                    |source| InNetnsError::Join {
                        path: path(),
                        source,
                    },
                )?;
                work().map_err(InNetnsError::Work)
            })
            .map_err(|source| InNetnsError::Spawn {
                path: path(),
                source,
            })?
            .join()
            .map_err(|_| InNetnsError::Panicked { path: path() })?
    })
}

/// Marks every descriptor from `first` up close-on-exec, so an exec
/// passes on nothing but what was moved below `first` on purpose (runc's
/// CVE-2024-21626 / GHSA-xr7r-f8xq-vfvv class: a descriptor of the host
/// reached through `/proc/self/fd` in a container). Every picolet process
/// calls it first thing, for what its parent leaked to it, and every path
/// into a container calls it again right before exec. Async-signal-safe
/// on kernels with close_range(2) (5.11+); older ones list /proc/self/fd.
#[allow(unsafe_code)]
pub fn cloexec_from(first: u32) -> std::io::Result<()> {
    // SAFETY: close_range takes three integers.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|fd| u32::try_from(*fd).is_ok_and(|fd| fd >= first))
        .collect();
    for fd in fds {
        // SAFETY: F_SETFD on a number that may already be closed (the
        // listing's own descriptor): EBADF, ignored.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(())
}

/// Fails unless the working directory is inside this process's root: a
/// `chdir` to `/proc/self/fd/<n>` of a descriptor of the host lands
/// outside it, and the kernel then reports the path as `(unreachable)…`
/// (runc's check for CVE-2024-21626).
#[allow(unsafe_code)]
pub fn cwd_is_inside_root() -> Result<(), ChildError> {
    let mut buf = [0u8; 4096];
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    let r = unsafe { libc::syscall(libc::SYS_getcwd, buf.as_mut_ptr(), buf.len()) };
    if r < 0 {
        return Err(ChildError::errno("getcwd")(nix::errno::Errno::last()));
    }
    if buf[0] != b'/' {
        return Err(ChildError::detail(
            "the working directory",
            "outside the container's root",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_stack_mapping_is_found() {
        let maps = "\
00400000-00d4c000 r-xp 00000000 fd:01 123 /usr/bin/picolet
7ffd6a1e0000-7ffd6a201000 rw-p 00000000 00:00 0                          [stack]
7ffd6a3f4000-7ffd6a3f8000 r--p 00000000 00:00 0                          [vvar]
";
        assert_eq!(
            super::stack_range(maps),
            Some((0x7ffd_6a1e_0000, 0x7ffd_6a20_1000))
        );
        assert_eq!(
            super::stack_range("00400000-00d4c000 r-xp 0 0 1 /x\n"),
            None
        );
        // The running test's own stack (a thread's, not [stack]) is not asked
        // for; the process's main stack is there.
        let own = std::fs::read_to_string("/proc/self/maps").expect("maps");
        assert!(super::stack_range(&own).is_some());
    }
}
