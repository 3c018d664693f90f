//! Pod validation as the API server does it, for the fields picolet uses,
//! plus what picolet cannot run without an API server (configMap, secret
//! and other cluster volume sources). Errors are `(field path, message)`.
//! Pure.

use std::collections::BTreeSet;

use edge_config::quantity::{parse_quantity, parse_quantity_milli};
use k8s_openapi::api::core::v1::{Container, Pod, Probe, Volume};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// A validation failure: field path and message.
pub type FieldError = (String, String);

type Result<T = ()> = std::result::Result<T, FieldError>;

mod resources;
mod restart;
mod security;

fn fail<T>(field: impl Into<String>, msg: impl Into<String>) -> Result<T> {
    Err((field.into(), msg.into()))
}

/// A DNS-1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain: dot-separated labels, at most 253.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// An IANA service name (port names): ≤ 15, `[a-z0-9-]`, one letter, no `--`.
fn is_port_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.bytes().any(|b| b.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--")
}

/// Validates a defaulted static pod: no configMap, secret or projected
/// volumes and no env from them (there is no API server to read them from;
/// kubelet's static pods may not refer to API objects either). Every error
/// is returned (the first of each volume and container), as the API
/// server's validation lists them all.
pub fn pod(pod: &Pod) -> std::result::Result<(), Vec<FieldError>> {
    check(pod, false)
}

/// Validates an API server's pod: configMaps, secrets and projected service
/// account tokens are read from the API server.
pub fn api_pod(pod: &Pod) -> std::result::Result<(), Vec<FieldError>> {
    check(pod, true)
}

