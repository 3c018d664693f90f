//! `picolet`: one binary, subcommands. Parses arguments, sets up logging and
//! calls into the crates; no logic lives here.

#[cfg(target_env = "musl")]
mod alloc;
#[macro_use]
mod ctl_out;
mod ctl;
mod ctl_devices;
mod ctl_images;
mod ctl_logs;
mod ctl_manage;
mod ctl_stream;
mod logging;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use edge_config::{Config, ShimPaths};

mod check;
mod install;
mod notify;
mod reset;
mod service;
mod up;
mod upgrade;

/// Static builds: dlmalloc in the shim and the agent (`alloc.rs` says why).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOC: alloc::ByRole = alloc::ByRole;

/// Where the config file is looked for when `--config` is not given.
const DEFAULT_CONFIG: &str = "/etc/picolet/config.yaml";

#[derive(Parser)]
#[command(
    name = "picolet",
    version,
    about = "CRI node agent and container runtime for edge Linux"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the CRI server: images, sandboxes, containers.
    Shim(ShimArgs),
    /// Run the node agent: static pods from a folder, synced over CRI.
    Agent(AgentArgs),
    /// Run shim and agent together, supervised.
    Up(UpArgs),
    /// Per-container monitor, started by the shim (internal).
    #[command(hide = true, subcommand)]
    Monitor(MonitorCommand),
    /// A small crictl-like client for debugging on the device.
    Ctl(ctl::CtlArgs),
    /// Validate the config file and static pod manifests without running
    /// anything; errors name the file and field (exit 2).
    Check(check::CheckArgs),
    /// Install picolet as a service: the binary, /etc/picolet skeletons
    /// (existing files kept), the systemd unit, OpenRC or init script;
    /// enabled and started.
    Install(install::InstallArgs),
    /// Replace the installed binary with a new one and restart the service;
    /// the previous binary comes back when the new one is not healthy in
    /// time (same containers running, shim and agent serving).
    Upgrade(upgrade::UpgradeArgs),
    /// Stop and remove the service, picolet's pods, state, network and
    /// binary, and /etc/picolet (unless --keep-config).
    Uninstall(install::UninstallArgs),
    /// With picolet stopped: remove its pods, their logs, its data and
    /// runtime folders, CNI config, bridge, iptables chains and pod cgroups.
    Reset(reset::ResetArgs),
    /// Print the version.
    Version,
    /// The built-in CNI plugin (type `picolet`), run by the shim with the
    /// CNI protocol's environment and stdin.
    #[command(hide = true)]
    Cni,
}

/// `picolet monitor …` alone, for the children of the monitor spawner.
#[derive(Parser)]
#[command(name = "picolet monitor")]
struct MonitorCli {
    #[command(subcommand)]
    command: MonitorCommand,
}

#[derive(Subcommand)]
enum MonitorCommand {
    /// Create a container and watch it until it exits.
    Create {
        #[arg(long)]
        id: String,
        #[arg(long)]
        bundle: PathBuf,
        #[arg(long)]
        state_root: PathBuf,
        #[arg(long)]
        log: Option<PathBuf>,
        #[arg(long)]
        exit_file: PathBuf,
        #[arg(long)]
        cgroup: String,
        /// Serve CRI Attach on this unix socket.
        #[arg(long)]
        attach: Option<PathBuf>,
        /// Give the container a stdin pipe (attach writes to it).
        #[arg(long)]
        stdin: bool,
        /// Close that stdin when the first attach ends.
        #[arg(long)]
        stdin_once: bool,
        /// The container has a terminal (spec `terminal`).
        #[arg(long)]
        tty: bool,
    },
    /// Be pid 1 of a pod's shared pid namespace (pid mode POD).
    PodInit {
        /// The sandbox's runtime dir: names the process in `ps`; the
        /// init's empty root is mounted over it in its own mount namespace.
        #[arg(long)]
        sandbox: PathBuf,
        /// The pod's network namespace to join (none: the host's).
        #[arg(long)]
        net: Option<PathBuf>,
        /// The pod's IPC namespace to join.
        #[arg(long)]
        ipc: Option<PathBuf>,
        /// The pod's UTS namespace to join.
        #[arg(long)]
        uts: Option<PathBuf>,
        /// The pod's user namespace to join first (none: the host's).
        #[arg(long)]
        user: Option<PathBuf>,
    },
    /// Run a command in a running container (ExecSync).
    Exec {
        /// The container's bundle (config.json).
        #[arg(long)]
        bundle: PathBuf,
        /// The container's init process, and its start time (clock ticks).
        #[arg(long)]
        pid: i32,
        #[arg(long)]
        start_time: Option<u64>,
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// stdin is a terminal: make it the command's controlling terminal.
        #[arg(long)]
        tty: bool,
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Fork the container monitors for the shim, on the socket that is
    /// stdin (shim::process::spawner).
    Spawner {
        /// Room for each child to write its own command line over.
        #[arg(long)]
        room: Option<String>,
    },
}

/// `--config` and the flags that override the file.
#[derive(clap::Args, Clone, Default)]
pub(crate) struct CommonArgs {
    /// Config file (KubeletConfiguration + `picolet:`); a missing default
    /// file means all defaults.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Data root (`picolet.dataDir`); the shim keeps its state under <root>/shim.
    #[arg(long)]
    root: Option<PathBuf>,
}

#[derive(clap::Args, Clone, Default)]
pub(crate) struct ShimArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// CRI socket to serve (`picolet.criSocket`).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Runtime directory (`picolet.runDir`).
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Preload folder: every image archive here is imported (`picolet.imagesDir`).
    #[arg(long)]
    images_dir: Option<PathBuf>,
    /// Registry mirrors, auth and TLS in k3s's registries.yaml format
    /// (`picolet.registryConfig`) [default: /etc/picolet/registries.yaml].
    #[arg(long)]
    registry_config: Option<PathBuf>,
    #[command(flatten)]
    cni: CniArgs,
    /// Address of the CRI streaming server (Exec, PortForward URLs); port 0
    /// picks a free one. Loopback by default, as containerd.
    /// [default: 127.0.0.1:0]
    #[arg(long)]
    streaming_address: Option<std::net::SocketAddr>,
}

