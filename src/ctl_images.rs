//! `picolet ctl` image commands: images, import, pull, rmi.

use std::path::PathBuf;

use anyhow::{Context, Result};
use cri_proto::picolet::images_client::ImagesClient;
use cri_proto::picolet::{ImportRequest, PullRequest};
use cri_proto::v1::image_service_client::ImageServiceClient;
use cri_proto::v1::{ImageSpec, ListImagesRequest, RemoveImageRequest};

pub async fn images(channel: cri_proto::Channel, quiet: bool) -> Result<()> {
    let mut client = ImageServiceClient::new(channel);
    let mut list = client
        .list_images(ListImagesRequest { filter: None })
        .await?
        .into_inner()
        .images;
    list.sort_by(|a, b| a.repo_tags.cmp(&b.repo_tags));
    if quiet {
        for i in list {
            out!("{}", i.id);
        }
        return Ok(());
    }
    out!(
        "{:<50} {:<12} {:<15} {:>10}",
        "IMAGE",
        "TAG",
        "IMAGE ID",
        "SIZE"
    );
    for i in list {
        let short =
            i.id.trim_start_matches("sha256:")
                .chars()
                .take(13)
                .collect::<String>();
        let size = human(i.size);
        if i.repo_tags.is_empty() {
            out!(
                "{:<50} {:<12} {:<15} {:>10}",
                "<none>",
                "<none>",
                short,
                size
            );
        }
        for t in &i.repo_tags {
            let (name, tag) = t.rsplit_once(':').unwrap_or((t, ""));
            out!("{name:<50} {tag:<12} {short:<15} {size:>10}");
        }
    }
    Ok(())
}

pub async fn import(channel: cri_proto::Channel, files: Vec<PathBuf>) -> Result<()> {
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
            out!("imported {name} {}", i.id);
        }
    }
    Ok(())
}

pub async fn pull(channel: cri_proto::Channel, image: String, creds: Option<String>) -> Result<()> {
    let (username, password) = match creds
        .as_deref()
        .map(|c| c.split_once(':').unwrap_or((c, "")))
    {
        Some((u, p)) => (u.to_string(), p.to_string()),
        None => Default::default(),
    };
    let bar = indicatif::ProgressBar::new(0).with_message(image.clone());
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {prefix}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let started = std::time::Instant::now();
    let mut stream = ImagesClient::new(channel)
        .pull(PullRequest {
            image: image.clone(),
            username,
            password,
        })
        .await
        .with_context(|| format!("pull {image}"))?
        .into_inner();
    let mut id = String::new();
    let mut total = 0;
    while let Some(msg) = stream
        .message()
        .await
        .with_context(|| format!("pull {image}"))?
    {
        if msg.total_bytes > 0 {
            bar.set_length(msg.total_bytes);
            bar.set_position(msg.done_bytes);
            bar.set_prefix(format!("layers {}/{}", msg.layers_done, msg.layers));
            total = msg.total_bytes;
        }
        if !msg.id.is_empty() {
            id = msg.id;
        }
    }
    bar.finish_and_clear();
    if total > 0 {
        out!(
            "pulled {image} {id} ({} in {:.1}s)",
            indicatif::HumanBytes(total),
            started.elapsed().as_secs_f64()
        );
    } else {
        out!("{image} is up to date: {id}");
    }
    Ok(())
}

pub async fn rmi(channel: cri_proto::Channel, refs: Vec<String>) -> Result<()> {
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
        out!("removed {r}");
    }
    Ok(())
}

pub(crate) fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "kB", "MB", "GB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1000.0 && u < UNITS.len() - 1 {
        v /= 1000.0;
        u += 1;
    }
    format!("{v:.1}{}", UNITS[u])
}
