//! Probes as kubelet's prober sees them: parameters with the API server's
//! defaults, the handler a probe resolves to, thresholds and the start-up
//! spread. Pure; the worker loop that runs them on tokio's clock is
//! [`crate::prober`]'s.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Why a probe or hook handler cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    #[error("bad port {0}")]
    Port(i32),
    #[error("no container port named {0:?}")]
    PortName(String),
    #[error("unsupported HTTP scheme {0:?}")]
    Scheme(String),
    #[error("the probe has no handler")]
    NoHandler,
}

/// Resolves a port by number or by the container's port name.
pub fn resolve_port(port: &IntOrString, c: &Container) -> Result<u16, HandlerError> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| HandlerError::Port(*n)),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| HandlerError::PortName(name.clone())),
    }
}

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Startup,
    Liveness,
    Readiness,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Startup, Kind::Liveness, Kind::Readiness];

    /// As kubelet names it in events and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Startup => "Startup",
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
        }
    }

    pub fn of(self, c: &Container) -> Option<&Probe> {
        match self {
            Kind::Startup => c.startup_probe.as_ref(),
            Kind::Liveness => c.liveness_probe.as_ref(),
            Kind::Readiness => c.readiness_probe.as_ref(),
        }
    }
}

/// One probe's outcome (kubelet's `probe.Result`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// Success with something to report (a redirect that was not followed).
    Warning(String),
    Failure(String),
    /// The probe could not run (e.g. the runtime refused the exec): the
    /// result is thrown away, as kubelet does.
    Error(String),
}

impl Outcome {
    /// `prober_probe_total`'s `result` label.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Outcome::Success | Outcome::Warning(_) => "successful",
            Outcome::Failure(_) => "failed",
            Outcome::Error(_) => "unknown",
        }
    }
}

/// Timing and thresholds, defaulted as the API server does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
    /// Probe-level terminationGracePeriodSeconds (liveness, startup).
    pub grace: Option<Duration>,
}

fn secs(v: Option<i32>, default: u64, min: u64) -> Duration {
    Duration::from_secs(
        v.map_or(default, |s| u64::try_from(s).unwrap_or(0))
            .max(min),
    )
}

impl Params {
    pub fn of(p: &Probe, kind: Kind) -> Self {
        let success = u32::try_from(p.success_threshold.unwrap_or(1)).unwrap_or(1);
        Params {
            initial_delay: secs(p.initial_delay_seconds, 0, 0),
            period: secs(p.period_seconds, 10, 1),
            timeout: secs(p.timeout_seconds, 1, 1),
            // Validation rejects anything but 1 for liveness and startup.
            success_threshold: if kind == Kind::Readiness {
                success.max(1)
            } else {
                1
            },
            failure_threshold: u32::try_from(p.failure_threshold.unwrap_or(3))
                .unwrap_or(3)
                .max(1),
            grace: p
                .termination_grace_period_seconds
                .filter(|_| kind != Kind::Readiness)
                .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0))),
        }
    }
}

/// What a probe calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Exec(Vec<String>),
    Http {
        https: bool,
        host: String,
        port: u16,
        /// Path and query, as given.
        path: String,
        headers: Vec<(String, String)>,
    },
    Tcp {
        host: String,
        port: u16,
    },
    Grpc {
        host: String,
        port: u16,
        service: Option<String>,
        /// `mode: TLS`: TLS without certificate checks.
        tls: bool,
    },
}

/// Resolves a probe's handler for container `c` of a pod with `pod_ip`
/// (the node's address for host-network pods, as kubelet reports it).
pub fn target(p: &Probe, c: &Container, pod_ip: &str) -> Result<Target, HandlerError> {
    let default_host = |h: Option<&String>| {
        h.filter(|h| !h.is_empty())
            .cloned()
            .unwrap_or_else(|| pod_ip.to_string())
    };
    if let Some(e) = &p.exec {
        return Ok(Target::Exec(e.command.clone().unwrap_or_default()));
    }
    if let Some(g) = &p.http_get {
        let https = match g.scheme.as_deref() {
            None | Some("HTTP") | Some("http") => false,
            Some("HTTPS") | Some("https") => true,
            Some(s) => return Err(HandlerError::Scheme(s.to_string())),
        };
        let path = g.path.clone().filter(|p| !p.is_empty()).unwrap_or_default();
        let path = if path.starts_with('/') {
            path
        } else {
            format!("/{path}")
        };
        return Ok(Target::Http {
            https,
            host: default_host(g.host.as_ref()),
            port: resolve_port(&g.port, c)?,
            path,
            headers: g
                .http_headers
                .iter()
                .flatten()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect(),
        });
    }
    if let Some(t) = &p.tcp_socket {
        return Ok(Target::Tcp {
            host: default_host(t.host.as_ref()),
            port: resolve_port(&t.port, c)?,
        });
    }
    if let Some(g) = &p.grpc {
        return Ok(Target::Grpc {
            host: pod_ip.to_string(),
            port: u16::try_from(g.port).map_err(|_| HandlerError::Port(g.port))?,
            service: g.service.clone(),
            tls: g.mode.as_deref() == Some("TLS"),
        });
    }
    Err(HandlerError::NoHandler)
}

/// Consecutive results, as kubelet's worker counts them: a result is
/// reported once it repeated `threshold` times in a row.
#[derive(Debug, Default, Clone, Copy)]
pub struct Run {
    last: Option<bool>,
    count: u32,
}

impl Run {
    /// Records one result; `Some(result)` when the threshold is reached
    /// (again) and the result must be set.
    pub fn record(&mut self, success: bool, p: &Params) -> Option<bool> {
        if self.last == Some(success) {
            self.count = self.count.saturating_add(1);
        } else {
            self.last = Some(success);
            self.count = 1;
        }
        let threshold = if success {
            p.success_threshold
        } else {
            p.failure_threshold
        };
        (self.count >= threshold).then_some(success)
    }
}