/// Where the shim finds CNI configs and plugins.
#[derive(clap::Args, Clone, Default)]
pub(crate) struct CniArgs {
    /// CNI network configs: the first `*.conflist`/`*.conf`/`*.json` in
    /// lexical order is used; none: pods get loopback only
    /// (`picolet.cniConfDir`, default /etc/cni/net.d).
    #[arg(long)]
    cni_conf_dir: Option<PathBuf>,
    /// CNI plugin folders, comma-separated (`picolet.cniBinDir`, default
    /// /opt/cni/bin,/usr/lib/cni).
    #[arg(long)]
    cni_bin_dir: Option<String>,
}

#[derive(clap::Args, Clone, Default)]
pub(crate) struct AgentArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// CRI socket of the runtime (`picolet.criSocket`); containerd's works too.
    /// `--socket` as for `shim` and `ctl`: `up` serves and uses the same path.
    #[arg(long, visible_alias = "socket")]
    cri_socket: Option<PathBuf>,
    /// Static pod folder (`staticPodPath`).
    #[arg(long)]
    static_pod_path: Option<PathBuf>,
    /// Node name (`picolet.nodeName`; default: the hostname). kubelet's
    /// `--hostname-override` works too.
    #[arg(long, visible_alias = "hostname-override")]
    node_name: Option<String>,
    /// The node's address (`picolet.nodeIP`; kubelet's flag): the Node's
    /// InternalIP and host-network pods' IP.
    #[arg(long)]
    node_ip: Option<std::net::IpAddr>,
    /// Join the cluster of this kubeconfig's API server as a node
    /// (`picolet.kubeconfig`; kubelet's flag); none: static pods only.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// With the kubeconfig missing, join with this kubeconfig's bootstrap
    /// token: a CSR for a client certificate, then the kubeconfig is
    /// written (`picolet.bootstrapKubeconfig`; kubelet's flag).
    #[arg(long)]
    bootstrap_kubeconfig: Option<PathBuf>,
    /// Labels to register the Node with, `key=value,...`, added to
    /// `picolet.nodeLabels` (kubelet's flag; cluster mode).
    #[arg(long, value_parser = node_labels_arg)]
    node_labels: Option<String>,
    /// `/healthz` port (`healthzPort`).
    #[arg(long)]
    healthz_port: Option<u16>,
    /// The kubelet API's port (`port`): HTTPS, each request authenticated
    /// and authorized (pods, stats, metrics, logs, exec, port-forward).
    #[arg(long)]
    port: Option<u16>,
    /// The address the kubelet API and, when on, the unauthenticated
    /// read-only port (`readOnlyPort`) listen on (`address`).
    #[arg(long)]
    address: Option<std::net::IpAddr>,
}

#[derive(clap::Args, Clone, Default)]
pub(crate) struct UpArgs {
    #[command(flatten)]
    agent: AgentArgs,
    /// Runtime directory (`picolet.runDir`).
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Image preload folder (`picolet.imagesDir`).
    #[arg(long)]
    images_dir: Option<PathBuf>,
    /// Registry mirrors, auth and TLS, k3s's registries.yaml (`picolet.registryConfig`).
    #[arg(long)]
    registry_config: Option<PathBuf>,
    #[command(flatten)]
    cni: CniArgs,
    /// The shim's CRI streaming server address [default: 127.0.0.1:0].
    #[arg(long)]
    streaming_address: Option<std::net::SocketAddr>,
}

