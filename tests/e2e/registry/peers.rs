//! The registry tests' peers and fixtures: Debian's `docker-registry` on
//! 127.0.0.1 (plain, TLS with a test CA, htpasswd or a token server), and
//! a store with a puller configured by a registries.yaml.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use images::{ImageStore, Platform, Reference, StoreOptions};
use registry::{Credential, Options, Progress, Puller};

use super::token_server::{self, TokenServer};

pub(crate) const USER: &str = "edge";
pub(crate) const PASSWORD: &str = "pull-me";

/// Whether the peers are installed; CI must have them.
pub(crate) fn require_peers() -> bool {
    let missing: Vec<&str> = ["docker-registry", "skopeo", "openssl", "htpasswd"]
        .into_iter()
        .filter(|c| !crate::common::have(c))
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI must have {missing:?} (scripts/setup.sh installs docker-registry, skopeo, openssl, apache2-utils)"
    );
    eprintln!("SKIP registry tests: {missing:?} not installed");
    false
}

pub(crate) fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A test CA and a server certificate for 127.0.0.1 signed by it.
pub(crate) struct Pki {
    pub(crate) ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Pki {
    pub(crate) fn make(dir: &Path, name: &str) -> Self {
        let p = |f: &str| dir.join(format!("{name}-{f}"));
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        run(Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-days",
                "2",
                "-subj",
                &format!("/CN={name} test CA"),
            ])
            .args(ec)
            .arg("-keyout")
            .arg(p("ca.key"))
            .arg("-out")
            .arg(p("ca.crt")));
        run(Command::new("openssl")
            .args(["req", "-subj", "/CN=127.0.0.1"])
            .args(ec)
            .arg("-keyout")
            .arg(p("server.key"))
            .arg("-out")
            .arg(p("server.csr")));
        std::fs::write(
            p("ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .expect("ext");
        run(Command::new("openssl")
            .args(["x509", "-req", "-days", "2", "-CAcreateserial"])
            .arg("-in")
            .arg(p("server.csr"))
            .arg("-CA")
            .arg(p("ca.crt"))
            .arg("-CAkey")
            .arg(p("ca.key"))
            .arg("-extfile")
            .arg(p("ext"))
            .arg("-out")
            .arg(p("server.crt")));
        Self {
            ca: p("ca.crt"),
            cert: p("server.crt"),
            key: p("server.key"),
        }
    }
}

/// How the registry authenticates.
pub(crate) enum Auth<'a> {
    None,
    /// htpasswd: HTTP basic.
    Htpasswd,
    /// Bearer tokens from this token server.
    Token(&'a TokenServer),
}

/// A `docker-registry` on 127.0.0.1 with its storage in a temp dir; killed
/// by PID on drop.
pub(crate) struct Registry {
    child: Child,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) addr: String,
    pub(crate) tls: Option<Pki>,
    auth: bool,
}

impl Registry {
    pub(crate) fn start(tls: bool, htpasswd: bool) -> Self {
        Self::start_with(tls, if htpasswd { Auth::Htpasswd } else { Auth::None })
    }

    pub(crate) fn start_with(tls: bool, auth: Auth<'_>) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("picolet-registry-")
            .tempdir()
            .expect("tempdir");
        let pki = tls.then(|| Pki::make(dir.path(), "registry"));
        let mut config = format!(
            // Port 0: the kernel's pick, which it logs (at info).
            "version: 0.1\nlog: {{level: info}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\nhttp:\n  addr: 127.0.0.1:0\n",
            dir.path().join("data").display()
        );
        if let Some(p) = &pki {
            config += &format!(
                "  tls: {{certificate: {}, key: {}}}\n",
                p.cert.display(),
                p.key.display()
            );
        }
        if let Auth::Token(t) = &auth {
            config += &format!(
                "auth:\n  token: {{realm: \"{}\", service: {}, issuer: {}, rootcertbundle: {}}}\n",
                t.realm,
                token_server::SERVICE,
                token_server::ISSUER,
                t.cert.display()
            );
        }
        if let Auth::Htpasswd = auth {
            let out = Command::new("htpasswd")
                .args(["-Bbn", USER, PASSWORD])
                .output()
                .expect("htpasswd");
            std::fs::write(dir.path().join("htpasswd"), out.stdout).expect("htpasswd file");
            config += &format!(
                "auth:\n  htpasswd: {{realm: picolet-test, path: {}}}\n",
                dir.path().join("htpasswd").display()
            );
        }
        std::fs::write(dir.path().join("config.yml"), config).expect("config");
        let log_path = dir.path().join("registry.log");
        let log = std::fs::File::create(&log_path).expect("log");
        let mut child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start docker-registry");
        // `listening on 127.0.0.1:PORT` once it has bound its port.
        let addr = crate::common::eventually(
            "docker-registry to listen",
            Duration::from_secs(20),
            || {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let at = log.find("listening on 127.0.0.1:")? + "listening on ".len();
                let end = log[at..].find(|c: char| c != '.' && c != ':' && !c.is_ascii_digit())?;
                Some(log[at..at + end].to_string())
            },
            || {
                let _ = child.kill();
                let _ = child.wait();
                std::fs::read_to_string(&log_path).unwrap_or_default()
            },
        );
        Self {
            child,
            dir,
            addr,
            tls: pki,
            auth: !matches!(auth, Auth::None),
        }
    }

