//! The reader agrees with the kernel on images other tools make (issue 16): symlinks whose
//! size counts a NUL, crc archives with symlinks, names that are not UTF-8, missing parents,
//! segments without trailers, stdin, spelling of names, skipped entries, EPIPE, speed.

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::symlink;
use std::process::{Command, Stdio};

use common::*;
use leanrd_newc::{Header, S_IFDIR, S_IFLNK, S_IFREG, TRAILER, encode_head};

fn ent(name: &[u8], mode: u32, data: &[u8], ino: u32) -> Vec<u8> {
    let h = Header {
        ino,
        mode,
        nlink: 1,
        filesize: data.len() as u32,
        namesize: name.len() as u32 + 1,
        ..Header::default()
    };
    let mut v = encode_head(&h, name);
    v.extend_from_slice(data);
    v.resize(v.len().div_ceil(4) * 4, 0);
    v
}

fn trailer() -> Vec<u8> {
    ent(TRAILER, 0, b"", 0)
}

fn json_lines(out: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(out).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn symlinks_whose_size_counts_the_nul_are_read_as_the_kernel_does() {
    let t = TempDir::new("slnul");
    // gen_init_cpio's layout: the target stored with its NUL, counted in the size.
    let img = [
        ent(b"bin", S_IFDIR | 0o755, b"", 1),
        ent(b"bin/sh", S_IFLNK | 0o777, b"busybox\0", 2),
        ent(b"bin/x", S_IFREG | 0o644, b"after", 3),
        trailer(),
    ]
    .concat();
    let p = t.join("a.cpio");
    fs::write(&p, &img).unwrap();
    let v = json_lines(&ok(leanrd().args(["ls", "--json"]).arg(&p)));
    assert_eq!(v[1]["target"], "busybox");
    ok(leanrd().arg("check").arg(&p));
    ok(leanrd().arg("extract").arg(&p).arg("-C").arg(t.join("x")));
    assert_eq!(fs::read_link(t.join("x/bin/sh")).unwrap().to_str(), Some("busybox"));
    assert_eq!(fs::read(t.join("x/bin/x")).unwrap(), b"after");
}

#[test]
fn crc_archives_with_symlinks_pass_and_bad_checksums_stop_extract() {
    if !have("cpio") {
        panic!("GNU cpio is needed (.ci/run installs it)");
    }
    let t = TempDir::new("crc");
    let src = t.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), b"first file").unwrap();
    symlink("a", src.join("l")).unwrap();
    fs::write(src.join("z"), b"last file").unwrap();
    let o = run_stdin(Command::new("cpio").args(["-o", "-H", "crc", "--quiet"]).current_dir(&src), b".\na\nl\nz\n");
    assert!(o.status.success());
    let p = t.join("crc.cpio");
    fs::write(&p, &o.stdout).unwrap();
    ok(leanrd().arg("check").arg(&p));
    // Corrupt a's data: check reports it, extract stops there (exit 1) unless --force.
    let mut bad = o.stdout.clone();
    let at = bad.windows(10).position(|w| w == b"first file").unwrap();
    bad[at] = b'F';
    fs::write(&p, &bad).unwrap();
    assert_eq!(leanrd().arg("check").arg(&p).output().unwrap().status.code(), Some(1));
    let o = leanrd().arg("extract").arg(&p).arg("-C").arg(t.join("x")).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("checksum"), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!t.join("x/z").exists(), "extract went on after a bad checksum");
    let o = leanrd().args(["extract", "--force"]).arg(&p).arg("-C").arg(t.join("y")).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(fs::read(t.join("y/z")).unwrap(), b"last file");
}

