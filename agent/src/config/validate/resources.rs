//! The pod's own resources (`spec.resources`, kubelet's PodLevelResources)
//! as the API server checks them: only cpu, memory and huge pages, each
//! request within its limit, the pod's request covering its containers'
//! and no container's limit above the pod's. Pure.

use edge_config::quantity::{parse_quantity, parse_quantity_milli};
use k8s_openapi::api::core::v1::PodSpec;

use super::FieldError;
use crate::qos::{aggregate_requests, pod_quantity, quantity};

fn parse(res: &str, q: &str) -> Option<u128> {
    if res == "cpu" {
        parse_quantity_milli(q)
    } else {
        parse_quantity(q)
    }
}

/// Every error of `spec.resources`.
pub(super) fn pod(spec: &PodSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(r) = spec.resources.as_ref() else {
        return errors;
    };
    let mut fail = |field: String, msg: String| errors.push((field, msg));
    if r.claims.as_ref().is_some_and(|c| !c.is_empty()) {
        fail(
            "spec.resources.claims".into(),
            "claims may not be set for resources at pod level".into(),
        );
    }
    for (kind, map) in [("limits", &r.limits), ("requests", &r.requests)] {
        for (res, q) in map.iter().flatten() {
            let at = format!("spec.resources.{kind}.{res}");
            if res != "cpu" && res != "memory" && !res.starts_with("hugepages-") {
                fail(
                    at,
                    format!(
                        "{res:?} is not supported at pod level (want cpu, memory or hugepages-<size>)"
                    ),
                );
            } else if parse(res, &q.0).is_none() {
                fail(at, format!("{:?} is not a quantity", q.0));
            }
        }
    }
    for (res, req) in r.requests.iter().flatten() {
        let lim = r.limits.as_ref().and_then(|l| l.get(res));
        if let (Some(a), Some(b)) = (parse(res, &req.0), lim.and_then(|l| parse(res, &l.0)))
            && a > b
        {
            fail(
                format!("spec.resources.requests.{res}"),
                format!(
                    "{:?} is above the limit {:?}",
                    req.0,
                    lim.map(|l| l.0.as_str()).unwrap_or("")
                ),
            );
        }
    }
    for res in ["cpu", "memory"] {
        let containers = aggregate_requests(spec, res);
        if let Some(own) = r.requests.as_ref().and_then(|m| m.get(res))
            && parse(res, &own.0).is_some_and(|v| v < containers)
        {
            fail(
                format!("spec.resources.requests.{res}"),
                format!(
                    "{:?} is below what the containers request together ({containers}{})",
                    own.0,
                    if res == "cpu" { "m" } else { "" }
                ),
            );
        }
        let Some(limit) = pod_quantity(spec, "limits", res) else {
            continue;
        };
        for (i, c) in spec.containers.iter().enumerate() {
            if quantity(c, "limits", res).is_some_and(|v| v > limit) {
                let own = r
                    .limits
                    .as_ref()
                    .and_then(|l| l.get(res))
                    .map(|q| q.0.as_str());
                fail(
                    format!("spec.containers[{i}].resources.limits.{res}"),
                    format!("above the pod's limit {:?}", own.unwrap_or("")),
                );
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::super::tests::err;

    const C: &str = "  containers:\n  - name: c\n    image: i:1\n";

    #[test]
    fn bad_pod_level_resources_are_named() {
        let cases = [
            (
                format!("  resources: {{limits: {{ephemeral-storage: 1Gi}}}}\n{C}"),
                "spec.resources.limits.ephemeral-storage: \"ephemeral-storage\" is not supported at pod level (want cpu, memory or hugepages-<size>)",
            ),
            (
                format!("  resources: {{requests: {{cpu: '2'}}, limits: {{cpu: '1'}}}}\n{C}"),
                "spec.resources.requests.cpu: \"2\" is above the limit \"1\"",
            ),
            (
                format!(
                    "  resources: {{requests: {{memory: 64Mi}}}}\n{C}    resources: {{requests: {{memory: 128Mi}}}}\n"
                ),
                "spec.resources.requests.memory: \"64Mi\" is below what the containers request together (134217728)",
            ),
            (
                format!(
                    "  resources: {{limits: {{cpu: 500m}}}}\n{C}    resources: {{limits: {{cpu: '1'}}}}\n"
                ),
                "spec.containers[0].resources.limits.cpu: above the pod's limit \"500m\"",
            ),
        ];
        for (spec, want) in cases {
            let e = err(&spec);
            assert!(e.contains(want), "{spec}\n→ {e}");
        }
    }
}
