//! The API objects pods refer to (configMaps, secrets, service account
//! tokens), as the pod workers fetch them: a trait the cluster mode
//! implements ([`crate::volumes::api_objects`]), so the workers never know the API
//! client. Without an API server (static pods only) there is none.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An object's keys and their bytes; `Ok(None)`: the API server has no
/// such object.
pub type Data = Option<BTreeMap<String, Vec<u8>>>;

/// Why an object could not be fetched: the API server's answer, kept
/// whole (the implementation's error).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct FetchError(pub Box<dyn std::error::Error + Send + Sync>);

/// What a pod with API volumes or env needs fetched.
pub trait ApiObjects: Send + Sync + std::fmt::Debug {
    /// A configMap's `data` and `binaryData`.
    fn config_map<'a>(&'a self, ns: &'a str, name: &'a str)
    -> BoxFut<'a, Result<Data, FetchError>>;
    /// A secret's `data`.
    fn secret<'a>(&'a self, ns: &'a str, name: &'a str) -> BoxFut<'a, Result<Data, FetchError>>;
    /// A token of `service_account` bound to the pod (TokenRequest), for
    /// `audience` (empty: the API server's) lasting `seconds`; the same one
    /// again until 80 % of its life has passed.
    fn token<'a>(&'a self, req: TokenRequest<'a>) -> BoxFut<'a, Result<String, FetchError>>;
}

/// A service account token for a pod.
#[derive(Debug, Clone, Copy)]
pub struct TokenRequest<'a> {
    pub namespace: &'a str,
    pub service_account: &'a str,
    pub pod_name: &'a str,
    pub pod_uid: &'a str,
    pub audience: &'a str,
    pub seconds: i64,
}
