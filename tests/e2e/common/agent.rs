//! A running `picolet agent` beside a test [`Shim`], on private paths: its
//! own static pod folder, log dir, cgroup root (under the shim's test
//! cgroups, removed on drop) and HTTP ports. Killed by PID on drop.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::{Shim, picolet};

pub struct Agent {
    pub shim: Shim,
    pub child: Option<Child>,
    pub healthz_port: u16,
    /// The read-only port (plain HTTP, no authentication): what `get`
    /// and `request` use.
    pub port: u16,
    /// The API port (HTTPS, authenticated).
    pub api_port: u16,
    pub extra_config: String,
    /// Appended to the `picolet:` section (indented lines).
    pub picolet_extra: String,
    /// The CRI socket the agent uses: the shim's unless set.
    pub cri_socket: Option<PathBuf>,
    /// `agent`, or `up` (then it runs its own shim on the test shim's paths).
    pub command: &'static str,
    /// Give the process a stderr pipe whose reader is gone (`| tee` after
    /// Ctrl-C) instead of the log file.
    pub stderr_unread: bool,
    /// `picolet.defaultNetwork`: off unless a test wants `up` to write the
    /// built-in network (only in a network namespace of the test's own).
    pub default_network: bool,
    /// The binary to run instead of the one cargo built.
    pub binary: Option<PathBuf>,
}

/// A port on 127.0.0.1 for a program that only takes a port number (0
/// means "off" for the agent's read-only port; `up` starts the agent again
/// after a kill, on the same numbers; busybox httpd in a pod): the kernel's
/// pick, left in TIME_WAIT. Where a program can bind port 0 and say which
/// port it got, or take a bound socket, the tests do that instead.
///
/// The accepted end closes first, so the TIME_WAIT socket holds the port:
/// the kernel then hands it to no bind to port 0 (another test's server,
/// another reservation) for 60 s, while a server binding it by number with
/// SO_REUSEADDR (Rust's std and tokio, Go, busybox, openssl all set it)
/// gets it. What is left of the race: an outgoing connection's source
/// port, or a program binding this number on purpose.
pub fn reserved_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    let addr = listener.local_addr().expect("bound address");
    let client = std::net::TcpStream::connect(addr).expect("connect to ourselves");
    let (accepted, _) = listener.accept().expect("accept");
    drop(accepted);
    drop(client);
    addr.port()
}

impl Agent {
    /// Starts a shim with the busybox test image, and an agent on it.
    /// `extra_config` is appended to the KubeletConfiguration.
    pub fn start(extra_config: &str) -> Self {
        let mut a = Self::prepare(extra_config);
        a.spawn();
        a
    }

    /// A shim and the agent's paths, config not written, agent not started:
    /// for tests that point the agent at another runtime.
    pub fn prepare(extra_config: &str) -> Self {
        Self::prepare_on(Shim::start(), extra_config)
    }

    /// As [`Agent::start`], on `shim`; in its network namespace when it has
    /// one (as kubelet shares the node's network with the runtime).
    pub fn start_on(shim: Shim, extra_config: &str) -> Self {
        let mut a = Self::prepare_on(shim, extra_config);
        a.spawn();
        a
    }

    /// As [`Agent::prepare`], on `shim`.
    pub fn prepare_on(shim: Shim, extra_config: &str) -> Self {
        shim.import(&super::test_images().busybox_oci_archive);
        let a = Self {
            shim,
            child: None,
            // Bound by the agent (port 0) and read from its log at spawn.
            healthz_port: 0,
            port: 0,
            api_port: 0,
            extra_config: extra_config.into(),
            picolet_extra: String::new(),
            cri_socket: None,
            command: "agent",
            stderr_unread: false,
            default_network: false,
            binary: None,
        };
        std::fs::create_dir_all(a.manifests()).expect("mkdir");
        std::fs::create_dir_all(a.host_dir()).expect("mkdir");
        a
    }

