//! arm64: the aarch64 /init (tools/arm64 init: built in a Debian 13 chroot with its rustc
//! and aarch64 standard library) in a universal image that this x86_64 leanrd builds from a
//! sysroot holding Debian 13's arm64 kernel (tools/arm64 sysroot: linux-image-arm64 with its
//! `.ko.xz` modules and depmod's tables). qemu-system-aarch64 (TCG, the `virt` machine with a
//! Cortex-A57) boots it: ext4 on virtio-blk over virtio-mmio, and btrfs on virtio-scsi over
//! PCIe, each a busybox root that prints the marker with `uname -m`. The boot proof refuses
//! the x86_64 /init for that kernel. An arm64 UKI (`--uki`: the sysroot's linuxaa64.efi.stub,
//! chosen by its architecture) is started by AAVMF, the arm64 UEFI firmware, from a FAT ESP,
//! with the machine's device tree (renamed) in its `.dtb`, which the kernel boots on.
//!
//! leanrd itself built for aarch64 (tools/arm64 leanrd), installed from the arm64 Debian
//! package (tools/make-deb --arm64), builds a host-only image inside the arm64 VM with no
//! options, and the image boots that machine again.
//!
//! Not yet: Debian arm64 roots with systemd, LUKS (see docs/limitations.md).
//!
//! Needs root, qemu-system-arm, qemu-efi-aarch64, mmdebstrap, btrfs-progs, e2fsprogs,
//! dosfstools, mtools, cargo-deb and binutils.

mod common;

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::*;
use leanrd_testkit::boot::{tail, workspace};

const MARK: &str = "LEANRD-ARM64-ROOT-OK";

/// The aarch64 /init, the arm64 sysroot and its kernel release.
struct Setup {
    t: TempDir,
    init: PathBuf,
    sysroot: PathBuf,
    kver: String,
    image: PathBuf,
}

fn tool(args: &[&str]) -> String {
    let o = Command::new(workspace().join("tools/arm64")).args(args).stderr(Stdio::inherit()).output().unwrap();
    assert!(o.status.success(), "tools/arm64 {args:?} failed");
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

fn setup() -> Option<&'static Setup> {
    static S: std::sync::OnceLock<Result<Option<Setup>, String>> = std::sync::OnceLock::new();
    once(&S, || {
        let need = ["qemu-system-aarch64", "mmdebstrap", "mkfs.btrfs", "mkfs.ext4", "depmod"];
        if !is_root() || need.iter().any(|t| !have(t)) {
            return skip(&format!("needs root and {need:?} (apt install qemu-system-arm mmdebstrap btrfs-progs)"));
        }
        let init = PathBuf::from(tool(&["init"]));
        let line = tool(&["sysroot"]);
        let (sysroot, kver) = line.split_once(' ').expect("DIR KVER");
        let (sysroot, kver) = (PathBuf::from(sysroot), kver.to_string());
        let t = TempDir::new("arm64");
        let image = t.join("universal.img");
        // No --init: this x86-64 leanrd finds the aarch64 /init beside it (the development
        // tree's target/aarch64-unknown-linux-gnu/init/leanrd-init, where tools/arm64 put it),
        // by the sysroot's architecture.
        let o = leanrd()
            .args(["build", "--universal", "-k", &kver, "--sysroot"])
            .arg(&sysroot)
            .env_remove("LEANRD_INIT")
            .arg("-o")
            .arg(&image)
            .output()
            .unwrap();
        assert!(o.status.success(), "leanrd build for arm64: {}", String::from_utf8_lossy(&o.stderr));
        Some(Setup { t, init, sysroot, kver, image })
    })
    .as_ref()
}

/// A busybox root (the sysroot's arm64 busybox) as a file system of `fstype`, for the test
/// `name` (each its own: they run side by side).
fn root_disk(s: &Setup, fstype: &str, name: &str) -> PathBuf {
    let r = busybox_tree(
        s,
        name,
        &format!(
            "$b mount -t proc proc /proc\n\
             $b echo {MARK} $($b uname -m) $($b grep ' / ' /proc/mounts) $($b cat /proc/cmdline)\n\
             $b poweroff -f\n"
        ),
    );
    let img = s.t.join(format!("root-{name}.{fstype}"));
    let mkfs = if fstype == "btrfs" { "mkfs.btrfs -q -L armroot -r" } else { "mkfs.ext4 -q -L armroot -d" };
    sh(&format!("truncate -s 160M {i} && {mkfs} {r} {i}", i = img.display(), r = r.display()));
    img
}

