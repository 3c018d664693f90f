//! ExecSync: a command inside a running container, through the
//! `picolet monitor exec` helper ([`crate::process::nsexec`]: it forks and enters the
//! container's namespaces, which the multi-threaded shim must not do), with
//! kubelet's output cap and a timeout.

use std::ffi::OsString;
use std::future::Future;
use std::pin::Pin;
use std::process::Stdio;
use std::time::Duration;

use cri_proto::v1::ContainerState;
use nix::fcntl::OFlag;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::Error;
use crate::process::nsexec::EXEC_TIMEOUT_CODE;
use crate::process::spawner_client::Spawned;
use crate::runtime::Runtime;

/// Output cap of ExecSync, as kubelet.
const MAX_EXEC_OUTPUT: u64 = 16 << 20;

impl Runtime {
    /// Runs `cmd` in the container; returns (stdout, stderr, exit code).
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: i64,
    ) -> Result<(Vec<u8>, Vec<u8>, i32), Error> {
        let argv = self.exec_argv(id, &cmd, timeout, false)?;
        let helper = self.start_exec_helper(argv).await?;
        let run = async {
            let (mut o, mut e) = (Vec::new(), Vec::new());
            let (mut out, mut err) = (
                helper.stdout.take(MAX_EXEC_OUTPUT),
                helper.stderr.take(MAX_EXEC_OUTPUT),
            );
            // Past the cap, keep draining so the process never blocks on a full pipe.
            let (ro, re) =
                tokio::join!(read_capped(&mut out, &mut o), read_capped(&mut err, &mut e));
            ro.and(re).map_err(Error::os("read exec output"))?;
            let code = helper.code.await.map_err(Error::os("wait exec helper"))?;
            Ok::<_, Error>((o, e, code))
        };
        // The helper enforces the timeout; this is the backstop (dropping
        // `run` kills the helper).
        let backstop = Duration::from_secs(match u64::try_from(timeout) {
            Ok(t) if t > 0 => t + 10,
            _ => 24 * 3600,
        });
        let (o, e, code) = tokio::time::timeout(backstop, run)
            .await
            .map_err(|_| Error::DeadlineExceeded(format!("exec in {id} timed out")))??;
        if timeout > 0 && code == EXEC_TIMEOUT_CODE {
            return Err(Error::DeadlineExceeded(format!(
                "command {cmd:?} in container {id} timed out after {timeout}s"
            )));
        }
        Ok((o, e, code))
    }

    /// Starts `picolet monitor exec` (`argv`): forked by the spawner, which
    /// saves the exec of the binary, or exec'd when it cannot.
    async fn start_exec_helper(&self, argv: Vec<OsString>) -> Result<ExecHelper, Error> {
        let os = |what: &str| Error::os(format!("start exec helper: {what}"));
        let pipe = || {
            nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(Error::errno("start exec helper: pipe"))
        };
        let ((out_r, out_w), (err_r, err_w), (st_r, st_w)) = (pipe()?, pipe()?, pipe()?);
        let null = std::fs::File::open("/dev/null").map_err(os("/dev/null"))?;
        let stdio = [null.into(), out_w, err_w];
        if let Some(child) = self.spawner.try_spawn(&argv, stdio, Some(st_w)).await {
            let recv = |fd| tokio::net::unix::pipe::Receiver::from_owned_fd(fd).map_err(os("pipe"));
            let (stdout, stderr, mut status) = (recv(out_r)?, recv(err_r)?, recv(st_r)?);
            let code = async move {
                // Killed when dropped before the code came.
                let mut guard = KillUnlessDone(Some(child));
                let mut raw = Vec::new();
                status.read_to_end(&mut raw).await?;
                guard.disarm();
                // No code: it died by a signal.
                Ok(<[u8; 4]>::try_from(raw.as_slice()).map_or(255, i32::from_le_bytes))
            };
            return Ok(ExecHelper {
                stdout: Box::pin(stdout),
                stderr: Box::pin(stderr),
                code: Box::pin(code),
            });
        }
        let mut c = tokio::process::Command::new(&argv[0]);
        c.arg0("picolet")
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = c.spawn().map_err(os("spawn"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::Internal("exec stdout".into()))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| Error::Internal("exec stderr".into()))?;
        Ok(ExecHelper {
            stdout: Box::pin(stdout),
            stderr: Box::pin(stderr),
            code: Box::pin(async move { Ok(child.wait().await?.code().unwrap_or(255)) }),
        })
    }
}

