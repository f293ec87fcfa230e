//! The generator: module sets against modprobe, library sets against ldd, host detection on
//! fixture sysfs/proc trees, reproducibility, and the exact contents of a host-only image.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use leanrd_gen::Kernel;

/// `leanrd build -k KVER --host-root FIXTURE --init INIT EXTRA...` (host detection from the
/// fixture, a stand-in /init).
fn build_cmd(k: &str, f: &Fixture, init: &Path, extra: &[&str]) -> Command {
    let mut c = leanrd();
    c.args(["build", "-k", k]).args(extra).arg("--host-root").arg(&f.root).arg("--init").arg(init);
    c
}

/// The real static /init: the boot proof at the end of every build checks that /init can run
/// (an ELF file with its interpreter and libraries, or a script with its interpreter).
fn static_init(_t: &TempDir) -> PathBuf {
    init_binary().expect("the static /init builds")
}

#[test]
fn host_only_virtio_ext4_image_holds_exactly_what_it_needs() {
    let Some(k) = kver() else { return };
    let t = TempDir::new("hostonly");
    let f = virtio_ext4(&t);
    let init = static_init(&t);
    let out = String::from_utf8(ok(build_cmd(&k, &f, &init, &["--print-manifest"])
        .arg("--features-dir")
        .arg(t.join("none"))))
    .unwrap();
    let files: BTreeSet<String> = out
        .lines()
        .filter(|l| l.starts_with("file "))
        .map(|l| l.split_whitespace().nth(1).unwrap().to_string())
        .collect();
    // Expected: /init, its config, the module tables, and exactly the modules modprobe
    // names for the two modaliases and ext4 (with soft dependencies).
    let softdeps = fs::read_to_string(format!("/lib/modules/{k}/modules.softdep")).unwrap_or_default();
    let mut mods = BTreeSet::new();
    for w in [VIRTIO_PCI, "virtio:d00000002v00001AF4", "fs-ext4", "virtio_blk", "virtio_pci"] {
        mods.extend(expected_modules(&k, w, &softdeps));
    }
    let kernel = Kernel::load(Path::new("/"), &k).unwrap();
    let moddir = fs::canonicalize(format!("/lib/modules/{k}")).unwrap().display().to_string();
    let mut want: BTreeSet<String> = mods.iter().map(|m| format!("{moddir}/{}", kernel.db.paths[m])).collect();
    for t in ["modules.dep", "modules.alias", "modules.softdep", "modules.builtin"] {
        want.insert(format!("{moddir}/{t}"));
    }
    want.insert("/init".into());
    want.insert("/etc/leanrd/init.conf".into());
    assert_eq!(files, want);
    assert!(out.contains("features base fs-ext4\n") || out.contains("features base fs-ext4 "), "{out}");
    // The config tells /init what to load and which root the image was built for.
    let conf_dir = out.lines().find_map(|l| l.strip_prefix("# generated and transformed files are in ")).unwrap();
    let conf = fs::read_to_string(Path::new(conf_dir).join("etc/leanrd/init.conf")).unwrap();
    assert!(conf.contains(&format!("load {VIRTIO_PCI}")) || conf.contains(VIRTIO_PCI), "{conf}");
    assert!(conf.contains("rootfstype ext4"), "{conf}");
    let _ = fs::remove_dir_all(conf_dir);
    // The manifest is valid input for `leanrd cpio`.
    let m = t.join("manifest");
    fs::write(&m, &out).unwrap();
    let _ = m;
}

