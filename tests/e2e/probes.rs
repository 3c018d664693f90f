//! End-to-end: probes with real containers from the project's busybox
//! image (httpd, sh), a gRPC health server and an HTTPS server (`openssl
//! s_server`) started by the test on 127.0.0.1, and the agent driving the
//! real shim. Root only.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::agent::{Agent, container, reserved_port};
use serde_json::Value;

const T: Duration = Duration::from_secs(60);

fn write_exec(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A gRPC health server: "" is SERVING, "down" NOT_SERVING.
fn grpc_health_server() -> (u16, tokio::runtime::Runtime) {
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    rt.spawn(async move {
        let (reporter, svc) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("down", tonic_health::ServingStatus::NotServing)
            .await;
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
    });
    (port, rt)
}

/// `openssl s_server -www` with a fresh self-signed certificate.
struct Https {
    child: Child,
    port: u16,
}

impl Https {
    fn start(dir: &Path) -> Self {
        let (key, cert) = (dir.join("tls.key"), dir.join("tls.crt"));
        let ok = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "1", "-subj", "/CN=probe-test", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl (apt install openssl)");
        assert!(ok.success(), "openssl req");
        // Port 0: s_server says which port it got (`ACCEPT 127.0.0.1:PORT`).
        let said = dir.join("s_server.out");
        let mut child = Command::new("openssl")
            .args(["s_server", "-www", "-accept", "127.0.0.1:0"])
            .arg("-cert")
            .arg(&cert)
            .arg("-key")
            .arg(&key)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&said).expect("s_server output"))
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl s_server");
        let port = common::eventually(
            "s_server to listen",
            Duration::from_secs(10),
            || {
                let out = std::fs::read_to_string(&said).unwrap_or_default();
                let line = out.lines().find(|l| l.starts_with("ACCEPT "))?;
                line.rsplit(':').next()?.trim().parse::<u16>().ok()
            },
            || {
                let _ = child.kill();
                let _ = child.wait();
                std::fs::read_to_string(&said).unwrap_or_default()
            },
        );
        Https { child, port }
    }
}

impl Drop for Https {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port on 127.0.0.1 bound and never listened on, so that connections
/// to it are refused, for as long as the socket lives.
fn refusing_port() -> (std::os::fd::OwnedFd, u16) {
    use nix::sys::socket::{
        AddressFamily, SockFlag, SockType, SockaddrIn, bind, getsockname, socket,
    };
    use std::os::fd::AsRawFd;
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .expect("socket");
    bind(fd.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, 0)).expect("bind port 0");
    let addr: SockaddrIn = getsockname(fd.as_raw_fd()).expect("getsockname");
    (fd, addr.port())
}

/// Events of container `name` with `reason`.
fn events_of(agent: &Agent, name: &str, reason: &str) -> Vec<String> {
    let path = format!("spec.containers{{{name}}}");
    agent
        .events()
        .iter()
        .filter(|e| e["involvedObject"]["fieldPath"] == path.as_str() && e["reason"] == reason)
        .map(|e| e["message"].as_str().unwrap_or("").to_string())
        .collect()
}

fn ready(p: &Value, name: &str) -> bool {
    container(p, name)["ready"] == true
}

