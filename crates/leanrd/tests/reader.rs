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
    // -O: stops at the bad checksum; with --force goes on, and still fails.
    let o = leanrd().args(["extract", "-O"]).arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("last file"));
    let o = leanrd().args(["extract", "-O", "--force"]).arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "a bad checksum fails the run, --force or not");
    assert!(String::from_utf8_lossy(&o.stdout).ends_with("last file"));
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
    assert!(String::from_utf8_lossy(&o.stdout).lines().any(|l| l == "ok"));
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

/// A three-segment image as distributions lay them out: early microcode (uncompressed),
/// firmware (uncompressed), the main archive (zstd).
fn three_segments(t: &TempDir) -> std::path::PathBuf {
    let d = t.join("src");
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("ucode"), b"microcode").unwrap();
    fs::write(d.join("conf"), b"options x=1\n").unwrap();
    fs::write(d.join("ext4"), b"ext4 module").unwrap();
    fs::write(d.join("big"), vec![7u8; 1 << 20]).unwrap();
    let m = |name: &str, text: String| {
        let p = d.join(name);
        fs::write(&p, text).unwrap();
        p
    };
    let early = m(
        "early",
        format!(
            "dir /kernel 755 0 0\ndir /kernel/x86 755 0 0\ndir /kernel/x86/microcode 755 0 0\n\
             file /kernel/x86/microcode/GenuineIntel.bin {} 644 0 0\n",
            d.join("ucode").display()
        ),
    );
    let fw = m(
        "fw",
        format!(
            "dir /etc 750 0 0\ndir /etc/modprobe.d 755 0 0\nfile /etc/modprobe.d/x.conf {} 644 0 0\n",
            d.join("conf").display()
        ),
    );
    let main = m(
        "main",
        format!(
            "dir /usr 755 0 0\ndir /usr/lib 755 0 0\ndir /usr/lib/modules 755 0 0\ndir /usr/lib/modules/6.1 755 0 0\n\
             dir /usr/lib/modules/6.1/kernel 700 1234 1234\ndir /usr/lib/modules/6.1/kernel/fs 755 0 0\n\
             dir /usr/lib/modules/6.1/kernel/fs/ext4 755 0 0\n\
             file /usr/lib/modules/6.1/kernel/fs/ext4/ext4.ko {} 644 1234 1234\n\
             dir /usr/lib/modules/6.1/kernel/drivers 755 0 0\nfile /usr/lib/modules/6.1/kernel/drivers/big.ko {} 644 0 0\n\
             dir /bin 755 0 0\nslink /bin/sh busybox 777 0 0\n",
            d.join("ext4").display(),
            d.join("big").display()
        ),
    );
    let img = t.join("three.img");
    ok(leanrd().arg("cpio").arg(&early).arg("-o").arg(&img));
    ok(leanrd().arg("cpio").arg(&fw).arg("-o").arg(&img).arg("--append"));
    ok(leanrd().arg("cpio").arg(&main).arg("-o").arg(&img).args(["--append", "-c", "zstd"]));
    img
}

fn lines(out: Vec<u8>) -> Vec<String> {
    String::from_utf8(out).unwrap().lines().map(str::to_string).collect()
}

