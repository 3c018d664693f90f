//! `picolet monitor`: one small single-threaded process per container (like
//! conmon or containerd-shim). It makes the container ([`crate::process::init`]),
//! which forks, and must never run inside the multi-threaded shim, so it is
//! the parent of the container's init. It then:
//! - tells the shim the init's pid on stdout (one JSON line) and closes it,
//! - copies the container's stdout/stderr into the CRI log file (reopened on
//!   SIGUSR1, for ReopenContainerLog),
//! - waits for exactly that pid, and records the exit code, time and whether
//!   the cgroup saw an OOM kill, atomically, in the exit file.
//!
//! It keeps running when the shim dies, so containers survive shim restarts.
//!
//! It also serves CRI Attach for its container ([`attach`]): the
//! container's stdin (when its config asks for one) and a copy of its output.
//!
//! `picolet monitor exec` (ExecSync) is [`crate::process::nsexec`].

pub mod attach;
mod console;

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use cri_proto::log::{LineSplitter, Stream};
use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, pipe2};
use serde::{Deserialize, Serialize};

use crate::process::ChildError;
use crate::state::ExitRecord;

/// Arguments of `picolet monitor` (create mode).
#[derive(Debug, Clone)]
pub struct MonitorArgs {
    pub id: String,
    pub bundle: PathBuf,
    /// The folder of the containers' `notify.sock` folders.
    pub state_root: PathBuf,
    pub log: Option<PathBuf>,
    pub exit_file: PathBuf,
    /// Container cgroup path (for the OOM counter).
    pub cgroup: String,
    /// Where to serve attach (a unix socket path).
    pub attach: Option<PathBuf>,
    /// Give the container a stdin pipe (CRI `stdin`); closed when the first
    /// attach that brought stdin ends (`stdin_once`).
    pub stdin: bool,
    pub stdin_once: bool,
    /// The container has a terminal (its spec says `terminal`): take the
    /// pty master from the init on a console socket beside `attach`.
    pub tty: bool,
}

/// The handshake line the monitor prints once the container is created:
/// the init's pid, or why there is none.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Handshake {
    pub pid: Option<i32>,
    pub start_time: Option<u64>,
    #[serde(default, deserialize_with = "typed_or_text")]
    pub error: Option<ChildError>,
}

/// A handshake's error as this monitor writes it, or as text (a monitor
/// from before [`ChildError`], during an upgrade): then the text is the
/// detail.
fn typed_or_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<ChildError>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Said {
        Typed(ChildError),
        Text(String),
    }
    Ok(Option::<Said>::deserialize(d)?.map(|s| match s {
        Said::Typed(e) => e,
        Said::Text(t) => ChildError::detail("the monitor said", t),
    }))
}

