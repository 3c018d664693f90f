//! `picolet up`: starts the shim, waits for its socket, starts the agent,
//! and supervises both as child processes of this one binary. A child that
//! exits is restarted with back-off (1 s doubling to 30 s, reset after a
//! minute of running); containers live in their own monitors, so neither
//! restart touches them. SIGTERM/SIGINT stop both children (SIGTERM, then
//! SIGKILL after 10 s) and leave the containers running.
//!
//! Under a service manager it tells its state (`notify`): READY=1 once the
//! shim's socket and the agent's `/healthz` answer, a STATUS= line on each
//! change, WATCHDOG=1 at half the manager's timeout while its own loop runs.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::{AgentArgs, UpArgs, load_config};

const STOP_GRACE: Duration = Duration::from_secs(10);

fn push_opt<T: ToString>(v: &mut Vec<String>, flag: &str, value: &Option<T>) {
    if let Some(x) = value {
        v.push(flag.into());
        v.push(x.to_string());
    }
}

fn path_str(p: &Option<std::path::PathBuf>) -> Option<String> {
    p.as_ref().map(|p| p.display().to_string())
}

fn shim_argv(a: &UpArgs) -> Vec<String> {
    let mut v = vec!["shim".to_string()];
    push_opt(&mut v, "--config", &path_str(&a.agent.common.config));
    push_opt(&mut v, "--root", &path_str(&a.agent.common.root));
    push_opt(&mut v, "--socket", &path_str(&a.agent.cri_socket));
    push_opt(&mut v, "--run-dir", &path_str(&a.run_dir));
    push_opt(&mut v, "--images-dir", &path_str(&a.images_dir));
    push_opt(&mut v, "--registry-config", &path_str(&a.registry_config));
    push_opt(&mut v, "--cni-conf-dir", &path_str(&a.cni.cni_conf_dir));
    push_opt(&mut v, "--cni-bin-dir", &a.cni.cni_bin_dir);
    push_opt(
        &mut v,
        "--streaming-address",
        &a.streaming_address.map(|s| s.to_string()),
    );
    v
}

fn agent_argv(a: &AgentArgs) -> Vec<String> {
    let mut v = vec!["agent".to_string()];
    push_opt(&mut v, "--config", &path_str(&a.common.config));
    push_opt(&mut v, "--root", &path_str(&a.common.root));
    push_opt(&mut v, "--cri-socket", &path_str(&a.cri_socket));
    push_opt(&mut v, "--static-pod-path", &path_str(&a.static_pod_path));
    push_opt(&mut v, "--node-name", &a.node_name);
    push_opt(&mut v, "--node-ip", &a.node_ip);
    push_opt(&mut v, "--kubeconfig", &path_str(&a.kubeconfig));
    push_opt(
        &mut v,
        "--bootstrap-kubeconfig",
        &path_str(&a.bootstrap_kubeconfig),
    );
    push_opt(&mut v, "--node-labels", &a.node_labels);
    push_opt(&mut v, "--healthz-port", &a.healthz_port);
    push_opt(&mut v, "--port", &a.port);
    push_opt(&mut v, "--address", &a.address);
    v
}

/// One supervised child.
struct Supervised {
    name: &'static str,
    /// The binary's path as it was at `up`'s start. A restart execs that
    /// path again: after an upgrade replaced the file, the new binary
    /// (`/proc/self/exe` of a replaced binary names a deleted file).
    exe: std::path::PathBuf,
    argv: Vec<String>,
    child: Option<Child>,
    started: Instant,
    delay: Duration,
    restart_at: Option<Instant>,
}

impl Supervised {
    fn new(name: &'static str, exe: std::path::PathBuf, argv: Vec<String>) -> Self {
        Self {
            name,
            exe,
            argv,
            child: None,
            started: Instant::now(),
            delay: Duration::from_secs(1),
            restart_at: None,
        }
    }