/// What the loop reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// Every probe that ran (for events and metrics), and how long it took.
    Probed(Outcome, Duration),
    /// The result crossed its threshold: set it.
    Result(bool),
}

/// kubelet's start-up spread: probe workers created within one period of
/// the agent starting (an agent restart finds every container at once) wait
/// a part of the period first, so they do not all probe together. kubelet
/// draws it at random; here it is derived from `seed` (container ID and
/// kind), so it is spread the same way and reproducible.
pub fn start_jitter(agent_uptime: Duration, period: Duration, seed: &str) -> Duration {
    if agent_uptime >= period {
        return Duration::ZERO;
    }
    // FNV-1a.
    let h = seed.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    period.mul_f64((h % 1000) as f64 / 1000.0)
}

#[cfg(test)]
pub(crate) mod tests {
    use k8s_openapi::api::core::v1::{
        ContainerPort, ExecAction, GRPCAction, HTTPGetAction, HTTPHeader, TCPSocketAction,
    };
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;

    /// Probe parameters in whole seconds, a one-second timeout.
    pub(crate) fn params(delay: u64, period: u64, success: u32, failure: u32) -> Params {
        Params {
            initial_delay: Duration::from_secs(delay),
            period: Duration::from_secs(period),
            timeout: Duration::from_secs(1),
            success_threshold: success,
            failure_threshold: failure,
            grace: None,
        }
    }

    #[test]
    fn defaults_are_the_api_servers() {
        let p = Params::of(&Probe::default(), Kind::Liveness);
        assert_eq!(p, params(0, 10, 1, 3));
        let p = Params::of(
            &Probe {
                success_threshold: Some(3),
                termination_grace_period_seconds: Some(5),
                period_seconds: Some(0),
                ..Default::default()
            },
            Kind::Readiness,
        );
        assert_eq!(
            (p.success_threshold, p.period, p.grace),
            (3, Duration::from_secs(1), None)
        );
        let p = Params::of(
            &Probe {
                success_threshold: Some(3),
                termination_grace_period_seconds: Some(5),
                ..Default::default()
            },
            Kind::Liveness,
        );
        assert_eq!(
            (p.success_threshold, p.grace),
            (1, Some(Duration::from_secs(5)))
        );
    }

    #[test]
    fn thresholds_count_consecutive_results() {
        let p = params(0, 1, 2, 3);
        let mut r = Run::default();
        let got: Vec<Option<bool>> = [false, false, true, false, false, false, false, true, true]
            .iter()
            .map(|s| r.record(*s, &p))
            .collect();
        assert_eq!(
            got,
            [
                None,
                None,
                None,
                None,
                None,
                Some(false),
                Some(false),
                None,
                Some(true)
            ]
        );
    }

    fn container() -> Container {
        Container {
            name: "c".into(),
            ports: Some(vec![ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn handlers_resolve_host_port_and_path() {
        let c = container();
        let p = Probe {
            http_get: Some(HTTPGetAction {
                port: IntOrString::String("http".into()),
                path: Some("healthz?x=1".into()),
                scheme: Some("HTTPS".into()),
                http_headers: Some(vec![HTTPHeader {
                    name: "X-A".into(),
                    value: "b".into(),
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            target(&p, &c, "10.0.0.5"),
            Ok(Target::Http {
                https: true,
                host: "10.0.0.5".into(),
                port: 8080,
                path: "/healthz?x=1".into(),
                headers: vec![("X-A".into(), "b".into())],
            })
        );
        let p = Probe {
            tcp_socket: Some(TCPSocketAction {
                host: Some("127.0.0.9".into()),
                port: IntOrString::Int(22),
            }),
            ..Default::default()
        };
        assert_eq!(
            target(&p, &c, "10.0.0.5"),
            Ok(Target::Tcp {
                host: "127.0.0.9".into(),
                port: 22
            })
        );
        let p = Probe {
            tcp_socket: Some(TCPSocketAction {
                host: None,
                port: IntOrString::String("nope".into()),
            }),
            ..Default::default()
        };
        assert_eq!(
            target(&p, &c, "10.0.0.5").map_err(|e| e.to_string()),
            Err("no container port named \"nope\"".into())
        );
        let p = Probe {
            grpc: Some(GRPCAction {
                port: 9090,
                service: Some("s".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            target(&p, &c, "10.0.0.5"),
            Ok(Target::Grpc {
                host: "10.0.0.5".into(),
                port: 9090,
                service: Some("s".into()),
                tls: false,
            })
        );
        let p = Probe {
            exec: Some(ExecAction {
                command: Some(vec!["true".into()]),
            }),
            ..Default::default()
        };
        assert_eq!(target(&p, &c, ""), Ok(Target::Exec(vec!["true".into()])));
        assert!(target(&Probe::default(), &c, "").is_err());
    }

    #[test]
    fn start_jitter_spreads_within_one_period_after_an_agent_start() {
        let period = Duration::from_secs(10);
        assert_eq!(start_jitter(period, period, "a"), Duration::ZERO);
        let spread: std::collections::BTreeSet<u128> = (0..100)
            .map(|i| start_jitter(Duration::from_secs(1), period, &format!("id{i}/Liveness")))
            .inspect(|j| assert!(*j < period, "{j:?}"))
            .map(|j| j.as_millis())
            .collect();
        assert!(spread.len() > 80, "{} distinct of 100", spread.len());
        assert_eq!(
            start_jitter(Duration::ZERO, period, "x"),
            start_jitter(Duration::ZERO, period, "x")
        );
    }
}
