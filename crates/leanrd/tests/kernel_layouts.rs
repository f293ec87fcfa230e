//! Debian 13's kernel as other distributions lay it out, and both module strategies, on the
//! cached trixie root (its own 6.12 kernel, every module a `.ko.xz`,
//! `CONFIG_MODULE_DECOMPRESS=y` with `CONFIG_MODULE_COMPRESS_XZ=y`). The images these make
//! boot in the boot scenarios (tests/boot/scenarios.toml: debian13_*); here, what the builds
//! say and store, and what `verify` refuses:
//!
//! - the default stores the modules decompressed, `--module-compression keep` keeps `.ko.xz`;
//! - the Arch layout (modules recompressed as `.ko.zst` with depmod run, the configuration
//!   and vmlinuz in the module directory): the kernel decompresses only xz, so leanrd stores
//!   them decompressed; an image that kept `.ko.zst` is refused by `verify`, naming the module
//!   and the reason; `leanrd build --uki` finds that vmlinuz.
//!
//! - decompressed modules are cached by the identity of their files: a second build reads
//!   no `.ko.xz` and makes the same image, and a changed or damaged entry is not used.
//!
//! Needs root, mmdebstrap (the first run makes the root), zstd, xz, depmod and
//! systemd-boot-efi's stub.

mod common;

use std::fs;
use std::path::Path;

use common::debian::*;
use common::*;
use leanrd_testkit::scenario::{Root, arch_tree};

fn build(tree: &Path, kver: &str, init: &Path, out: &Path, extra: &[&str]) -> String {
    let o = leanrd()
        .args(["build", "-k", kver, "--universal", "--sysroot"])
        .arg(tree)
        .arg("--init")
        .arg(init)
        .arg("-o")
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "leanrd build {extra:?}: {err}");
    err
}

fn debian13_layouts_build_and_verify() {
    let Some((_kernel, init, kver, t)) = setup_trixie("trixie-layouts", &["zstd", "xz", "depmod"]) else { return };
    let Some(tree) = prepare_trixie(&t, &init, "") else { return };
    let config = fs::read_to_string(tree.join(format!("boot/config-{kver}"))).unwrap();
    assert!(config.contains("CONFIG_MODULE_COMPRESS_XZ=y\n") && config.contains("CONFIG_MODULE_DECOMPRESS=y\n"));

    // Both module strategies, from the same tree.
    let univ = t.join("universal.img");
    let err = build(&tree, &kver, &init, &univ, &[]);
    assert!(err.contains(".ko.xz stored decompressed (kernel 6.") && err.contains("decompresses .xz modules"), "{err}");
    let kept = t.join("kept.img");
    let err = build(&tree, &kver, &init, &kept, &["--module-compression", "keep"]);
    assert!(err.contains(".ko.xz kept compressed") && !err.contains("stored decompressed"), "{err}");
    let listing = String::from_utf8(ok(leanrd().arg("ls").arg(&kept))).unwrap();
    assert!(listing.contains("/ext4.ko.xz"), "the kept image stores .ko.xz");
    let listing = String::from_utf8(ok(leanrd().arg("ls").arg(&univ))).unwrap();
    assert!(listing.contains("/ext4.ko\n") && !listing.contains(".ko.xz"), "the default image stores plain .ko");

    // The Arch layout: .ko.zst, which this kernel cannot decompress (the scenarios' Arch
    // tree, made once per process, copied: the liar below changes it).
    let Some((base, _)) = arch_tree(Root::Debian13) else { return };
    let arch = t.join("arch");
    sh(&format!("cp -a {} {}", base.display(), arch.display()));
    let zst_img = t.join("zst.img");
    let err = build(&arch, &kver, &init, &zst_img, &["--module-compression", "keep"]);
    assert!(
        err.contains(".ko.zst stored decompressed (kernel 6.") && err.contains("decompresses .xz modules"),
        "{err}"
    );
    let listing = String::from_utf8(ok(leanrd().arg("ls").arg(&zst_img))).unwrap();
    assert!(listing.contains("/ext4.ko\n") && !listing.contains(".ko.zst"), "the .ko.zst were stored decompressed");
    // A UKI from that layout finds the kernel beside the modules (no /boot/vmlinuz-KVER).
    let efi = t.join("arch.efi");
    let o = leanrd()
        .args(["build", "-k", &kver, "--universal", "--uki", "--cmdline", "quiet", "--sysroot"])
        .arg(&arch)
        .arg("--init")
        .arg(&init)
        .arg("-o")
        .arg(&efi)
        .output()
        .unwrap();
    assert!(o.status.success(), "UKI from the Arch layout: {}", String::from_utf8_lossy(&o.stderr));
    let vmlinuz = fs::metadata(arch.join(format!("usr/lib/modules/{kver}/vmlinuz"))).unwrap().len();
    assert!(fs::metadata(&efi).unwrap().len() > vmlinuz, "the UKI holds the kernel");
    // An image that kept them (built against a configuration that claims zstd) is refused
    // by verify against the kernel's real one.
    let liar = t.join("arch-liar");
    sh(&format!("cp -al {} {}", arch.display(), liar.display()));
    let lconf = liar.join(format!("usr/lib/modules/{kver}/config"));
    let text = fs::read_to_string(&lconf).unwrap();
    fs::remove_file(&lconf).unwrap();
    fs::write(
        &lconf,
        text.replace(
            "CONFIG_MODULE_COMPRESS_XZ=y",
            "# CONFIG_MODULE_COMPRESS_XZ is not set\nCONFIG_MODULE_COMPRESS_ZSTD=y",
        ),
    )
    .unwrap();
    let bad = t.join("kept-zst.img");
    let err = build(&liar, &kver, &init, &bad, &["--module-compression", "keep"]);
    assert!(err.contains(".ko.zst kept compressed"), "{err}");
    let o = leanrd().args(["verify", "--kernel", &kver, "--sysroot"]).arg(&arch).arg(&bad).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "verify passed an image of .ko.zst for an xz-only kernel: {out}");
    assert!(
        out.contains("cannot load as stored: compressed with zstd, and the kernel decompresses only xz modules")
            && out.contains(".ko.zst"),
        "{out}"
    );
    // The image leanrd made from that layout passes.
    let o = leanrd().args(["verify", "--kernel", &kver, "--sysroot"]).arg(&arch).arg(&zst_img).output().unwrap();
    assert!(o.status.success(), "verify: {}", String::from_utf8_lossy(&o.stdout));
}

