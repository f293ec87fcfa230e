//! Distribution integration: hooks installed into a temporary root build an image when a
//! fake kernel is "installed" there, unchanged inputs skip the rebuild, removal undoes it.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::*;

const KVER: &str = "9.9.9-leanrd-test";

/// A root with a (module-less) fake kernel and a leanrd configuration.
fn sysroot(t: &TempDir) -> std::path::PathBuf {
    let r = t.join("root");
    let m = r.join(format!("lib/modules/{KVER}"));
    fs::create_dir_all(&m).unwrap();
    fs::create_dir_all(m.join("kernel/fs/demo")).unwrap();
    fs::write(m.join("kernel/fs/demo/demo.ko"), module_elf(KVER, "demo", &noise(1, 5000), false)).unwrap();
    fs::write(m.join("modules.dep"), "kernel/fs/demo/demo.ko:\n").unwrap();
    fs::write(m.join("modules.alias"), "alias fs-demo demo\n").unwrap();
    fs::create_dir_all(r.join("boot")).unwrap();
    fs::create_dir_all(r.join("etc/initramfs-tools")).unwrap();
    fs::write(
        r.join("etc/initramfs-tools/update-initramfs.conf"),
        "# Debian's\nupdate_initramfs=yes\nbackup_initramfs=no\n",
    )
    .unwrap();
    fs::create_dir_all(r.join("etc/leanrd/features.d")).unwrap();
    // The real static /init: the boot proof checks that /init can run.
    fs::copy(init_binary().expect("the static /init builds"), r.join("init")).unwrap();
    fs::write(
        r.join("etc/leanrd/leanrd.toml"),
        format!(
            "# test configuration\nuniversal = true\ncompress = \"gzip:1\"\nthreads = 1\ninit = \"{}\"\n",
            r.join("init").display()
        ),
    )
    .unwrap();
    fs::write(r.join("etc/leanrd/features.d/demo.toml"), "when = \"always\"\nmodules = [\"fs-demo\"]\n").unwrap();
    r
}