#[test]
fn builds_are_reproducible_and_atomic() {
    let Some(k) = kver() else { return };
    let t = TempDir::new("repro");
    let f = virtio_ext4(&t);
    let init = static_init(&t);
    let build = |out: &Path, extra: &[&str]| {
        ok(build_cmd(&k, &f, &init, extra).arg("-o").arg(out));
    };
    let a = t.join("a.img");
    let b = t.join("b.img");
    build(&a, &[]);
    build(&b, &[]);
    assert!(fs::read(&a).unwrap() == fs::read(&b).unwrap());
    build(&b, &["--threads", "1"]);
    assert!(fs::read(&a).unwrap() == fs::read(&b).unwrap(), "thread count changed the image");
    ok(leanrd().arg("check").arg(&a));
    // Uncompressed: aligned for reflinks by default.
    let c = t.join("c.img");
    build(&c, &["--compress", "none"]);
    let ls = String::from_utf8(ok(leanrd().args(["ls", "--json"]).arg(&c))).unwrap();
    for l in ls.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["uid"], 0);
        assert_eq!(v["mtime"], 0);
        if v["type"] == "file" && v["size"].as_u64().unwrap() >= 4096 {
            assert_eq!(v["data_offset"].as_u64().unwrap() % 4096, 0);
        }
    }
    // A failing build (unknown feature) leaves the previous image alone.
    let before = fs::read(&a).unwrap();
    let o = build_cmd(&k, &f, &init, &["--include", "no-such-feature"]).arg("-o").arg(&a).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no-such-feature"));
    assert!(fs::read(&a).unwrap() == before);
    // A bad configuration file names its line.
    let cfg = t.join("leanrd.toml");
    fs::write(&cfg, "compress = \"zstd\"\nuniversal = maybe\n").unwrap();
    let o = leanrd().args(["build", "-k", &k, "--config"]).arg(&cfg).arg("--init").arg(&init).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains("leanrd.toml") && err.contains("line 2"), "{err}");
}

#[test]
fn user_features_add_and_override() {
    let Some(k) = kver() else { return };
    let t = TempDir::new("userfeat");
    let f = virtio_ext4(&t);
    let init = static_init(&t);
    let fd = t.join("features.d");
    fs::create_dir_all(&fd).unwrap();
    fs::write(
        fd.join("tools.toml"),
        "when = \"requested\"\nbinaries = [\"busybox\"]\nmodules = [\"kernel/fs/fat/*\"]\n",
    )
    .unwrap();
    let out = String::from_utf8(ok(build_cmd(&k, &f, &init, &["--print-manifest", "--include", "tools"])
        .arg("--features-dir")
        .arg(&fd)))
    .unwrap();
    if Path::new("/bin/busybox").exists() {
        assert!(out.contains("/bin/busybox ") || out.contains("/usr/bin/busybox "), "{out}");
    }
    assert!(out.contains("/fat/vfat.ko") && out.contains("/fat/fat.ko"), "{out}");
    // Without --include it is not there.
    let out =
        String::from_utf8(ok(build_cmd(&k, &f, &init, &["--print-manifest"]).arg("--features-dir").arg(&fd))).unwrap();
    assert!(!out.contains("/fat/vfat.ko"));
}

/// Our temporaries (named ones in the output's directory, scratch trees in TMPDIR).
fn litter(dirs: &[&Path]) -> Vec<String> {
    let mut v = Vec::new();
    for d in dirs {
        for e in fs::read_dir(d).unwrap().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if (n.starts_with('.') && n.contains(".leanrd-") && n.ends_with(".tmp")) || n.starts_with("leanrd-build-") {
                v.push(format!("{}/{n}", d.display()));
            }
        }
    }
    v
}

