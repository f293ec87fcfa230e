//! Built-in features register themselves: every features/*.toml in the repository is
//! compiled in, by file name, with no list to keep by hand.
use std::fmt::Write;
use std::path::Path;

fn main() {
    // Read when the script runs, not compiled in: cargo reuses a built script for an
    // unchanged package found at another path (a copy of the tree), where the compiled-in path
    // would name a directory that is gone.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = Path::new(&manifest_dir).join("../../features");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the repository's features/ directory")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    let mut out = String::from("&[\n");
    for p in files {
        println!("cargo:rerun-if-changed={}", p.display());
        let name = p.file_stem().expect("a name").to_str().expect("a UTF-8 name");
        let abs = p.canonicalize().expect("a feature file");
        writeln!(out, "    ({name:?}, include_str!({:?})),", abs.display().to_string()).unwrap();
    }
    out.push(']');
    let dst = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("builtin_features.rs");
    std::fs::write(dst, out).expect("write the feature list");
}