#[test]
fn names_that_are_not_utf8_are_kept_whole() {
    let t = TempDir::new("utf8");
    let a = [ent(b"caf\xe9", S_IFREG | 0o644, b"x", 1), ent(b"a\nb", S_IFREG | 0o644, b"y", 2), trailer()].concat();
    let b = [ent(b"caf\xff", S_IFREG | 0o644, b"x", 1), ent(b"a\nb", S_IFREG | 0o644, b"y", 2), trailer()].concat();
    let (pa, pb) = (t.join("a.cpio"), t.join("b.cpio"));
    fs::write(&pa, &a).unwrap();
    fs::write(&pb, &b).unwrap();
    let v = json_lines(&ok(leanrd().args(["ls", "--json"]).arg(&pa)));
    assert_eq!(v[0]["name_hex"], "636166e9");
    assert_eq!(v[1]["name"], "a\nb");
    assert!(v[1].get("name_hex").is_none());
    let plain = String::from_utf8(ok(leanrd().arg("ls").arg(&pa))).unwrap();
    assert_eq!(plain.lines().count(), 2, "{plain}");
    assert!(plain.contains("caf\\351") && plain.contains("a\\nb"), "{plain}");
    let o = leanrd().arg("diff").arg(&pa).arg(&pb).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stdout));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("- segment 0 caf\\351") && out.contains("+ segment 0 caf\\377"), "{out}");
}

#[test]
fn check_reports_what_the_kernel_drops() {
    if !have("cpio") {
        panic!("GNU cpio is needed (.ci/run installs it)");
    }
    let t = TempDir::new("drops");
    let src = t.join("src");
    fs::create_dir_all(src.join("x/y")).unwrap();
    fs::write(src.join("x/y/z"), b"z").unwrap();
    // `find -type f | cpio`: no directories in the archive.
    let o = run_stdin(Command::new("cpio").args(["-o", "-H", "newc", "--quiet"]).current_dir(&src), b"x/y/z\n");
    let p = t.join("files-only.cpio");
    fs::write(&p, &o.stdout).unwrap();
    let o = leanrd().arg("check").arg(&p).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("x/y/z: the kernel cannot create it: its parent x is not in the archive"), "{out}");
    // extract makes the parents, and says so.
    let o = leanrd().arg("extract").arg(&p).arg("-C").arg(t.join("out")).output().unwrap();
    assert!(o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("x: not in the archive"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // A symlink target of 4096 bytes: ENAMETOOLONG in the kernel.
    let long = vec![b'a'; 4096];
    let img = [ent(b"l", S_IFLNK | 0o777, &long, 1), trailer()].concat();
    fs::write(&p, &img).unwrap();
    let o = leanrd().arg("check").arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).contains("ENAMETOOLONG"));
}