fn run(cmd: &Path, args: &[&str]) -> String {
    let o = Command::new(cmd).args(args).output().unwrap();
    assert!(o.status.success(), "{}: {}", cmd.display(), String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

#[test]
fn hooks_build_on_kernel_install_and_clean_up_on_removal() {
    let t = TempDir::new("hooks");
    let r = sysroot(&t);
    let leanrd_bin = env!("CARGO_BIN_EXE_leanrd");
    ok(leanrd().args(["install-hooks", "--leanrd", leanrd_bin, "--sysroot"]).arg(&r));
    let conf = fs::read_to_string(r.join("etc/initramfs-tools/update-initramfs.conf")).unwrap();
    assert!(conf.contains("update_initramfs=no") && !conf.contains("update_initramfs=yes"), "{conf}");
    assert!(conf.contains("backup_initramfs=no"));

    // Debian: the kernel package runs /etc/kernel/postinst.d/* with the version.
    let postinst = r.join("etc/kernel/postinst.d/zz-leanrd");
    let out = run(&postinst, &[KVER, &format!("/boot/vmlinuz-{KVER}")]);
    let img = r.join(format!("boot/initrd.img-{KVER}"));
    assert!(img.exists(), "{out}");
    let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&img))).unwrap();
    assert!(ls.lines().any(|l| l == "init") && ls.contains("demo.ko"), "{ls}");
    let inspect: serde_json::Value =
        serde_json::from_slice(&ok(leanrd().args(["inspect", "--json"]).arg(&img))).unwrap();
    assert_eq!(inspect["segments"][0]["compression"], "gzip");
    // Same inputs: nothing rebuilt.
    let before = fs::metadata(&img).unwrap().modified().unwrap();
    let out = run(&postinst, &[KVER]);
    assert!(out.contains("up to date"), "{out}");
    assert_eq!(fs::metadata(&img).unwrap().modified().unwrap(), before);
    // A changed input (the module) rebuilds.
    fs::write(
        r.join(format!("lib/modules/{KVER}/kernel/fs/demo/demo.ko")),
        module_elf(KVER, "demo", &noise(2, 6000), false),
    )
    .unwrap();
    let out = run(&postinst, &[KVER]);
    assert!(!out.contains("up to date"), "{out}");

    // kernel-install: add writes the initrd into the entry directory (or staging area).
    let entry = t.join("entry");
    fs::create_dir_all(&entry).unwrap();
    let plugin = r.join("usr/lib/kernel/install.d/50-leanrd.install");
    run(&plugin, &["add", KVER, entry.to_str().unwrap(), "/boot/vmlinuz"]);
    assert!(entry.join("initrd").exists());
    let staging = t.join("staging");
    fs::create_dir_all(&staging).unwrap();
    let o = Command::new(&plugin)
        .args(["add", KVER, entry.to_str().unwrap(), "/boot/vmlinuz"])
        .env("KERNEL_INSTALL_STAGING_AREA", &staging)
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(staging.join("initrd").exists());
    run(&plugin, &["remove", KVER, entry.to_str().unwrap()]);

    // layout=uki (kernel-install's environment): the UKI goes to $BOOT/EFI/Linux/TOKEN-KVER.efi,
    // with /etc/kernel/cmdline; `remove` takes it away.
    let stub = Path::new("/usr/lib/systemd/boot/efi/linuxx64.efi.stub");
    if let (true, Some(kernel)) = (stub.exists(), kernel()) {
        fs::write(r.join("etc/kernel/cmdline"), "root=UUID=1234 quiet leanrd-ki-word\n").unwrap();
        let boot = t.join("esp");
        let uki_env = |c: &mut Command| {
            c.env("KERNEL_INSTALL_LAYOUT", "uki")
                .env("KERNEL_INSTALL_BOOT_ROOT", &boot)
                .env("KERNEL_INSTALL_ENTRY_TOKEN", "leanrdtest");
        };
        let mut c = Command::new(&plugin);
        c.args(["add", KVER, entry.to_str().unwrap()]).arg(&kernel);
        uki_env(&mut c);
        let o = c.output().unwrap();
        assert!(o.status.success(), "layout=uki: {}", String::from_utf8_lossy(&o.stderr));
        let efi = boot.join(format!("EFI/Linux/leanrdtest-{KVER}.efi"));
        let v: serde_json::Value = serde_json::from_slice(&ok(leanrd().args(["inspect", "--json"]).arg(&efi))).unwrap();
        assert!(v["uki"]["initrd_length"].as_u64().unwrap() > 0, "{v}");
        let bytes = fs::read(&efi).unwrap();
        assert!(bytes.windows(15).any(|w| w == b"leanrd-ki-word\0"), "the UKI's .cmdline is /etc/kernel/cmdline");
        let mut c = Command::new(&plugin);
        c.args(["remove", KVER, entry.to_str().unwrap()]);
        uki_env(&mut c);
        assert!(c.status().unwrap().success());
        assert!(!efi.exists(), "remove leaves the UKI");
        // Another generator named in install.conf: the plugin stands aside.
        fs::write(r.join("etc/kernel/install.conf"), "layout=uki\nuki_generator=ukify\n").unwrap();
        run(&plugin, &["add", KVER, entry.to_str().unwrap(), kernel.to_str().unwrap()]);
        assert!(!boot.join("EFI/Linux").read_dir().unwrap().any(|_| true), "ukify's turn, not leanrd's");
    }
    fs::create_dir_all(r.join("etc/kernel")).unwrap();
    fs::write(r.join("etc/kernel/install.conf"), "layout=bls\ninitrd_generator=dracut\n").unwrap();
    let other = t.join("entry-dracut");
    fs::create_dir_all(&other).unwrap();
    run(&plugin, &["add", KVER, other.to_str().unwrap(), "/boot/vmlinuz"]);
    assert!(!other.join("initrd").exists(), "initrd_generator=dracut: leanrd writes nothing");
    fs::remove_file(r.join("etc/kernel/install.conf")).unwrap();

    // An image that would not boot (the promised module left out): both hooks fail, say that
    // the previous image was kept, and keep it byte for byte.
    let conf_path = r.join("etc/leanrd/leanrd.toml");
    let conf = fs::read_to_string(&conf_path).unwrap();
    fs::write(&conf_path, format!("{conf}omit_modules = [\"demo\"]\n")).unwrap();
    for (hook, args, image) in [
        (&postinst, vec![KVER.to_string()], img.clone()),
        (&plugin, vec!["add".into(), KVER.into(), entry.display().to_string()], entry.join("initrd")),
    ] {
        let before = fs::read(&image).unwrap();
        let o = Command::new(hook).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{}: {err}", hook.display());
        assert!(err.contains("demo") && err.contains("was left as it was"), "{}: {err}", hook.display());
        assert_eq!(fs::read(&image).unwrap(), before, "{}: the previous image changed", hook.display());
    }
    fs::write(&conf_path, conf).unwrap();

    // Removal of the kernel removes its image and digest.
    run(&r.join("etc/kernel/postrm.d/zz-leanrd"), &[KVER]);
    assert!(!img.exists());
    assert!(!r.join(format!("boot/initrd.img-{KVER}.leanrd-digest")).exists());

    // --remove undoes everything.
    ok(leanrd().args(["install-hooks", "--remove", "--sysroot"]).arg(&r));
    assert!(!postinst.exists() && !plugin.exists());
    let conf = fs::read_to_string(r.join("etc/initramfs-tools/update-initramfs.conf")).unwrap();
    assert_eq!(conf, "# Debian's\nupdate_initramfs=yes\nbackup_initramfs=no\n");
}

