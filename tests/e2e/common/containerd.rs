//! Debian's containerd 1.6 (+ runc) on private paths inside a test dir, with
//! a busybox image and a busybox-made sandbox image imported (nothing is
//! pulled). Host-network pods only: containerd's CRI wants CNI for a pod
//! network. On drop: every pod removed through CRI, then containerd and the
//! runc shims it started (found by our private socket path) killed by PID.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cri_proto::v1::{ListPodSandboxRequest, RemovePodSandboxRequest, StopPodSandboxRequest};

pub const PAUSE_REF: &str = "localhost/picolet-test/pause:v1";

pub struct Containerd {
    pub dir: PathBuf,
    pub child: Option<Child>,
}

impl Containerd {
    /// Starts containerd under `dir` (which the caller cleans up).
    pub fn start(dir: &Path) -> Self {
        let dir = dir.join("containerd");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let config = format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/c.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_REF}"
  # Root in these VMs cannot lower oom_score_adj (no CAP_SYS_RESOURCE).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
"#,
            d = dir.display()
        );
        std::fs::write(dir.join("config.toml"), config).expect("config");
        let log = std::fs::File::create(dir.join("containerd.log")).expect("log");
        let child = Command::new("containerd")
            .arg("--config")
            .arg(dir.join("config.toml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("containerd (apt install containerd)");
        let c = Self {
            dir,
            child: Some(child),
        };
        super::eventually(
            "containerd's socket",
            Duration::from_secs(30),
            || c.socket().exists(),
            String::new,
        );
        c.import_images();
        c
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("c.sock")
    }

    fn import_images(&self) {
        let busybox = std::env::var("BUSYBOX").unwrap_or_else(|_| "/bin/busybox".into());
        let base = xtask::busybox_layer(Path::new(&busybox)).expect("busybox layer");
        let app = xtask::busybox_image(&base);
        let mut pause = xtask::busybox_image(&base);
        pause.name = PAUSE_REF.into();
        pause.cmd = vec!["sleep".into(), "2147483647".into()];
        let tar = self.dir.join("images.tar");
        xtask::write_docker_archive(
            &tar,
            &[
                (app, vec![xtask::BUSYBOX_REF.into()]),
                (pause, vec![PAUSE_REF.into()]),
            ],
        )
        .expect("archive");
        let out = Command::new("ctr")
            .arg("--address")
            .arg(self.socket())
            .args(["-n", "k8s.io", "images", "import"])
            .arg(&tar)
            .output()
            .expect("ctr");
        assert!(
            out.status.success(),
            "ctr import: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn remove_all_pods(&self) {
        let Ok(rt) = tokio::runtime::Runtime::new() else {
            return;
        };
        let socket = self.socket();
        rt.block_on(async {
            let mut c = super::cri::client(&socket).await;
            let Ok(list) = c.list_pod_sandbox(ListPodSandboxRequest::default()).await else {
                return;
            };
            for p in list.into_inner().items {
                let _ = c
                    .stop_pod_sandbox(StopPodSandboxRequest {
                        pod_sandbox_id: p.id.clone(),
                    })
                    .await;
                let _ = c
                    .remove_pod_sandbox(RemovePodSandboxRequest {
                        pod_sandbox_id: p.id,
                    })
                    .await;
            }
        });
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.remove_all_pods();
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // containerd-shim-runc-v2 processes of our containerd: their command
        // line names our private socket.
        let sock = self.socket().display().to_string();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            if cmdline.contains("containerd-shim") && cmdline.contains(&sock) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}
