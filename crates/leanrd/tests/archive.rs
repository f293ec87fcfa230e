//! `leanrd cpio`, `ls`, `extract`, `check` against GNU cpio, bsdcpio and real reflink
//! file systems.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::Path;
use std::process::Command;

use common::*;

/// A tree with every kind of entry the byte-equality tests need.
fn sample_tree(root: &Path) {
    fs::create_dir_all(root.join("dir/sub")).unwrap();
    fs::write(root.join("empty"), b"").unwrap();
    fs::write(root.join("small"), b"hello\n").unwrap();
    fs::write(root.join("dir/sub/big"), noise(1, 70_000)).unwrap();
    symlink("dir/sub/big", root.join("link")).unwrap();
    // A hard-link set listed in order, one interleaved with other files, one with a member
    // outside the tree.
    fs::write(root.join("h1"), b"set one").unwrap();
    fs::hard_link(root.join("h1"), root.join("h2")).unwrap();
    fs::hard_link(root.join("h1"), root.join("dir/h3")).unwrap();
    fs::write(root.join("dir/i1"), b"interleaved").unwrap();
    fs::hard_link(root.join("dir/i1"), root.join("zz")).unwrap();
    let outside = root.with_extension("outside");
    fs::write(root.join("m1"), b"missing member").unwrap();
    let _ = fs::remove_file(&outside);
    fs::hard_link(root.join("m1"), &outside).unwrap();
    fs::set_permissions(root.join("small"), fs::Permissions::from_mode_ext(0o4755)).unwrap();
    let st = Command::new("mkfifo").arg(root.join("fifo")).status().unwrap();
    assert!(st.success());
    if is_root() {
        let st = Command::new("mknod").arg(root.join("tty")).args(["c", "4", "5"]).status().unwrap();
        assert!(st.success());
        let st = Command::new("mknod").arg(root.join("blk")).args(["b", "259", "65537"]).status().unwrap();
        assert!(st.success());
    }
}

trait ModeExt {
    fn from_mode_ext(m: u32) -> Self;
}
impl ModeExt for fs::Permissions {
    fn from_mode_ext(m: u32) -> Self {
        std::os::unix::fs::PermissionsExt::from_mode(m)
    }
}

/// `leanrd` output equals GNU cpio's, which only adds zero padding to a 512-byte block.
fn assert_same_as_gnu(gnu: &[u8], ours: &[u8], what: &str) {
    assert!(gnu.len() >= ours.len(), "{what}: GNU {} bytes, leanrd {}", gnu.len(), ours.len());
    assert!(gnu[..ours.len()] == *ours, "{what}: bytes differ at {:?}", gnu.iter().zip(ours).position(|(a, b)| a != b));
    assert!(gnu[ours.len()..].iter().all(|&b| b == 0), "{what}: GNU tail is not padding");
    assert!(gnu.len() - ours.len() < 512, "{what}");
}

fn gnu_cpio(dir: &Path, list: &[u8], args: &[&str]) -> Vec<u8> {
    let o = run_stdin(Command::new("cpio").current_dir(dir).args(["-o", "-H", "newc", "--quiet"]).args(args), list);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o.stdout
}

