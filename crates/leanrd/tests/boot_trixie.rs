//! Debian 13 (trixie) as a first-class root: its own 6.12 kernel from the root's /boot, every
//! module a `.ko.xz` (`CONFIG_MODULE_DECOMPRESS=y` with `CONFIG_MODULE_COMPRESS_XZ=y`),
//! booted under QEMU TCG by images leanrd built. Every boot must reach multi-user.target with
//! `systemctl is-system-running` = running (the report unit of tools/boot-report).
//!
//! - Universal images under both module strategies: decompressed at build time (ext4 on
//!   virtio-blk, with module options from modprobe.d and the command line; an XFS /usr named
//!   by `mount.usr=`; btrfs raid1 on two disks), and `.ko.xz` kept for the kernel to
//!   decompress (btrfs subvolume @ on virtio-scsi).
//! - Self-hosted host-only: the root boots the universal image, runs `leanrd build` with no
//!   options on its own NVMe disk, and boots again with what it built, nothing on the
//!   command line.
//! - The installer's encrypted root (ESP, /boot, LUKS2 holding ext4 named by crypttab, made in
//!   a prep VM) with the passphrase typed on the serial console.
//! - Other distributions' layouts, made from this kernel: the modules recompressed as
//!   `.ko.zst` with depmod run (Arch, Ubuntu), the configuration in the module directory
//!   (Arch) and vmlinuz beside the modules (Fedora, Arch). The kernel decompresses only xz,
//!   so leanrd stores them decompressed and that image boots; an image that kept `.ko.zst`
//!   is refused by `verify`, naming the module and the reason; `leanrd build --uki` finds
//!   that vmlinuz.
//!
//! Needs root, qemu, mmdebstrap (the first run makes the root: two or three minutes),
//! mkfs.ext4, mkfs.btrfs, mkfs.xfs, sfdisk, zstd, xz, depmod and systemd-boot-efi's stub.

mod common;

use std::fs;
use std::path::Path;

use common::debian::*;
use common::*;

