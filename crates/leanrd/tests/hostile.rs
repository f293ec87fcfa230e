//! Hostile archives: `extract` never touches anything outside its target directory, run as
//! root and as an unprivileged user; the writer and `check` refuse names the kernel cannot
//! unpack as written.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::*;
use leanrd_newc::{Header, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFREG, TRAILER, encode_head};

/// One newc entry.
fn ent(name: &[u8], mode: u32, data: &[u8], nlink: u32, ino: u32) -> Vec<u8> {
    let h = Header {
        ino,
        mode,
        nlink,
        filesize: data.len() as u32,
        namesize: name.len() as u32 + 1,
        rdev_major: if mode & 0o170000 == S_IFCHR { 1 } else { 0 },
        rdev_minor: if mode & 0o170000 == S_IFCHR { 3 } else { 0 },
        ..Header::default()
    };
    let mut v = encode_head(&h, name);
    v.extend_from_slice(data);
    v.resize(v.len().div_ceil(4) * 4, 0);
    v
}

fn archive(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut v: Vec<u8> = entries.concat();
    v.extend(ent(TRAILER, 0, b"", 1, 0));
    v
}

/// Modes, owners, sizes, contents and mtimes of everything under `dir` (and `dir` itself).
fn snapshot(dir: &Path) -> Vec<String> {
    let md = fs::symlink_metadata(dir).unwrap();
    let mut s = describe(dir);
    s.push(format!(". {:o} {} {}", md.mode(), md.uid(), md.mtime()));
    for l in s.iter_mut() {
        let name = l.split(' ').next().unwrap().to_string();
        if let Ok(m) = fs::symlink_metadata(dir.join(&name)) {
            l.push_str(&format!(" uid {} mtime {}", m.uid(), m.mtime()));
        }
    }
    s
}

/// Run `leanrd extract` as `uid` (0: root) on `img` into `target`; the run must end
/// (no hang), and not by a panic.
fn extract_as(uid: u32, img: &Path, target: &Path) -> std::process::Output {
    let mut c = if uid == 0 {
        Command::new("timeout")
    } else {
        let mut c = Command::new("setpriv");
        c.args([&format!("--reuid={uid}"), &format!("--regid={uid}"), "--clear-groups", "timeout"]);
        c
    };
    c.args(["20", env!("CARGO_BIN_EXE_leanrd"), "extract", "-C"]).arg(target).arg(img);
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(matches!(o.status.code(), Some(0 | 1)), "extract as {uid} ended with {:?}: {err}", o.status);
    o
}

