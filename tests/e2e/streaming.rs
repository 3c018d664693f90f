//! End-to-end: CRI streaming on the real `picolet shim` — Exec (pipes and
//! a tty) and PortForward over SPDY/3.1, driven by crictl v1.29.0's
//! recorded bytes (the real peer) and by our own client
//! (`cri_proto::streaming::client`, what `picolet ctl` uses). Root.

use crate::common;

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use common::cri::{self, Client};
use common::rt::{new_pod, ready_shim};
use cri_proto::streaming::client::{self, ExecIo};
use cri_proto::streaming::session::Conn;
use cri_proto::streaming::spdy::{Codec, Frame};
use cri_proto::streaming::{
    Outcome, PORTFORWARD_V1, REMOTECOMMAND_PROTOCOLS, REMOTECOMMAND_V4, TermSize, ws,
};
use cri_proto::v1::{ExecRequest, PortForwardRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `echo piped-in | crictl exec -i ID sh -c 'cat; echo done; exit 4'`
/// (crictl v1.29.0): its upgrade request and what it sent after it.
const CRICTL_EXEC_HTTP: &[u8] =
    include_bytes!("../../cri-proto/testdata/crictl-1.29.0-exec-i.http");
const CRICTL_EXEC_SPDY: &[u8] =
    include_bytes!("../../cri-proto/testdata/crictl-1.29.0-exec-i.spdy");

/// A running pod-network container that sleeps; returns (pod, container).
async fn sleeper(shim: &common::Shim, c: &mut Client, name: &str, cmd: &str) -> (String, String) {
    let (pod, pod_id) = new_pod(shim, c, name).await;
    let id = cri::create(
        c,
        &pod_id,
        &pod,
        cri::container("app", "busybox", &["sh", "-c", cmd]),
    )
    .await;
    cri::start(c, &id).await;
    (pod_id, id)
}

/// `len` bytes that repeat every 251, varied by `salt`.
fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..251u8).cycle().take(len).map(|b| b ^ salt).collect()
}

async fn exec_url(c: &mut Client, id: &str, cmd: &[&str], stdin: bool, tty: bool) -> String {
    c.exec(ExecRequest {
        container_id: id.into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        tty,
        stdin,
        stdout: true,
        stderr: !tty,
    })
    .await
    .expect("Exec")
    .into_inner()
    .url
}

/// A streaming session (exec or attach) at `url` with pipes: `stdin` sent
/// and closed; returns how it ended, stdout and stderr.
async fn with_pipes(url: &str, stdin: Vec<u8>) -> (Outcome, Vec<u8>, Vec<u8>) {
    let (session, protocol) = client::connect(url, REMOTECOMMAND_PROTOCOLS)
        .await
        .expect("upgrade");
    assert_eq!(protocol, "v4.channel.k8s.io");
    pipes_on(session, protocol, stdin).await
}

/// The same over a connection already made (SPDY or WebSocket).
async fn pipes_on<C: Conn>(conn: C, protocol: &str, stdin: Vec<u8>) -> (Outcome, Vec<u8>, Vec<u8>) {
    let (out_w, mut out_r) = tokio::io::duplex(64 << 10);
    let (err_w, mut err_r) = tokio::io::duplex(64 << 10);
    let readers = tokio::spawn(async move {
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let (a, b) = tokio::join!(out_r.read_to_end(&mut o), err_r.read_to_end(&mut e));
        a.and(b).expect("read outputs");
        (o, e)
    });
    let outcome = client::exec(
        conn,
        protocol,
        ExecIo {
            stdin: Some(std::io::Cursor::new(stdin)),
            stdout: Some(out_w),
            stderr: Some(err_w),
            tty: false,
            resize: None,
        },
    )
    .await
    .expect("streaming session");
    let (out, err) = readers.await.expect("readers");
    (outcome, out, err)
}

