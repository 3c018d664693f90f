//! `picolet monitor spawner`: one small single-threaded process per shim
//! that forks the container monitors, so a CreateContainer does not pay
//! for an exec of the whole picolet binary (dynamic loading, relocations,
//! page faults, runtime and argument setup: 2.6 ms of a 17.6 ms create
//! with the glibc build, BENCHMARKS.md). The
//! multi-threaded shim never forks; this process has one thread and
//! nothing but its socket open, so a fork of it is cheap and safe.
//!
//! The shim talks to it over a `SOCK_SEQPACKET` socket pair (its stdin):
//! one request, one reply, in order. A request is the child's command
//! line as JSON and its stdin, stdout and stderr as SCM_RIGHTS; the reply
//! is its pid and a pidfd of it (the shim's exit watch), or an error. The
//! child then runs what `picolet <argv>` would run, as if exec'd:
//! - its command line is rewritten in place to `argv`, so `ps`, the faults
//!   harness and a restarted shim's search for mid-create processes
//!   (`creators_of`) see a `picolet monitor create --id …` as before, and
//!   so do libcontainer's forks of it;
//! - its own process group, no blocked signals, nothing but 0, 1, 2 open;
//! - it dies with the spawner (SIGKILL) until it clears that itself, as the
//!   monitor does at its handshake; the spawner ends when the shim's end of
//!   the socket closes, so a shim that dies mid-create takes the monitor
//!   with it, as before.
//!
//! A fourth descriptor, when sent, is the child's status pipe: it is the
//! child's fd 3 (close-on-exec) and gets the exit code, 4 bytes little
//! endian, when `run` returns, for a shim that is not the child's parent
//! and so cannot wait for it (ExecSync's helper).
//!
//! The spawner reaps its children. A child whose command line does not fit
//! the room the spawner was started with shows the arguments that fit.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, UnixAddr, recvmsg, sendmsg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};
use serde::{Deserialize, Serialize};

/// Largest request (a command line) the spawner reads.
pub const MAX_REQUEST: usize = 64 << 10;

/// Bytes of command line the spawner starts with (its `--room` value), so
/// each child can rewrite its own in place.
pub const TITLE_ROOM: usize = 4096;

/// What the shim asks for: a child running `picolet <argv[1..]>`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Request {
    pub argv: Vec<String>,
}

/// The spawner's answer; on success a pidfd of the child comes with it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Reply {
    pub pid: Option<i32>,
    pub error: Option<String>,
}

/// Sends `msg` as one datagram with `fds` attached.
pub fn send(sock: BorrowedFd<'_>, msg: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let iov = [IoSlice::new(msg)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
    loop {
        match sendmsg::<UnixAddr>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Err(Errno::EINTR) => continue,
            r => return r.map(|_| ()).map_err(io::Error::from),
        }
    }
}

/// Receives one datagram of at most `max` bytes and the descriptors that
/// came with it (at most 4; close-on-exec). An empty message is the peer's
/// end.
#[allow(unsafe_code)]
pub fn recv(sock: BorrowedFd<'_>, max: usize) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut buf = vec![0u8; max];
    let mut space = nix::cmsg_space!([RawFd; 4]);
    let (len, fds) = loop {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg = match recvmsg::<UnixAddr>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(Errno::EINTR) => continue,
            r => r.map_err(io::Error::from)?,
        };
        let mut fds = Vec::new();
        for c in msg.cmsgs().map_err(io::Error::from)? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: SCM_RIGHTS just installed each descriptor in this
                // process and nothing else refers to it: we own it.
                fds.extend(
                    raw.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
        if msg
            .flags
            .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC)
        {
            return Err(io::Error::other("message too long"));
        }
        break (msg.bytes, fds);
    };
    buf.truncate(len);
    Ok((buf, fds))
}

/// Runs the spawner on its stdin socket until the shim closes its end;
/// `run` is what a child runs with its command line (picolet's `main`
/// without the exec); returns the process exit code.
#[allow(unsafe_code)]
pub fn serve(run: fn(Vec<String>) -> i32) -> i32 {
    // SAFETY: fd 0 is this process's stdin, open for its whole life; the
    // borrow does not outlive `serve`.
    let sock = unsafe { BorrowedFd::borrow_raw(0) };
    // Its own title without the room: "<binary> monitor spawner".
    let own: Vec<String> = std::env::args_os()
        .take(3)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    set_cmdline(&own);
    // Learned once here, inherited by every child: a monitor writes its
    // container's cgroup without reading the mount table.
    let _ = crate::host::cgroupfs::hierarchy();
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    if let Err(e) = mask.thread_block() {
        eprintln_safe(&format!("picolet monitor spawner: block SIGCHLD: {e}"));
        return 1;
    }
    let sfd = match SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK) {
        Ok(s) => s,
        Err(e) => {
            eprintln_safe(&format!("picolet monitor spawner: signalfd: {e}"));
            return 1;
        }
    };
    loop {
        let mut fds = [
            PollFd::new(sock, PollFlags::POLLIN),
            PollFd::new(sfd.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => {
                eprintln_safe(&format!("picolet monitor spawner: poll: {e}"));
                return 1;
            }
        }
        let (ready, hup) = match fds[0].revents() {
            Some(r) => (
                r.contains(PollFlags::POLLIN),
                r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR),
            ),
            None => (false, false),
        };
        if fds[1].revents().is_some_and(|r| !r.is_empty()) {
            while let Ok(Some(_)) = sfd.read_signal() {}
        }
        reap();
        if ready {
            match recv(sock, MAX_REQUEST) {
                Ok((msg, _)) if msg.is_empty() => return 0,
                Ok((msg, fds)) => answer(sock, &msg, fds, run),
                Err(e) => {
                    let _ = reply(sock, None, Some(format!("read the request: {e}")), None);
                }
            }
        } else if hup {
            return 0;
        }
    }
}

