//! A container's image volumes (kubelet's ImageVolume, GA in 1.36): each
//! image a volume of the pod names, pulled as a container's image is (pull
//! policy, pull secrets, back-off, events on the container), its ref
//! handed to the runtime, which mounts it read-only.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::Worker;
use crate::status::Waiting;

/// The API server's default pull policy of an image volume: Always for a
/// `:latest` or untagged reference, else IfNotPresent.
fn default_policy(reference: &str) -> &'static str {
    let name = reference.rsplit('/').next().unwrap_or(reference);
    if reference.contains('@') || (name.contains(':') && !name.ends_with(":latest")) {
        "IfNotPresent"
    } else {
        "Always"
    }
}

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
            let policy = image
                .pull_policy
                .as_deref()
                .unwrap_or_else(|| default_policy(reference));
            let r = self
                .ensure_image_ref(pod, &c.name, reference, policy)
                .await?;
            refs.insert(m.name.clone(), r);
        }
        Ok(refs)
    }
}

#[cfg(test)]
mod tests {
    use super::default_policy;

    #[test]
    fn pull_policy_defaults_as_the_api_server() {
        for (reference, want) in [
            ("busybox", "Always"),
            ("busybox:latest", "Always"),
            ("quay.io/x/y:1.2", "IfNotPresent"),
            ("localhost:5000/x/y", "Always"),
            ("localhost:5000/x/y:2", "IfNotPresent"),
            ("x@sha256:abc", "IfNotPresent"),
        ] {
            assert_eq!(default_policy(reference), want, "{reference}");
        }
    }
}
