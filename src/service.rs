//! The service picolet runs as: which manager the device has (systemd,
//! OpenRC, or BusyBox init's `/etc/init.d` scripts), the service file for
//! it (`packaging/`, with the binary's path filled in), and the commands
//! that enable, start, restart, stop and remove it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub(crate) const SYSTEMD_UNIT: &str = include_str!("../packaging/picolet.service");
pub(crate) const OPENRC_SCRIPT: &str = include_str!("../packaging/picolet.openrc");
pub(crate) const INITD_SCRIPT: &str = include_str!("../packaging/picolet.initd");

/// The service's name under every manager.
pub(crate) const NAME: &str = "picolet";

#[derive(Debug, thiserror::Error)]
pub(crate) enum ServiceError {
    #[error("run {cmd}: {source}")]
    Run { cmd: String, source: std::io::Error },
    #[error("{cmd} failed ({status}): {stderr}")]
    Failed {
        cmd: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("{cmd} did not finish in {secs} s")]
    Timeout { cmd: String, secs: u64 },
    #[error("write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Manager {
    Systemd,
    Openrc,
    /// BusyBox init (or any SysV-style rc): a script in /etc/init.d.
    Initd,
}

impl Manager {
    /// The running init's kind: systemd when it booted the machine
    /// (sd_booted(3): /run/systemd/system exists), OpenRC when its run dir
    /// or `openrc-run` is there, else plain init scripts.
    pub fn detect() -> Self {
        Self::detect_in(Path::new("/"))
    }

    fn detect_in(root: &Path) -> Self {
        if root.join("run/systemd/system").is_dir() {
            Manager::Systemd
        } else if root.join("run/openrc").is_dir() || root.join("sbin/openrc-run").exists() {
            Manager::Openrc
        } else {
            Manager::Initd
        }
    }

    /// Where the service file goes. Init scripts: Buildroot's rcS runs
    /// `/etc/init.d/S??*` in order, so there it is `S90picolet`.
    pub fn file(self, root: &Path) -> PathBuf {
        match self {
            Manager::Systemd => root.join("etc/systemd/system/picolet.service"),
            Manager::Openrc => root.join("etc/init.d/picolet"),
            Manager::Initd if root.join("etc/init.d/rcS").exists() => {
                root.join("etc/init.d/S90picolet")
            }
            Manager::Initd => root.join("etc/init.d/picolet"),
        }
    }

    /// The service file's text for the binary at `bin`.
    pub fn text(self, bin: &Path) -> String {
        let template = match self {
            Manager::Systemd => SYSTEMD_UNIT,
            Manager::Openrc => OPENRC_SCRIPT,
            Manager::Initd => INITD_SCRIPT,
        };
        template.replace("@BIN@", &bin.display().to_string())
    }