#[test]
fn ls_selects_by_segment_and_pattern_as_3cpio_does() {
    let t = TempDir::new("select");
    let img = three_segments(&t);
    assert_eq!(lines(ok(leanrd().args(["ls", "--count"]).arg(&img))), ["3"]);
    let fs_only = lines(ok(leanrd().arg("ls").arg(&img).arg("usr/lib/modules/*/kernel/fs/*")));
    assert_eq!(fs_only, ["usr/lib/modules/6.1/kernel/fs/ext4", "usr/lib/modules/6.1/kernel/fs/ext4/ext4.ko"]);
    let two = lines(ok(leanrd().args(["ls", "--parts", "2"]).arg(&img)));
    assert_eq!(two, ["etc", "etc/modprobe.d", "etc/modprobe.d/x.conf"]);
    let later = lines(ok(leanrd().args(["ls", "-P", "2-"]).arg(&img)));
    assert!(later.contains(&"bin/sh".to_string()) && !later.iter().any(|l| l.starts_with("kernel")), "{later:?}");
    // --parts 1 stops after the first segment: junk after it is never read.
    let cut = t.join("cut.img");
    let first_len = {
        let v: serde_json::Value = serde_json::from_slice(&ok(leanrd().args(["inspect", "--json"]).arg(&img))).unwrap();
        v["segments"][1]["offset"].as_u64().unwrap()
    };
    let mut bytes = fs::read(&img).unwrap()[..first_len as usize].to_vec();
    bytes.extend_from_slice(b"\x01junk that is no segment");
    fs::write(&cut, &bytes).unwrap();
    assert_eq!(lines(ok(leanrd().args(["ls", "--parts", "1"]).arg(&cut).arg("kernel/x86/microcode/*"))).len(), 1);
    assert_eq!(leanrd().arg("ls").arg(&cut).output().unwrap().status.code(), Some(1));
    // Long format, human sizes.
    let long = String::from_utf8(ok(leanrd().args(["ls", "-lh"]).arg(&img).arg("*big.ko"))).unwrap();
    assert!(long.starts_with("-rw-r--r--") && long.contains(" 1.0M ") && long.trim_end().ends_with("big.ko"), "{long}");
    let long = String::from_utf8(ok(leanrd().args(["ls", "-l"]).arg(&img).arg("bin/sh"))).unwrap();
    assert!(long.contains("bin/sh -> busybox") && long.starts_with('l'), "{long}");
    // Several images: a heading each; --json names the image.
    let both = String::from_utf8(ok(leanrd().args(["ls", "-P", "1"]).arg(&img).arg("-F").arg(&cut))).unwrap();
    assert!(both.starts_with(&format!("{}:\n", img.display())) && both.contains(&format!("\n\n{}:\n", cut.display())));
    let v = json_lines(&ok(leanrd().args(["ls", "--json"]).arg(&img).arg("bin/sh")));
    assert_eq!((v.len(), v[0]["image"].as_str()), (1, img.to_str()));
    // A pattern that matches nothing is said (exit 1); one that names a file gets a hint.
    let o = leanrd().arg("ls").arg(&img).arg("no/such/*").arg(&cut).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("no/such/*: no name in the image matches") && err.contains("-F FILE"), "{err}");
    // Bad input is said, not panicked on.
    let o = leanrd().args(["ls", "--parts", "0"]).arg(&img).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("counted from 1"), "{o:?}");
}