#[test]
fn config_file_settings_and_errors() {
    let t = TempDir::new("config");
    let r = sysroot(&t);
    let out = t.join("img");
    // The config's compression applies; the command line wins over it.
    ok(leanrd().args(["build", "-k", KVER, "--sysroot"]).arg(&r).arg("-o").arg(&out));
    let v: serde_json::Value = serde_json::from_slice(&ok(leanrd().args(["inspect", "--json"]).arg(&out))).unwrap();
    assert_eq!(v["segments"][0]["compression"], "gzip");
    ok(leanrd().args(["build", "--force", "-k", KVER, "--compress", "lz4", "--sysroot"]).arg(&r).arg("-o").arg(&out));
    let v: serde_json::Value = serde_json::from_slice(&ok(leanrd().args(["inspect", "--json"]).arg(&out))).unwrap();
    assert_eq!(v["segments"][0]["compression"], "lz4");
    // An unknown key and a bad value name the file and line.
    for (text, want) in
        [("universal = true\ncolour = \"red\"\n", "unknown field `colour`"), ("compress = \"zip\"\n", "compress")]
    {
        fs::write(r.join("etc/leanrd/leanrd.toml"), text).unwrap();
        let o = leanrd().args(["build", "-k", KVER, "--sysroot"]).arg(&r).arg("-o").arg(&out).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains("leanrd.toml") && err.contains(want), "{err}");
    }
    // Man page and completions come from the CLI definition.
    let man = String::from_utf8(ok(leanrd().arg("man"))).unwrap();
    assert!(man.contains(".TH leanrd") && man.contains("install\\-hooks"));
    // One page per command, with its examples set line by line.
    let ls = String::from_utf8(ok(leanrd().args(["man", "ls"]))).unwrap();
    assert!(ls.contains(".TH leanrd-ls") && ls.contains("\\-\\-parts") && ls.contains(".SH EXAMPLES\n.nf"), "{ls}");
    let pages = TempDir::new("man");
    ok(leanrd().args(["man", "--dir"]).arg(pages.path()));
    for p in [
        "leanrd.1",
        "leanrd-ls.1",
        "leanrd-extract.1",
        "leanrd-analyze.1",
        "leanrd-build.1",
        "leanrd-init.7",
        "leanrd.toml.5",
    ] {
        assert!(pages.join(p).is_file(), "{p} not written");
    }
    // Every page renders without a warning from man (groff's), and has its examples.
    if have("man") {
        for e in fs::read_dir(pages.path()).unwrap().flatten() {
            let o = Command::new("man")
                .args(["--warnings", "-E", "UTF-8", "-l"])
                .arg(e.path())
                .env("MANWIDTH", "80")
                .output()
                .unwrap();
            let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
            assert!(o.status.success() && err.trim().is_empty(), "{}: {err}", e.path().display());
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(out.contains("EXAMPLES"), "{name} has no examples:\n{out}");
        }
    } else {
        skip::<()>("man (man-db) checks the pages: apt install man-db");
    }
    let init = String::from_utf8(ok(leanrd().args(["man", "init"]))).unwrap();
    assert!(init.contains("rd.luks.uuid") && init.contains(".SH EXAMPLES"), "{init}");
    let features = String::from_utf8(ok(leanrd().args(["man", "features"]))).unwrap();
    for d in leanrd_gen::LAYERS {
        assert!(features.contains(&format!("\\fB{}\\fR\n{}", d.name, d.doc.replace('-', "\\-"))), "{}", d.name);
    }
    let config = String::from_utf8(ok(leanrd().args(["man", "config"]))).unwrap();
    assert!(config.contains("module_compression") && config.contains(".SH EXAMPLES"), "{config}");
    // An option's help is its setting's text (one definition for both).
    let flat = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    let help = flat(&String::from_utf8(ok(leanrd().args(["build", "--help"]))).unwrap());
    for x in leanrd_gen::request::SETTINGS {
        assert!(help.contains(&flat(&x.text())), "{}: not its setting's text in --help:\n{help}", x.flag);
    }
    let bash = String::from_utf8(ok(leanrd().args(["completions", "bash"]))).unwrap();
    assert!(bash.contains("install-hooks") && bash.contains("--data-align"));
}

