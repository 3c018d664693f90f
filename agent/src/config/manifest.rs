//! Static pod manifests: one file → pods, with kubelet's static pod rules
//! (UID from the content hash, name suffixed `-<nodeName>`, namespace
//! defaulted, `kubernetes.io/config.*` annotations) and the API server's
//! defaulting, then [`crate::config::validate`]. Pure: the caller reads the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use sha2::{Digest, Sha256};

/// Annotation: where the pod came from (`file`).
pub const CONFIG_SOURCE: &str = "kubernetes.io/config.source";
/// Annotation: the pod's content hash (= its UID for static pods).
pub const CONFIG_HASH: &str = "kubernetes.io/config.hash";

/// The annotation that makes a pod a mirror.
pub const CONFIG_MIRROR: &str = "kubernetes.io/config.mirror";

/// Whether an API pod is a mirror pod.
pub fn is_mirror(pod: &serde_json::Value) -> bool {
    pod["metadata"]["annotations"][CONFIG_MIRROR].is_string()
}

/// Annotation: when the source first saw this version of the pod.
pub const CONFIG_SEEN: &str = "kubernetes.io/config.seen";

/// Annotation of a static pod that rolls back ([`crate::config::rollback`]):
/// a new version not Ready within this duration is replaced by the last
/// Ready one.
pub const ROLLBACK_AFTER: &str = "picolet.io/rollback-after";
/// Annotation on the pod run in place of a failed version: why (the status
/// condition [`ROLLED_BACK_CONDITION`] carries it to `/pods`).
pub const ROLLED_BACK: &str = "picolet.io/rolled-back";
/// The pod condition of a rolled-back static pod.
pub const ROLLED_BACK_CONDITION: &str = "picolet.io/RolledBack";

/// `picolet.io/rollback-after` is not a duration above zero.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a duration above zero (e.g. 2m, 90s)")]
pub struct BadRollbackAfter {
    pub value: String,
}

impl BadRollbackAfter {
    /// The field, as validation errors name it.
    pub fn field(&self) -> String {
        format!("metadata.annotations['{ROLLBACK_AFTER}']")
    }
}

/// `picolet.io/rollback-after`, when set.
pub fn rollback_after(pod: &Pod) -> Option<Result<std::time::Duration, BadRollbackAfter>> {
    let v = pod.metadata.annotations.as_ref()?.get(ROLLBACK_AFTER)?;
    Some(
        edge_config::quantity::parse_duration(v)
            .filter(|d| !d.is_zero())
            .ok_or_else(|| BadRollbackAfter { value: v.clone() }),
    )
}

/// Every error of one manifest file: the file, and each field path in it
/// with what is wrong. Printed `<file>: <field>: <message>`, more errors
/// after `; ` (one log line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    pub file: PathBuf,
    /// `(field path, message)`, in the order found; never empty.
    pub errors: Vec<(String, String)>,
}

