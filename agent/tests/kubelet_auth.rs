//! The API port's webhook authentication and authorization end to end
//! without root: `Auth` over the real API client (TLS, a bearer token)
//! against a local HTTPS server that answers TokenReviews and
//! SubjectAccessReviews with what the real kube-apiserver 1.26 answered
//! (`agent/testdata`), checking what is asked, the answers and
//! the caches; and the local CA of `picolet ctl api` through the API
//! port's TLS.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent::kube::client::Client;
use agent::kube::config::KubeConfig;
use agent::server::auth::{Auth, Identity, Refusal, attributes};
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;

mod fake_api;

const TOKEN_OK: &str = include_str!("../testdata/tokenreview-ok.json");
const TOKEN_BAD: &str = include_str!("../testdata/tokenreview-bad.json");
const SAR_ALLOWED: &str = include_str!("../testdata/sar-allowed.json");
const SAR_DENIED: &str = include_str!("../testdata/sar-denied.json");

/// Requests the fake API server got, by path.
#[derive(Default)]
struct Seen {
    token_reviews: AtomicUsize,
    access_reviews: AtomicUsize,
}

/// Answers a review the way the recording did: the service account's
/// token is "sa-token", anything else is refused; the service account may
/// not use nodes/proxy, an admin (system:masters) may.
async fn answer(
    req: Request<hyper::body::Incoming>,
    seen: Arc<Seen>,
) -> Response<Full<bytes::Bytes>> {
    let path = req.uri().path().to_string();
    let auth = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let body = req.into_body().collect().await.expect("body").to_bytes();
    let v: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(
        auth.as_deref(),
        Some("Bearer node-token"),
        "the node's own credentials"
    );
    let text = match path.as_str() {
        "/apis/authentication.k8s.io/v1/tokenreviews" => {
            seen.token_reviews.fetch_add(1, Ordering::SeqCst);
            assert_eq!(v["kind"], "TokenReview");
            if v["spec"]["token"] == "sa-token" {
                TOKEN_OK
            } else {
                TOKEN_BAD
            }
        }
        "/apis/authorization.k8s.io/v1/subjectaccessreviews" => {
            seen.access_reviews.fetch_add(1, Ordering::SeqCst);
            let attrs = &v["spec"]["resourceAttributes"];
            assert_eq!(
                (attrs["resource"].as_str(), attrs["name"].as_str()),
                (Some("nodes"), Some("pk-node"))
            );
            let admin = v["spec"]["groups"]
                .as_array()
                .is_some_and(|g| g.iter().any(|g| g == "system:masters"));
            if admin { SAR_ALLOWED } else { SAR_DENIED }
        }
        other => panic!("unexpected request {other}"),
    };
    Response::new(Full::new(bytes::Bytes::from(text)))
}