    pub fn dir(&self) -> PathBuf {
        self.shim.dir.path().to_path_buf()
    }
    pub fn manifests(&self) -> PathBuf {
        self.dir().join("manifests")
    }
    /// A host directory for hostPath volumes of test pods.
    pub fn host_dir(&self) -> PathBuf {
        self.dir().join("host")
    }
    pub fn config_path(&self) -> PathBuf {
        self.dir().join("config.yaml")
    }
    pub fn cgroup_root(&self) -> String {
        format!("/picolet-test/{}/agent", self.shim.name())
    }
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir().join("agent.log")).unwrap_or_default()
    }

    pub fn write_config(&self) {
        // How full the host's disk is must not decide what a test sees
        // (kubelet's default disk thresholds would have the eviction
        // manager remove the test image before the test's pod names it):
        // memory only, unless the test sets its own.
        let eviction = if self.extra_config.contains("evictionHard") {
            self.extra_config.clone()
        } else {
            format!(
                "evictionHard: {{memory.available: 1Mi}}\n{}",
                self.extra_config
            )
        };
        let text = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             staticPodPath: {}\nfileCheckFrequency: 2s\nsyncFrequency: 10s\n\
             healthzPort: {}\nreadOnlyPort: {}\nport: {}\npodLogsDir: {}\ncgroupRoot: {}\npodPidsLimit: 256\n{}\
             picolet:\n  nodeName: e2e\n  nodeIP: 127.0.0.1\n  dataDir: {}\n  criSocket: {}\n\
             \x20 restartBackoffInitial: 1s\n  restartBackoffMax: 4s\n\
             \x20 runDir: {}\n  imagesDir: {}\n  cniConfDir: {}\n  cniBinDir: {}/cni/bin,/usr/lib/cni\n\
             \x20 defaultNetwork: {}\n{}",
            self.manifests().display(),
            self.healthz_port,
            self.port,
            self.api_port,
            self.dir().join("logs").display(),
            self.cgroup_root(),
            eviction,
            self.shim.root().display(),
            self.cri_socket
                .clone()
                .unwrap_or_else(|| self.shim.socket())
                .display(),
            self.dir().join("run").display(),
            self.shim.images_dir().display(),
            self.shim.cni_conf_dir().display(),
            self.dir().display(),
            self.default_network,
            self.picolet_extra,
        );
        std::fs::write(self.config_path(), text).expect("config");
    }

    pub fn spawn(&mut self) {
        // The agent binds port 0 and logs the port it got; but `up` restarts
        // a killed agent itself, and that one would bind new ports, and
        // with no log there is nothing to read them from: reserve them.
        let fixed = self.stderr_unread || self.command == "up";
        // The read-only port has no "pick one" (0 is off): always reserved.
        if fixed {
            (self.healthz_port, self.port, self.api_port) =
                (reserved_port(), reserved_port(), reserved_port());
        } else {
            (self.healthz_port, self.port, self.api_port) = (0, reserved_port(), 0);
        }
        let log_start = self.log().len();
        self.write_config();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir().join("agent.log"))
            .expect("log");
        // nsenter execs the agent: the child's pid is the agent's.
        let mut cmd = match self.shim.netns() {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net={}", ns.display()))
                    .arg(self.binary.as_deref().unwrap_or(picolet().as_ref()));
                c
            }
            None => Command::new(self.binary.as_deref().unwrap_or(picolet().as_ref())),
        };
        let mut child = cmd
            .arg(self.command)
            .arg("--config")
            .arg(self.config_path())
            // PICOLET_LOG passes through; unset, picolet's own default.
            .stdout(Stdio::null())
            .stderr(if self.stderr_unread {
                Stdio::piped()
            } else {
                Stdio::from(log)
            })
            .spawn()
            .expect("spawn picolet agent");
        // No reader: every write to that stderr fails with EPIPE.
        drop(child.stderr.take());
        self.child = Some(child);
        if !fixed {
            let mut ports = None;
            super::eventually(
                "the agent's HTTP ports in its log",
                Duration::from_secs(20),
                || {
                    ports = http_ports(self.log().get(log_start..).unwrap_or(""));
                    ports.is_some()
                },
                || format!("agent log:\n{}", self.log()),
            );
            (self.healthz_port, self.api_port) = ports.expect("ports");
        }
        super::eventually(
            "the agent's /healthz",
            Duration::from_secs(20),
            || self.get("/healthz").is_some(),
            || format!("agent log:\n{}", self.log()),
        );
    }

    /// Children of the process we started (for `up`: its shim and agent).
    pub fn children(&self) -> Vec<(i32, String)> {
        let Some(c) = &self.child else {
            return Vec::new();
        };
        let pid = c.id();
        let list =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        list.split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .map(|p| {
                let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                (p, cmd)
            })
            .collect()
    }

    /// SIGKILLs the agent we started.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then SIGKILL after 5 s.
    pub fn stop(&mut self) {
        if let Some(c) = self.child.take() {
            super::terminate(c);
        }
    }

    /// Writes a manifest atomically (temp file + rename), as editors and
    /// config management do.
    pub fn write_manifest(&self, file: &str, text: &str) {
        let tmp = self.manifests().join(format!(".{file}.tmp"));
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, self.manifests().join(file)).expect("rename");
    }

    pub fn remove_manifest(&self, file: &str) {
        std::fs::remove_file(self.manifests().join(file)).expect("rm");
    }

    /// GET on the API port (healthz on its own port): status code and body,
    /// or why there was no answer.
    pub fn request(&self, path: &str) -> Result<(u16, String), String> {
        let port = if path == "/healthz" {
            self.healthz_port
        } else {
            self.port
        };
        let mut s = match self.shim.netns() {
            // The agent's loopback is its namespace's: connect from a
            // thread that has joined it.
            Some(ns) => std::thread::spawn(move || {
                let f = std::fs::File::open(&ns).map_err(|e| e.to_string())?;
                nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(|e| format!("setns {}: {e}", ns.display()))?;
                std::net::TcpStream::connect(("127.0.0.1", port))
                    .map_err(|e| format!("connect to port {port}: {e}"))
            })
            .join()
            .map_err(|_| "connect thread panicked".to_string())??,
            None => std::net::TcpStream::connect(("127.0.0.1", port))
                .map_err(|e| format!("connect to port {port}: {e}"))?,
        };
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").map_err(|e| e.to_string())?;
        let mut out = String::new();
        s.read_to_string(&mut out)
            .map_err(|e| format!("GET {path}: {e}"))?;
        let (head, body) = out
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("GET {path}: no HTTP answer: {out:?}"))?;
        let code = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("GET {path}: bad status line: {head:?}"))?;
        Ok((code, body.to_string()))
    }

    /// The body of a 2xx answer to GET `path`.
    pub fn get(&self, path: &str) -> Option<String> {
        self.request(path)
            .ok()
            .filter(|(code, _)| (200..300).contains(code))
            .map(|(_, body)| body)
    }

    /// The `items` of a v1 list the agent serves; an error when the agent
    /// does not answer 2xx with a list (an empty list from a dead agent
    /// would let "gone" assertions pass).
    pub fn try_items(&self, path: &str) -> Result<Vec<Value>, String> {
        let (code, body) = self.request(path)?;
        if !(200..300).contains(&code) {
            return Err(format!("GET {path}: {code}: {body}"));
        }
        let v: Value =
            serde_json::from_str(&body).map_err(|e| format!("GET {path}: not JSON: {e}"))?;
        v["items"]
            .as_array()
            .cloned()
            .ok_or_else(|| format!("GET {path}: no items: {body}"))
    }

    /// Every pod with its status; panics when the agent does not answer.
    pub fn pods(&self) -> Vec<Value> {
        self.try_items("/pods")
            .unwrap_or_else(|e| panic!("{e}\nagent log:\n{}", self.log()))
    }

    /// The pod whose name starts with `name-` (static pods get `-<node>`).
    pub fn pod(&self, name: &str) -> Option<Value> {
        find_pod(self.pods(), name)
    }

    /// Every event; panics when the agent does not answer.
    pub fn events(&self) -> Vec<Value> {
        self.try_items("/events")
            .unwrap_or_else(|e| panic!("{e}\nagent log:\n{}", self.log()))
    }

    /// Waits until `cond(pod)` holds for pod `name`; returns that pod.
    pub fn wait_pod(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        cond: impl Fn(&Value) -> bool,
    ) -> Value {
        super::eventually(
            format_args!("{name}: {what}"),
            timeout,
            || {
                // Not answering yet (restarting) counts as "not yet".
                let pod = self.try_items("/pods").ok().and_then(|p| find_pod(p, name));
                match pod {
                    Some(p) if cond(&p) => Ok(p),
                    other => Err(format!(
                        "pod: {}",
                        serde_json::to_string_pretty(&other).unwrap_or_default()
                    )),
                }
            },
            || {
                format!(
                    "agent log:\n{}\nshim log tail:\n{}",
                    self.log(),
                    tail(&self.shim.log(), 30)
                )
            },
        )
    }

    /// Waits until `cond()` holds.
    pub fn wait(&self, what: &str, timeout: Duration, cond: impl Fn() -> bool) {
        super::eventually(what, timeout, cond, || {
            format!("agent log:\n{}", self.log())
        });
    }
}