impl std::fmt::Display for ManifestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.file.display())?;
        for (i, (field, message)) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            if field.is_empty() {
                write!(f, "{message}")?;
            } else {
                write!(f, "{field}: {message}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ManifestError {}

/// Unknown fields listed in one file at most (the rest are counted).
const MAX_UNKNOWN_LISTED: usize = 20;

/// Parses one manifest file's text into its pods (a `Pod`, or the items of
/// a `PodList`/`List`), applies static pod rules and defaults, validates.
/// `seen` is the RFC 3339 time stamped into `config.seen`.
pub fn parse(
    file: &Path,
    text: &str,
    node_name: &str,
    seen: &str,
) -> Result<Vec<Pod>, ManifestError> {
    let err = |field: &str, message: String| ManifestError {
        file: file.to_path_buf(),
        errors: vec![(field.to_string(), message)],
    };
    let value: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| {
        err(
            "",
            format!("not valid YAML or JSON: {}", e.to_string().trim()),
        )
    })?;
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    let api_version = value
        .get("apiVersion")
        .and_then(|k| k.as_str())
        .unwrap_or("");
    let (objects, prefix): (Vec<serde_yaml::Value>, bool) = match (api_version, kind) {
        ("v1", "Pod") => (vec![value], false),
        ("v1", "PodList" | "List") => {
            let items = value
                .get("items")
                .and_then(|i| i.as_sequence())
                .cloned()
                .ok_or_else(|| err("items", "a list needs an items array".into()))?;
            (items, true)
        }
        ("", _) if value.as_mapping().is_none() => {
            return Err(err("", "want a v1 Pod object, found no mapping".into()));
        }
        ("", _) => return Err(err("apiVersion", "missing (want \"v1\")".into())),
        ("v1", "") => return Err(err("kind", "missing (want \"Pod\")".into())),
        ("v1", k) => {
            return Err(err(
                "kind",
                format!("{k:?} is not a pod (want \"Pod\" or \"PodList\")"),
            ));
        }
        (v, _) => return Err(err("apiVersion", format!("{v:?} (want \"v1\")"))),
    };
    let mut pods = Vec::with_capacity(objects.len());
    let mut errors = Vec::new();
    for (i, obj) in objects.into_iter().enumerate() {
        let at = |field: &str| {
            if prefix {
                if field.is_empty() {
                    format!("items[{i}]")
                } else {
                    format!("items[{i}].{field}")
                }
            } else {
                field.to_string()
            }
        };
        if prefix && obj.get("kind").and_then(|k| k.as_str()) != Some("Pod") {
            errors.push((at("kind"), "want \"Pod\"".to_string()));
            continue;
        }
        let canonical = serde_json::to_vec(&obj).unwrap_or_default();
        let written = serde_json::to_value(&obj).unwrap_or_default();
        let mut pod = match decode(obj) {
            Ok(p) => p,
            Err((path, message)) => {
                errors.push((at(&path), message));
                continue;
            }
        };
        // Strict decoding, as the API server's: a field the Pod type does
        // not have is an error, not silently dropped.
        let known = serde_json::to_value(&pod).unwrap_or_default();
        let mut unknown = Vec::new();
        unknown_fields(&written, &known, "", &mut unknown);
        let extra = unknown.len().saturating_sub(MAX_UNKNOWN_LISTED);
        for path in unknown.into_iter().take(MAX_UNKNOWN_LISTED) {
            errors.push((at(&path), "unknown field".to_string()));
        }
        if extra > 0 {
            errors.push((at(""), format!("{extra} more unknown fields")));
        }
        apply_static_rules(&mut pod, file, &canonical, node_name, seen);
        apply_defaults(&mut pod);
        if let Err(found) = crate::config::validate::pod(&pod) {
            errors.extend(found.into_iter().map(|(field, m)| (at(&field), m)));
        }
        // picolet's own annotation, a static pod's only.
        if let Some(Err(e)) = rollback_after(&pod) {
            errors.push((at(&e.field()), e.to_string()));
        }
        pods.push(pod);
    }
    if !errors.is_empty() {
        return Err(ManifestError {
            file: file.to_path_buf(),
            errors,
        });
    }
    if pods.is_empty() {
        return Err(err("items", "the list has no pods".into()));
    }
    Ok(pods)
}

/// Paths of the fields in `written` that decoding dropped: keys `known`
/// (the decoded value written back) lacks. A null is no field.
fn unknown_fields(
    written: &serde_json::Value,
    known: &serde_json::Value,
    at: &str,
    out: &mut Vec<String>,
) {
    use serde_json::Value;
    match (written, known) {
        (Value::Object(w), Value::Object(k)) => {
            for (key, value) in w {
                let path = if at.is_empty() {
                    key.clone()
                } else {
                    format!("{at}.{key}")
                };
                match k.get(key) {
                    Some(kv) => unknown_fields(value, kv, &path, out),
                    None if value.is_null() => {}
                    None => out.push(path),
                }
            }
        }
        (Value::Array(w), Value::Array(k)) => {
            for (i, (wv, kv)) in w.iter().zip(k).enumerate() {
                unknown_fields(wv, kv, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// A pod the API server sent (already defaulted by it): its name, UID and
/// node kept as they are; validated as a static pod is. The error names
/// the field.
pub fn api_pod(value: serde_json::Value) -> Result<Pod, ApiPodError> {
    // Through the YAML value the manifests are decoded from: one decoder of
    // the whole Pod type in the binary, not a second one for JSON values
    // (that one cost 0.9 MiB of the static x86_64 binary).
    let value = serde_yaml::to_value(&value)?;
    let mut pod = decode(value).map_err(|(path, message)| ApiPodError::Field {
        errors: vec![(path, message)],
    })?;
    if pod.metadata.uid.as_deref().unwrap_or("").is_empty() {
        return Err(ApiPodError::Field {
            errors: vec![("metadata.uid".into(), "required".into())],
        });
    }
    apply_defaults(&mut pod);
    crate::config::validate::api_pod(&pod).map_err(|errors| ApiPodError::Field {
        errors: errors.to_vec(),
    })?;
    Ok(pod)
}

/// A pod picolet wrote itself as JSON (what a static pod's last Ready
/// version was), read back through the one decoder of the Pod type.
pub fn kept_pod(value: &serde_json::Value) -> Result<Pod, ApiPodError> {
    let value = serde_yaml::to_value(value)?;
    decode(value).map_err(|(path, message)| ApiPodError::Field {
        errors: vec![(path, message)],
    })
}

/// An API server's pod picolet does not run: every field that is wrong,
/// `<field>: <message>` joined by `; `.
#[derive(Debug, thiserror::Error)]
pub enum ApiPodError {
    #[error("{0}")]
    Yaml(#[from] serde_yaml::Error),
    #[error("{}", .errors.iter().map(|(f, m)| format!("{f}: {m}")).collect::<Vec<_>>().join("; "))]
    Field { errors: Vec<(String, String)> },
}

/// A Pod from a decoded document; the error's field path and message.
fn decode(obj: serde_yaml::Value) -> Result<Pod, (String, String)> {
    serde_path_to_error::deserialize(obj).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        (path, e.into_inner().to_string())
    })
}

/// kubelet's `applyDefaults` for file sources. The UID hashes the pod as
/// written, the node and the file, so the same file gives the same UID
/// across agent restarts and a changed file gives a new one (kubelet hashes
/// the decoded object with md5; we hash its canonical JSON with SHA-256 and
/// keep 128 bits, the same length).
fn apply_static_rules(pod: &mut Pod, file: &Path, canonical: &[u8], node_name: &str, seen: &str) {
    let meta = &mut pod.metadata;
    let uid = match &meta.uid {
        Some(uid) if !uid.is_empty() => uid.clone(),
        _ => {
            let mut h = Sha256::new();
            h.update(canonical);
            h.update(format!("host:{node_name}").as_bytes());
            h.update(format!("file:{}", file.display()).as_bytes());
            let uid = hex::encode(&h.finalize()[..16]);
            meta.uid = Some(uid.clone());
            uid
        }
    };
    if let Some(name) = &meta.name
        && !name.is_empty()
    {
        meta.name = Some(format!("{name}-{node_name}"));
    }
    if meta.namespace.as_deref().unwrap_or("").is_empty() {
        meta.namespace = Some("default".into());
    }
    let ann = meta.annotations.get_or_insert_with(BTreeMap::new);
    ann.insert(CONFIG_SOURCE.into(), "file".into());
    ann.insert(CONFIG_HASH.into(), uid);
    ann.insert(CONFIG_SEEN.into(), seen.into());
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node_name.into());
    }
}

/// The API server's defaulting (`SetDefaults_Pod` and friends) for the
/// fields picolet reads.
fn apply_defaults(pod: &mut Pod) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    spec.restart_policy.get_or_insert_with(|| "Always".into());
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.scheduler_name
        .get_or_insert_with(|| "default-scheduler".into());
    spec.security_context.get_or_insert_with(Default::default);
    for c in spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut())
    {
        default_container(c);
    }
    default_pod_requests(spec);
    for v in spec.volumes.iter_mut().flatten() {
        if let Some(hp) = v.host_path.as_mut() {
            hp.type_.get_or_insert_with(String::new);
        }
        if let Some(image) = v.image.as_mut()
            && image.pull_policy.is_none()
        {
            let reference = image.reference.as_deref().unwrap_or("");
            image.pull_policy = Some(default_pull_policy(reference).into());
        }
    }
}

/// The API server's `defaultPodRequests`: with pod-level limits, a
/// pod-level cpu or memory request left out is what the containers
/// request together, or the limit when they request none.
fn default_pod_requests(spec: &mut PodSpec) {
    let Some(r) = spec.resources.as_ref() else {
        return;
    };
    if r.limits.as_ref().is_none_or(BTreeMap::is_empty) {
        return;
    }
    let mut add = BTreeMap::new();
    for res in ["cpu", "memory"] {
        if r.requests.as_ref().is_some_and(|m| m.contains_key(res)) {
            continue;
        }
        let containers =
            u64::try_from(crate::qos::aggregate_requests(spec, res)).unwrap_or(u64::MAX);
        let q = if containers > 0 {
            Some(Quantity(if res == "cpu" {
                crate::qos::cpu_quantity(containers)
            } else {
                crate::qos::memory_quantity(containers)
            }))
        } else {
            r.limits.as_ref().and_then(|l| l.get(res)).cloned()
        };
        if let Some(q) = q {
            add.insert(res.to_string(), q);
        }
    }
    if let Some(r) = spec.resources.as_mut() {
        r.requests.get_or_insert_with(BTreeMap::new).extend(add);
    }
}

/// The API server's pull policy of an image without one (a container's,
/// an image volume's): Always for `:latest` or no tag, else IfNotPresent.
fn default_pull_policy(image: &str) -> &'static str {
    if image_tag(image).is_none_or(|t| t == "latest") && !image.contains('@') {
        "Always"
    } else {
        "IfNotPresent"
    }
}

