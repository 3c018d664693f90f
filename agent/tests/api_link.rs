//! What the agent asks of the API server for the configMaps and secrets
//! its pods use, without root: the real API client against a local HTTPS
//! server that offers HTTP/2 (as kube-apiserver does) and answers with what
//! the real kube-apiserver 1.36 answered (`agent/testdata/configmap-*`):
//! with `Watch` an object is listed once and watched, reads are local and a
//! change arrives by the watch, an immutable one is not watched, and every
//! request and watch share one HTTP/2 connection; with `Get` every read is
//! a request.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use agent::kube::client::Client;
use agent::kube::config::KubeConfig;
use agent::volumes::api_objects::Objects;
use agent::volumes::objects::ApiObjects;
use bytes::Bytes;
use edge_config::config::ChangeDetection;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;
use hyper::{Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

mod fake_api;

/// The real API server's LIST of one configMap by `metadata.name`, and
/// its watch from that list's version while the configMap was patched.
const LIST: &str = include_str!("../testdata/configmap-list.json");
const WATCH: &str = include_str!("../testdata/configmap-watch.jsonl");

/// The fake API server's objects, what it was asked, and its watchers.
#[derive(Default)]
struct Server {
    objects: Mutex<HashMap<String, Value>>,
    /// "LIST app", "WATCH app", "GET app".
    asked: Mutex<Vec<String>>,
    versions: Mutex<Vec<Version>>,
    connections: AtomicUsize,
    /// Watches whose body is still being sent.
    watching: AtomicUsize,
    events: Mutex<Option<broadcast::Sender<(String, String)>>>,
    /// The resourceVersion each watch started from.
    watched_from: Mutex<Vec<String>>,
    /// The next watch is answered 410 Gone (its version too old).
    gone: std::sync::atomic::AtomicBool,
    /// The last resourceVersion given out.
    version: AtomicUsize,
}

impl Server {
    fn asked(&self, what: &str) -> usize {
        agent_lock(&self.asked)
            .iter()
            .filter(|a| *a == what)
            .count()
    }

    /// Changes an object and tells its watchers, as the recording's
    /// MODIFIED event.
    fn modify(&self, name: &str, data: Value) {
        let mut obj = agent_lock(&self.objects)[name].clone();
        obj["data"] = data;
        let rv = 300 + self.version.fetch_add(1, Ordering::SeqCst);
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let mut ev: Value =
            serde_json::from_str(WATCH.lines().next().expect("an event")).expect("event");
        ev["object"] = obj.clone();
        agent_lock(&self.objects).insert(name.into(), obj);
        if let Some(tx) = agent_lock(&self.events).as_ref() {
            let _ = tx.send((name.into(), format!("{ev}\n")));
        }
    }

    /// Ends every watch (as the server does at its timeoutSeconds).
    fn end_watches(&self) {
        if let Some(tx) = agent_lock(&self.events).as_ref() {
            let _ = tx.send((String::new(), String::new()));
        }
    }
}

fn agent_lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A watch's body: the events sent to it, as they come.
struct Events(mpsc::UnboundedReceiver<String>, Arc<Server>);

impl Drop for Events {
    fn drop(&mut self) {
        self.1.watching.fetch_sub(1, Ordering::SeqCst);
    }
}

impl hyper::body::Body for Events {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|l| l.map(|l| Ok(Frame::data(Bytes::from(l)))))
    }
}

type Body = BoxBody<Bytes, std::convert::Infallible>;

