//! The runtime's Status: whether it is ready for pods, its handlers and
//! what each does, and its features, as the node's status tells them.

use cri_proto::v1::RuntimeHandler;

use super::{Cri, Result, e};

impl Cri {
    /// The runtime's Status: readiness, handlers and features.
    pub async fn runtime_status(&self) -> Result<RuntimeReport> {
        let st = self
            .rt
            .clone()
            .status(self.req(cri_proto::v1::StatusRequest { verbose: false }))
            .await
            .map_err(e("Status"))?
            .into_inner();
        Ok(RuntimeReport {
            not_ready: not_ready(&st.status.unwrap_or_default()),
            handlers: st.runtime_handlers,
            supplemental_groups_policy: st.features.is_some_and(|f| f.supplemental_groups_policy),
        })
    }
}

/// What the runtime's Status says of it, for the node's status.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeReport {
    /// Why it is not ready for pods, as kubelet words it for the node's
    /// Ready condition; None: RuntimeReady and NetworkReady.
    pub not_ready: Option<String>,
    /// Each handler and what it does (the Node's `status.runtimeHandlers`).
    pub handlers: Vec<RuntimeHandler>,
    /// Whether it does SupplementalGroupsPolicy (the Node's
    /// `status.features`).
    pub supplemental_groups_policy: bool,
}

/// kubelet's wording of a runtime condition that is false or missing.
fn not_ready(st: &cri_proto::v1::RuntimeStatus) -> Option<String> {
    for (kind, what) in [
        (
            "RuntimeReady",
            "container runtime status check may not have completed yet",
        ),
        ("NetworkReady", "container runtime network not ready"),
    ] {
        match st.conditions.iter().find(|c| c.r#type == kind) {
            Some(c) if c.status => {}
            Some(c) => {
                return Some(format!(
                    "{what}: {kind}=false reason:{} message:{}",
                    c.reason, c.message
                ));
            }
            None => return Some(format!("{what}: no {kind} condition")),
        }
    }
    None
}