    fn start(&mut self) -> std::io::Result<()> {
        let mut cmd = Command::new(&self.exe);
        cmd.args(&self.argv);
        for var in crate::notify::MANAGER_VARS {
            cmd.env_remove(var);
        }
        // SIGTERM when `up` dies, however it dies, so a restarted `up` never
        // meets a shim or agent of the old one (they also lock their state
        // roots: edge_config::owner). `up` runs on one thread.
        shim::host::die_with_parent(cmd.as_std_mut(), nix::sys::signal::Signal::SIGTERM);
        let child = cmd.spawn()?;
        tracing::info!(
            pid = child.id().unwrap_or(0),
            "started picolet {}",
            self.name
        );
        self.child = Some(child);
        self.started = Instant::now();
        self.restart_at = None;
        Ok(())
    }

    /// Called when the child exited: schedule a restart with back-off.
    /// Returns what happened, for the service manager's STATUS=.
    fn exited(&mut self, status: std::io::Result<std::process::ExitStatus>) -> String {
        self.child = None;
        if self.started.elapsed() > Duration::from_secs(60) {
            self.delay = Duration::from_secs(1);
        }
        let what = format!(
            "picolet {} exited ({}); restarting in {:?}",
            self.name,
            status.map_or_else(|e| e.to_string(), |s| s.to_string()),
            self.delay
        );
        tracing::warn!("{what}");
        self.restart_at = Some(Instant::now() + self.delay);
        self.delay = (self.delay * 2).min(Duration::from_secs(30));
        what
    }

    async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        match self.child.as_mut() {
            Some(c) => c.wait().await,
            None => std::future::pending().await,
        }
    }

    async fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        if let Some(pid) = c.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        if tokio::time::timeout(STOP_GRACE, c.wait()).await.is_err() {
            let _ = c.kill().await;
        }
    }
}