fn answer(server: &Arc<Server>, req: &Request<hyper::body::Incoming>) -> Response<Body> {
    agent_lock(&server.versions).push(req.version());
    let path = req.uri().path();
    let query = req.uri().query().unwrap_or("");
    let prefix = "/api/v1/namespaces/default/configmaps";
    let full = |status: StatusCode, v: Value| {
        let mut r = Response::new(Full::new(Bytes::from(v.to_string())).boxed());
        *r.status_mut() = status;
        r
    };
    if let Some(name) = path.strip_prefix(&format!("{prefix}/")) {
        agent_lock(&server.asked).push(format!("GET {name}"));
        return match agent_lock(&server.objects).get(name) {
            Some(o) => full(StatusCode::OK, o.clone()),
            None => full(
                StatusCode::NOT_FOUND,
                json!({"kind": "Status", "code": 404}),
            ),
        };
    }
    assert_eq!(path, prefix, "{path}?{query}");
    let name = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("fieldSelector=metadata.name%3D"))
        .expect("one object by name")
        .to_string();
    if query.contains("watch=1") {
        assert!(
            !query.contains("allowWatchBookmarks"),
            "one object is relisted, not kept current by bookmarks: {query}"
        );
        // Subscribed before the request is counted: a test that saw it
        // asked and then ends the watches ends this one too.
        let mut events = agent_lock(&server.events)
            .get_or_insert_with(|| broadcast::channel(16).0)
            .subscribe();
        agent_lock(&server.asked).push(format!("WATCH {name}"));
        let from = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("resourceVersion="))
            .unwrap_or_default();
        agent_lock(&server.watched_from).push(from.to_string());
        if server.gone.swap(false, Ordering::SeqCst) {
            return full(
                StatusCode::GONE,
                json!({"kind": "Status", "code": 410, "reason": "Expired", "message": format!("too old resource version: {from}")}),
            );
        }
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((n, line)) = events.recv().await {
                if line.is_empty() {
                    return;
                }
                if n == name && tx.send(line).is_err() {
                    return;
                }
            }
        });
        server.watching.fetch_add(1, Ordering::SeqCst);
        return Response::new(Events(rx, server.clone()).boxed());
    }
    agent_lock(&server.asked).push(format!("LIST {name}"));
    let mut list: Value = serde_json::from_str(LIST).expect("recorded list");
    list["items"] = json!(
        agent_lock(&server.objects)
            .get(&name)
            .into_iter()
            .collect::<Vec<_>>()
    );
    full(StatusCode::OK, list)
}

