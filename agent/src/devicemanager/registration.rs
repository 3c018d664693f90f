//! The Registration service on `kubelet.sock`, kubelet's
//! `plugin/v1beta1/server.go`: a plugin names its API version, its
//! socket (a file in the same directory) and its resource; the manager
//! answers at once and dials the plugin back.

use std::path::{Path, PathBuf};

use cri_proto::deviceplugin::registration_server::{Registration, RegistrationServer};
use cri_proto::deviceplugin::{Empty, RegisterRequest};
use tonic::{Request, Response, Status};

use super::{Error, KUBELET_SOCKET, Manager, endpoint, pod_devices};

/// The API version plugins must speak.
pub const VERSION: &str = "v1beta1";

/// Serves registrations on `<dir>/kubelet.sock` from now on.
/// What serving a directory made, to take away at a clean stop: the
/// socket, and the directories that did not exist before (deepest first).
#[derive(Debug, Clone)]
pub(super) struct Served {
    pub(super) socket: PathBuf,
    pub(super) made_dirs: Vec<PathBuf>,
}

impl Served {
    /// Removes the socket and the directories made for it, when empty.
    pub(super) fn take_away(&self) {
        let _ = std::fs::remove_file(&self.socket);
        for d in &self.made_dirs {
            if std::fs::remove_dir(d).is_err() {
                break;
            }
        }
    }
}

pub(super) fn serve(manager: Manager, dir: &Path) -> Result<Served, Error> {
    let made_dirs: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|d| !d.exists())
        .map(Path::to_path_buf)
        .collect();
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        op: "create",
        path: dir.into(),
        source,
    })?;
    let ours = dir.join(KUBELET_SOCKET);
    if std::os::unix::net::UnixStream::connect(&ours).is_ok() {
        // A kubelet (or another agent) serves here: its plugins are its.
        return Err(Error::Busy(ours));
    }
    remove_plugin_sockets(dir);
    let served = Served {
        socket: ours.clone(),
        made_dirs,
    };
    let incoming = cri_proto::listen(ours)?;
    let service = Service {
        manager,
        dir: dir.into(),
    };
    tokio::spawn(async move {
        let result = tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(service))
            .serve_with_incoming(incoming)
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "device plugin registration");
        }
    });
    Ok(served)
}

/// Removes the sockets plugins left from before this start, as kubelet
/// does: a plugin notices its socket gone, serves anew and registers again
/// (squat/generic-device-plugin checks its socket every second). Only
/// sockets go; the checkpoint and any other file stay.
fn remove_plugin_sockets(dir: &Path) {
    use std::os::unix::fs::FileTypeExt;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let is_socket = e.file_type().is_ok_and(|t| t.is_socket());
        if is_socket && e.file_name() != KUBELET_SOCKET {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

struct Service {
    manager: Manager,
    dir: PathBuf,
}

/// Why a registration is refused (the plugin sees the message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("invalid version {0:?}: the device plugin API version must be \"v1beta1\"")]
    Version(String),
    #[error("invalid resource name {0:?}: not an extended resource name")]
    ResourceName(String),
    #[error("invalid endpoint {0:?}: a socket name in the device plugin directory")]
    Endpoint(String),
}

pub fn check(r: &RegisterRequest) -> Result<(), Refusal> {
    if r.version != VERSION {
        return Err(Refusal::Version(r.version.clone()));
    }
    if !pod_devices::is_extended(&r.resource_name) {
        return Err(Refusal::ResourceName(r.resource_name.clone()));
    }
    // A file in the directory: never a path elsewhere.
    let e = &r.endpoint;
    if e.is_empty() || e.contains('/') || e == "." || e == ".." || e == KUBELET_SOCKET {
        return Err(Refusal::Endpoint(e.clone()));
    }
    Ok(())
}

#[tonic::async_trait]
impl Registration for Service {
    async fn register(&self, req: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let r = req.into_inner();
        if let Err(why) = check(&r) {
            tracing::warn!(resource = %r.resource_name, "device plugin registration refused: {why}");
            return Err(Status::invalid_argument(why.to_string()));
        }
        tokio::spawn(endpoint::run(
            self.manager.clone(),
            r.resource_name,
            self.dir.join(&r.endpoint),
            r.options.unwrap_or_default(),
        ));
        Ok(Response::new(Empty {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_name_a_version_an_extended_resource_and_a_socket_here() {
        let ok = RegisterRequest {
            version: VERSION.into(),
            endpoint: "serial.sock".into(),
            resource_name: "devices.picolet.io/serial".into(),
            options: None,
        };
        assert_eq!(check(&ok), Ok(()));
        let with = |f: fn(&mut RegisterRequest)| {
            let mut r = ok.clone();
            f(&mut r);
            check(&r).expect_err("refused")
        };
        assert_eq!(
            with(|r| r.version = "v1alpha".into()),
            Refusal::Version("v1alpha".into())
        );
        assert_eq!(
            with(|r| r.resource_name = "cpu".into()),
            Refusal::ResourceName("cpu".into())
        );
        for bad in ["../x.sock", "/run/x.sock", "", "..", "kubelet.sock"] {
            let mut r = ok.clone();
            r.endpoint = bad.into();
            assert_eq!(check(&r), Err(Refusal::Endpoint(bad.into())), "{bad}");
        }
    }
}