#[test]
fn killed_builds_never_leave_a_lie_or_litter() {
    let Some(k) = kver() else { return };
    if !have("strace") {
        panic!("strace is needed (apt install strace; .ci/run installs it)");
    }
    let t = TempDir::new("killed");
    let f = virtio_ext4(&t);
    let init = static_init(&t);
    let tmpdir = t.join("tmp");
    fs::create_dir_all(&tmpdir).unwrap();
    let out_dir = t.join("boot");
    fs::create_dir_all(&out_dir).unwrap();
    let img = out_dir.join("initrd.img");
    let digest = out_dir.join("initrd.img.leanrd-digest");
    // Two settings giving two different images: A (zstd) and B (gzip).
    let settings = |which: &str| -> Vec<&str> {
        if which == "A" { vec!["--compress", "zstd"] } else { vec!["--compress", "gzip"] }
    };
    let build = |which: &str| -> Command {
        let mut c = build_cmd(&k, &f, &init, &settings(which));
        c.arg("-o").arg(&img).env("TMPDIR", &tmpdir);
        c
    };
    ok(&mut build("B"));
    let b = fs::read(&img).unwrap();
    ok(&mut build("A"));
    let a = fs::read(&img).unwrap();
    let a_digest = fs::read(&digest).unwrap();
    assert!(a != b);
    let reset = || {
        fs::write(&img, &a).unwrap();
        fs::write(&digest, &a_digest).unwrap();
    };
    // After any kill: the image is A or B and valid, and the next builds are right for
    // both settings (no stale digest makes a wrong image "up to date").
    let verify = |what: &str| {
        let now = fs::read(&img).unwrap();
        assert!(now == a || now == b, "{what}: the image is neither the old nor the new one");
        ok(leanrd().arg("check").arg(&img));
        ok(&mut build("A"));
        assert!(fs::read(&img).unwrap() == a, "{what}: a build for A after the kill left another image");
        ok(&mut build("B"));
        assert!(fs::read(&img).unwrap() == b, "{what}: a build for B after the kill left another image");
        assert_eq!(litter(&[&out_dir, &tmpdir]), Vec::<String>::new(), "{what}: temporaries left after the next run");
    };
    // A kill before each rename, link and unlink the build makes.
    for call in ["rename,renameat,renameat2", "linkat", "unlink,unlinkat"] {
        for n in 1..=2 {
            reset();
            let mut c = Command::new("strace");
            c.args(["-f", "-qq", "-o", "/dev/null", "-e", &format!("inject={call}:signal=KILL:when={n}")]);
            c.arg(env!("CARGO_BIN_EXE_leanrd")).args(build("B").get_args()).env("TMPDIR", &tmpdir);
            let o = c.output().unwrap();
            assert!(!o.status.success() || call.starts_with("unlink"), "{call} #{n}: the build was not killed");
            verify(&format!("kill at {call} #{n}"));
        }
    }
    // Kills at arbitrary moments.
    for ms in [0u64, 2, 5, 10, 20, 40, 80, 120] {
        reset();
        let mut child =
            build("B").stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(ms));
        let _ = child.kill();
        let _ = child.wait();
        verify(&format!("kill after {ms} ms"));
    }
}

#[test]
fn images_holding_secrets_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let Some(k) = kver() else { return };
    let t = TempDir::new("modes");
    let f = virtio_ext4(&t);
    let init = static_init(&t);
    fs::set_permissions(&init, fs::Permissions::from_mode(0o755)).unwrap();
    let key = t.join("root.key");
    fs::write(&key, b"secret").unwrap();
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
    let fd = t.join("features.d");
    fs::create_dir_all(&fd).unwrap();
    fs::write(fd.join("key.toml"), format!("when = \"requested\"\nfiles = [\"{}\"]\n", key.display())).unwrap();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let img = t.join("initrd.img");
    let digest = t.join("initrd.img.leanrd-digest");
    // (umask, extra arguments, existing image mode or none, expected image mode)
    let cases: [(&str, &[&str], Option<u32>, u32); 8] = [
        ("022", &[], None, 0o600),
        ("077", &[], None, 0o600),
        ("022", &["--image-mode", "0644"], None, 0o644),
        ("022", &["--image-mode", "0644", "--include", "key"], None, 0o600),
        ("022", &["--include", "key"], None, 0o600),
        ("022", &[], Some(0o644), 0o644),
        ("022", &["--include", "key"], Some(0o644), 0o600),
        ("077", &["--include", "key"], Some(0o400), 0o400),
    ];
    for (umask, extra, existing, want) in cases {
        let _ = fs::remove_file(&img);
        let _ = fs::remove_file(&digest);
        if let Some(m) = existing {
            fs::write(&img, b"old").unwrap();
            fs::set_permissions(&img, fs::Permissions::from_mode(m)).unwrap();
        }
        let mut c = Command::new("sh");
        c.arg("-c").arg(format!("umask {umask}; exec \"$@\"")).arg("sh").arg(env!("CARGO_BIN_EXE_leanrd"));
        c.args(build_cmd(&k, &f, &init, extra).get_args()).arg("--features-dir").arg(&fd).arg("-o").arg(&img);
        ok(&mut c);
        let what = format!("umask {umask} {extra:?} existing {existing:?}");
        assert_eq!(mode(&img), want, "{what}");
        // The digest is never more readable than the image.
        assert_eq!(mode(&digest) & !mode(&img), 0, "{what}: digest {:o}", mode(&digest));
        if extra.contains(&"key") {
            let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&img))).unwrap();
            assert!(ls.contains("root.key"), "{ls}");
        }
    }
    // A secret in `leanrd cpio -o` output: 0600 whatever the umask; without one, 0666 - umask.
    let m = t.join("m");
    fs::write(&m, format!("file /k {} 600 0 0\n", key.display())).unwrap();
    let cpio = |umask: &str, manifest: &Path| -> u32 {
        let out = t.join("c.cpio");
        let _ = fs::remove_file(&out);
        let mut c = Command::new("sh");
        c.arg("-c").arg(format!("umask {umask}; exec \"$@\"")).arg("sh").arg(env!("CARGO_BIN_EXE_leanrd"));
        c.arg("cpio").arg(manifest).arg("-o").arg(&out);
        ok(&mut c);
        mode(&out)
    };
    assert_eq!(cpio("022", &m), 0o600);
    let m2 = t.join("m2");
    fs::write(&m2, "dir /d 755 0 0\n").unwrap();
    assert_eq!(cpio("022", &m2), 0o644);
    assert_eq!(cpio("077", &m2), 0o600);
}