/// Reaps every child that has exited.
fn reap() {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

fn reply(
    sock: BorrowedFd<'_>,
    pid: Option<i32>,
    error: Option<String>,
    pidfd: Option<&OwnedFd>,
) -> io::Result<()> {
    let msg = serde_json::to_vec(&Reply { pid, error }).map_err(io::Error::other)?;
    let fds: Vec<RawFd> = pidfd.iter().map(|f| f.as_raw_fd()).collect();
    send(sock, &msg, &fds)
}

/// Forks the child a request asks for and replies.
#[allow(unsafe_code)]
fn answer(sock: BorrowedFd<'_>, msg: &[u8], fds: Vec<OwnedFd>, run: fn(Vec<String>) -> i32) {
    let req: Request = match serde_json::from_slice(msg) {
        Ok(r) => r,
        Err(e) => {
            let _ = reply(sock, None, Some(format!("bad request: {e}")), None);
            return;
        }
    };
    let mut fds = fds.into_iter();
    let (Some(a), Some(b), Some(c), status, None) =
        (fds.next(), fds.next(), fds.next(), fds.next(), fds.next())
    else {
        let _ = reply(
            sock,
            None,
            Some("a request brings stdin, stdout, stderr and maybe a status pipe".into()),
            None,
        );
        return;
    };
    let stdio = [a, b, c];
    if req.argv.is_empty() {
        let _ = reply(sock, None, Some("empty command line".into()), None);
        return;
    }
    let me = nix::unistd::getpid();
    // SAFETY: this process has one thread (the spawner never starts
    // another), so the child may run any code after the fork.
    match unsafe { nix::unistd::fork() } {
        Ok(ForkResult::Child) => child(me, req.argv, stdio, status, run),
        Ok(ForkResult::Parent { child }) => {
            drop(stdio);
            drop(status);
            // The child cannot be reaped before this: it pins the right one.
            match crate::host::pidfd::open(child.as_raw()) {
                Ok(pidfd) => {
                    let _ = reply(sock, Some(child.as_raw()), None, Some(&pidfd));
                }
                Err(e) => {
                    let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
                    let _ = reply(sock, None, Some(format!("pidfd_open: {e}")), None);
                }
            }
        }
        Err(e) => {
            let _ = reply(sock, None, Some(format!("fork: {e}")), None);
        }
    }
}

/// The forked child: becomes `picolet <argv[1..]>` and never returns.
#[allow(unsafe_code)]
fn child(
    spawner: Pid,
    argv: Vec<String>,
    stdio: [OwnedFd; 3],
    status: Option<OwnedFd>,
    run: fn(Vec<String>) -> i32,
) -> ! {
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        eprintln_safe(&format!("picolet monitor spawner: child: {what}: {e}"));
        // SAFETY: _exit ends the process without running anything else.
        unsafe { libc::_exit(127) }
    };
    if let Err(e) = SigSet::empty().thread_set_mask() {
        fail("signal mask", &e);
    }
    if let Err(e) = nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0)) {
        fail("setpgid", &e);
    }
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
        fail("set the parent-death signal", &e);
    }
    if nix::unistd::getppid() != spawner {
        fail("spawner", &"gone before the child started");
    }
    for (target, fd) in (0..).zip(stdio.iter()) {
        // The received descriptors are all above 2 (0–2 were open): no
        // dup2 here overwrites one still to come.
        if let Err(e) = nix::unistd::dup2(fd.as_raw_fd(), target) {
            fail("dup2", &e);
        }
    }
    drop(stdio);
    // After the three above (fd 3 may have been one of them).
    let keep = match status {
        Some(fd) => {
            if let Err(e) = nix::unistd::dup3(fd.as_raw_fd(), STATUS_FD, OFlag::O_CLOEXEC) {
                fail("dup3", &e);
            }
            STATUS_FD + 1
        }
        None => STATUS_FD,
    };
    // Nothing of the spawner's stays open: its socket end, its signalfd.
    // SAFETY: close_range(keep, ~0, 0) closes descriptors of this
    // single-threaded process that no owned object here refers to any more
    // (the spawner's are not used after the fork).
    if unsafe { libc::syscall(libc::SYS_close_range, keep.cast_unsigned(), u32::MAX, 0u32) } != 0 {
        close_from(keep);
    }
    set_cmdline(&argv);
    let code = run(argv);
    if keep > STATUS_FD {
        // SAFETY: fd 3 is the status pipe dup3 made above, open until exit.
        let fd = unsafe { BorrowedFd::borrow_raw(STATUS_FD) };
        let _ = nix::unistd::write(fd, &code.to_le_bytes());
    }
    std::process::exit(code)
}

