//! The gRPC services, thin: CRI RuntimeService ([`runtime`], its metrics
//! in [`metrics`]), CRI ImageService ([`image`]) and picolet's own import
//! API ([`import`]); each maps calls to the runtime or the image store and
//! errors to `tonic::Status` through [`crate::error`].

pub mod image;
pub mod import;
pub(crate) mod metrics;
pub mod runtime;