#[test]
fn byte_identical_to_gnu_cpio() {
    if !have("cpio") {
        skip::<()>("GNU cpio not installed");
        return;
    }
    let t = TempDir::new("gnu");
    let root = t.join("tree");
    sample_tree(&root);
    let find = Command::new("sh").arg("-c").arg("find . | LC_ALL=C sort").current_dir(&root).output().unwrap().stdout;
    let find_unsorted = Command::new("find").arg(".").current_dir(&root).output().unwrap().stdout;
    let names_no_prefix: Vec<u8> = String::from_utf8(find.clone())
        .unwrap()
        .lines()
        .filter(|l| *l != ".")
        .map(|l| format!("{}\n", &l[2..]))
        .collect::<String>()
        .into_bytes();
    let nul: Vec<u8> = find.iter().map(|&b| if b == b'\n' { 0 } else { b }).collect();
    type Case<'a> = (&'a str, Vec<u8>, Vec<&'a str>, Vec<&'a str>);
    let cases: Vec<Case> = vec![
        ("./ prefix, sorted", find.clone(), vec!["--ignore-devno", "--renumber-inodes"], vec!["--first-ino", "0"]),
        ("find order", find_unsorted, vec!["--ignore-devno", "--renumber-inodes"], vec!["--first-ino", "0"]),
        ("plain names", names_no_prefix, vec!["--ignore-devno", "--renumber-inodes"], vec!["--first-ino", "0"]),
        ("NUL-separated", nul, vec!["-0", "--ignore-devno", "--renumber-inodes"], vec!["-0", "--first-ino", "0"]),
        ("device numbers kept", find.clone(), vec!["--renumber-inodes"], vec!["--keep-devno", "--first-ino", "0"]),
    ];
    for (what, list, gargs, largs) in cases {
        let gnu = gnu_cpio(&root, &list, &gargs);
        let o = run_stdin(leanrd().current_dir(&root).args(["cpio", "--paths"]).args(&largs), &list);
        assert!(o.status.success(), "{what}: {}", String::from_utf8_lossy(&o.stderr));
        assert_same_as_gnu(&gnu, &o.stdout, what);
    }
    // Each single case on its own, so a failure names it.
    for item in ["empty", "small", "dir", "link", "fifo", "h1\nh2\ndir/h3", "h1\ndir/i1\nh2\nzz\ndir/h3", "m1"] {
        let list = format!("{item}\n").into_bytes();
        let gnu = gnu_cpio(&root, &list, &["--ignore-devno", "--renumber-inodes"]);
        let o = run_stdin(leanrd().current_dir(&root).args(["cpio", "--paths", "--first-ino", "0"]), &list);
        assert_same_as_gnu(&gnu, &o.stdout, item);
    }
    if is_root() {
        for item in ["tty", "blk"] {
            let list = format!("{item}\n").into_bytes();
            let gnu = gnu_cpio(&root, &list, &["--ignore-devno", "--renumber-inodes"]);
            let o = run_stdin(leanrd().current_dir(&root).args(["cpio", "--paths", "--first-ino", "0"]), &list);
            assert_same_as_gnu(&gnu, &o.stdout, item);
        }
    }
    let _ = fs::remove_file(root.with_extension("outside"));
}

#[test]
fn gnu_cpio_and_bsdcpio_extract_what_leanrd_writes() {
    let tools: Vec<&str> = ["cpio", "bsdcpio"].into_iter().filter(|t| have(t)).collect();
    if tools.is_empty() {
        skip::<()>("neither cpio nor bsdcpio installed");
        return;
    }
    let t = TempDir::new("extract");
    let root = t.join("tree");
    sample_tree(&root);
    // Long names that force filler entries when aligning.
    let deep = root.join("d".repeat(200)).join("e".repeat(200)).join("f".repeat(200));
    fs::create_dir_all(&deep).unwrap();
    for i in 0..40 {
        fs::write(deep.join(format!("{}{i}", "g".repeat(150))), noise(i, 5000 + i as usize * 311)).unwrap();
    }
    let want = describe(&root);
    for align in [None, Some("4096")] {
        let img = t.join("img.cpio");
        let mut c = leanrd();
        c.args(["cpio", "--root"]).arg(&root).arg("-o").arg(&img);
        if let Some(a) = align {
            c.args(["--data-align", a]);
        }
        ok(&mut c);
        for tool in &tools {
            let out = t.join(format!("out-{tool}-{}", align.unwrap_or("0")));
            fs::create_dir_all(&out).unwrap();
            let st = Command::new(tool)
                .args(["-idm", "--quiet"])
                .current_dir(&out)
                .stdin(fs::File::open(&img).unwrap())
                .status()
                .unwrap();
            assert!(st.success(), "{tool} failed on align {align:?}");
            assert_same_tree(&describe(&out), &want, &format!("{tool}, align {align:?}"));
        }
        // And leanrd's own reader.
        let out = t.join(format!("out-leanrd-{}", align.unwrap_or("0")));
        ok(leanrd().args(["extract"]).arg(&img).arg("-C").arg(&out));
        assert_same_tree(&describe(&out), &want, &format!("leanrd extract, align {align:?}"));
        ok(leanrd().arg("check").arg(&img));
    }
    let _ = fs::remove_file(root.with_extension("outside"));
}

