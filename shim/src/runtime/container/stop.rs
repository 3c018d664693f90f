//! StopContainer and exits: the stop signal, SIGKILL after the timeout,
//! and the watcher that emits STOPPED events when monitors exit.

use std::time::Duration;

use cri_proto::v1::ContainerState;
use nix::sys::signal::Signal;

use super::parse_signal;
use crate::error::Error;
use crate::mutex::lock;
use crate::runtime::Runtime;
use crate::state::ContainerRecord;

impl Runtime {
    /// Whether the container exits within `timeout`: woken when its own
    /// monitor exits (it records the exit, then exits), and every 200 ms
    /// for a monitor that is neither our child nor watched by pidfd. Other
    /// containers' exits cost a string compare, not a look.
    async fn wait_exit(&self, rec: &ContainerRecord, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        // Subscribed before the first look: an exit after it is seen.
        let mut exits = self.monitors.subscribe();
        loop {
            if self.state_of(rec).0 == ContainerState::ContainerExited {
                return true;
            }
            let wake = deadline.min(tokio::time::Instant::now() + Duration::from_millis(200));
            loop {
                if tokio::time::Instant::now() >= deadline {
                    return self.state_of(rec).0 == ContainerState::ContainerExited;
                }
                tokio::select! {
                    got = exits.recv() => match got {
                        Ok(id) if *id != *rec.id => continue,
                        // Ours, or some missed (look anyway), or closed.
                        _ => break,
                    },
                    () = tokio::time::sleep_until(wake) => break,
                }
            }
        }
    }

    /// Signals the container's init; with `all`, every process in its
    /// cgroup too (a shared or the host's PID namespace does not end with
    /// the init). By the recorded pid and start time, never another
    /// process that got the pid; libcontainer's record is not read.
    fn signal(&self, rec: &ContainerRecord, sig: Signal, all: bool) -> Result<(), Error> {
        let failed =
            |e: std::io::Error| Error::os(format!("signal {sig} to container {}", rec.id))(e);
        if let Some(pid) = rec.init_pid {
            crate::host::pidfd::signal(pid, rec.init_start_time, sig as i32).map_err(failed)?;
        }
        if !all {
            return Ok(());
        }
        let Some(h) = crate::host::cgroupfs::hierarchy() else {
            return Ok(());
        };
        // A second look for what forked while the first was being killed.
        for _ in 0..2 {
            for pid in h.procs(&rec.cgroup) {
                let Ok(pid) = i32::try_from(pid) else {
                    continue;
                };
                let pid = nix::unistd::Pid::from_raw(pid);
                match nix::sys::signal::kill(pid, sig) {
                    Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
                    Err(e) => return Err(failed(e.into())),
                }
            }
        }
        Ok(())
    }

    /// Stop signal, then SIGKILL after `timeout` seconds. Idempotent.
    pub async fn stop_container(&self, id: &str, timeout: i64) -> Result<(), Error> {
        // Stopping what is not there succeeds, as RemoveContainer and the
        // sandbox calls do (CRI's idempotence; critest 1.36 checks it).
        let Ok(rec) = self.container(id) else {
            return Ok(());
        };
        if self.state_of(&rec).0 == ContainerState::ContainerExited {
            return Ok(());
        }
        if timeout > 0 {
            let sig = rec
                .stop_signal
                .as_deref()
                .and_then(parse_signal)
                .unwrap_or(Signal::SIGTERM);
            if let Err(e) = self.signal(&rec, sig, false) {
                tracing::debug!(container = %id, error = %e, "stop signal");
            }
            if self
                .wait_exit(
                    &rec,
                    Duration::from_secs(u64::try_from(timeout).unwrap_or(0)),
                )
                .await
            {
                return Ok(());
            }
        }
        if let Err(e) = self.signal(&rec, Signal::SIGKILL, true) {
            tracing::debug!(container = %id, error = %e, "SIGKILL");
        }
        if !self.wait_exit(&rec, Duration::from_secs(10)).await {
            return Err(Error::Internal(format!(
                "container {id} did not exit after SIGKILL"
            )));
        }
        Ok(())
    }

    /// Emits STOPPED events for containers whose exit appeared: at once
    /// when a monitor exits (our child, or its pidfd after a shim restart),
    /// and every few seconds anyway (a monitor killed with its container
    /// still running, kernels without pidfds). Runs forever.
    /// An exited container's overlay rootfs is unmounted at once, as
    /// containerd does (its upper dir stays on disk for stats until
    /// RemoveContainer); nothing runs in it again: CRI never restarts a
    /// container. After a shim restart this runs again, harmlessly.
    fn release_rootfs_once(&self, rec: &ContainerRecord) {
        let first = self
            .with_entry(&rec.id, |e| {
                !std::mem::replace(&mut e.rootfs_released, true)
            })
            .unwrap_or(false);
        if !first {
            return;
        }
        match nix::mount::umount2(&rec.rootfs, nix::mount::MntFlags::MNT_DETACH) {
            Ok(()) | Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => {}
            Err(e) => {
                tracing::warn!(container = %rec.id, rootfs = %rec.rootfs.display(), "unmount the exited container's rootfs: {e}");
                self.with_entry(&rec.id, |e| e.rootfs_released = false);
            }
        }
    }

    pub async fn watch_exits(self: std::sync::Arc<Self>) {
        // Subscribed before the first look: an exit from here on is heard.
        let mut exits = self.monitors.subscribe();
        loop {
            // The IDs only: a watched container (all of them while the
            // monitors are the shim's children) needs no look, and copying
            // every record every 5 s was a third of an idle shim's CPU.
            let ids: Vec<String> = lock(&self.containers).keys().cloned().collect();
            for id in &ids {
                // A watched monitor's exit comes on `exits` below.
                if self.monitors.is_watched(id) {
                    continue;
                }
                let Ok(r) = self.container(id) else { continue };
                if self.state_of(&r).0 == ContainerState::ContainerExited {
                    self.emit_stopped_once(&r.id).await;
                    self.release_rootfs_once(&r);
                }
            }
            // Then each exit as it comes, looking at that container only;
            // every container whose monitor is not watched (those that
            // exited among them) again every 5 s, or after missing some.
            let tick = tokio::time::sleep(Duration::from_secs(5));
            tokio::pin!(tick);
            loop {
                tokio::select! {
                    got = exits.recv() => match got {
                        Ok(id) => {
                            if let Ok(r) = self.container(&id)
                                && self.state_of(&r).0 == ContainerState::ContainerExited
                            {
                                self.emit_stopped_once(&r.id).await;
                                self.release_rootfs_once(&r);
                            }
                        }
                        Err(_) => break,
                    },
                    () = &mut tick => break,
                }
            }
        }
    }
}