/// A streaming session at `url` on a terminal of `size`, typing `keys`;
/// returns how it ended and what the terminal showed.
async fn on_a_tty<K>(url: &str, size: TermSize, keys: K) -> (Outcome, String)
where
    K: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    let (session, protocol) = client::connect(url, REMOTECOMMAND_PROTOCOLS)
        .await
        .expect("upgrade");
    let (size_tx, size_rx) = tokio::sync::mpsc::channel(1);
    size_tx.send(size).await.expect("size");
    let (out_w, mut out_r) = tokio::io::duplex(64 << 10);
    let reader = tokio::spawn(async move {
        let mut o = Vec::new();
        out_r.read_to_end(&mut o).await.expect("read");
        o
    });
    let outcome = client::exec(
        session,
        protocol,
        ExecIo {
            stdin: Some(keys),
            stdout: Some(out_w),
            stderr: None::<tokio::io::Sink>,
            tty: true,
            resize: Some(size_rx),
        },
    )
    .await
    .expect("streaming session");
    drop(size_tx);
    let out = String::from_utf8_lossy(&reader.await.expect("reader")).into_owned();
    (outcome, out)
}

async fn attach_url(c: &mut Client, id: &str, tty: bool) -> String {
    c.attach(cri_proto::v1::AttachRequest {
        container_id: id.into(),
        stdin: true,
        tty,
        stdout: true,
        stderr: !tty,
    })
    .await
    .expect("Attach")
    .into_inner()
    .url
}

/// Sends a recorded upgrade request (its token replaced by `url`'s), reads
/// the response head, sends the recorded bytes after it, and returns the
/// head and all the server sent until it closed.
async fn replay(url: &str, http: &[u8], body: &'static [u8]) -> (String, Vec<u8>) {
    let (addr, path) = url
        .strip_prefix("http://")
        .and_then(|r| r.split_once('/'))
        .expect("http URL");
    let kind = path.split('/').next().unwrap_or("");
    let request =
        String::from_utf8_lossy(http).replace(&format!("/{kind}/TOKEN"), &format!("/{path}"));
    let addr = addr.to_string();
    tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(&addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        s.write_all(request.as_bytes()).expect("request");
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut b).expect("response head");
            head.push(b[0]);
        }
        s.write_all(body).expect("recorded bytes");
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        (String::from_utf8_lossy(&head).into_owned(), rest)
    })
    .await
    .expect("replay")
}

#[tokio::test(flavor = "multi_thread")]
async fn crictl_exec_bytes_are_served() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod_id, id) = sleeper(&shim, &mut c, "crictl-exec", "sleep 600").await;
    let url = exec_url(
        &mut c,
        &id,
        &["sh", "-c", "cat; echo done; exit 4"],
        true,
        false,
    )
    .await;
    let (head, wire) = replay(&url, CRICTL_EXEC_HTTP, CRICTL_EXEC_SPDY).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(head.contains("v4.channel.k8s.io"), "{head}");
    let mut codec = Codec::new();
    let mut buf = wire;
    let (mut stdout, mut error, mut replies) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(f) = codec.decode(&mut buf).expect("spdy from the shim") {
        match f {
            Frame::SynReply { stream, .. } => replies.push(stream),
            Frame::Data {
                stream: 5, data, ..
            } => stdout.extend(data),
            Frame::Data {
                stream: 1, data, ..
            } => error.extend(data),
            _ => {}
        }
    }
    assert_eq!(
        replies,
        vec![1, 3, 5, 7],
        "a reply to each of crictl's streams"
    );
    assert_eq!(String::from_utf8_lossy(&stdout), "piped-in\ndone\n");
    let status: serde_json::Value = serde_json::from_slice(&error).expect("v4 status JSON");
    assert_eq!(status["reason"], "NonZeroExitCode", "{status}");
    assert_eq!(status["details"]["causes"][0]["message"], "4", "{status}");
    cri::teardown(&mut c, &pod_id).await;
}

/// `echo piped-in | <client-go 0.29's WebSocket executor, v5> exec ID sh
/// -c 'cat; echo done; exit 4'` (a throwaway Go program over cri-tools'
/// vendored client-go): its upgrade request and its frames after it.
const CLIENT_GO_WS_HTTP: &[u8] =
    include_bytes!("../../cri-proto/testdata/client-go-0.29-ws-exec-i.http");
const CLIENT_GO_WS_FRAMES: &[u8] =
    include_bytes!("../../cri-proto/testdata/client-go-0.29-ws-exec-i.ws");

