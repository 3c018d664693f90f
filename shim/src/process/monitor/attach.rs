//! The container's side of CRI Attach, in its monitor (as conmon's attach
//! socket): a unix socket in the container's run dir. A client (the shim's
//! streaming server) connects, sends one byte (1: it brings stdin, 0: it
//! only reads), then whatever it writes goes to the container's stdin; the
//! container's output comes back framed as `[1 stdout | 2 stderr][u32 big
//! endian length][bytes]`. The socket closes when the container exits.
//! A tty container's terminal is resized by a client whose byte is 2: it
//! then sends sizes, 4 bytes each (width, height; u16 big endian).
//!
//! The monitor is single-threaded: nothing here blocks. A client that does
//! not keep up with the output is dropped (the container and its log never
//! wait for an attach), and stdin is read from clients only while less
//! than [`STDIN_BUFFER`] waits for the container to take it.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::{UnixListener, UnixStream};

use cri_proto::log::Stream;
use nix::poll::PollFlags;

/// Stdin bytes waiting for the container, at most.
const STDIN_BUFFER: usize = 64 << 10;
/// Attached clients, at most.
const MAX_CLIENTS: usize = 16;

/// Output frame tags.
pub const FRAME_STDOUT: u8 = 1;
pub const FRAME_STDERR: u8 = 2;

struct Client {
    sock: UnixStream,
    /// None until the hello byte; then whether it brings stdin.
    stdin: Option<bool>,
    /// A resize client (hello 2): what it sent of a size so far.
    resize: Option<Vec<u8>>,
    /// Hung up or failed: removed by [`Attach::sweep`].
    closed: bool,
}

/// What the poll loop watches for attach, and what woke it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    Listener,
    Client(usize),
    StdinWritable,
}

/// The attach socket, its clients and the container's stdin.
pub struct Attach {
    listener: Option<UnixListener>,
    clients: Vec<Client>,
    /// The write end of the container's stdin pipe (non-blocking); None when
    /// the container has no stdin or it was closed (stdin_once).
    stdin: Option<File>,
    pending: Vec<u8>,
    stdin_once: bool,
    /// A tty container's pty master (for its size).
    console: Option<std::os::fd::OwnedFd>,
}

impl Attach {
    pub fn new(
        listener: Option<UnixListener>,
        stdin: Option<File>,
        stdin_once: bool,
        console: Option<std::os::fd::OwnedFd>,
    ) -> Self {
        if let Some(l) = &listener {
            let _ = l.set_nonblocking(true);
        }
        Self {
            listener,
            clients: Vec::new(),
            stdin,
            pending: Vec::new(),
            stdin_once,
            console,
        }
    }

    /// The descriptors to poll and for what.
    pub fn poll_fds(&self) -> Vec<(BorrowedFd<'_>, PollFlags, Tag)> {
        let mut out = Vec::new();
        if let Some(l) = &self.listener {
            out.push((l.as_fd(), PollFlags::POLLIN, Tag::Listener));
        }
        let room = self.pending.len() < STDIN_BUFFER;
        for (i, c) in self.clients.iter().enumerate() {
            // Only the hello, stdin (while there is room) and hang-ups are
            // read; a client without stdin is polled for hang-ups only.
            let wants = c.stdin.is_none() || c.resize.is_some() || (c.stdin == Some(true) && room);
            let flags = if wants {
                PollFlags::POLLIN
            } else {
                PollFlags::empty()
            };
            out.push((c.sock.as_fd(), flags, Tag::Client(i)));
        }
        if let (Some(s), false) = (&self.stdin, self.pending.is_empty()) {
            out.push((s.as_fd(), PollFlags::POLLOUT, Tag::StdinWritable));
        }
        out
    }

    /// Handles what woke the loop (`revents` of the tag's descriptor).
    pub fn ready(&mut self, tag: Tag, revents: PollFlags) {
        match tag {
            Tag::Listener => self.accept(),
            Tag::Client(i) => self.read_client(i, revents),
            Tag::StdinWritable => self.flush_stdin(),
        }
    }

    /// Drops the clients that hung up (after a poll round: the tags of one
    /// round index the list as it was). The end of a client that brought
    /// stdin is the container's EOF under stdin_once.
    pub fn sweep(&mut self) {
        let mut stdin_ended = false;
        self.clients.retain(|c| {
            stdin_ended |= c.closed && c.stdin == Some(true);
            !c.closed
        });
        if stdin_ended {
            self.end_stdin();
        }
    }