    /// Writes the service file (0644 for a unit, 0755 for a script).
    pub fn write(self, root: &Path, bin: &Path) -> Result<PathBuf, ServiceError> {
        use std::os::unix::fs::PermissionsExt;
        let path = self.file(root);
        let mode = if self == Manager::Systemd {
            0o644
        } else {
            0o755
        };
        let wrote = (|| {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            edge_config::write_atomic(&path, self.text(bin).as_bytes())?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
        })();
        wrote.map_err(|source| ServiceError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }

    /// Makes the service start at boot (systemd, OpenRC; an `S90` script
    /// runs at boot by its name).
    pub fn enable(self) -> Result<(), ServiceError> {
        match self {
            Manager::Systemd => {
                run(&["systemctl", "daemon-reload"])?;
                run(&["systemctl", "enable", "picolet.service"])
            }
            Manager::Openrc => run(&["rc-update", "add", NAME, "default"]),
            Manager::Initd => Ok(()),
        }
    }

    /// Starts it, or restarts it when it runs. `--no-block` for systemd:
    /// the caller waits for health itself (a new binary that never becomes
    /// ready would hold `systemctl restart` for TimeoutStartSec).
    pub fn restart(self, file: &Path) -> Result<(), ServiceError> {
        match self {
            Manager::Systemd => run(&["systemctl", "restart", "--no-block", "picolet.service"]),
            Manager::Openrc => run(&["rc-service", NAME, "restart"]),
            Manager::Initd => run(&[&file.display().to_string(), "restart"]),
        }
    }

    /// Stops it and keeps it from starting at boot; a missing service is
    /// not an error.
    pub fn stop_and_disable(self, file: &Path) -> Result<(), ServiceError> {
        match self {
            Manager::Systemd => {
                run(&["systemctl", "disable", "--now", "picolet.service"]).or_else(missing_ok)
            }
            Manager::Openrc => {
                run(&["rc-service", NAME, "stop"]).or_else(missing_ok)?;
                run(&["rc-update", "del", NAME, "default"]).or_else(missing_ok)
            }
            Manager::Initd if file.exists() => run(&[&file.display().to_string(), "stop"]),
            Manager::Initd => Ok(()),
        }
    }
}

/// A stop or disable of a service that is not there fails with the
/// manager's complaint: nothing to undo.
fn missing_ok(e: ServiceError) -> Result<(), ServiceError> {
    match e {
        ServiceError::Failed { .. } => Ok(()),
        e => Err(e),
    }
}

/// Runs a manager's command, 90 s at most, what it wrote kept for the error.
pub(crate) fn run(argv: &[&str]) -> Result<(), ServiceError> {
    let cmd = argv.join(" ");
    let mut command = Command::new(argv[0]);
    command.args(&argv[1..]);
    let ran = run_bounded(&mut command, Duration::from_secs(90)).map_err(|e| match e {
        RunError::Spawn(source) | RunError::Wait(source) => ServiceError::Run {
            cmd: cmd.clone(),
            source,
        },
        RunError::Timeout(secs) => ServiceError::Timeout {
            cmd: cmd.clone(),
            secs,
        },
    })?;
    if ran.status.success() {
        return Ok(());
    }
    Err(ServiceError::Failed {
        cmd,
        status: ran.status,
        stderr: ran.output.trim().to_string(),
    })
}

/// A command that did not finish.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    #[error("run: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("wait: {0}")]
    Wait(#[source] std::io::Error),
    #[error("no answer in {0} s")]
    Timeout(u64),
}

/// How a command ended: its status and what it wrote (the first 64 KiB of
/// its stdout, then of its stderr).
pub(crate) struct Ran {
    pub status: std::process::ExitStatus,
    pub output: String,
}

/// Runs `cmd` (stdin empty) and kills it after `limit`. Both pipes are
/// drained while it runs, so a chatty command never blocks on a full one.
pub(crate) fn run_bounded(cmd: &mut Command, limit: Duration) -> Result<Ran, RunError> {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(RunError::Spawn)?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.by_ref().take(64 << 10).read_to_end(&mut kept);
                let _ = std::io::copy(&mut p, &mut std::io::sink());
            }
            kept
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let start = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(RunError::Timeout(limit.as_secs()));
            }
            Err(e) => return Err(RunError::Wait(e)),
        }
    };
    let mut output = out.join().unwrap_or_default();
    output.extend(err.join().unwrap_or_default());
    Ok(Ran {
        status,
        output: String::from_utf8_lossy(&output).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_run_keeps_what_a_chatty_command_wrote_and_ends_a_slow_one() {
        let mut chatty = Command::new("sh");
        chatty.args([
            "-c",
            "head -c 200000 /dev/zero | tr '\\0' o >&2; echo out; exit 3",
        ]);
        let r = run_bounded(&mut chatty, Duration::from_secs(30)).expect("ran");
        assert_eq!(r.status.code(), Some(3));
        assert!(r.output.starts_with("out\n"), "stdout first");
        assert_eq!(r.output.len(), 4 + (64 << 10), "64 KiB of stderr kept");
        let mut slow = Command::new("sleep");
        slow.arg("30");
        let e = run_bounded(&mut slow, Duration::from_millis(200)).err();
        assert!(matches!(e, Some(RunError::Timeout(0))), "{e:?}");
    }

    #[test]
    fn the_manager_is_the_one_that_booted() {
        let d = tempfile::tempdir().expect("tempdir");
        assert_eq!(Manager::detect_in(d.path()), Manager::Initd);
        std::fs::create_dir_all(d.path().join("run/openrc")).expect("mkdir");
        assert_eq!(Manager::detect_in(d.path()), Manager::Openrc);
        std::fs::create_dir_all(d.path().join("run/systemd/system")).expect("mkdir");
        assert_eq!(Manager::detect_in(d.path()), Manager::Systemd);
    }

    #[test]
    fn every_service_file_names_the_binary_and_keeps_the_containers() {
        let bin = Path::new("/opt/x/bin/picolet");
        for (m, starts) in [
            (Manager::Systemd, &["ExecStart=/opt/x/bin/picolet up"][..]),
            (
                Manager::Openrc,
                &["command=\"/opt/x/bin/picolet\"", "command_args=\"up\""],
            ),
            (Manager::Initd, &["BIN=/opt/x/bin/picolet\n", "\"$BIN\" up"]),
        ] {
            let t = m.text(bin);
            assert!(!t.contains("@BIN@"), "{m:?}");
            for line in starts {
                assert!(t.contains(line), "{m:?} lacks {line}");
            }
            assert!(
                t.contains("/opt/x/bin/picolet.prev") || t.contains("\"$BIN.prev\""),
                "{m:?}: the boot guard runs the kept binary"
            );
            assert!(
                t.contains("upgrade --boot-check --bin "),
                "{m:?}: the boot guard"
            );
        }
        let unit = Manager::Systemd.text(bin);
        for line in [
            "Type=notify",
            "KillMode=process",
            "Delegate=yes",
            "Restart=always",
            "WatchdogSec=",
            "TasksMax=infinity",
            "LimitNOFILE=",
        ] {
            assert!(unit.contains(line), "unit lacks {line}");
        }
    }

    #[test]
    fn a_buildroot_rc_gets_an_s90_script() {
        let d = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            Manager::Initd.file(d.path()),
            d.path().join("etc/init.d/picolet")
        );
        std::fs::create_dir_all(d.path().join("etc/init.d")).expect("mkdir");
        std::fs::write(d.path().join("etc/init.d/rcS"), "").expect("write");
        assert_eq!(
            Manager::Initd.file(d.path()),
            d.path().join("etc/init.d/S90picolet")
        );
    }
}
