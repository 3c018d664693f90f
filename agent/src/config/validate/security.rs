//! The pod's security fields as the API server checks them: the
//! supplemental groups policy, and what `hostUsers: false` allows and
//! `procMount: Unmasked` needs. Pure.

use k8s_openapi::api::core::v1::PodSpec;

use super::FieldError;

/// Every error of the pod's security fields.
pub(super) fn pod(spec: &PodSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut fail = |field: String, msg: String| errors.push((field, msg));
    match spec
        .security_context
        .as_ref()
        .and_then(|s| s.supplemental_groups_policy.as_deref())
    {
        Some("Merge" | "Strict") | None => {}
        Some(p) => fail(
            "spec.securityContext.supplementalGroupsPolicy".into(),
            format!("{p:?} (want \"Merge\" or \"Strict\")"),
        ),
    }
    let own_users = spec.host_users == Some(false);
    // kubelet's validateHostUsers: the host's namespaces are not the pod's.
    for (field, on) in [
        ("hostNetwork", spec.host_network),
        ("hostPID", spec.host_pid),
        ("hostIPC", spec.host_ipc),
    ] {
        if own_users && on == Some(true) {
            fail(
                format!("spec.{field}"),
                "forbidden when `hostUsers` is false".into(),
            );
        }
    }
    let containers = [
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or(&[]),
        ),
        ("containers", spec.containers.as_slice()),
    ];
    for (list, cs) in containers {
        for (i, c) in cs.iter().enumerate() {
            let at = format!("spec.{list}[{i}].securityContext.procMount");
            match c
                .security_context
                .as_ref()
                .and_then(|s| s.proc_mount.as_deref())
            {
                None | Some("Default") => {}
                Some("Unmasked") if own_users => {}
                Some("Unmasked") => fail(at, "`hostUsers` must be false to use `Unmasked`".into()),
                Some(p) => fail(at, format!("{p:?} (want \"Default\" or \"Unmasked\")")),
            }
        }
    }
    errors
}
