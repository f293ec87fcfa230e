//! The kernel itself unpacks what leanrd writes: QEMU (TCG) boots a Debian kernel with
//! leanrd images whose static busybox /init checks file hashes and a hard link.
//! Each image is a test of its own (`-- unpacks_lzma`).
//! Needs qemu-system-x86_64, a /boot/vmlinuz-* and busybox-static; skipped without them.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

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
        return skip("/bin/busybox (busybox-static) missing");
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

/// The images the kernel must unpack: the early segment, then the main one made with these
/// arguments. Each is a test of its own (`unpacks_NAME`).
const IMAGES: &[(&str, &[&str])] = &[
    ("aligned", &["--data-align", "4096"]),
    ("checksum", &["--checksum"]),
    ("zstd", &["--compress", "zstd"]),
    ("xz", &["--compress", "xz"]),
    ("lz4", &["--compress", "lz4"]),
    ("gzip", &["--compress", "gzip"]),
    ("bzip2", &["--compress", "bzip2"]),
    ("lzma", &["--compress", "lzma"]),
    ("lzo", &["--compress", "lzo"]),
];

fn kernel_unpacks(name: &str, args: &[&str]) -> Result<(), String> {
    static F: std::sync::OnceLock<Result<Option<Fixture>, String>> = std::sync::OnceLock::new();
    let Some(kernel) = kernel() else { return Ok(()) };
    let Some(f) = once(&F, fixture) else { return Ok(()) };
    let img = build(f, &format!("{name}.img"), args);
    let log = qemu_boot(&kernel, &img, "quiet", &[], 180);
    if log.contains("LEANRD-BOOT-OK") {
        Ok(())
    } else {
        Err(format!("{name}: no LEANRD-BOOT-OK\n{}", &log[log.floor_char_boundary(log.len().saturating_sub(3000))..]))
    }
}

fn main() -> std::process::ExitCode {
    let mut trials: Vec<Trial> =
        IMAGES.iter().map(|(name, a)| test(format!("unpacks_{name}"), move || kernel_unpacks(name, a))).collect();
    trials.push(test("kernel_agrees_with_check_and_extract", || {
        kernel_agrees_with_check_and_extract();
        Ok(())
    }));
    run_tests(trials, cores())
}

/// The /init of the reader's truth boots: lists every path under /c* as `KT path kind detail`.
const TRUTH_INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
echo KT-BEGIN
for p in $(find /c1 /c2 /c3 /c4 /c5 /c6 2>/dev/null | sort); do
  if [ -L "$p" ]; then echo "KT $p link $(readlink "$p")"
  elif [ -d "$p" ]; then echo "KT $p dir"
  else echo "KT $p file $(wc -c < "$p")"; fi
done
echo KT-END
poweroff -f
"#;

/// One hand-made newc entry (070702 with `check` when given), padded.
fn entry(name: &str, mode: u32, data: &[u8], ino: u32, check: Option<u32>) -> Vec<u8> {
    let h = leanrd_newc::Header {
        ino,
        mode,
        nlink: 1,
        filesize: data.len() as u32,
        namesize: name.len() as u32 + 1,
        crc: check.is_some(),
        check: check.unwrap_or(0),
        ..Default::default()
    };
    let mut v = leanrd_newc::encode_head(&h, name.as_bytes());
    v.extend_from_slice(data);
    v.resize(v.len().div_ceil(4) * 4, 0);
    v
}

/// What the booted kernel unpacked, from the KT lines of its console.
fn kernel_tree(log: &str) -> Vec<String> {
    let body = log.split("KT-BEGIN").nth(1).and_then(|b| b.split("KT-END").next()).unwrap_or("");
    body.lines().filter_map(|l| l.trim_end_matches('\r').strip_prefix("KT ")).map(str::to_string).collect()
}

