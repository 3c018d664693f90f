//! What kubelet's configMap, secret, downwardAPI and projected volume
//! plugins put in a volume, and the values `configMapKeyRef`,
//! `secretKeyRef` and `envFrom` give a container: from the API objects the
//! worker fetched ([`Objects`]), the files of a volume (relative path →
//! bytes and mode) and the variables of a container. Pure; the worker
//! fetches, [`crate::volumes`] writes them atomically.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Container, DownwardAPIVolumeFile, KeyToPath, Pod, ServiceAccountTokenProjection, Volume,
};

/// kubelet's default mode of projected files (0644).
pub const DEFAULT_MODE: u32 = 0o644;
/// TokenRequest's default lifetime (kubelet asks for 1 h when unset).
pub const DEFAULT_TOKEN_SECONDS: i64 = 3600;

/// Answers a downwardAPI `resourceFieldRef`: (container, resource,
/// divisor) → value.
pub type ResourceFn<'a> = dyn Fn(&str, &str, Option<&str>) -> Result<String, ResourceError> + 'a;

/// A resourceFieldRef the caller could not answer (its own error, kept).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ResourceError(pub Box<dyn std::error::Error + Send + Sync>);

/// Why a volume's files or a container's variables cannot be made from
/// the pod's objects: kubelet's messages (a FailedMount, a
/// CreateContainerConfigError).
#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    #[error("{kind} {name:?}: no key {key:?}")]
    NoKey {
        kind: &'static str,
        name: String,
        key: String,
    },
    #[error("{kind} {name:?} not found")]
    NotFound { kind: &'static str, name: String },
    #[error("{kind} {name:?} not fetched")]
    NotFetched { kind: &'static str, name: String },
    #[error("downwardAPI {path:?}: fieldPath {field:?} is not supported in a volume")]
    Unsupported { path: String, field: String },
    #[error("downwardAPI {0:?}: fieldRef or resourceFieldRef is required")]
    NoRef(String),
    #[error(transparent)]
    Resource(#[from] ResourceError),
    #[error("service account token not fetched")]
    TokenNotFetched,
    #[error("volume {0:?}: not a projected kind")]
    NotProjected(String),
    #[error("invalid file path {0:?} in the volume")]
    BadPath(String),
    #[error("couldn't find key {key} in {kind} {object}")]
    NoEnvKey {
        key: String,
        kind: &'static str,
        object: String,
    },
}

/// One file of a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub data: Vec<u8>,
    pub mode: u32,
}

/// A volume's files by relative path.
pub type Files = BTreeMap<String, File>;

/// A ServiceAccount token wanted for the pod: audience (empty: the API
/// server's) and lifetime in seconds.
pub type TokenKey = (String, i64);

/// The API objects a pod refers to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    pub config_maps: BTreeSet<String>,
    pub secrets: BTreeSet<String>,
    pub tokens: BTreeSet<TokenKey>,
}

impl Needs {
    pub fn is_empty(&self) -> bool {
        self.config_maps.is_empty() && self.secrets.is_empty() && self.tokens.is_empty()
    }
}

/// What the worker fetched, by object name in the pod's namespace: None
/// when the API server has no such object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Objects {
    pub config_maps: BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>,
    pub secrets: BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>,
    pub tokens: BTreeMap<TokenKey, String>,
}

fn token_key(t: &ServiceAccountTokenProjection) -> TokenKey {
    (
        t.audience.clone().unwrap_or_default(),
        t.expiration_seconds.unwrap_or(DEFAULT_TOKEN_SECONDS),
    )
}

/// Every object the pod's volumes and containers' env refer to.
pub fn needs(pod: &Pod) -> Needs {
    let mut n = Needs::default();
    let Some(spec) = pod.spec.as_ref() else {
        return n;
    };
    for v in spec.volumes.iter().flatten() {
        if let Some(c) = &v.config_map {
            n.config_maps.insert(c.name.clone());
        }
        if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            n.secrets.insert(s);
        }
        for s in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(c) = &s.config_map {
                n.config_maps.insert(c.name.clone());
            }
            if let Some(c) = &s.secret {
                n.secrets.insert(c.name.clone());
            }
            if let Some(t) = &s.service_account_token {
                n.tokens.insert(token_key(t));
            }
        }
    }
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    for c in containers {
        for e in c.env.iter().flatten() {
            let Some(vf) = &e.value_from else { continue };
            if let Some(r) = &vf.config_map_key_ref {
                n.config_maps.insert(r.name.clone());
            }
            if let Some(r) = &vf.secret_key_ref {
                n.secrets.insert(r.name.clone());
            }
        }
        for f in c.env_from.iter().flatten() {
            if let Some(r) = &f.config_map_ref {
                n.config_maps.insert(r.name.clone());
            }
            if let Some(r) = &f.secret_ref {
                n.secrets.insert(r.name.clone());
            }
        }
    }
    n
}

