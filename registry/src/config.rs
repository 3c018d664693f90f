//! Per-registry settings in k3s's `registries.yaml` format:
//!
//! ```yaml
//! mirrors:
//!   docker.io:                      # or "*" for every registry
//!     endpoint: ["https://mirror.lan:5000", "http://10.0.0.2:5000"]
//!     rewrite: {"^library/(.*)": "cache/$1"}
//! configs:
//!   "mirror.lan:5000":              # an endpoint's host[:port]
//!     auth: {username: edge, password: pull-me}   # or auth: base64, identity_token
//!     tls: {ca_file: /etc/picolet/ca.crt, cert_file: ..., key_file: ..., insecure_skip_verify: false}
//! ```
//!
//! As containerd under k3s: a registry's mirror endpoints are tried in
//! order, then its default endpoint (`https://<registry>/v2`,
//! `registry-1.docker.io` for docker.io); rewrites apply to the mirrors
//! only. Plain HTTP only where an endpoint says `http://`. Pure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use regex::Regex;
use serde::Deserialize;

use crate::{AuthFieldError, Credential};

/// Largest registries.yaml read.
const MAX_FILE: u64 = 1 << 20;

/// An endpoint URL that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("{url:?}: only http:// and https:// endpoints")]
    Scheme { url: String },
    #[error("{url:?}: no valid host")]
    Host { url: String },
}

/// An error in registries.yaml text; the message names the field.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error(transparent)]
    Yaml(#[from] serde_yaml::Error),
    /// `mirrors.<registry>.endpoint[<index>]` (`at` is `mirrors."<registry>"`).
    #[error("{at}.endpoint[{index}]: {source}")]
    Endpoint {
        at: String,
        index: usize,
        source: EndpointError,
    },
    #[error("{at}.rewrite[{pattern:?}]: {source}")]
    Rewrite {
        at: String,
        pattern: String,
        source: regex::Error,
    },
    /// `configs.<host>.auth` (`at` is `configs."<host>"`).
    #[error("{at}.auth: {source}")]
    Auth { at: String, source: AuthFieldError },
    #[error("{at}.tls: cert_file and key_file go together")]
    ClientPair { at: String },
}

/// A registries.yaml that could not be loaded; the message names the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {size} bytes, larger than the {MAX_FILE} allowed", path.display())]
    TooLarge { path: PathBuf, size: u64 },
    #[error("{}: {source}", path.display())]
    Parse { path: PathBuf, source: ParseError },
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileYaml {
    #[serde(default)]
    mirrors: BTreeMap<String, MirrorYaml>,
    #[serde(default)]
    configs: BTreeMap<String, HostYaml>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct MirrorYaml {
    #[serde(default)]
    endpoint: Vec<String>,
    #[serde(default)]
    rewrite: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct HostYaml {
    auth: Option<AuthYaml>,
    tls: Option<TlsYaml>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct AuthYaml {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    auth: String,
    #[serde(default)]
    identity_token: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TlsYaml {
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    #[serde(default)]
    insecure_skip_verify: bool,
}

/// Where a registry's API is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub https: bool,
    /// `host[:port]`, as in the Host header and `configs` keys.
    pub authority: String,
    /// The API root, `/v2` unless the endpoint URL names another path.
    pub api: String,
}

impl Endpoint {
    /// Parses `https://host[:port][/path]` (a bare `host[:port]` is HTTPS).
    pub fn parse(url: &str) -> Result<Self, EndpointError> {
        let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else if url.contains("://") {
            return Err(EndpointError::Scheme { url: url.into() });
        } else {
            (true, url)
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains(['@', '?', '#', ' ']) {
            return Err(EndpointError::Host { url: url.into() });
        }
        let api = if path.ends_with("/v2") {
            path.to_string()
        } else {
            format!("{path}/v2")
        };
        Ok(Self {
            https,
            authority: authority.to_string(),
            api,
        })
    }

    /// The host without the port (for TLS server names and `NO_PROXY`-like checks).
    pub fn host(&self) -> &str {
        split_port(&self.authority).0
    }

    /// The TCP port: explicit, else 443 / 80.
    pub fn port(&self) -> u16 {
        split_port(&self.authority)
            .1
            .unwrap_or(if self.https { 443 } else { 80 })
    }
}

/// `host:port` / `[v6]:port` / `host` → (host, port).
fn split_port(authority: &str) -> (&str, Option<u16>) {
    if let Some(rest) = authority.strip_prefix('[')
        && let Some((host, tail)) = rest.split_once(']')
    {
        return (host, tail.strip_prefix(':').and_then(|p| p.parse().ok()));
    }
    match authority.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => match p.parse() {
            Ok(port) => (h, Some(port)),
            Err(_) => (authority, None),
        },
        _ => (authority, None),
    }
}

/// TLS settings of one host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key (PEM), both or neither.
    pub client: Option<(PathBuf, PathBuf)>,
    pub insecure_skip_verify: bool,
}

/// `configs.<host>`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostConfig {
    pub auth: Option<Credential>,
    pub tls: Tls,
}

#[derive(Debug, Clone)]
struct Mirror {
    endpoints: Vec<Endpoint>,
    rewrites: Vec<(Regex, String)>,
}

/// One place to try, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub endpoint: Endpoint,
    /// The repository path at that endpoint (after a mirror's rewrite).
    pub repository: String,
    /// A mirror (not the registry's own default endpoint).
    pub mirror: bool,
}