#[test]
fn every_eligible_file_is_aligned() {
    let t = TempDir::new("align");
    let root = t.join("tree");
    // Names near the cap, which gen_init_cpio-style padding alone cannot align.
    let mut dir = root.clone();
    for i in 0..15 {
        dir = dir.join(format!("{i:02}{}", "x".repeat(250)));
    }
    fs::create_dir_all(&dir).unwrap();
    for i in 0..30u64 {
        fs::write(dir.join(format!("{i}{}", "y".repeat(100 + i as usize * 5))), noise(i, 4096 + i as usize * 1000))
            .unwrap();
        fs::write(root.join(format!("s{i}")), noise(i, 4096 * (i as usize % 3 + 1))).unwrap();
    }
    let img = t.join("a.cpio");
    let o = leanrd()
        .args(["cpio", "--data-align", "4096", "--stats", "--root"])
        .arg(&root)
        .arg("-o")
        .arg(&img)
        .output()
        .unwrap();
    assert!(o.status.success());
    let stats = String::from_utf8_lossy(&o.stderr);
    assert!(stats.contains("eligible 60, aligned 60 (100.0 %)"), "{stats}");
    assert!(!stats.contains("fillers 0,"), "expected filler entries: {stats}");
    let json = ok(leanrd().args(["ls", "--json"]).arg(&img));
    let mut n = 0;
    for line in String::from_utf8(json).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["type"] == "file" && v["size"].as_u64().unwrap() >= 4096 {
            assert_eq!(v["data_offset"].as_u64().unwrap() % 4096, 0, "{line}");
            n += 1;
        }
    }
    assert_eq!(n, 60);
    ok(leanrd().arg("check").arg(&img));
    if have("cpio") {
        let out = t.join("out");
        fs::create_dir_all(&out).unwrap();
        let st = Command::new("cpio")
            .args(["-id", "--quiet"])
            .current_dir(&out)
            .stdin(fs::File::open(&img).unwrap())
            .status()
            .unwrap();
        assert!(st.success());
        assert_same_tree(&describe(&out), &describe(&root), "cpio -id");
    }
}

fn reflink_case(kind: &str) {
    let Some(m) = LoopFs::new(kind, "512M") else { return };
    let dir = m.path();
    fs::create_dir_all(dir.join("src")).unwrap();
    fs::write(dir.join("src/big"), noise(7, 64 << 20)).unwrap();
    fs::write(dir.join("src/small"), b"tiny").unwrap();
    // Around block boundaries: the whole blocks are cloned, the partial last one is written
    // with the headers after it.
    let edges = [4095usize, 4096, 4097, 8191, 8192, 12_289, 65_541, (1 << 20) + 3];
    for (i, n) in edges.iter().enumerate() {
        fs::write(dir.join(format!("src/e{i}")), noise(20 + i as u64, *n)).unwrap();
    }
    let whole: u64 = (64u64 << 20) + edges.iter().map(|n| *n as u64 / 4096 * 4096).sum::<u64>();
    let size = |p: &Path| fs::metadata(p).unwrap().len();
    let usage = |p: &Path| {
        let o = Command::new("sync").status().unwrap();
        assert!(o.success());
        leanrd_usage(p)
    };
    let aligned = dir.join("aligned.cpio");
    ok(leanrd().args(["cpio", "--data-align", "4096", "--root"]).arg(dir.join("src")).arg("-o").arg(&aligned));
    let (total, shared) = usage(&aligned);
    if kind == "ext4" {
        assert_eq!(shared, 0, "ext4 cannot share");
    } else {
        assert!(shared >= whole, "{kind}: only {shared} of {total} bytes shared, {whole} clonable");
    }
    // The same bytes as the sequential writer's (stdout), clones or not.
    let streamed = ok(leanrd().args(["cpio", "--data-align", "4096", "--root"]).arg(dir.join("src")));
    assert!(fs::read(&aligned).unwrap() == streamed, "{kind}: the positional writer's bytes differ from the stream's");
    let unaligned = dir.join("unaligned.cpio");
    ok(leanrd().args(["cpio", "--root"]).arg(dir.join("src")).arg("-o").arg(&unaligned));
    let (_, shared) = usage(&unaligned);
    assert_eq!(shared, 0, "{kind}: unaligned archive shares data");
    // Both archives hold the same files.
    for img in [&aligned, &unaligned] {
        let out = m.dir.join(format!("x-{}", size(img)));
        ok(leanrd().arg("extract").arg(img).arg("-C").arg(&out));
        assert_eq!(fs::read(out.join("big")).unwrap(), fs::read(dir.join("src/big")).unwrap());
    }
}

/// (total, shared) bytes from `filefrag`-free FIEMAP: use the library directly.
fn leanrd_usage(p: &Path) -> (u64, u64) {
    let u = leanrd_archive::fiemap::usage(&fs::File::open(p).unwrap()).unwrap();
    (u.total, u.shared)
}

