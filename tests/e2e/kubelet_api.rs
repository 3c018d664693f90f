//! The kubelet API port end to end: HTTPS with the agent's
//! self-signed certificate, client certificates, containerLogs, /run,
//! the read-only port, and the connection limits, through curl.

use crate::common;

use std::time::{Duration, Instant};

use common::agent::{Agent, client_ca, pod, running, status_of};

const T: Duration = Duration::from_secs(30);

/// curl on the agent's API port, trusting its self-signed certificate
/// (so curl checks it serves 127.0.0.1): (HTTP code or curl's failure, body).
fn curl(agent: &Agent, path: &str, extra: &[&str]) -> (String, String) {
    let serving = agent.shim.root().join("agent/pki/picolet-serving.crt");
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "-w",
            "\n%{http_code}",
            "--cacert",
        ])
        .arg(&serving)
        .args(extra)
        .arg(format!("https://127.0.0.1:{}{path}", agent.api_port))
        .output()
        .expect("curl (scripts/setup.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    let code = if out.status.success() {
        code.to_string()
    } else {
        format!(
            "curl exit {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        )
    };
    (code, body.to_string())
}

/// The API port is HTTPS with a self-signed certificate curl accepts for
/// 127.0.0.1; a client certificate from `clientCAFile` is let in, one
/// from another CA is refused in the handshake, none gets 401 (anonymous
/// access is off); `/containerLogs` serves the real log file with
/// kubelet's options, `/run` runs a command, and the read-only port has
/// neither.
#[test]
fn the_api_port_takes_client_certificates_and_serves_logs() {
    require_root!();
    let tmp = tempfile::tempdir().expect("tmp");
    let [ca, crt, key] = client_ca(tmp.path(), "good", "e2e-admin", "system:masters");
    let [_, other_crt, other_key] = client_ca(tmp.path(), "other", "intruder", "system:masters");
    let agent = Agent::start(&format!(
        "authentication: {{x509: {{clientCAFile: {}}}}}\n",
        ca.display()
    ));
    let script = "for i in 1 2 3; do echo line$i; done; echo oops >&2; \
                  i=0; while true; do i=$((i+1)); echo tick$i; sleep 0.2; done";
    agent.write_manifest("logs.yaml", &pod(&agent, "logs", script, ""));
    agent.wait_pod("logs", "Running", T, running);
    let (c, k) = (crt.display().to_string(), key.display().to_string());
    let me = ["--cert", c.as_str(), "--key", k.as_str()];

    let (code, body) = curl(&agent, "/pods", &me);
    assert_eq!(code, "200", "{body}");
    assert!(body.contains("\"PodList\""), "{body}");
    let (code, body) = curl(&agent, "/pods", &[]);
    assert_eq!((code.as_str(), body.as_str()), ("401", "Unauthorized\n"));
    let (oc, ok) = (
        other_crt.display().to_string(),
        other_key.display().to_string(),
    );
    let (code, _) = curl(&agent, "/pods", &["--cert", &oc, "--key", &ok]);
    assert!(
        code.starts_with("curl exit"),
        "another CA's certificate: {code}"
    );
    let (code, _) = curl(&agent, "/stats/summary", &me);
    assert_eq!(code, "200");

    let logs = "/containerLogs/default/logs-e2e/main";
    let (code, body) = curl(&agent, &format!("{logs}?limitBytes=11"), &me);
    assert_eq!((code.as_str(), body.as_str()), ("200", "line1\nline2"));
    // stdout and stderr are two pipes: "oops" may land after "tick1".
    common::eventually(
        "tick5 in the log",
        T,
        || {
            let (code, body) = curl(&agent, logs, &me);
            if body.contains("tick5\n") {
                Ok(())
            } else {
                Err(format!("{code}: {body}"))
            }
        },
        || agent.log(),
    );
    let (_, body) = curl(&agent, &format!("{logs}?tailLines=2"), &me);
    assert_eq!(body.lines().count(), 2, "{body:?}");
    assert!(body.starts_with("tick"), "{body:?}");
    let (_, body) = curl(
        &agent,
        &format!("{logs}?timestamps=true&limitBytes=200"),
        &me,
    );
    let first = body.lines().next().unwrap_or_default();
    assert!(
        first.ends_with(" line1") && first.starts_with("20") && first.contains('T'),
        "{first:?}"
    );
    assert!(body.contains(" oops\n"), "stderr interleaved: {body:?}");
    let (code, _) = curl(
        &agent,
        &format!("{logs}?sinceSeconds=1&sinceTime=2026-01-01T00:00:00Z"),
        &me,
    );
    assert_eq!(code, "422");
    let (code, body) = curl(&agent, &format!("{logs}?previous=true"), &me);
    assert_eq!(code, "400", "no previous instance: {body}");
    let (code, _) = curl(&agent, "/containerLogs/default/logs-e2e/nope", &me);
    assert_eq!(code, "404");
    // follow: new lines keep coming until the client leaves.
    let started = Instant::now();
    let (code, body) = curl(
        &agent,
        &format!("{logs}?follow=true&sinceSeconds=1"),
        &[&me[..], &["--max-time", "2"]].concat(),
    );
    assert!(
        code.contains("exit Some(28)"),
        "ended by curl's timeout: {code}"
    );
    let ticks: Vec<&str> = body.lines().filter(|l| l.starts_with("tick")).collect();
    assert!(ticks.len() >= 5, "ticks in 2 s of following: {ticks:?}");
    assert!(started.elapsed() >= Duration::from_secs(2));

    let (code, body) = curl(
        &agent,
        "/run/default/logs-e2e/main?cmd=echo%20ran%20here",
        &[&me[..], &["-X", "POST"]].concat(),
    );
    assert_eq!((code.as_str(), body.as_str()), ("200", "ran here\n"));

    // The read-only port: the read-only endpoints, no logs, no run.
    assert_eq!(status_of(agent.port, "/pods"), "200");
    assert_eq!(status_of(agent.port, logs), "404");

    // Limits: 256 connections that say nothing hold every slot; the next
    // one is closed at once; the silent ones are closed after the 10 s
    // handshake deadline, and the port answers again.
    use std::io::Read;
    let idle: Vec<std::net::TcpStream> = (0..256)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", agent.api_port)).expect("connect"))
        .collect();
    // The agent takes a slot as it accepts a connection: wait until it has
    // accepted all 256.
    let agent_pid = agent.child.as_ref().expect("agent running").id();
    common::eventually(
        "the agent to accept the 256 connections",
        T,
        || {
            let n = accepted(agent_pid, agent.api_port);
            if n >= 256 {
                Ok(())
            } else {
                Err(format!("{n} accepted"))
            }
        },
        || agent.log(),
    );
    let mut extra = std::net::TcpStream::connect(("127.0.0.1", agent.api_port)).expect("connect");
    extra
        .set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let mut buf = [0u8; 16];
    let answer = extra.read(&mut buf);
    assert!(
        matches!(&answer, Ok(0))
            || answer
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the 257th connection is closed at once: {answer:?}"
    );
    let waited = Instant::now();
    let mut first = &idle[0];
    first
        .set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    assert!(
        matches!(first.read(&mut buf), Ok(0)),
        "a silent connection is closed"
    );
    assert!(
        waited.elapsed() < Duration::from_secs(12),
        "closed after the handshake deadline: {:?}",
        waited.elapsed()
    );
    drop(idle);
    let (code, _) = curl(&agent, "/healthz", &me);
    assert_eq!(code, "200", "the port answers again");
}

/// Connections to `port` that process `pid` has accepted: sockets of its
/// network namespace with that local port, established, and with an inode
/// (one still in the listen backlog has none until `accept`).
fn accepted(pid: u32, port: u16) -> usize {
    let port = format!(":{port:04X}");
    ["tcp", "tcp6"]
        .iter()
        .flat_map(|t| {
            std::fs::read_to_string(format!("/proc/{pid}/net/{t}"))
                .unwrap_or_default()
                .lines()
                .skip(1)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 9 && f[1].ends_with(&port) && f[3] == "01" && f[9] != "0"
        })
        .count()
}