#[tokio::test(flavor = "multi_thread")]
async fn client_go_websocket_exec_bytes_are_served() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod_id, id) = sleeper(&shim, &mut c, "ws-replay", "sleep 600").await;
    let url = exec_url(
        &mut c,
        &id,
        &["sh", "-c", "cat; echo done; exit 4"],
        true,
        false,
    )
    .await;
    // Its data and stdin's half-close; its close frame (the last 8 bytes)
    // came after the session was over.
    let frames = &CLIENT_GO_WS_FRAMES[..CLIENT_GO_WS_FRAMES.len() - 8];
    let (head, wire) = replay(&url, CLIENT_GO_WS_HTTP, frames).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    // The accept key for the recorded Sec-WebSocket-Key.
    assert!(
        head.contains("Sec-WebSocket-Accept: ") || head.contains("sec-websocket-accept: "),
        "{head}"
    );
    assert!(head.to_lowercase().contains("v5.channel.k8s.io"), "{head}");
    let mut buf = wire;
    let (mut stdout, mut status) = (Vec::new(), Vec::new());
    while let Some((_, op, m)) = ws::decode(&mut buf).expect("frames from the shim") {
        match (op, m.first()) {
            (2, Some(1)) => stdout.extend_from_slice(&m[1..]),
            (2, Some(3)) => status.extend_from_slice(&m[1..]),
            (2, Some(255)) => panic!("a server half-close client-go cannot read: {m:?}"),
            _ => {}
        }
    }
    assert_eq!(String::from_utf8_lossy(&stdout), "piped-in\ndone\n");
    let status: serde_json::Value = serde_json::from_slice(&status).expect("v4 status JSON");
    assert_eq!(status["details"]["causes"][0]["message"], "4", "{status}");
    cri::teardown(&mut c, &pod_id).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_carries_stdin_stdout_stderr_and_the_exit_code() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod_id, id) = sleeper(&shim, &mut c, "exec-pipes", "sleep 600").await;
    let url = exec_url(
        &mut c,
        &id,
        &["sh", "-c", "cat; echo to-err >&2; exit 3"],
        true,
        false,
    )
    .await;
    // 1 MiB through the container and back, past any one frame or buffer.
    let input = pattern(1 << 20, 0);
    let (outcome, out, err) = with_pipes(&url, input.clone()).await;
    assert_eq!(outcome, Outcome::Exited(3));
    assert!(
        out == input,
        "stdout: {} bytes back of {}",
        out.len(),
        input.len()
    );
    assert_eq!(String::from_utf8_lossy(&err), "to-err\n");

    // A URL is good once; a second use is refused before any upgrade.
    let again = post_upgrade(&url).await;
    assert!(again.starts_with("HTTP/1.1 404"), "{again}");
    cri::teardown(&mut c, &pod_id).await;
}

