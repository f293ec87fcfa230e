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
        // The linker script goes by a path in OUT_DIR, not in the sources: cargo reuses this
        // script's output for an unchanged copy of the crate elsewhere (a `cargo install` from
        // a second checkout into the same target directory), whose source path may be gone.
        let script = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("no-unwind.ld");
        std::fs::write(&script, include_str!("no-unwind.ld")).expect("OUT_DIR is writable");
        println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display());
    }
}
