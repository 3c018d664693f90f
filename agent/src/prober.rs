//! The probe handlers (exec through CRI, httpGet, tcpSocket, grpc health)
//! and each pod's probe workers: one tokio task per (container instance,
//! probe kind), started when a container is seen running and dropped when
//! it stops, so a restarted container starts its probes over. A result
//! that crosses its threshold wakes the pod worker, which restarts the
//! container (liveness, startup) or republishes readiness.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use rustls::pki_types::ServerName;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::Shared;
use crate::backoff::now;
use crate::events::Object;
use crate::httpc::{self, join_host_port};
use crate::plan::{Observed, State};
use crate::probe::{self, Kind, Outcome, Params, Report, Target};
use crate::runtime::Cri;
use crate::status::ProbeState;

/// The Kubernetes release whose kubelet picolet follows (User-Agent).
pub const KUBE_VERSION: &str = "1.34";

/// Runs one probe against container `id`, bounded by `timeout`.
pub async fn run(cri: &Cri, id: &str, target: &Target, timeout: Duration) -> Outcome {
    match target {
        Target::Exec(cmd) => exec(cri, id, cmd, timeout).await,
        Target::Http {
            https,
            host,
            port,
            path,
            headers,
        } => {
            let ua = format!("kube-probe/{KUBE_VERSION}");
            let get = httpc::Get {
                https: *https,
                host,
                port: *port,
                path,
                headers,
                user_agent: &ua,
            };
            match tokio::time::timeout(timeout, httpc::get(&get)).await {
                Err(_) => Outcome::Failure(format!(
                    "Get \"{}://{}{path}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
                    if *https { "https" } else { "http" },
                    join_host_port(host, *port)
                )),
                Ok(Err(e)) => Outcome::Failure(e),
                Ok(Ok(r)) if (200..300).contains(&r.status) => Outcome::Success,
                Ok(Ok(r)) if (300..400).contains(&r.status) => Outcome::Warning(format!(
                    "Probe terminated redirects, Response body: {}",
                    r.body
                )),
                Ok(Ok(r)) => {
                    Outcome::Failure(format!("HTTP probe failed with statuscode: {}", r.status))
                }
            }
        }
        Target::Tcp { host, port } => {
            let addr = join_host_port(host, *port);
            match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&addr)).await {
                Ok(Ok(_)) => Outcome::Success,
                Ok(Err(e)) => Outcome::Failure(format!("dial tcp {addr}: {e}")),
                Err(_) => Outcome::Failure(format!("dial tcp {addr}: i/o timeout")),
            }
        }
        Target::Grpc {
            host,
            port,
            service,
            tls,
        } => grpc(host, *port, service.as_deref().unwrap_or(""), *tls, timeout).await,
    }
}

async fn exec(cri: &Cri, id: &str, cmd: &[String], timeout: Duration) -> Outcome {
    match cri.exec_sync(id, cmd.to_vec(), timeout).await {
        Ok((0, _)) => Outcome::Success,
        Ok((_, out)) => Outcome::Failure(out.trim_end().to_string()),
        Err(e) if e.status.code() == tonic::Code::DeadlineExceeded => {
            Outcome::Failure(format!("command {:?} timed out", cmd.join(" ")))
        }
        Err(e) => Outcome::Error(e.to_string()),
    }
}

