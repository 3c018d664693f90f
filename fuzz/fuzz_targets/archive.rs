//! An image archive (docker save / oci-archive tar, gzip or not) imported
//! into a fresh store: any input is an error or an image, never a panic,
//! and a failed import leaves the store as it was.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("tempdir");
    let archive = dir.path().join("image.tar");
    std::fs::write(&archive, data).expect("write");
    let store = images::ImageStore::open(dir.path().join("store")).expect("store");
    if store.import(&archive, &|_, _| {}).is_err() {
        assert!(store.list().is_empty(), "a failed import left an image");
    }
});
