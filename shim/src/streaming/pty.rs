//! The master of a `tty: true` exec's terminal, read and written without
//! blocking a thread. The exec child opens the pty in the container's own
//! devpts (as runc does; `nsexec`) and sends the master back over a socket
//! pair; the slave is the command's stdio and controlling terminal.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use cri_proto::streaming::TermSize;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use tokio::io::unix::AsyncFd;

/// The master side, non-blocking.
pub struct Master {
    fd: AsyncFd<OwnedFd>,
}

impl std::fmt::Debug for Master {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pty::Master({})", self.fd.get_ref().as_raw_fd())
    }
}

/// Makes `fd` (a pty master) non-blocking and registers it.
pub fn master(fd: OwnedFd) -> io::Result<Master> {
    let raw = fd.as_raw_fd();
    let flags = fcntl(raw, FcntlArg::F_GETFL).map_err(io::Error::from)?;
    fcntl(
        raw,
        FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
    )
    .map_err(io::Error::from)?;
    // SAFETY: an OwnedFd's descriptor is open and its own until it drops,
    // which happens only with the AsyncFd.
    let fd = unsafe { AsyncFd::register(fd) }.map_err(io::Error::from)?;
    Ok(Master { fd })
}

impl Master {
    /// Reads what the command wrote; 0 once every slave is closed (the
    /// kernel says EIO then).
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|fd| {
                nix::unistd::read(fd.get_ref().as_raw_fd(), buf).map_err(io::Error::from)
            }) {
                Ok(Ok(n)) => return Ok(n),
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    /// Writes all of `data` (the command's terminal input).
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut guard = self.fd.writable().await?;
            match guard.try_io(|fd| nix::unistd::write(fd.get_ref(), data).map_err(io::Error::from))
            {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    /// Sets the terminal's size (the command gets SIGWINCH).
    pub fn resize(&self, size: TermSize) -> io::Result<()> {
        let ws = libc::winsize {
            ws_row: size.height,
            ws_col: size.width,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads one `winsize` through the pointer, which
        // points at a live local; the fd is our open master.
        let r = unsafe { libc::ioctl(self.fd.get_ref().as_raw_fd(), libc::TIOCSWINSZ, &ws) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}
