//! What a pod's security context asks of the runtime: a `hostUsers:
//! false` pod's user namespace, its range of host IDs from the node's
//! manager (kubelet's `GetOrCreateUserNamespaceMappings`) once the runtime
//! says its handler can make one; and `supplementalGroupsPolicy: Strict`,
//! refused at admission on a runtime without it (kubelet's predicate).

use k8s_openapi::api::core::v1::Pod;

use super::Worker;

/// Why a `hostUsers: false` pod has no user namespace (yet): kubelet's
/// words where kubelet has them.
#[derive(Debug, thiserror::Error)]
pub(in crate::pod_workers) enum UsernsError {
    #[error("can't set `spec.hostUsers: false`: user namespaces are off on this node")]
    Off,
    #[error("can't set `spec.hostUsers: false`, runtime does not support user namespaces")]
    Unsupported,
    #[error(transparent)]
    Runtime(#[from] crate::runtime::CriError),
    #[error(transparent)]
    Ranges(#[from] crate::userns::Error),
}

impl Worker {
    /// Gives a `hostUsers: false` pod its user namespace range, kept or
    /// new (kubelet's `GetOrCreateUserNamespaceMappings`), once the
    /// runtime says its handler can make one; kubelet's words when not.
    pub(in crate::pod_workers) async fn pod_userns(
        &mut self,
        pod: &Pod,
    ) -> Result<(), UsernsError> {
        let wants = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_users)
            .is_some_and(|h| !h);
        if !wants || self.userns.is_some() {
            return Ok(());
        }
        let Some(m) = self.shared.userns.clone() else {
            return Err(UsernsError::Off);
        };
        let report = self.shared.cri.runtime_status().await?;
        let supports = report
            .handlers
            .iter()
            .any(|h| h.name.is_empty() && h.features.is_some_and(|f| f.user_namespaces));
        if !supports {
            return Err(UsernsError::Unsupported);
        }
        self.userns = Some(m.get_or_create(&self.uid)?);
        Ok(())
    }

    /// kubelet's `rejectPodAdmissionBasedOnSupplementalGroupsPolicy`: a
    /// pod asking for Strict on a runtime that does not say it can is
    /// refused (Failed), not run with the image's groups.
    pub(super) async fn admit_groups_policy(&self, pod: &Pod) -> Option<super::devices::Refused> {
        let strict = pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref())
            .and_then(|s| s.supplemental_groups_policy.as_deref())
            == Some("Strict");
        if !strict {
            return None;
        }
        // A runtime that does not answer is not refused for it: its
        // sandbox fails instead.
        let supported = self
            .shared
            .cri
            .runtime_status()
            .await
            .map_or(true, |r| r.supplemental_groups_policy);
        (!supported).then(|| {
            super::devices::Refused::new(
                crate::reason::SUPPLEMENTAL_GROUPS_POLICY_NOT_SUPPORTED,
                "SupplementalGroupsPolicy=Strict is not supported in this node",
            )
        })
    }
}