#[test]
fn extract_selects_splits_streams_and_keeps_what_was_there() {
    let t = TempDir::new("xsel");
    let img = three_segments(&t);
    // A pattern: only matching names; their parents made as the archive has them, quietly.
    let x = t.join("x");
    let o = leanrd().arg("extract").arg(&img).arg("-C").arg(&x).arg("*/kernel/fs/ext4/*").output().unwrap();
    assert!(o.status.success() && o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
    let ko = x.join("usr/lib/modules/6.1/kernel/fs/ext4/ext4.ko");
    assert_eq!(fs::read(&ko).unwrap(), b"ext4 module");
    assert!(!x.join("bin").exists() && !x.join("etc").exists() && !x.join("kernel").exists());
    use std::os::unix::fs::MetadataExt;
    let kdir = fs::metadata(x.join("usr/lib/modules/6.1/kernel")).unwrap();
    assert_eq!(kdir.mode() & 0o7777, 0o700, "a parent made for a selected name keeps its archived mode");
    if is_root() {
        assert_eq!((kdir.uid(), fs::metadata(&ko).unwrap().uid()), (1234, 1234));
        // --no-preserve-owner: files stay the extracting user's.
        let y = t.join("y");
        ok(leanrd().args(["extract", "--no-preserve-owner"]).arg(&img).arg("-C").arg(&y));
        assert_eq!(fs::metadata(y.join("usr/lib/modules/6.1/kernel/fs/ext4/ext4.ko")).unwrap().uid(), 0);
    }
    // --subdir: one directory per segment.
    let s = t.join("s");
    ok(leanrd().args(["extract", "--subdir", "part"]).arg(&img).arg("-C").arg(&s));
    assert_eq!(fs::read(s.join("part1/kernel/x86/microcode/GenuineIntel.bin")).unwrap(), b"microcode");
    assert!(s.join("part2/etc/modprobe.d/x.conf").is_file() && s.join("part3/bin").is_dir());
    assert!(!s.join("part1/etc").exists() && !s.join("part3/kernel").exists());
    // -O: the data of the selected files on stdout.
    let o = ok(leanrd().args(["extract", "-O"]).arg(&img).arg("etc/modprobe.d/*"));
    assert_eq!(o, b"options x=1\n");
    // A file already there is left, and said; --force replaces it.
    let f = t.join("f");
    fs::create_dir_all(f.join("etc/modprobe.d")).unwrap();
    fs::write(f.join("etc/modprobe.d/x.conf"), b"mine").unwrap();
    let o = leanrd().arg("extract").arg(&img).arg("-C").arg(&f).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--force replaces it"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(fs::read(f.join("etc/modprobe.d/x.conf")).unwrap(), b"mine");
    assert!(f.join("bin/sh").is_symlink(), "the rest is extracted");
    ok(leanrd().args(["extract", "--force"]).arg(&img).arg("-C").arg(&f));
    assert_eq!(fs::read(f.join("etc/modprobe.d/x.conf")).unwrap(), b"options x=1\n");
    // Several images into one place, as the bootloader concatenates them: the second one's
    // entries replace the first one's, as in the kernel.
    let m2 = t.join("m2");
    fs::write(
        &m2,
        format!(
            "dir /etc 755 0 0\ndir /etc/modprobe.d 755 0 0\nfile /etc/modprobe.d/x.conf {} 600 0 0\n",
            m2.display()
        ),
    )
    .unwrap();
    let second = t.join("second.img");
    ok(leanrd().arg("cpio").arg(&m2).arg("-o").arg(&second));
    let c = t.join("c");
    ok(leanrd().arg("extract").arg(&img).arg("-F").arg(&second).arg("-C").arg(&c));
    assert_eq!(fs::read(c.join("etc/modprobe.d/x.conf")).unwrap(), fs::read(&m2).unwrap());
}

/// Names, types, modes, sizes and targets of `leanrd ls --json` against bsdtar's and GNU
/// cpio's listings, and `leanrd extract` trees against GNU cpio's, on archives GNU cpio (newc
/// and crc) and bsdcpio wrote of one tree.
#[test]
fn listings_and_trees_agree_with_gnu_cpio_and_bsdtar() {
    for tool in ["cpio", "bsdcpio", "bsdtar"] {
        assert!(have(tool), "{tool} is needed (.ci/run installs it)");
    }
    let t = TempDir::new("peers");
    let src = t.join("src");
    fs::create_dir_all(src.join("usr/bin")).unwrap();
    fs::create_dir_all(src.join("etc/dir with space")).unwrap();
    fs::write(src.join("usr/bin/prog"), noise(1, 70_000)).unwrap();
    fs::write(src.join("etc/empty"), b"").unwrap();
    fs::write(src.join("etc/dir with space/f"), b"spaced").unwrap();
    fs::hard_link(src.join("usr/bin/prog"), src.join("usr/bin/prog-link")).unwrap();
    symlink("../usr/bin/prog", src.join("etc/rel")).unwrap();
    symlink("/nonexistent/abs", src.join("etc/abs")).unwrap();
    sh(&format!("chmod 4755 {0}/usr/bin/prog; chmod 700 '{0}/etc/dir with space'; mkfifo {0}/etc/fifo", src.display()));
    let list = run_stdin(Command::new("sh").args(["-c", "find . | LC_ALL=C sort"]).current_dir(&src), b"").stdout;
    let archives = [
        ("gnu-newc", "cpio -o -H newc --quiet"),
        ("gnu-crc", "cpio -o -H crc --quiet"),
        ("bsdcpio", "bsdcpio -o --format newc --quiet"),
    ];
    for (name, cmd) in archives {
        let o = run_stdin(Command::new("sh").args(["-c", cmd]).current_dir(&src), &list);
        assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        let a = t.join(format!("{name}.cpio"));
        fs::write(&a, &o.stdout).unwrap();
        ok(leanrd().arg("check").arg(&a));
        // Names in order, as GNU cpio -t and bsdtar -t list them.
        let ours = lines(ok(leanrd().arg("ls").arg(&a)));
        let gnu = lines(ok(Command::new("sh").arg("-c").arg(format!("cpio -t --quiet < {}", a.display()))));
        let bsd = lines(ok(Command::new("bsdtar").arg("-tf").arg(&a)));
        assert_eq!(ours, gnu, "{name}: leanrd ls vs cpio -t");
        assert_eq!(ours, bsd, "{name}: leanrd ls vs bsdtar -t");
        // Mode strings, sizes and link targets against bsdtar -tv.
        let v = json_lines(&ok(leanrd().args(["ls", "--json"]).arg(&a)));
        let long = lines(ok(leanrd().args(["ls", "-l"]).arg(&a)));
        let tv = lines(ok(Command::new("bsdtar").arg("-tvf").arg(&a)));
        assert_eq!((v.len(), long.len()), (tv.len(), tv.len()), "{name}");
        for ((e, l), ll) in v.iter().zip(&tv).zip(&long) {
            let f: Vec<&str> = l.split_whitespace().collect();
            let what = format!("{name}: {l} | {ll}");
            assert_eq!(f[0], ll.split_whitespace().next().unwrap(), "{what}");
            if e["type"] == "symlink" {
                assert!(l.ends_with(&format!(" -> {}", e["target"].as_str().unwrap())), "{what}");
            } else if e["type"] == "file" && !(e["size"] == 0 && e["nlink"].as_u64() > Some(1)) {
                assert_eq!(f[4], e["size"].to_string(), "{what}");
            }
        }
        // extract's tree against GNU cpio's (-d parents, -m mtimes; root keeps owners).
        let (ours, theirs) = (t.join(format!("{name}.leanrd")), t.join(format!("{name}.cpio-i")));
        ok(leanrd().arg("extract").arg(&a).arg("-C").arg(&ours));
        fs::create_dir_all(&theirs).unwrap();
        ok(Command::new("sh").arg("-c").arg(format!("cpio -idm --quiet < {}", a.display())).current_dir(&theirs));
        assert_same_tree(&describe(&ours), &describe(&theirs), &format!("{name}: leanrd extract vs cpio -idm"));
        assert_eq!(owners_and_mtimes(&ours), owners_and_mtimes(&theirs), "{name}: owners and file mtimes");
    }
}

/// Owners of everything and mtimes of what is not a directory or a symlink (GNU cpio -m
/// leaves symlinks' mtimes as made; leanrd, as the kernel, sets them).
fn owners_and_mtimes(root: &std::path::Path) -> Vec<String> {
    let o = ok(Command::new("find").arg(".").args(["-printf", "%p %U:%G %y %T@\\n"]).current_dir(root));
    let mut v: Vec<String> = String::from_utf8(o)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.rsplitn(3, ' ').collect();
            if f[1] == "d" || f[1] == "l" { format!("{} {}", f[2], f[1]) } else { l.to_string() }
        })
        .collect();
    v.sort();
    v
}

