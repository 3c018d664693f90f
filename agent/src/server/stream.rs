//! `/exec`, `/attach`, `/portForward` and `/run` on the API port: what
//! `kubectl exec`, `attach` and `port-forward` reach through the API
//! server. As kubelet since 1.20 (redirects are gone), the request is
//! turned into a CRI `Exec` / `Attach` / `PortForward` call, and the
//! connection is proxied to the URL the runtime answers with: the request
//! goes there with its upgrade headers (SPDY/3.1 or WebSocket, whichever
//! the API server speaks), the runtime's answer comes back, and after a
//! `101 Switching Protocols` both upgraded connections are spliced until
//! either side closes. The runtime's streaming server only ever sees the
//! agent, on loopback.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;

use crate::logs::reader::url_pairs;

/// How long the runtime's streaming server has to answer the upgrade.
const UPGRADE_TIMEOUT: Duration = Duration::from_secs(30);

/// The channels asked for in the query (`input`, `output`, `error`,
/// `tty`: "1" or "true") and the `command` words, as kubelet's
/// `remotecommand.NewOptions` reads them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Options {
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
    pub ports: Vec<i32>,
}

/// A query value that is not what its key takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("port: {0:?} is not a port")]
pub struct BadPort(pub String);

/// Reads the query; Err names a bad value.
pub fn options(query: &str) -> Result<Options, BadPort> {
    let mut o = Options::default();
    let on = |v: &str| matches!(v, "1" | "true" | "True" | "TRUE");
    for (k, v) in url_pairs(query) {
        match k.as_str() {
            "command" => o.command.push(v),
            "input" | "stdin" => o.stdin = on(&v),
            "output" | "stdout" => o.stdout = on(&v),
            "error" | "stderr" => o.stderr = on(&v),
            "tty" => o.tty = on(&v),
            "port" => {
                let p: i32 = v
                    .parse()
                    .ok()
                    .filter(|p| (1..=65535).contains(p))
                    .ok_or_else(|| BadPort(v.clone()))?;
                o.ports.push(p);
            }
            _ => {}
        }
    }
    // A TTY merges stderr into stdout (kubelet's NewOptions).
    if o.tty {
        o.stderr = false;
    }
    Ok(o)
}

/// The hop-by-hop headers not copied (besides the upgrade pair, which is).
fn forwarded(name: &header::HeaderName) -> bool {
    !matches!(
        name.as_str(),
        "host" | "authorization" | "proxy-authorization" | "te" | "trailer" | "keep-alive"
    )
}

/// Proxies `req` to the runtime's streaming `url` and, on an upgrade,
/// splices the two connections; `slot` is held until the session ends.
pub async fn proxy(
    url: &str,
    mut req: Request<Body>,
    slot: tokio::sync::OwnedSemaphorePermit,
) -> Response<Body> {
    let fail = |code: StatusCode, m: String| {
        tracing::debug!("stream proxy: {m}");
        Response::builder()
            .status(code)
            .body(Body::from(m))
            .unwrap_or_default()
    };
    let Ok(uri) = url.parse::<hyper::Uri>() else {
        return fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the runtime's streaming URL {url:?} does not parse"),
        );
    };
    let (Some(authority), Some("http")) = (uri.authority().cloned(), uri.scheme_str()) else {
        return fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the runtime's streaming URL {url:?} is not http://host:port/..."),
        );
    };
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    let mut out = Request::builder().method(req.method().clone()).uri(path);
    for (k, v) in req.headers() {
        if forwarded(k) {
            out = out.header(k, v);
        }
    }
    out = out.header(header::HOST, authority.as_str());
    // Full<Bytes>, as the API client's requests: one hyper client in the binary.
    let Ok(out) = out.body(http_body_util::Full::new(bytes::Bytes::new())) else {
        return fail(StatusCode::BAD_REQUEST, "the request's headers".into());
    };
    let client_upgrade = hyper::upgrade::on(&mut req);
    let attempt = async {
        let tcp = tokio::net::TcpStream::connect(authority.as_str())
            .await
            .map_err(|e| format!("connect to the runtime's streaming server {authority}: {e}"))?;
        let io: Box<dyn crate::httpc::Io> = Box::new(tcp);
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| format!("the runtime's streaming server: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        send.send_request(out)
            .await
            .map_err(|e| format!("the runtime's streaming server: {e}"))
    };
    let mut answer = match tokio::time::timeout(UPGRADE_TIMEOUT, attempt).await {
        Ok(Ok(a)) => a,
        Ok(Err(m)) => return fail(StatusCode::BAD_GATEWAY, m),
        Err(_) => {
            return fail(
                StatusCode::GATEWAY_TIMEOUT,
                format!("the runtime's streaming server did not answer in {UPGRADE_TIMEOUT:?}"),
            );
        }
    };
    if answer.status() != StatusCode::SWITCHING_PROTOCOLS {
        // Refused (a bad token, a protocol it does not speak): its answer.
        let (parts, body) = answer.into_parts();
        return Response::from_parts(parts, Body::new(body));
    }
    let runtime_upgrade = hyper::upgrade::on(&mut answer);
    let mut back = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
    for (k, v) in answer.headers() {
        back = back.header(k, v);
    }
    tokio::spawn(async move {
        let _slot = slot;
        let (theirs, ours) = match tokio::join!(client_upgrade, runtime_upgrade) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => {
                tracing::debug!(
                    client = ?a.err(),
                    runtime = ?b.err(),
                    "stream proxy: an upgrade failed"
                );
                return;
            }
        };
        let (mut theirs, mut ours) = (TokioIo::new(theirs), TokioIo::new(ours));
        let _ = tokio::io::copy_bidirectional(&mut theirs, &mut ours).await;
    });
    back.body(Body::empty()).unwrap_or_else(|_| {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::BAD_GATEWAY;
        r
    })
}

/// A plain-text answer.
pub fn text(code: StatusCode, m: impl Into<String>) -> Response<Body> {
    let mut r = Response::new(Body::from(m.into()));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_queries_as_the_api_server_sends_them() {
        let o = options("command=sh&command=-c&command=echo%20hi&input=1&output=1&tty=1&error=1")
            .expect("ok");
        assert_eq!(o.command, ["sh", "-c", "echo hi"]);
        assert!(o.stdin && o.stdout && o.tty && !o.stderr, "{o:?}");
        let o = options("command=ls&output=true&error=true").expect("ok");
        assert!(!o.stdin && o.stdout && o.stderr && !o.tty);
        assert_eq!(options("port=8080&port=53").expect("ok").ports, [8080, 53]);
        assert!(options("port=0").is_err());
        assert!(options("port=http").is_err());
    }
}