fn say(h: &Handshake) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, h);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// Runs the monitor; returns the process exit code.
pub fn run(args: MonitorArgs) -> i32 {
    let (out_r, out_w) = match pipe2(OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => return fail(ChildError::errno("pipe")(e)),
    };
    let (err_r, err_w) = match pipe2(OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => return fail(ChildError::errno("pipe")(e)),
    };
    let (stdin_r, stdin_w) = if args.stdin {
        match pipe2(OFlag::O_CLOEXEC) {
            Ok((r, w)) => {
                let _ = fcntl(w.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
                (r, Some(File::from(w)))
            }
            Err(e) => return fail(ChildError::errno("pipe")(e)),
        }
    } else {
        let null = Path::new("/dev/null");
        match File::open(null) {
            Ok(f) => (OwnedFd::from(f), None),
            Err(e) => return fail(ChildError::io("open", null)(e)),
        }
    };
    let listener = match args.attach.as_deref().map(bind_attach).transpose() {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let console_path = args
        .attach
        .as_deref()
        .filter(|_| args.tty)
        .map(|a| a.with_file_name("console"));
    let console_listener = match console_path.as_deref().map(bind_attach).transpose() {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    // Compile seccomp here, in the parent, so a bad profile fails the create
    // with a clear message; the container's init only installs the result.
    let config = args.bundle.join("config.json");
    let spec = match oci_spec::runtime::Spec::load(&config) {
        Ok(s) => s,
        Err(e) => {
            return fail(ChildError::detail_at(
                "load",
                config.display(),
                e.to_string(),
            ));
        }
    };
    let filters = match crate::seccomp::seccomp_filters(&args.bundle, &spec) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    if let Err(e) = crate::process::init::supported(&spec) {
        return fail(e);
    }
    if args.tty && console_path.is_none() {
        return fail(ChildError::invalid(
            "process.terminal",
            "a terminal needs an attach socket",
        ));
    }
    let made = crate::process::init::create(
        &args.id,
        &spec,
        filters,
        &args.state_root,
        crate::process::init::Stdio {
            stdin: stdin_r,
            stdout: out_w,
            stderr: err_w,
        },
        console_path.as_deref(),
    )
    .map_err(|e| {
        // What the init said before it failed.
        e.and_said(&pending(err_r.as_fd()))
    });
    let made = match made {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    let pid = made.pid;
    let master = match console_listener.as_ref().map(console::receive_master) {
        None => None,
        Some(Ok(m)) => Some(m),
        Some(Err(e)) => {
            made.undo();
            return fail(e);
        }
    };
    drop(console_listener);
    if let Some(p) = &console_path {
        let _ = std::fs::remove_file(p);
    }
    // cgroup v2 has no devices controller and libcontainer (without libbpf)
    // leaves the rules out: attach them now, before anything runs.
    if let Some(dir) = crate::host::devices::v2_dir(&args.cgroup)
        && let Err(e) = crate::host::devices::restrict(&spec, &dir)
    {
        made.undo();
        return fail(e);
    }
    // From here the container outlives the shim (the shim's recovery finds
    // it by its record, or kills it by its cgroup if the record is not
    // complete): no more death signal.
    if let Err(e) = nix::sys::prctl::set_pdeathsig(None) {
        made.undo();
        return fail(ChildError::errno("clear the parent-death signal")(e));
    }
    // The CRI log exists once CreateContainer returns (critest reads it
    // as soon as StartContainer does: opened in the loop, it raced).
    let log = open_log(args.log.as_deref());
    say(&Handshake {
        pid: Some(pid.as_raw()),
        start_time: crate::host::proc_start_time(pid.as_raw()),
        error: None,
    });
    // The shim reads until EOF: give it one.
    if let Ok(null) = OpenOptions::new().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2(null.as_raw_fd(), 1);
    }
    // A terminal is the container's output, its stdin and what resizes it.
    let (out_r, err_r, stdin_w, console) = match master {
        Some(m) => {
            let _ = fcntl(m.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
            let input = if args.stdin {
                m.try_clone().ok().map(File::from)
            } else {
                None
            };
            let resize = m.try_clone().ok();
            (m, None, input, resize)
        }
        None => (out_r, Some(err_r), stdin_w, None),
    };
    let mut attach = attach::Attach::new(listener, stdin_w, args.stdin_once, console);
    // The deep part is over; the loop below runs for the container's life.
    crate::host::release_stack_below();
    let exit = pump(&args, pid, log, out_r, err_r, &mut attach);
    let code = match images::fsutil::write_atomic(
        &args.exit_file,
        &serde_json::to_vec(&exit).unwrap_or_default(),
    ) {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!(error = %e, "cannot record exit");
            1
        }
    };
    // After the record: an attach that ends finds the container exited.
    drop(attach);
    if let Some(p) = &args.attach {
        let _ = std::fs::remove_file(p);
    }
    code
}

/// Up to 4 KiB of what is waiting in a pipe, without blocking.
fn pending(fd: std::os::fd::BorrowedFd<'_>) -> String {
    let _ = fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
    let mut said = Vec::new();
    if let Ok(f) = fd.try_clone_to_owned() {
        let _ = File::from(f).take(4096).read_to_end(&mut said);
    }
    String::from_utf8_lossy(&said).trim().to_string()
}

/// Binds the attach socket at `path` (a stale one from a dead monitor of
/// the same container is replaced), through `host::via_dir_fd`.
fn bind_attach(path: &Path) -> Result<std::os::unix::net::UnixListener, ChildError> {
    let _ = std::fs::remove_file(path);
    let (_dir, via) =
        crate::host::via_dir_fd(path).map_err(ChildError::io("open the folder of", path))?;
    // Only root may connect (it writes to the container's stdin and reads
    // its output): the socket is made 0600, never briefly wider. The
    // monitor is single-threaded, so the umask change is ours alone.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = std::os::unix::net::UnixListener::bind(&via);
    nix::sys::stat::umask(old);
    bound.map_err(ChildError::io("bind the attach socket", path))
}

fn fail(error: ChildError) -> i32 {
    say(&Handshake {
        pid: None,
        start_time: None,
        error: Some(error),
    });
    1
}

/// Copies output into the log until init exits; returns its exit record.
fn pump(
    args: &MonitorArgs,
    pid: Pid,
    mut log: Option<File>,
    out_r: OwnedFd,
    err_r: Option<OwnedFd>,
    attach: &mut attach::Attach,
) -> ExitRecord {
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGUSR1);
    // SIGCHLD wakes the loop the moment init exits (exit time and StopContainer
    // latency would otherwise wait for the poll timeout).
    mask.add(Signal::SIGCHLD);
    let sigfd = mask.thread_block().ok().and_then(|()| {
        SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC).ok()
    });
    for fd in std::iter::once(&out_r).chain(err_r.as_ref()) {
        let _ = fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
    }
    let mut pipes = [
        Some((File::from(out_r), LineSplitter::new(Stream::Stdout))),
        err_r.map(|e| (File::from(e), LineSplitter::new(Stream::Stderr))),
    ];
    // SIGCHLD (in the signalfd) and output wake the loop; the timeout is a
    // backstop against a lost wake-up, once a minute (it was every 10 s: at
    // 30 idle pods the monitors' wake-ups were a tenth of picolet's idle
    // CPU), or every 10 s without a signalfd. The first round does not wait:
    // init may have exited before SIGCHLD was blocked.
    let backstop = PollTimeout::from(if sigfd.is_some() { 60_000u16 } else { 10_000 });
    let mut wait = PollTimeout::ZERO;
    let status = loop {
        let mut fds: Vec<PollFd<'_>> = Vec::new();
        let mut which = Vec::new();
        for (i, p) in pipes.iter().enumerate() {
            if let Some((f, _)) = p {
                fds.push(PollFd::new(f.as_fd(), PollFlags::POLLIN));
                which.push(Woke::Pipe(i));
            }
        }
        if let Some(s) = &sigfd {
            fds.push(PollFd::new(s.as_fd(), PollFlags::POLLIN));
            which.push(Woke::Signal);
        }
        for (fd, flags, tag) in attach.poll_fds() {
            fds.push(PollFd::new(fd, flags));
            which.push(Woke::Attach(tag));
        }
        let _ = poll(&mut fds, wait);
        wait = backstop;
        let ready: Vec<(Woke, PollFlags)> = fds
            .iter()
            .zip(&which)
            .filter_map(|(fd, w)| fd.revents().filter(|r| !r.is_empty()).map(|r| (*w, r)))
            .collect();
        drop(fds);
        for (w, revents) in ready {
            match w {
                Woke::Pipe(i) => {
                    if !drain(&mut pipes[i], &mut log, attach) {
                        pipes[i] = None;
                    }
                }
                Woke::Attach(tag) => attach.ready(tag, revents),
                Woke::Signal => {
                    let mut reopen = false;
                    if let Some(s) = &sigfd {
                        while let Ok(Some(info)) = s.read_signal() {
                            reopen |= info.ssi_signo == Signal::SIGUSR1 as u32;
                        }
                    }
                    if reopen {
                        log = open_log(args.log.as_deref());
                    }
                }
            }
        }
        attach.sweep();
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => continue,
            Ok(s) => break Some(s),
            Err(Errno::EINTR) => continue,
            Err(_) => break None,
        }
    };
    // Init is gone: take what is left in the pipes without waiting for EOF
    // (a leftover grandchild may hold them open).
    for p in pipes.iter_mut() {
        drain(p, &mut log, attach);
        if let Some((_, split)) = p {
            write_log(&mut log, &split.flush(SystemTime::now()));
        }
    }
    let (exit_code, reason) = match status {
        Some(WaitStatus::Exited(_, code)) => (code, None),
        Some(WaitStatus::Signaled(_, sig, _)) => (128 + sig as i32, None),
        other => (255, Some(format!("unexpected wait status {other:?}"))),
    };
    ExitRecord {
        exit_code,
        finished_at: crate::state::now_nanos(),
        oom_killed: oom_kills(&args.cgroup) > 0,
        reason,
    }
}