/// A running `picolet monitor exec`: its output and, once it ended, its
/// exit code. Dropped before that, it is killed.
struct ExecHelper {
    stdout: Pin<Box<dyn AsyncRead + Send>>,
    stderr: Pin<Box<dyn AsyncRead + Send>>,
    code: Pin<Box<dyn Future<Output = std::io::Result<i32>> + Send>>,
}

/// Kills a spawned helper on drop, unless disarmed.
struct KillUnlessDone(Option<Spawned>);

impl KillUnlessDone {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for KillUnlessDone {
    fn drop(&mut self) {
        if let Some(child) = &self.0 {
            child.kill();
        }
    }
}

impl Runtime {
    /// `picolet monitor exec` for `cmd` in running container `id`, stdio
    /// left to the caller; `timeout` in seconds (0: none); `tty`: the
    /// command gets stdin as its controlling terminal, and TERM=xterm as
    /// containerd gives it.
    pub(crate) fn exec_command(
        &self,
        id: &str,
        cmd: &[String],
        timeout: i64,
        tty: bool,
    ) -> Result<tokio::process::Command, Error> {
        let argv = self.exec_argv(id, cmd, timeout, tty)?;
        let mut c = tokio::process::Command::new(&argv[0]);
        c.arg0("picolet").args(&argv[1..]);
        Ok(c)
    }

    /// The command line of `picolet monitor exec` (exec_command), from
    /// the binary's path on.
    fn exec_argv(
        &self,
        id: &str,
        cmd: &[String],
        timeout: i64,
        tty: bool,
    ) -> Result<Vec<OsString>, Error> {
        let rec = self.container(id)?;
        if self.state_of(&rec).0 != ContainerState::ContainerRunning {
            return Err(Error::FailedPrecondition(format!(
                "container {id} is not running"
            )));
        }
        if cmd.is_empty() {
            return Err(Error::InvalidArgument("cmd: must not be empty".into()));
        }
        let (Some(pid), start_time) = (rec.init_pid, rec.init_start_time) else {
            return Err(Error::FailedPrecondition(format!(
                "container {id} has no init process"
            )));
        };
        let mut argv: Vec<OsString> = vec![
            self.monitor_bin.clone().into(),
            "monitor".into(),
            "exec".into(),
            "--bundle".into(),
            rec.dir.join("bundle").into(),
            "--pid".into(),
            pid.to_string().into(),
        ];
        if let Some(t) = start_time {
            argv.extend(["--start-time".into(), t.to_string().into()]);
        }
        if timeout > 0 {
            argv.extend(["--timeout-ms".into(), (timeout * 1000).to_string().into()]);
        }
        if tty {
            argv.push("--tty".into());
        }
        argv.push("--".into());
        argv.extend(cmd.iter().map(OsString::from));
        Ok(argv)
    }
}

impl Runtime {
    /// The attach socket of running container `id` (its monitor serves it).
    pub(crate) fn attach_target(&self, id: &str) -> Result<std::path::PathBuf, Error> {
        let rec = self.container(id)?;
        if self.state_of(&rec).0 != ContainerState::ContainerRunning {
            return Err(Error::FailedPrecondition(format!(
                "container {id} is not running"
            )));
        }
        Ok(self.attach_socket(id))
    }
}

/// Reads up to the cap, then keeps draining so the writer never blocks.
async fn read_capped<R: tokio::io::AsyncRead + Unpin>(
    r: &mut tokio::io::Take<R>,
    buf: &mut Vec<u8>,
) -> std::io::Result<u64> {
    r.read_to_end(buf).await?;
    tokio::io::copy(r.get_mut(), &mut tokio::io::sink()).await
}