#[test]
fn concurrent_builds_leave_an_image_that_matches_its_digest() {
    let Some(k) = kver() else { return };
    if !have("strace") {
        panic!("strace is needed (apt install strace; .ci/run installs it)");
    }
    let t = TempDir::new("concurrent");
    let f = virtio_ext4(&t);
    let init = static_init(&t);
    let img = t.join("initrd.img");
    let build = |c: &str| -> Command {
        let mut cmd = build_cmd(&k, &f, &init, &["--compress", c]);
        cmd.arg("-o").arg(&img);
        cmd
    };
    let reference = |c: &str| -> Vec<u8> {
        let r = t.join(format!("ref-{c}"));
        ok(build_cmd(&k, &f, &init, &["--compress", c]).arg("-o").arg(&r));
        fs::read(&r).unwrap()
    };
    let (a, b) = (reference("zstd"), reference("gzip"));
    // Build B stalls for 600 ms right after renaming its image into place; build A runs in
    // that window. Unserialised, A's digest would be overwritten by B's while A's image stays.
    let mut slow = Command::new("strace");
    slow.args(["-f", "-qq", "-o", "/dev/null", "-e", "inject=rename,renameat,renameat2:delay_exit=600000:when=1"]);
    slow.arg(env!("CARGO_BIN_EXE_leanrd")).args(build("gzip").get_args());
    let mut slow = slow.spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(250));
    ok(&mut build("zstd"));
    assert!(slow.wait().unwrap().success());
    // Whatever won, the digest describes the image: a build for each setting gives it (the
    // slow build's settings first: its digest is the one that could be left over A's image).
    ok(&mut build("gzip"));
    assert!(fs::read(&img).unwrap() == b, "a build for gzip trusted a digest that describes another image");
    ok(&mut build("zstd"));
    assert!(fs::read(&img).unwrap() == a, "a build for zstd trusted a digest that describes another image");
}

