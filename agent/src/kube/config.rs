//! kubeconfig files (`--kubeconfig`, kubectl's format): the current
//! context's cluster (server, CA) and user (client certificate and key, or
//! a bearer token). Relative paths are relative to the file, as kubectl
//! resolves them; `*-data` fields hold base64 of the same PEM. Errors name
//! the file and the field.

use std::path::{Path, PathBuf};

use edge_config::FieldError;
use serde::Deserialize;

/// Largest kubeconfig, CA, certificate or key file read.
const MAX_FILE: u64 = 1 << 20;

/// How to reach and authenticate to the API server.
#[derive(Clone, PartialEq, Eq)]
pub struct KubeConfig {
    /// `https://host:port` (a path prefix is not supported).
    pub host: String,
    pub port: u16,
    /// PEM of the CAs that sign the server's certificate; None: the
    /// server is not verified (`insecure-skip-tls-verify`).
    pub ca: Option<Vec<u8>>,
    /// PEM client certificate (chain) and key.
    pub client_cert: Option<(Vec<u8>, Vec<u8>)>,
    pub token: Option<String>,
}

impl std::fmt::Debug for KubeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key or the token.
        f.debug_struct("KubeConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("ca", &self.ca.is_some())
            .field("client_cert", &self.client_cert.is_some())
            .field("token", &self.token.is_some())
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Raw {
    current_context: Option<String>,
    #[serde(default)]
    contexts: Vec<Named<Context>>,
    #[serde(default)]
    clusters: Vec<Named<Cluster>>,
    #[serde(default)]
    users: Vec<Named<User>>,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "context", alias = "cluster", alias = "user")]
    value: Option<T>,
}

