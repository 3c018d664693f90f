//! `cargo xtask`: project tasks.
//!
//! - `cargo xtask test-images OUT`: the test images in every format.
//! - `cargo xtask demo-image OUT.tar [ARCH]`: the busybox demo image (oci-archive).
//! - `cargo xtask bench-image OUT.tar [MB] [ARCH] [NAME]`: busybox + MB MiB
//!   of random data, as a docker-archive (what `ctr images import` and
//!   picolet both read).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let busybox = PathBuf::from(std::env::var("BUSYBOX").unwrap_or_else(|_| "/bin/busybox".into()));
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["test-images", out] => {
            let t = xtask::build_test_images(&busybox, Path::new(out))?;
            println!("{t:#?}");
        }
        ["demo-image", out, rest @ ..] if rest.len() <= 1 => {
            // An optional OCI architecture (`arm64` for a guest of another
            // arch; BUSYBOX must then point at that arch's busybox).
            let base = xtask::busybox_layer(&busybox)?;
            let mut img = xtask::busybox_image(&base);
            if let Some(arch) = rest.first() {
                img.arch = arch.to_string();
            }
            let dir = tempdir_for(out)?;
            xtask::write_oci_layout(&dir, &[img])?;
            xtask::tar_dir(&dir, Path::new(out))?;
            std::fs::remove_dir_all(&dir)?;
            println!("wrote {out} ({})", xtask::BUSYBOX_REF);
        }
        ["pause-image", out] => {
            // For containerd's CRI in benchmarks: a sandbox image made of busybox.
            let base = xtask::busybox_layer(&busybox)?;
            let mut img = xtask::busybox_image(&base);
            img.name = "localhost/picolet-bench/pause:v1".into();
            img.cmd = vec!["sleep".into(), "2147483647".into()];
            xtask::write_docker_archive(
                Path::new(out),
                &[(img, vec!["localhost/picolet-bench/pause:v1".into()])],
            )?;
            println!("wrote {out} (localhost/picolet-bench/pause:v1)");
        }
        ["web-image", out] => {
            let base = xtask::busybox_layer(&busybox)?;
            xtask::write_docker_archive(
                Path::new(out),
                &[(xtask::web_image(&base), vec![xtask::WEB_REF.into()])],
            )?;
            println!("wrote {out} ({})", xtask::WEB_REF);
        }
        ["busybox-docker", out] => {
            let base = xtask::busybox_layer(&busybox)?;
            xtask::write_docker_archive(
                Path::new(out),
                &[(xtask::busybox_image(&base), vec![xtask::BUSYBOX_REF.into()])],
            )?;
            println!("wrote {out} ({})", xtask::BUSYBOX_REF);
        }
        ["bench-image", out, rest @ ..] => {
            let mb: usize = rest
                .first()
                .map(|s| s.parse())
                .transpose()
                .context("MB must be a number")?
                .unwrap_or(100);
            // Optional OCI architecture (BUSYBOX of that arch) and name.
            let base = xtask::busybox_layer(&busybox)?;
            let mut img = xtask::big_image(&base, mb);
            if let Some(arch) = rest.get(1) {
                img.arch = arch.to_string();
            }
            let name = rest.get(2).copied().unwrap_or(xtask::BIG_REF);
            img.name = name.into();
            xtask::write_docker_archive(Path::new(out), &[(img, vec![name.into()])])?;
            println!("wrote {out} ({name}, {mb} MiB layer)");
        }
        _ => bail!(
            "usage: cargo xtask test-images OUT | demo-image OUT.tar [ARCH] | web-image OUT.tar | bench-image OUT.tar [MB] [ARCH] [NAME]"
        ),
    }
    Ok(())
}

fn tempdir_for(out: &str) -> Result<PathBuf> {
    let dir = PathBuf::from(format!("{out}.layout.tmp"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(dir)
}
