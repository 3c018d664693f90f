//! Registry credentials from a pod's `imagePullSecrets`, kubelet's
//! `credentialprovider` keyring: the secrets' docker configs
//! (`.dockerconfigjson`, or the older `.dockercfg`) keyed by registry
//! host and path, looked up for an image with the same matching rules
//! (host globs label by label, equal ports, path prefix, the most specific
//! key first, Docker Hub's `index.docker.io` for images without a
//! registry). Pure.

use std::collections::BTreeMap;

use serde_json::Value;

/// One credential, as CRI's `AuthConfig` carries it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cred {
    pub username: String,
    pub password: String,
    pub identity_token: String,
}

/// The credentials of a set of docker configs, by key (host[/path]).
#[derive(Debug, Clone, Default)]
pub struct Keyring {
    creds: BTreeMap<String, Vec<Cred>>,
}

const DOCKER_HUB: &str = "index.docker.io";

impl Keyring {
    /// Adds the docker config of one pull secret's data; an error names
    /// what is wrong with it.
    pub fn add_secret(&mut self, data: &BTreeMap<String, Vec<u8>>) -> Result<(), SecretError> {
        let (key, raw) = if let Some(v) = data.get(".dockerconfigjson") {
            (".dockerconfigjson", v)
        } else if let Some(v) = data.get(".dockercfg") {
            (".dockercfg", v)
        } else {
            return Err(SecretError::NoConfig);
        };
        let v: Value =
            serde_json::from_slice(raw).map_err(|source| SecretError::Json { key, source })?;
        let entries = if key == ".dockerconfigjson" {
            v.get("auths")
                .cloned()
                .ok_or(SecretError::NoAuths { key })?
        } else {
            v
        };
        let entries = entries
            .as_object()
            .ok_or(SecretError::NotAnObject { key })?;
        for (location, e) in entries {
            let c = cred(e).map_err(|problem| SecretError::Entry {
                key,
                location: location.clone(),
                problem,
            })?;
            self.add(location, c);
        }
        Ok(())
    }

    /// Adds a credential for `location` (a registry host, with a path, a
    /// scheme or docker's `/v1/`, `/v2/` suffixes).
    pub fn add(&mut self, location: &str, cred: Cred) {
        let rest = location
            .strip_prefix("https://")
            .or_else(|| location.strip_prefix("http://"))
            .unwrap_or(location);
        let (host, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let path = path
            .strip_prefix("/v1")
            .or_else(|| path.strip_prefix("/v2"))
            .filter(|p| p.starts_with('/'))
            .unwrap_or(path);
        let key = if path.is_empty() || path == "/" {
            host.to_string()
        } else {
            format!("{host}{path}")
        };
        self.creds.entry(key).or_default().push(cred);
    }

    /// The credentials for `image`, the most specific key first; empty:
    /// pull anonymously.
    pub fn lookup(&self, image: &str) -> Vec<Cred> {
        let mut out = Vec::new();
        // Reverse order: "quay.io/team" before "quay.io".
        for (key, creds) in self.creds.iter().rev() {
            if matches(key, image) {
                out.extend(creds.iter().cloned());
            }
        }
        if out.is_empty()
            && docker_hub(image)
            && let Some(c) = self.creds.get(DOCKER_HUB)
        {
            out.extend(c.iter().cloned());
        }
        out
    }
}

/// What is wrong with a pull secret.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("neither .dockerconfigjson nor .dockercfg")]
    NoConfig,
    #[error("{key}: {source}")]
    Json {
        key: &'static str,
        source: serde_json::Error,
    },
    #[error("{key}: no auths")]
    NoAuths { key: &'static str },
    #[error("{key}: not an object")]
    NotAnObject { key: &'static str },
    #[error("{key}: {location}: auth: {problem}")]
    Entry {
        key: &'static str,
        location: String,
        problem: AuthProblem,
    },
}

/// An entry's `auth` that is not base64 of `user:password`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthProblem {
    #[error("not base64")]
    NotBase64,
    #[error("not text")]
    NotText,
    #[error("not user:password")]
    NoColon,
}

fn cred(e: &Value) -> Result<Cred, AuthProblem> {
    let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
    let mut c = Cred {
        username: s("username"),
        password: s("password"),
        identity_token: s("identitytoken"),
    };
    let auth = s("auth");
    if !auth.is_empty() {
        let bytes = serde_json::from_value::<k8s_openapi::ByteString>(Value::String(auth))
            .map_err(|_| AuthProblem::NotBase64)?
            .0;
        let text = String::from_utf8(bytes).map_err(|_| AuthProblem::NotText)?;
        let (user, pass) = text.split_once(':').ok_or(AuthProblem::NoColon)?;
        c.username = user.to_string();
        c.password = pass.to_string();
    }
    Ok(c)
}

/// Splits `host[:port]/path` into the host's labels, the port and the path.
fn split(s: &str) -> (Vec<&str>, &str, &str) {
    let (hostport, path) = match s.find('/') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (h, p),
        None => (hostport, ""),
    };
    (host.split('.').collect(), port, path)
}