#[test]
fn extract_never_touches_what_is_outside_its_target() {
    if !is_root() {
        skip::<()>("needs root (to test as root and as an unprivileged user)");
        return;
    }
    let t = TempDir::new("hostile");
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    for uid in [0u32, 65534] {
        let outside = t.join(format!("outside-{uid}"));
        fs::create_dir_all(outside.join("d")).unwrap();
        fs::write(outside.join("victim"), b"precious").unwrap();
        fs::set_permissions(outside.join("victim"), fs::Permissions::from_mode(0o644)).unwrap();
        fs::set_permissions(outside.join("d"), fs::Permissions::from_mode(0o755)).unwrap();
        // The unprivileged user owns the victims, so only extract's own rules protect them.
        assert!(Command::new("chown").args(["-R", &format!("{uid}:{uid}")]).arg(&outside).status().unwrap().success());
        let o = outside.display().to_string();
        let victim = format!("{o}/victim");
        let cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
            ("absolute name", vec![ent(victim.as_bytes(), S_IFREG | 0o777, b"pwned", 1, 1)]),
            ("dotdot name", vec![ent(format!("../outside-{uid}/victim").as_bytes(), S_IFREG | 0o777, b"x", 1, 1)]),
            (
                "symlink then setuid dir",
                vec![ent(b"s", S_IFLNK | 0o777, victim.as_bytes(), 1, 1), ent(b"s", S_IFDIR | 0o6777, b"", 2, 2)],
            ),
            (
                "relative symlink then dir",
                vec![
                    ent(b"r", S_IFLNK | 0o777, format!("../outside-{uid}/d").as_bytes(), 1, 1),
                    ent(b"r", S_IFDIR | 0o6777, b"", 2, 2),
                ],
            ),
            (
                "symlink then file",
                vec![ent(b"s", S_IFLNK | 0o777, victim.as_bytes(), 1, 1), ent(b"s", S_IFREG | 0o6777, b"pwned", 1, 2)],
            ),
            (
                "symlink then fifo and device",
                vec![
                    ent(b"s", S_IFLNK | 0o777, victim.as_bytes(), 1, 1),
                    ent(b"s", S_IFIFO | 0o777, b"", 1, 2),
                    ent(b"t", S_IFLNK | 0o777, victim.as_bytes(), 1, 3),
                    ent(b"t", S_IFCHR | 0o777, b"", 1, 4),
                ],
            ),
            (
                "absolute symlink as a parent",
                vec![ent(b"a", S_IFLNK | 0o777, o.as_bytes(), 1, 1), ent(b"a/victim", S_IFREG | 0o644, b"pwned", 1, 2)],
            ),
            (
                "relative symlink escape as a parent",
                vec![
                    ent(b"q", S_IFLNK | 0o777, format!("../outside-{uid}").as_bytes(), 1, 1),
                    ent(b"q/new", S_IFREG | 0o644, b"pwned", 1, 2),
                    ent(b"q/d", S_IFDIR | 0o777, b"", 2, 3),
                ],
            ),
            (
                "hard link through a replaced first member",
                vec![
                    ent(b"f", S_IFREG | 0o644, b"", 2, 7),
                    ent(b"f", S_IFLNK | 0o777, victim.as_bytes(), 1, 8),
                    ent(b"g", S_IFREG | 0o4777, b"pwned", 2, 7),
                ],
            ),
            (
                "hard link to a fifo (must not hang)",
                vec![
                    ent(b"p", S_IFREG | 0o644, b"", 2, 9),
                    ent(b"p", S_IFIFO | 0o644, b"", 1, 10),
                    ent(b"q", S_IFREG | 0o644, b"data", 2, 9),
                ],
            ),
            (
                "directory replaced by a symlink mid-archive",
                vec![
                    ent(b"d", S_IFDIR | 0o755, b"", 2, 1),
                    ent(b"d", S_IFLNK | 0o777, o.as_bytes(), 1, 2),
                    ent(b"d/victim", S_IFREG | 0o644, b"pwned", 1, 3),
                    ent(b"d/d", S_IFDIR | 0o6777, b"", 2, 4),
                ],
            ),
            (
                "hard link name with dotdot",
                vec![
                    ent(b"h", S_IFREG | 0o644, b"", 2, 11),
                    ent(format!("../outside-{uid}/victim").as_bytes(), S_IFREG | 0o644, b"pwned", 2, 11),
                ],
            ),
            ("setuid file", vec![ent(b"su", S_IFREG | 0o6755, b"#!/bin/sh\n", 1, 1)]),
        ];
        for (what, entries) in cases {
            let before = snapshot(&outside);
            let img = t.join("h.cpio");
            fs::write(&img, archive(&entries)).unwrap();
            fs::set_permissions(&img, fs::Permissions::from_mode(0o644)).unwrap();
            let target = t.join(format!("target-{uid}"));
            let _ = fs::remove_dir_all(&target);
            fs::create_dir_all(&target).unwrap();
            assert!(Command::new("chown").arg(format!("{uid}:{uid}")).arg(&target).status().unwrap().success());
            extract_as(uid, &img, &target);
            assert_same_tree(&snapshot(&outside), &before, &format!("{what} as uid {uid}"));
            assert_eq!(fs::read(outside.join("victim")).unwrap(), b"precious", "{what} as uid {uid}");
        }
    }
}

#[test]
fn extract_replaces_a_symlink_with_the_directory_the_archive_names() {
    let t = TempDir::new("replace");
    let img = t.join("a.cpio");
    fs::write(
        &img,
        archive(&[
            ent(b"s", S_IFLNK | 0o777, b"/etc", 1, 1),
            ent(b"s", S_IFDIR | 0o750, b"", 2, 2),
            ent(b"s/f", S_IFREG | 0o640, b"hello", 1, 3),
        ]),
    )
    .unwrap();
    let out = t.join("x");
    let o = leanrd().args(["extract", "-C"]).arg(&out).arg(&img).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = fs::symlink_metadata(out.join("s")).unwrap();
    assert!(md.is_dir());
    assert_eq!(md.mode() & 0o7777, 0o750);
    assert_eq!(fs::read(out.join("s/f")).unwrap(), b"hello");
}