/// `--node-labels`, checked as the config's `picolet.nodeLabels`.
fn node_labels_arg(s: &str) -> Result<String, edge_config::labels::LabelError> {
    edge_config::config::parse_node_labels(s).map(|_| s.to_string())
}

/// Loads the config file and applies the flags; exit code 2 on error.
fn load_config(common: &CommonArgs) -> Result<Config, ExitCode> {
    let (path, must_exist) = match &common.config {
        Some(p) => (p.clone(), true),
        None => (PathBuf::from(DEFAULT_CONFIG), false),
    };
    let mut c = Config::load(&path, must_exist).map_err(|e| {
        eprintln!("picolet: {e}");
        ExitCode::from(2)
    })?;
    if let Some(r) = &common.root {
        c.data_dir = r.clone();
    }
    Ok(c)
}

impl AgentArgs {
    fn apply(&self, c: &mut Config) {
        if let Some(v) = &self.cri_socket {
            c.cri_socket = v.clone();
        }
        if let Some(v) = &self.static_pod_path {
            c.static_pod_path = v.clone();
        }
        if let Some(v) = &self.node_name {
            c.node_name = v.clone();
        }
        if let Some(v) = self.node_ip {
            c.node_ip = Some(v);
        }
        if let Some(v) = &self.kubeconfig {
            c.kubeconfig = Some(v.clone());
        }
        if let Some(v) = &self.bootstrap_kubeconfig {
            c.bootstrap_kubeconfig = Some(v.clone());
        }
        if let Some(v) = &self.node_labels {
            // Checked when the flags were parsed.
            c.node_labels
                .extend(edge_config::config::parse_node_labels(v).unwrap_or_default());
        }
        if let Some(v) = self.healthz_port {
            c.healthz_port = v;
        }
        if let Some(v) = self.port {
            c.port = v;
        }
        if let Some(v) = self.address {
            c.address = Some(v);
        }
    }
}