/// kubelet's `URLsMatchStr`: the same number of host labels, each matching
/// its glob (`*` within a label), the same port, the key's path a prefix.
fn matches(key: &str, image: &str) -> bool {
    let (kl, kp, kpath) = split(key);
    let (il, ip, ipath) = split(image);
    kp == ip
        && kl.len() == il.len()
        && ipath.starts_with(kpath)
        && kl.iter().zip(&il).all(|(g, l)| glob(g, l))
}

/// A label glob: `*` matches any run of characters.
fn glob(pattern: &str, s: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == s,
        Some((head, tail)) => {
            let Some(rest) = s.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len()).any(|i| rest.is_char_boundary(i) && glob(tail, &rest[i..]))
        }
    }
}

/// Whether `image` comes from Docker Hub (no registry host of its own).
fn docker_hub(image: &str) -> bool {
    match image.split_once('/') {
        None => !image.is_empty(),
        Some((first, _)) => {
            !first.is_empty()
                && (first == "docker.io"
                    || first == DOCKER_HUB
                    || !(first.contains('.') || first.contains(':')))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(key: &str, json: &str) -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([(key.to_string(), json.as_bytes().to_vec())])
    }

    fn user(u: &str) -> Cred {
        Cred {
            username: u.into(),
            password: format!("{u}-pw"),
            ..Default::default()
        }
    }

    #[test]
    fn secrets_of_both_formats_and_auth_decoding() {
        let mut k = Keyring::default();
        // auth = base64("alice:s3cret")
        k.add_secret(&data(
            ".dockerconfigjson",
            r#"{"auths": {"https://registry.example.com:5000/v2/": {"auth": "YWxpY2U6czNjcmV0"}}}"#,
        ))
        .expect("dockerconfigjson");
        k.add_secret(&data(
            ".dockercfg",
            r#"{"quay.io": {"username": "bob", "password": "pw"}}"#,
        ))
        .expect("dockercfg");
        let c = k.lookup("registry.example.com:5000/team/app:v1");
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].username.as_str(), c[0].password.as_str()),
            ("alice", "s3cret")
        );
        assert_eq!(k.lookup("quay.io/x/y")[0].username, "bob");
        assert!(
            k.lookup("registry.example.com/team/app").is_empty(),
            "port differs"
        );
        let bad = Keyring::default().add_secret(&data(".dockerconfigjson", r#"{"x": 1}"#));
        assert_eq!(
            bad.expect_err("no auths").to_string(),
            ".dockerconfigjson: no auths"
        );
        let bad = Keyring::default().add_secret(&data(
            ".dockerconfigjson",
            r#"{"auths": {"r.io": {"auth": "%%%"}}}"#,
        ));
        assert_eq!(
            bad.expect_err("bad auth").to_string(),
            ".dockerconfigjson: r.io: auth: not base64"
        );
        assert!(Keyring::default().add_secret(&BTreeMap::new()).is_err());
    }

    #[test]
    fn lookup_is_kubelets() {
        let mut k = Keyring::default();
        k.add("quay.io", user("any"));
        k.add("quay.io/team", user("team"));
        k.add("*.corp.example", user("glob"));
        k.add("https://index.docker.io/v1/", user("hub"));
        let names = |image: &str| {
            k.lookup(image)
                .into_iter()
                .map(|c| c.username)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names("quay.io/team/app:v1"),
            ["team", "any"],
            "most specific first"
        );
        assert_eq!(names("quay.io/other/app"), ["any"]);
        assert_eq!(names("reg.corp.example/app"), ["glob"]);
        assert!(
            names("a.reg.corp.example/app").is_empty(),
            "a glob is one label"
        );
        assert_eq!(names("busybox"), ["hub"]);
        assert_eq!(names("library/busybox:1.36"), ["hub"]);
        assert_eq!(names("docker.io/library/busybox"), ["hub"]);
        assert!(names("localhost:5000/app").is_empty());
        assert!(names("ghcr.io/x/y").is_empty());
    }
}
