//! One command to install: `cargo install --path crates/leanrd` in a clean copy of the
//! sources gives a leanrd that carries its /init (built by crates/leanrd/build.rs), and the
//! image it builds with no --init, no $LEANRD_INIT and no leanrd-init on disk boots a root
//! under QEMU.
//!
//! Needs cargo (the dependencies already fetched: `--locked`, the workspace's Cargo.lock),
//! git, root, qemu, mkfs.ext4 and busybox-static. The release build of the copy takes about
//! three minutes on two cores the first time. The copy and its target directory are kept in
//! the test cache (/var/cache/leanrd-tests/install-src and install-target), the copy made
//! again file by file where the content differs (a file left alone keeps its time, which is
//! what cargo's fingerprints compare), so later runs rebuild only the crates that changed.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::*;

const MARK: &str = "LEANRD-INSTALLED-ROOT-OK";

#[test]
fn cargo_install_gives_a_leanrd_whose_images_boot() {
    if !is_root() || !have("git") || !have("mkfs.ext4") || !Path::new("/bin/busybox").exists() {
        skip::<()>("needs root, git, mkfs.ext4 and busybox-static");
        return;
    }
    let Some(kernel) = kernel() else { return };
    let kver = kver_of(&kernel);
    let t = TempDir::new("install");
    let cache = &leanrd_testkit::scenario::test_cache();
    fs::create_dir_all(cache).unwrap();
    // One run at a time uses the copy and its target directory.
    let lock = fs::File::create(cache.join("install.lock")).unwrap();
    lock.lock().unwrap();
    // A clean copy: the files git knows (committed or not), nothing built.
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let src = cache.join("install-src");
    sync_sources(&ws, &src);
    assert!(!src.join("target").exists());
    let root = t.join("inst");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut c = Command::new(cargo);
    c.args(["install", "--locked", "--quiet", "--root"]).arg(&root).arg("--path").arg(src.join("crates/leanrd"));
    c.env("CARGO_TARGET_DIR", cache.join("install-target"));
    for v in ["LEANRD_INIT", "LEANRD_EMBED_INIT", "RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_TARGET"] {
        c.env_remove(v);
    }
    let started = std::time::Instant::now();
    let o = c.output().unwrap();
    assert!(o.status.success(), "cargo install: {}", String::from_utf8_lossy(&o.stderr));
    eprintln!("cargo install: {:.0} s", started.elapsed().as_secs_f64());
    let bin = root.join("bin");
    let installed: Vec<String> =
        fs::read_dir(&bin).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(installed, ["leanrd"], "one executable installed, nothing beside it");

    // The image, with nothing said about /init; run from a directory with nothing around it.
    let img = t.join("installed.img");
    let o = Command::new(bin.join("leanrd"))
        .current_dir(t.path())
        .env_remove("LEANRD_INIT")
        .args(["build", "-k", &kver, "--universal", "-o"])
        .arg(&img)
        .output()
        .unwrap();
    assert!(o.status.success(), "leanrd build: {}", String::from_utf8_lossy(&o.stderr));
    let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&img))).unwrap();
    assert!(ls.lines().any(|l| l == "init"), "no /init in the image:\n{ls}");

    // A root that prints the marker.
    let r = busybox_root(&t, &["dev", "proc", "sys", "run"]);
    fs::write(r.join("sbin/init"), format!("#!/bin/sh\n/bin/busybox echo {MARK}\n/bin/busybox poweroff -f\n")).unwrap();
    sh(&format!("chmod 755 {}", r.join("sbin/init").display()));
    let disk = t.join("root.ext4");
    sh(&format!("truncate -s 64M {d} && mkfs.ext4 -q -d {r} {d}", d = disk.display(), r = r.display()));
    let drive = format!("file={},format=raw,if=virtio", disk.display());
    let log = qemu_boot(&kernel, &img, "root=/dev/vda", &["-m", "512", "-drive", &drive], 240);
    assert!(log.contains(MARK), "the installed leanrd's image did not boot:\n{log}");
}

/// Make `dst` a copy of the files git knows in `ws` (committed or not): a file is written only
/// when its content (or a link's target, or its mode) differs, and files git does not know are
/// removed.
fn sync_sources(ws: &Path, dst: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let o = Command::new("git")
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .current_dir(ws)
        .output()
        .unwrap();
    assert!(o.status.success(), "git ls-files: {}", String::from_utf8_lossy(&o.stderr));
    let mut known = std::collections::BTreeSet::new();
    for name in o.stdout.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let rel = Path::new(std::str::from_utf8(name).unwrap());
        let (from, to) = (ws.join(rel), dst.join(rel));
        // A file deleted but not yet staged: git still lists it.
        let Ok(meta) = fs::symlink_metadata(&from) else { continue };
        known.insert(rel.to_path_buf());
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&from).unwrap();
            if fs::read_link(&to).ok() != Some(target.clone()) {
                let _ = fs::remove_file(&to);
                std::os::unix::fs::symlink(target, &to).unwrap();
            }
            continue;
        }
        let same = fs::symlink_metadata(&to).is_ok_and(|m| {
            m.is_file()
                && m.permissions().mode() == meta.permissions().mode()
                && fs::read(&to).ok() == fs::read(&from).ok()
        });
        if !same {
            let _ = fs::remove_file(&to);
            fs::copy(&from, &to).unwrap();
        }
    }
    fn prune(dir: &Path, base: &Path, known: &std::collections::BTreeSet<std::path::PathBuf>) {
        for e in fs::read_dir(dir).unwrap().map(Result::unwrap) {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().to_path_buf();
            if e.file_type().unwrap().is_dir() {
                prune(&p, base, known);
                if fs::read_dir(&p).unwrap().next().is_none() {
                    fs::remove_dir(&p).unwrap();
                }
            } else if !known.contains(&rel) {
                fs::remove_file(&p).unwrap();
            }
        }
    }
    prune(dst, dst, &known);
}
