//! Changes to a running container: ReopenContainerLog (log rotation)
//! and UpdateContainerResources.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use cri_proto::v1::{ContainerState, LinuxContainerResources};
use nix::sys::signal::Signal;

use crate::error::Error;
use crate::runtime::Runtime;

impl Runtime {
    /// Asks the monitor to reopen the log file (after rotation) and returns
    /// once it has: the log path exists and the monitor holds that file open,
    /// as containerd returns after its own writer reopened it (critest reads
    /// the new file right after the call).
    pub async fn reopen_container_log(&self, id: &str) -> Result<(), Error> {
        let rec = self.container(id)?;
        if self.state_of(&rec).0 != ContainerState::ContainerRunning {
            return Err(Error::FailedPrecondition(format!(
                "container {id} is not running"
            )));
        }
        let pid = rec
            .monitor_pid
            .ok_or_else(|| Error::Internal("no monitor".into()))?;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGUSR1)
            .map_err(Error::errno("signal monitor"))?;
        let Some(log) = &rec.log_path else {
            return Ok(()); // no log: nothing to wait for
        };
        // The monitor reopens as soon as poll(2) returns on its signalfd;
        // 5 s is for a loaded device.
        let deadline = Instant::now() + Duration::from_secs(5);
        // Each look reads the monitor's fd table: start at 1 ms (it is
        // usually done by then), back off to 20 ms.
        let mut pause = Duration::from_millis(1);
        while !holds_open(pid, log) {
            if Instant::now() > deadline {
                return Err(Error::Internal(format!(
                    "the monitor of container {id} did not reopen {} within 5 s (see its monitor.log)",
                    log.display()
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Updates the live cgroup and the stored config, with the code that
    /// wrote the cgroup at create (`cgroup::container`; one owner per
    /// container cgroup directory, the shim only reads them for stats).
    pub fn update_container_resources(
        &self,
        id: &str,
        r: LinuxContainerResources,
    ) -> Result<(), Error> {
        let mut rec = self.container(id)?;
        let hugetlb = crate::runtime::host_inputs::hugetlb_available();
        let resources = crate::spec::linux_resources(&r, hugetlb, id)?;
        let resources = crate::host::cgroupfs::resources(&resources)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        let h = crate::host::cgroupfs::hierarchy()
            .ok_or_else(|| Error::Internal("no cgroup filesystem mounted".into()))?;
        h.update_container(&rec.cgroup, &resources).map_err(|e| {
            let msg = format!("update the cgroup of container {id}: {e}");
            if e.kind() == std::io::ErrorKind::InvalidInput {
                Error::InvalidArgument(msg)
            } else {
                Error::Internal(msg)
            }
        })?;
        if let Some(l) = rec.config.linux.as_mut() {
            l.resources = Some(r);
        }
        self.put(rec)
    }
}

/// Whether process `pid` has the file now at `path` open (same device and
/// inode through one of its /proc fd links).
fn holds_open(pid: i32, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(want) = fs::metadata(path) else {
        return false;
    };
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        fs::metadata(fd.path()).is_ok_and(|m| m.dev() == want.dev() && m.ino() == want.ino())
    })
}