/// Compressed modules are decompressed at build time (signature and all) unless the
/// strategy keeps them and the target kernel decompresses that very format (its
/// configuration's CONFIG_MODULE_COMPRESS_*, not CONFIG_MODULE_DECOMPRESS alone); an unknown
/// configuration is a stated assumption; firmware named in a module's .modinfo is included.
#[test]
fn compressed_modules_and_firmware() {
    let Some(kdir) = fs::read_dir("/lib/modules")
        .ok()
        .and_then(|rd| rd.flatten().map(|e| e.path()).find(|p| p.join("kernel/drivers/tty/moxa.ko").exists()))
    else {
        skip::<()>("no kernel tree with moxa.ko (a module that names firmware): apt install linux-image-amd64");
        return;
    };
    if !have("xz") || !have("zstd") {
        skip::<()>("xz and zstd needed to make compressed modules");
        return;
    }
    // moxa's vermagic names its kernel: the fixture is that kernel's.
    let kver = kdir.file_name().unwrap().to_string_lossy().into_owned();
    let original = fs::read(kdir.join("kernel/drivers/tty/moxa.ko")).unwrap();
    let demo2 = module_elf(&kver, "demo2", &noise(9, 3000), false);
    let xz_kernel = "CONFIG_MODULE_COMPRESS_XZ=y\nCONFIG_MODULE_DECOMPRESS=y\nCONFIG_RD_GZIP=y\n";
    // (configuration, --module-compression, moxa kept as .ko.xz, the note)
    let cases = [
        (None, None, false, "configuration is unknown"),
        (Some("CONFIG_MODULE_DECOMPRESS=y\nCONFIG_RD_GZIP=y\n"), Some("keep"), false, "decompresses no modules"),
        (Some(xz_kernel), Some("keep"), true, "1 .ko.xz kept compressed, 1 .ko.zst stored decompressed"),
        (Some(xz_kernel), None, false, "1 .ko.xz, 1 .ko.zst stored decompressed"),
    ];
    for (config, strategy, kept, note) in cases {
        let t = TempDir::new("kocomp");
        let r = sysroot(&t);
        let m = r.join(format!("lib/modules/{kver}"));
        fs::create_dir_all(m.join("kernel/drivers/tty")).unwrap();
        fs::create_dir_all(m.join("kernel/lib")).unwrap();
        fs::write(m.join("kernel/drivers/tty/moxa.ko"), &original).unwrap();
        fs::write(m.join("kernel/lib/demo2.ko"), &demo2).unwrap();
        let st = Command::new("xz")
            .args(["-q", "--check=crc32"])
            .arg(m.join("kernel/drivers/tty/moxa.ko"))
            .status()
            .unwrap();
        assert!(st.success());
        let st = Command::new("zstd").args(["-q", "--rm"]).arg(m.join("kernel/lib/demo2.ko")).status().unwrap();
        assert!(st.success());
        fs::write(
            m.join("modules.dep"),
            "kernel/drivers/tty/moxa.ko.xz: kernel/lib/demo2.ko.zst\nkernel/lib/demo2.ko.zst:\n",
        )
        .unwrap();
        fs::write(r.join("etc/leanrd/features.d/demo.toml"), "when = \"always\"\nmodules = [\"moxa\"]\n").unwrap();
        // One of moxa's firmware files exists, the other does not (a warning).
        fs::create_dir_all(r.join("lib/firmware")).unwrap();
        fs::write(r.join("lib/firmware/c320tunx.cod"), b"firmware blob").unwrap();
        if let Some(c) = config {
            fs::write(r.join(format!("boot/config-{kver}")), c).unwrap();
        }
        let img = t.join("img");
        let mut cmd = leanrd();
        cmd.args(["build", "-k", &kver, "--sysroot"]).arg(&r).arg("-o").arg(&img);
        if let Some(s) = strategy {
            cmd.args(["--module-compression", s]);
        }
        let o = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert!(err.contains("firmware cp204unx.cod not found"), "{err}");
        assert!(err.contains("leanrd: note: modules: ") && err.contains(note), "{config:?}: {err}");
        assert_eq!(err.contains("no configuration found"), config.is_none(), "{err}");
        let out = t.join("x");
        ok(leanrd().arg("extract").arg(&img).arg("-C").arg(&out));
        let moddir = out.join(format!("lib/modules/{kver}/kernel"));
        // The kernel cannot decompress zstd in any case: stored decompressed.
        assert_eq!(fs::read(moddir.join("lib/demo2.ko")).unwrap(), demo2);
        let dep = fs::read_to_string(out.join(format!("lib/modules/{kver}/modules.dep"))).unwrap();
        if kept {
            assert!(moddir.join("drivers/tty/moxa.ko.xz").exists());
            assert!(dep.contains("kernel/drivers/tty/moxa.ko.xz: kernel/lib/demo2.ko\n"), "{dep}");
        } else {
            // Decompressed, byte for byte (the appended signature included).
            assert_eq!(fs::read(moddir.join("drivers/tty/moxa.ko")).unwrap(), original);
            assert!(dep.contains("kernel/drivers/tty/moxa.ko: kernel/lib/demo2.ko\n"), "{dep}");
        }
        assert_eq!(fs::read(out.join("lib/firmware/c320tunx.cod")).unwrap(), b"firmware blob");
    }
    // The image's compression must be one the kernel unpacks (CONFIG_RD_*): refused, the
    // previous image kept.
    let t = TempDir::new("kocomp-rd");
    let r = sysroot(&t);
    fs::write(r.join(format!("boot/config-{KVER}")), "CONFIG_RD_ZSTD=y\n# CONFIG_RD_GZIP is not set\n").unwrap();
    let img = t.join("img");
    fs::write(&img, b"previous").unwrap();
    let o = leanrd().args(["build", "-k", KVER, "--sysroot"]).arg(&r).arg("-o").arg(&img).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("compressed with gzip but kernel")
            && err.contains("CONFIG_RD_GZIP is not set"),
        "{err}"
    );
    assert_eq!(fs::read(&img).unwrap(), b"previous");
}