/// Whether a volume is one of the kinds this module projects.
pub fn is_projected(v: &Volume) -> bool {
    v.config_map.is_some()
        || v.secret.is_some()
        || v.downward_api.is_some()
        || v.projected.is_some()
}

/// Whether kubelet keeps the volume in memory (secrets and projected
/// volumes, which hold tokens: never on flash).
pub fn in_memory(v: &Volume) -> bool {
    v.secret.is_some() || v.projected.is_some()
}

/// The keys of an object as files: all of them, or `items` (a missing
/// item key is an error unless `optional`).
fn keys_to_files(
    (kind, name): (&'static str, &str),
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    mode: u32,
    optional: bool,
    out: &mut Files,
) -> Result<(), ProjectionError> {
    match items {
        None => {
            for (k, v) in data {
                out.insert(
                    k.clone(),
                    File {
                        data: v.clone(),
                        mode,
                    },
                );
            }
        }
        Some(items) => {
            for it in items {
                let Some(v) = data.get(&it.key) else {
                    if optional {
                        continue;
                    }
                    return Err(ProjectionError::NoKey {
                        kind,
                        name: name.to_string(),
                        key: it.key.clone(),
                    });
                };
                out.insert(
                    it.path.clone(),
                    File {
                        data: v.clone(),
                        mode: it.mode.map_or(mode, mode_bits),
                    },
                );
            }
        }
    }
    Ok(())
}

fn mode_bits(m: i32) -> u32 {
    u32::try_from(m).unwrap_or(DEFAULT_MODE) & 0o777
}

/// An object's keys into `out` (all, or `items`); a missing object or
/// item key is an error unless `optional`.
fn project(
    kind: &'static str,
    name: &str,
    found: Option<&Option<BTreeMap<String, Vec<u8>>>>,
    items: Option<&Vec<KeyToPath>>,
    optional: bool,
    mode: u32,
    out: &mut Files,
) -> Result<(), ProjectionError> {
    match object(kind, name, found, optional)? {
        Some(d) => keys_to_files((kind, name), d, items, mode, optional, out),
        None => Ok(()),
    }
}

/// An object's data, or what a missing one means: nothing when optional,
/// else an error naming it.
fn object<'a>(
    kind: &'static str,
    name: &str,
    found: Option<&'a Option<BTreeMap<String, Vec<u8>>>>,
    optional: bool,
) -> Result<Option<&'a BTreeMap<String, Vec<u8>>>, ProjectionError> {
    let name = name.to_string();
    match found {
        Some(Some(d)) => Ok(Some(d)),
        _ if optional => Ok(None),
        Some(None) => Err(ProjectionError::NotFound { kind, name }),
        None => Err(ProjectionError::NotFetched { kind, name }),
    }
}

/// kubelet's `fmt.Sprintf("%v=%q\n")` of a map, sorted by key.
fn format_map(m: Option<&BTreeMap<String, String>>) -> Vec<u8> {
    let mut out = String::new();
    for (k, v) in m.into_iter().flatten() {
        out.push_str(k);
        out.push('=');
        out.push_str(&go_quote(v));
        out.push('\n');
    }
    out.into_bytes()
}

