//! A container's image volumes (kubelet's ImageVolume, GA in 1.36): each
//! image a volume of the pod names, pulled as a container's image is (pull
//! policy, pull secrets, back-off, events on the container), its ref
//! handed to the runtime, which mounts it read-only.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::Worker;
use crate::status::Waiting;

impl Worker {
    /// Volume name → image ref, for the image volumes `c` mounts.
    pub(super) async fn image_volumes(
        &self,
        pod: &Pod,
        c: &Container,
    ) -> Result<BTreeMap<String, String>, Waiting> {
        let mut refs = BTreeMap::new();
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_deref())
            .unwrap_or(&[]);
        for m in c.volume_mounts.iter().flatten() {
            let Some(image) = volumes
                .iter()
                .find(|v| v.name == m.name)
                .and_then(|v| v.image.as_ref())
            else {
                continue;
            };
            let reference = image.reference.as_deref().unwrap_or("");
            // Defaulted with the pod (the API server's, or the file
            // source's `apply_defaults`).
            let policy = image.pull_policy.as_deref().unwrap_or("IfNotPresent");
            let r = self
                .ensure_image_ref(pod, &c.name, reference, policy)
                .await?;
            refs.insert(m.name.clone(), r);
        }
        Ok(refs)
    }
}