/// What woke the poll loop.
#[derive(Debug, Clone, Copy)]
enum Woke {
    Pipe(usize),
    Signal,
    Attach(attach::Tag),
}

/// Reads what is available into the log and to attached clients; false at
/// EOF.
fn drain(
    pipe: &mut Option<(File, LineSplitter)>,
    log: &mut Option<File>,
    attach: &mut attach::Attach,
) -> bool {
    let Some((f, split)) = pipe else { return false };
    let stream = split.stream();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match f.read(&mut buf) {
            Ok(0) => {
                let rest = split.flush(SystemTime::now());
                write_log(log, &rest);
                return false;
            }
            Ok(n) => {
                let records = split.push(&buf[..n], SystemTime::now());
                write_log(log, &records);
                attach.broadcast(stream, &buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
}

fn write_log(log: &mut Option<File>, data: &[u8]) {
    if let Some(f) = log
        && !data.is_empty()
        && let Err(e) = f.write_all(data)
    {
        tracing::warn!(error = %e, "cannot write container log");
    }
}

fn open_log(path: Option<&Path>) -> Option<File> {
    let path = path?;
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(path)
        .inspect_err(
            |e| tracing::warn!(path = %path.display(), error = %e, "cannot open container log"),
        )
        .ok()
}

/// OOM kills the container's memory cgroup has seen (v1 `memory.oom_control`
/// or v2 `memory.events`).
pub fn oom_kills(cgroup: &str) -> u64 {
    let rel = cgroup.trim_start_matches('/');
    let candidates = [
        (
            Path::new("/sys/fs/cgroup/memory")
                .join(rel)
                .join("memory.oom_control"),
            "oom_kill",
        ),
        (
            Path::new("/sys/fs/cgroup").join(rel).join("memory.events"),
            "oom_kill",
        ),
    ];
    for (path, key) in candidates {
        if let Ok(text) = std::fs::read_to_string(&path)
            && let Some(n) = crate::host::cgroupfs::flat_key(&text, key)
        {
            return n;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handshake_carries_a_typed_error_or_an_old_monitors_text() {
        let error = ChildError::errno_at("mount", "/proc")(Errno::EPERM).within("mount /proc");
        let line = serde_json::to_string(&Handshake {
            pid: None,
            start_time: None,
            error: Some(error.clone()),
        })
        .expect("encode");
        let back: Handshake = serde_json::from_str(&line).expect("decode");
        assert_eq!(back.error, Some(error));
        let old: Handshake =
            serde_json::from_str(r#"{"pid":null,"start_time":null,"error":"pipe: EMFILE"}"#)
                .expect("decode an old line");
        let old = old.error.expect("an error");
        assert_eq!(
            (old.errno, old.detail.as_deref()),
            (None, Some("pipe: EMFILE"))
        );
        let ok: Handshake = serde_json::from_str(r#"{"pid":7,"start_time":1}"#).expect("decode");
        assert_eq!((ok.pid, ok.error), (Some(7), None));
    }
}
