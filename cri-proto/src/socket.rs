//! Connect to and listen on CRI unix sockets.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::{Channel, Endpoint, Uri};

use crate::authority::AuthorityFix;

/// Errors from socket set-up; each names the socket path.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("cannot connect to {path}: {source}")]
    Connect {
        path: PathBuf,
        source: tonic::transport::Error,
    },
    #[error("cannot listen on {path}: {source}")]
    Listen {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Opens a gRPC channel to a unix socket, e.g. `/run/picolet/picolet.sock` or
/// containerd's `/run/containerd/containerd.sock`. Accepts a `unix://` prefix.
pub async fn connect(path: impl AsRef<Path>) -> Result<Channel, SocketError> {
    let path = strip_scheme(path.as_ref());
    let dial = path.clone();
    // The URI is required by tonic but unused: the connector ignores it.
    let endpoint = Endpoint::from_static("http://[::]:50051");
    endpoint
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let dial = dial.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(dial).await?)) }
        }))
        .await
        .map_err(|source| SocketError::Connect { path, source })
}

/// Binds a unix socket with mode 0600, replacing a stale socket file left by
/// a crashed server. Creates the parent directory (0700) if needed. Each
/// accepted connection reads through [`AuthorityFix`], so clients that send
/// an `:authority` h2 would refuse (grpc-go 1.58's percent-encoded path) are
/// served too.
///
/// The socket is bound and listening under a temporary name and then renamed
/// into place, so a client that waits for the path to appear (crictl, the
/// kubelet, our tests) never connects between bind(2) and listen(2), where
/// it would be refused: a root test saw that `ECONNREFUSED` once in CI.
pub fn listen(
    path: impl AsRef<Path>,
) -> Result<impl Stream<Item = std::io::Result<AuthorityFix<UnixStream>>>, SocketError> {
    let path = strip_scheme(path.as_ref());
    let err = |source| SocketError::Listen {
        path: path.clone(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    // At most 17 bytes after the folder; a folder too long for it fails
    // the bind with this path named.
    let tmp = path.with_file_name(format!(".{}.sock.tmp", std::process::id()));
    let listener = (|| {
        remove_if_exists(&tmp)?;
        let listener = UnixListener::bind(&tmp)?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        // Replaces a stale socket file left by a crashed server.
        std::fs::rename(&tmp, &path)?;
        Ok(listener)
    })()
    .map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        err(e)
    })?;
    Ok(UnixListenerStream::new(listener).map(|conn| conn.map(AuthorityFix::new)))
}

fn remove_if_exists(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn strip_scheme(path: &Path) -> PathBuf {
    let s = path.to_string_lossy();
    match s.strip_prefix("unix://") {
        Some(rest) => PathBuf::from(rest),
        None => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_scheme_is_stripped() {
        assert_eq!(
            strip_scheme(Path::new("unix:///run/x.sock")),
            PathBuf::from("/run/x.sock")
        );
        assert_eq!(
            strip_scheme(Path::new("/run/x.sock")),
            PathBuf::from("/run/x.sock")
        );
    }

    #[tokio::test]
    async fn listen_sets_mode_0600_and_replaces_stale_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/cri.sock");
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, b"stale").expect("write stale");
        let _listener = listen(&path).expect("listen");
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Bound under a temporary name, renamed into place: none is left.
        let names: Vec<_> = std::fs::read_dir(path.parent().expect("parent"))
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["cri.sock"]);
        UnixStream::connect(&path).await.expect("connect");
    }
}
