//! The real-system proof: a Debian bookworm root made by mmdebstrap (systemd, udev; cached by
//! tools/debian-root) with the host's Debian kernel modules, booted under QEMU TCG by images
//! leanrd built. Every boot must reach multi-user.target with `systemctl is-system-running` =
//! running: a unit in the root prints that state, and what the test checks, on the serial
//! console, then powers off.
//!
//! - The matrix, universal images: ext4 on virtio-blk (module options from the root's
//!   modprobe.d and from the command line; `rw`, so the initramfs checks it first), btrfs subvolume @ on virtio-scsi (with
//!   `modprobe.blacklist=`), ext4 root + XFS /usr (named by the root's fstab; by `mount.usr=`),
//!   btrfs raid1 across two disks, ext4 root on LVM, and root and /usr on LVM (the volumes
//!   made by a prep VM: the host kernel has no device-mapper).
//! - Self-hosted host-only: the root boots a universal image, runs `leanrd build` with no
//!   options on its own devices, and boots again with the image it built, with nothing on the
//!   command line but the console: btrfs @ on virtio-scsi, ext4 on NVMe, btrfs @ on AHCI, and
//!   the separate-/usr disks. Each image it built must hold exactly its disks' storage drivers.
//!
//! Needs root, qemu, mmdebstrap (the first run makes the root: about a minute), mkfs.ext4,
//! mkfs.xfs, mkfs.btrfs and sfdisk. About six minutes on two cores.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::debian::*;
use common::*;

/// The LVM disk: volume group vg0 on one disk with `root` (the whole tree), `sroot` (the
/// root of the split tree, its fstab naming /usr on `usr`) and `usr`, made in a prep VM
/// (the host has no device-mapper) by copying ext4 images made here. Returns the prep
/// image and the disks its boot needs: the LVM disk first.
fn lvm_prep(t: &TempDir, kver: &str, tree: &Path, split_root: &Path, split_usr: &Path) -> Option<(PathBuf, Vec<Disk>)> {
    let whole = ext4_image(t, "lvm-root", 2048, &uuid(21), tree, Some("/dev/mapper/vg0-root / ext4 defaults 0 1\n"));
    let sroot_fstab = "/dev/mapper/vg0-sroot / ext4 defaults 0 1\n/dev/mapper/vg0-usr /usr ext4 defaults 0 2\n";
    let sroot = ext4_image(t, "lvm-sroot", 256, &uuid(22), split_root, Some(sroot_fstab));
    let usr = ext4_image(t, "lvm-usr", 2048, &uuid(23), split_usr, None);
    let lvm = t.join("lvm.disk");
    sh(&format!("truncate -s 4600M {}", lvm.display()));
    let body = "$lvm pvcreate -y --config \"$C\" /dev/vda && $lvm vgcreate --config \"$C\" vg0 /dev/vda && \
                $lvm lvcreate -y --config \"$C\" -L 2048M -n root vg0 && \
                $lvm lvcreate -y --config \"$C\" -L 256M -n sroot vg0 && \
                $lvm lvcreate -y --config \"$C\" -L 2048M -n usr vg0 && \
                $e2image -ra /dev/vdb /dev/mapper/vg0-root && $e2image -ra /dev/vdc /dev/mapper/vg0-sroot && \
                $e2image -ra /dev/vdd /dev/mapper/vg0-usr && $lvm vgchange -an --config \"$C\" vg0 && \
                sync && echo PREP-DONE";
    let modules = ["virtio_pci", "virtio_blk", "dm_mod"];
    let img = common::prep::image(t.path(), kver, &["lvm", "e2image"], &modules, "vdd", body, None)?;
    let disks =
        [lvm, whole, sroot, usr].into_iter().map(|path| Disk { path, gpt: false, bus: Bus::VirtioBlk }).collect();
    Some((img, disks))
}