/// The same lines for a tree `leanrd extract` made.
fn extracted_tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with('c'))
        .collect();
    while let Some(p) = stack.pop() {
        let name = format!("/{}", p.strip_prefix(root).unwrap().display());
        let md = fs::symlink_metadata(&p).unwrap();
        if md.is_symlink() {
            out.push(format!("{name} link {}", fs::read_link(&p).unwrap().display()));
        } else if md.is_dir() {
            out.push(format!("{name} dir"));
            stack.extend(fs::read_dir(&p).unwrap().flatten().map(|e| e.path()));
        } else {
            out.push(format!("{name} file {}", md.len()));
        }
    }
    out.sort();
    out
}

/// `check`'s verdicts and `extract`'s trees where they depend on the kernel's behaviour,
/// against what the Debian kernel unpacks: a symlink whose size counts its NUL, a segment
/// without a trailer before a compressed one, a crc archive with a symlink (checksum 0), a
/// file whose parents are not in the archive, a 4096-byte symlink target, a bad data checksum.
fn kernel_agrees_with_check_and_extract() {
    use leanrd_newc::{S_IFDIR, S_IFLNK, S_IFREG};
    let Some(kernel) = kernel() else { return };
    if !Path::new("/bin/busybox").exists() || !have("cpio") {
        panic!("busybox-static and GNU cpio are needed (.ci/run installs them)");
    }
    let t = TempDir::new("truth");
    fs::write(t.join("init"), TRUTH_INIT).unwrap();
    let m = t.join("base.manifest");
    fs::write(
        &m,
        format!(
            "dir /bin 755 0 0\nfile /bin/busybox /bin/busybox 755 0 0\nfile /init {} 755 0 0\ndir /dev 755 0 0\n\
             nod /dev/console 600 0 0 c 5 1\n",
            t.join("init").display()
        ),
    )
    .unwrap();
    let base = ok(leanrd().arg("cpio").arg(&m));
    let pad4 = |mut v: Vec<u8>| {
        v.resize(v.len().div_ceil(4) * 4, 0);
        v
    };
    // Good: everything unpacks.
    let trailerless = [
        entry("c1", S_IFDIR | 0o755, b"", 101, None),
        entry("c1/sl", S_IFLNK | 0o777, b"busybox\0", 102, None),
        entry("c1/f", S_IFREG | 0o644, b"one", 103, None),
    ]
    .concat();
    let zm = t.join("z.manifest");
    fs::write(&zm, format!("dir /c4 755 0 0\nfile /c4/after {} 644 0 0\n", zm.display())).unwrap();
    let z = pad4(ok(leanrd().arg("cpio").arg(&zm).args(["-c", "zstd"])));
    let src = t.join("c5src");
    fs::create_dir_all(src.join("c5")).unwrap();
    fs::write(src.join("c5/a"), b"first").unwrap();
    std::os::unix::fs::symlink("a", src.join("c5/l")).unwrap();
    fs::write(src.join("c5/z"), b"last").unwrap();
    let crc = run_stdin(
        Command::new("cpio").args(["-o", "-H", "crc", "--quiet"]).current_dir(&src),
        b"c5\nc5/a\nc5/l\nc5/z\n",
    );
    let good = [base.clone(), trailerless, z, crc.stdout].concat();
    // Bad: the kernel drops or stops.
    let sum = |d: &[u8]| leanrd_newc::checksum_update(0, d);
    let trailer = entry("TRAILER!!!", 0, b"", 0, None);
    let bad = [
        base,
        entry("c2", S_IFDIR | 0o755, b"", 201, None),
        entry("c2/x/y/z", S_IFREG | 0o644, b"dropped", 202, None),
        entry("c3", S_IFDIR | 0o755, b"", 203, None),
        entry("c3/long", S_IFLNK | 0o777, &[b'a'; 4096], 204, None),
        entry("c3/ok", S_IFREG | 0o644, b"kept", 205, None),
        trailer.clone(),
        entry("c6", S_IFDIR | 0o755, b"", 301, Some(0)),
        entry("c6/good", S_IFREG | 0o644, b"fine", 302, Some(sum(b"fine"))),
        entry("c6/bad", S_IFREG | 0o644, b"data", 303, Some(sum(b"data") ^ 1)),
        entry("c6/after", S_IFREG | 0o644, b"never", 304, Some(sum(b"never"))),
        trailer,
    ]
    .concat();
    let images: Vec<(&str, PathBuf)> = [("good", good), ("bad", bad)]
        .into_iter()
        .map(|(n, b)| {
            let p = t.join(format!("{n}.img"));
            fs::write(&p, b).unwrap();
            (n, p)
        })
        .collect();
    // loglevel=0: no kernel message lands inside a KT line (only emergencies reach the console,
    // and the one the bad checksum causes comes while unpacking, before /init).
    let logs: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> =
            images.iter().map(|(_, p)| s.spawn(|| qemu_boot(&kernel, p, "loglevel=0", &[], 180))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for ((name, img), log) in images.iter().zip(&logs) {
        let truth = kernel_tree(log);
        assert!(log.contains("KT-END"), "{name}: the VM did not report:\n{}", &log[log.len().saturating_sub(3000)..]);
        let x = t.join(format!("{name}.x"));
        let o = leanrd().args(["extract", "--parts", "2-"]).arg(img).arg("-C").arg(&x).output().unwrap();
        // Where the kernel drops names whose parents are missing, extract makes the parents
        // and warns: those names are the only difference allowed.
        let stderr = String::from_utf8_lossy(&o.stderr);
        let warned: Vec<String> = stderr
            .lines()
            .filter_map(|l| l.strip_prefix("leanrd: warning: "))
            .filter_map(|l| l.split_once(": not in the archive before the names under it"))
            .map(|(p, _)| format!("/{p}"))
            .collect();
        let ours: Vec<String> = extracted_tree(&x)
            .into_iter()
            .filter(|l| !warned.iter().any(|w| l.starts_with(&format!("{w} ")) || l.starts_with(&format!("{w}/"))))
            .collect();
        assert_same_tree(&ours, &truth, &format!("{name}: leanrd extract vs the kernel ({stderr})"));
        let c = leanrd().arg("check").arg(img).output().unwrap();
        let verdict = String::from_utf8_lossy(&c.stdout).into_owned();
        eprintln!("{name}: the kernel unpacked {} paths under /c*; check says:\n{verdict}", truth.len());
        if *name == "good" {
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            assert!(c.status.success(), "{verdict}");
            for want in ["/c1/sl link busybox", "/c4/after file", "/c5/l link a", "/c5/z file 4"] {
                assert!(truth.iter().any(|l| l.starts_with(want)), "{name}: the kernel has no {want}: {truth:?}");
            }
        } else {
            assert_eq!(o.status.code(), Some(1), "extract must fail where the kernel drops entries");
            assert_eq!(warned, ["/c2/x", "/c2/x/y"], "{stderr}");
            assert!(stderr.contains("ENAMETOOLONG"), "{stderr}");
            assert_eq!(c.status.code(), Some(1), "{verdict}");
            for said in ["c2/x/y/z", "ENAMETOOLONG", "checksum"] {
                assert!(verdict.contains(said), "check does not report {said}:\n{verdict}");
            }
            // The kernel writes the file whose checksum is wrong, then stops: nothing after it.
            for gone in ["/c2/x", "/c3/long", "/c6/after"] {
                assert!(!truth.iter().any(|l| l.starts_with(gone)), "{name}: the kernel made {gone}? {truth:?}");
            }
            for kept in ["/c6/good", "/c6/bad", "/c3/ok"] {
                assert!(truth.iter().any(|l| l.starts_with(kept)), "{name}: the kernel has no {kept}: {truth:?}");
            }
        }
    }
}