#[test]
fn reflinks_on_xfs() {
    reflink_case("xfs");
}

#[test]
fn reflinks_on_btrfs() {
    reflink_case("btrfs");
}

/// No reflinks: the aligned files go to the copying workers instead.
#[test]
fn aligned_archive_on_ext4_is_copied() {
    reflink_case("ext4");
}

#[test]
fn malformed_images_are_rejected_with_the_offset() {
    let t = TempDir::new("bad");
    let src = t.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"content").unwrap();
    let good = ok(leanrd().args(["cpio", "--root"]).arg(&src));
    let hdr = |field: usize| 6 + 8 * field;
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("truncated header", good[..50].to_vec()),
        ("bad magic", [b"070707".as_slice(), &good[6..]].concat()),
        ("bad magic 2", [b"123456".as_slice(), &good[6..]].concat()),
    ];
    let mut nonhex = good.clone();
    nonhex[hdr(1) + 3] = b'z';
    cases.push(("non-hex", nonhex));
    let mut ns0 = good.clone();
    ns0[hdr(11)..hdr(11) + 8].copy_from_slice(b"00000000");
    cases.push(("namesize 0", ns0));
    let mut nsmax = good.clone();
    nsmax[hdr(11)..hdr(11) + 8].copy_from_slice(b"FFFFFFFF");
    cases.push(("namesize 2^32-1", nsmax));
    let mut big = good.clone();
    big[hdr(6)..hdr(6) + 8].copy_from_slice(b"7FFFFFFF");
    cases.push(("size past end", big));
    let mut noterm = good.clone();
    noterm[110 + 1] = b'x'; // the NUL after "f"
    cases.push(("name without NUL", noterm));
    for (what, bytes) in cases {
        let img = t.join("bad.cpio");
        fs::write(&img, &bytes).unwrap();
        for cmd in ["ls", "check", "extract"] {
            let mut c = leanrd();
            c.arg(cmd).arg(&img);
            if cmd == "extract" {
                c.arg("-C").arg(t.join("out"));
            }
            let o = c.output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr).to_string() + &String::from_utf8_lossy(&o.stdout);
            assert_eq!(o.status.code(), Some(1), "{what} / {cmd}: {err}");
            assert!(err.contains("offset"), "{what} / {cmd}: no offset in {err:?}");
            assert!(!err.contains("panicked"), "{what} / {cmd}: {err}");
        }
    }
}

#[test]
fn reader_round_trips_everything_the_writer_makes() {
    let t = TempDir::new("rt");
    let data = t.join("data");
    fs::write(&data, noise(3, 10_000)).unwrap();
    let manifest = format!(
        "dir /bin 755 0 0\nfile /bin/a {d} 4755 1 2 /bin/b /c\nslink /bin/sh a 777 0 0\nnod /dev/console 600 0 5 c 5 1\n\
         nod /dev/sda 660 0 6 b 8 0\npipe /p 600 3 4\nsock /s 600 0 0\ndir /empty 700 0 0\n",
        d = data.display()
    );
    let m = t.join("m");
    fs::write(&m, manifest).unwrap();
    for extra in [vec![], vec!["--data-align", "4096"], vec!["--checksum"], vec!["--checksum", "--data-align", "512"]] {
        let img = t.join("img");
        ok(leanrd().arg("cpio").arg(&m).arg("-o").arg(&img).args(&extra).args(["--mtime", "1234567"]));
        ok(leanrd().arg("check").arg(&img));
        let ls = String::from_utf8(ok(leanrd().args(["ls", "--json"]).arg(&img))).unwrap();
        let v: Vec<serde_json::Value> = ls.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let names: Vec<&str> = v.iter().map(|e| e["name"].as_str().unwrap()).collect();
        // Fillers (repeats of a directory) may appear when aligning; ignore repeats.
        let mut uniq = names.clone();
        uniq.dedup();
        assert_eq!(
            uniq,
            ["bin", "bin/a", "bin/b", "c", "bin/sh", "dev/console", "dev/sda", "p", "s", "empty"],
            "{extra:?}"
        );
        let get = |n: &str| v.iter().rev().find(|e| e["name"] == n).unwrap();
        assert_eq!(get("c")["size"], 10_000);
        assert_eq!(get("bin/a")["size"], 0);
        assert_eq!(get("c")["mode"], 0o104755);
        assert_eq!((get("c")["uid"].as_u64(), get("c")["gid"].as_u64()), (Some(1), Some(2)));
        assert_eq!(get("c")["nlink"], 3);
        assert_eq!(get("c")["ino"], get("bin/a")["ino"]);
        assert_eq!(get("bin/sh")["target"], "a");
        assert_eq!((get("dev/sda")["rdev_major"].as_u64(), get("dev/sda")["rdev_minor"].as_u64()), (Some(8), Some(0)));
        assert_eq!(get("p")["mtime"], 1234567);
        if extra.contains(&"--data-align") {
            let a: u64 = extra[extra.iter().position(|x| *x == "--data-align").unwrap() + 1].parse().unwrap();
            assert_eq!(get("c")["data_offset"].as_u64().unwrap() % a, 0);
        }
        if is_root() {
            let out = t.join("out");
            let _ = fs::remove_dir_all(&out);
            ok(leanrd().arg("extract").arg(&img).arg("-C").arg(&out));
            let md = fs::metadata(out.join("c")).unwrap();
            assert_eq!((md.mode(), md.uid(), md.gid(), md.nlink(), md.mtime()), (0o104755, 1, 2, 3, 1234567));
            assert_eq!(fs::read(out.join("bin/b")).unwrap(), fs::read(&data).unwrap());
            assert_eq!(fs::read_link(out.join("bin/sh")).unwrap().to_str(), Some("a"));
            assert_eq!(fs::metadata(out.join("dev/sda")).unwrap().rdev(), rustix_makedev(8, 0));
        }
    }
}

