//! Generates picolet's own small management API (image import with progress)
//! and kubelet's device plugin (v1beta1) and pod-resources (v1) APIs.
//! The CRI API itself comes from the `k8s-cri` crate.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/picolet.proto");
    println!("cargo:rerun-if-changed=proto/deviceplugin/v1beta1.proto");
    println!("cargo:rerun-if-changed=proto/podresources/v1.proto");
    tonic_prost_build::configure().compile_protos(&["proto/picolet.proto"], &["proto/"])?;
    tonic_prost_build::configure()
        .compile_protos(&["proto/deviceplugin/v1beta1.proto"], &["proto/"])?;
    tonic_prost_build::configure().compile_protos(&["proto/podresources/v1.proto"], &["proto/"])?;
    Ok(())
}