#[derive(Deserialize)]
struct Context {
    cluster: String,
    user: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    server: String,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct User {
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<String>,
}

/// Reads and resolves the kubeconfig at `path`.
pub fn load(path: &Path) -> Result<KubeConfig, FieldError> {
    let err = |field: &str, message: String| FieldError {
        file: path.to_path_buf(),
        field: field.into(),
        message,
    };
    let text = read_bounded(path).map_err(|e| err("", e.to_string()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    parse(&text, &|f: &str| read_bounded(&dir.join(f)), path)
}

/// A file a kubeconfig names (or the kubeconfig itself) could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is over {max} bytes", path.display())]
    TooLarge { path: PathBuf, max: u64 },
}

fn read_bounded(path: &Path) -> Result<String, ReadError> {
    use std::io::Read;
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let f = std::fs::File::open(path).map_err(io)?;
    let mut text = String::new();
    f.take(MAX_FILE + 1).read_to_string(&mut text).map_err(io)?;
    if text.len() as u64 > MAX_FILE {
        return Err(ReadError::TooLarge {
            path: path.to_path_buf(),
            max: MAX_FILE,
        });
    }
    Ok(text)
}

/// What is wrong with a cluster's `server`.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{0:?}: only https:// servers are supported")]
    NotHttps(String),
    #[error("{0:?}: a path after the host is not supported")]
    Path(String),
    #[error("{0:?}: unclosed [")]
    Unclosed(String),
    #[error("{0:?}: bad port")]
    Port(String),
    #[error("{0:?}: no host")]
    NoHost(String),
}

/// Resolves `text` (the file at `file`); `read` reads a file named in it.
pub fn parse(
    text: &str,
    read: &dyn Fn(&str) -> Result<String, ReadError>,
    file: &Path,
) -> Result<KubeConfig, FieldError> {
    let err = |field: &str, message: String| FieldError {
        file: file.to_path_buf(),
        field: field.into(),
        message,
    };
    let raw: Raw = serde_yaml::from_str(text).map_err(|e| err("", e.to_string()))?;
    let current = raw
        .current_context
        .filter(|c| !c.is_empty())
        .ok_or_else(|| err("current-context", "required".into()))?;
    let (ci, ctx) = find(&raw.contexts, &current)
        .ok_or_else(|| err("current-context", format!("no context named {current:?}")))?;
    let at = |what: &str, i: usize, field: &str| format!("{what}[{i}].{field}");
    let (ki, cluster) = find(&raw.clusters, &ctx.cluster).ok_or_else(|| {
        err(
            &at("contexts", ci, "context.cluster"),
            format!("no cluster named {:?}", ctx.cluster),
        )
    })?;
    let user = match &ctx.user {
        Some(u) => {
            find(&raw.users, u)
                .ok_or_else(|| {
                    err(
                        &at("contexts", ci, "context.user"),
                        format!("no user named {u:?}"),
                    )
                })?
                .1
        }
        None => &User::default(),
    };
    let server_field = at("clusters", ki, "cluster.server");
    let (host, port) =
        split_server(&cluster.server).map_err(|e| err(&server_field, e.to_string()))?;
    let pem = |inline: &Option<String>,
               path: &Option<String>,
               field: &str|
     -> Result<Option<Vec<u8>>, FieldError> {
        match (inline, path) {
            (Some(d), _) => base64_decode(d)
                .map(Some)
                .ok_or_else(|| err(&format!("{field}-data"), "not base64".into())),
            (None, Some(p)) => read(p)
                .map(|t| Some(t.into_bytes()))
                .map_err(|e| err(field, e.to_string())),
            (None, None) => Ok(None),
        }
    };
    let ca = pem(
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
        &at("clusters", ki, "cluster.certificate-authority"),
    )?;
    if ca.is_none() && !cluster.insecure_skip_tls_verify {
        return Err(err(
            &at("clusters", ki, "cluster.certificate-authority"),
            "required (or insecure-skip-tls-verify: true)".into(),
        ));
    }
    let ui = raw
        .users
        .iter()
        .position(|u| Some(&u.name) == ctx.user.as_ref())
        .unwrap_or(0);
    let cert = pem(
        &user.client_certificate_data,
        &user.client_certificate,
        &at("users", ui, "user.client-certificate"),
    )?;
    let key = pem(
        &user.client_key_data,
        &user.client_key,
        &at("users", ui, "user.client-key"),
    )?;
    let client_cert = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        (Some(_), None) => {
            return Err(err(
                &at("users", ui, "user.client-key"),
                "required with a client certificate".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(err(
                &at("users", ui, "user.client-certificate"),
                "required with a client key".into(),
            ));
        }
    };
    let token = match (&user.token, &user.token_file) {
        (Some(t), _) => Some(t.trim().to_string()),
        (None, Some(f)) => Some(
            read(f)
                .map_err(|e| err(&at("users", ui, "user.tokenFile"), e.to_string()))?
                .trim()
                .to_string(),
        ),
        (None, None) => None,
    };
    Ok(KubeConfig {
        host,
        port,
        ca: if cluster.insecure_skip_tls_verify {
            None
        } else {
            ca
        },
        client_cert,
        token,
    })
}

fn find<'a, T>(list: &'a [Named<T>], name: &str) -> Option<(usize, &'a T)> {
    list.iter()
        .enumerate()
        .find(|(_, n)| n.name == name)
        .and_then(|(i, n)| Some((i, n.value.as_ref()?)))
}

/// `https://host[:port]` → (host, port); IPv6 hosts in brackets.
fn split_server(server: &str) -> Result<(String, u16), ServerError> {
    let s = || server.to_string();
    let rest = server
        .strip_prefix("https://")
        .ok_or_else(|| ServerError::NotHttps(s()))?;
    let authority = rest.trim_end_matches('/');
    if authority.contains('/') {
        return Err(ServerError::Path(s()));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, p) = v6
            .split_once(']')
            .ok_or_else(|| ServerError::Unclosed(s()))?;
        (h.to_string(), p.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (authority.to_string(), None),
        }
    };
    let port = match port {
        Some(p) => p.parse().map_err(|_| ServerError::Port(s()))?,
        None => 443,
    };
    if host.is_empty() {
        return Err(ServerError::NoHost(s()));
    }
    Ok((host, port))
}