/// A file out of the encrypted disk's /boot.
fn take_boot_file(t: &TempDir, disk: &Disk, path: &str, out: &Path) {
    let mnt = t.join("take-boot.mnt");
    fs::create_dir_all(&mnt).unwrap();
    let m = mnt.display();
    sh(&format!(
        "set -e; l=$(losetup -f --show -r -o {o} --sizelimit {s} {d}); trap 'umount {m} 2>/dev/null || true; \
         losetup -d $l' EXIT; mount -o ro $l {m}; cp {m}/{path} {out}; umount {m}",
        o = BOOT_START_MB << 20,
        s = BOOT_MB << 20,
        d = disk.path.display(),
        out = out.display()
    ));
}

/// The storage drivers (drivers/{ata,block,md,nvme,scsi}) among `modules` paths.
fn storage(paths: impl Iterator<Item = String>) -> BTreeSet<String> {
    let dirs = ["/drivers/ata/", "/drivers/block/", "/drivers/md/", "/drivers/nvme/", "/drivers/scsi/"];
    paths.filter(|p| dirs.iter().any(|d| p.contains(d))).map(|p| leanrd_kmod::name_of_path(&p)).collect()
}

/// The storage drivers modprobe would load for `what` (with their dependencies).
fn storage_closure(kver: &str, what: &[&str]) -> BTreeSet<String> {
    let mut paths = Vec::new();
    for w in what {
        let o = ok(Command::new("modprobe").args(["-S", kver, "--show-depends", w]));
        for l in String::from_utf8_lossy(&o).lines() {
            if let Some(p) = l.strip_prefix("insmod ") {
                paths.push(p.split_whitespace().next().unwrap().to_string());
            }
        }
    }
    storage(paths.into_iter())
}

/// The modules an image holds, by path.
fn image_modules(img: &Path) -> Vec<String> {
    let out = String::from_utf8(ok(leanrd().arg("ls").arg(img))).unwrap();
    out.lines().filter_map(|l| l.split_whitespace().last()).filter(|p| p.contains(".ko")).map(str::to_string).collect()
}

