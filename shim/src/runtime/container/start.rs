//! StartContainer: releases the created container's init to exec.

use std::io::Write;
use std::path::Path;

use cri_proto::v1::{ContainerEventType, ContainerState};

use super::state_name;
use crate::error::Error;
use crate::runtime::Runtime;
use crate::state::{self, META};

impl Runtime {
    pub async fn start_container(&self, id: &str) -> Result<(), Error> {
        let mut rec = self.container(id)?;
        let (st, _) = self.state_of(&rec);
        if st != ContainerState::ContainerCreated {
            return Err(Error::FailedPrecondition(format!(
                "container {id} is {} and cannot be started",
                state_name(st)
            )));
        }
        let notify = self.libcontainer_root().join(id).join("notify.sock");
        let staged = {
            let _order = self.event_order.lock().await;
            // Taken before the start: a quick process may finish before start returns.
            rec.started_at = Some(state::now_nanos());
            // The record's flush runs beside the start; it takes its place
            // only once the start succeeded (`state` docs), and, dropped
            // unplaced on a failed start, its temporary file goes.
            let staged = {
                let rec = rec.clone();
                tokio::task::spawn_blocking(move || state::stage(&rec.dir, META, &rec))
            };
            tokio::task::spawn_blocking(move || release_init(&notify))
                .await
                .map_err(Error::task(format!("start container {id}")))?
                .map_err(Error::os(format!("start container {id}")))?;
            self.keep(rec.clone());
            self.emit(id, ContainerEventType::ContainerStartedEvent);
            staged
        };
        // The flushes wait outside the event lock and off the async
        // workers: under the lock each StartContainer waited for the
        // journal commits of the one before it (a 100-pod cold start's
        // tail). A
        // crash before the rename leaves the created record, as a crash
        // between the start and its flush always did.
        let staged = staged
            .await
            .map_err(Error::task(format!("record the start of {id}")))??;
        tokio::task::spawn_blocking(move || staged.commit())
            .await
            .map_err(Error::task(format!("record the start of {id}")))??;
        // Its exit may have been seen (and held back) meanwhile.
        if self.state_of(&rec).0 == ContainerState::ContainerExited {
            self.emit_stopped_once(id).await;
        }
        Ok(())
    }
}

/// libcontainer's start, without loading and saving its state: the created
/// init waits on `notify.sock` in libcontainer's folder and execs once it
/// has read a message to its end. libcontainer's record keeps saying
/// `created`; its kill (StopContainer) goes by the processes all the same,
/// and nothing else of ours reads it. No chdir either (libcontainer's way
/// to a long socket path, in a process of many threads).
fn release_init(sock: &Path) -> std::io::Result<()> {
    let (_dir, via) = crate::host::via_dir_fd(sock)?;
    let mut to_init = std::os::unix::net::UnixStream::connect(via).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("the created init is not waiting on {}: {e}", sock.display()),
        )
    })?;
    to_init.write_all(b"start container")
}