#[test]
fn segments_without_trailers_stdin_and_named_formats() {
    let t = TempDir::new("segs");
    let m = t.join("m");
    fs::write(&m, "dir /z 755 0 0\n").unwrap();
    let z = ok(leanrd().arg("cpio").arg(&m).args(["-c", "zstd"]));
    // An uncompressed segment with no trailer, then a compressed one: the kernel unpacks both.
    let img = [ent(b"a", S_IFREG | 0o644, b"x", 1), z.clone()].concat();
    let p = t.join("a.img");
    fs::write(&p, &img).unwrap();
    let out = String::from_utf8(ok(leanrd().arg("check").arg(&p))).unwrap();
    assert!(out.contains("OK (2 segments, 2 entries)"), "{out}");
    // Every reader takes `-`, whatever the compression.
    for cmd in ["ls", "check"] {
        let o = run_stdin(leanrd().args([cmd, "-"]), &img);
        assert!(o.status.success(), "{cmd} -: {}", String::from_utf8_lossy(&o.stderr));
    }
    let o = run_stdin(leanrd().args(["extract", "-", "-C"]).arg(t.join("x")), &img);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(t.join("x/z").is_dir() && t.join("x/a").is_file());
    // An old binary cpio archive inside a compressed stream is named.
    if have("cpio") && have("zstd") {
        let o = run_stdin(
            Command::new("sh").args(["-c", "cpio -o -H bin --quiet | zstd -q"]).current_dir(t.path()),
            b"m\n",
        );
        fs::write(&p, &o.stdout).unwrap();
        let o = leanrd().arg("ls").arg(&p).output().unwrap();
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("old binary cpio"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn diff_compares_unpacked_paths() {
    if !have("cpio") || !have("bsdcpio") {
        panic!("GNU cpio and bsdcpio are needed (.ci/run installs them)");
    }
    let t = TempDir::new("spell");
    let src = t.join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("d/f"), b"f").unwrap();
    // GNU cpio strips the leading ./ from the names it is given; bsdcpio keeps it.
    let list = b"./d\n./d/f\n";
    let gnu = run_stdin(Command::new("cpio").args(["-o", "-H", "newc", "--quiet"]).current_dir(&src), list);
    let plain = run_stdin(Command::new("bsdcpio").args(["-o", "--format", "newc", "--quiet"]).current_dir(&src), list);
    let (a, b) = (t.join("a"), t.join("b"));
    fs::write(&a, &gnu.stdout).unwrap();
    fs::write(&b, &plain.stdout).unwrap();
    let out = String::from_utf8(ok(leanrd().arg("diff").arg(&a).arg(&b))).unwrap();
    assert!(out.contains("2 entries are the same but spelled differently"), "{out}");
}

#[test]
fn skipped_entries_fail_and_pipes_close_quietly() {
    let t = TempDir::new("skip");
    let mut img =
        encode_head(&Header { mode: S_IFREG | 0o644, nlink: 1, namesize: 5000, ..Header::default() }, &[b'x'; 4999]);
    img.extend(ent(b"ok", S_IFREG | 0o644, b"", 2));
    img.extend(trailer());
    let p = t.join("a.cpio");
    fs::write(&p, &img).unwrap();
    let o = leanrd().arg("ls").arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("namesize 5000"));
    assert!(String::from_utf8_lossy(&o.stdout).contains(" ok"));
    // `leanrd ls BIG | head -1`: exit 0, no message.
    let m = t.join("m");
    let mut text = String::from("dir /d 755 0 0\n");
    for i in 0..5000 {
        text.push_str(&format!("dir /d/entry{i} 755 0 0\n"));
    }
    fs::write(&m, text).unwrap();
    ok(leanrd().arg("cpio").arg(&m).arg("-o").arg(&p));
    let mut child = leanrd().arg("ls").arg(&p).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut first = [0u8; 10];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
    // `leanrd inspect` too (the pipe closed before it prints a word): no panic, status 0.
    let mut child = leanrd().arg("inspect").arg(&p).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "inspect: {}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stderr.is_empty(), "inspect | head: {}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn listing_an_uncompressed_image_seeks_past_file_data() {
    if !have("strace") {
        panic!("strace is needed (.ci/run installs it)");
    }
    let t = TempDir::new("seek");
    let src = t.join("src");
    fs::create_dir_all(&src).unwrap();
    let mut f = fs::File::create(src.join("big")).unwrap();
    let chunk = noise(7, 1 << 20);
    for _ in 0..64 {
        f.write_all(&chunk).unwrap();
    }
    drop(f);
    fs::write(src.join("small"), b"s").unwrap();
    let p = t.join("a.cpio");
    ok(leanrd().args(["cpio", "--root"]).arg(&src).arg("-o").arg(&p));
    for cmd in ["ls", "check"] {
        let o = Command::new("strace")
            .args(["-f", "-c", "-e", "trace=read", "-o"])
            .arg(t.join("trace"))
            .arg(env!("CARGO_BIN_EXE_leanrd"))
            .arg(cmd)
            .arg(&p)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let trace = fs::read_to_string(t.join("trace")).unwrap();
        let reads: u64 = trace
            .lines()
            .find(|l| l.trim_end().ends_with(" read"))
            .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
            .unwrap_or(0);
        // A 64 MiB entry read through would take 64 reads of 1 MiB; a seek takes none.
        assert!(reads < 20, "{cmd}: {reads} reads\n{trace}");
    }
}
