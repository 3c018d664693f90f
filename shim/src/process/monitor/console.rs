//! A tty container's terminal: the container's init makes the pty inside the container (its devpts, bound
//! onto /dev/console) and sends the master
//! over the console socket the monitor listens on; the monitor then reads
//! the container's output from it, writes attach's stdin to it and sets
//! its size.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// How long the init has to send the master after the create.
const WAIT: Duration = Duration::from_secs(10);

/// Accepts the init's connection and takes the pty master it sends.
pub fn receive_master(listener: &UnixListener) -> Result<OwnedFd, crate::process::ChildError> {
    use crate::process::ChildError;
    let mut fds = [PollFd::new(
        std::os::fd::AsFd::as_fd(listener),
        PollFlags::POLLIN,
    )];
    let ms = u16::try_from(WAIT.as_millis()).unwrap_or(u16::MAX);
    match poll(&mut fds, PollTimeout::from(ms)) {
        Ok(n) if n > 0 => {}
        _ => {
            return Err(ChildError::detail(
                "wait for the terminal",
                "the container's init sent none",
            ));
        }
    }
    let (conn, _) = listener
        .accept()
        .map_err(ChildError::os("accept on the console socket"))?;
    crate::host::recv_fd(std::os::fd::AsFd::as_fd(&conn))
        .map_err(ChildError::os("receive the terminal"))?
        .ok_or_else(|| {
            ChildError::detail(
                "receive the terminal",
                "the console socket message carried none",
            )
        })
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
