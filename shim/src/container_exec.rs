//! ExecSync: a command inside a running container, through the
//! `picolet monitor exec` helper ([`crate::nsexec`]: it forks and enters the
//! container's namespaces, which the multi-threaded shim must not do), with
//! kubelet's output cap and a timeout.

use std::process::Stdio;
use std::time::Duration;

use cri_proto::v1::ContainerState;
use tokio::io::AsyncReadExt;

use crate::error::Error;
use crate::nsexec::EXEC_TIMEOUT_CODE;
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
        let mut c = self.exec_command(id, &cmd, timeout, false)?;
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = c
            .spawn()
            .map_err(|e| Error::Internal(format!("start exec helper: {e}")))?;
        let out = child
            .stdout
            .take()
            .ok_or_else(|| Error::Internal("exec stdout".into()))?;
        let err = child
            .stderr
            .take()
            .ok_or_else(|| Error::Internal("exec stderr".into()))?;
        let run = async {
            let (mut o, mut e) = (Vec::new(), Vec::new());
            let (mut out, mut err) = (out.take(MAX_EXEC_OUTPUT), err.take(MAX_EXEC_OUTPUT));
            // Past the cap, keep draining so the process never blocks on a full pipe.
            let (ro, re) =
                tokio::join!(read_capped(&mut out, &mut o), read_capped(&mut err, &mut e));
            ro.and(re)
                .map_err(|e| Error::Internal(format!("read exec output: {e}")))?;
            let status = child
                .wait()
                .await
                .map_err(|e| Error::Internal(format!("wait exec helper: {e}")))?;
            Ok::<_, Error>((o, e, status.code().unwrap_or(255)))
        };
        // The helper enforces the timeout; this is the backstop.
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
        let mut c = tokio::process::Command::new(&self.monitor_bin);
        c.args(["monitor", "exec", "--bundle"])
            .arg(rec.dir.join("bundle"))
            .arg("--pid")
            .arg(pid.to_string());
        if let Some(t) = start_time {
            c.arg("--start-time").arg(t.to_string());
        }
        if timeout > 0 {
            c.arg("--timeout-ms").arg((timeout * 1000).to_string());
        }
        if tty {
            c.arg("--tty");
        }
        c.arg("--").args(cmd);
        Ok(c)
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