/// Go's `%q` of a string (the escapes printable UTF-8 needs).
fn go_quote(s: &str) -> String {
    let mut q = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\r' => q.push_str("\\r"),
            '\t' => q.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                q.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// A downwardAPI item's content (the fields a volume may show).
fn downward(
    pod: &Pod,
    f: &DownwardAPIVolumeFile,
    resource: &ResourceFn<'_>,
) -> Result<Vec<u8>, ProjectionError> {
    if let Some(r) = &f.field_ref {
        let m = &pod.metadata;
        let path = r.field_path.as_str();
        let label = |prefix: &str, map: &Option<BTreeMap<String, String>>| {
            path.strip_prefix(prefix)
                .and_then(|r| r.strip_suffix("']"))
                .map(|k| {
                    map.as_ref()
                        .and_then(|m| m.get(k))
                        .cloned()
                        .unwrap_or_default()
                })
        };
        return Ok(match path {
            "metadata.name" => m.name.clone().unwrap_or_default().into_bytes(),
            "metadata.namespace" => m.namespace.clone().unwrap_or_default().into_bytes(),
            "metadata.uid" => m.uid.clone().unwrap_or_default().into_bytes(),
            "metadata.labels" => format_map(m.labels.as_ref()),
            "metadata.annotations" => format_map(m.annotations.as_ref()),
            _ => label("metadata.labels['", &m.labels)
                .or_else(|| label("metadata.annotations['", &m.annotations))
                .ok_or_else(|| ProjectionError::Unsupported {
                    path: f.path.clone(),
                    field: path.to_string(),
                })?
                .into_bytes(),
        });
    }
    if let Some(r) = &f.resource_field_ref {
        return resource(
            r.container_name.as_deref().unwrap_or(""),
            &r.resource,
            r.divisor.as_ref().map(|d| d.0.as_str()),
        )
        .map(String::into_bytes)
        .map_err(ProjectionError::from);
    }
    Err(ProjectionError::NoRef(f.path.clone()))
}

/// The files of volume `v` of `pod`. `resource(container, resource,
/// divisor)` answers a resourceFieldRef (cri_config's arithmetic).
pub fn volume_files(
    pod: &Pod,
    v: &Volume,
    objects: &Objects,
    resource: &ResourceFn<'_>,
) -> Result<Files, ProjectionError> {
    let mut out = Files::new();
    let mode_of = |m: Option<i32>| m.map_or(DEFAULT_MODE, mode_bits);
    // A configMap's or secret's keys.
    let keys =
        |kind: &'static str, name: &str, items, optional: Option<bool>, mode, out: &mut Files| {
            let found = match kind {
                "secret" => objects.secrets.get(name),
                _ => objects.config_maps.get(name),
            };
            project(
                kind,
                name,
                found,
                items,
                optional.unwrap_or(false),
                mode,
                out,
            )
        };
    let downward_items = |items: Option<&Vec<DownwardAPIVolumeFile>>, mode, out: &mut Files| {
        for f in items.into_iter().flatten() {
            let data = downward(pod, f, resource)?;
            let mode = f.mode.map_or(mode, mode_bits);
            out.insert(f.path.clone(), File { data, mode });
        }
        Ok::<_, ProjectionError>(())
    };
    if let Some(c) = &v.config_map {
        let mode = mode_of(c.default_mode);
        keys(
            "configmap",
            &c.name,
            c.items.as_ref(),
            c.optional,
            mode,
            &mut out,
        )?;
    } else if let Some(s) = &v.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let mode = mode_of(s.default_mode);
        keys(
            "secret",
            &name,
            s.items.as_ref(),
            s.optional,
            mode,
            &mut out,
        )?;
    } else if let Some(d) = &v.downward_api {
        downward_items(d.items.as_ref(), mode_of(d.default_mode), &mut out)?;
    } else if let Some(p) = &v.projected {
        let mode = mode_of(p.default_mode);
        for s in p.sources.iter().flatten() {
            if let Some(c) = &s.config_map {
                keys(
                    "configmap",
                    &c.name,
                    c.items.as_ref(),
                    c.optional,
                    mode,
                    &mut out,
                )?;
            }
            if let Some(c) = &s.secret {
                keys(
                    "secret",
                    &c.name,
                    c.items.as_ref(),
                    c.optional,
                    mode,
                    &mut out,
                )?;
            }
            if let Some(d) = &s.downward_api {
                downward_items(d.items.as_ref(), mode, &mut out)?;
            }
            if let Some(t) = &s.service_account_token {
                let token = objects
                    .tokens
                    .get(&token_key(t))
                    .ok_or(ProjectionError::TokenNotFetched)?;
                let data = token.clone().into_bytes();
                out.insert(t.path.clone(), File { data, mode });
            }
        }
    } else {
        return Err(ProjectionError::NotProjected(v.name.clone()));
    }
    for path in out.keys() {
        check_path(path)?;
    }
    Ok(out)
}

/// A file's path inside the volume: relative, no `..`, not starting with
/// `..` (kubelet's own entries), at most 4096 bytes.
fn check_path(path: &str) -> Result<(), ProjectionError> {
    if path.is_empty()
        || path.len() > 4096
        || path.starts_with('/')
        || path.starts_with("..")
        || path.split('/').any(|p| p == ".." || p.is_empty())
    {
        return Err(ProjectionError::BadPath(path.to_string()));
    }
    Ok(())
}