#[test]
fn debian_root_boots_and_builds_its_own_host_only_image() {
    let Some((kernel, init, kver, t)) =
        setup("debian", &["mkfs.ext4", "mkfs.xfs", "mkfs.btrfs", "sfdisk", "losetup", "modprobe"])
    else {
        return;
    };
    let Some(tree) = prepare(&t, &kver, &init, "") else { return };
    // The root split for a separate /usr: the root (with an empty /usr) and /usr's tree.
    let (split_root, split_usr) = (t.join("split-root"), t.join("split-usr"));
    sh(&format!(
        "cp -al {tr} {r} && mv {r}/usr {u} && mkdir {r}/usr",
        tr = tree.display(),
        r = split_root.display(),
        u = split_usr.display()
    ));

    let univ = t.join("universal.img");
    ok(leanrd()
        .args(["build", "-k", &kver, "--universal", "--sysroot"])
        .arg(&tree)
        .arg("--init")
        .arg(&init)
        .arg("-o")
        .arg(&univ));

    let root_line = |u: &str, kind: &str, opts: &str| format!("UUID={u} / {kind} {opts} 0 1\n");
    let ext4 = |n| Fs { kind: "ext4", uuid: uuid(n), subvol: false };
    let btrfs = |n| Fs { kind: "btrfs", uuid: uuid(n), subvol: true };
    let xfs = |n| Fs { kind: "xfs", uuid: uuid(n), subvol: false };
    let btrfs_fstab = |f: &Fs| root_line(&f.uuid, "btrfs", "defaults,subvol=@").replace(" 0 1", " 0 0");

    // The matrix: universal images, disks written to a snapshot.
    let f1 = ext4(1);
    let d1 = make(&t, "ext4-vblk", true, Bus::VirtioBlk, &f1, &tree, Some(&root_line(&f1.uuid, "ext4", "defaults")));
    let f2 = btrfs(2);
    let d2 = make(&t, "btrfs-vscsi", true, Bus::VirtioScsi, &f2, &tree, Some(&btrfs_fstab(&f2)));
    let scratch = Disk { path: t.join("scratch.disk"), gpt: false, bus: Bus::VirtioBlk };
    sh(&format!("truncate -s 16M {}", scratch.path.display()));
    let (f4r, f4u) = (ext4(4), xfs(5));
    let d4r = make(
        &t,
        "usr-cmdline-root",
        false,
        Bus::VirtioBlk,
        &f4r,
        &split_root,
        Some(&root_line(&f4r.uuid, "ext4", "defaults")),
    );
    let d4u = make(&t, "usr-cmdline-usr", false, Bus::VirtioBlk, &f4u, &split_usr, None);
    let f5 = btrfs(6);
    let d5 = make(&t, "btrfs-raid1", false, Bus::VirtioBlk, &f5, &tree, Some(&btrfs_fstab(&f5)));

    // Self-hosted: writable disks, first booted with the universal image and told to build.
    let s1f = btrfs(11);
    let s1 = make(&t, "self-btrfs-vscsi", true, Bus::VirtioScsi, &s1f, &tree, Some(&btrfs_fstab(&s1f)));
    let s2f = ext4(12);
    let s2 = make(&t, "self-ext4-nvme", true, Bus::Nvme, &s2f, &tree, Some(&root_line(&s2f.uuid, "ext4", "defaults")));
    let s3f = btrfs(13);
    let s3 = make(&t, "self-btrfs-ahci", true, Bus::Ahci, &s3f, &tree, Some(&btrfs_fstab(&s3f)));
    let (s4r, s4u) = (ext4(14), xfs(15));
    let usr_fstab = root_line(&s4r.uuid, "ext4", "defaults") + &format!("UUID={} /usr xfs defaults 0 0\n", s4u.uuid);
    let s4 = make(&t, "self-usr-root", false, Bus::VirtioBlk, &s4r, &split_root, Some(&usr_fstab));
    let s4usr = make(&t, "self-usr-usr", false, Bus::VirtioBlk, &s4u, &split_usr, None);

    let self_hosted: Vec<(&str, Vec<&Disk>, &Fs, Vec<&str>)> = vec![
        ("self btrfs@ virtio-scsi", s1.iter().collect(), &s1f, vec!["virtio_scsi", "sd_mod"]),
        ("self ext4 NVMe", s2.iter().collect(), &s2f, vec!["nvme"]),
        ("self btrfs@ AHCI", s3.iter().collect(), &s3f, vec!["ahci", "sd_mod"]),
        ("self ext4 + XFS /usr (fstab) virtio-blk", with_usr(&s4, &s4usr), &s4r, vec!["virtio_blk"]),
    ];
    let flags = |f: &Fs| {
        if f.subvol { format!("root=UUID={} rootflags=subvol=@", f.uuid) } else { format!("root=UUID={}", f.uuid) }
    };

    let mut first = vec![
        Boot::new(
            "ext4 virtio-blk, module options",
            &univ,
            &format!("root=UUID={} rw fsck.mode=force virtio_blk.num_request_queues=1 leanrd.test=journal", f1.uuid),
            qemu_args(&d1.iter().collect::<Vec<_>>(), true),
        )
        .expect("LEANRD-PARAM queue_depth=64")
        .expect("LEANRD-PARAM num_request_queues=1")
        .expect(" mode 600")
        // `rw`: the initramfs checks the root before it mounts it.
        .expect("checking /dev/vda1: e2fsck -a -f /dev/vda1")
        // Nothing loaded for nothing: no md/raid stack on a plain disk, no helper missing.
        .reject("] loaded raid456")
        .reject("] loaded dm_mod")
        .reject("cannot run")
        // QEMU's CD-ROM is left to the root's udev (no sr_mod, no cdrom in the initramfs).
        .expect("left to the system: scsi:t-0x05")
        .reject("] loaded sr_mod"),
        Boot::new(
            "btrfs@ virtio-scsi, modprobe.blacklist=virtio_blk",
            &univ,
            &format!("{} modprobe.blacklist=virtio_blk", flags(&f2)),
            qemu_args(&[&d2[0], &scratch], true),
        )
        .expect("LEANRD-PARAM queue_depth=absent")
        .expect("subvol=/@"),
        Boot::new(
            "ext4 + XFS /usr by mount.usr=",
            &univ,
            &format!("root=UUID={} mount.usr=UUID={} mount.usrfstype=xfs", f4r.uuid, f4u.uuid),
            qemu_args(&with_usr(&d4r, &d4u), true),
        )
        .expect("LEANRD-USR /dev/vdb xfs"),
        Boot::new("btrfs raid1 on two disks", &univ, &flags(&f5), qemu_args(&d5.iter().collect::<Vec<_>>(), true))
            .expect("subvol=/@"),
    ];
    for (name, disks, f, _) in &self_hosted {
        let rw = if name.contains("NVMe") { " rw" } else { "" };
        let b = Boot::new(name, &univ, &format!("{}{rw} leanrd.test=selfbuild", flags(f)), qemu_args(disks, false))
            .expect("LEANRD-SELFBUILD ok");
        first.push(if name.contains("/usr") { b.expect("LEANRD-USR /dev/vdb xfs") } else { b });
    }
    // The LVM disk is made by a prep VM alongside; its boots come in the second round.
    let lvm = lvm_prep(&t, &kver, &tree, &split_root, &split_usr);
    if let Some((prep, disks)) = &lvm {
        let mut b = Boot::new("prep: LVM volumes", prep, "", qemu_args(&disks.iter().collect::<Vec<_>>(), false));
        b.expect = vec!["PREP-DONE".into()];
        first.insert(0, b);
    }
    let luks = luks_prep(&t, &kver, &tree);
    if let Some((prep, disks, _)) = &luks {
        let mut b = Boot::new("prep: LUKS root", prep, "", qemu_args(&disks.iter().collect::<Vec<_>>(), false));
        b.expect = vec!["PREP-DONE".into()];
        first.insert(0, b);
    }
    let (mut failed, outcomes) = run_keep(&kernel, &first);
    // `leanrd analyze` on that boot's record and journal (printed by the report unit).
    if let Some(o) = first.iter().zip(&outcomes).find(|(b, _)| b.name.starts_with("ext4 virtio-blk")).map(|x| x.1) {
        analyze_boot(&t, &o.log);
    }

    // The images they built: exactly their disks' storage drivers; then boot them with
    // nothing on the command line (root, rootflags, /usr: all from the image).
    let mut second = Vec::new();
    for (name, disks, f, drivers) in &self_hosted {
        if failed.iter().any(|n| n == name) {
            continue;
        }
        let slug: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        let img = t.join(format!("{slug}.img"));
        take_file(&t, disks[0], f.subvol, &format!("boot/initrd.img-{kver}"), &img);
        let mods = image_modules(&img);
        let got = storage(mods.iter().cloned());
        let want = storage_closure(&kver, drivers);
        assert_eq!(got, want, "{name}: the host-only image's storage drivers");
        let fs_mod = if f.kind == "btrfs" { "/btrfs.ko" } else { "/ext4.ko" };
        assert!(mods.iter().any(|m| m.contains(fs_mod)), "{name}: no {fs_mod} in {mods:?}");
        if name.contains("/usr") {
            assert!(mods.iter().any(|m| m.contains("/xfs.ko")), "{name}: no xfs for /usr");
        }
        // The checker comes along only where the initramfs mounts an ext4 root read-write (the
        // NVMe case boots with `rw`) and the fstab asks (pass 1); read-only roots are the root's
        // systemd-fsck's.
        let listing = String::from_utf8(ok(leanrd().arg("ls").arg(&img))).unwrap();
        let rw = name.contains("NVMe");
        assert_eq!(listing.contains("bin/e2fsck"), f.kind == "ext4" && rw, "{name}: e2fsck in the image?");
        let host = format!("{name}, host-only");
        let b = Boot::new(&host, &img, "", qemu_args(disks, false));
        second.push(if name.contains("/usr") { b.expect("LEANRD-USR /dev/vdb xfs") } else { b });
    }
    if let Some((_, disks)) = lvm.as_ref().filter(|_| !failed.iter().any(|n| n.starts_with("prep"))) {
        let q = qemu_args(&[&disks[0]], true);
        second.push(
            Boot::new("ext4 root on LVM", &univ, "root=/dev/mapper/vg0-root", q.clone())
                .expect("LEANRD-ROOT /dev/mapper/vg0-root ext4"),
        );
        second.push(
            Boot::new("ext4 root and /usr on LVM (fstab)", &univ, "root=/dev/mapper/vg0-sroot", q)
                .expect("LEANRD-ROOT /dev/mapper/vg0-sroot ext4")
                .expect("LEANRD-USR /dev/mapper/vg0-usr ext4"),
        );
    }
    let luks_ok = luks.as_ref().filter(|_| !failed.iter().any(|n| n == "prep: LUKS root"));
    const LUKS_ROOT: &str = "LEANRD-ROOT /dev/mapper/sda3_crypt ext4";
    if let Some((_, disks, _)) = luks_ok {
        // The installer's way to boot it: root=/dev/mapper/sda3_crypt, the passphrase typed;
        // then the system builds its own host-only image into /boot.
        second.push(
            Boot::new(
                "LUKS root (installer layout), builds its own image",
                &univ,
                "root=/dev/mapper/sda3_crypt leanrd.test=selfbuild",
                qemu_args(&[&disks[0]], false),
            )
            .typing(PASS)
            .expect(LUKS_ROOT)
            .expect("LEANRD-SELFBUILD ok"),
        );
    }
    failed.extend(run(&kernel, &second));
    // Its own image: crypttab's entry, cryptsetup, its keyboard; booted with nothing on the
    // command line.
    if let Some((_, disks, _)) = luks_ok.filter(|_| !failed.iter().any(|n| n.starts_with("LUKS root"))) {
        let img = t.join("luks-host.img");
        take_boot_file(&t, &disks[0], &format!("initrd.img-{kver}"), &img);
        let listing = String::from_utf8(ok(leanrd().arg("ls").arg(&img))).unwrap();
        assert!(listing.contains("sbin/cryptsetup"), "no cryptsetup in the LUKS root's own image");
        let x = t.join("luks-host.x");
        ok(leanrd().arg("extract").arg(&img).arg("-C").arg(&x));
        let conf = fs::read_to_string(x.join("etc/leanrd/init.conf")).unwrap();
        assert!(conf.contains(&format!("crypt sda3_crypt UUID={} none luks,discard needed", uuid(31))), "{conf}");
        let third = [Boot::new("LUKS root, its own host-only image", &img, "", qemu_args(&[&disks[0]], true))
            .typing(PASS)
            .expect(LUKS_ROOT)];
        failed.extend(run(&kernel, &third));
    }
    assert!(failed.is_empty(), "failed boots: {failed:?}");
}