fn decompressed_modules_are_cached_by_their_files_identity() {
    let Some((_kernel, init, kver, t)) = setup_trixie("trixie-cache", &["xz"]) else { return };
    let Some(tree) = prepare_trixie(&t, &init, "") else { return };
    let cache = t.join("cache");
    let with_cache = |out: &Path, extra: &[&str]| {
        let o = leanrd()
            .env("LEANRD_CACHE_DIR", &cache)
            .env("SOURCE_DATE_EPOCH", "1")
            .args(["build", "-k", &kver, "--universal", "--force", "--sysroot"])
            .arg(&tree)
            .arg("--init")
            .arg(&init)
            .arg("-o")
            .arg(out)
            .args(extra)
            .output()
            .unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let entries = |ext: &str| {
        fs::read_dir(cache.join("modules").join(&kver))
            .map(|d| d.flatten().filter(|e| e.path().extension().is_some_and(|x| x == ext)).count())
            .unwrap_or(0)
    };
    let plain = t.join("plain.img");
    let o = leanrd()
        .env("SOURCE_DATE_EPOCH", "1")
        .args(["build", "-k", &kver, "--universal", "--sysroot"])
        .arg(&tree)
        .arg("--init")
        .arg(&init)
        .arg("-o")
        .arg(&plain)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(entries("ko"), 0, "LEANRD_CACHE_DIR= (empty) uses no cache");

    // Filled by the first build, used by the second: the same bytes as without a cache.
    let (first, second) = (t.join("first.img"), t.join("second.img"));
    let (ok1, err) = with_cache(&first, &[]);
    assert!(ok1, "{err}");
    let n = entries("ko");
    assert!(n > 400 && n == entries("json"), "{n} modules cached");
    let (ok2, err) = with_cache(&second, &[]);
    assert!(ok2, "{err}");
    assert_eq!(entries("ko"), n, "the second build made no new entry");
    // The modules' compressed segment was kept by the first and copied in by the second.
    assert!(err.contains("modules' segment reused"), "{err}");
    let segments = || {
        fs::read_dir(cache.join("modules").join(&kver))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("segment-"))
            .count()
    };
    assert_eq!(segments(), 1);
    let bytes = fs::read(&plain).unwrap();
    assert!(fs::read(&first).unwrap() == bytes && fs::read(&second).unwrap() == bytes, "cached builds differ");
    // `keep` takes the facts from the cache: the same image as without it.
    let (kept_plain, kept_cached) = (t.join("kept-plain.img"), t.join("kept-cached.img"));
    let o = leanrd()
        .env("SOURCE_DATE_EPOCH", "1")
        .args(["build", "-k", &kver, "--universal", "--module-compression", "keep", "--sysroot"])
        .arg(&tree)
        .arg("--init")
        .arg(&init)
        .arg("-o")
        .arg(&kept_plain)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (ok3, err) = with_cache(&kept_cached, &["--module-compression", "keep"]);
    assert!(ok3, "{err}");
    assert!(!err.contains("reused") && segments() == 2, "other module files, another segment: {err}");
    assert!(fs::read(&kept_plain).unwrap() == fs::read(&kept_cached).unwrap(), "kept images differ");

    // A module file replaced (another inode, other content): its entry is not used. Its
    // new content does not decompress: the build says which file.
    let ext4 = fs::read_dir(tree.join(format!("usr/lib/modules/{kver}/kernel/fs/ext4")))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with("ext4.ko.xz"))
        .unwrap();
    let good = fs::read(&ext4).unwrap();
    fs::remove_file(&ext4).unwrap();
    let mut bad = good.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0xff;
    fs::write(&ext4, &bad).unwrap();
    let (ok4, err) = with_cache(&t.join("bad.img"), &[]);
    assert!(!ok4 && err.contains("ext4.ko.xz: cannot decompress"), "a changed module was taken from the cache: {err}");
    // Put back (yet another inode): built again, the same image.
    fs::remove_file(&ext4).unwrap();
    fs::write(&ext4, &good).unwrap();
    // An entry cut short (a crash before its data reached the disk) is made again.
    for e in fs::read_dir(cache.join("modules").join(&kver)).unwrap().flatten().take(5) {
        if e.path().extension().is_some_and(|x| x == "ko") {
            fs::write(e.path(), b"").unwrap();
        }
    }
    let again = t.join("again.img");
    let (ok5, err) = with_cache(&again, &[]);
    assert!(ok5, "{err}");
    assert!(fs::read(&again).unwrap() == bytes, "an image from a damaged cache differs");
    // Its module files are new entries: a new segment, the same bytes.
    assert!(!err.contains("reused") && segments() == 3, "{err}");
}