/// A root tree of the sysroot's arm64 busybox for the test `name`, whose /sbin/init is `script`
/// (busybox as `$b`).
fn busybox_tree(s: &Setup, name: &str, script: &str) -> PathBuf {
    let r = s.t.join(format!("root-{name}"));
    for d in ["bin", "sbin", "proc", "sys", "dev"] {
        fs::create_dir_all(r.join(d)).unwrap();
    }
    fs::copy(s.sysroot.join("usr/bin/busybox"), r.join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", r.join("bin/sh")).unwrap();
    fs::write(r.join("sbin/init"), format!("#!/bin/sh\nb=/bin/busybox\n{script}")).unwrap();
    sh(&format!("chmod 755 {}", r.join("sbin/init").display()));
    r
}

/// Boot the universal image on QEMU's virt machine with `disk` (QEMU arguments) and
/// `root=`; the console.
fn boot(s: &Setup, root: &str, disk: &[String]) -> String {
    boot_image(s, &s.image, root, disk)
}

/// [`boot`] with `image` as the initramfs and `append` after the console and debug words.
fn boot_image(s: &Setup, image: &std::path::Path, append: &str, disk: &[String]) -> String {
    let _slot = vm_slot();
    let kernel = s.sysroot.join(format!("boot/vmlinuz-{}", s.kver));
    let mut c = Command::new("timeout");
    c.args(["--signal=KILL", "300", "qemu-system-aarch64", "-M", "virt"])
        .args(MACHINE)
        .args(["-nographic", "-no-reboot", "-monitor", "none", "-nic", "none", "-kernel"])
        .arg(&kernel)
        .arg("-initrd")
        .arg(image)
        .args(["-append", &format!("console=ttyAMA0 panic=-1 leanrd.debug {append}")])
        .args(disk)
        .stdin(Stdio::null());
    let o = c.output().unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn check(name: &str, log: &str, want: &[&str]) {
    let kept = leanrd_testkit::boot::console_path(&format!("arm64-{name}"));
    let _ = fs::create_dir_all(kept.parent().unwrap()).and_then(|()| fs::write(&kept, log));
    let missing: Vec<&&str> = want.iter().filter(|w| !log.contains(**w)).collect();
    assert!(missing.is_empty(), "{name}: missing {missing:?}:\n{}", tail(log));
    // The step log's durations come from the aarch64 clock_gettime: not all zero.
    let timed = log.lines().filter(|l| l.contains("leanrd: loaded ")).any(|l| !l.trim_end().ends_with("(0 ms)"));
    assert!(timed, "{name}: every module load took 0 ms: the clock is not read\n{}", tail(log));
    if let Some(l) = log.lines().find(|l| l.contains(MARK)) {
        eprintln!("{name}: {}", l.trim());
    }
}

fn ext4_virtio_mmio(s: &Setup) {
    let disk = root_disk(s, "ext4", "ext4-virtio-mmio");
    let log = boot(s, "root=/dev/vda", &["-drive".into(), format!("file={},if=virtio,format=raw", disk.display())]);
    check("ext4-virtio-mmio", &log, &["leanrd: loaded virtio_mmio", "mounted /dev/vda (ext4, ro)", MARK, "aarch64"]);
}

fn btrfs_virtio_scsi_pci(s: &Setup) {
    let disk = root_disk(s, "btrfs", "btrfs-virtio-scsi");
    let q = [
        "-device".to_string(),
        "virtio-scsi-pci,id=scsi0".into(),
        "-drive".into(),
        format!("file={},if=none,id=d0,format=raw", disk.display()),
        "-device".into(),
        "scsi-hd,drive=d0,bus=scsi0.0".into(),
    ];
    let log = boot(s, "root=/dev/sda", &q);
    check(
        "btrfs-virtio-scsi-pci",
        &log,
        &["leanrd: loaded virtio_scsi", "mounted /dev/sda (btrfs, ro)", MARK, "aarch64"],
    );
}

/// A host-only image built inside the arm64 VM with no options, by leanrd itself built for
/// aarch64 (tools/arm64 leanrd: this leanrd's sources, Debian 13's rustc, the aarch64 /init
/// embedded). The busybox root gets the sysroot's C library, its kernel's modules and that
/// leanrd; its /sbin/init, started by the universal image, runs `leanrd build -o
/// /boot/host-only.img` and powers off. The image, taken out of the disk, boots the same
/// machine with nothing on the command line about the root: the image knows it.
fn hostonly_in_vm(s: &Setup) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    if !Command::new(&cargo).args(["deb", "--version"]).output().is_ok_and(|o| o.status.success()) || !have("readelf") {
        skip::<()>("needs cargo-deb (cargo install cargo-deb) and readelf (binutils)");
        return;
    }
    let deb = arm64_package();
    let r = busybox_tree(
        s,
        "hostonly",
        "$b mount -t proc proc /proc\n$b mount -t sysfs sys /sys\n$b mount -t devtmpfs dev /dev\n\
         if [ -e /boot/host-only.img ]; then\n\
           $b echo LEANRD-ARM64-HOSTONLY-BOOTED $($b uname -m) $($b grep ' / ' /proc/mounts)\n\
         else\n\
           $b mount -o remount,rw /\n\
           /usr/bin/leanrd build -o /boot/host-only.img 2>&1\n\
           $b echo LEANRD-ARM64-HOSTONLY-BUILT rc=$?\n\
           $b sync\n\
         fi\n\
         $b poweroff -f\n",
    );
    for d in ["boot", "tmp", "run", "usr/bin", "usr/lib/modules"] {
        fs::create_dir_all(r.join(d)).unwrap();
    }
    std::os::unix::fs::symlink("usr/lib", r.join("lib")).unwrap();
    // leanrd as the arm64 package installs it.
    sh(&format!("dpkg-deb -x {} {}", deb.display(), r.display()));
    sh(&format!(
        "cp -a {s}/usr/lib/aarch64-linux-gnu {s}/usr/lib/ld-linux-aarch64.so.1 {r}/usr/lib/ && \
         cp -a {s}/usr/lib/modules/{k} {r}/usr/lib/modules/",
        s = s.sysroot.display(),
        r = r.display(),
        k = s.kver
    ));
    let img = s.t.join("root-hostonly.ext4");
    sh(&format!("truncate -s 640M {i} && mkfs.ext4 -q -L a64host -d {r} {i}", i = img.display(), r = r.display()));
    let disk = ["-drive".to_string(), format!("file={},if=virtio,format=raw", img.display())];
    let log = boot(s, "root=LABEL=a64host", &disk);
    check("hostonly-build", &log, &["LEANRD-ARM64-HOSTONLY-BUILT rc=0", "features base fs-ext4", "(host-only)"]);
    let built = s.t.join("host-only.img");
    sh(&format!("debugfs -R 'dump /boot/host-only.img {}' {} 2>/dev/null", built.display(), img.display()));
    let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&built))).unwrap();
    assert!(ls.contains("kernel/fs/ext4/ext4.ko") && ls.contains("virtio_blk.ko"), "{ls}");
    let log = boot_image(s, &built, "", &disk);
    check("hostonly-boot", &log, &["LEANRD-ARM64-HOSTONLY-BOOTED aarch64 /dev/vda / ext4"]);
}

