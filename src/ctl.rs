//! `picolet ctl`: a small crictl-like client for people on the device.

use crate::ctl_manage::{resolve, resolve_pod, short};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use cri_proto::v1::image_service_client::ImageServiceClient;
use cri_proto::v1::runtime_service_client::RuntimeServiceClient;
use cri_proto::v1::{
    ContainerFilter, ContainerState, ContainerStateValue, ExecSyncRequest, LinuxContainerResources,
    ListContainersRequest, ListImagesRequest, ListPodSandboxRequest, PodSandboxState,
    UpdateContainerResourcesRequest,
};
use edge_config::DEFAULT_SOCKET;

use crate::ctl_out::{StdoutClosed, die_of_sigpipe, stdout_error};

#[derive(clap::Args)]
pub struct CtlArgs {
    /// CRI socket of the shim.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    #[command(subcommand)]
    command: CtlCommand,
}

#[derive(clap::Subcommand)]
enum CtlCommand {
    /// List images.
    Images {
        /// Print only image IDs.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Import image archives (OCI layout dir, oci-archive, docker-archive).
    Import {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Pull an image from its registry (mirrors, auth and TLS from the
    /// shim's registries.yaml), with a progress bar.
    Pull {
        image: String,
        /// Registry credentials, `USERNAME[:PASSWORD]` (as crictl's --creds).
        #[arg(long)]
        creds: Option<String>,
    },
    /// Remove images by reference or ID.
    Rmi {
        #[arg(required = true)]
        images: Vec<String>,
    },
    /// List pod sandboxes.
    Pods,
    /// List containers (`-a`: exited ones too).
    Ps {
        #[arg(short, long)]
        all: bool,
    },
    /// Print a container's log (the text of its CRI log records).
    Logs {
        /// Container ID or a unique prefix of it.
        container: String,
        /// Only the last N lines.
        #[arg(long)]
        tail: Option<usize>,
        /// Keep printing what the container writes until it exits (and
        /// across log rotation).
        #[arg(short = 'f', long)]
        follow: bool,
    },
    /// Run a command in a running container: ExecSync, or a streaming
    /// session (CRI Exec, as `crictl exec`) with `-i` or `-t`.
    Exec {
        /// Seconds before the command is killed (0: no limit; ExecSync only).
        #[arg(long, default_value_t = 0)]
        timeout: i64,
        /// Pass stdin to the command (streaming).
        #[arg(short = 'i', long)]
        stdin: bool,
        /// Run the command on a terminal (streaming; stderr joins stdout).
        #[arg(short = 't', long)]
        tty: bool,
        /// Container ID or a unique prefix of it.
        container: String,
        #[arg(required = true, last = true)]
        cmd: Vec<String>,
    },
    /// Attach to a running container's output, and its stdin with `-i`
    /// (the container must have been created with `stdin`).
    Attach {
        #[arg(short = 'i', long)]
        stdin: bool,
        /// Container ID or a unique prefix of it.
        container: String,
    },
    /// Forward a local port to a port in a pod's network (CRI PortForward).
    PortForward {
        /// Pod sandbox ID or a unique prefix of it.
        pod: String,
        /// LOCAL:REMOTE (LOCAL 0: any free port).
        ports: String,
    },
    /// Stop running containers (StopContainer).
    Stop {
        /// Seconds of grace after SIGTERM before SIGKILL.
        #[arg(short, long, default_value_t = 10)]
        timeout: i64,
        /// Container IDs or unique prefixes.
        #[arg(required = true)]
        containers: Vec<String>,
    },
    /// Remove containers (RemoveContainer); running ones only with -f.
    Rm {
        #[arg(short, long)]
        force: bool,
        #[arg(required = true)]
        containers: Vec<String>,
    },
    /// Stop pod sandboxes (StopPodSandbox): their containers and network.
    Stopp {
        #[arg(required = true)]
        pods: Vec<String>,
    },
    /// Remove pod sandboxes (RemovePodSandbox); ready ones only with -f.
    Rmp {
        #[arg(short, long)]
        force: bool,
        #[arg(required = true)]
        pods: Vec<String>,
    },
    /// A container's status and verbose info as JSON.
    Inspect { container: String },
    /// A pod sandbox's status and verbose info as JSON.
    Inspectp { pod: String },
    /// Running containers' CPU (over 1 s), memory and writable layer use.
    Stats {
        /// Only this container.
        container: Option<String>,
    },
    /// GET a path of the agent's kubelet API and print the answer (root).
    ///
    /// `/pods`, `/node`, `/events`, `/stats/summary`, `/metrics/cadvisor`,
    /// `/containerLogs/NS/POD/CONTAINER`... on its API port, with a client
    /// certificate of the local CA the agent keeps in <dataDir>/agent/pki.
    Api {
        /// The path, with its query (`/containerLogs/default/hello-node/httpd?tailLines=5`).
        path: String,
        #[command(flatten)]
        common: crate::CommonArgs,
    },
    /// Devices the node has and which pod's container holds each (the
    /// agent's pod-resources API).
    Devices {
        /// The agent's pod-resources socket (`<dataDir>/pod-resources/kubelet.sock`).
        #[arg(long, default_value = "/var/lib/picolet/pod-resources/kubelet.sock")]
        pod_resources: PathBuf,
    },
    /// Change a running container's resources (UpdateContainerResources),
    /// as `crictl update` does: the request carries exactly these values (0:
    /// unset), as kubelet's does.
    Update {
        /// Memory limit in bytes.
        #[arg(long, default_value_t = 0)]
        memory: i64,
        /// CPU shares (relative weight).
        #[arg(long, default_value_t = 0)]
        cpu_shares: i64,
        /// CPU CFS quota in microseconds per period.
        #[arg(long, default_value_t = 0)]
        cpu_quota: i64,
        /// CPU CFS period in microseconds.
        #[arg(long, default_value_t = 0)]
        cpu_period: i64,
        /// Container ID or a unique prefix of it.
        container: String,
    },
}

/// Exit status a command wants (`ctl exec` passes the container's on).
#[derive(Debug)]
struct Status(u8);

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit status {}", self.0)
    }
}

impl std::error::Error for Status {}

pub fn run(args: CtlArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("picolet ctl: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(dispatch(args));
    // A read of stdin (`exec -i`) may still be blocked in the runtime's
    // thread pool: do not wait for it.
    rt.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.chain().any(|c| c.is::<StdoutClosed>()) => die_of_sigpipe(),
        Err(e) => match e.downcast_ref::<Status>() {
            Some(Status(code)) => ExitCode::from(*code),
            None => {
                eprintln!("picolet ctl: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}

async fn dispatch(args: CtlArgs) -> Result<()> {
    match args.command {
        // The agent's API, not the shim's.
        CtlCommand::Devices { pod_resources } => crate::ctl_devices::devices(&pod_resources).await,
        CtlCommand::Api { path, common } => api(&path, &common).await,
        command => dispatch_cri(&args.socket, command).await,
    }
}

/// The commands the shim's CRI socket answers.
async fn dispatch_cri(socket: &std::path::Path, command: CtlCommand) -> Result<()> {
    let channel = cri_proto::connect(socket)
        .await
        .with_context(|| format!("is `picolet shim` running on {}?", socket.display()))?;
    match command {
        CtlCommand::Devices { .. } | CtlCommand::Api { .. } => {
            unreachable!("dispatch answers it")
        }
        CtlCommand::Images { quiet } => crate::ctl_images::images(channel, quiet).await,
        CtlCommand::Import { files } => crate::ctl_images::import(channel, files).await,
        CtlCommand::Pull { image, creds } => crate::ctl_images::pull(channel, image, creds).await,
        CtlCommand::Rmi { images } => crate::ctl_images::rmi(channel, images).await,
        CtlCommand::Pods => pods(channel).await,
        CtlCommand::Ps { all } => ps(channel, all).await,
        CtlCommand::Logs {
            container,
            tail,
            follow,
        } => {
            let mut client = RuntimeServiceClient::new(channel);
            let id = resolve(&mut client, &container).await?;
            crate::ctl_logs::logs(&mut client, id, tail, follow).await
        }
        CtlCommand::Exec {
            stdin: false,
            tty: false,
            timeout,
            container,
            cmd,
        } => exec(channel, &container, cmd, timeout).await,
        CtlCommand::Exec {
            stdin,
            tty,
            container,
            cmd,
            ..
        } => {
            let mut client = RuntimeServiceClient::new(channel);
            let id = resolve(&mut client, &container).await?;
            match crate::ctl_stream::exec(&mut client, id, cmd, stdin, tty).await? {
                0 => Ok(()),
                code => Err(Status(u8::try_from(code).unwrap_or(255)).into()),
            }
        }
        CtlCommand::Attach { stdin, container } => {
            let mut client = RuntimeServiceClient::new(channel);
            let id = resolve(&mut client, &container).await?;
            crate::ctl_stream::attach(&mut client, id, stdin).await
        }
        CtlCommand::PortForward { pod, ports } => {
            let (local, remote) = ports
                .split_once(':')
                .and_then(|(l, r)| Some((l.parse().ok()?, r.parse().ok()?)))
                .with_context(|| format!("{ports}: expected LOCAL:REMOTE ports"))?;
            let mut client = RuntimeServiceClient::new(channel);
            let id = resolve_pod(&mut client, &pod).await?;
            crate::ctl_stream::port_forward(&mut client, id, local, remote).await
        }
        CtlCommand::Stop {
            timeout,
            containers,
        } => {
            let mut client = RuntimeServiceClient::new(channel);
            crate::ctl_manage::stop(&mut client, &containers, timeout).await
        }
        CtlCommand::Rm { force, containers } => {
            let mut client = RuntimeServiceClient::new(channel);
            crate::ctl_manage::rm(&mut client, &containers, force).await
        }
        CtlCommand::Stopp { pods } => {
            let mut client = RuntimeServiceClient::new(channel);
            crate::ctl_manage::stopp(&mut client, &pods).await
        }
        CtlCommand::Rmp { force, pods } => {
            let mut client = RuntimeServiceClient::new(channel);
            crate::ctl_manage::rmp(&mut client, &pods, force).await
        }
        CtlCommand::Inspect { container } => {
            let mut client = RuntimeServiceClient::new(channel);
            crate::ctl_manage::inspect(&mut client, &container).await
        }
        CtlCommand::Inspectp { pod } => {
            let mut client = RuntimeServiceClient::new(channel);
            crate::ctl_manage::inspectp(&mut client, &pod).await
        }
        CtlCommand::Stats { container } => {
            let mut client = RuntimeServiceClient::new(channel);
            crate::ctl_manage::stats(&mut client, container.as_deref()).await
        }
        CtlCommand::Update {
            memory,
            cpu_shares,
            cpu_quota,
            cpu_period,
            container,
        } => {
            let mut client = RuntimeServiceClient::new(channel);
            let id = resolve(&mut client, &container).await?;
            client
                .update_container_resources(UpdateContainerResourcesRequest {
                    container_id: id.clone(),
                    linux: Some(LinuxContainerResources {
                        memory_limit_in_bytes: memory,
                        cpu_shares,
                        cpu_quota,
                        cpu_period,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .await?;
            out!("{id}");
            Ok(())
        }
    }
}

/// `ctl api PATH`: the body on stdout; a refusal's status and body on
/// stderr, exit 1.
async fn api(path: &str, common: &crate::CommonArgs) -> Result<()> {
    // load_config has said what is wrong with the file.
    let config = crate::load_config(common).map_err(|_| Status(2))?;
    // One line: the error's text already carries its cause.
    let answer = agent::server::local::get(&config, path)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if !(200..300).contains(&answer.status) {
        anyhow::bail!(
            "GET {path}: HTTP {}: {}",
            answer.status,
            String::from_utf8_lossy(&answer.body).trim_end()
        );
    }
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    // JSON answers end without a newline: the shell's prompt goes on a
    // line of its own. Other bodies (logs) are printed byte for byte.
    let json = answer.body.starts_with(b"{") && !answer.body.ends_with(b"\n");
    let newline: &[u8] = if json { b"\n" } else { b"" };
    stdout
        .write_all(&answer.body)
        .and_then(|()| stdout.write_all(newline))
        .and_then(|()| stdout.flush())
        .map_err(stdout_error)?;
    Ok(())
}

async fn exec(
    channel: cri_proto::Channel,
    prefix: &str,
    cmd: Vec<String>,
    timeout: i64,
) -> Result<()> {
    use std::io::Write;
    let mut client = RuntimeServiceClient::new(channel);
    let id = resolve(&mut client, prefix).await?;
    let r = client
        .exec_sync(ExecSyncRequest {
            container_id: id,
            cmd,
            timeout,
        })
        .await?
        .into_inner();
    std::io::stdout()
        .write_all(&r.stdout)
        .map_err(stdout_error)?;
    std::io::stderr().write_all(&r.stderr)?;
    match r.exit_code {
        0 => Ok(()),
        code => Err(Status(u8::try_from(code).unwrap_or(255)).into()),
    }
}

/// "12s ago"-style age of a CRI nanosecond timestamp.
fn age(created_ns: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let s = (now - created_ns).max(0) / 1_000_000_000;
    match s {
        0..60 => format!("{s}s ago"),
        60..3600 => format!("{}m ago", s / 60),
        3600..86400 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86400),
    }
}

async fn pods(channel: cri_proto::Channel) -> Result<()> {
    let mut client = RuntimeServiceClient::new(channel);
    let mut list = client
        .list_pod_sandbox(ListPodSandboxRequest { filter: None })
        .await?
        .into_inner()
        .items;
    list.sort_by_key(|p| std::cmp::Reverse(p.created_at));
    out!(
        "{:<14} {:<10} {:<9} {:<40} {:<15} {:>7}",
        "POD ID",
        "CREATED",
        "STATE",
        "NAME",
        "NAMESPACE",
        "ATTEMPT"
    );
    for p in list {
        let m = p.metadata.unwrap_or_default();
        let state = if p.state == PodSandboxState::SandboxReady as i32 {
            "Ready"
        } else {
            "NotReady"
        };
        out!(
            "{:<14} {:<10} {:<9} {:<40} {:<15} {:>7}",
            short(&p.id),
            age(p.created_at),
            state,
            m.name,
            m.namespace,
            m.attempt
        );
    }
    Ok(())
}

async fn ps(channel: cri_proto::Channel, all: bool) -> Result<()> {
    // Image IDs → their first tag, as crictl shows them.
    let tags: std::collections::HashMap<String, String> = ImageServiceClient::new(channel.clone())
        .list_images(ListImagesRequest { filter: None })
        .await
        .map(|r| {
            r.into_inner()
                .images
                .into_iter()
                .filter_map(|i| Some((i.id.clone(), i.repo_tags.first()?.clone())))
                .collect()
        })
        .unwrap_or_default();
    let mut client = RuntimeServiceClient::new(channel);
    let filter = (!all).then(|| ContainerFilter {
        state: Some(ContainerStateValue {
            state: ContainerState::ContainerRunning as i32,
        }),
        ..Default::default()
    });
    let mut list = client
        .list_containers(ListContainersRequest { filter })
        .await?
        .into_inner()
        .containers;
    list.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    out!(
        "{:<14} {:<30} {:<10} {:<8} {:<20} {:>7} {:<14}",
        "CONTAINER",
        "IMAGE",
        "CREATED",
        "STATE",
        "NAME",
        "ATTEMPT",
        "POD ID"
    );
    for c in list {
        let m = c.metadata.unwrap_or_default();
        let state = match ContainerState::try_from(c.state) {
            Ok(ContainerState::ContainerCreated) => "Created",
            Ok(ContainerState::ContainerRunning) => "Running",
            Ok(ContainerState::ContainerExited) => "Exited",
            _ => "Unknown",
        };
        // What the user asked for (kubelet passes the resolved ID as `image`).
        let image = c
            .image
            .map(|i| {
                if !i.user_specified_image.is_empty() {
                    i.user_specified_image
                } else if let Some(tag) = tags.get(&c.image_id).or_else(|| tags.get(&i.image)) {
                    tag.clone()
                } else {
                    short(i.image.trim_start_matches("sha256:"))
                }
            })
            .unwrap_or_default();
        out!(
            "{:<14} {:<30} {:<10} {:<8} {:<20} {:>7} {:<14}",
            short(&c.id),
            image,
            age(c.created_at),
            state,
            m.name,
            m.attempt,
            short(&c.pod_sandbox_id)
        );
    }
    Ok(())
}