    fn accept(&mut self) {
        let Some(l) = &self.listener else { return };
        while let Ok((sock, _)) = l.accept() {
            if self.clients.len() >= MAX_CLIENTS || sock.set_nonblocking(true).is_err() {
                continue; // dropped: closed
            }
            self.clients.push(Client {
                sock,
                stdin: None,
                resize: None,
                closed: false,
            });
        }
    }

    fn read_client(&mut self, i: usize, revents: PollFlags) {
        let room = STDIN_BUFFER.saturating_sub(self.pending.len());
        let Some(c) = self.clients.get_mut(i) else {
            return;
        };
        let mut buf = [0u8; 16 << 10];
        let mut gone = revents.intersects(PollFlags::POLLERR | PollFlags::POLLNVAL);
        let want = match (&c.stdin, &c.resize) {
            (None, _) => 1,
            (_, Some(_)) => 64,
            _ => room.min(buf.len()),
        };
        let mut got = 0..0;
        let mut stdin_ended = false;
        if !gone && want > 0 && (c.stdin != Some(false) || c.resize.is_some()) {
            match c.sock.read(&mut buf[..want]) {
                // A half-close ends the client's stdin, not its output.
                Ok(0) if c.stdin == Some(true) => stdin_ended = true,
                Ok(0) => gone = true,
                Ok(n) if c.stdin.is_none() => {
                    c.stdin = Some(buf[0] == 1);
                    if buf[0] == 2 {
                        c.resize = Some(Vec::new());
                    }
                    got = 1..n;
                }
                Ok(n) => got = 0..n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                Err(_) => gone = true,
            }
        } else if revents.contains(PollFlags::POLLHUP) {
            gone = true;
        }
        c.closed |= gone;
        if let Some(partial) = c.resize.as_mut() {
            partial.extend_from_slice(&buf[got.clone()]);
            let mut last = None;
            while partial.len() >= 4 {
                let r: Vec<u8> = partial.drain(..4).collect();
                last = Some((
                    u16::from_be_bytes([r[0], r[1]]),
                    u16::from_be_bytes([r[2], r[3]]),
                ));
            }
            if let (Some((w, h)), Some(master)) = (last, &self.console) {
                super::console::set_size(master, w, h);
            }
            return;
        }
        let brings_stdin = c.stdin == Some(true);
        if brings_stdin && self.stdin.is_some() && !got.is_empty() {
            self.pending.extend_from_slice(&buf[got]);
            self.flush_stdin();
        }
        if stdin_ended {
            if let Some(c) = self.clients.get_mut(i) {
                c.stdin = Some(false);
            }
            self.end_stdin();
        }
    }

    /// A client's stdin ended: under stdin_once, so does the container's
    /// (after what was sent is written).
    fn end_stdin(&mut self) {
        if self.stdin_once {
            self.flush_stdin();
            self.pending.clear();
            self.stdin = None;
        }
    }

    fn flush_stdin(&mut self) {
        let Some(s) = &mut self.stdin else {
            self.pending.clear();
            return;
        };
        while !self.pending.is_empty() {
            match s.write(&self.pending) {
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(_) => {
                    // The container closed its stdin.
                    self.pending.clear();
                    self.stdin = None;
                    return;
                }
            }
        }
    }

    /// Sends container output to every attached client; drops any that
    /// cannot take a whole frame now.
    pub fn broadcast(&mut self, stream: Stream, data: &[u8]) {
        if self.clients.is_empty() || data.is_empty() {
            return;
        }
        let tag = match stream {
            Stream::Stdout => FRAME_STDOUT,
            Stream::Stderr => FRAME_STDERR,
        };
        let len = u32::try_from(data.len()).expect("reads are at most 16 KiB");
        let mut frame = Vec::with_capacity(5 + data.len());
        frame.push(tag);
        frame.extend_from_slice(&len.to_be_bytes());
        frame.extend_from_slice(data);
        for c in self
            .clients
            .iter_mut()
            .filter(|c| c.stdin.is_some() && !c.closed)
        {
            if !matches!(c.sock.write(&frame), Ok(n) if n == frame.len()) {
                c.closed = true;
            }
        }
        self.sweep();
    }
}
