//! The /init binary brings its own `_start` and links no C library: a static executable,
//! not position-independent (nothing relocates it at start-up), with nothing else linked in,
//! and without unwind tables (panic=abort: nothing unwinds; they were a sixth of the file).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=no-unwind.ld");
    if std::env::var_os("CARGO_FEATURE_STANDALONE").is_some() {
        for a in ["-nostartfiles", "-nostdlib", "-static", "-no-pie", "-Wl,--no-eh-frame-hdr"] {
            println!("cargo:rustc-link-arg-bins={a}");
        }
        let script = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("no-unwind.ld");
        println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display());
    }
}
