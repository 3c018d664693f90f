//! A pod's devices: given before anything of it runs (kubelet's device
//! admission), or the pod is failed with kubelet's reason; given back when
//! the pod is done.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::devicemanager::{self, pod_devices};
use crate::events::EventType;

use super::super::SyncError;
use super::Worker;

/// Why the pod was refused (its devices, a feature the node lacks):
/// kubelet's reason and message.
#[derive(Debug, Clone)]
pub(super) struct Refused {
    reason: String,
    message: String,
}

impl Refused {
    pub(super) fn new(reason: &str, message: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            message: message.into(),
        }
    }
}

impl Worker {
    /// Gives the pod its devices once; None when it has them (or asks for
    /// none), else why not.
    pub(super) async fn admit_devices(&mut self, pod: &Pod) -> Option<Refused> {
        if self.devices_admitted {
            return None;
        }
        let refused = match &self.shared.devices {
            Some(m) => m.admit(&self.uid, pod).await.err().map(|e| Refused {
                reason: e.reason(),
                message: e.to_string(),
            }),
            // No device manager: no extended resource is there at all.
            None => pod_devices::PodDevices::default()
                .plan(&self.uid, &pod_devices::requests(pod))
                .err()
                .map(|e| Refused {
                    reason: e.reason(),
                    message: e.to_string(),
                }),
        };
        match refused {
            None => {
                self.devices_admitted = true;
                None
            }
            Some(r) => {
                self.event(None, EventType::Warning, &r.reason, &r.message);
                Some(r)
            }
        }
    }

    /// The pod refused its devices: Failed with the reason, nothing run
    /// (kubelet's `rejectPod`). A new version of the pod (a new UID) is
    /// admitted afresh.
    pub(super) async fn sync_refused(
        &mut self,
        pod: &Pod,
        r: &Refused,
    ) -> Result<Duration, SyncError> {
        let observed = self.shared.cri.observe(&self.uid).await?;
        let mut p = self.with_status(pod, &observed);
        let st = p.status.get_or_insert_with(Default::default);
        st.phase = Some(crate::phase::FAILED.into());
        st.reason = Some(r.reason.clone());
        st.message = Some(format!("Pod was rejected: {}", r.message));
        self.shared.set_status(&self.uid, p);
        Ok(Duration::from_secs(3600))
    }

    /// Gives the pod's devices back once its phase is final (kubelet gives
    /// devices only to active pods).
    pub(super) fn release_devices_if_done(&self) {
        let done = self
            .shared
            .status_of(&self.uid)
            .and_then(|p| p.status?.phase)
            .is_some_and(|ph| crate::phase::is_terminal(&ph));
        if done && let Some(m) = &self.shared.devices {
            m.release(&self.uid);
        }
    }

    /// What the container's creation gets from its devices, after the
    /// plugins that asked for it ran PreStartContainer.
    pub(super) fn container_devices(&self, container: &str) -> devicemanager::ContainerDevices {
        self.shared
            .devices
            .as_ref()
            .map(|m| m.container(&self.uid, container))
            .unwrap_or_default()
    }
}