async fn fake_api_server(seen: Arc<Seen>) -> (u16, Vec<u8>) {
    let (listener, acceptor, cert) = fake_api::listener(&[b"http/1.1"]).await;
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(move |req| {
                    let seen = seen.clone();
                    async move { Ok::<_, std::convert::Infallible>(answer(req, seen).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (port, cert)
}

/// The node's API client, with a token, on a fake API server that
/// records into `seen`.
async fn api_client(seen: Arc<Seen>) -> Arc<Client> {
    let (port, ca) = fake_api_server(seen).await;
    let kc = KubeConfig {
        host: "127.0.0.1".into(),
        port,
        ca: Some(ca),
        client_cert: None,
        token: Some("node-token".into()),
    };
    Arc::new(Client::new(&kc, "picolet-test").expect("client"))
}

fn auth(client: Arc<Client>, config: &str) -> Auth {
    let cfg = edge_config::config::Config::parse(
        &format!("{config}\npicolet: {{kubeconfig: /unused}}\n"),
        std::path::Path::new("test.yaml"),
    )
    .expect("config");
    Auth::new("pk-node".into(), &cfg, Some(client))
}

#[tokio::test]
async fn tokens_and_access_are_reviewed_by_the_api_server_and_cached() {
    let seen = Arc::new(Seen::default());
    let client = api_client(seen.clone()).await;
    let a = auth(client.clone(), "");

    // A service account's token: who it is, from the review.
    let sa = a
        .authenticate(Some("sa-token"))
        .await
        .expect("authenticated");
    assert_eq!(sa.user, "system:serviceaccount:default:reader");
    a.authenticate(Some("sa-token")).await.expect("cached");
    assert_eq!(
        seen.token_reviews.load(Ordering::SeqCst),
        1,
        "cached for cacheTTL"
    );
    // A token the server refuses: 401, and the refusal is remembered too.
    assert_eq!(
        a.authenticate(Some("garbage")).await,
        Err(Refusal::Unauthorized)
    );
    assert_eq!(
        a.authenticate(Some("garbage")).await,
        Err(Refusal::Unauthorized)
    );
    assert_eq!(seen.token_reviews.load(Ordering::SeqCst), 2);
    // No credentials, anonymous off: 401 without asking anyone.
    assert_eq!(a.authenticate(None).await, Err(Refusal::Unauthorized));
    assert_eq!(seen.token_reviews.load(Ordering::SeqCst), 2);

    // The service account may not read pods through nodes/proxy: 403 with
    // kubelet's message; asked once, then cached.
    let what = attributes(&Method::GET, "/pods", "pk-node");
    let denied = a.authorize(&sa, &what).await;
    assert_eq!(
        denied,
        Err(Refusal::Forbidden(
            "Forbidden (user=system:serviceaccount:default:reader, verb=get, resource=nodes, subresource=proxy)".into()
        ))
    );
    assert!(a.authorize(&sa, &what).await.is_err());
    assert_eq!(seen.access_reviews.load(Ordering::SeqCst), 1);
    // The API server's kubelet client (system:masters) may.
    let admin = Identity::from_certificate(
        "kube-apiserver-kubelet-client".into(),
        vec!["system:masters".into()],
    );
    a.authorize(&admin, &what).await.expect("allowed");
    assert_eq!(seen.access_reviews.load(Ordering::SeqCst), 2);

    // Short TTLs: the answers are asked for again once they expire.
    let brief = auth(
        client.clone(),
        "authentication: {webhook: {cacheTTL: 1s}}\nauthorization: {webhook: {cacheAuthorizedTTL: 1s, cacheUnauthorizedTTL: 1s}}",
    );
    brief.authenticate(Some("sa-token")).await.expect("ok");
    brief.authorize(&admin, &what).await.expect("ok");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    brief.authenticate(Some("sa-token")).await.expect("ok");
    brief.authorize(&admin, &what).await.expect("ok");
    assert_eq!(seen.token_reviews.load(Ordering::SeqCst), 4);
    assert_eq!(seen.access_reviews.load(Ordering::SeqCst), 4);

    // AlwaysAllow and anonymous: nobody is asked.
    let open = auth(
        client,
        "authorization: {mode: AlwaysAllow}\nauthentication: {anonymous: {enabled: true}}",
    );
    let anon = open.authenticate(None).await.expect("anonymous");
    assert_eq!(anon.user, "system:anonymous");
    open.authorize(&anon, &what).await.expect("always allowed");
    assert_eq!(seen.access_reviews.load(Ordering::SeqCst), 4);
}

/// A TLS server with the API port's TLS and `Auth::admit` in front: the
/// answer is the user admitted, or the refusal's status.
async fn api_port(auth: Arc<Auth>, tls: Arc<rustls::ServerConfig>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, auth) = (acceptor.clone(), auth.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let cert: Option<Vec<u8>> = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .map(|c| c.as_ref().to_vec());
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (auth, cert) = (auth.clone(), cert.clone());
                    async move {
                        let admitted = auth
                            .admit(cert.as_deref(), None, req.method(), req.uri().path())
                            .await;
                        let mut resp = Response::new(Full::new(bytes::Bytes::from(
                            admitted
                                .as_ref()
                                .map(|w| w.user.clone())
                                .unwrap_or_default(),
                        )));
                        *resp.status_mut() = match admitted {
                            Ok(_) => hyper::StatusCode::OK,
                            Err(Refusal::Unauthorized) => hyper::StatusCode::UNAUTHORIZED,
                            Err(_) => hyper::StatusCode::FORBIDDEN,
                        };
                        Ok::<_, std::convert::Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    addr
}

/// `picolet ctl api`'s way in: a certificate of the node's local CA is
/// admitted with webhook authorization on and no review asked (the API
/// server would refuse this user); a certificate of `clientCAFile` with
/// the same name is reviewed and refused; a server whose certificate is
/// none of the agent's files is not talked to.
#[tokio::test]
async fn the_local_ca_lets_root_on_the_node_in_and_no_one_else() {
    use agent::certificate::x509;
    use agent::server::local::{self, LocalCa};

    let seen = Arc::new(Seen::default());
    let client = api_client(seen.clone()).await;

    let data = tempfile::tempdir().expect("tmp");
    let pki = data.path().join("agent/pki");
    let local_ca = LocalCa::ensure(&pki).expect("local CA");
    let (cert, key) = agent::server::tls::self_signed(&pki, "pk-node", &[]).expect("serving");
    // The cluster's client CA, which signs a certificate of the same name.
    let (_, cluster_key) = agent::certificate::bootstrap::new_key().expect("cluster key");
    let cluster_ca = x509::pem(
        "CERTIFICATE",
        &x509::ca("cluster-ca", &cluster_key, 1_700_000_000, 2_700_000_000).expect("ca"),
    );
    let (_, user_key) = agent::certificate::bootstrap::new_key().expect("user key");
    let impostor = x509::client(
        local::USER,
        &[],
        ring::signature::KeyPair::public_key(&user_key).as_ref(),
        "cluster-ca",
        &cluster_key,
        1_700_000_000,
        2_700_000_000,
    )
    .expect("client cert");

    let a = Arc::new(auth(client, "").with_local_ca(local_ca.public_key()));
    let tls = agent::server::tls::server_config(
        agent::server::tls::current(&cert, &key).expect("current"),
        Some(cluster_ca.as_bytes()),
        Some(local_ca.cert_pem()),
    )
    .expect("tls");
    let addr = api_port(a.clone(), tls).await;
    let cfg = |data_dir: &std::path::Path| {
        edge_config::config::Config::parse(
            &format!(
                "address: 127.0.0.1\nport: {}\npicolet: {{dataDir: {}}}\n",
                addr.port(),
                data_dir.display()
            ),
            std::path::Path::new("test.yaml"),
        )
        .expect("config")
    };

    let answer = local::get(&cfg(data.path()), "/pods").await.expect("get");
    assert_eq!(
        (answer.status, answer.body.as_ref()),
        (200, local::USER.as_bytes())
    );
    assert_eq!(
        seen.access_reviews.load(Ordering::SeqCst),
        0,
        "not reviewed"
    );

    // The same name from the cluster's CA: a reviewed user like any other.
    let refused = a.admit(Some(&impostor), None, &Method::GET, "/pods").await;
    assert!(matches!(refused, Err(Refusal::Forbidden(_))), "{refused:?}");
    assert_eq!(seen.access_reviews.load(Ordering::SeqCst), 1);

    // Another data dir: its own CA, and no serving certificate that is
    // this server's: refused before anything is sent.
    let elsewhere = tempfile::tempdir().expect("tmp");
    LocalCa::ensure(&elsewhere.path().join("agent/pki")).expect("other CA");
    let err = local::get(&cfg(elsewhere.path()), "/pods")
        .await
        .expect_err("not the agent's certificate");
    assert!(matches!(err, local::Error::Handshake { .. }), "{err}");
    assert!(
        local::get(&cfg(data.path()), "pods").await.is_err(),
        "a path starts with /"
    );
}
