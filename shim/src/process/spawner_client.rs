//! The shim's end of `picolet monitor spawner` ([`crate::process::spawner`]): one
//! thread of its own owns the spawner process and its socket, starts it
//! on the first request and again after it died, and passes requests to
//! it one at a time. The thread lives as long as the shim, so the
//! spawner's parent-death signal (tied to the thread that forked it)
//! fires only when the shim dies.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::oneshot;

use crate::process::spawner::{self, Reply, Request};

/// How long a reply may take (a fork, a pidfd): past it the spawner is
/// taken for stuck, killed and started again at the next request.
const REPLY_TIMEOUT_MS: u16 = 10_000;

/// A child the spawner forked: its pid and a pidfd that pins it.
pub(crate) struct Spawned {
    pub pid: i32,
    pidfd: OwnedFd,
}

impl Spawned {
    /// Kills the child (SIGKILL, through its pidfd: never a reused pid).
    #[allow(unsafe_code)]
    pub(crate) fn kill(&self) {
        // SAFETY: pidfd_send_signal(pidfd, SIGKILL, NULL, 0) reads nothing
        // of ours; the pidfd is open for the call.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0u32,
            );
        }
    }

    /// Returns when the child has exited (the spawner reaps it).
    #[allow(unsafe_code)]
    pub(crate) async fn exited(self) {
        // SAFETY: the AsyncFd takes ownership of the OwnedFd, which stays
        // open and is the same descriptor until the AsyncFd is dropped.
        if let Ok(fd) = unsafe { AsyncFd::register_with_interest(self.pidfd, Interest::READABLE) } {
            let _ = fd.readable().await;
        }
    }
}

struct Job {
    /// A [`Request`], encoded.
    request: Vec<u8>,
    stdio: [OwnedFd; 3],
    status: Option<OwnedFd>,
    reply: oneshot::Sender<io::Result<Spawned>>,
}

/// Handle to the spawner thread.
#[derive(Debug)]
pub(crate) struct Spawner {
    jobs: mpsc::Sender<Job>,
}

impl Spawner {
    /// Starts the thread; the spawner process itself starts at the first
    /// request, from `bin`.
    pub(crate) fn new(bin: PathBuf) -> io::Result<Self> {
        let (jobs, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("monitor-spawner".into())
            .spawn(move || serve_jobs(&bin, &rx))?;
        Ok(Self { jobs })
    }

    /// A child running `picolet <argv[1..]>` with `stdio` as its 0, 1, 2;
    /// its exit code is written to `status` (crate::process::spawner). None (logged)
    /// when an argument is not UTF-8 or the spawner failed, and the caller
    /// execs the binary instead.
    pub(crate) async fn try_spawn(
        &self,
        argv: &[OsString],
        stdio: [OwnedFd; 3],
        status: Option<OwnedFd>,
    ) -> Option<Spawned> {
        let args = argv
            .iter()
            .map(|a| a.to_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()?;
        match self.spawn(&Request { argv: args }, stdio, status).await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, command = ?argv.get(1..3), "the monitor spawner failed; exec'ing the binary");
                None
            }
        }
    }

    async fn spawn(
        &self,
        req: &Request,
        stdio: [OwnedFd; 3],
        status: Option<OwnedFd>,
    ) -> io::Result<Spawned> {
        let request = serde_json::to_vec(req).map_err(io::Error::other)?;
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job {
                request,
                stdio,
                status,
                reply,
            })
            .map_err(|_| io::Error::other("the spawner thread is gone"))?;
        answer
            .await
            .map_err(|_| io::Error::other("the spawner thread is gone"))?
    }
}

/// The spawner process and the shim's end of its socket.
struct Proc {
    child: Child,
    sock: OwnedFd,
}

impl Proc {
    fn start(bin: &PathBuf) -> io::Result<Self> {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        let mut cmd = Command::new(bin);
        cmd.arg0("picolet")
            .args(["monitor", "spawner", "--room"])
            .arg(".".repeat(spawner::TITLE_ROOM))
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            // What the monitors it forks log: errors only, as before.
            .env("PICOLET_LOG", "error")
            .process_group(0);
        crate::host::die_with_parent(&mut cmd, nix::sys::signal::Signal::SIGKILL);
        let child = cmd.spawn()?;
        Ok(Self { child, sock: ours })
    }

    /// Ends it: SIGKILL (its children still making a container die with
    /// it), then reaps it.
    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn exchange(&self, job: &Job) -> io::Result<Spawned> {
        let fds: Vec<_> = job
            .stdio
            .iter()
            .chain(job.status.iter())
            .map(|f| f.as_raw_fd())
            .collect();
        spawner::send(self.sock.as_fd(), &job.request, &fds)?;
        let mut pfd = [PollFd::new(self.sock.as_fd(), PollFlags::POLLIN)];
        loop {
            match poll(&mut pfd, PollTimeout::from(REPLY_TIMEOUT_MS)) {
                Ok(0) => return Err(io::Error::other("the spawner did not answer in 10 s")),
                Ok(_) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let (msg, fds) = spawner::recv(self.sock.as_fd(), 4096)?;
        if msg.is_empty() {
            return Err(io::Error::other("the spawner ended"));
        }
        let reply: Reply = serde_json::from_slice(&msg).map_err(io::Error::other)?;
        match (reply.pid, fds.into_iter().next()) {
            (Some(pid), Some(pidfd)) => Ok(Spawned { pid, pidfd }),
            _ => Err(io::Error::other(
                reply.error.unwrap_or_else(|| "no pid in the reply".into()),
            )),
        }
    }
}

fn serve_jobs(bin: &PathBuf, jobs: &mpsc::Receiver<Job>) {
    let mut proc: Option<Proc> = None;
    while let Ok(job) = jobs.recv() {
        let p = match proc.take() {
            // One that died since the last request is reaped and replaced.
            Some(mut p) => {
                if matches!(p.child.try_wait(), Ok(None)) {
                    Ok(p)
                } else {
                    p.stop();
                    Proc::start(bin)
                }
            }
            None => Proc::start(bin),
        };
        let res = match p {
            Ok(p) => {
                let res = p.exchange(&job);
                match res {
                    Ok(_) => proc = Some(p),
                    Err(_) => p.stop(),
                }
                res
            }
            Err(e) => Err(e),
        };
        let _ = job.reply.send(res);
    }
    if let Some(p) = proc {
        p.stop();
    }
}