/// (healthz port, API port) from the agent's `serving HTTP` log lines.
/// (healthz, API) ports from the agent's "serving" lines.
fn http_ports(log: &str) -> Option<(u16, u16)> {
    let (mut healthz, mut api) = (None, None);
    for line in log.lines().filter(|l| l.contains("serving HTTP")) {
        let port = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("addr="))
            .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
            .map(|a| a.port());
        if line.contains("port=\"healthz\"") {
            healthz = port;
        } else if line.contains("port=\"api\"") {
            api = port;
        }
    }
    Some((healthz?, api?))
}

fn find_pod(pods: Vec<Value>, name: &str) -> Option<Value> {
    let full = format!("{name}-e2e");
    pods.into_iter()
        .find(|p| p["metadata"]["name"] == full.as_str())
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop();
        // The shim's drop removes the test cgroups (ours are below them)
        // and unmounts what is left under the test dir.
    }
}

/// The first container status of `pod` named `name`.
pub fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    for key in ["containerStatuses", "initContainerStatuses"] {
        if let Some(list) = pod["status"][key].as_array()
            && let Some(c) = list.iter().find(|c| c["name"] == name)
        {
            return c;
        }
    }
    &Value::Null
}

pub fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

/// The pod runs and its container `main` too.
pub fn running(p: &serde_json::Value) -> bool {
    phase(p) == "Running" && container(p, "main")["state"]["running"].is_object()
}

