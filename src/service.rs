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

/// Runs a manager's command, 90 s at most, its stderr kept for the error.
pub(crate) fn run(argv: &[&str]) -> Result<(), ServiceError> {
    const LIMIT: Duration = Duration::from_secs(90);
    let cmd = argv.join(" ");
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|source| ServiceError::Run {
            cmd: cmd.clone(),
            source,
        })?;
    let start = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() < LIMIT => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ServiceError::Timeout {
                    cmd,
                    secs: LIMIT.as_secs(),
                });
            }
            Err(source) => return Err(ServiceError::Run { cmd, source }),
        }
    };
    if status.success() {
        return Ok(());
    }
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.by_ref().take(4096).read_to_string(&mut stderr);
    }
    Err(ServiceError::Failed {
        cmd,
        status,
        stderr: stderr.trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
