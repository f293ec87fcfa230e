//! The /init binary brings its own `_start` and links no C library: a static executable,
//! not position-independent (nothing relocates it at start-up), with nothing else linked in.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_STANDALONE").is_some() {
        for a in ["-nostartfiles", "-nostdlib", "-static", "-no-pie"] {
            println!("cargo:rustc-link-arg-bins={a}");
        }
    }
}