fn main() -> ExitCode {
    // Nothing our parent left open without close-on-exec goes on to our
    // children, and through them into a container: picolet passes
    // descriptors on only as 0, 1 and 2 or by SCM_RIGHTS.
    if let Err(e) = shim::host::cloexec_from(3) {
        eprintln!("picolet: mark inherited descriptors close-on-exec: {e}");
        return ExitCode::FAILURE;
    }
    #[cfg(target_env = "musl")]
    alloc::fork_safe();
    // Installed as a CNI plugin (e.g. /opt/cni/bin/picolet for containerd),
    // picolet is run with CNI_COMMAND set and no arguments.
    if std::env::args_os().len() == 1 && std::env::var_os("CNI_COMMAND").is_some() {
        return shim::cni_plugin::main();
    }
    let cli = Cli::parse();
    // `monitor exec` hands its stdio to the exec'd process: no logging there.
    // `monitor pod-init` forks: keep it free of anything that could start threads.
    if !matches!(
        cli.command,
        Command::Monitor(
            MonitorCommand::Exec { .. }
                | MonitorCommand::PodInit { .. }
                | MonitorCommand::Spawner { .. }
        ) | Command::Cni
    ) {
        init_tracing();
    }
    match cli.command {
        Command::Version => {
            println!("picolet {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Command::Shim(args) => run_shim(args),
        Command::Ctl(args) => ctl::run(args),
        Command::Agent(args) => run_agent(args),
        Command::Up(args) => up::run(args),
        Command::Check(args) => check::run(args),
        Command::Install(args) => install::run_install(args),
        Command::Upgrade(args) => upgrade::run(args),
        Command::Uninstall(args) => install::run_uninstall(args),
        Command::Reset(args) => reset::run_reset(args),
        Command::Monitor(m) => run_monitor(m),
        Command::Cni => shim::cni_plugin::main(),
    }
}

fn run_monitor(cmd: MonitorCommand) -> ExitCode {
    ExitCode::from(u8::try_from(monitor_code(cmd)).unwrap_or(255))
}

/// What a child of the monitor spawner runs: `picolet <argv[1..]>`, as if
/// the binary had been exec'd with it: container monitors and ExecSync's
/// helpers.
// The spawner does not log: each child sets up its own logging here.
fn spawned(argv: Vec<String>) -> i32 {
    // Only `monitor`'s own subcommands are parsed: clap builds every
    // subcommand it is given, and all of picolet's cost a fifth of a
    // millisecond of each create.
    let mut args = argv.into_iter();
    let (Some(bin), Some(_)) = (args.next(), args.next().filter(|a| a == "monitor")) else {
        let _ = writeln!(
            std::io::stderr(),
            "picolet monitor spawner: only `picolet monitor …` is forked"
        );
        return 2;
    };
    let parsed = MonitorCli::try_parse_from(std::iter::once(bin).chain(args));
    match parsed {
        Ok(MonitorCli {
            command: m @ MonitorCommand::Create { .. },
        }) => {
            init_tracing();
            monitor_code(m)
        }
        // No logging: it hands its stdio to the exec'd process.
        Ok(MonitorCli {
            command: m @ MonitorCommand::Exec { .. },
        }) => monitor_code(m),
        Ok(_) => {
            let _ = writeln!(
                std::io::stderr(),
                "picolet monitor spawner: only `monitor create` and `monitor exec` are forked"
            );
            2
        }
        Err(e) => {
            let _ = e.print();
            2
        }
    }
}

fn monitor_code(cmd: MonitorCommand) -> i32 {
    match cmd {
        MonitorCommand::Create {
            id,
            bundle,
            state_root,
            log,
            exit_file,
            cgroup,
            attach,
            stdin,
            stdin_once,
            tty,
        } => shim::process::monitor::run(shim::process::monitor::MonitorArgs {
            id,
            bundle,
            state_root,
            log,
            exit_file,
            cgroup,
            attach,
            stdin,
            stdin_once,
            tty,
        }),
        MonitorCommand::PodInit {
            sandbox,
            net,
            ipc,
            uts,
            user,
        } => shim::process::pod_init::run(
            &sandbox,
            &shim::process::pod_init::PodSpaces {
                net,
                ipc,
                uts,
                user,
            },
        ),
        MonitorCommand::Exec {
            bundle,
            pid,
            start_time,
            timeout_ms,
            tty,
            cmd,
        } => shim::process::nsexec::exec(shim::process::nsexec::ExecArgs {
            bundle,
            pid,
            start_time,
            timeout: timeout_ms.map(std::time::Duration::from_millis),
            tty,
            cmd,
        }),
        MonitorCommand::Spawner { room: _ } => shim::process::spawner::serve(spawned),
    }
}

fn init_tracing() {
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let filter = tracing_subscriber::EnvFilter::try_from_env("PICOLET_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        // One event, one line: control characters from outside escaped.
        .with_writer(logging::Stderr { ansi })
        // A log line that cannot be written is dropped. By default the
        // subscriber reports the failure with eprintln!, which panics on the
        // same broken stderr: `picolet up | tee log` and Ctrl-C (or `| head`)
        // aborted up, shim and agent at their next log line.
        .log_internal_errors(false)
        .with_ansi(ansi)
        .init();
}

fn run_agent(args: AgentArgs) -> ExitCode {
    let mut config = match load_config(&args.common) {
        Ok(c) => c,
        Err(code) => return code,
    };
    args.apply(&mut config);
    // One thread: the agent's work is small and mostly waiting (its
    // blocking reads go to spawn_blocking's pool); a multi-thread runtime
    // woke a second worker for nearly every timer and reply (docs/architecture.md,
    // "Processes").
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("picolet agent: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(agent::run(config, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("picolet agent: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_shim(args: ShimArgs) -> ExitCode {
    let config = match load_config(&args.common) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let paths = ShimPaths {
        root: config.data_dir,
        run_dir: args.run_dir.unwrap_or(config.run_dir),
        socket: args.socket.unwrap_or(config.cri_socket),
        images_dir: args.images_dir.unwrap_or(config.images_dir),
        cni_conf_dir: args.cni.cni_conf_dir.unwrap_or(config.cni_conf_dir),
        cni_bin_dirs: args
            .cni
            .cni_bin_dir
            .map(|l| edge_config::split_dirs(&l))
            .unwrap_or(config.cni_bin_dirs),
        enable_cdi: config.enable_cdi,
        cdi_spec_dirs: config.cdi_spec_dirs,
    };
    if config.cgroup_favor_dynmods {
        shim::host::cgroupfs::favor_dynmods(&paths.run_dir);
    }
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("picolet shim: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut store = images::StoreOptions::default();
    if let Some(max) = config.max_layer_bytes {
        store.unpack.max_layer_bytes = max;
    }
    let pull = shim::PullOptions {
        registry_config: args.registry_config.unwrap_or(config.registry_config),
        auth_file: Some(config.registry_auth_file),
        // containerd's max_concurrent_downloads.
        parallel: 3,
    };
    let result = rt.block_on(shim::serve(
        paths,
        store,
        pull,
        args.streaming_address
            .unwrap_or(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        shutdown_signal(),
    ));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("picolet shim: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A command's outcome: its error on stderr, exit 1.
pub(crate) fn report(what: &str, r: Result<(), impl std::fmt::Display>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("picolet {what}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
    tracing::info!("shutting down");
}