/// The tree `tree` re-laid as Arch lays a kernel out: modules `.ko.zst` (recompressed from
/// `.ko.xz`, depmod run), the configuration at /usr/lib/modules/KVER/config and none in
/// /boot, vmlinuz at /usr/lib/modules/KVER/vmlinuz.
fn arch_layout(tree: &Path, kver: &str) {
    let m = tree.join(format!("usr/lib/modules/{kver}"));
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    sh(&format!(
        "cd {m} && find kernel -name '*.ko.xz' -print0 | xargs -0 -P{jobs} -n64 sh -c \
         'for f; do xz -dc \"$f\" | zstd -q -3 -o \"${{f%.xz}}.zst\" && rm \"$f\"; done' sh",
        m = m.display()
    ));
    sh(&format!("depmod -b {} {kver}", tree.display()));
    fs::rename(tree.join(format!("boot/config-{kver}")), m.join("config")).unwrap();
    fs::rename(tree.join(format!("boot/vmlinuz-{kver}")), m.join("vmlinuz")).unwrap();
    let dep = fs::read_to_string(m.join("modules.dep")).unwrap();
    assert!(dep.contains("ext4.ko.zst:") && !dep.contains(".ko.xz"), "depmod did not index the .ko.zst modules");
}

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
fn debian13_boots() {
    let need = ["mkfs.ext4", "mkfs.btrfs", "mkfs.xfs", "sfdisk", "zstd", "xz", "depmod"];
    let Some((kernel, init, kver, t)) = setup_trixie("trixie", &need) else { return };
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

    let root_line = |u: &str, kind: &str, opts: &str| format!("UUID={u} / {kind} {opts} 0 1\n");
    let f1 = Fs { kind: "ext4", uuid: uuid(41), subvol: false };
    let d1 = make(&t, "t-ext4-vblk", true, Bus::VirtioBlk, &f1, &tree, Some(&root_line(&f1.uuid, "ext4", "defaults")));
    let f2 = Fs { kind: "btrfs", uuid: uuid(42), subvol: true };
    let btrfs_fstab = root_line(&f2.uuid, "btrfs", "defaults,subvol=@").replace(" 0 1", " 0 0");
    let d2 = make(&t, "t-btrfs-vscsi", true, Bus::VirtioScsi, &f2, &tree, Some(&btrfs_fstab));
    let f3 = Fs { kind: "ext4", uuid: uuid(43), subvol: false };
    let d3 = make(&t, "t-self-nvme", true, Bus::Nvme, &f3, &tree, Some(&root_line(&f3.uuid, "ext4", "defaults")));
    let vblk = qemu_args(&d1.iter().collect::<Vec<_>>(), true);
    // A separate /usr (merged-usr: the root's /lib, /bin are links into it) and btrfs raid1.
    let (split_root, split_usr) = (t.join("split-root"), t.join("split-usr"));
    sh(&format!(
        "cp -al {tr} {r} && mv {r}/usr {u} && mkdir {r}/usr",
        tr = tree.display(),
        r = split_root.display(),
        u = split_usr.display()
    ));
    let (f4r, f4u) =
        (Fs { kind: "ext4", uuid: uuid(44), subvol: false }, Fs { kind: "xfs", uuid: uuid(45), subvol: false });
    let d4r = make(
        &t,
        "t-usr-root",
        false,
        Bus::VirtioBlk,
        &f4r,
        &split_root,
        Some(&root_line(&f4r.uuid, "ext4", "defaults")),
    );
    let d4u = make(&t, "t-usr-usr", false, Bus::VirtioBlk, &f4u, &split_usr, None);
    let f5 = Fs { kind: "btrfs", uuid: uuid(46), subvol: true };
    let raid1_fstab = root_line(&f5.uuid, "btrfs", "defaults,subvol=@").replace(" 0 1", " 0 0");
    let d5 = make(&t, "t-btrfs-raid1", false, Bus::VirtioBlk, &f5, &tree, Some(&raid1_fstab));

    let first: Vec<Boot> = vec![
        Boot::new(
            "trixie universal, modules decompressed: ext4 virtio-blk, module options",
            &univ,
            &format!("root=UUID={} virtio_blk.num_request_queues=1", f1.uuid),
            vblk.clone(),
        )
        .expect("LEANRD-PARAM queue_depth=64")
        .expect("LEANRD-PARAM num_request_queues=1")
        .reject("Exec format error"),
        Boot::new(
            "trixie universal, .ko.xz kept: btrfs@ virtio-scsi",
            &kept,
            &format!("root=UUID={} rootflags=subvol=@", f2.uuid),
            qemu_args(&d2.iter().collect::<Vec<_>>(), true),
        )
        .expect("subvol=/@")
        .reject("Exec format error"),
        Boot::new(
            "trixie .ko.zst (Arch layout) stored decompressed: ext4 virtio-blk",
            &zst_img,
            &format!("root=UUID={}", f1.uuid),
            vblk,
        )
        .reject("Exec format error"),
        Boot::new(
            "trixie ext4 + XFS /usr by mount.usr=",
            &univ,
            &format!("root=UUID={} mount.usr=UUID={} mount.usrfstype=xfs", f4r.uuid, f4u.uuid),
            qemu_args(&with_usr(&d4r, &d4u), true),
        )
        .expect("LEANRD-USR /dev/vdb xfs"),
        Boot::new(
            "trixie btrfs raid1 on two disks",
            &univ,
            &format!("root=UUID={} rootflags=subvol=@", f5.uuid),
            qemu_args(&d5.iter().collect::<Vec<_>>(), true),
        )
        .expect("subvol=/@"),
        Boot::new(
            "trixie self ext4 NVMe",
            &univ,
            &format!("root=UUID={} rw leanrd.test=selfbuild", f3.uuid),
            qemu_args(&d3.iter().collect::<Vec<_>>(), false),
        )
        .expect("LEANRD-SELFBUILD ok"),
    ];
    // The installer's encrypted root (GPT, ESP, /boot, LUKS2 holding ext4, crypttab), made by
    // a prep VM on the host's kernel (the host has no device-mapper); booted with Debian 13's
    // kernel and the passphrase typed.
    // The prep image is built from the host's modules: the host's kernel runs it, beside the
    // first round (the VM slots keep it to one VM per core).
    let luks = match common::kernel() {
        Some(host) => luks_prep(&t, &kver_of(&host), &tree).map(|l| (host, l)),
        None => None,
    };
    let (mut failed, prep_failed) = std::thread::scope(|s| {
        let prep = s.spawn(|| match &luks {
            Some((host, (prep, disks, _))) => {
                let mut b = Boot::new("prep: LUKS root", prep, "", qemu_args(&disks.iter().collect::<Vec<_>>(), false));
                b.expect = vec!["PREP-DONE".into()];
                run(host, &[b])
            }
            None => Vec::new(),
        });
        let failed = run(&kernel, &first);
        (failed, prep.join().expect("the prep thread"))
    });
    let mut second = Vec::new();
    if !failed.iter().any(|n| n.contains("self")) {
        let img = t.join("self-nvme.img");
        take_file(&t, &d3[0], false, &format!("boot/initrd.img-{kver}"), &img);
        let listing = String::from_utf8(ok(leanrd().arg("ls").arg(&img))).unwrap();
        assert!(
            listing.contains("/nvme.ko") && !listing.contains("/virtio_blk.ko"),
            "host-only NVMe image:\n{listing}"
        );
        second.push(
            Boot::new("trixie self ext4 NVMe, host-only", &img, "", qemu_args(&[&d3[0]], false))
                .reject("Exec format error"),
        );
    }
    if let Some((_, (_, disks, _))) = luks.as_ref().filter(|_| prep_failed.is_empty()) {
        second.push(
            Boot::new(
                "trixie LUKS root (installer layout), passphrase typed",
                &univ,
                "root=/dev/mapper/sda3_crypt",
                qemu_args(&[&disks[0]], true),
            )
            .typing(PASS)
            .expect("LEANRD-ROOT /dev/mapper/sda3_crypt ext4"),
        );
    }
    failed.extend(prep_failed);
    failed.extend(run(&kernel, &second));
    assert!(failed.is_empty(), "failed boots: {failed:?}");
}
