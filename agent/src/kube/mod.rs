//! The Kubernetes API client: kubeconfig files ([`config`]), the thin
//! HTTP client ([`client`]) and client-go's list+watch reflector
//! ([`reflector`], its store in [`watch`]). What the node does with the API server lives in the rooms
//! kubelet keeps it in: `nodestatus`, `config`, `status`, `events`,
//! `certificate`, `volumes`.

pub mod cert;
pub mod client;
pub mod config;
mod conn;
pub mod reflector;
pub mod watch;

use client::Client;

/// Logs the first failure of a call repeated on a timer at WARN, the ones
/// after it at DEBUG, and the recovery at INFO with how long it lasted: a
/// device offline for a day writes three lines, not one every 10 s.
#[derive(Debug, Default)]
pub(crate) struct Outage {
    since: Option<tokio::time::Instant>,
    failures: u64,
}

impl Outage {
    /// Returns whether this failure was the one logged at WARN.
    pub(crate) fn failed(&mut self, what: &str, e: &dyn std::fmt::Display) -> bool {
        self.failures += 1;
        if self.since.is_some() {
            tracing::debug!("{what}: {e}");
            return false;
        }
        self.since = Some(tokio::time::Instant::now());
        tracing::warn!("{what}: {e} (retrying; further failures at debug level)");
        true
    }

    pub(crate) fn ok(&mut self, what: &str) {
        if let Some(since) = self.since.take() {
            tracing::info!(
                "{what}: working again after {:?} and {} failures",
                since.elapsed(),
                self.failures
            );
        }
        self.failures = 0;
    }
}

/// A kubeconfig that gives no client.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Load(#[from] edge_config::FieldError),
    #[error("{}: {source}", path.display())]
    Client {
        path: std::path::PathBuf,
        source: client::Error,
    },
}

/// Reads the kubeconfig and makes the client (errors name the file).
pub fn connect(path: &std::path::Path) -> Result<Client, ConnectError> {
    let cfg = config::load(path)?;
    Client::new(&cfg, &format!("picolet/{}", env!("CARGO_PKG_VERSION"))).map_err(|source| {
        ConnectError::Client {
            path: path.to_path_buf(),
            source,
        }
    })
}
#[cfg(test)]
mod tests {
    #[test]
    fn an_outage_is_warned_of_once_until_it_ends() {
        let mut o = super::Outage::default();
        assert!(o.failed("renew", &"refused"));
        assert!(!o.failed("renew", &"refused"));
        assert!(!o.failed("renew", &"refused"));
        o.ok("renew");
        assert!(
            o.failed("renew", &"refused"),
            "a new outage is warned of again"
        );
    }

    #[test]
    fn the_api_servers_refusals_are_read_for_their_message() {
        let exists = include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/node-exists.json"
        ));
        assert_eq!(
            super::client::status_message(exists),
            "nodes \"pk-node\" already exists"
        );
        let forbidden = include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/node-status-get-forbidden.json"
        ));
        assert!(
            super::client::status_message(forbidden)
                .contains("cannot get resource \"nodes/status\""),
        );
        assert_eq!(super::client::status_message(b"not json"), "not json");
        // The real API server's 404 to a lease PATCH that asked for
        // protobuf (kube-apiserver 1.36.3, recorded by hand).
        let protobuf = include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/lease-patch-notfound.pb"
        ));
        assert_eq!(
            super::client::status_message(protobuf),
            "leases.coordination.k8s.io \"nope\" not found"
        );
    }
}