/// The child's status pipe.
const STATUS_FD: RawFd = 3;

/// close_range(2) for kernels before 5.9: every descriptor from `first`.
fn close_from(first: RawFd) {
    let fds: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd >= first)
        .collect();
    for fd in fds {
        let _ = nix::unistd::close(fd);
    }
}

/// Writes `args` (NUL-separated) over this process's command line, the
/// bytes `/proc/self/cmdline` shows, padding the rest of it with NULs. The
/// arguments that do not fit are left out, from the first that does not:
/// a monitor's `--id` comes early, so what `creators_of` looks for stays.
/// Only for a single-threaded process, as the spawner and its children
/// are: nothing may read `std::env::args` while it changes.
#[allow(unsafe_code)]
fn set_cmdline(args: &[String]) {
    let Some((start, end)) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .as_deref()
        .and_then(cmdline_range)
    else {
        return;
    };
    let bytes = title(args, end - start);
    if bytes.iter().all(|b| *b == 0) {
        return;
    }
    // SAFETY: [start, end) is this process's own argument area on its
    // initial stack (the kernel's arg_start and arg_end): mapped, writable,
    // and referred to by nothing but the argv pointers that only
    // `std::env::args` reads, which no code after this calls; `bytes` is
    // exactly that long.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), start as *mut u8, bytes.len());
    }
}

/// `args` NUL-separated in `room` bytes, as many whole ones as fit (none
/// with a NUL of its own), padded with NULs.
fn title(args: &[String], room: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(room);
    for a in args {
        if a.as_bytes().contains(&0) || bytes.len() + a.len() + 1 > room {
            break;
        }
        bytes.extend_from_slice(a.as_bytes());
        bytes.push(0);
    }
    bytes.resize(room, 0);
    bytes
}

/// arg_start and arg_end (fields 48 and 49) of a /proc/<pid>/stat text.
pub(crate) fn cmdline_range(stat: &str) -> Option<(usize, usize)> {
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ').skip(45);
    let start: usize = fields.next()?.parse().ok()?;
    let end: usize = fields.next()?.parse().ok()?;
    (start > 0 && start < end).then_some((start, end))
}

/// eprintln! without its panic on a closed stderr.
fn eprintln_safe(msg: &str) {
    use std::io::Write;
    let _ = writeln!(io::stderr(), "{msg}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_argument_area_is_read_from_fields_48_and_49() {
        // A comm with spaces and a ')' of its own: fields start after the last ')'.
        let mut stat = String::from("42 (a) b) S");
        for n in 4..=47 {
            stat.push_str(&format!(" {n}"));
        }
        stat.push_str(" 140735000 140735100 140735100 140735900 0\n");
        assert_eq!(cmdline_range(&stat), Some((140735000, 140735100)));
        assert_eq!(cmdline_range("42 (a) S 1 2"), None);
        assert_eq!(
            cmdline_range(&stat.replace("140735000 140735100", "5 5")),
            None,
            "an empty area"
        );
    }

    #[test]
    fn a_title_keeps_the_whole_arguments_that_fit() {
        let args: Vec<String> = [
            "picolet", "monitor", "create", "--id", "c1", "--bundle", "/b",
        ]
        .map(String::from)
        .into();
        assert_eq!(title(&args[..3], 24), b"picolet\0monitor\0create\0\0");
        // "--bundle" would pass the room: it and what follows are left out.
        assert_eq!(
            title(&args, 34),
            b"picolet\0monitor\0create\0--id\0c1\0\0\0\0"
        );
        assert_eq!(title(&["a\0b".to_string()], 4), [0; 4]);
    }

    #[test]
    fn requests_and_replies_round_trip_with_their_descriptors() {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .expect("socketpair");
        let null = std::fs::File::open("/dev/null").expect("null");
        let req = serde_json::to_vec(&Request {
            argv: vec!["picolet".into(), "monitor".into(), "create".into()],
        })
        .expect("json");
        let raw = null.as_raw_fd();
        send(a.as_fd(), &req, &[raw, raw, raw]).expect("send");
        let (msg, fds) = recv(b.as_fd(), MAX_REQUEST).expect("recv");
        let got: Request = serde_json::from_slice(&msg).expect("parse");
        assert_eq!(got.argv, ["picolet", "monitor", "create"]);
        assert_eq!(fds.len(), 3);
        // One over the size the reader takes is refused, not cut.
        send(a.as_fd(), &[b'x'; 65], &[]).expect("send");
        assert!(recv(b.as_fd(), 64).is_err());
        // The peer's end reads as an empty message.
        drop(a);
        let (msg, fds) = recv(b.as_fd(), MAX_REQUEST).expect("recv");
        assert!(msg.is_empty() && fds.is_empty());
    }
}
