//! Node labels as the API server and NodeRestriction check them
//! (`picolet.nodeLabels`, `--node-labels`, `registerWithTaints` keys).

use std::collections::BTreeMap;

/// A node label refused as the API server or NodeRestriction would.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("label key {key:?} is not a qualified name")]
    Key { key: String },
    #[error("label value {value:?} of {key:?} is not a valid label value")]
    Value { key: String, value: String },
    /// In a namespace a node may not set labels in.
    #[error(
        "label {key:?}: a node may not set labels in the kubernetes.io or k8s.io namespaces but kubelet's own and kubelet.kubernetes.io/ or node.kubernetes.io/ ones (the API server's NodeRestriction refuses them)"
    )]
    Restricted { key: String },
    /// A `--node-labels` item without `=`.
    #[error("{item:?} is not key=value")]
    NotKeyValue { item: String },
}

/// Checks a label (key, value) as the API server does: a key is an
/// optional DNS-subdomain prefix and `/`, then a name of at most 63
/// alphanumerics, `-`, `_`, `.` (alphanumeric at both ends); a value is
/// such a name or empty. Labels a node may not set under NodeRestriction
/// (the kubernetes.io and k8s.io namespaces but kubelet's own labels and
/// `kubelet.`/`node.kubernetes.io/`) are refused, as kubelet refuses them.
pub fn check_node_label(key: &str, value: &str) -> Result<(), LabelError> {
    let name_ok = |n: &str| {
        n.len() <= 63
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && n.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && n.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
    };
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if !name_ok(name)
        || prefix.is_some_and(|p| {
            p.is_empty()
                || p.len() > 253
                || !p
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        })
    {
        return Err(LabelError::Key { key: key.into() });
    }
    if !value.is_empty() && !name_ok(value) {
        return Err(LabelError::Value {
            key: key.into(),
            value: value.into(),
        });
    }
    if let Some(p) = prefix {
        let in_ns = |ns: &str| p == ns || p.ends_with(&format!(".{ns}"));
        let kubelets = [
            "beta.kubernetes.io/arch",
            "beta.kubernetes.io/instance-type",
            "beta.kubernetes.io/os",
            "failure-domain.beta.kubernetes.io/region",
            "failure-domain.beta.kubernetes.io/zone",
            "kubernetes.io/arch",
            "kubernetes.io/hostname",
            "kubernetes.io/os",
            "node.kubernetes.io/instance-type",
            "topology.kubernetes.io/region",
            "topology.kubernetes.io/zone",
        ];
        if (in_ns("kubernetes.io") || in_ns("k8s.io"))
            && !kubelets.contains(&key)
            && !in_ns("kubelet.kubernetes.io")
            && !in_ns("node.kubernetes.io")
        {
            return Err(LabelError::Restricted { key: key.into() });
        }
    }
    Ok(())
}

/// Parses kubelet's `--node-labels` (`key=value,key2=value2`).
pub fn parse_node_labels(s: &str) -> Result<BTreeMap<String, String>, LabelError> {
    let mut out = BTreeMap::new();
    for kv in s.split(',').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| LabelError::NotKeyValue { item: kv.into() })?;
        check_node_label(k, v)?;
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_labels_are_checked_as_the_api_server_and_node_restriction_do() {
        assert_eq!(
            parse_node_labels("site=berlin-3,kubernetes.io/hostname=x,role="),
            Ok(BTreeMap::from([
                ("kubernetes.io/hostname".into(), "x".into()),
                ("role".into(), String::new()),
                ("site".into(), "berlin-3".into()),
            ]))
        );
        assert!(
            parse_node_labels("site")
                .expect_err("no =")
                .to_string()
                .contains("not key=value")
        );
        assert_eq!(
            parse_node_labels("k8s.io/x=1"),
            Err(LabelError::Restricted {
                key: "k8s.io/x".into()
            })
        );
        assert_eq!(
            parse_node_labels("Bad_Prefix/x=1"),
            Err(LabelError::Key {
                key: "Bad_Prefix/x".into()
            })
        );
    }
}