/// The arm64 Debian package (tools/make-deb --arm64), checked: its architecture, its files
/// of that architecture, and the C library it depends on new enough for every GLIBC symbol
/// version its leanrd needs (cargo-deb cannot work that out for a foreign binary: the
/// manifest names it; weak symbols, which std looks up at run time, do not count).
fn arm64_package() -> PathBuf {
    let o = Command::new(workspace().join("tools/make-deb")).arg("--arm64").output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "tools/make-deb --arm64: {out}");
    let deb =
        PathBuf::from(out.lines().rev().find(|l| l.trim_end().ends_with(".deb")).expect("the .deb's path").trim());
    let field = |f: &str| String::from_utf8(ok(Command::new("dpkg-deb").arg("-f").arg(&deb).arg(f))).unwrap();
    assert_eq!(field("Architecture").trim(), "arm64");
    let depends = field("Depends");
    let version = |v: &str| v.split('.').map(|n| n.parse::<u32>().unwrap_or(0)).collect::<Vec<_>>();
    let libc = depends
        .split(',')
        .find_map(|d| d.trim().strip_prefix("libc6 (>= ")?.strip_suffix(')').map(version))
        .unwrap_or_else(|| panic!("no libc6 version in Depends: {depends}"));
    let t = TempDir::new("arm64-deb");
    let x = t.join("x");
    sh(&format!("dpkg-deb -x {} {}", deb.display(), x.display()));
    for f in ["usr/bin/leanrd", "usr/lib/leanrd/leanrd-init"] {
        let head = fs::read(x.join(f)).unwrap();
        assert_eq!(u16::from_le_bytes([head[18], head[19]]), 183, "{f}: not an aarch64 ELF (EM_AARCH64)");
    }
    let syms = String::from_utf8(ok(Command::new("readelf").args(["-W", "--dyn-syms"]).arg(x.join("usr/bin/leanrd"))))
        .unwrap();
    let needed = syms
        .lines()
        .filter(|l| !l.split_whitespace().any(|w| w == "WEAK"))
        .filter_map(|l| l.split("@GLIBC_").nth(1))
        .map(|v| version(v.split_whitespace().next().unwrap_or(v)))
        .max()
        .expect("leanrd needs some GLIBC symbol");
    assert!(needed <= libc, "the package depends on libc6 >= {libc:?}, its leanrd needs GLIBC {needed:?}");
    eprintln!("{}: arm64, Depends: {}", deb.display(), depends.trim());
    deb
}