fn rustix_makedev(maj: u64, min: u64) -> u64 {
    (maj << 8) | min
}

#[test]
fn output_is_atomic_and_errors_name_the_line() {
    let t = TempDir::new("atomic");
    let out = t.join("initrd.img");
    fs::write(&out, b"previous image").unwrap();
    let m = t.join("m");
    fs::write(&m, "dir /a 755 0 0\n# comment\nfile /b /nonexistent/file 644 0 0\n").unwrap();
    let o = leanrd().arg("cpio").arg(&m).arg("-o").arg(&out).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("{}:3:", m.display())) && err.contains("/nonexistent/file"), "{err}");
    assert_eq!(fs::read(&out).unwrap(), b"previous image");
    // A file that disappears between planning and copying: still no damage.
    fs::write(&m, "bogus line here\n").unwrap();
    let o = leanrd().arg("cpio").arg(&m).arg("-o").arg(&out).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains(":1: unknown entry type \"bogus\""));
    // Output into a directory that does not exist: a clear error.
    let o = leanrd().arg("cpio").arg(&m).arg("-o").arg(t.join("no/such/dir/img")).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let leftovers: Vec<_> = fs::read_dir(t.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers.len(), 2, "temporary files left: {leftovers:?}");
}

#[test]
fn killed_cpio_runs_leave_the_old_or_the_new_archive() {
    let t = TempDir::new("cpiokill");
    let root = t.join("tree");
    sample_tree(&root);
    let dir = t.join("out");
    fs::create_dir_all(&dir).unwrap();
    let out = dir.join("a.cpio");
    let old = b"an old archive\0\0".to_vec();
    let new = ok(leanrd().args(["cpio", "--root"]).arg(&root));
    let mut appended = old.clone();
    appended.resize(old.len().div_ceil(4) * 4 + 4, 0);
    appended.extend_from_slice(&new);
    let temporaries = || -> Vec<String> {
        fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    };
    for (args, want) in [(vec![], &new), (vec!["--append"], &appended)] {
        let run = |c: &mut Command| {
            c.args(["cpio", "--root"]).arg(&root).arg("-o").arg(&out).args(&args);
        };
        let mut cases: Vec<Box<dyn Fn() -> Command>> = Vec::new();
        for inject in ["rename,renameat,renameat2", "linkat"] {
            cases.push(Box::new(move || {
                let mut c = Command::new("strace");
                c.args(["-f", "-qq", "-o", "/dev/null", "-e", &format!("inject={inject}:signal=KILL:when=1")]);
                c.arg(env!("CARGO_BIN_EXE_leanrd"));
                c
            }));
        }
        for ms in [0u64, 1, 3, 6, 10, 20] {
            cases.push(Box::new(move || {
                // --foreground: timeout kills leanrd alone and waits for it to be gone (without
                // it, timeout kills its whole process group, itself first, and returns while
                // leanrd may still be dying: the next run would rightly leave its file alone).
                let mut c = Command::new("timeout");
                c.args(["--foreground", "-s", "KILL", &format!("0.{ms:03}"), env!("CARGO_BIN_EXE_leanrd")]);
                c
            }));
        }
        for (i, make) in cases.iter().enumerate() {
            fs::write(&out, &old).unwrap();
            let mut c = make();
            run(&mut c);
            let _ = c.output().unwrap();
            let now = fs::read(&out).unwrap();
            assert!(now == old || &now == want, "{args:?} case {i}: neither the old nor the new archive");
            // The next run completes and leaves no temporary behind.
            fs::write(&out, &old).unwrap();
            ok(leanrd().args(["cpio", "--root"]).arg(&root).arg("-o").arg(&out).args(&args));
            assert!(&fs::read(&out).unwrap() == want, "{args:?} case {i}");
            assert_eq!(temporaries(), Vec::<String>::new(), "{args:?} case {i}");
        }
    }
}

