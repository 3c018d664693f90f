//! The probe handlers, kubelet's `prober.go`: exec through CRI, httpGet
//! and tcpSocket with [`crate::httpc`], and the gRPC health protocol.

use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::httpc::{self, join_host_port};
use crate::probe::{Outcome, Target};
use crate::runtime::Cri;

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
                Ok(Err(e)) => Outcome::Failure(e.to_string()),
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
        Ok(r) if r.exit_code == 0 => Outcome::Success,
        Ok(r) => Outcome::Failure(r.output.trim_end().to_string()),
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
            let connector = httpc::tls(true).map_err(|e| Outcome::Failure(e.to_string()))?;
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
