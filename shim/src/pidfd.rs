//! Waiting for a process that is not our child: a pidfd (Linux 5.3+)
//! becomes readable when the process exits.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

pub(crate) fn open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open(pid, 0) takes two integers and returns a new file
    // descriptor or -1; nothing of ours is read or written.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("pidfd_open: fd out of range"))?;
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `sig` to the process `pid` that started at `start_time` (clock
/// ticks): never to a later user of the pid. `Ok(false)` when it is gone.
pub(crate) fn signal(pid: i32, start_time: Option<u64>, sig: i32) -> io::Result<bool> {
    let fd = match open(pid) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(false),
        Err(e) => return Err(e),
    };
    // Checked after opening: the pidfd now pins this process.
    if start_time.is_some() && crate::host::proc_start_time(pid) != start_time {
        return Ok(false);
    }
    // SAFETY: pidfd_send_signal(fd, sig, NULL, 0) takes a descriptor we
    // own, a signal number, no siginfo and no flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ESRCH) {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(true)
}

/// Calls `exited` when process `pid` — the one that started at
/// `start_time` (clock ticks), not a later user of the pid — exits, and
/// `watching` before that, once its pidfd is open and the process is the
/// recorded one. Without pidfds (old kernels) it returns at once, calling
/// neither, and the caller's polling stays the only way to notice.
pub async fn notify_on_exit(
    pid: i32,
    start_time: Option<u64>,
    watching: impl FnOnce(),
    exited: impl FnOnce(),
) {
    let fd = match open(pid) {
        Ok(fd) => fd,
        Err(e) => {
            if e.raw_os_error() == Some(libc::ESRCH) {
                exited();
            }
            return;
        }
    };
    // Checked after opening: the pidfd now pins this process.
    if start_time.is_none() || crate::host::proc_start_time(pid) != start_time {
        exited();
        return;
    }
    // SAFETY: the AsyncFd takes ownership of the OwnedFd, which stays open
    // and is the same descriptor until the AsyncFd is dropped.
    let Ok(fd) = (unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }) else {
        return;
    };
    watching();
    let _ = fd.readable().await;
    exited();
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn wakes_when_the_process_exits_and_not_before() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.3")
            .spawn()
            .expect("sleep");
        let pid = i32::try_from(child.id()).expect("pid");
        let start = crate::host::proc_start_time(pid);
        let notify = Arc::new(tokio::sync::Notify::new());
        let t0 = std::time::Instant::now();
        let n = notify.clone();
        tokio::spawn(notify_on_exit(pid, start, || {}, move || n.notify_one()));
        tokio::time::timeout(Duration::from_secs(10), notify.notified())
            .await
            .expect("woken");
        assert!(
            t0.elapsed() >= Duration::from_millis(250),
            "woken early: {:?}",
            t0.elapsed()
        );
        let _ = child.wait();
        // A pid whose start time is not the recorded one: woken at once.
        let other = Arc::new(tokio::sync::Notify::new());
        let me = i32::try_from(std::process::id()).expect("pid");
        let o = other.clone();
        tokio::spawn(notify_on_exit(me, Some(1), || {}, move || o.notify_one()));
        tokio::time::timeout(Duration::from_secs(5), other.notified())
            .await
            .expect("a reused pid counts as exited");
    }
}
