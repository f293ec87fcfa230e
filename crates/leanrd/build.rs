//! Builds the static /init (crates/init) and embeds it in leanrd, so that `cargo install
//! --path crates/leanrd` gives a leanrd that builds bootable images with nothing else to do.
//!
//! /init is `no_std` with panic=abort and its own start-up (see crates/init/Cargo.toml): it
//! cannot be an ordinary dependency (cargo would unify its features and profile with
//! leanrd's), so this runs a second cargo on the workspace, with the `init` profile, in a
//! target directory of its own under OUT_DIR.
//!
//! `LEANRD_EMBED_INIT=FILE` embeds that file instead (a prebuilt /init); `LEANRD_EMBED_INIT=0`
//! embeds none (leanrd then looks for leanrd-init on disk, or takes --init / $LEANRD_INIT).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let dest = out.join("leanrd-init");
    println!("cargo:rerun-if-env-changed=LEANRD_EMBED_INIT");
    println!("cargo:rerun-if-changed=build.rs");
    match env::var("LEANRD_EMBED_INIT").ok().as_deref() {
        Some("0") => return write(&dest, b""),
        Some(file) if !file.is_empty() => {
            println!("cargo:rerun-if-changed={file}");
            let bytes = fs::read(file).unwrap_or_else(|e| panic!("LEANRD_EMBED_INIT={file}: {e}"));
            return write(&dest, &bytes);
        }
        _ => {}
    }
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let ws = manifest.join("../..");
    if !ws.join("crates/init/Cargo.toml").is_file() {
        // Not built from the workspace (a packaged crate): nothing to build /init from.
        println!("cargo:warning=crates/init not found: leanrd is built without an embedded /init");
        return write(&dest, b"");
    }
    for dir in ["crates/init", "crates/contract", "crates/kmod", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", ws.join(dir).display());
    }
    let target = env::var("TARGET").expect("cargo sets TARGET");
    let target_dir = out.join("init-target");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut c = Command::new(cargo);
    c.current_dir(&ws)
        .args(["build", "--quiet", "--profile", "init", "-p", "leanrd-init", "--features", "standalone"])
        .args(["--target", &target, "--target-dir"])
        .arg(&target_dir);
    // What the outer cargo set for leanrd's own build must not leak into /init's.
    for v in ["CARGO_ENCODED_RUSTFLAGS", "RUSTFLAGS", "CARGO_TARGET_DIR", "CARGO_BUILD_TARGET", "RUSTC_WRAPPER"] {
        c.env_remove(v);
    }
    let status = c.status().unwrap_or_else(|e| panic!("cannot run cargo to build /init: {e}"));
    assert!(status.success(), "building /init (crates/init) failed: {status}");
    let built = target_dir.join(&target).join("init/leanrd-init");
    let bytes = fs::read(&built).unwrap_or_else(|e| panic!("{}: {e}", built.display()));
    write(&dest, &bytes);
}

fn write(dest: &Path, bytes: &[u8]) {
    // Only when it changed: the include_bytes! that reads it then stays up to date for free.
    if fs::read(dest).ok().as_deref() != Some(bytes) {
        fs::write(dest, bytes).unwrap_or_else(|e| panic!("{}: {e}", dest.display()));
    }
}
