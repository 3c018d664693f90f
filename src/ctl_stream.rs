//! `picolet ctl exec -i/-t`, `ctl attach` and `ctl port-forward`: clients of the CRI
//! streaming server, over the same SPDY protocols crictl and kubectl speak.
#![allow(unsafe_code)]

use std::os::fd::AsFd;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use cri_proto::streaming::client::{self, ExecIo};
use cri_proto::streaming::{Outcome, PORTFORWARD_V1, REMOTECOMMAND_PROTOCOLS, TermSize};
use cri_proto::v1::runtime_service_client::RuntimeServiceClient;
use cri_proto::v1::{AttachRequest, ExecRequest, PortForwardRequest};
use nix::sys::termios::{self, SetArg, Termios};

/// Exec with stdin (`-i`) and/or a terminal (`-t`); returns the exit code.
pub async fn exec(
    client: &mut RuntimeServiceClient<cri_proto::Channel>,
    id: String,
    cmd: Vec<String>,
    stdin: bool,
    tty: bool,
) -> Result<i32> {
    let url = client
        .exec(ExecRequest {
            container_id: id,
            cmd,
            tty,
            stdin,
            stdout: true,
            stderr: !tty,
        })
        .await?
        .into_inner()
        .url;
    let (session, protocol) = client::connect(&url, REMOTECOMMAND_PROTOCOLS)
        .await
        .with_context(|| format!("connect to {url}"))?;
    let _raw = if tty { RawMode::enter() } else { None };
    let (size_tx, size_rx) = tokio::sync::mpsc::channel(4);
    if tty {
        if let Some(size) = terminal_size() {
            let _ = size_tx.send(size).await;
        }
        tokio::spawn(async move {
            let Ok(mut winch) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
            else {
                return;
            };
            while winch.recv().await.is_some() {
                if let Some(size) = terminal_size()
                    && size_tx.send(size).await.is_err()
                {
                    break;
                }
            }
        });
    }
    let io = ExecIo {
        stdin: stdin.then(tokio::io::stdin),
        stdout: Some(tokio::io::stdout()),
        stderr: (!tty).then(tokio::io::stderr),
        tty,
        resize: tty.then_some(size_rx),
    };
    match client::exec(session, protocol, io).await? {
        Outcome::Exited(code) => Ok(code),
        Outcome::Failed(msg) => bail!("exec: {msg}"),
    }
}

/// Attach to `id`'s output (and stdin with `stdin`) until it exits.
pub async fn attach(
    client: &mut RuntimeServiceClient<cri_proto::Channel>,
    id: String,
    stdin: bool,
) -> Result<()> {
    let url = client
        .attach(AttachRequest {
            container_id: id,
            stdin,
            tty: false,
            stdout: true,
            stderr: true,
        })
        .await?
        .into_inner()
        .url;
    let (session, protocol) = client::connect(&url, REMOTECOMMAND_PROTOCOLS)
        .await
        .with_context(|| format!("connect to {url}"))?;
    let io = ExecIo {
        stdin: stdin.then(tokio::io::stdin),
        stdout: Some(tokio::io::stdout()),
        stderr: Some(tokio::io::stderr()),
        tty: false,
        resize: None,
    };
    match client::exec(session, protocol, io).await? {
        Outcome::Exited(_) => Ok(()),
        Outcome::Failed(msg) => bail!("attach: {msg}"),
    }
}

/// Forwards 127.0.0.1:`local` to `remote` in the pod until interrupted.
pub async fn port_forward(
    client: &mut RuntimeServiceClient<cri_proto::Channel>,
    sandbox: String,
    local: u16,
    remote: u16,
) -> Result<()> {
    let url = client
        .port_forward(PortForwardRequest {
            pod_sandbox_id: sandbox,
            port: vec![i32::from(remote)],
        })
        .await?
        .into_inner()
        .url;
    let (session, _) = client::connect(&url, &[PORTFORWARD_V1])
        .await
        .with_context(|| format!("connect to {url}"))?;
    let session = Arc::new(session);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", local))
        .await
        .with_context(|| format!("listen on 127.0.0.1:{local}"))?;
    out!(
        "Forwarding from {} -> {remote}",
        listener.local_addr().context("local address")?
    );
    let mut id = 0u32;
    loop {
        let (conn, _) = listener.accept().await.context("accept")?;
        let session = session.clone();
        tokio::spawn(async move {
            match client::forward(&session, id, remote, conn).await {
                Ok(msg) if !msg.is_empty() => eprintln!("picolet ctl: {msg}"),
                Ok(_) => {}
                Err(e) => eprintln!("picolet ctl: forwarding a connection: {e}"),
            }
        });
        id = id.wrapping_add(1);
    }
}

/// The controlling terminal's size, if stdout is one.
fn terminal_size() -> Option<TermSize> {
    let mut ws = nix::libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` through the pointer, which
    // points at a live local.
    let r = unsafe { nix::libc::ioctl(1, nix::libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_col > 0).then_some(TermSize {
        width: ws.ws_col,
        height: ws.ws_row,
    })
}

/// The local terminal in raw mode (keys go to the remote shell as typed);
/// restored when dropped.
struct RawMode(Termios);

impl RawMode {
    fn enter() -> Option<Self> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd()).ok()?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw).ok()?;
        Some(Self(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &self.0);
    }
}
