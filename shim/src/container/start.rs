//! StartContainer: releases the created container's init to exec.

use cri_proto::v1::{ContainerEventType, ContainerState};
use libcontainer::container::Container as LcContainer;

use super::state_name;
use crate::error::Error;
use crate::runtime::Runtime;
use crate::state::{self};

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
        let dir = self.libcontainer_root().join(id);
        {
            let _order = self.event_order.lock().await;
            // Taken before the start: a quick process may finish before start returns.
            let started_at = state::now_nanos();
            tokio::task::spawn_blocking(move || LcContainer::load(dir)?.start())
                .await?
                .map_err(|e| Error::Internal(format!("start container {id}: {e}")))?;
            rec.started_at = Some(started_at);
            self.put(rec.clone())?;
            self.emit(id, ContainerEventType::ContainerStartedEvent);
        }
        // Its exit may have been seen (and held back) meanwhile.
        if self.state_of(&rec).0 == ContainerState::ContainerExited {
            self.emit_stopped_once(id).await;
        }
        Ok(())
    }
}
