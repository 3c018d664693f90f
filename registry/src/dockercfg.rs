//! Credentials from a docker `config.json` (`{"auths": {"<registry>": {"auth":
//! ...}}}`), used when a pull request brings none, as kubelet's keyring
//! reads the node's docker config. Keys may carry a scheme and a path
//! (`https://index.docker.io/v1/`); Docker Hub answers to `docker.io`.
//! Pure apart from reading the file.

use std::path::{Path, PathBuf};

use crate::{AuthFieldError, Credential};

/// Largest config.json read.
const MAX_FILE: u64 = 1 << 20;

/// A docker config that could not be used; every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: larger than {MAX_FILE} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Content { path: PathBuf, source: FindError },
}

/// What is wrong with a docker config's content.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// `auths.<key>.auth`.
    #[error("auths.{key:?}.{source}")]
    Auth { key: String, source: AuthFieldError },
}

/// The credential for `registry` (`host[:port]` of the image reference) in
/// the docker config at `path`; `Ok(None)` without a file or an entry.
pub fn lookup(path: &Path, registry: &str) -> Result<Option<Credential>, Error> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let size = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    if size > MAX_FILE {
        return Err(Error::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let raw = std::fs::read(path).map_err(io)?;
    find(&raw, registry).map_err(|source| Error::Content {
        path: path.to_path_buf(),
        source,
    })
}

fn find(raw: &[u8], registry: &str) -> Result<Option<Credential>, FindError> {
    let v: serde_json::Value = serde_json::from_slice(raw)?;
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
            let (u, p) = crate::decode_auth(&auth).map_err(|source| FindError::Auth {
                key: key.clone(),
                source,
            })?;
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
        assert_eq!(find(cfg, "quay.io").expect("ok"), None);
        assert_eq!(
            find(cfg, "broken.lan").map_err(|e| e.to_string()),
            Err("auths.\"broken.lan\".auth: not base64".into())
        );
        assert_eq!(
            find(br#"{"credsStore": "x"}"#, "docker.io").expect("ok"),
            None
        );
        assert!(matches!(find(b"{", "docker.io"), Err(FindError::Json(_))));
    }

    #[test]
    fn file_errors_name_the_file_and_keep_the_io_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            lookup(&dir.path().join("none.json"), "docker.io").expect("no file"),
            None
        );
        // A directory: metadata works, reading does not.
        let e = lookup(dir.path(), "docker.io").expect_err("a directory");
        match &e {
            Error::Io { path, source } => {
                assert_eq!(path, dir.path());
                assert_eq!(source.kind(), std::io::ErrorKind::IsADirectory);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            e.to_string()
                .starts_with(&format!("{}: ", dir.path().display()))
        );
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, br#"{"auths": {"h": {"auth": "***"}}}"#).expect("write");
        assert_eq!(
            lookup(&bad, "h").expect_err("bad auth").to_string(),
            format!("{}: auths.\"h\".auth: not base64", bad.display())
        );
    }
}
