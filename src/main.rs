//! `picolet`: one binary, subcommands. Parses arguments, sets up logging and
//! calls into the crates; no logic lives here.

mod ctl;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use edge_config::{DEFAULT_IMAGES_DIR, DEFAULT_ROOT, DEFAULT_RUN_DIR, DEFAULT_SOCKET, ShimPaths};

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
    /// Run the CRI server (images today; sandboxes and containers next).
    Shim(ShimArgs),
    /// Run the node agent (not implemented yet).
    Agent,
    /// Run shim and agent together (not implemented yet: needs the agent).
    Up,
    /// Per-container monitor, started by the shim (internal).
    #[command(hide = true, subcommand)]
    Monitor(MonitorCommand),
    /// A small crictl-like client for debugging on the device.
    Ctl(ctl::CtlArgs),
    /// Print the version.
    Version,
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
    },
    /// Be pid 1 of a pod's shared pid namespace (pid mode POD).
    PodInit {
        /// The sandbox's runtime dir: names the process in `ps`.
        #[arg(long)]
        sandbox: PathBuf,
    },
    /// Run a command in a running container (ExecSync).
    Exec {
        #[arg(long)]
        id: String,
        #[arg(long)]
        state_root: PathBuf,
        #[arg(long)]
        timeout_ms: Option<u64>,
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
}

#[derive(clap::Args)]
struct ShimArgs {
    /// CRI socket to serve.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Data root; the shim keeps its state under <root>/shim.
    #[arg(long, default_value = DEFAULT_ROOT)]
    root: PathBuf,
    /// Runtime directory.
    #[arg(long, default_value = DEFAULT_RUN_DIR)]
    run_dir: PathBuf,
    /// Preload folder: every image archive here is imported.
    #[arg(long, default_value = DEFAULT_IMAGES_DIR)]
    images_dir: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `monitor exec` hands its stdio to the exec'd process: no logging there.
    // `monitor pod-init` forks: keep it free of anything that could start threads.
    if !matches!(
        cli.command,
        Command::Monitor(MonitorCommand::Exec { .. } | MonitorCommand::PodInit { .. })
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
        Command::Agent => not_yet(&agent::run().map_err(|e| e.to_string())),
        Command::Up => not_yet(&Err(
            "`picolet up` is not implemented yet: it needs the agent".into(),
        )),
        Command::Monitor(m) => run_monitor(m),
    }
}

fn not_yet(res: &Result<(), String>) -> ExitCode {
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("picolet: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_monitor(cmd: MonitorCommand) -> ExitCode {
    let code = match cmd {
        MonitorCommand::Create {
            id,
            bundle,
            state_root,
            log,
            exit_file,
            cgroup,
        } => shim::monitor::run(shim::monitor::MonitorArgs {
            id,
            bundle,
            state_root,
            log,
            exit_file,
            cgroup,
        }),
        MonitorCommand::PodInit { sandbox: _ } => shim::pod_init::run(),
        MonitorCommand::Exec {
            id,
            state_root,
            timeout_ms,
            cmd,
        } => shim::monitor::exec(shim::monitor::ExecArgs {
            id,
            state_root,
            timeout: timeout_ms.map(std::time::Duration::from_millis),
            cmd,
        }),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(255))
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PICOLET_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn run_shim(args: ShimArgs) -> ExitCode {
    let paths = ShimPaths {
        root: args.root,
        run_dir: args.run_dir,
        socket: args.socket,
        images_dir: args.images_dir,
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("picolet shim: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(shim::serve(paths, shutdown_signal()));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("picolet shim: {e}");
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