/// A pod whose one container `main` runs `script` with /out = host dir.
pub fn pod(agent: &Agent, name: &str, script: &str, extra_spec: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 3
{extra_spec}  volumes:
  - name: out
    hostPath: {{path: {host}, type: Directory}}
  - name: scratch
    emptyDir: {{}}
  containers:
  - name: main
    image: busybox:latest
    imagePullPolicy: IfNotPresent
    command: [sh, -c, '{script}']
    volumeMounts:
    - {{name: out, mountPath: /out}}
    - {{name: scratch, mountPath: /scratch}}
"#,
        host = agent.host_dir().display()
    )
}

/// `openssl` in `dir`: a CA `name` and a client certificate it signed for
/// CN `cn`, O `org`; returns (CA, client cert, client key) paths.
pub fn client_ca(
    dir: &std::path::Path,
    name: &str,
    cn: &str,
    org: &str,
) -> [std::path::PathBuf; 3] {
    let p = |f: &str| dir.join(format!("{name}-{f}"));
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl (scripts/setup.sh installs it)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let s = |x: &std::path::PathBuf| x.display().to_string();
    let (ca_key, ca, key, csr, crt) =
        (p("ca.key"), p("ca.crt"), p("c.key"), p("c.csr"), p("c.crt"));
    // A new P-256 key (no passphrase) written to the path that follows.
    let new_key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
    ];
    let (ca_subject, subject) = (format!("/CN={name}-ca"), format!("/O={org}/CN={cn}"));
    let (ca_key_s, ca_s, key_s, csr_s) = (s(&ca_key), s(&ca), s(&key), s(&csr));
    let ca_args = [
        &["req", "-x509"][..],
        &new_key,
        &[&ca_key_s, "-out", &ca_s, "-subj", &ca_subject, "-days", "2"],
    ]
    .concat();
    run(&ca_args);
    let csr_args = [
        &["req"][..],
        &new_key,
        &[&key_s, "-out", &csr_s, "-subj", &subject],
    ]
    .concat();
    run(&csr_args);
    // X.509 v3 with the client-auth usage, as a cluster's client
    // certificates are (webpki refuses v1 certificates).
    let ext = p("ext");
    std::fs::write(&ext, "extendedKeyUsage=clientAuth\n").expect("ext");
    run(&[
        "x509",
        "-req",
        "-in",
        &s(&csr),
        "-CA",
        &s(&ca),
        "-CAkey",
        &s(&ca_key),
        "-CAcreateserial",
        "-out",
        &s(&crt),
        "-days",
        "1",
        "-extfile",
        &s(&ext),
    ]);
    [ca, crt, key]
}

/// The status code of `GET path` on 127.0.0.1:`port`.
pub fn status_of(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").expect("request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("response");
    out.split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string()
}