#[test]
fn reproducible_and_normalised() {
    let t = TempDir::new("repro");
    let root = t.join("tree");
    sample_tree(&root);
    let a = ok(leanrd().args(["cpio", "--data-align", "4096", "--root"]).arg(&root));
    let b = ok(leanrd().args(["cpio", "--data-align", "4096", "--root"]).arg(&root));
    assert_eq!(a, b);
    let c = ok(leanrd().args(["cpio", "--root"]).arg(&root).env("SOURCE_DATE_EPOCH", "1000").args(["--owner", "0:0"]));
    let img = t.join("c");
    fs::write(&img, &c).unwrap();
    for l in String::from_utf8(ok(leanrd().args(["ls", "--json"]).arg(&img))).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(v["mtime"].as_u64().unwrap() <= 1000);
        assert_eq!((v["uid"].as_u64(), v["gid"].as_u64()), (Some(0), Some(0)));
    }
    let _ = fs::remove_file(root.with_extension("outside"));
}

#[test]
fn extract_refuses_to_leave_the_directory() {
    let t = TempDir::new("escape");
    let outside = t.join("outside");
    fs::create_dir_all(&outside).unwrap();
    let cases = [
        format!("slink /evil {} 777 0 0\nfile /evil/pwned /etc/hostname 644 0 0\n", outside.display()),
        "slink /up .. 777 0 0\nfile /up/pwned /etc/hostname 644 0 0\n".to_string(),
    ];
    for m in cases {
        let img = t.join("img");
        let mf = t.join("m");
        fs::write(&mf, m).unwrap();
        ok(leanrd().arg("cpio").arg(&mf).arg("-o").arg(&img));
        let o = leanrd().arg("extract").arg(&img).arg("-C").arg(t.join("x")).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(!outside.join("pwned").exists() && !t.join("pwned").exists());
    }
    // Names with .. or absolute: built by hand since leanrd's writer would not make them. An
    // absolute name lands inside the directory, as the kernel puts it under the root it unpacks
    // into; a name with .. is refused.
    for name in ["../pwned", "/pwned", "a/../../pwned", "/../pwned"] {
        let h = leanrd_newc::Header {
            mode: 0o100644,
            nlink: 1,
            filesize: 3,
            namesize: name.len() as u32 + 1,
            ..Default::default()
        };
        let mut img = leanrd_newc::encode_head(&h, name.as_bytes());
        img.extend_from_slice(b"abc\0");
        let tr = leanrd_newc::Header { nlink: 1, namesize: 11, ..Default::default() };
        img.extend_from_slice(&leanrd_newc::encode_head(&tr, b"TRAILER!!!"));
        let p = t.join("hand");
        fs::write(&p, img).unwrap();
        let o = leanrd().arg("extract").arg(&p).arg("-C").arg(t.join("x2/y")).output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        if name == "/pwned" {
            assert_eq!(o.status.code(), Some(0), "{name}: {stderr}");
            assert_eq!(fs::read(t.join("x2/y/pwned")).unwrap(), b"abc", "{name}");
            fs::remove_file(t.join("x2/y/pwned")).unwrap();
        } else {
            assert_eq!(o.status.code(), Some(1), "{name}: {stderr}");
            assert!(stderr.contains("refusing"), "{name}: {stderr}");
        }
        assert!(!t.join("pwned").exists() && !t.join("x2/pwned").exists() && !Path::new("/pwned").exists());
    }
}
