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
//! Needs root, mmdebstrap (the first run makes the root), zstd, xz, depmod and
//! systemd-boot-efi's stub.

mod common;

use std::fs;
use std::path::Path;

use common::debian::*;
use common::*;
use leanrd_testkit::scenario::arch_layout;

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

#[test]
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

    // The Arch layout: .ko.zst, which this kernel cannot decompress.
    let arch = t.join("arch");
    sh(&format!("cp -a {} {}", tree.display(), arch.display()));
    arch_layout(&arch, &kver);
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