/// A parsed registries.yaml.
#[derive(Debug, Clone, Default)]
pub struct Registries {
    mirrors: BTreeMap<String, Mirror>,
    configs: BTreeMap<String, HostConfig>,
}

impl Registries {
    /// Reads `path`; a missing file is an empty configuration. Errors name
    /// the file and the field.
    pub fn load(path: &Path) -> Result<Self, LoadError> {
        let io = |source| LoadError::Io {
            path: path.to_path_buf(),
            source,
        };
        let size = match std::fs::metadata(path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(io(e)),
        };
        if size > MAX_FILE {
            return Err(LoadError::TooLarge {
                path: path.to_path_buf(),
                size,
            });
        }
        let text = std::fs::read_to_string(path).map_err(io)?;
        Self::parse(&text).map_err(|source| LoadError::Parse {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Parses registries.yaml text; errors name the field.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let file: FileYaml = if text.trim().is_empty() {
            FileYaml::default()
        } else {
            serde_yaml::from_str(text)?
        };
        let mut mirrors = BTreeMap::new();
        for (registry, m) in file.mirrors {
            let at = format!("mirrors.{registry:?}");
            let endpoints = m
                .endpoint
                .iter()
                .enumerate()
                .map(|(index, e)| {
                    Endpoint::parse(e).map_err(|source| ParseError::Endpoint {
                        at: at.clone(),
                        index,
                        source,
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let rewrites = m
                .rewrite
                .into_iter()
                .map(|(pattern, to)| match Regex::new(&pattern) {
                    Ok(re) => Ok((re, to)),
                    Err(source) => Err(ParseError::Rewrite {
                        at: at.clone(),
                        pattern,
                        source,
                    }),
                })
                .collect::<Result<Vec<_>, _>>()?;
            mirrors.insert(
                registry,
                Mirror {
                    endpoints,
                    rewrites,
                },
            );
        }
        let mut configs = BTreeMap::new();
        for (host, c) in file.configs {
            let at = format!("configs.{host:?}");
            let auth = c
                .auth
                .map(|a| {
                    credential(a).map_err(|source| ParseError::Auth {
                        at: at.clone(),
                        source,
                    })
                })
                .transpose()?;
            let tls = match c.tls {
                None => Tls::default(),
                Some(t) => Tls {
                    ca_file: t.ca_file,
                    client: match (t.cert_file, t.key_file) {
                        (Some(c), Some(k)) => Some((c, k)),
                        (None, None) => None,
                        _ => {
                            return Err(ParseError::ClientPair { at });
                        }
                    },
                    insecure_skip_verify: t.insecure_skip_verify,
                },
            };
            configs.insert(host, HostConfig { auth, tls });
        }
        Ok(Self { mirrors, configs })
    }

    /// Where to look for `repository` of `registry` (e.g. `docker.io`,
    /// `library/busybox`), in order: the mirrors, then the default endpoint.
    pub fn plan(&self, registry: &str, repository: &str) -> Vec<Attempt> {
        let mut out = Vec::new();
        if let Some(m) = self.mirrors.get(registry).or_else(|| self.mirrors.get("*")) {
            let repository = m
                .rewrites
                .iter()
                .find(|(re, _)| re.is_match(repository))
                .map_or_else(
                    || repository.to_string(),
                    |(re, to)| re.replace(repository, to.as_str()).into_owned(),
                );
            for e in &m.endpoints {
                out.push(Attempt {
                    endpoint: e.clone(),
                    repository: repository.clone(),
                    mirror: true,
                });
            }
        }
        let upstream = Endpoint {
            https: true,
            authority: if registry == "docker.io" {
                "registry-1.docker.io".to_string()
            } else {
                registry.to_string()
            },
            api: "/v2".to_string(),
        };
        // A mirror at the registry's own address (`http://` for a registry
        // without TLS) replaces the default endpoint.
        if !out
            .iter()
            .any(|a| a.endpoint.authority == upstream.authority)
        {
            out.push(Attempt {
                endpoint: upstream,
                repository: repository.to_string(),
                mirror: false,
            });
        }
        out
    }

    /// `configs.<authority>`, if any.
    pub fn host(&self, authority: &str) -> Option<&HostConfig> {
        self.configs.get(authority)
    }
}

fn credential(a: AuthYaml) -> Result<Credential, AuthFieldError> {
    let mut c = Credential {
        username: a.username,
        password: a.password,
        identity_token: a.identity_token,
        registry_token: String::new(),
    };
    if !a.auth.is_empty() {
        let (u, p) = crate::decode_auth(&a.auth)?;
        c.username = u;
        c.password = p;
    }
    Ok(c)
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_installed_skeleton_is_an_empty_configuration() {
        let text = include_str!("../../packaging/registries.yaml");
        let r = Registries::parse(text).expect("parses");
        assert!(r.mirrors.is_empty() && r.configs.is_empty());
    }

    use super::*;

    const K3S: &str = r#"
mirrors:
  docker.io:
    endpoint:
      - "https://mirror.lan:5000"
      - "http://10.0.0.2:5000/cache"
    rewrite:
      "^library/(.*)": "hub/$1"
  "*":
    endpoint: ["https://all.lan"]
configs:
  "mirror.lan:5000":
    auth:
      username: edge
      password: pull-me
    tls:
      ca_file: /etc/picolet/ca.crt
      cert_file: /etc/picolet/client.crt
      key_file: /etc/picolet/client.key
  "registry.example.com":
    auth:
      auth: ZWRnZTpwdWxsLW1l
    tls:
      insecure_skip_verify: true
"#;

    #[test]
    fn mirrors_in_order_then_upstream_with_rewrites_on_mirrors_only() {
        let r = Registries::parse(K3S).expect("parse");
        let plan = r.plan("docker.io", "library/busybox");
        let got: Vec<(bool, &str, &str, &str, bool)> = plan
            .iter()
            .map(|a| {
                (
                    a.endpoint.https,
                    a.endpoint.authority.as_str(),
                    a.endpoint.api.as_str(),
                    a.repository.as_str(),
                    a.mirror,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (true, "mirror.lan:5000", "/v2", "hub/busybox", true),
                (false, "10.0.0.2:5000", "/cache/v2", "hub/busybox", true),
                (
                    true,
                    "registry-1.docker.io",
                    "/v2",
                    "library/busybox",
                    false
                ),
            ]
        );
        // The wildcard mirror serves every other registry.
        let plan = r.plan("quay.io", "team/app");
        assert_eq!(plan[0].endpoint.authority, "all.lan");
        assert_eq!(plan[1].endpoint.authority, "quay.io");
        assert_eq!(plan.len(), 2);
    }

    #[test]
    fn a_plain_http_mirror_at_the_registry_itself_replaces_it() {
        let r = Registries::parse(
            "mirrors: {\"127.0.0.1:5000\": {endpoint: [\"http://127.0.0.1:5000\"]}}",
        )
        .expect("parse");
        let plan = r.plan("127.0.0.1:5000", "x/y");
        assert_eq!(plan.len(), 1);
        assert!(!plan[0].endpoint.https);
    }

    #[test]
    fn no_file_means_the_registry_itself() {
        let r = Registries::parse("").expect("parse");
        let plan = r.plan("127.0.0.1:5000", "x/y");
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].endpoint.authority, "127.0.0.1:5000");
        assert_eq!(plan[0].endpoint.port(), 5000);
        assert!(plan[0].endpoint.https);
    }

    #[test]
    fn host_configs() {
        let r = Registries::parse(K3S).expect("parse");
        let m = r.host("mirror.lan:5000").expect("mirror");
        let auth = m.auth.as_ref().expect("auth");
        assert_eq!(
            (auth.username.as_str(), auth.password.as_str()),
            ("edge", "pull-me")
        );
        assert_eq!(
            m.tls.ca_file.as_deref(),
            Some(Path::new("/etc/picolet/ca.crt"))
        );
        assert!(m.tls.client.is_some());
        let e = r.host("registry.example.com").expect("example");
        assert_eq!(
            e.auth.as_ref().map(|a| a.password.as_str()),
            Some("pull-me")
        );
        assert!(e.tls.insecure_skip_verify);
        assert!(r.host("other").is_none());
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (
                "mirrors: {docker.io: {endpoint: [\"ftp://x\"]}}",
                "mirrors.\"docker.io\".endpoint[0]: \"ftp://x\": only http:// and https:// endpoints",
            ),
            (
                "mirrors: {docker.io: {rewrite: {\"(\": x}}}",
                "mirrors.\"docker.io\".rewrite[\"(\"]",
            ),
            (
                "configs: {h: {tls: {cert_file: /c}}}",
                "configs.\"h\".tls: cert_file and key_file go together",
            ),
            (
                "configs: {h: {auth: {auth: \"!!\"}}}",
                "configs.\"h\".auth: auth: not base64",
            ),
            (
                "mirrors: {docker.io: {endpoints: []}}",
                "unknown field `endpoints`",
            ),
        ];
        for (text, want) in cases {
            let err = Registries::parse(text).expect_err(text).to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn load_errors_name_the_file_and_keep_the_io_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let none = Registries::load(&dir.path().join("none.yaml")).expect("no file");
        assert_eq!(none.plan("quay.io", "a/b").len(), 1);
        let e = Registries::load(dir.path()).expect_err("a directory");
        match &e {
            LoadError::Io { path, source } => {
                assert_eq!(path, dir.path());
                assert_eq!(source.kind(), std::io::ErrorKind::IsADirectory);
            }
            other => panic!("{other:?}"),
        }
        let bad = dir.path().join("registries.yaml");
        std::fs::write(&bad, "configs: {h: {tls: {key_file: /k}}}").expect("write");
        assert_eq!(
            Registries::load(&bad).expect_err("bad").to_string(),
            format!(
                "{}: configs.\"h\".tls: cert_file and key_file go together",
                bad.display()
            )
        );
    }

    #[test]
    fn endpoints_and_ports() {
        let e = Endpoint::parse("[::1]:5000").expect("v6");
        assert_eq!((e.host(), e.port()), ("::1", 5000));
        let e = Endpoint::parse("http://reg.lan").expect("http");
        assert_eq!((e.host(), e.port(), e.api.as_str()), ("reg.lan", 80, "/v2"));
        let e = Endpoint::parse("https://reg.lan/v2/").expect("v2");
        assert_eq!(e.api, "/v2");
        assert_eq!(
            Endpoint::parse("https:///v2"),
            Err(EndpointError::Host {
                url: "https:///v2".into()
            })
        );
    }
}