/// A module built for another kernel (its vermagic) is refused by the build, named with the
/// reason, and the previous image stays; `verify` reports the same of an image forced out.
#[test]
fn build_refuses_a_module_of_another_kernel() {
    let t = TempDir::new("vermagic");
    let r = sysroot(&t);
    let other = module_elf("6.1.0-56-amd64", "demo", &noise(3, 2000), false);
    fs::write(r.join(format!("lib/modules/{KVER}/kernel/fs/demo/demo.ko")), other).unwrap();
    let img = t.join("img");
    fs::write(&img, b"previous").unwrap();
    let o = leanrd().args(["build", "-k", KVER, "--sysroot"]).arg(&r).arg("-o").arg(&img).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains(
            "1 module kernel 9.9.9-leanrd-test cannot load as stored: built for kernel 6.1.0-56-amd64 (vermagic)"
        ) && err.contains("kernel/fs/demo/demo.ko"),
        "{err}"
    );
    assert_eq!(fs::read(&img).unwrap(), b"previous");
}

/// Every command example of every man page (section 1) runs, or says it needs root: those
/// that start with `sudo` change or read this machine (/boot, the hooks, the journal), and are
/// run on the VMs of the boot suites instead. The others run here, each in a directory of
/// its own holding the files they name (IMG and the other images, a tree, a manifest, a
/// serial log), in a mount namespace with /boot on a tmpfs: an example that writes there
/// writes nothing on the host. Paths of this machine's images become the fixture image;
/// a build for the running kernel gets `-k` when that kernel has no module tree here.
#[test]
fn every_man_page_example_runs_or_needs_root() {
    if !is_root() || !have("unshare") || !have("jq") || !have("zstd") || !have("man") {
        skip::<()>("the man pages' examples need root (a mount namespace), unshare, jq, zstd and man");
        return;
    }
    let Some(kver) = kver() else { return };
    let init = init_binary().expect("the static /init builds");
    let t = TempDir::new("examples");
    let pages = t.join("man");
    ok(leanrd().args(["man", "--dir"]).arg(&pages));
    // The fixtures every example's directory starts with.
    let fx = t.join("fixtures");
    for (path, body) in [
        ("early/kernel/x86/microcode/GenuineIntel.bin", "microcode"),
        ("main/etc/leanrd/init.conf", "root=/dev/vda1\n"),
        ("main/init", "#!/bin/sh\n"),
        ("main/usr/lib/modules/6.1.0-test/kernel/fs/ext4/ext4.ko", "module"),
        ("tree/etc/hostname", "leanrd\n"),
        ("more/etc/motd", "a second segment\n"),
        ("home/.zfunc/.keep", ""),
        ("home/.local/share/bash-completion/completions/.keep", ""),
        ("tmp/.keep", ""),
    ] {
        let p = fx.join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, body).unwrap();
    }
    let img = fx.join("IMG");
    ok(leanrd().args(["cpio", "-c", "none", "--root"]).arg(fx.join("early")).arg("-o").arg(&img));
    ok(leanrd().args(["cpio", "-c", "zstd", "--append", "--root"]).arg(fx.join("main")).arg("-o").arg(&img));
    for copy in ["img", "old.img", "new.img", "a.img", "b.img", "second.img", "other.img"] {
        fs::copy(&img, fx.join(copy)).unwrap();
    }
    sh(&format!("zstd -q {} -o {}", img.display(), fx.join("img.zst").display()));
    fs::write(fx.join("manifest.txt"), "dir /etc 755 0 0\nfile /etc/hostname /etc/hostname 644 0 0\n").unwrap();
    let serial = "[    1.000000] Run /init as init process\n[    1.100000] leanrd: root mounted\n\
                  [    1.200000] leanrd: switching to the new root\n";
    fs::write(fx.join("serial.log"), serial).unwrap();
    fs::write(fx.join("leanrd.log"), "[    1.100000] leanrd: root mounted\n").unwrap();
    fs::write(fx.join("journal.txt"), "[    2.000000] host systemd[1]: Startup finished in 1s.\n").unwrap();
    let modules_here = Path::new("/lib/modules").join(running_kernel()).is_dir();
    let (mut ran, mut marked, mut failed) = (0, 0, Vec::new());
    let mut names: Vec<_> = fs::read_dir(&pages).unwrap().flatten().map(|e| e.path()).collect();
    names.sort();
    for page in names.iter().filter(|p| p.extension().is_some_and(|x| x == "1")) {
        let text = fs::read_to_string(page).unwrap();
        let Some(ex) = text.split(".SH EXAMPLES\n").nth(1) else {
            failed.push(format!("{}: no EXAMPLES", page.display()));
            continue;
        };
        let block = ex.split(".fi").next().unwrap_or_default();
        for line in block.lines().filter(|l| l.starts_with("  ") && l.trim_start().len() + 2 == l.len()) {
            let line = line.replace("\\-", "-");
            let cmd = line.trim().split("  ").next().unwrap().trim().to_string();
            if cmd.starts_with("sudo ") {
                marked += 1;
                continue;
            }
            let dir = t.join(format!("run-{ran}"));
            sh(&format!("cp -a {} {}", fx.display(), dir.display()));
            let mut run = cmd
                .replace("/boot/initrd.img-$(uname -r)", "IMG")
                .replace("/boot/initrd.img.old", "old.img")
                .replace("/boot/initrd.img", "IMG")
                .replace("/tmp/", &format!("{}/tmp/", dir.display()))
                .replace("/srv/root", "/")
                .replace("KVER", &kver);
            if !modules_here && run.starts_with("leanrd build") && !run.contains(" -k ") {
                run = run.replacen("leanrd build", &format!("leanrd build -k {kver}"), 1);
            }
            let bin = leanrd_testkit::boot::leanrd_path().parent().unwrap().display().to_string();
            let o = Command::new("unshare")
                .args([
                    "-m",
                    "sh",
                    "-c",
                    "mount --make-rprivate / && mount -t tmpfs leanrd-examples /boot && cd \"$1\" && eval \"$2\"",
                    "sh",
                ])
                .arg(&dir)
                .arg(&run)
                .env("PATH", format!("{bin}:/usr/sbin:/usr/bin:/sbin:/bin"))
                .env("HOME", dir.join("home"))
                .env("LEANRD_INIT", &init)
                .env("MANPAGER", "cat")
                .env("MANWIDTH", "80")
                .output()
                .unwrap();
            ran += 1;
            if !o.status.success() {
                let page = page.file_name().unwrap().to_string_lossy();
                failed.push(format!("{page}: `{cmd}` (ran as `{run}`): {}", String::from_utf8_lossy(&o.stderr).trim()));
            }
        }
    }
    eprintln!("man page examples: {ran} ran, {marked} need root (sudo)");
    assert!(failed.is_empty(), "examples that do not run:\n{}", failed.join("\n"));
    assert!(ran >= 30 && marked >= 5, "{ran} ran, {marked} marked: the examples were not found");
}

/// The running kernel's release.
fn running_kernel() -> String {
    String::from_utf8(ok(Command::new("uname").arg("-r"))).unwrap().trim().to_string()
}