/// An initramfs-tools image (mkinitramfs for the installed kernel, an early segment written by
/// GNU cpio in front as initramfs-tools prepends microcode): `leanrd ls` lists what
/// lsinitramfs lists, and `extract --subdir` gives each segment's tree as unmkinitramfs does.
#[test]
fn initramfs_tools_images_read_as_its_own_tools_read_them() {
    let Some(kver) = kver() else { return };
    for tool in ["mkinitramfs", "lsinitramfs", "unmkinitramfs", "cpio"] {
        assert!(have(tool), "{tool} is needed (.ci/run installs initramfs-tools and cpio)");
    }
    let t = TempDir::new("itools");
    let main = t.join("main.img");
    let o = Command::new("mkinitramfs").args(["-c", "zstd", "-o"]).arg(&main).arg(&kver).output().unwrap();
    assert!(o.status.success(), "mkinitramfs: {}", String::from_utf8_lossy(&o.stderr));
    let early = t.join("early");
    fs::create_dir_all(early.join("kernel/x86/microcode")).unwrap();
    fs::write(early.join("kernel/x86/microcode/AuthenticAMD.bin"), noise(3, 30_000)).unwrap();
    let list = b"kernel\nkernel/x86\nkernel/x86/microcode\nkernel/x86/microcode/AuthenticAMD.bin\n";
    let e = run_stdin(Command::new("cpio").args(["-o", "-H", "newc", "--quiet"]).current_dir(&early), list);
    let img = t.join("initrd.img");
    fs::write(&img, [e.stdout, fs::read(&main).unwrap()].concat()).unwrap();
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let ours = sorted(lines(ok(leanrd().arg("ls").arg(&img))));
    let theirs = sorted(lines(ok(Command::new("lsinitramfs").arg(&img))));
    assert_eq!(ours.len(), theirs.len());
    assert!(ours == theirs, "leanrd ls vs lsinitramfs differ");
    assert_eq!(lines(ok(leanrd().args(["ls", "--count"]).arg(&img))), ["2"]);
    let (x, u) = (t.join("x"), t.join("u"));
    ok(leanrd().args(["extract", "--subdir", "s"]).arg(&img).arg("-C").arg(&x));
    ok(Command::new("unmkinitramfs").arg(&img).arg(&u));
    assert_same_tree(&describe(&x.join("s1")), &describe(&u.join("early")), "early segment vs unmkinitramfs");
    assert_same_tree(&describe(&x.join("s2")), &describe(&u.join("main")), "main segment vs unmkinitramfs");
}
