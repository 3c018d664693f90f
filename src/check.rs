//! `picolet check`: the config file, the static pod manifests and, with
//! `--store`, the image store, validated without running anything.

use std::path::PathBuf;
use std::process::ExitCode;

use edge_config::ShimPaths;

use crate::{CommonArgs, DEFAULT_CONFIG, load_config};

#[derive(clap::Args)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Node name the manifests' pod names get suffixed with.
    #[arg(long)]
    node_name: Option<String>,
    /// Also verify the image store under the data root, read-only: every
    /// blob re-hashed, every image complete, every unpacked layer compared
    /// with its blob (exit 1 on damage). Waits for, then holds, the shim's
    /// lock: run it while no shim runs on this root.
    #[arg(long)]
    store: bool,
    /// Static pod manifests (files) to validate; none: every manifest in
    /// the static pod folder (`staticPodPath`), as the agent reads it.
    manifests: Vec<PathBuf>,
}

pub(crate) fn run(args: CheckArgs) -> ExitCode {
    let config = match load_config(&args.common) {
        Ok(c) => c,
        Err(code) => return code,
    };
    // "(defaults)" only when there is no file: an existing default file
    // was read and checked like any other.
    let config_name = match args.common.config.as_ref() {
        Some(p) => p.display().to_string(),
        None if std::path::Path::new(DEFAULT_CONFIG).exists() => DEFAULT_CONFIG.to_string(),
        None => format!("{DEFAULT_CONFIG} (not there: defaults)"),
    };
    println!("{config_name}: ok");
    let node = args.node_name.unwrap_or(config.node_name);
    let mut failed = false;
    if args.manifests.is_empty() && !args.store {
        // No files named: the static pod folder, read as the agent reads
        // it (what it would report as InvalidManifest fails the check).
        let scan = agent::config::file::FileSource::new(&config.static_pod_path, &node).scan();
        for (path, pod) in scan.pods.values() {
            println!(
                "{}: ok: pod {}/{} uid {}",
                path.display(),
                pod.metadata.namespace.as_deref().unwrap_or(""),
                pod.metadata.name.as_deref().unwrap_or(""),
                pod.metadata.uid.as_deref().unwrap_or("")
            );
        }
        for e in &scan.errors {
            eprintln!("picolet: {e}");
            failed = true;
        }
        if scan.pods.is_empty() && scan.errors.is_empty() {
            println!("{}: no static pods", config.static_pod_path.display());
        }
    }
    for m in &args.manifests {
        let text = match std::fs::read_to_string(m) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("picolet: {}: cannot read: {e}", m.display());
                failed = true;
                continue;
            }
        };
        match agent::config::manifest::parse(m, &text, &node, "1970-01-01T00:00:00Z") {
            Ok(pods) => {
                for p in pods {
                    println!(
                        "{}: ok: pod {}/{} uid {}",
                        m.display(),
                        p.metadata.namespace.unwrap_or_default(),
                        p.metadata.name.unwrap_or_default(),
                        p.metadata.uid.unwrap_or_default()
                    );
                }
            }
            Err(e) => {
                eprintln!("picolet: {e}");
                failed = true;
            }
        }
    }
    if failed {
        return ExitCode::from(2);
    }
    if args.store {
        return check_store(&config.data_dir);
    }
    ExitCode::SUCCESS
}

/// `check --store`: what [`images::verify`] finds, one line each.
fn check_store(data_dir: &std::path::Path) -> ExitCode {
    let lock = data_dir.join("shim.lock");
    let _owner = match edge_config::owner::claim(&lock, "shim", edge_config::owner::WAIT) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("picolet: check --store: {e}");
            return ExitCode::from(2);
        }
    };
    let root = ShimPaths {
        root: data_dir.to_path_buf(),
        ..ShimPaths::default()
    }
    .image_store();
    let v = match images::verify::verify(&root, true) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("picolet: check --store: {e}");
            return ExitCode::from(2);
        }
    };
    for l in &v.leftovers {
        println!(
            "{}: leftover (removed when the shim starts): {l}",
            root.display()
        );
    }
    for p in &v.problems {
        eprintln!("picolet: {}: {p}", root.display());
    }
    println!(
        "{}: {} images, {} blobs ({} MiB hashed), {} snapshots: {}",
        root.display(),
        v.images,
        v.blobs,
        v.bytes >> 20,
        v.snapshots,
        if v.problems.is_empty() {
            "ok".to_string()
        } else {
            format!("{} problems", v.problems.len())
        }
    );
    if v.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