async fn fake_api_server(server: Arc<Server>) -> u16 {
    // As kube-apiserver: HTTP/2 offered first.
    let (listener, acceptor, _) = fake_api::listener(&[b"h2", b"http/1.1"]).await;
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            server.connections.fetch_add(1, Ordering::SeqCst);
            let (acceptor, server) = (acceptor.clone(), server.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(move |req| {
                    let r = answer(&server, &req);
                    async move { Ok::<_, std::convert::Infallible>(r) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    port
}

async fn setup(strategy: ChangeDetection) -> (Arc<Server>, Objects) {
    setup_synced_every(strategy, Duration::from_secs(60)).await
}

async fn setup_synced_every(
    strategy: ChangeDetection,
    sync_frequency: Duration,
) -> (Arc<Server>, Objects) {
    let server = Arc::new(Server::default());
    let recorded: Value = serde_json::from_str(LIST).expect("recorded list");
    let app = recorded["items"][0].clone();
    let mut frozen = app.clone();
    frozen["metadata"]["name"] = json!("frozen");
    frozen["metadata"]["uid"] = json!("frozen-uid");
    frozen["immutable"] = json!(true);
    agent_lock(&server.objects).extend([("app".into(), app), ("frozen".into(), frozen)]);
    let port = fake_api_server(server.clone()).await;
    let client = Client::new(
        &KubeConfig {
            host: "127.0.0.1".into(),
            port,
            ca: None,
            client_cert: None,
            token: Some("node-token".into()),
        },
        "test",
    )
    .expect("client");
    let objects = Objects::new(Arc::new(client), strategy, sync_frequency);
    (server, objects)
}

async fn read(objects: &Objects, name: &str) -> String {
    let data = objects
        .config_map("default", name)
        .await
        .expect("read")
        .expect("there");
    String::from_utf8(data["k"].clone()).expect("text")
}

/// Waits for `f`, a few seconds at most.
async fn eventually<F: AsyncFnMut() -> bool>(what: &str, mut f: F) {
    for _ in 0..500 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watched_objects_are_read_once_and_changed_by_their_watch() {
    let (server, objects) = setup(ChangeDetection::Watch).await;
    assert_eq!(read(&objects, "app").await, "v1");
    for _ in 0..20 {
        assert_eq!(read(&objects, "app").await, "v1");
    }
    eventually("the watch is open", async || server.asked("WATCH app") == 1).await;
    assert_eq!(
        (server.asked("LIST app"), server.asked("GET app")),
        (1, 0),
        "21 reads, one LIST: {:?}",
        agent_lock(&server.asked)
    );

    server.modify("app", json!({"k": "v2"}));
    eventually("the change arrives by the watch", async || {
        read(&objects, "app").await == "v2"
    })
    .await;
    assert_eq!(server.asked("LIST app"), 1, "no LIST again");

    // Immutable: read once, never watched.
    assert_eq!(read(&objects, "frozen").await, "v1");
    assert_eq!(read(&objects, "frozen").await, "v1");
    assert_eq!(
        (server.asked("LIST frozen"), server.asked("WATCH frozen")),
        (1, 0)
    );

    // A missing object reads as none (the pod's mount says "not found").
    assert!(
        objects
            .config_map("default", "absent")
            .await
            .expect("read")
            .is_none()
    );

    // Everything on one HTTP/2 connection.
    assert_eq!(server.connections.load(Ordering::SeqCst), 1);
    assert!(
        agent_lock(&server.versions)
            .iter()
            .all(|v| *v == Version::HTTP_2),
        "{:?}",
        agent_lock(&server.versions)
    );
}

/// A watch the server ends is resumed from the last version seen, with no
/// LIST; one whose version is too old (410) lists again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_watch_resumes_from_its_version_and_410_relists() {
    let (server, objects) = setup(ChangeDetection::Watch).await;
    assert_eq!(read(&objects, "app").await, "v1");
    eventually("the watch is open", async || server.asked("WATCH app") == 1).await;
    server.modify("app", json!({"k": "v2"}));
    eventually("the change arrives", async || {
        read(&objects, "app").await == "v2"
    })
    .await;

    server.end_watches();
    eventually("watched again", async || server.asked("WATCH app") == 2).await;
    assert_eq!(
        agent_lock(&server.watched_from).last().map(String::as_str),
        Some("300"),
        "from the version of the last event"
    );
    assert_eq!(server.asked("LIST app"), 1, "no relist");

    server.gone.store(true, Ordering::SeqCst);
    server.end_watches();
    eventually("listed again after 410", async || {
        server.asked("LIST app") == 2
    })
    .await;
    eventually("and watched", async || {
        server.watching.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(read(&objects, "app").await, "v2");
}

/// A watch nobody reads for five sync periods (its pods are gone) ends by
/// itself; the next read lists again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unread_watch_ends() {
    let (server, objects) =
        setup_synced_every(ChangeDetection::Watch, Duration::from_millis(40)).await;
    assert_eq!(read(&objects, "app").await, "v1");
    eventually("the watch is open", async || {
        server.watching.load(Ordering::SeqCst) == 1
    })
    .await;
    eventually("the watch ended, nothing read meanwhile", async || {
        server.watching.load(Ordering::SeqCst) == 0
    })
    .await;
    assert_eq!(read(&objects, "app").await, "v1");
    assert_eq!(server.asked("LIST app"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_reads_every_time_and_cache_once_a_minute() {
    let (server, objects) = setup(ChangeDetection::Get).await;
    for _ in 0..3 {
        assert_eq!(read(&objects, "app").await, "v1");
    }
    assert_eq!((server.asked("GET app"), server.asked("LIST app")), (3, 0));

    let (server, objects) = setup(ChangeDetection::Cache).await;
    for _ in 0..3 {
        assert_eq!(read(&objects, "app").await, "v1");
    }
    server.modify("app", json!({"k": "v2"}));
    assert_eq!(read(&objects, "app").await, "v1", "kept for a minute");
    assert_eq!((server.asked("GET app"), server.asked("WATCH app")), (1, 0));
}