/// POSTs an upgrade to `url` and returns the response head.
async fn post_upgrade(url: &str) -> String {
    let (addr, path) = url
        .strip_prefix("http://")
        .and_then(|r| r.split_once('/'))
        .expect("http URL");
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "POST /{path} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).await.expect("read");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_on_a_tty_gets_a_terminal_its_size_and_input() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod_id, id) = sleeper(&shim, &mut c, "exec-tty", "sleep 600").await;
    let script =
        "[ -t 0 ] && echo stdin-is-a-tty; tty; sleep 0.5; stty size; read x; echo got-$x; exit 5";
    let url = exec_url(&mut c, &id, &["sh", "-c", script], true, true).await;
    let size = TermSize {
        width: 100,
        height: 30,
    };
    let (outcome, out) = on_a_tty(&url, size, std::io::Cursor::new(b"hello\r".to_vec())).await;
    assert_eq!(outcome, Outcome::Exited(5), "{out}");
    assert!(out.contains("stdin-is-a-tty"), "{out:?}");
    // The terminal is the container's own (its devpts), as runc makes it.
    assert!(out.contains("\r\n/dev/pts/"), "{out:?}");
    assert!(
        out.contains("30 100"),
        "the terminal has the size sent: {out:?}"
    );
    // The terminal turns "\r" into "\r\n" (icrnl) and echoes the input.
    assert!(out.contains("got-hello"), "{out:?}");
    cri::teardown(&mut c, &pod_id).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn port_forward_carries_bytes_both_ways_on_two_connections_at_once() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    // An echo server inside the pod's own network namespace.
    let (pod_id, _) = sleeper(&shim, &mut c, "pf", "nc -ll -p 9000 -e cat").await;
    let url = c
        .port_forward(PortForwardRequest {
            pod_sandbox_id: pod_id.clone(),
            port: vec![9000],
        })
        .await
        .expect("PortForward")
        .into_inner()
        .url;
    let (session, _) = client::connect(&url, &[PORTFORWARD_V1])
        .await
        .expect("upgrade");
    let session = std::sync::Arc::new(session);
    // nc listens a moment after the container starts: until a forwarded
    // connection is taken (nc -e cat ends it at our EOF), retry.
    common::eventually_async(
        "nc to listen",
        Duration::from_secs(20),
        async || {
            let (ours, theirs) = tokio::io::duplex(1024);
            drop(ours);
            let msg = client::forward(&session, 99, 9000, theirs)
                .await
                .expect("forward");
            if msg.is_empty() { Ok(()) } else { Err(msg) }
        },
        String::new,
    )
    .await;
    let mut runs = Vec::new();
    for n in 0..2u8 {
        let session = session.clone();
        runs.push(tokio::spawn(async move {
            let payload = pattern(256 << 10, n);
            let (ours, theirs) = tokio::io::duplex(64 << 10);
            let fwd = tokio::spawn({
                let session = session.clone();
                async move { client::forward(&session, u32::from(n), 9000, theirs).await }
            });
            let (mut rd, mut wr) = tokio::io::split(ours);
            let send = {
                let p = payload.clone();
                async move {
                    wr.write_all(&p).await.expect("send");
                    wr.shutdown().await.expect("half-close");
                }
            };
            let mut back = Vec::new();
            let recv = rd.read_to_end(&mut back);
            let ((), got) = tokio::join!(send, recv);
            got.expect("receive");
            let msg = fwd.await.expect("forward task").expect("forward");
            (payload, back, msg)
        }));
    }
    for r in runs {
        let (sent, back, msg) = r.await.expect("connection");
        assert_eq!(msg, "", "no error on the error stream");
        assert!(back == sent, "{} bytes back of {}", back.len(), sent.len());
    }

    // Nothing listens on 9001: the error stream says so, the session stays.
    let (_ours, theirs) = tokio::io::duplex(1024);
    let msg = client::forward(&session, 7, 9001, theirs)
        .await
        .expect("forward");
    assert!(msg.contains("Connection refused"), "{msg}");
    cri::teardown(&mut c, &pod_id).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn attach_writes_stdin_once_and_streams_output_until_the_exit() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "attach").await;
    let script = "echo started; while read l; do echo got:$l; echo err:$l >&2; done; echo stdin-closed; sleep 1; echo bye";
    let mut cfg = cri::container("app", "busybox", &["sh", "-c", script]);
    cfg.stdin = true;
    cfg.stdin_once = true;
    let id = cri::create(&mut c, &pod_id, &pod, cfg).await;
    cri::start(&mut c, &id).await;
    // The monitor's attach socket is root's alone.
    let socket = shim
        .dir
        .path()
        .join("run/containers")
        .join(&id)
        .join("attach");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&socket)
            .expect("attach socket")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "{}", socket.display());
    let url = attach_url(&mut c, &id, false).await;
    // Our stdin ends after two lines: stdin_once closes the container's.
    let (outcome, out, err) = with_pipes(&url, b"one\ntwo\n".to_vec()).await;
    let (out, err) = (String::from_utf8_lossy(&out), String::from_utf8_lossy(&err));
    // The attach ends with the container, after everything it wrote.
    assert_eq!(outcome, Outcome::Exited(0));
    assert!(out.contains("got:one\ngot:two\nstdin-closed\n"), "{out:?}");
    assert!(out.ends_with("bye\n"), "{out:?}");
    assert_eq!(err, "err:one\nerr:two\n");
    let st = cri::status(&mut c, &id).await;
    assert_eq!(
        st.state,
        cri_proto::v1::ContainerState::ContainerExited as i32
    );
    // The log has it all too.
    let log = std::fs::read_to_string(&st.log_path).expect("log");
    assert!(
        log.contains("stdout F got:two") && log.contains("stderr F err:one"),
        "{log}"
    );
    cri::teardown(&mut c, &pod_id).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tty_container_has_a_terminal_that_attach_types_into_and_resizes() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "ttyc").await;
    let mut cfg = cri::container("app", "busybox", &["sh"]);
    cfg.stdin = true;
    cfg.tty = true;
    let id = cri::create(&mut c, &pod_id, &pod, cfg).await;
    cri::start(&mut c, &id).await;
    let url = attach_url(&mut c, &id, true).await;
    // Once the shell waits for its terminal, what a user would type; the
    // terminal stays open until the shell has exited.
    let sh = common::eventually(
        "the container's shell",
        Duration::from_secs(20),
        || {
            pids_of(&shim.cgroup_parent("ttyc"))
                .into_iter()
                .find(|p| comm(*p) == "sh")
        },
        String::new,
    );
    common::eventually(
        "the shell to wait for input",
        Duration::from_secs(20),
        || waits_for_input(sh),
        String::new,
    );
    let (mut typing, keys) = tokio::io::duplex(1024);
    tokio::spawn(async move {
        let _ = typing
            .write_all(b"stty size; tty; echo term=$TERM\rexit 3\r")
            .await;
        let _ = tokio::task::spawn_blocking(move || {
            common::eventually(
                "the shell to exit",
                Duration::from_secs(20),
                || !Path::new(&format!("/proc/{sh}")).exists(),
                String::new,
            )
        })
        .await;
        drop(typing);
    });
    let size = TermSize {
        width: 91,
        height: 21,
    };
    let (outcome, out) = on_a_tty(&url, size, keys).await;
    assert_eq!(outcome, Outcome::Exited(0), "{out}");
    assert!(out.contains("21 91"), "the size sent: {out:?}");
    // A terminal of the container's own devpts, as runc gives it.
    assert!(out.contains("/dev/pts/0"), "{out:?}");
    assert!(out.contains("term=xterm"), "{out:?}");
    let st = cri::status(&mut c, &id).await;
    assert_eq!(st.exit_code, 3);
    cri::teardown(&mut c, &pod_id).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_and_attach_run_over_websocket_v5_and_v4() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod_id, id) = sleeper(&shim, &mut c, "exec-ws", "sleep 600").await;
    // v5 half-closes stdin ([255, 0]): `cat` sees its end.
    let cmd = ["sh", "-c", "cat; echo to-err >&2; exit 3"];
    let url = exec_url(&mut c, &id, &cmd, true, false).await;
    let (conn, protocol) = client::connect_ws(&url, ws::WS_PROTOCOLS)
        .await
        .expect("websocket upgrade");
    assert_eq!(protocol, ws::REMOTECOMMAND_V5);
    let input = pattern(300 << 10, 3);
    let (outcome, out, err) = pipes_on(conn, protocol, input.clone()).await;
    assert_eq!(outcome, Outcome::Exited(3));
    assert!(out == input, "{} bytes back of {}", out.len(), input.len());
    assert_eq!(String::from_utf8_lossy(&err), "to-err\n");
    // v4 has no half-close: a command that reads a line, not to the end.
    let cmd = ["sh", "-c", "read l; echo got:$l; echo e >&2; exit 4"];
    let url = exec_url(&mut c, &id, &cmd, true, false).await;
    let (conn, protocol) = client::connect_ws(&url, &[REMOTECOMMAND_V4])
        .await
        .expect("websocket upgrade");
    assert_eq!(protocol, REMOTECOMMAND_V4);
    let (outcome, out, err) = pipes_on(conn, protocol, b"x\n".to_vec()).await;
    assert_eq!(outcome, Outcome::Exited(4));
    assert_eq!(String::from_utf8_lossy(&out), "got:x\n");
    assert_eq!(String::from_utf8_lossy(&err), "e\n");
    // Attach over WebSocket: a container that echoes its stdin.
    let (pod, pod2) = new_pod(&shim, &mut c, "attach-ws").await;
    let mut cfg = cri::container("app", "busybox", &["sh", "-c", "read l; echo got:$l"]);
    cfg.stdin = true;
    cfg.stdin_once = true;
    let aid = cri::create(&mut c, &pod2, &pod, cfg).await;
    cri::start(&mut c, &aid).await;
    let url = attach_url(&mut c, &aid, false).await;
    let (conn, protocol) = client::connect_ws(&url, ws::WS_PROTOCOLS)
        .await
        .expect("websocket upgrade");
    let (outcome, out, _) = pipes_on(conn, protocol, b"hi\n".to_vec()).await;
    assert_eq!(outcome, Outcome::Exited(0));
    assert_eq!(String::from_utf8_lossy(&out), "got:hi\n");
    cri::teardown(&mut c, &pod_id).await;
    cri::teardown(&mut c, &pod2).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ctl_logs_follow_prints_every_line_across_a_rotation_until_the_exit() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod, pod_id) = new_pod(&shim, &mut c, "follow").await;
    let script = "for i in 1 2 3 4 5 6 7 8; do echo line-$i; sleep 0.25; done";
    let id = cri::create(
        &mut c,
        &pod_id,
        &pod,
        cri::container("app", "busybox", &["sh", "-c", script]),
    )
    .await;
    cri::start(&mut c, &id).await;
    let log_path = cri::status(&mut c, &id).await.log_path;
    let follower = std::process::Command::new(common::picolet())
        .args(["ctl", "--socket"])
        .arg(shim.socket())
        .args(["logs", "-f", &id])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("ctl logs -f");
    // Rotate as kubelet does (rename, then ReopenContainerLog) once the
    // follower has the log open and the container has written to it.
    let ctl = follower.id();
    common::eventually(
        "ctl logs -f following a log with lines in it",
        Duration::from_secs(20),
        || {
            let open = std::fs::read_dir(format!("/proc/{ctl}/fd"))
                .into_iter()
                .flatten()
                .flatten()
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == Path::new(&log_path)));
            open && std::fs::read_to_string(&log_path).is_ok_and(|l| l.contains("line-2"))
        },
        String::new,
    );
    let follow =
        tokio::task::spawn_blocking(move || follower.wait_with_output().expect("ctl logs -f"));
    std::fs::rename(&log_path, format!("{log_path}.1")).expect("rotate");
    c.reopen_container_log(cri_proto::v1::ReopenContainerLogRequest {
        container_id: id.clone(),
    })
    .await
    .expect("ReopenContainerLog");
    let out = tokio::time::timeout(Duration::from_secs(20), follow)
        .await
        .expect("ctl logs -f ends when the container exits")
        .expect("join");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let want: String = (1..=8).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(text, want);
    cri::teardown(&mut c, &pod_id).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_streaming_requests_are_refused_by_name() {
    require_root!();
    let (shim, mut c) = ready_shim().await;
    let (pod_id, id) = sleeper(&shim, &mut c, "exec-bad", "sleep 600").await;
    let err = c
        .exec(ExecRequest {
            container_id: id.clone(),
            cmd: vec!["true".into()],
            tty: true,
            stdin: false,
            stdout: true,
            stderr: true,
        })
        .await
        .expect_err("tty with stderr");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    let err = c
        .exec(ExecRequest {
            container_id: "nope".into(),
            cmd: vec!["true".into()],
            stdout: true,
            ..Default::default()
        })
        .await
        .expect_err("no such container");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
    // A client that speaks none of our protocols.
    let url = exec_url(&mut c, &id, &["true"], false, false).await;
    let e = client::connect(&url, &["v9.channel.k8s.io"])
        .await
        .expect_err("no common protocol");
    assert!(e.to_string().contains("403"), "{e}");
    cri::teardown(&mut c, &pod_id).await;
}

/// The processes in the cgroups under `parent` (a pod's), any hierarchy.
fn pids_of(parent: &str) -> Vec<i32> {
    let mut roots: Vec<std::path::PathBuf> = std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join(parent.trim_start_matches('/')))
        .collect();
    roots.push(Path::new("/sys/fs/cgroup").join(parent.trim_start_matches('/')));
    let mut pids = Vec::new();
    let mut stack: Vec<_> = roots.into_iter().filter(|r| r.is_dir()).collect();
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            }
        }
        let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
        pids.extend(procs.lines().filter_map(|p| p.trim().parse::<i32>().ok()));
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Whether `pid` sleeps waiting for input: in a read of its terminal or in
/// poll/select (busybox's line editing polls before it reads).
fn waits_for_input(pid: i32) -> bool {
    let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
    ["n_tty_read", "wait_woken", "poll", "select"]
        .iter()
        .any(|w| wchan.contains(w))
}