fn default_container(c: &mut Container) {
    if c.image_pull_policy.is_none() {
        let image = c.image.as_deref().unwrap_or("");
        c.image_pull_policy = Some(default_pull_policy(image).into());
    }
    c.termination_message_path
        .get_or_insert_with(|| "/dev/termination-log".into());
    c.termination_message_policy
        .get_or_insert_with(|| "File".into());
    for p in c.ports.iter_mut().flatten() {
        p.protocol.get_or_insert_with(|| "TCP".into());
    }
    for probe in [
        c.liveness_probe.as_mut(),
        c.readiness_probe.as_mut(),
        c.startup_probe.as_mut(),
    ]
    .into_iter()
    .flatten()
    {
        default_probe(probe);
    }
    for e in c.env.iter_mut().flatten() {
        if let Some(f) = e.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            f.api_version.get_or_insert_with(|| "v1".into());
        }
    }
    // Requests default to limits where only limits are given.
    if let Some(r) = c.resources.as_mut()
        && let Some(limits) = r.limits.clone()
    {
        let req = r.requests.get_or_insert_with(BTreeMap::new);
        for (k, v) in limits {
            req.entry(k).or_insert(v);
        }
    }
}

fn default_probe(p: &mut Probe) {
    p.period_seconds.get_or_insert(10);
    p.timeout_seconds.get_or_insert(1);
    p.success_threshold.get_or_insert(1);
    p.failure_threshold.get_or_insert(3);
    p.initial_delay_seconds.get_or_insert(0);
    if let Some(h) = p.http_get.as_mut() {
        h.path.get_or_insert_with(|| "/".into());
        h.scheme.get_or_insert_with(|| "HTTP".into());
    }
}