/// kernel-install (systemd 257, in a chroot of the Arch layout) finds the kernel in the module
/// directory (`add-all`: every /usr/lib/modules/KVER/vmlinuz) and hands it to leanrd's plugin:
/// with layout=bls, the entry gets leanrd's initrd; with layout=uki, leanrd's UKI holds that
/// very kernel. Both images pass `verify` against the tree.
fn kernel_install_takes_the_kernel_from_the_module_directory() {
    let Some((_kernel, init, kver, t)) = setup_trixie("trixie-ki", &["zstd", "xz", "depmod", "chroot"]) else {
        return;
    };
    let stub = Path::new("/usr/lib/systemd/boot/efi/linuxx64.efi.stub");
    if !stub.exists() {
        skip::<()>("needs systemd-boot-efi's stub");
        return;
    }
    // The scenarios' Arch tree (made once per process), copied: this test writes to it.
    let Some((base, _)) = arch_tree(Root::Debian13) else { return };
    let arch = t.join("arch");
    sh(&format!("cp -a {} {}", base.display(), arch.display()));
    assert!(!arch.join(format!("boot/vmlinuz-{kver}")).exists());
    add_tools(&arch, &init);
    let (done, log) = in_chroot(&arch, None, "leanrd install-hooks");
    assert!(done, "leanrd install-hooks in the tree: {log}");
    // Host detection is not what this is about (the chroot sees this machine): universal.
    fs::create_dir_all(arch.join("etc/leanrd")).unwrap();
    fs::write(arch.join("etc/leanrd/leanrd.toml"), "universal = true\n").unwrap();
    let in_tree_stub = arch.join(stub.strip_prefix("/").unwrap());
    fs::create_dir_all(in_tree_stub.parent().unwrap()).unwrap();
    fs::copy(stub, &in_tree_stub).unwrap();
    fs::write(arch.join("etc/kernel/cmdline"), "root=UUID=1234 ro leanrd-ki-word\n").unwrap();
    let vmlinuz = fs::read(arch.join(format!("usr/lib/modules/{kver}/vmlinuz"))).unwrap();
    let ki = |layout: &str| {
        fs::write(arch.join("etc/kernel/install.conf"), format!("layout={layout}\n")).unwrap();
        let (done, log) = in_chroot(
            &arch,
            None,
            // kernel-install wants $BOOT to be a file system's root (a bind mount here) and,
            // unless relaxed, a FAT ESP.
            "mkdir -p /efi && mount --bind /efi /efi && SYSTEMD_RELAX_ESP_CHECKS=1 SYSTEMD_RELAX_XBOOTLDR_CHECKS=1 \
             kernel-install --verbose --esp-path=/efi --boot-path=/efi --entry-token=literal:leanrdtest \
             --make-entry-directory=yes add-all; rc=$?; umount /efi; exit $rc",
        );
        assert!(done, "kernel-install add-all, layout={layout}: {log}");
        log
    };
    let verify = |img: &Path| {
        let o = leanrd().args(["verify", "--kernel", &kver, "--sysroot"]).arg(&arch).arg(img).output().unwrap();
        assert!(o.status.success(), "verify {}: {}", img.display(), String::from_utf8_lossy(&o.stdout));
    };

    let log = ki("bls");
    let entry = arch.join(format!("efi/leanrdtest/{kver}"));
    let listing = || {
        String::from_utf8_lossy(&std::process::Command::new("find").arg(arch.join("efi")).output().unwrap().stdout)
            .into_owned()
    };
    assert!(entry.join("linux").exists(), "no entry {}: {}\n{log}", entry.display(), listing());
    assert_eq!(fs::read(entry.join("linux")).unwrap(), vmlinuz, "the entry's kernel is the module directory's: {log}");
    let initrd = entry.join("initrd");
    let v: serde_json::Value = serde_json::from_slice(&ok(leanrd().args(["inspect", "--json"]).arg(&initrd))).unwrap();
    assert!(v["generator"].to_string().contains("leanrd"), "the entry's initrd is leanrd's: {v}\n{log}");
    verify(&initrd);
    let conf = fs::read_to_string(arch.join(format!("efi/loader/entries/leanrdtest-{kver}.conf"))).unwrap();
    assert!(conf.contains(&format!("/leanrdtest/{kver}/initrd")), "{conf}");

    let log = ki("uki");
    let efi = arch.join(format!("efi/EFI/Linux/leanrdtest-{kver}.efi"));
    assert!(efi.exists(), "no UKI from leanrd's plugin: {log}");
    let bytes = fs::read(&efi).unwrap();
    let at = bytes.windows(4096).position(|w| w == &vmlinuz[..4096]);
    assert!(
        at.is_some_and(|at| bytes.get(at..at + vmlinuz.len()) == Some(&vmlinuz[..])),
        "the UKI's kernel is the module directory's"
    );
    assert!(bytes.windows(15).any(|w| w == b"leanrd-ki-word\n" || w == b"leanrd-ki-word\0"), "/etc/kernel/cmdline");
    let v: serde_json::Value = serde_json::from_slice(&ok(leanrd().args(["inspect", "--json"]).arg(&efi))).unwrap();
    assert!(v["uki"]["initrd_length"].as_u64().unwrap() > 0, "{v}");
}

/// Its own main (libtest-mimic): the Arch tree the tests share lives in the scenarios' scratch
/// directory, which `run_tests` removes when the tests are done (a static is never dropped).
fn main() -> std::process::ExitCode {
    let tests: [(&str, fn()); 3] = [
        ("debian13_layouts_build_and_verify", debian13_layouts_build_and_verify),
        (
            "decompressed_modules_are_cached_by_their_files_identity",
            decompressed_modules_are_cached_by_their_files_identity,
        ),
        (
            "kernel_install_takes_the_kernel_from_the_module_directory",
            kernel_install_takes_the_kernel_from_the_module_directory,
        ),
    ];
    let trials = tests
        .into_iter()
        .map(|(name, f)| {
            test(name, move || {
                f();
                Ok(())
            })
        })
        .collect();
    run_tests(trials, cores())
}
