//! Liveness of the agent's loops for `/healthz`: PLEG's relist and the
//! sync loop each stamp the time they last ran; kubelet fails its healthz
//! when either is older than three minutes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::mutex::lock;

/// kubelet's PLEG health threshold.
pub const STALL: Duration = Duration::from_secs(180);

#[derive(Debug, Clone)]
pub struct Health(Arc<Inner>);

/// Which loop stalled, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unhealthy {
    #[error("pleg was last seen active {0:?} ago; threshold is {STALL:?}")]
    Pleg(Duration),
    #[error("the sync loop was last seen active {0:?} ago")]
    SyncLoop(Duration),
}

#[derive(Debug)]
struct Inner {
    relist: Mutex<Instant>,
    sync_loop: Mutex<Instant>,
}

impl Default for Health {
    fn default() -> Self {
        let now = Instant::now();
        Self(Arc::new(Inner {
            relist: Mutex::new(now),
            sync_loop: Mutex::new(now),
        }))
    }
}

impl Health {
    pub fn relisted(&self) {
        *lock(&self.0.relist) = Instant::now();
    }

    pub fn synced(&self) {
        *lock(&self.0.sync_loop) = Instant::now();
    }

    /// Why the agent is unhealthy, if it is.
    pub fn check(&self) -> Result<(), Unhealthy> {
        let relist = lock(&self.0.relist).elapsed();
        let sync_loop = lock(&self.0.sync_loop).elapsed();
        if relist > STALL {
            Err(Unhealthy::Pleg(relist))
        } else if sync_loop > STALL {
            Err(Unhealthy::SyncLoop(sync_loop))
        } else {
            Ok(())
        }
    }
}
