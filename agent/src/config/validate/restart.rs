//! A container's own restart policy and rules, as the API server checks
//! them (kubelet's ContainerRestartRules, on by default since 1.35). Pure.

use k8s_openapi::api::core::v1::Container;

use super::{Result, fail};

/// A container's own `restartPolicy` and `restartPolicyRules` (kubelet's
/// ContainerRestartRules, on by default since 1.35): any of the three
/// policies (Always on an init container makes it a sidecar), rules only
/// beside one, at most 20, each restarting on exit codes In or NotIn a
/// list of at most 255. RestartAllContainers (a node feature picolet does
/// not declare) is refused with kubelet's word for it.
pub(super) fn container(c: &Container, at: &str) -> Result {
    let rules = c.restart_policy_rules.as_deref().unwrap_or(&[]);
    match c.restart_policy.as_deref() {
        None if !rules.is_empty() => {
            return fail(
                format!("{at}.restartPolicy"),
                "required when restartPolicyRules are used",
            );
        }
        None | Some("Always" | "OnFailure" | "Never") => {}
        Some(p) => {
            return fail(
                format!("{at}.restartPolicy"),
                format!("{p:?} (want \"Always\", \"OnFailure\" or \"Never\")"),
            );
        }
    }
    if rules.len() > 20 {
        return fail(
            format!("{at}.restartPolicyRules"),
            format!("{} rules (at most 20)", rules.len()),
        );
    }
    for (i, r) in rules.iter().enumerate() {
        let rat = format!("{at}.restartPolicyRules[{i}]");
        match r.action.as_str() {
            "Restart" => {}
            "RestartAllContainers" => {
                return fail(
                    format!("{rat}.action"),
                    "\"RestartAllContainers\" needs the node feature RestartAllContainersOnContainerExits, which picolet does not have (PodFeatureUnsupported)",
                );
            }
            a => return fail(format!("{rat}.action"), format!("{a:?} (want \"Restart\")")),
        }
        let Some(e) = &r.exit_codes else {
            return fail(format!("{rat}.exitCodes"), "required");
        };
        if e.operator != "In" && e.operator != "NotIn" {
            return fail(
                format!("{rat}.exitCodes.operator"),
                format!("{:?} (want \"In\" or \"NotIn\")", e.operator),
            );
        }
        let n = e.values.as_ref().map_or(0, Vec::len);
        if n > 255 {
            return fail(
                format!("{rat}.exitCodes.values"),
                format!("{n} values (at most 255)"),
            );
        }
    }
    Ok(())
}