/// `leanrd analyze` reads a real boot: /init's record and the journal give every phase, the
/// module loads in lanes, and an SVG that a real renderer (rsvg-convert) draws.
fn analyze_boot(t: &TempDir, log: &str) {
    let lines = |prefix: &str| -> String {
        log.lines().filter_map(|l| l.trim_end_matches('\r').strip_prefix(prefix)).map(|l| format!("{l}\n")).collect()
    };
    let (rec, jour) = (t.join("boot.leanrd.log"), t.join("boot.journal"));
    fs::write(&rec, lines("LEANRD-INITRD ")).unwrap();
    fs::write(&jour, lines("LEANRD-JOURNAL ")).unwrap();
    let svg = t.join("boot.svg");
    let out = String::from_utf8(ok(leanrd().arg("analyze").arg(&rec).arg(&jour).arg("--svg").arg(&svg))).unwrap();
    eprintln!("leanrd analyze:\n{out}");
    let phase = |label: &str| -> f64 {
        let l = out.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no {label}:\n{out}"));
        l[label.len()..].trim().trim_end_matches(" s").parse().unwrap_or_else(|_| panic!("{label}: {l}"))
    };
    let (kernel, initramfs, root) =
        (phase("kernel until /init"), phase("initramfs (/init)"), phase("root system to multi-user"));
    assert!(kernel > 0.0 && initramfs > 0.0 && root > 0.0, "{out}");
    assert!(out.contains("module loads") && out.contains("switching to the new root"), "{out}");
    let png = t.join("boot.png");
    let o = std::process::Command::new("rsvg-convert").arg("-o").arg(&png).arg(&svg).output().unwrap();
    assert!(o.status.success(), "rsvg-convert: {}", String::from_utf8_lossy(&o.stderr));
    assert!(fs::metadata(&png).unwrap().len() > 10_000);
}