fn check(pod: &Pod, api: bool) -> std::result::Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut note = |r: Result| {
        if let Err(e) = r {
            errors.push(e);
        }
    };
    note(metadata(pod));
    let Some(spec) = pod.spec.as_ref() else {
        note(fail("spec", "required"));
        return Err(errors);
    };
    if spec.containers.is_empty() {
        note(fail(
            "spec.containers",
            "at least one container is required",
        ));
    }
    match spec.restart_policy.as_deref() {
        Some("Always" | "OnFailure" | "Never") | None => {}
        Some(p) => note(fail(
            "spec.restartPolicy",
            format!("{p:?} (want \"Always\", \"OnFailure\" or \"Never\")"),
        )),
    }
    if let Some(g) = spec.termination_grace_period_seconds
        && g < 0
    {
        note(fail(
            "spec.terminationGracePeriodSeconds",
            format!("{g} must not be negative"),
        ));
    }
    match spec.dns_policy.as_deref() {
        Some("ClusterFirst" | "ClusterFirstWithHostNet" | "Default" | "None") | None => {}
        Some(p) => note(fail("spec.dnsPolicy", format!("{p:?} is not a DNS policy"))),
    }
    security::pod(spec).into_iter().for_each(|e| note(Err(e)));
    resources::pod(spec).into_iter().for_each(|e| note(Err(e)));
    let mut volumes = BTreeSet::new();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        note(volume(v, &format!("spec.volumes[{i}]"), api));
        if !volumes.insert(v.name.as_str()) {
            note(fail(
                format!("spec.volumes[{i}].name"),
                format!("duplicate volume {:?}", v.name),
            ));
        }
    }
    let host_network = spec.host_network.unwrap_or(false);
    let mut names = BTreeSet::new();
    let groups = [
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or(&[]),
        ),
        ("containers", &spec.containers[..]),
    ];
    for (group, list) in groups {
        for (i, c) in list.iter().enumerate() {
            let at = format!("spec.{group}[{i}]");
            note(container(
                c,
                &at,
                &volumes,
                host_network,
                group == "initContainers",
                api,
            ));
            if !names.insert(c.name.as_str()) {
                note(fail(
                    format!("{at}.name"),
                    format!("duplicate container name {:?}", c.name),
                ));
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn metadata(pod: &Pod) -> Result {
    let name = pod.metadata.name.as_deref().unwrap_or("");
    if name.is_empty() {
        return fail("metadata.name", "required");
    }
    if !is_dns_subdomain(name) {
        return fail(
            "metadata.name",
            format!(
                "{name:?} is not a DNS subdomain (lowercase letters, digits, '-', '.'; at most 253)"
            ),
        );
    }
    // The UID names the pod's files (volumes, logs, user namespace range,
    // allocation): one path component of a UUID's or a hash's characters.
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    if uid.len() > 128
        || uid.starts_with('.')
        || !uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    {
        return fail(
            "metadata.uid",
            format!("{uid:?} is not a UID (letters, digits, '-', '_', '.'; at most 128)"),
        );
    }
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    if !is_dns_label(ns) {
        return fail(
            "metadata.namespace",
            format!("{ns:?} is not a DNS label (lowercase letters, digits, '-'; at most 63)"),
        );
    }
    Ok(())
}

fn volume(v: &Volume, at: &str, api: bool) -> Result {
    if !is_dns_label(&v.name) {
        return fail(
            format!("{at}.name"),
            format!("{:?} is not a DNS label", v.name),
        );
    }
    // Which sources are set: serialise and look at the keys.
    let json = serde_json::to_value(v).unwrap_or_default();
    let sources: Vec<&str> = json
        .as_object()
        .map(|o| {
            o.keys()
                .map(String::as_str)
                .filter(|k| *k != "name")
                .collect()
        })
        .unwrap_or_default();
    match sources.as_slice() {
        [] => fail(at, "a volume source is required (hostPath or emptyDir)"),
        ["hostPath"] => {
            let hp = v.host_path.as_ref().map(|h| (&h.path, h.type_.as_deref()));
            if let Some((path, ty)) = hp {
                if !path.starts_with('/') {
                    return fail(
                        format!("{at}.hostPath.path"),
                        format!("{path:?} must be absolute"),
                    );
                }
                match ty.unwrap_or("") {
                    "" | "DirectoryOrCreate" | "Directory" | "FileOrCreate" | "File" | "Socket"
                    | "CharDevice" | "BlockDevice" => {}
                    t => {
                        return fail(
                            format!("{at}.hostPath.type"),
                            format!("{t:?} is not a host path type"),
                        );
                    }
                }
            }
            Ok(())
        }
        ["emptyDir"] => {
            let ed = v.empty_dir.as_ref();
            match ed.and_then(|e| e.medium.as_deref()).unwrap_or("") {
                "" | "Memory" => {}
                m => {
                    return fail(
                        format!("{at}.emptyDir.medium"),
                        format!("{m:?} (want \"\" or \"Memory\")"),
                    );
                }
            }
            if let Some(q) = ed.and_then(|e| e.size_limit.as_ref())
                && parse_quantity(&q.0).is_none()
            {
                return fail(
                    format!("{at}.emptyDir.sizeLimit"),
                    format!("{:?} is not a quantity", q.0),
                );
            }
            Ok(())
        }
        ["downwardAPI"] => Ok(()),
        ["image"] => {
            let image = v.image.as_ref();
            if image
                .and_then(|i| i.reference.as_deref())
                .unwrap_or("")
                .trim()
                .is_empty()
            {
                return fail(format!("{at}.image.reference"), "required");
            }
            pull_policy(
                &format!("{at}.image.pullPolicy"),
                image.and_then(|i| i.pull_policy.as_deref()),
            )
        }
        ["configMap" | "secret" | "projected"] if api => Ok(()),
        [one @ ("configMap" | "secret" | "projected")] => fail(
            format!("{at}.{one}"),
            "not supported in a static pod (no API server to read it from): use hostPath or emptyDir",
        ),
        [one] => fail(
            format!("{at}.{one}"),
            "not supported by picolet: use hostPath, emptyDir, image, configMap, secret, downwardAPI or projected",
        ),
        many => fail(
            at,
            format!(
                "only one volume source may be set, found {}",
                many.join(", ")
            ),
        ),
    }
}

/// A container's or an image volume's pull policy, if set.
fn pull_policy(field: &str, policy: Option<&str>) -> Result {
    match policy {
        None | Some("Always" | "IfNotPresent" | "Never") => Ok(()),
        Some(p) => fail(
            field,
            format!("{p:?} (want \"Always\", \"IfNotPresent\" or \"Never\")"),
        ),
    }
}

fn container(
    c: &Container,
    at: &str,
    volumes: &BTreeSet<&str>,
    host_network: bool,
    init: bool,
    api: bool,
) -> Result {
    if !is_dns_label(&c.name) {
        return fail(
            format!("{at}.name"),
            format!(
                "{:?} is not a DNS label (lowercase letters, digits, '-'; at most 63)",
                c.name
            ),
        );
    }
    if c.image.as_deref().unwrap_or("").trim().is_empty() {
        return fail(format!("{at}.image"), "required");
    }
    restart::container(c, at)?;
    pull_policy(
        &format!("{at}.imagePullPolicy"),
        c.image_pull_policy.as_deref(),
    )?;
    let mut port_names = BTreeSet::new();
    for (i, p) in c.ports.iter().flatten().enumerate() {
        let pat = format!("{at}.ports[{i}]");
        if !(1..=65535).contains(&p.container_port) {
            return fail(
                format!("{pat}.containerPort"),
                format!("{} is not between 1 and 65535", p.container_port),
            );
        }
        if let Some(h) = p.host_port {
            if !(0..=65535).contains(&h) {
                return fail(
                    format!("{pat}.hostPort"),
                    format!("{h} is not between 0 and 65535"),
                );
            }
            if host_network && h != 0 && h != p.container_port {
                return fail(
                    format!("{pat}.hostPort"),
                    "must equal containerPort with hostNetwork",
                );
            }
        }
        match p.protocol.as_deref() {
            Some("TCP" | "UDP" | "SCTP") | None => {}
            Some(x) => {
                return fail(
                    format!("{pat}.protocol"),
                    format!("{x:?} (want \"TCP\", \"UDP\" or \"SCTP\")"),
                );
            }
        }
        if let Some(n) = &p.name {
            if !is_port_name(n) {
                return fail(
                    format!("{pat}.name"),
                    format!("{n:?} is not a port name (at most 15 of [a-z0-9-], a letter)"),
                );
            }
            if !port_names.insert(n.as_str()) {
                return fail(format!("{pat}.name"), format!("duplicate port name {n:?}"));
            }
        }
    }
    if let Some(r) = &c.resources {
        for (kind, map) in [("limits", &r.limits), ("requests", &r.requests)] {
            for (res, q) in map.iter().flatten() {
                let ok = match res.as_str() {
                    "cpu" => parse_quantity_milli(&q.0).is_some(),
                    _ => parse_quantity(&q.0).is_some(),
                };
                if !ok {
                    return fail(
                        format!("{at}.resources.{kind}.{res}"),
                        format!("{:?} is not a quantity", q.0),
                    );
                }
            }
        }
        for (res, req) in r.requests.iter().flatten() {
            let lim = r.limits.as_ref().and_then(|l| l.get(res));
            if let Some(lim) = lim {
                let (a, b) = if res == "cpu" {
                    (parse_quantity_milli(&req.0), parse_quantity_milli(&lim.0))
                } else {
                    (parse_quantity(&req.0), parse_quantity(&lim.0))
                };
                if a > b {
                    return fail(
                        format!("{at}.resources.requests.{res}"),
                        format!("{:?} is above the limit {:?}", req.0, lim.0),
                    );
                }
            }
        }
    }
    let mut mount_paths = BTreeSet::new();
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let mat = format!("{at}.volumeMounts[{i}]");
        if !volumes.contains(m.name.as_str()) {
            return fail(
                format!("{mat}.name"),
                format!("{:?} is not a volume of this pod", m.name),
            );
        }
        if !m.mount_path.starts_with('/') {
            return fail(
                format!("{mat}.mountPath"),
                format!("{:?} must be absolute", m.mount_path),
            );
        }
        if !mount_paths.insert(m.mount_path.as_str()) {
            return fail(
                format!("{mat}.mountPath"),
                format!("{:?} is mounted twice", m.mount_path),
            );
        }
        if let Some(sp) = m.sub_path.as_deref()
            && (sp.starts_with('/') || sp.split('/').any(|p| p == ".."))
        {
            return fail(
                format!("{mat}.subPath"),
                format!("{sp:?} must be relative and must not contain '..'"),
            );
        }
    }
    for (i, e) in c.env.iter().flatten().enumerate() {
        let eat = format!("{at}.env[{i}]");
        if e.name.is_empty() || e.name.contains('=') {
            return fail(
                format!("{eat}.name"),
                format!("{:?} is not a valid variable name", e.name),
            );
        }
        if let Some(vf) = &e.value_from {
            if e.value.is_some() {
                return fail(
                    format!("{eat}.valueFrom"),
                    "may not be set together with value",
                );
            }
            let key_ref = vf.config_map_key_ref.is_some() || vf.secret_key_ref.is_some();
            match (&vf.field_ref, &vf.resource_field_ref) {
                (None, None) if key_ref && api => {}
                (None, None) if key_ref => {
                    return fail(
                        format!("{eat}.valueFrom"),
                        "configMapKeyRef/secretKeyRef are not supported in a static pod (no API server to read them from)",
                    );
                }
                (Some(f), None) => {
                    if !crate::cri_config::FIELD_REFS.contains(&f.field_path.as_str())
                        && !f.field_path.starts_with("metadata.labels['")
                        && !f.field_path.starts_with("metadata.annotations['")
                    {
                        return fail(
                            format!("{eat}.valueFrom.fieldRef.fieldPath"),
                            format!(
                                "{:?} is not supported (supported: {})",
                                f.field_path,
                                crate::cri_config::FIELD_REFS.join(", ")
                            ),
                        );
                    }
                }
                (None, Some(r)) => match r.resource.as_str() {
                    "limits.cpu"
                    | "limits.memory"
                    | "requests.cpu"
                    | "requests.memory"
                    | "limits.ephemeral-storage"
                    | "requests.ephemeral-storage" => {}
                    x => {
                        return fail(
                            format!("{eat}.valueFrom.resourceFieldRef.resource"),
                            format!("{x:?} is not a container resource"),
                        );
                    }
                },
                _ => {
                    return fail(
                        format!("{eat}.valueFrom"),
                        "exactly one of fieldRef, resourceFieldRef, configMapKeyRef or secretKeyRef must be set",
                    );
                }
            }
        }
    }
    if !api && c.env_from.as_ref().is_some_and(|v| !v.is_empty()) {
        return fail(
            format!("{at}.envFrom"),
            "not supported in a static pod (no API server to read config maps and secrets from)",
        );
    }
    let probes = [
        ("livenessProbe", &c.liveness_probe),
        ("readinessProbe", &c.readiness_probe),
        ("startupProbe", &c.startup_probe),
    ];
    for (kind, p) in probes {
        if let Some(p) = p {
            if init && c.restart_policy.as_deref() != Some("Always") {
                return fail(format!("{at}.{kind}"), "may not be set for init containers");
            }
            probe(p, &format!("{at}.{kind}"), kind != "readinessProbe")?;
        }
    }
    if let Some(l) = &c.lifecycle {
        for (kind, h) in [("postStart", &l.post_start), ("preStop", &l.pre_stop)] {
            let Some(h) = h else { continue };
            let hat = format!("{at}.lifecycle.{kind}");
            let n = [
                h.exec.is_some(),
                h.http_get.is_some(),
                h.tcp_socket.is_some(),
                h.sleep.is_some(),
            ]
            .iter()
            .filter(|x| **x)
            .count();
            if n != 1 {
                return fail(hat, "exactly one of exec, httpGet, sleep must be set");
            }
            if h.tcp_socket.is_some() {
                return fail(
                    format!("{hat}.tcpSocket"),
                    "is not supported as a lifecycle handler",
                );
            }
            if let Some(s) = &h.sleep
                && s.seconds < 0
            {
                return fail(format!("{hat}.sleep.seconds"), "must not be negative");
            }
            if let Some(g) = &h.http_get {
                port(&g.port, &format!("{hat}.httpGet.port"))?;
            }
        }
    }
    Ok(())
}

fn port(p: &IntOrString, at: &str) -> Result {
    match p {
        IntOrString::Int(n) if (1..=65535).contains(n) => Ok(()),
        IntOrString::Int(n) => fail(at, format!("{n} is not between 1 and 65535")),
        IntOrString::String(s) if is_port_name(s) => Ok(()),
        IntOrString::String(s) => fail(at, format!("{s:?} is not a port number or name")),
    }
}

fn probe(p: &Probe, at: &str, success_must_be_one: bool) -> Result {
    let handlers = [
        p.exec.is_some(),
        p.http_get.is_some(),
        p.tcp_socket.is_some(),
        p.grpc.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if handlers != 1 {
        return fail(
            at,
            "exactly one of exec, httpGet, tcpSocket, grpc must be set",
        );
    }
    let positive = [
        ("periodSeconds", p.period_seconds),
        ("timeoutSeconds", p.timeout_seconds),
        ("successThreshold", p.success_threshold),
        ("failureThreshold", p.failure_threshold),
    ];
    for (f, v) in positive {
        if let Some(v) = v
            && v < 1
        {
            return fail(format!("{at}.{f}"), format!("{v} must be at least 1"));
        }
    }
    if let Some(v) = p.initial_delay_seconds
        && v < 0
    {
        return fail(
            format!("{at}.initialDelaySeconds"),
            format!("{v} must not be negative"),
        );
    }
    if success_must_be_one && p.success_threshold.unwrap_or(1) != 1 {
        return fail(
            format!("{at}.successThreshold"),
            "must be 1 for liveness and startup probes",
        );
    }
    if let Some(h) = &p.http_get {
        port(&h.port, &format!("{at}.httpGet.port"))?;
        match h.scheme.as_deref() {
            Some("HTTP" | "HTTPS") | None => {}
            Some(s) => {
                return fail(
                    format!("{at}.httpGet.scheme"),
                    format!("{s:?} (want \"HTTP\" or \"HTTPS\")"),
                );
            }
        }
    }
    if let Some(t) = &p.tcp_socket {
        port(&t.port, &format!("{at}.tcpSocket.port"))?;
    }
    if let Some(g) = &p.grpc
        && !(1..=65535).contains(&g.port)
    {
        return fail(
            format!("{at}.grpc.port"),
            format!("{} is not between 1 and 65535", g.port),
        );
    }
    if let Some(g) = &p.grpc
        && let Some(m) = g.mode.as_deref()
        && m != "TLS"
        && m != "Plaintext"
    {
        return fail(
            format!("{at}.grpc.mode"),
            format!("{m:?}: supported values: \"TLS\", \"Plaintext\""),
        );
    }
    if let Some(e) = &p.exec
        && e.command.as_ref().is_none_or(|c| c.is_empty())
    {
        return fail(format!("{at}.exec.command"), "required");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn an_api_pods_uid_is_one_path_component() {
        let pod = |uid: &str| {
            crate::config::manifest::api_pod(serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "default", "uid": uid},
                "spec": {"containers": [{"name": "c", "image": "i:1"}]},
            }))
        };
        assert!(pod("5e7a11ce-0000-4000-8000-000000000001").is_ok());
        for bad in ["../../etc/x", "a/b", ".."] {
            let e = pod(bad).expect_err(bad).to_string();
            assert!(e.contains("metadata.uid"), "{bad}: {e}");
        }
    }

    /// The error of a pod whose spec is `spec_yaml`.
    pub(super) fn err(spec_yaml: &str) -> String {
        let text = format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n{spec_yaml}");
        crate::config::manifest::parse(Path::new("f.yaml"), &text, "n", "t")
            .expect_err(spec_yaml)
            .to_string()
    }

    const C: &str = "  containers:\n  - name: c\n    image: i:1\n";

    #[test]
    fn sidecar_restart_policy() {
        let e = err(&format!(
            "  initContainers:\n  - {{name: i, image: 'i:1', restartPolicy: Sometimes}}\n{C}"
        ));
        assert!(
            e.ends_with("spec.initContainers[0].restartPolicy: \"Sometimes\" (want \"Always\", \"OnFailure\" or \"Never\")"),
            "{e}"
        );
        // OnFailure or Never: a plain init container with its own policy.
        let plain = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  initContainers:\n  - {{name: i, image: 'i:1', restartPolicy: OnFailure}}\n{C}"
        );
        crate::config::manifest::parse(Path::new("f.yaml"), &plain, "n", "t")
            .expect("an init container may restart on failure");
        let ok = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  initContainers:\n  - name: s\n    image: i:1\n    restartPolicy: Always\n    readinessProbe: {{exec: {{command: ['true']}}}}\n{C}"
        );
        crate::config::manifest::parse(Path::new("f.yaml"), &ok, "n", "t")
            .expect("a sidecar with a probe is valid");
    }

    #[test]
    fn table_of_bad_pods() {
        let cases: &[(&str, &str)] = &[
            (
                "  restartPolicy: Sometimes\n",
                "spec.restartPolicy: \"Sometimes\" (want \"Always\", \"OnFailure\" or \"Never\")",
            ),
            (
                "    ports:\n    - containerPort: 70000\n",
                "spec.containers[0].ports[0].containerPort: 70000 is not between 1 and 65535",
            ),
            (
                "    resources:\n      limits:\n        memory: 100Zi\n",
                "spec.containers[0].resources.limits.memory: \"100Zi\" is not a quantity",
            ),
            (
                "    resources:\n      requests: {cpu: '2'}\n      limits: {cpu: 500m}\n",
                "spec.containers[0].resources.requests.cpu: \"2\" is above the limit \"500m\"",
            ),
            (
                "    restartPolicy: Sometimes\n",
                "spec.containers[0].restartPolicy: \"Sometimes\" (want \"Always\", \"OnFailure\" or \"Never\")",
            ),
            (
                "    restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]\n",
                "spec.containers[0].restartPolicy: required when restartPolicyRules are used",
            ),
            (
                "    restartPolicy: Never\n    restartPolicyRules: [{action: Restart, exitCodes: {operator: Is, values: [42]}}]\n",
                "spec.containers[0].restartPolicyRules[0].exitCodes.operator: \"Is\" (want \"In\" or \"NotIn\")",
            ),
            (
                "    restartPolicy: Never\n    restartPolicyRules: [{action: RestartAllContainers, exitCodes: {operator: In, values: [1]}}]\n",
                "spec.containers[0].restartPolicyRules[0].action: \"RestartAllContainers\" needs the node feature",
            ),
            (
                "    livenessProbe:\n      exec: {command: ['true']}\n      successThreshold: 2\n",
                "spec.containers[0].livenessProbe.successThreshold: must be 1 for liveness and startup probes",
            ),
            (
                "    readinessProbe:\n      periodSeconds: 1\n",
                "spec.containers[0].readinessProbe: exactly one of exec, httpGet, tcpSocket, grpc must be set",
            ),
            (
                "    readinessProbe:\n      httpGet: {port: 0}\n",
                "spec.containers[0].readinessProbe.httpGet.port: 0 is not between 1 and 65535",
            ),
            (
                "    volumeMounts:\n    - {name: nope, mountPath: /x}\n",
                "spec.containers[0].volumeMounts[0].name: \"nope\" is not a volume of this pod",
            ),
            (
                "  - name: c\n    image: i:1\n",
                "spec.containers[1].name: duplicate container name \"c\"",
            ),
            (
                "  volumes:\n  - name: s\n    secret: {secretName: x}\n",
                "spec.volumes[0].secret: not supported in a static pod (no API server to read it from): use hostPath or emptyDir",
            ),
            (
                "  volumes:\n  - name: h\n    hostPath: {path: rel}\n",
                "spec.volumes[0].hostPath.path: \"rel\" must be absolute",
            ),
            (
                "  hostUsers: false\n  hostPID: true\n",
                "spec.hostPID: forbidden when `hostUsers` is false",
            ),
            (
                "  volumes:\n  - name: i\n    image: {pullPolicy: Always}\n",
                "spec.volumes[0].image.reference: required",
            ),
            (
                "    securityContext: {procMount: Unmasked}\n",
                "spec.containers[0].securityContext.procMount: `hostUsers` must be false to use `Unmasked`",
            ),
            (
                "  securityContext: {supplementalGroupsPolicy: Loose}\n",
                "spec.securityContext.supplementalGroupsPolicy: \"Loose\" (want \"Merge\" or \"Strict\")",
            ),
            (
                "    env:\n    - name: X\n      valueFrom: {fieldRef: {fieldPath: spec.foo}}\n",
                "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: \"spec.foo\" is not supported",
            ),
        ];
        for (extra, want) in cases {
            let spec = format!("{C}{extra}");
            let got = err(&spec);
            assert!(
                got.starts_with(&format!("f.yaml: {want}")),
                "for {extra:?}\n got: {got}\nwant: {want}"
            );
        }
    }

    #[test]
    fn every_error_of_a_file_at_once_and_unknown_fields_named() {
        let e = err(&format!(
            "{C}    imagee: i:2\n    ports:\n    - containerPort: 70000\n      protocl: TCP\n  restartPolicy: Sometimes\n  nodeSelectr: {{a: b}}\n  volumes:\n  - name: h\n    hostPath: {{path: rel}}\n"
        ));
        for want in [
            "spec.containers[0].imagee: unknown field",
            "spec.containers[0].ports[0].protocl: unknown field",
            "spec.nodeSelectr: unknown field",
            "spec.restartPolicy: \"Sometimes\"",
            "spec.containers[0].ports[0].containerPort: 70000 is not between 1 and 65535",
            "spec.volumes[0].hostPath.path: \"rel\" must be absolute",
        ] {
            assert!(e.contains(want), "missing {want:?} in {e}");
        }
        assert!(e.starts_with("f.yaml: ") && !e.contains('\n'), "{e}");
        // A list: each item's errors, with its index.
        let list = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: a}, spec: {containers: [{name: c, image: 'i:1', tty: true, ttty: true}]}}\n- {apiVersion: v1, kind: Pod, metadata: {name: B}, spec: {containers: [{name: c, image: 'i:1'}]}}\n";
        let e = crate::config::manifest::parse(Path::new("l.yaml"), list, "n", "t")
            .expect_err("two bad items")
            .to_string();
        assert!(
            e.contains("items[0].spec.containers[0].ttty: unknown field"),
            "{e}"
        );
        assert!(
            e.contains("items[1].metadata.name: \"B-n\" is not a DNS subdomain"),
            "{e}"
        );
        // Nulls and every field the type knows are fine.
        let ok = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {{a: b}}\n  creationTimestamp: null\nspec:\n  securityContext: {{}}\n  volumes:\n  - {{name: e, emptyDir: {{}}}}\n{C}    resources: {{}}\n    env: [{{name: X, value: ''}}]\nstatus: {{}}\n"
        );
        crate::config::manifest::parse(Path::new("f.yaml"), &ok, "n", "t").expect("known fields");
    }

    #[test]
    fn names() {
        assert!(super::is_dns_label("a-1"));
        assert!(!super::is_dns_label("-a"));
        assert!(!super::is_dns_label("A"));
        assert!(super::is_dns_subdomain("a.b-c"));
        assert!(super::is_port_name("http"));
        assert!(!super::is_port_name("8080"));
    }
}