    /// registries.yaml for this registry without TLS: a mirror entry at its
    /// own address that says `http://`.
    pub(crate) fn plain_http_yaml(&self) -> String {
        format!(
            "mirrors:\n  \"{a}\":\n    endpoint: [\"http://{a}\"]\n",
            a = self.addr
        )
    }

    /// Pushes image `tag` of an OCI layout as `repo:tag`; `all`: every platform.
    pub(crate) fn push(&self, layout: &Path, tag: &str, repo_tag: &str, all: bool) {
        let src = format!("oci:{}:{tag}", layout.display());
        let mut cmd = Command::new("skopeo");
        cmd.args(["--insecure-policy", "copy", "-q"]);
        if all {
            cmd.arg("--all");
        }
        match &self.tls {
            Some(p) => {
                let certs = self.dir.path().join("certs.d");
                std::fs::create_dir_all(&certs).expect("certs dir");
                std::fs::copy(&p.ca, certs.join("ca.crt")).expect("ca");
                cmd.arg("--dest-cert-dir").arg(certs);
            }
            None => {
                cmd.arg("--dest-tls-verify=false");
            }
        }
        if self.auth {
            cmd.args(["--dest-creds", &format!("{USER}:{PASSWORD}")]);
        }
        run(cmd
            .arg(src)
            .arg(format!("docker://{}/{repo_tag}", self.addr)));
    }

    /// The file a blob is stored in.
    pub(crate) fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// Kills the registry (by PID), keeping its files: the network is gone.
    pub(crate) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A store and a puller in a temp dir with this registries.yaml.
pub(crate) struct Node {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) store: Arc<ImageStore>,
    pub(crate) puller: Arc<Puller>,
}

impl Node {
    /// Where a download of `digest` (`sha256:…`) is kept while partial.
    pub(crate) fn partial(&self, digest: &str) -> std::path::PathBuf {
        self.dir
            .path()
            .join("store/partial")
            .join(digest.trim_start_matches("sha256:"))
    }

    pub(crate) fn new(registries_yaml: &str) -> Self {
        Self::for_platform(registries_yaml, Platform::host())
    }

    pub(crate) fn for_platform(registries_yaml: &str, platform: Platform) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("picolet-pull-")
            .tempdir()
            .expect("tempdir");
        std::fs::write(dir.path().join("registries.yaml"), registries_yaml).expect("yaml");
        let store = Arc::new(
            ImageStore::open_with(
                dir.path().join("store"),
                StoreOptions {
                    platform,
                    ..Default::default()
                },
            )
            .expect("store"),
        );
        let puller = Arc::new(Puller::new(
            store.clone(),
            Options {
                registry_config: dir.path().join("registries.yaml"),
                auth_file: None,
                parallel: 3,
            },
        ));
        Self { dir, store, puller }
    }

    pub(crate) async fn pull(
        &self,
        r: &str,
        cred: Option<Credential>,
    ) -> Result<(images::ImageRecord, Arc<Progress>), registry::Error> {
        let progress = Arc::new(Progress::default());
        let rec = self
            .puller
            .pull(
                &Reference::parse(r).expect("reference"),
                cred,
                progress.clone(),
            )
            .await?;
        Ok((rec, progress))
    }

    pub(crate) fn file_in_image(&self, r: &str, path: &str) -> Option<String> {
        let rec = self.store.get(r)?;
        self.store
            .layer_dirs(&rec)
            .iter()
            .find_map(|d| std::fs::read_to_string(d.join(path)).ok())
    }
}

pub(crate) fn right() -> Option<Credential> {
    Some(Credential {
        username: USER.into(),
        password: PASSWORD.into(),
        ..Default::default()
    })
}

/// The project's busybox layer (`BUSYBOX`, else /bin/busybox), a base for
/// the tests' large images.
pub(crate) fn busybox_base() -> xtask::Layer {
    xtask::busybox_layer(Path::new(
        &std::env::var("BUSYBOX").unwrap_or_else(|_| "/bin/busybox".into()),
    ))
    .expect("busybox layer")
}