/// The tag of an image reference, if it has one (`busybox:1.36` → `1.36`;
/// `host:5000/busybox` → none).
pub fn image_tag(image: &str) -> Option<&str> {
    let image = image.split('@').next().unwrap_or(image);
    let last = image.rsplit('/').next().unwrap_or(image);
    last.split_once(':').map(|(_, t)| t)
}

/// Test pods: `spec_yaml` (indented two spaces) under a pod named `p`
/// labelled `app: x`, parsed for node `node`.
#[cfg(test)]
pub(crate) fn test_pod(spec_yaml: &str) -> Pod {
    let text = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {{app: x}}\nspec:\n{spec_yaml}"
    );
    parse(Path::new("f"), &text, "node", "t")
        .expect("valid")
        .remove(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(text: &str) -> Vec<Pod> {
        parse(
            Path::new("/m/p.yaml"),
            text,
            "edge-1",
            "2026-01-01T00:00:00Z",
        )
        .expect("valid")
    }

    fn parse_err(text: &str) -> String {
        parse(
            Path::new("/m/p.yaml"),
            text,
            "edge-1",
            "2026-01-01T00:00:00Z",
        )
        .expect_err("invalid")
        .to_string()
    }

    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: busybox:1.36\n";

    #[test]
    fn static_pod_rules() {
        let pods = parse_ok(POD);
        let p = &pods[0];
        assert_eq!(p.metadata.name.as_deref(), Some("web-edge-1"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
        let uid = p.metadata.uid.clone().expect("uid");
        assert_eq!(uid.len(), 32);
        let ann = p.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(ann[CONFIG_SOURCE], "file");
        assert_eq!(ann[CONFIG_HASH], uid);
        let spec = p.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("edge-1"));
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        assert_eq!(
            spec.containers[0].image_pull_policy.as_deref(),
            Some("IfNotPresent")
        );
        // Same content → same UID; changed content or node → another.
        assert_eq!(parse_ok(POD)[0].metadata.uid, Some(uid.clone()));
        let changed = POD.replace("1.36", "1.37");
        assert_ne!(parse_ok(&changed)[0].metadata.uid, Some(uid.clone()));
        let other_node = parse(Path::new("/m/p.yaml"), POD, "edge-2", "t").expect("valid");
        assert_ne!(other_node[0].metadata.uid, Some(uid));
    }

    #[test]
    fn json_and_lists() {
        let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}"#;
        let p = parse_ok(json);
        assert_eq!(
            p[0].spec.as_ref().expect("spec").containers[0]
                .image_pull_policy
                .as_deref(),
            Some("Always")
        );
        let list = format!(
            "apiVersion: v1\nkind: PodList\nitems:\n- {}\n- {}\n",
            json,
            json.replace("\"j\"", "\"k\"")
        );
        let pods = parse_ok(&list);
        assert_eq!(pods.len(), 2);
        assert_ne!(pods[0].metadata.uid, pods[1].metadata.uid);
    }

    #[test]
    fn errors_name_file_and_field() {
        assert!(parse_err("a: [").starts_with("/m/p.yaml: not valid YAML"));
        assert_eq!(
            parse_err("apiVersion: v1\nkind: Service\n"),
            "/m/p.yaml: kind: \"Service\" is not a pod (want \"Pod\" or \"PodList\")"
        );
        assert_eq!(
            parse_err("apiVersion: apps/v1\nkind: Pod\n"),
            "/m/p.yaml: apiVersion: \"apps/v1\" (want \"v1\")"
        );
        let e = parse_err(&POD.replace("image: busybox:1.36", "image: [1]"));
        assert!(
            e.starts_with("/m/p.yaml: spec.containers[0].image: invalid type"),
            "{e}"
        );
        let e = parse_err(&POD.replace("name: c", "name: C_1"));
        assert!(e.starts_with("/m/p.yaml: spec.containers[0].name:"), "{e}");
        let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\n  spec: {containers: []}\n";
        assert_eq!(
            parse_err(list),
            "/m/p.yaml: items[0].spec.containers: at least one container is required"
        );
        let e = parse_err(&POD.replace(
            "  name: web\n",
            "  name: web\n  annotations: {picolet.io/rollback-after: soon}\n",
        ));
        assert_eq!(
            e,
            "/m/p.yaml: metadata.annotations['picolet.io/rollback-after']: \"soon\" is not a duration above zero (e.g. 2m, 90s)"
        );
    }

    #[test]
    fn the_example_manifest_is_valid() {
        let text = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/manifests/hello.yaml"
        ));
        let pods = parse(Path::new("hello.yaml"), text, "edge-1", "t").expect("valid");
        let spec = pods[0].spec.as_ref().expect("spec");
        assert_eq!(spec.init_containers.as_ref().map(Vec::len), Some(1));
    }

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
            assert_eq!(default_pull_policy(reference), want, "{reference}");
        }
        let p = test_pod(
            "  volumes:\n  - {name: iv, image: {reference: 'busybox:1'}}\n  \
             containers:\n  - {name: c, image: busybox}\n",
        );
        let volumes = p.spec.and_then(|s| s.volumes).expect("volumes");
        let image = volumes[0].image.as_ref().expect("image volume");
        assert_eq!(image.pull_policy.as_deref(), Some("IfNotPresent"));
    }

    #[test]
    fn image_tags() {
        assert_eq!(image_tag("busybox"), None);
        assert_eq!(image_tag("busybox:1"), Some("1"));
        assert_eq!(image_tag("reg:5000/busybox"), None);
        assert_eq!(image_tag("reg:5000/busybox:x@sha256:ab"), Some("x"));
    }
}