/// A root on LUKS with a crypttab and a German keymap gets cryptsetup, the compiled keymap and
/// exactly its keyboards' drivers (PS/2 and USB, not the power button's); the same machine
/// with its root not encrypted gets none of them.
#[test]
fn luks_brings_exactly_its_keyboards_keymap_and_cryptsetup() {
    let Some(k) = kver() else { return };
    if !is_root() || !have("cryptsetup") || !have("loadkeys") || !have("ckbcomp") {
        skip::<()>("needs root (hard links of /usr), cryptsetup, loadkeys (kbd), ckbcomp (console-setup)");
        return;
    }
    let t = TempDir::new("lukskeyboard");
    let uuid = "0c0c0c0c-1111-4222-8333-444444444444";
    let tab = format!("sda3_crypt UUID={uuid} none luks,discard,bogus-option\n");
    let sr = host_sysroot(&t, "sr", &[("crypttab", tab.as_bytes(), 0o644), ("vconsole.conf", b"KEYMAP=de\n", 0o644)]);
    let init = static_init(&t);
    let softdeps = fs::read_to_string(format!("/lib/modules/{k}/modules.softdep")).unwrap_or_default();
    let mut keyboard = BTreeSet::new();
    for a in [XHCI_PCI, USB_KEYBOARD, HID_KEYBOARD] {
        keyboard.extend(expected_modules(&k, a, &softdeps));
    }
    // What the root needs anyway is not the keyboard's.
    let mut base = BTreeSet::new();
    for a in [VIRTIO_PCI, "virtio:d00000002v00001AF4", "fs-ext4", "dm_crypt"] {
        base.extend(expected_modules(&k, a, &softdeps));
    }
    keyboard.retain(|m| !base.contains(m));
    assert!(keyboard.contains("usbhid") && keyboard.contains("hid_generic"), "{keyboard:?}");
    for luks in [true, false] {
        let sub = TempDir::new("lukskeyboard-host");
        let f = keyboard_host(&sub, luks.then_some(uuid));
        let sysroot = format!("--sysroot={}", sr.display());
        let o = build_cmd(&k, &f, &init, &["--print-manifest", &sysroot]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        let files: Vec<&str> =
            out.lines().filter(|l| l.starts_with("file ")).map(|l| l.split_whitespace().nth(1).unwrap()).collect();
        let modules: BTreeSet<String> = files
            .iter()
            .filter(|f| f.ends_with(".ko") || f.contains(".ko."))
            .map(|f| leanrd_kmod::name_of_path(f))
            .collect();
        let has_keyboard: Vec<&String> = keyboard.iter().filter(|m| modules.contains(*m)).collect();
        let cryptsetup = files.iter().any(|f| f.ends_with("/cryptsetup"));
        let keymap = files.contains(&"/etc/leanrd/keymaps/de.bmap");
        if luks {
            assert_eq!(has_keyboard.len(), keyboard.len(), "keyboard modules: {has_keyboard:?} of {keyboard:?}");
            assert!(cryptsetup && keymap, "cryptsetup {cryptsetup}, keymap {keymap}:\n{out}");
            assert!(!modules.contains("button"), "the power button is not a keyboard");
            assert!(err.contains("crypttab:1: bogus-option: unknown option"), "{err}");
            // The configuration names the container and the keymap, and loads the keyboard
            // with the LUKS layer.
            let dir = out.lines().find_map(|l| l.strip_prefix("# generated and transformed files are in ")).unwrap();
            let conf = fs::read_to_string(Path::new(dir).join("etc/leanrd/init.conf")).unwrap();
            assert!(conf.contains(&format!("crypt sda3_crypt UUID={uuid} none luks,discard needed")), "{conf}");
            assert!(conf.contains("keymap de\n") && conf.contains(USB_KEYBOARD), "{conf}");
            let _ = fs::remove_dir_all(dir);
        } else {
            assert!(has_keyboard.is_empty(), "keyboard modules without LUKS: {has_keyboard:?}");
            assert!(!cryptsetup && !keymap, "cryptsetup {cryptsetup}, keymap {keymap} without LUKS");
        }
    }
}

/// `drm` alone (what plymouth brings) has the virtual machines' GPUs in a universal image and
/// no real GPU's driver; `drm-all` every DRM driver of the kernel (amdgpu, i915, nouveau).
#[test]
fn real_gpus_only_with_drm_all() {
    let Some(k) = kver() else { return };
    let t = TempDir::new("drmall");
    let f = virtio_ext4(&t);
    let init = static_init(&t);
    let kernel = Kernel::load(Path::new("/"), &k).unwrap();
    let real: Vec<&str> =
        ["amdgpu", "i915", "nouveau"].into_iter().filter(|m| kernel.db.paths.contains_key(*m)).collect();
    if real.is_empty() || !kernel.db.paths.contains_key("bochs") {
        skip::<()>("the kernel has no amdgpu, i915, nouveau or bochs module");
        return;
    }
    let manifest = |extra: &[&str]| {
        let o = ok(&mut build_cmd(&k, &f, &init, &[&["--universal", "--print-manifest"], extra].concat()));
        String::from_utf8(o).unwrap()
    };
    let has = |m: &str, module: &str| m.lines().any(|l| l.starts_with("file ") && l.contains(&format!("/{module}.ko")));
    let drm = manifest(&["--include", "drm"]);
    assert!(has(&drm, "bochs"), "drm: no bochs");
    for r in &real {
        assert!(!has(&drm, r), "drm alone brought {r}");
    }
    let all = manifest(&["--include", "drm-all"]);
    for r in real.iter().chain(&["bochs"]) {
        assert!(has(&all, r), "drm-all: no {r}");
    }
    for m in [&drm, &all] {
        let conf = m.lines().find_map(|l| l.strip_prefix("# generated and transformed files are in ")).unwrap();
        let _ = fs::remove_dir_all(conf);
    }
}
