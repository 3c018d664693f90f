//! RemoveContainer: stops what still runs and removes its state.

use cri_proto::v1::{ContainerEventType, ContainerState};

use crate::error::Error;
use crate::mutex::lock;
use crate::runtime::Runtime;

impl Runtime {
    /// Removes a container, stopping it first if needed. Idempotent.
    pub async fn remove_container(&self, id: &str) -> Result<(), Error> {
        let Ok(rec) = self.container(id) else {
            return Ok(());
        };
        if self.state_of(&rec).0 != ContainerState::ContainerExited {
            self.stop_container(id, 0).await?;
        }
        self.emit_stopped_once(id).await;
        self.destroy_container_resources(&rec).await?;
        rec.images().for_each(|d| self.store.unpin(&d));
        self.emit(id, ContainerEventType::ContainerDeletedEvent);
        lock(&self.containers).remove(id);
        Ok(())
    }
}
