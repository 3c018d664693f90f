//! `picolet ctl`: a small crictl-like client for people on the device.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use cri_proto::picolet::ImportRequest;
use cri_proto::picolet::images_client::ImagesClient;
use cri_proto::v1::image_service_client::ImageServiceClient;
use cri_proto::v1::{ImageSpec, ListImagesRequest, RemoveImageRequest};
use edge_config::DEFAULT_SOCKET;

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
    /// Remove images by reference or ID.
    Rmi {
        #[arg(required = true)]
        images: Vec<String>,
    },
    /// List pod sandboxes (not implemented yet).
    Pods,
    /// List containers (not implemented yet).
    Ps,
}

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
    match rt.block_on(dispatch(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("picolet ctl: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(args: CtlArgs) -> Result<()> {
    match args.command {
        CtlCommand::Pods | CtlCommand::Ps => {
            bail!("pods and containers are not implemented yet")
        }
        _ => {}
    }
    let channel = cri_proto::connect(&args.socket)
        .await
        .with_context(|| format!("is `picolet shim` running on {}?", args.socket.display()))?;
    match args.command {
        CtlCommand::Images { quiet } => images(channel, quiet).await,
        CtlCommand::Import { files } => import(channel, files).await,
        CtlCommand::Rmi { images } => rmi(channel, images).await,
        CtlCommand::Pods | CtlCommand::Ps => Ok(()),
    }
}

async fn images(channel: cri_proto::Channel, quiet: bool) -> Result<()> {
    let mut client = ImageServiceClient::new(channel);
    let mut list = client
        .list_images(ListImagesRequest { filter: None })
        .await?
        .into_inner()
        .images;
    list.sort_by(|a, b| a.repo_tags.cmp(&b.repo_tags));
    if quiet {
        for i in list {
            println!("{}", i.id);
        }
        return Ok(());
    }
    println!(
        "{:<50} {:<12} {:<15} {:>10}",
        "IMAGE", "TAG", "IMAGE ID", "SIZE"
    );
    for i in list {
        let short =
            i.id.trim_start_matches("sha256:")
                .chars()
                .take(13)
                .collect::<String>();
        let size = human(i.size);
        if i.repo_tags.is_empty() {
            println!(
                "{:<50} {:<12} {:<15} {:>10}",
                "<none>", "<none>", short, size
            );
        }
        for t in &i.repo_tags {
            let (name, tag) = t.rsplit_once(':').unwrap_or((t, ""));
            println!("{name:<50} {tag:<12} {short:<15} {size:>10}");
        }
    }
    Ok(())
}

async fn import(channel: cri_proto::Channel, files: Vec<PathBuf>) -> Result<()> {
    let mut client = ImagesClient::new(channel);
    for f in files {
        let path = std::path::absolute(&f).with_context(|| format!("{}", f.display()))?;
        let bar = indicatif::ProgressBar::new(0).with_message(f.display().to_string());
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let mut stream = client
            .import(ImportRequest {
                path: path.display().to_string(),
            })
            .await
            .with_context(|| format!("import {}", f.display()))?
            .into_inner();
        let mut done = Vec::new();
        while let Some(msg) = stream
            .message()
            .await
            .with_context(|| format!("import {}", f.display()))?
        {
            if msg.total_bytes > 0 {
                bar.set_length(msg.total_bytes);
                bar.set_position(msg.read_bytes);
            }
            done.extend(msg.images);
        }
        bar.finish_and_clear();
        for i in done {
            let name = i
                .repo_tags
                .first()
                .cloned()
                .unwrap_or_else(|| "<untagged>".into());
            println!("imported {name} {}", i.id);
        }
    }
    Ok(())
}

async fn rmi(channel: cri_proto::Channel, refs: Vec<String>) -> Result<()> {
    let mut client = ImageServiceClient::new(channel);
    for r in refs {
        client
            .remove_image(RemoveImageRequest {
                image: Some(ImageSpec {
                    image: r.clone(),
                    ..Default::default()
                }),
            })
            .await
            .with_context(|| format!("remove {r}"))?;
        println!("removed {r}");
    }
    Ok(())
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "kB", "MB", "GB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1000.0 && u < UNITS.len() - 1 {
        v /= 1000.0;
        u += 1;
    }
    format!("{v:.1}{}", UNITS[u])
}
