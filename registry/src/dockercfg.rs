//! Credentials from a docker `config.json` (`{"auths": {"<registry>": {"auth":
//! ...}}}`), used when a pull request brings none, as kubelet's keyring
//! reads the node's docker config. Keys may carry a scheme and a path
//! (`https://index.docker.io/v1/`); Docker Hub answers to `docker.io`.
//! Pure apart from reading the file.

use std::path::Path;

use crate::Credential;

/// Largest config.json read.
const MAX_FILE: u64 = 1 << 20;

/// The credential for `registry` (`host[:port]` of the image reference) in
/// the docker config at `path`; `Ok(None)` without a file or an entry.
pub fn lookup(path: &Path, registry: &str) -> Result<Option<Credential>, String> {
    let size = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    if size > MAX_FILE {
        return Err(format!("{}: larger than {MAX_FILE} bytes", path.display()));
    }
    let raw = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    find(&raw, registry).map_err(|e| format!("{}: {e}", path.display()))
}

fn find(raw: &[u8], registry: &str) -> Result<Option<Credential>, String> {
    let v: serde_json::Value = serde_json::from_slice(raw).map_err(|e| e.to_string())?;
    let Some(auths) = v.get("auths").and_then(|a| a.as_object()) else {
        return Ok(None);
    };
    let want = host_of(registry);
    for (key, entry) in auths {
        if host_of(key) != want {
            continue;
        }
        let s = |k: &str| entry[k].as_str().unwrap_or_default().to_string();
        let mut c = Credential {
            username: s("username"),
            password: s("password"),
            identity_token: s("identitytoken"),
            registry_token: s("registrytoken"),
        };
        let auth = s("auth");
        if !auth.is_empty() {
            let (u, p) = crate::decode_auth(&auth).map_err(|e| format!("auths.{key:?}.{e}"))?;
            c.username = u;
            c.password = p;
        }
        return Ok(Some(c));
    }
    Ok(None)
}

/// `https://index.docker.io/v1/` → `docker.io`; `reg:5000/x` → `reg:5000`.
fn host_of(key: &str) -> &str {
    let k = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = k.split('/').next().unwrap_or(k);
    match host {
        "index.docker.io" | "registry-1.docker.io" => "docker.io",
        h => h,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_by_host_with_docker_hub_aliases() {
        let cfg = br#"{"auths": {
            "https://index.docker.io/v1/": {"auth": "aHViOnB3"},
            "127.0.0.1:5000": {"username": "edge", "password": "pull-me"},
            "broken.lan": {"auth": "***"}
        }}"#;
        let hub = find(cfg, "docker.io").expect("ok").expect("hub");
        assert_eq!(
            (hub.username.as_str(), hub.password.as_str()),
            ("hub", "pw")
        );
        let local = find(cfg, "127.0.0.1:5000").expect("ok").expect("local");
        assert_eq!(local.username, "edge");
        assert_eq!(find(cfg, "quay.io"), Ok(None));
        assert_eq!(
            find(cfg, "broken.lan"),
            Err("auths.\"broken.lan\".auth: not base64".into())
        );
        assert_eq!(find(br#"{"credsStore": "x"}"#, "docker.io"), Ok(None));
        assert!(find(b"{", "docker.io").is_err());
    }
}