/// Waits for the shim's socket (a minute at most: a preload folder of
/// large images is imported first), keeping the service watchdog fed.
async fn wait_for_socket(
    path: &std::path::Path,
    shim: &mut Supervised,
    notifier: &crate::notify::Notifier,
) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut fed = Instant::now();
    while Instant::now() < deadline {
        if notifier.watchdog.is_some() && fed.elapsed() > Duration::from_secs(1) {
            notifier.notify("WATCHDOG=1");
            fed = Instant::now();
        }
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return true;
        }
        if let Some(c) = shim.child.as_mut()
            && let Ok(Some(_)) = c.try_wait()
        {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

pub(crate) fn run(args: UpArgs) -> ExitCode {
    let notifier = crate::notify::Notifier::from_env();
    // Validate the config here once, so a bad file fails fast with exit 2.
    let mut config = match load_config(&args.agent.common) {
        Ok(c) => c,
        Err(code) => return code,
    };
    args.agent.apply(&mut config);
    if let Some(dir) = &args.cni.cni_conf_dir {
        config.cni_conf_dir = dir.clone();
    }
    if let Some(dir) = &args.run_dir {
        config.run_dir = dir.clone();
    }
    // An upgrade that was rolled back while no `up` ran says so here, in
    // the service's log.
    crate::upgrade::report_rollback(&config.data_dir);
    if config.default_network {
        match shim::cni_plugin::write_default_network(&config.cni_conf_dir, &config.data_dir) {
            Ok(Some(path)) => tracing::info!(
                "no CNI network config in {}: wrote picolet's built-in network ({} on {}) to {}",
                config.cni_conf_dir.display(),
                shim::cni_plugin::DEFAULT_SUBNET,
                shim::cni_plugin::DEFAULT_BRIDGE,
                path.display()
            ),
            Ok(None) => {}
            // Pods still run, on loopback only, as without a config.
            Err(e) => tracing::warn!("cannot write the default CNI network: {e}"),
        }
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("picolet up: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("picolet up: cannot find its own binary: {e}");
            return ExitCode::FAILURE;
        }
    };
    let state_path = crate::notify::up_state_path(&config.run_dir);
    let code = rt.block_on(async move {
        let mut shim = Supervised::new("shim", exe.clone(), shim_argv(&args));
        let mut agent = Supervised::new("agent", exe, agent_argv(&args.agent));
        notifier.notify("STATUS=starting the shim");
        if let Err(e) = shim.start() {
            eprintln!("picolet up: cannot start the shim: {e}");
            return ExitCode::FAILURE;
        }
        if !wait_for_socket(&config.cri_socket, &mut shim, &notifier).await {
            eprintln!(
                "picolet up: the shim did not serve {}",
                config.cri_socket.display()
            );
            shim.stop().await;
            return ExitCode::FAILURE;
        }
        notifier.notify("STATUS=starting the agent");
        if let Err(e) = agent.start() {
            eprintln!("picolet up: cannot start the agent: {e}");
            shim.stop().await;
            return ExitCode::FAILURE;
        }
        let healthz = (config.healthz_port != 0)
            .then(|| std::net::SocketAddr::new(config.healthz_bind_address, config.healthz_port));
        let mut ready = false;
        let mut ready_check = tokio::time::interval(Duration::from_millis(200));
        let mut watchdog = notifier.watchdog.map(tokio::time::interval);
        let shutdown = crate::shutdown_signal();
        tokio::pin!(shutdown);
        loop {
            let next_restart = [shim.restart_at, agent.restart_at]
                .into_iter()
                .flatten()
                .min();
            let sleep = async {
                match next_restart {
                    Some(t) => tokio::time::sleep_until(t.into()).await,
                    None => std::future::pending().await,
                }
            };
            let ping = async {
                match watchdog.as_mut() {
                    Some(w) => w.tick().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut shutdown => break,
                s = shim.wait() => notifier.notify(&format!("STATUS={}", shim.exited(s))),
                s = agent.wait() => notifier.notify(&format!("STATUS={}", agent.exited(s))),
                _ = ping => notifier.notify("WATCHDOG=1"),
                _ = ready_check.tick(), if !ready => {
                    let agent_up = agent.child.is_some() && match healthz {
                        Some(addr) => crate::notify::agent_healthy(addr).await,
                        None => true,
                    };
                    if agent_up && shim.child.is_some() {
                        ready = true;
                        became_ready(&notifier, &config);
                    }
                }
                _ = sleep => {
                    for p in [&mut shim, &mut agent] {
                        if p.restart_at.is_some_and(|t| t <= Instant::now())
                            && let Err(e) = p.start()
                        {
                            tracing::warn!("restarting picolet {}: {e}", p.name);
                            p.restart_at = Some(Instant::now() + p.delay);
                        }
                    }
                    if shim.child.is_some() && agent.child.is_some() {
                        notifier.notify("STATUS=shim and agent serving");
                    }
                }
            }
        }
        notifier
            .notify("STOPPING=1\nSTATUS=stopping the agent and the shim; containers keep running");
        agent.stop().await;
        shim.stop().await;
        ExitCode::SUCCESS
    });
    let _ = std::fs::remove_file(&state_path);
    code
}

/// The shim serves its socket and the agent its `/healthz`: tell the
/// service manager, write `<runDir>/up.json` for the others and for
/// `picolet upgrade`, and commit an upgrade no one is watching over.
fn became_ready(notifier: &crate::notify::Notifier, config: &edge_config::Config) {
    let version = env!("CARGO_PKG_VERSION").to_string();
    tracing::info!("picolet {version}: shim and agent serving");
    let state = crate::notify::UpState {
        pid: std::process::id(),
        ready: true,
        version,
    };
    let path = crate::notify::up_state_path(&config.run_dir);
    let written = serde_json::to_vec(&state)
        .map_err(std::io::Error::other)
        .and_then(|b| edge_config::write_atomic(&path, &b));
    if let Err(e) = written {
        tracing::warn!("write {}: {e}", path.display());
    }
    crate::upgrade::commit_if_unwatched(&config.data_dir);
    notifier.notify("READY=1\nSTATUS=shim and agent serving");
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn up(args: &[&str]) -> UpArgs {
        let argv = ["picolet", "up"].iter().chain(args);
        match crate::Cli::try_parse_from(argv).expect("parse").command {
            crate::Command::Up(a) => a,
            _ => unreachable!("parsed `up`"),
        }
    }

    #[test]
    fn up_takes_the_socket_as_shim_and_ctl_do() {
        for flag in ["--socket", "--cri-socket"] {
            let a = up(&[flag, "/run/x.sock"]);
            let shim = shim_argv(&a).join(" ");
            let agent = agent_argv(&a.agent).join(" ");
            assert!(shim.contains("--socket /run/x.sock"), "{flag}: {shim}");
            assert!(
                agent.contains("--cri-socket /run/x.sock"),
                "{flag}: {agent}"
            );
        }
    }
}