fn condition(p: &Value, kind: &str) -> String {
    p["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
        .to_string()
}

/// A sleeping container with a readiness probe (YAML flow map body).
fn probed(name: &str, probe: &str) -> String {
    format!(
        "  - name: {name}\n    image: busybox:latest\n    command: [sleep, '3600']\n    \
         readinessProbe: {{periodSeconds: 1, failureThreshold: 1, {probe}}}\n"
    )
}

/// What the probes of [`start_probes_pod`] talk to, held for the test.
struct ProbeTargets {
    /// A port that refuses connections.
    closed: u16,
    _closed_socket: std::os::fd::OwnedFd,
    _hung: std::net::TcpListener,
    _grpc_rt: tokio::runtime::Runtime,
    _https: Https,
}

/// The pod `probes`: a busybox httpd (`web`) and one sleeping container
/// per probe handler and outcome, each with a readiness probe.
fn start_probes_pod(agent: &Agent) -> ProbeTargets {
    let www = agent.host_dir().join("www");
    std::fs::create_dir_all(www.join("cgi-bin")).expect("mkdir");
    std::fs::write(www.join("ok.html"), "ok\n").expect("write");
    // busybox httpd in the pod takes a port number; `closed` refuses
    // connections for as long as its socket lives.
    let port = reserved_port();
    let (closed_socket, closed) = refusing_port();
    // A port that accepts connections (kernel backlog) but never answers.
    let hung = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let hung_port = hung.local_addr().expect("addr").port();
    write_exec(
        &www.join("cgi-bin/fail"),
        "#!/bin/sh\nprintf 'HTTP/1.1 500 Internal Server Error\\r\\nContent-Type: text/plain\\r\\n\\r\\nbroken\\n'\n",
    );
    // Same host: followed (to the 500). Another host: not followed.
    write_exec(
        &www.join("cgi-bin/here"),
        "#!/bin/sh\nprintf 'Status: 302 Found\\r\\nLocation: /cgi-bin/fail\\r\\n\\r\\n'\n",
    );
    write_exec(
        &www.join("cgi-bin/away"),
        &format!(
            "#!/bin/sh\nprintf 'Status: 302 Found\\r\\nLocation: http://127.0.0.2:{closed}/\\r\\n\\r\\nmoved\\n'\n"
        ),
    );
    let (grpc_port, grpc_rt) = grpc_health_server();
    let https = Https::start(&agent.dir());

    let mut spec = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: probes\nspec:\n  hostNetwork: true\n  \
         terminationGracePeriodSeconds: 1\n  volumes:\n  - name: host\n    hostPath: {{path: {host}, type: Directory}}\n  \
         containers:\n  - name: web\n    image: busybox:latest\n    \
         command: [httpd, -f, -p, '127.0.0.1:{port}', -h, /host/www]\n    \
         ports: [{{name: http, containerPort: {port}}}]\n    \
         volumeMounts: [{{name: host, mountPath: /host}}]\n    \
         readinessProbe: {{periodSeconds: 1, httpGet: {{path: /ok.html, port: http, httpHeaders: [{{name: X-Probe, value: e2e}}]}}}}\n",
        host = agent.host_dir().display()
    );
    for (name, probe) in [
        (
            "h500",
            format!("httpGet: {{path: /cgi-bin/fail, port: {port}}}"),
        ),
        (
            "hfollow",
            format!("httpGet: {{path: /cgi-bin/here, port: {port}}}"),
        ),
        (
            "haway",
            format!("httpGet: {{path: /cgi-bin/away, port: {port}}}"),
        ),
        ("hclosed", format!("httpGet: {{path: /, port: {closed}}}")),
        ("hhung", format!("httpGet: {{path: /, port: {hung_port}}}")),
        (
            "https",
            format!("httpGet: {{path: /, port: {}, scheme: HTTPS}}", https.port),
        ),
        ("tcpopen", format!("tcpSocket: {{port: {port}}}")),
        ("tcpclosed", format!("tcpSocket: {{port: {closed}}}")),
        ("execok", "exec: {command: ['true']}".to_string()),
        (
            "execfail",
            "exec: {command: [sh, -c, 'echo nope; exit 3']}".to_string(),
        ),
        (
            "exectimeout",
            "timeoutSeconds: 1, exec: {command: [sleep, '5']}".to_string(),
        ),
        ("grpcok", format!("grpc: {{port: {grpc_port}}}")),
        (
            "grpcdown",
            format!("grpc: {{port: {grpc_port}, service: down}}"),
        ),
        ("grpcclosed", format!("grpc: {{port: {closed}}}")),
    ] {
        spec.push_str(&probed(name, &probe));
    }
    agent.write_manifest("probes.yaml", &spec);
    ProbeTargets {
        closed,
        _closed_socket: closed_socket,
        _hung: hung,
        _grpc_rt: grpc_rt,
        _https: https,
    }
}

