//! Waiting for a process that is not our child: a pidfd (Linux 5.3+)
//! becomes readable when the process exits.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

pub fn open(pid: i32) -> io::Result<OwnedFd> {
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
pub fn signal(pid: i32, start_time: Option<u64>, sig: i32) -> io::Result<bool> {
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