async fn grpc(host: &str, port: u16, service: &str, tls: bool, timeout: Duration) -> Outcome {
    let addr = join_host_port(host, port);
    let work = async {
        let ep = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| Outcome::Failure(format!("bad address {addr}: {e}")))?
            .user_agent(format!("kube-probe/{KUBE_VERSION}"))
            .map_err(|e| Outcome::Failure(e.to_string()))?
            .connect_timeout(timeout);
        let ch = if tls {
            let connector = httpc::tls(true).map_err(Outcome::Failure)?;
            let (host, dial) = (host.to_string(), addr.clone());
            ep.connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                let (connector, host, dial) = (connector.clone(), host.clone(), dial.clone());
                async move {
                    let tcp = tokio::net::TcpStream::connect(&dial).await?;
                    let name = ServerName::try_from(host).map_err(std::io::Error::other)?;
                    let s = connector.connect(name, tcp).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(s))
                }
            }))
            .await
        } else {
            ep.connect().await
        };
        let ch = ch.map_err(|e| {
            Outcome::Failure(format!(
                "timeout: failed to connect service {addr:?} within {timeout:?}: {e}"
            ))
        })?;
        let mut req = tonic::Request::new(HealthCheckRequest {
            service: service.to_string(),
        });
        req.set_timeout(timeout);
        let resp = HealthClient::new(ch).check(req).await.map_err(|s| {
            Outcome::Failure(match s.code() {
                tonic::Code::Unimplemented => format!(
                    "this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                    s.message()
                ),
                tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
                    format!("timeout: health rpc did not complete within {timeout:?}")
                }
                _ => format!("error: health rpc probe failed: {s}"),
            })
        })?;
        let st = resp.into_inner().status;
        if st == ServingStatus::Serving as i32 {
            Ok(())
        } else {
            let name = ServingStatus::try_from(st)
                .map(|s| s.as_str_name())
                .unwrap_or("UNKNOWN");
            Err(Outcome::Failure(format!(
                "service unhealthy (responded with {name:?})"
            )))
        }
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok(())) => Outcome::Success,
        Ok(Err(o)) => o,
        Err(_) => Outcome::Failure(format!(
            "timeout: health rpc did not complete within {timeout:?}"
        )),
    }
}

/// The address probes use: the node's for host-network pods, else the
/// sandbox's.
pub fn address(shared: &Shared, pod: &Pod, observed: &Observed) -> String {
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    let ip = observed
        .sandboxes
        .first()
        .map(|s| s.ip.clone())
        .unwrap_or_default();
    if host_network || ip.is_empty() {
        shared.node.host_ip.clone()
    } else {
        ip
    }
}

/// Results by (container ID, kind).
type Results = Arc<Mutex<HashMap<(String, Kind), bool>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The probe tasks of one container instance.
#[derive(Debug)]
struct Group {
    id: String,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Group {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// One pod's probes.
#[derive(Debug, Default)]
pub struct PodProbes {
    /// By container name.
    groups: HashMap<String, Group>,
    results: Results,
}

/// What the probe tasks of a pod need.
pub struct Env<'a> {
    pub shared: &'a Arc<Shared>,
    pub wake: &'a Arc<Notify>,
    pub pod: &'a Object,
    pub pod_ip: &'a str,
}

impl PodProbes {
    /// Startup and readiness results of container `id`.
    pub fn state(&self, id: &str) -> ProbeState {
        let r = lock(&self.results);
        ProbeState {
            started: r.get(&(id.to_string(), Kind::Startup)).copied(),
            ready: r.get(&(id.to_string(), Kind::Readiness)).copied(),
        }
    }

    /// The liveness or startup probe that failed for container `id`, and
    /// its grace period.
    pub fn unhealthy(&self, pod: &Pod, name: &str, id: &str) -> Option<(Kind, Option<Duration>)> {
        let r = lock(&self.results);
        let kind = [Kind::Liveness, Kind::Startup]
            .into_iter()
            .find(|k| r.get(&(id.to_string(), *k)) == Some(&false))?;
        let spec = pod.spec.as_ref()?;
        let c = spec
            .containers
            .iter()
            .chain(crate::plan::sidecars(spec))
            .find(|c| c.name == name)?;
        Some((kind, kind.of(c).and_then(|p| Params::of(p, kind).grace)))
    }

    /// Stops every probe.
    pub fn clear(&mut self) {
        self.groups.clear();
        lock(&self.results).clear();
    }