#[test]
fn probe_handlers_report_like_kubelet() {
    require_root!();
    let agent = Agent::start("");
    let targets = start_probes_pod(&agent);
    let closed = targets.closed;

    let good = ["web", "haway", "https", "tcpopen", "execok", "grpcok"];
    let bad: [(&str, &str); 9] = [
        (
            "h500",
            "Readiness probe failed: HTTP probe failed with statuscode: 500",
        ),
        (
            "hfollow",
            "Readiness probe failed: HTTP probe failed with statuscode: 500",
        ),
        ("hclosed", "Connection refused"),
        ("hhung", "context deadline exceeded"),
        (
            "tcpclosed",
            &format!("dial tcp 127.0.0.1:{closed}: Connection refused"),
        ),
        ("execfail", "Readiness probe failed: nope"),
        (
            "exectimeout",
            "Readiness probe failed: command \"sleep 5\" timed out",
        ),
        (
            "grpcdown",
            "Readiness probe failed: service unhealthy (responded with \"NOT_SERVING\")",
        ),
        (
            "grpcclosed",
            "Readiness probe failed: timeout: failed to connect service",
        ),
    ];
    let t0 = Instant::now();
    let p = agent.wait_pod("probes", "good probes ready, bad ones failed", T, |p| {
        good.iter().all(|c| ready(p, c))
            && bad
                .iter()
                .all(|(c, _)| !events_of(&agent, c, "Unhealthy").is_empty())
    });
    eprintln!("all handlers answered in {:?}", t0.elapsed());
    for (c, want) in bad {
        assert!(!ready(&p, c), "{c} must not be ready");
        let got = events_of(&agent, c, "Unhealthy");
        assert!(
            got.iter().any(|m| m.contains(want)),
            "{c}: want an Unhealthy event containing {want:?}, got {got:?}"
        );
    }
    assert_eq!(condition(&p, "Ready"), "False");
    let warn = events_of(&agent, "haway", "ProbeWarning");
    assert!(
        warn.iter()
            .any(|m| m.starts_with("Readiness probe warning: Probe terminated redirects")),
        "a redirect to another host is not followed: {warn:?}"
    );
    assert!(events_of(&agent, "haway", "Unhealthy").is_empty());

    let metrics = agent.get("/metrics/probes").expect("/metrics/probes");
    for (c, result) in [("execok", "successful"), ("execfail", "failed")] {
        let line = metrics
            .lines()
            .find(|l| {
                l.starts_with("prober_probe_total{")
                    && l.contains(&format!("container=\"{c}\""))
                    && l.contains("pod=\"probes-e2e\"")
                    && l.contains("namespace=\"default\"")
                    && l.contains("probe_type=\"Readiness\"")
                    && l.contains(&format!("result=\"{result}\""))
            })
            .unwrap_or_else(|| panic!("no {c} {result} series in:\n{metrics}"));
        let n: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("value");
        assert!(n >= 1.0, "{line}");
    }
    assert!(metrics.contains("# TYPE prober_probe_total counter"));
    // Durations of successful probes (not of failed ones), as kubelet.
    let count = |c: &str| {
        metrics.lines().find_map(|l| {
            l.strip_prefix(&format!(
                "prober_probe_duration_seconds_count{{container=\"{c}\",namespace=\"default\",pod=\"probes-e2e\",probe_type=\"Readiness\"}} "
            ))
            .and_then(|v| v.parse::<f64>().ok())
        })
    };
    assert!(count("execok").is_some_and(|n| n >= 1.0), "{metrics}");
    assert_eq!(count("execfail"), None, "no durations for failures");

    agent.remove_manifest("probes.yaml");
    agent.wait("pod gone", T, || agent.pod("probes").is_none());
    let after = agent.get("/metrics/probes").expect("/metrics/probes");
    assert!(
        !after.contains("probes-e2e"),
        "a deleted pod's probe series go: {after}"
    );
    drop(targets);
}

