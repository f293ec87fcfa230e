//! `leanrd inspect` and `leanrd diff` on images built here (FIEMAP numbers on loop XFS).

mod common;

use std::fs;
use std::path::Path;

use common::*;

fn tree(root: &Path) {
    fs::create_dir_all(root.join("lib/modules/k/kernel")).unwrap();
    fs::create_dir_all(root.join("lib/firmware")).unwrap();
    fs::create_dir_all(root.join("bin")).unwrap();
    fs::write(root.join("lib/modules/k/kernel/a.ko"), noise(1, 50_000)).unwrap();
    fs::write(root.join("lib/firmware/fw.bin"), noise(2, 9_000)).unwrap();
    fs::write(root.join("big"), noise(3, 8 << 20)).unwrap();
    fs::write(root.join("etc.conf"), b"x=1\n").unwrap();
    if Path::new("/bin/busybox").exists() {
        fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    }
}

fn inspect(img: &Path) -> serde_json::Value {
    serde_json::from_slice(&ok(leanrd().args(["inspect", "--json"]).arg(img))).unwrap()
}

#[test]
fn inspect_reports_segments_kinds_alignment_and_sharing() {
    let Some(m) = LoopFs::new("xfs", "512M") else { return };
    let dir = m.path();
    let src = dir.join("src");
    tree(&src);
    let img = dir.join("img");
    // An uncompressed aligned segment, then a zstd one.
    ok(leanrd().args(["cpio", "--data-align", "4096", "--root"]).arg(&src).arg("-o").arg(&img));
    ok(leanrd().args(["cpio", "--compress", "zstd", "--append", "--root"]).arg(&src).arg("-o").arg(&img));
    let _ = std::process::Command::new("sync").status();
    let v = inspect(&img);
    let segs = v["segments"].as_array().unwrap();
    assert_eq!(segs.len(), 2);
    assert_eq!(segs[0]["compression"], "none");
    assert_eq!(segs[1]["compression"], "zstd");
    assert_eq!(segs[0]["entries"], segs[1]["entries"]);
    // The aligned segment is the larger: name padding.
    assert!(segs[0]["uncompressed"].as_u64() > segs[1]["uncompressed"].as_u64());
    assert_eq!(segs[0]["offset"], 0);
    assert_eq!(v["size"].as_u64().unwrap(), segs[1]["offset"].as_u64().unwrap() + segs[1]["length"].as_u64().unwrap());
    assert_eq!(v["kinds"]["modules"]["files"], 2);
    assert_eq!(v["kinds"]["firmware"]["files"], 2);
    if Path::new("/bin/busybox").exists() {
        assert_eq!(v["kinds"]["binaries"]["files"], 2);
    }
    assert_eq!(v["largest"][0]["name"], "big");
    assert_eq!(v["aligned_percent"], 100.0);
    let f = &v["fiemap"];
    let (total, shared, excl) =
        (f["total"].as_u64().unwrap(), f["shared"].as_u64().unwrap(), f["exclusive"].as_u64().unwrap());
    assert_eq!(total, shared + excl);
    // The uncompressed copy of `big` and the module are shared with the sources.
    assert!(shared >= 8 << 20, "shared {shared}");
    assert!(excl < total, "{f}");
    // Text output names the same things.
    let text = String::from_utf8(ok(leanrd().arg("inspect").arg(&img))).unwrap();
    assert!(text.contains("2 segment(s)") && text.contains("shared") && text.contains("(100.0 %)"), "{text}");
}

#[test]
fn diff_reports_changes_ignoring_order() {
    let t = TempDir::new("diff");
    let src = t.join("src");
    tree(&src);
    let a = t.join("a");
    let b = t.join("b");
    ok(leanrd().args(["cpio", "--root"]).arg(&src).arg("-o").arg(&a));
    // Same entries in another order (a manifest listing them reversed) and compressed.
    let manifest = String::from_utf8(ok(leanrd().args(["cpio", "--print-manifest", "--root"]).arg(&src))).unwrap();
    let reversed: String = manifest.lines().rev().map(|l| format!("{l}\n")).collect();
    let m = t.join("m");
    fs::write(&m, reversed).unwrap();
    ok(leanrd().arg("cpio").arg(&m).arg("-o").arg(&b).args(["--compress", "gzip"]));
    let o = leanrd().arg("diff").arg(&a).arg(&b).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stdout));
    // Change one file's content, one's mode, add and remove one.
    fs::write(src.join("etc.conf"), b"x=2\n").unwrap();
    let p: fs::Permissions = std::os::unix::fs::PermissionsExt::from_mode(0o600);
    fs::set_permissions(src.join("big"), p).unwrap();
    fs::write(src.join("new"), b"new").unwrap();
    fs::remove_file(src.join("lib/firmware/fw.bin")).unwrap();
    ok(leanrd().args(["cpio", "--root"]).arg(&src).arg("-o").arg(&b));
    let o = leanrd().arg("diff").arg(&a).arg(&b).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1));
    assert!(out.contains("~ segment 0 etc.conf: content"), "{out}");
    assert!(out.contains("~ segment 0 big: mode 100644 -> 100600"), "{out}");
    assert!(out.contains("+ segment 0 new"), "{out}");
    assert!(out.contains("- segment 0 lib/firmware/fw.bin"), "{out}");
    assert!(out.contains("4 difference(s)"), "{out}");
}