/// The variables a container takes from configMaps and secrets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectEnv {
    /// `envFrom`'s variables (prefixed; a later source wins), set before
    /// `env`, which wins over them.
    pub from: BTreeMap<String, String>,
    /// Each `valueFrom` key reference's value, by variable name (absent:
    /// an optional reference that found nothing).
    pub refs: BTreeMap<String, String>,
}

/// Resolves `c`'s `configMapKeyRef`, `secretKeyRef` and `envFrom` in the
/// pod's namespace `ns`. A missing object or key that is not optional is
/// kubelet's error (a CreateContainerConfigError). envFrom keys that are
/// not valid variable names are skipped, as kubelet does.
pub fn env_from_objects(
    c: &Container,
    objects: &Objects,
    ns: &str,
) -> Result<ObjectEnv, ProjectionError> {
    let text = |b: &Vec<u8>| String::from_utf8_lossy(b).into_owned();
    let mut out = ObjectEnv::default();
    for f in c.env_from.iter().flatten() {
        let prefix = f.prefix.clone().unwrap_or_default();
        let (kind, name, optional, found) = if let Some(r) = &f.config_map_ref {
            (
                "configmap",
                r.name.clone(),
                r.optional.unwrap_or(false),
                objects.config_maps.get(&r.name),
            )
        } else if let Some(r) = &f.secret_ref {
            (
                "secret",
                r.name.clone(),
                r.optional.unwrap_or(false),
                objects.secrets.get(&r.name),
            )
        } else {
            continue;
        };
        if let Some(d) = object(kind, &format!("{ns}/{name}"), found, optional)? {
            for (k, v) in d {
                let var = format!("{prefix}{k}");
                if is_env_name(&var) {
                    out.from.insert(var, text(v));
                }
            }
        }
    }
    for e in c.env.iter().flatten() {
        let Some(vf) = &e.value_from else { continue };
        let (kind, name, key, optional, found) = if let Some(r) = &vf.config_map_key_ref {
            (
                "configmap",
                &r.name,
                &r.key,
                r.optional.unwrap_or(false),
                objects.config_maps.get(&r.name),
            )
        } else if let Some(r) = &vf.secret_key_ref {
            (
                "secret",
                &r.name,
                &r.key,
                r.optional.unwrap_or(false),
                objects.secrets.get(&r.name),
            )
        } else {
            continue;
        };
        match object(kind, &format!("{ns}/{name}"), found, optional)?.and_then(|d| d.get(key)) {
            Some(v) => {
                out.refs.insert(e.name.clone(), text(v));
            }
            None if optional => {}
            None => {
                return Err(ProjectionError::NoEnvKey {
                    key: key.clone(),
                    kind,
                    object: format!("{ns}/{name}"),
                });
            }
        }
    }
    Ok(out)
}

