//! A tty container's terminal: libcontainer makes the pty inside the
//! container (its devpts, mounted as /dev/console) and sends the master
//! over the console socket the monitor listens on; the monitor then reads
//! the container's output from it, writes attach's stdin to it and sets
//! its size.
#![allow(unsafe_code)]

use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{ControlMessageOwned, MsgFlags, UnixAddr, recvmsg};

/// How long libcontainer's init has to send the master after the create.
const WAIT: Duration = Duration::from_secs(10);

/// Accepts libcontainer's connection and takes the pty master it sends.
pub fn receive_master(listener: &UnixListener) -> Result<OwnedFd, String> {
    let mut fds = [PollFd::new(
        std::os::fd::AsFd::as_fd(listener),
        PollFlags::POLLIN,
    )];
    let ms = u16::try_from(WAIT.as_millis()).unwrap_or(u16::MAX);
    match poll(&mut fds, PollTimeout::from(ms)) {
        Ok(n) if n > 0 => {}
        _ => return Err("the container's init sent no terminal".into()),
    }
    let (conn, _) = listener
        .accept()
        .map_err(|e| format!("accept on the console socket: {e}"))?;
    let mut buf = [0u8; 256];
    let mut iov = [IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<UnixAddr>(
        conn.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(|e| format!("receive the terminal: {e}"))?;
    let cmsgs = msg
        .cmsgs()
        .map_err(|e| format!("receive the terminal: {e}"))?;
    for c in cmsgs {
        if let ControlMessageOwned::ScmRights(fds) = c
            && let Some(&fd) = fds.first()
        {
            // SAFETY: SCM_RIGHTS just installed `fd` in this process; we
            // are its only owner (any further fds of the message are
            // closed below).
            let master = unsafe { OwnedFd::from_raw_fd(fd) };
            for &extra in &fds[1..] {
                // SAFETY: as above; these are not ours to keep.
                drop(unsafe { OwnedFd::from_raw_fd(extra) });
            }
            return Ok(master);
        }
    }
    Err("the console socket message carried no terminal".into())
}

/// Sets the terminal's size (the container's foreground job gets SIGWINCH).
pub fn set_size(master: &OwnedFd, width: u16, height: u16) {
    let ws = libc::winsize {
        ws_row: height,
        ws_col: width,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one `winsize` through the pointer, which
    // points at a live local; the fd is an open pty master.
    let _ = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
}
