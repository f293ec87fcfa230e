//! The kernel itself unpacks what leanrd writes: QEMU (TCG) boots a Debian kernel with
//! leanrd images whose static busybox /init checks file hashes and a hard link.
//! Needs qemu-system-x86_64, a /boot/vmlinuz-* and busybox-static; skipped without them.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::*;

const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys
/bin/busybox --install -s /bin
mount -t proc proc /proc
cd /
if sha256sum -c /hashes >/dev/null 2>&1 && [ "$(stat -c %i /data/a)" = "$(stat -c %i /data/a-link)" ] \
   && [ "$(stat -c %h /data/a)" = 2 ] && [ "$(readlink /data/sym)" = a ]; then
  echo LEANRD-BOOT-OK
else
  echo LEANRD-BOOT-FAIL; sha256sum -c /hashes; ls -lia /data
fi
poweroff -f
echo o > /proc/sysrq-trigger
"#;

struct Fixture {
    _t: TempDir,
    manifest: PathBuf,
    early: PathBuf,
    dir: PathBuf,
}

fn fixture() -> Option<Fixture> {
    if !Path::new("/bin/busybox").exists() {
        eprintln!("skipping: /bin/busybox (busybox-static) missing");
        return None;
    }
    let t = TempDir::new("boot");
    let d = t.join("files");
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("init"), INIT).unwrap();
    let mut hashes = String::new();
    let mut m = format!(
        "dir /bin 755 0 0\nfile /bin/busybox /bin/busybox 755 0 0\nfile /init {} 755 0 0\ndir /dev 755 0 0\n\
         nod /dev/console 600 0 0 c 5 1\ndir /data 755 0 0\n",
        d.join("init").display()
    );
    for (i, size) in [0usize, 1, 4095, 4096, 4097, 70_000, 1 << 20, 3 << 20].iter().enumerate() {
        let p = d.join(format!("f{i}"));
        fs::write(&p, noise(i as u64 + 100, *size)).unwrap();
        m += &format!("file /data/f{i} {} 644 0 0\n", p.display());
        hashes += &sha256_line(&p, &format!("data/f{i}"));
    }
    let a = d.join("a");
    fs::write(&a, noise(42, 12_345)).unwrap();
    m += &format!("file /data/a {} 644 0 0 /data/a-link\nslink /data/sym a 777 0 0\n", a.display());
    hashes += &sha256_line(&a, "data/a");
    hashes += &sha256_line(&a, "data/a-link");
    // The early (microcode) segment's file is checked too.
    let ucode = d.join("ucode");
    fs::write(&ucode, noise(9, 10_000)).unwrap();
    hashes += &sha256_line(&ucode, "kernel/x86/microcode/GenuineIntel.bin");
    let early = d.join("early.manifest");
    fs::write(
        &early,
        format!(
            "dir /kernel 755 0 0\ndir /kernel/x86 755 0 0\ndir /kernel/x86/microcode 755 0 0\n\
             file /kernel/x86/microcode/GenuineIntel.bin {} 644 0 0\n",
            ucode.display()
        ),
    )
    .unwrap();
    fs::write(d.join("hashes"), &hashes).unwrap();
    m += &format!("file /hashes {} 644 0 0\n", d.join("hashes").display());
    let manifest = d.join("main.manifest");
    fs::write(&manifest, m).unwrap();
    Some(Fixture { manifest, early, dir: d, _t: t })
}

/// Build an image: the early segment (always uncompressed), then the main one with `args`.
fn build(f: &Fixture, name: &str, args: &[&str]) -> PathBuf {
    let img = f.dir.join(name);
    ok(leanrd().arg("cpio").arg(&f.early).arg("-o").arg(&img));
    ok(leanrd().arg("cpio").arg(&f.manifest).arg("-o").arg(&img).arg("--append").args(args));
    ok(leanrd().arg("check").arg(&img));
    img
}

fn boot_all(cases: Vec<(&'static str, Vec<&'static str>)>) {
    let Some(kernel) = kernel() else { return };
    let Some(f) = fixture() else { return };
    let images: Vec<(String, PathBuf)> =
        cases.iter().map(|(name, args)| (name.to_string(), build(&f, &format!("{name}.img"), args))).collect();
    // Two VMs at a time: one per core.
    let results: Vec<(String, String)> = std::thread::scope(|s| {
        let mut out = Vec::new();
        for pair in images.chunks(2) {
            let hs: Vec<_> = pair
                .iter()
                .map(|(name, img)| {
                    let k = kernel.clone();
                    s.spawn(move || (name.clone(), qemu_boot(&k, img, "quiet", &[], 180)))
                })
                .collect();
            out.extend(hs.into_iter().map(|h| h.join().unwrap()));
        }
        out
    });
    let failed: Vec<_> = results.iter().filter(|(_, log)| !log.contains("LEANRD-BOOT-OK")).collect();
    for (name, log) in &failed {
        eprintln!("==== {name} ====\n{}", &log[log.len().saturating_sub(3000)..]);
    }
    assert!(failed.is_empty(), "failed boots: {:?}", failed.iter().map(|f| &f.0).collect::<Vec<_>>());
}

#[test]
fn kernel_unpacks_aligned_and_compressed_images() {
    boot_all(vec![
        ("aligned", vec!["--data-align", "4096"]),
        ("checksum", vec!["--checksum"]),
        ("zstd", vec!["--compress", "zstd"]),
        ("xz", vec!["--compress", "xz"]),
        ("lz4", vec!["--compress", "lz4"]),
        ("gzip", vec!["--compress", "gzip"]),
        ("bzip2", vec!["--compress", "bzip2"]),
        ("lzma", vec!["--compress", "lzma"]),
        ("lzo", vec!["--compress", "lzo"]),
    ]);
}