/// kubelet's env var name check (C identifier-ish: letters, digits, `_`,
/// `-`, `.`, not starting with a digit).
fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1",
                         "labels": {"app": "web", "tier": "a\"b"}, "annotations": {"note": "x\ny"}},
            "spec": spec,
        }))
        .expect("pod")
    }

    fn objects() -> Objects {
        let b = |s: &str| s.as_bytes().to_vec();
        Objects {
            config_maps: BTreeMap::from([
                (
                    "app".into(),
                    Some(BTreeMap::from([("a".into(), b("1")), ("b".into(), b("2"))])),
                ),
                ("gone".into(), None),
            ]),
            secrets: BTreeMap::from([(
                "db".into(),
                Some(BTreeMap::from([("pw".into(), b("s3cr3t"))])),
            )]),
            tokens: BTreeMap::from([(("".into(), 3607), "tok".into())]),
        }
    }

    fn files(spec: serde_json::Value) -> Result<Vec<(String, String, u32)>, String> {
        let p = pod(spec);
        let v = &p
            .spec
            .as_ref()
            .expect("spec")
            .volumes
            .as_ref()
            .expect("volumes")[0];
        let no_resources = |_: &str, _: &str, _: Option<&str>| {
            Err(ResourceError(Box::new(std::io::Error::other("none"))))
        };
        let f = volume_files(&p, v, &objects(), &no_resources).map_err(|e| e.to_string())?;
        Ok(f.into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.data).into_owned(), v.mode))
            .collect())
    }

    fn vol(v: serde_json::Value) -> serde_json::Value {
        json!({"containers": [{"name": "c", "image": "i"}], "volumes": [v]})
    }

    #[test]
    fn config_maps_and_secrets_with_items_modes_and_optional() {
        assert_eq!(
            files(vol(json!({"name": "v", "configMap": {"name": "app"}}))),
            Ok(vec![
                ("a".into(), "1".into(), 0o644),
                ("b".into(), "2".into(), 0o644)
            ])
        );
        assert_eq!(
            files(vol(
                json!({"name": "v", "configMap": {"name": "app", "defaultMode": 0o400,
                "items": [{"key": "b", "path": "sub/b.txt"}, {"key": "a", "path": "a", "mode": 0o600}]}})
            )),
            Ok(vec![
                ("a".into(), "1".into(), 0o600),
                ("sub/b.txt".into(), "2".into(), 0o400)
            ])
        );
        assert_eq!(
            files(vol(json!({"name": "v", "secret": {"secretName": "db"}}))),
            Ok(vec![("pw".into(), "s3cr3t".into(), 0o644)])
        );
        assert_eq!(
            files(vol(json!({"name": "v", "configMap": {"name": "gone"}}))),
            Err("configmap \"gone\" not found".into())
        );
        assert_eq!(
            files(vol(
                json!({"name": "v", "configMap": {"name": "gone", "optional": true}})
            )),
            Ok(vec![])
        );
        assert_eq!(
            files(vol(
                json!({"name": "v", "configMap": {"name": "app", "items": [{"key": "zz", "path": "z"}]}})
            )),
            Err("configmap \"app\": no key \"zz\"".into())
        );
        assert!(
            files(vol(json!({"name": "v", "configMap": {"name": "app", "items": [{"key": "a", "path": "../escape"}]}})))
                .is_err_and(|e| e.contains("invalid file path"))
        );
    }

    #[test]
    fn the_kube_api_access_volume_the_service_account_admission_adds() {
        // As the API server 1.26 writes it into every pod.
        let v = json!({"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "app", "items": [{"key": "a", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ]}});
        assert_eq!(
            files(vol(v.clone())),
            Ok(vec![
                ("ca.crt".into(), "1".into(), 0o644),
                ("namespace".into(), "shop".into(), 0o644),
                ("token".into(), "tok".into(), 0o644),
            ])
        );
        let p = pod(vol(v));
        let n = needs(&p);
        assert_eq!(n.tokens, BTreeSet::from([(String::new(), 3607)]));
        assert_eq!(n.config_maps, BTreeSet::from(["app".to_string()]));
        assert!(in_memory(&p.spec.expect("spec").volumes.expect("v")[0]));
    }

    #[test]
    fn downward_api_files_as_kubelet_formats_them() {
        assert_eq!(
            files(vol(json!({"name": "v", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
                {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['app']"}},
                {"path": "uid", "fieldRef": {"fieldPath": "metadata.uid"}},
            ]}}))),
            Ok(vec![
                ("annotations".into(), "note=\"x\\ny\"\n".into(), 0o644),
                ("app".into(), "web".into(), 0o644),
                (
                    "labels".into(),
                    "app=\"web\"\ntier=\"a\\\"b\"\n".into(),
                    0o644
                ),
                ("uid".into(), "u1".into(), 0o644),
            ])
        );
        assert!(
            files(vol(json!({"name": "v", "downwardAPI": {"items": [{"path": "ip", "fieldRef": {"fieldPath": "status.podIP"}}]}})))
                .is_err_and(|e| e.contains("not supported in a volume"))
        );
    }

    #[test]
    fn env_from_objects_with_prefixes_optional_and_missing_keys() {
        let c: Container = serde_json::from_value(json!({"name": "c", "image": "i",
            "envFrom": [{"configMapRef": {"name": "app"}, "prefix": "X_"}, {"secretRef": {"name": "gone", "optional": true}}],
            "env": [
                {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}},
                {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "app", "key": "zz", "optional": true}}},
            ]}))
        .expect("container");
        let mut o = objects();
        o.secrets.insert("gone".into(), None);
        let e = env_from_objects(&c, &o, "shop").expect("resolved");
        assert_eq!(e.from.keys().collect::<Vec<_>>(), ["X_a", "X_b"]);
        assert_eq!(
            e.refs,
            BTreeMap::from([("PW".to_string(), "s3cr3t".to_string())])
        );
        let c: Container = serde_json::from_value(json!({"name": "c", "image": "i",
            "env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "nope"}}}]}))
        .expect("container");
        assert_eq!(
            env_from_objects(&c, &o, "shop")
                .expect_err("missing key")
                .to_string(),
            "couldn't find key nope in secret shop/db"
        );
    }
}