/// The virt machine's CPU and memory, in every boot (and the device tree dumped for the UKI).
const MACHINE: [&str; 4] = ["-cpu", "cortex-a57", "-m", "1024"];

/// The AAVMF firmware image and its variable store's template (qemu-efi-aarch64).
const AAVMF: [&str; 2] = ["/usr/share/AAVMF/AAVMF_CODE.fd", "/usr/share/AAVMF/AAVMF_VARS.fd"];

/// An arm64 UKI, its stub chosen by the sysroot's architecture, started by AAVMF from
/// \EFI\BOOT\BOOTAA64.EFI on a FAT ESP: the kernel's command line is the UKI's (its word
/// is checked in the root), the root is found by its label.
fn uki_aavmf(s: &Setup) {
    if !AAVMF.iter().all(|p| std::path::Path::new(p).exists()) || !have("mcopy") || !have("mkfs.vfat") {
        skip::<()>(&format!("needs {AAVMF:?} (apt install qemu-efi-aarch64), mtools and dosfstools"));
        return;
    }
    let efi = s.t.join("arm64.efi");
    let cmdline = "console=ttyAMA0 panic=-1 leanrd.debug root=LABEL=armroot leanrd.uki=arm64";
    // The machine's own device tree with its model renamed, for the UKI's .dtb: AAVMF gives the
    // kernel ACPI and no device tree ("EFI stub: Generating empty DTB"), so the kernel's
    // "Machine model: " line shows that the stub installed the UKI's, and that it booted on it.
    // Dumped from the machine as it boots (its firmware loaded: QEMU then leaves out the PL061
    // GPIO for ACPI's power button, and a tree that has it stops the kernel on a bus error).
    let dtb = s.t.join("virt.dtb");
    let vars = s.t.join("arm64-vars.fd");
    fs::copy(AAVMF[1], &vars).unwrap();
    let flash = [
        "-drive".to_string(),
        format!("if=pflash,format=raw,readonly=on,file={}", AAVMF[0]),
        "-drive".into(),
        format!("if=pflash,format=raw,file={}", vars.display()),
    ];
    let o = Command::new("qemu-system-aarch64")
        .args(["-M", &format!("virt,dumpdtb={}", dtb.display()), "-nographic"])
        .args(MACHINE)
        .args(&flash)
        .output()
        .unwrap();
    assert!(o.status.success(), "qemu-system-aarch64 dumpdtb: {}", String::from_utf8_lossy(&o.stderr));
    let mut blob = fs::read(&dtb).unwrap();
    // Packed (as `dtc` or fdt_pack would): QEMU dumps it in a 1 MiB buffer, its header saying
    // so, and the kernel printed nothing on the 1 MiB blob, from the UKI or from QEMU's `-dtb`;
    // the blocks end at 7.5 KiB. The header: off_dt_struct at 8, off_dt_strings at 12, their sizes at 36 and 32.
    let be32 = |b: &[u8], o: usize| u32::from_be_bytes(b[o..o + 4].try_into().unwrap());
    let end = (be32(&blob, 8) + be32(&blob, 36)).max(be32(&blob, 12) + be32(&blob, 32));
    blob.truncate(end as usize);
    blob[4..8].copy_from_slice(&end.to_be_bytes());
    // In place and of the same length (no dtc here): the model and the root's compatible
    // string, which nothing on arm64 matches drivers against.
    let (from, to) = (b"linux,dummy-virt", b"leanrd,uki-dtb-1");
    let at: Vec<usize> = blob.windows(from.len()).enumerate().filter(|(_, w)| w == from).map(|(i, _)| i).collect();
    assert!(!at.is_empty(), "QEMU's virt device tree has no {:?}", String::from_utf8_lossy(from));
    for i in at {
        blob[i..i + to.len()].copy_from_slice(to);
    }
    fs::write(&dtb, blob).unwrap();
    let o = leanrd()
        .args(["build", "--universal", "-k", &s.kver, "--sysroot"])
        .arg(&s.sysroot)
        .env_remove("LEANRD_INIT")
        .args(["--uki", "--cmdline", cmdline, "--devicetree"])
        .arg(&dtb)
        .arg("-o")
        .arg(&efi)
        .output()
        .unwrap();
    assert!(o.status.success(), "leanrd build --uki for arm64: {}", String::from_utf8_lossy(&o.stderr));
    // This machine's objdump reads x86 PE images only: leanrd's reader says what it is.
    let bytes = fs::read(&efi).unwrap();
    assert_eq!(leanrd_archive::uki::pe_arch(&bytes), Some("aarch64"), "not an arm64 PE image");
    let names: Vec<String> = leanrd_archive::uki::sections(&bytes).into_iter().map(|x| x.name).collect();
    for want in [".dtb", ".initrd", ".linux"] {
        assert!(names.iter().any(|n| n == want), "no {want} section: {names:?}");
    }
    let esp = esp(&s.t, "arm64", &efi, "BOOTAA64.EFI");
    let disk = root_disk(s, "ext4", "uki-aavmf");
    let _slot = vm_slot();
    let mut c = Command::new("timeout");
    c.args(["--signal=KILL", "400", "qemu-system-aarch64", "-M", "virt"])
        .args(MACHINE)
        .args(["-nographic", "-no-reboot", "-monitor", "none", "-nic", "none"])
        .args(&flash)
        .args(["-drive", &format!("file={},if=virtio,format=raw", esp.display())])
        .args(["-drive", &format!("file={},if=virtio,format=raw", disk.display())])
        .stdin(Stdio::null());
    let log = String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned();
    check("uki-aavmf", &log, &[MARK, "aarch64", "leanrd.uki=arm64", "(ext4, ro)", "Machine model: leanrd,uki-dtb-1"]);
}

/// The x86_64 /init for the arm64 kernel: the boot proof names the mismatch and no image is
/// written.
fn x86_init_refused(s: &Setup) {
    let Some(x86) = init_binary() else { return };
    let out = s.t.join("x86-init.img");
    let o = leanrd()
        .args(["build", "--universal", "-k", &s.kver, "--sysroot"])
        .arg(&s.sysroot)
        .arg("--init")
        .arg(&x86)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && !out.exists(), "an x86_64 /init for an arm64 kernel was written:\n{err}");
    assert!(err.contains("is built for x86-64, and the kernel (its modules) for aarch64"), "{err}");
    let _ = &s.init;
}

fn main() -> std::process::ExitCode {
    let trials = cases(
        vec![
            ("ext4_virtio_mmio", ext4_virtio_mmio),
            ("btrfs_virtio_scsi_pci", btrfs_virtio_scsi_pci),
            ("x86_init_refused", x86_init_refused),
            ("uki_aavmf", uki_aavmf),
            ("hostonly_in_vm", hostonly_in_vm),
        ],
        setup,
    );
    run_tests(trials, cores())
}
