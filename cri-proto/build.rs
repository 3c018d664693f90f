//! Generates picolet's own small management API (image import with progress).
//! The CRI API itself comes from the `k8s-cri` crate.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/picolet.proto");
    tonic_prost_build::configure().compile_protos(&["proto/picolet.proto"], &["proto/"])?;
    Ok(())
}