/// Standard base64 (padding optional), whitespace ignored.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let text: String = s.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    LENIENT.decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_fields_take_base64_with_or_without_padding_and_line_breaks() {
        assert_eq!(base64_decode("aGk=").as_deref(), Some(&b"hi"[..]));
        assert_eq!(base64_decode("aGk").as_deref(), Some(&b"hi"[..]));
        assert_eq!(base64_decode("aG\nk=\n").as_deref(), Some(&b"hi"[..]));
        assert_eq!(base64_decode("a!k="), None);
    }

    const FILE: &str = "/etc/picolet/node.kubeconfig";

    fn files(name: &str) -> Result<String, ReadError> {
        match name {
            "pki/ca.crt" => Ok("CA PEM".into()),
            "pki/node.crt" => Ok("CERT PEM".into()),
            "pki/node.key" => Ok("KEY PEM".into()),
            "token" => Ok("abc.def\n".into()),
            other => Err(ReadError::Io {
                path: other.into(),
                source: std::io::ErrorKind::NotFound.into(),
            }),
        }
    }

    fn parse_str(text: &str) -> Result<KubeConfig, String> {
        parse(text, &files, Path::new(FILE)).map_err(|e| e.to_string())
    }

    const CERTS: &str = r#"
apiVersion: v1
kind: Config
clusters:
- cluster: {certificate-authority: pki/ca.crt, server: "https://192.0.2.10:6443"}
  name: local
users:
- name: node
  user: {client-certificate: pki/node.crt, client-key: pki/node.key}
contexts:
- context: {cluster: local, user: node}
  name: default
current-context: default
preferences: {}
"#;

    #[test]
    fn client_certificates_from_files_next_to_the_kubeconfig() {
        let k = parse_str(CERTS).expect("valid");
        assert_eq!((k.host.as_str(), k.port), ("192.0.2.10", 6443));
        assert_eq!(k.ca.as_deref(), Some(&b"CA PEM"[..]));
        assert_eq!(
            k.client_cert,
            Some((b"CERT PEM".to_vec(), b"KEY PEM".to_vec()))
        );
        assert_eq!(k.token, None);
        // Debug output never holds the key.
        assert!(!format!("{k:?}").contains("KEY"));
    }

    #[test]
    fn inline_data_tokens_and_ipv6_servers() {
        let k = parse_str(
            r#"
clusters: [{name: c, cluster: {server: "https://[fd00::1]", certificate-authority-data: "Q0EgUEVN"}}]
users: [{name: u, user: {tokenFile: token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"#,
        )
        .expect("valid");
        assert_eq!((k.host.as_str(), k.port), ("fd00::1", 443));
        assert_eq!(k.ca.as_deref(), Some(&b"CA PEM"[..]));
        assert_eq!(k.token.as_deref(), Some("abc.def"));
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let cases = [
            (
                CERTS.replace("current-context: default", "current-context: other"),
                "current-context: no context named \"other\"",
            ),
            (
                CERTS.replace("https://192.0.2.10:6443", "http://192.0.2.10"),
                "clusters[0].cluster.server: \"http://192.0.2.10\": only https://",
            ),
            (
                CERTS.replace("certificate-authority: pki/ca.crt, ", ""),
                "clusters[0].cluster.certificate-authority: required",
            ),
            (
                CERTS.replace("pki/node.key", "pki/gone.key"),
                "users[0].user.client-key: read pki/gone.key",
            ),
            (
                CERTS.replace(", client-key: pki/node.key", ""),
                "users[0].user.client-key: required with a client certificate",
            ),
            (
                CERTS.replace("user: node}", "user: nobody}"),
                "contexts[0].context.user: no user named \"nobody\"",
            ),
        ];
        for (text, want) in cases {
            let e = parse_str(&text).expect_err(want);
            assert!(e.starts_with(FILE), "{e}");
            assert!(e.contains(want), "{e}\nwanted {want}");
        }
    }
}
