//! The /init binary brings its own `_start` and links no C library: a static executable,
//! not position-independent (nothing relocates it at start-up), with nothing else linked in.
fn main() {
    for a in ["-nostartfiles", "-nostdlib", "-static", "-no-pie"] {
        println!("cargo:rustc-link-arg-bins={a}");
    }
}