    /// Starts probes for app containers and sidecars that are running and
    /// not yet probed; drops those of containers that are gone.
    pub fn sync(&mut self, env: &Env<'_>, pod: &Pod, observed: &Observed) {
        let Some(spec) = pod.spec.as_ref() else {
            return;
        };
        let mut keep: Vec<String> = Vec::new();
        for c in spec.containers.iter().chain(crate::plan::sidecars(spec)) {
            if Kind::ALL.iter().all(|k| k.of(c).is_none()) {
                continue;
            }
            let running = observed
                .latest(&c.name)
                .filter(|l| l.state == State::Running);
            let Some(r) = running else {
                self.groups.remove(&c.name);
                continue;
            };
            keep.push(c.name.clone());
            if self.groups.get(&c.name).is_some_and(|g| g.id == r.id) {
                continue;
            }
            let since_start = now().saturating_sub(Duration::from_nanos(
                u64::try_from(r.started_at).unwrap_or(0),
            ));
            let group = self.spawn(env, c, &r.id, since_start);
            self.groups.insert(c.name.clone(), group);
        }
        self.groups.retain(|name, _| keep.contains(name));
        let ids: Vec<String> = self.groups.values().map(|g| g.id.clone()).collect();
        lock(&self.results).retain(|(id, _), _| ids.contains(id));
    }

    fn spawn(
        &self,
        env: &Env<'_>,
        c: &k8s_openapi::api::core::v1::Container,
        id: &str,
        since_start: Duration,
    ) -> Group {
        let (started_tx, started_rx) = watch::channel(false);
        let started_tx = Arc::new(started_tx);
        let has_startup = c.startup_probe.is_some();
        let mut tasks = Vec::new();
        for kind in Kind::ALL {
            let Some(p) = kind.of(c) else { continue };
            let params = Params::of(p, kind);
            let mut obj = env.pod.clone();
            obj.field_path = if crate::plan::is_sidecar(c) {
                format!("spec.initContainers{{{}}}", c.name)
            } else {
                format!("spec.containers{{{}}}", c.name)
            };
            let target = match probe::target(p, c, env.pod_ip) {
                Ok(t) => t,
                Err(e) => {
                    env.shared.event(
                        &obj,
                        "Warning",
                        "Unhealthy",
                        &format!("{} probe errored: {e}", kind.as_str()),
                    );
                    continue;
                }
            };
            let gate = (has_startup && kind != Kind::Startup).then(|| started_rx.clone());
            let cri = env.shared.cri.clone();
            let shared = env.shared.clone();
            let wake = env.wake.clone();
            let results = self.results.clone();
            let started_tx = started_tx.clone();
            let labels = crate::ProbeLabels {
                probe_type: kind.as_str(),
                container: c.name.clone(),
                pod: env.pod.name.clone(),
                namespace: env.pod.namespace.clone(),
                pod_uid: env.pod.uid.clone(),
            };
            let id = id.to_string();
            tasks.push(tokio::spawn(async move {
                let probe_id = id.clone();
                let probe = move |timeout| {
                    let (cri, id, target) = (cri.clone(), probe_id.clone(), target.clone());
                    async move { run(&cri, &id, &target, timeout).await }
                };
                let report = |r: Report| match r {
                    Report::Probed(o, took) => {
                        shared.count_probe(&labels, o.metric_label(), took);
                        let (reason, msg) = match &o {
                            Outcome::Success => return,
                            Outcome::Warning(m) => ("ProbeWarning", format!("probe warning: {m}")),
                            Outcome::Failure(m) => ("Unhealthy", format!("probe failed: {m}")),
                            Outcome::Error(m) => ("Unhealthy", format!("probe errored: {m}")),
                        };
                        let msg = format!("{} {msg}", kind.as_str());
                        shared.event(&obj, "Warning", reason, &msg);
                    }
                    Report::Result(v) => {
                        let old = lock(&results).insert((id.clone(), kind), v);
                        if kind == Kind::Startup && v {
                            started_tx.send_replace(true);
                        }
                        if old != Some(v) {
                            wake.notify_one();
                        }
                    }
                };
                let jitter = probe::start_jitter(
                    shared.started.elapsed(),
                    params.period,
                    &format!("{id}/{}", kind.as_str()),
                );
                probe::run_loop(kind, params, since_start, jitter, gate, probe, report).await;
            }));
        }
        Group {
            id: id.to_string(),
            tasks,
        }
    }
}