#[test]
fn liveness_readiness_and_startup_drive_the_pod() {
    require_root!();
    let agent = Agent::start("");
    let host = agent.host_dir();
    let touch = |f: &str| std::fs::write(host.join(f), "").expect("touch");
    let rm = |f: &str| std::fs::remove_file(host.join(f)).expect("rm");
    touch("live");
    touch("ready");
    let spec = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: health
spec:
  terminationGracePeriodSeconds: 30
  volumes:
  - name: host
    hostPath: {{path: {host}, type: Directory}}
  containers:
  - name: live
    image: busybox:latest
    command: [sh, -c, 'trap "" TERM; while true; do sleep 1; done']
    volumeMounts: [{{name: host, mountPath: /host}}]
    livenessProbe:
      exec: {{command: [test, -f, /host/live]}}
      initialDelaySeconds: 3
      periodSeconds: 1
      failureThreshold: 2
      terminationGracePeriodSeconds: 1
    readinessProbe:
      exec: {{command: [test, -f, /host/ready]}}
      periodSeconds: 1
      successThreshold: 2
      failureThreshold: 1
  - name: slow
    image: busybox:latest
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
    volumeMounts: [{{name: host, mountPath: /host}}]
    startupProbe:
      exec: {{command: [test, -f, /host/started]}}
      periodSeconds: 1
      failureThreshold: 100
    livenessProbe:
      exec: {{command: [test, -f, /host/slow-live]}}
      periodSeconds: 1
      failureThreshold: 1
      terminationGracePeriodSeconds: 1
"#,
        host = host.display()
    );
    agent.write_manifest("health.yaml", &spec);

    // Startup gates liveness: `slow` would fail liveness at once, but its
    // startup probe has not succeeded, so it is neither started nor killed.
    let p = agent.wait_pod("health", "live ready", T, |p| ready(p, "live"));
    assert_eq!(container(&p, "slow")["started"], false);
    // Held for 4 s: several periods of the startup probe, and of the
    // liveness probe that would fail at once.
    common::consistently(
        "slow held by the startup probe",
        Duration::from_secs(4),
        || {
            agent.pod("health").is_some_and(|p| {
                let slow = container(&p, "slow");
                (&slow["started"], &slow["ready"], &slow["restartCount"])
                    == (&false.into(), &false.into(), &0.into())
                    && condition(&p, "Ready") == "False"
            })
        },
        || format!("pod: {:#}", agent.pod("health").unwrap_or_default()),
    );
    let p = agent.pod("health").expect("pod");
    let slow = container(&p, "slow");
    assert_eq!(
        (
            slow["started"].clone(),
            slow["ready"].clone(),
            slow["restartCount"].clone()
        ),
        (false.into(), false.into(), 0.into()),
        "held by the startup probe: {slow}"
    );
    assert_eq!(condition(&p, "Ready"), "False");
    let metrics = agent.get("/metrics/probes").expect("metrics");
    assert!(
        metrics.lines().any(|l| l.contains("container=\"slow\"")
            && l.contains("probe_type=\"Startup\"")
            && l.contains("result=\"failed\"")),
        "{metrics}"
    );
    assert!(
        !metrics
            .lines()
            .any(|l| l.contains("container=\"slow\"") && l.contains("probe_type=\"Liveness\"")),
        "liveness must not run before startup succeeded:\n{metrics}"
    );

    // Started: liveness runs, fails (no /host/slow-live), the container restarts.
    touch("started");
    agent.wait_pod("health", "slow restarted by liveness", T, |p| {
        container(p, "slow")["restartCount"].as_i64() >= Some(1)
    });
    touch("slow-live");
    let p = agent.wait_pod("health", "all ready", T, |p| {
        ready(p, "slow") && ready(p, "live") && condition(p, "Ready") == "True"
    });
    assert_eq!(container(&p, "slow")["started"], true);
    assert_eq!(condition(&p, "ContainersReady"), "True");

    // Readiness flips Ready both ways; the container is not restarted.
    rm("ready");
    let p = agent.wait_pod("health", "not ready", T, |p| {
        !ready(p, "live") && condition(p, "Ready") == "False"
    });
    assert_eq!(condition(&p, "ContainersReady"), "False");
    touch("ready");
    let p = agent.wait_pod("health", "ready again", T, |p| {
        condition(p, "Ready") == "True"
    });
    assert_eq!(container(&p, "live")["restartCount"], 0);

    // Liveness fails: killed with the probe's grace (1 s → kubelet's 2 s
    // minimum, then SIGKILL as TERM is ignored), not the pod's 30 s.
    let t0 = Instant::now();
    rm("live");
    let p = agent.wait_pod("health", "live restarted", T, |p| {
        container(p, "live")["restartCount"] == 1
    });
    touch("live");
    let took = t0.elapsed();
    eprintln!("liveness failure → restarted in {took:?}");
    assert!(
        took < Duration::from_secs(15),
        "the probe's grace (1 s), not the pod's (30 s): {took:?}"
    );
    let last = &container(&p, "live")["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 137, "{last}");
    let killing = events_of(&agent, "live", "Killing");
    assert!(
        killing
            .iter()
            .any(|m| m == "Container live failed liveness probe, will be restarted"),
        "{killing:?}"
    );
    assert!(
        events_of(&agent, "live", "Unhealthy")
            .iter()
            .any(|m| m.starts_with("Liveness probe failed")),
    );
    // The new container starts its probes over and becomes ready again.
    agent.wait_pod("health", "ready after restart", T, |p| {
        ready(p, "live") && container(p, "live")["restartCount"] == 1
    });
}