#[test]
fn extract_reports_what_it_skips() {
    let t = TempDir::new("namesize");
    // An entry whose namesize is over PATH_MAX: the kernel skips it; extract says so.
    let mut long = encode_head(
        &Header { mode: S_IFREG | 0o644, nlink: 1, namesize: 5000, filesize: 3, ..Header::default() },
        &[b'x'; 4999],
    );
    long.extend_from_slice(b"abc\0");
    let mut img = long;
    img.extend(ent(b"ok", S_IFREG | 0o644, b"fine", 1, 2));
    img.extend(ent(TRAILER, 0, b"", 1, 0));
    let p = t.join("a.cpio");
    fs::write(&p, &img).unwrap();
    let o = leanrd().args(["extract", "-C"]).arg(t.join("x")).arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("namesize 5000"), "{err}");
    assert_eq!(fs::read(t.join("x/ok")).unwrap(), b"fine");
    // check agrees.
    assert_eq!(leanrd().arg("check").arg(&p).output().unwrap().status.code(), Some(1));
}

#[test]
fn writer_refuses_and_check_reports_names_the_kernel_cannot_unpack() {
    let t = TempDir::new("names");
    let hosts = "/etc/hosts";
    let cases = [
        ("dir /../etc 755 0 0\n".to_string(), "m:1: /../etc: name has a '..' component"),
        (format!("dir /a 755 0 0\nfile /a/b {hosts} 644 0 0 /../../evil\n"), "m:2: /../../evil: name has a '..'"),
        (
            format!("file /f {hosts} 644 0 0\nfile /f/g {hosts} 644 0 0\n"),
            "m:2: f/g cannot be unpacked: f is a regular",
        ),
        (format!("file /f/g {hosts} 644 0 0\nnod /f 600 0 0 c 1 3\n"), "m:1: f/g cannot be unpacked: f is a character"),
        ("dir /a\u{1}b 755 0 0\ndir /x\0y 755 0 0\n".to_string(), "m:2: NUL byte"),
    ];
    let m = t.join("m");
    for (text, want) in cases {
        fs::write(&m, &text).unwrap();
        let o = leanrd().current_dir(t.path()).args(["cpio", "m", "-o", "out.cpio"]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{text:?}: {err}");
        assert!(err.contains(want), "{text:?}: {err}");
        assert!(!t.join("out.cpio").exists());
    }
    // A manifest that is not UTF-8 is fine: names are bytes.
    fs::write(&m, b"dir /caf\xe9 755 0 0\ndir /caf\xff 755 0 0\n").unwrap();
    ok(leanrd().current_dir(t.path()).args(["cpio", "m", "-o", "out.cpio"]));
    ok(leanrd().current_dir(t.path()).args(["check", "out.cpio"]));
    // --paths: '..' refused, naming the line.
    fs::create_dir_all(t.join("x")).unwrap();
    fs::write(t.join("x/f"), b"1").unwrap();
    let o = run_stdin(leanrd().current_dir(t.join("x")).args(["cpio", "--paths"]), b"f\n../x\n");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("<stdin>:2: ../x: name has a '..' component"), "{err}");
    // check reports both kinds, exit 1.
    let img = t.join("bad.cpio");
    fs::write(
        &img,
        archive(&[
            ent(b"f", S_IFREG | 0o644, b"x", 1, 1),
            ent(b"f/g", S_IFREG | 0o644, b"y", 1, 2),
            ent(b"../etc/x", S_IFREG | 0o644, b"z", 1, 3),
        ]),
    )
    .unwrap();
    let o = leanrd().arg("check").arg(&img).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("f/g: the kernel cannot create it: f is a regular file"), "{out}");
    assert!(out.contains("../etc/x: name has a '..' component"), "{out}");
    assert!(out.contains("2 problem(s)"), "{out}");
}
