//! Live media under QEMU TCG: a root as a squashfs image on an ISO 9660 medium (made with
//! squashfs-tools and xorriso), found by label or by what it holds, mounted through a loop
//! device /init sets up, with an overlay on top.
//!
//! - CASES (a busybox root, the host's kernel, a universal image with `--include live`), one
//!   test each: dracut's layout on an IDE CD by `root=live:CDLABEL=` with its implanted MD5
//!   checked (`rd.live.check`), the same on a SCSI CD copied into RAM (`rd.live.ram`), Debian's
//!   layout found by `boot=live`, and the diagnoses (no medium with that label, a medium
//!   without an image, a damaged medium).
//! - The real Debian 12 root on a hybrid ISO made by tools/make-live-iso (Debian's layout,
//!   GRUB for BIOS and UEFI, the MD5 implanted), each boot to `systemctl is-system-running` =
//!   running, its root an overlay:
//!   - booted by the firmware through the ISO's GRUB: SeaBIOS from it as an IDE CD, and OVMF
//!     from it written to a USB stick (`boot=live`);
//!   - `boot=live toram` from a SCSI CD: the CD is ejected on QEMU's monitor once the system
//!     runs, which then reads every file of /usr/bin and /usr/sbin from the copy;
//!   - persistence: `root=live:CDLABEL= rd.live.overlay=LABEL=persist rd.live.check` with a
//!     second disk, two boots: the file the first writes is there in the second (where dracut
//!     keeps the overlay). Without persistence every boot starts without the file the others
//!     wrote.
//!
//! `cargo test --release -p leanrd --test boot_live -- live_cdlabel_ide`.
//! Needs root, qemu, busybox-static, squashfs-tools, xorriso, isomd5sum, e2fsprogs, GRUB
//! (grub-pc-bin, grub-efi-amd64-bin), mtools and OVMF.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::*;
use leanrd_testkit::boot::{self as debian, Boot};

const MARK: &str = "LEANRD-ROOT-OK";

/// The busybox root: prints the marker and how / is mounted, says whether the file an
/// earlier boot left is there, leaves one, and powers off.
fn root_tree(t: &TempDir) -> PathBuf {
    busybox_script_root(
        t,
        &format!(
            "$b mount -t proc proc /proc\n$b echo {MARK} $($b cat /proc/uptime)\n\
             $b echo ROOT-MOUNT $($b grep ' / ' /proc/mounts)\n\
             if [ -e /left-by-the-last-boot ]; then $b echo PERSISTED yes; else $b echo PERSISTED no; fi\n\
             $b echo x > /left-by-the-last-boot && $b echo WROTE ok\n\
             $b sed 's/^/STEP /' /run/initramfs/leanrd.log\n$b sync\n$b poweroff -f\n"
        ),
    )
}

/// An ISO 9660 image labelled `label` holding `tree` as a squashfs at `path` (none: no image),
/// its MD5 implanted (isomd5sum).
fn iso(t: &TempDir, name: &str, label: &str, tree: &Path, path: Option<&str>) -> PathBuf {
    let top = t.join(format!("{name}.top"));
    fs::create_dir_all(&top).unwrap();
    fs::write(top.join("README"), "a leanrd test medium\n").unwrap();
    if let Some(p) = path {
        let img = top.join(p);
        fs::create_dir_all(img.parent().unwrap()).unwrap();
        sh(&format!(
            "mksquashfs {} {} -quiet -noappend -comp zstd -Xcompression-level 3 >/dev/null",
            tree.display(),
            img.display()
        ));
    }
    let out = t.join(format!("{name}.iso"));
    sh(&format!(
        "xorriso -as mkisofs -quiet -V {label} -iso-level 3 -o {o} {} 2>/dev/null && implantisomd5 --force {o} >/dev/null",
        top.display(),
        o = out.display(),
    ));
    out
}

/// How the medium is attached (a SCSI CD's drive is `cd0`, for the monitor's `eject`).
#[derive(Clone, Copy)]
enum Cd {
    Ide,
    Scsi,
}

fn cd(path: &Path, how: Cd) -> Vec<String> {
    match how {
        Cd::Ide => vec!["-drive".into(), format!("file={},media=cdrom,if=ide,readonly=on", path.display())],
        Cd::Scsi => vec![
            "-device".into(),
            "virtio-scsi-pci,id=scsi0".into(),
            "-drive".into(),
            format!("file={},media=cdrom,if=none,id=cd0,readonly=on", path.display()),
            "-device".into(),
            "scsi-cd,drive=cd0,bus=scsi0.0".into(),
        ],
    }
}

/// One boot: ten lines of data.
struct Case {
    name: &'static str,
    /// Which medium: "dracut" (/LiveOS/squashfs.img, label LEANRD_LIVE), "debian"
    /// (/live/filesystem.squashfs, label DEBIAN_LIVE), "empty" (no image, label EMPTY),
    /// "damaged" (dracut's, a byte of its image changed after its MD5 was implanted).
    medium: &'static str,
    cd: Cd,
    append: &'static str,
    expect: &'static [&'static str],
    reject: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        name: "live_cdlabel_ide",
        medium: "dracut",
        cd: Cd::Ide,
        append: "root=live:CDLABEL=LEANRD_LIVE rd.live.image rd.live.check",
        expect: &[
            MARK,
            "] live: rd.live.check: /dev/sr0 is intact (MD5 ",
            "ROOT-MOUNT overlay / overlay rw,",
            "PERSISTED no",
            "WROTE ok",
            "] root is /dev/sr0 (/run/initramfs/live/LiveOS/squashfs.img)",
            "] live: /run/initramfs/live/LiveOS/squashfs.img (squashfs) on /dev/loop",
        ],
        reject: &[],
    },
    Case {
        name: "live_ram_scsi_cd",
        medium: "dracut",
        cd: Cd::Scsi,
        append: "root=live:CDLABEL=LEANRD_LIVE rd.live.ram rd.live.overlay.size=64",
        expect: &[MARK, "ROOT-MOUNT overlay / overlay rw,", "WROTE ok", "copied into RAM in", "the medium is free"],
        reject: &[],
    },
    Case {
        name: "live_debian_layout_boot_live",
        medium: "debian",
        cd: Cd::Ide,
        append: "boot=live",
        expect: &[MARK, "ROOT-MOUNT overlay / overlay rw,", "(/run/initramfs/live/live/filesystem.squashfs)"],
        reject: &[],
    },
    Case {
        name: "live_no_such_label_diagnosed",
        medium: "dracut",
        cd: Cd::Ide,
        append: "root=live:CDLABEL=NO_SUCH leanrd.timeout=5",
        expect: &["leanrd: cannot boot: waited 5 s for the live medium LABEL=NO_SUCH"],
        reject: &[MARK],
    },
    Case {
        name: "live_no_image_diagnosed",
        medium: "empty",
        cd: Cd::Ide,
        append: "root=live:CDLABEL=EMPTY",
        expect: &[
            "leanrd: cannot boot: no live image on the medium (LABEL=EMPTY): looked for /dev/sr0:/LiveOS/squashfs.img",
        ],
        reject: &[MARK],
    },
    Case {
        name: "live_check_damaged_diagnosed",
        medium: "damaged",
        cd: Cd::Ide,
        append: "root=live:CDLABEL=LEANRD_LIVE rd.live.check",
        expect: &["leanrd: cannot boot: rd.live.check: /dev/sr0 is damaged: its MD5 is "],
        reject: &[MARK],
    },
];

/// What the cases share: the kernel, the universal image with the live feature, the media.
struct World {
    t: TempDir,
    kernel: PathBuf,
    kver: String,
    image: PathBuf,
    media: Vec<(&'static str, PathBuf)>,
}

static WORLD: OnceLock<Result<Option<World>, String>> = OnceLock::new();

fn world() -> Result<Option<&'static World>, String> {
    Ok(once(&WORLD, make_world).as_ref())
}

fn make_world() -> Option<World> {
    let need = ["qemu-system-x86_64", "mksquashfs", "xorriso", "implantisomd5", "mkfs.ext4"];
    if !is_root() || !Path::new("/bin/busybox").exists() || need.iter().any(|t| !have(t)) {
        return skip(&format!("needs root, /bin/busybox and {need:?}"));
    }
    let kernel = kernel()?;
    let init = init_binary()?;
    let kver = kver_of(&kernel);
    let t = TempDir::new("bootlive");
    let tree = root_tree(&t);
    let media = vec![
        ("dracut", iso(&t, "dracut", "LEANRD_LIVE", &tree, Some("LiveOS/squashfs.img"))),
        ("debian", iso(&t, "debian", "DEBIAN_LIVE", &tree, Some("live/filesystem.squashfs"))),
        ("empty", iso(&t, "empty", "EMPTY", &tree, None)),
    ];
    // A byte in the middle of the image (past the ISO's first 64 KiB), inverted.
    let dracut = media[0].1.clone();
    let damaged = t.join("damaged.iso");
    let mut bytes = fs::read(&dracut).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0xff;
    fs::write(&damaged, bytes).unwrap();
    let mut media = media;
    media.push(("damaged", damaged));
    let image = t.join("universal-live.img");
    ok(leanrd()
        .args(["build", "-k", &kver, "--universal", "--include", "live", "--init"])
        .arg(&init)
        .arg("-o")
        .arg(&image));
    Some(World { t, kernel, kver, image, media })
}

fn medium(w: &World, name: &str) -> PathBuf {
    w.media.iter().find(|(n, _)| *n == name).map(|(_, p)| p.clone()).expect("a medium of the table")
}

fn boot_case(c: &Case) -> Result<(), String> {
    let Some(w) = world()? else { return Ok(()) };
    let mut b = Boot::new(c.name, &w.image, &format!("quiet {}", c.append), cd(&medium(w, c.medium), c.cd));
    b.secs = 180;
    b.expect = c.expect.iter().map(|s| s.to_string()).collect();
    b.reject = c.reject.iter().map(|s| s.to_string()).collect();
    b.stop = vec!["no rescue shell in this image".into()];
    boots_pass(&w.kernel, &[b], format!("{}: see the console above", c.name))
}

/// The Debian 12 live medium: the test root (with the hook below) on a hybrid ISO made by
/// tools/make-live-iso, with the host's kernel and the world's image.
struct DebianLive {
    iso: PathBuf,
}

const DEBIAN_LABEL: &str = "DEBIAN12_LIVE";

/// Run by the report unit once the system runs (tools/boot-report): is the file an earlier boot
/// wrote here (it is only with a persistent overlay), a new one; with `leanrd.test=eject`, the
/// CD taken out by the test (on QEMU's monitor) and the system reading on from its RAM copy.
const HOOK: &str = r#"#!/bin/sh
mark=/var/lib/leanrd-live-mark
if [ -e $mark ]; then echo "LEANRD-LIVE-MARK found: $(cat $mark)"; else echo "LEANRD-LIVE-MARK absent"; fi
echo "written by boot $(cat /proc/sys/kernel/random/boot_id)" > $mark && sync && echo "LEANRD-LIVE-MARK written"
echo "LEANRD-LIVE-MEDIUM $(grep -c ' /run/initramfs/live ' /proc/mounts) mount(s)"
if grep -qw leanrd.test=eject /proc/cmdline; then
  echo "LEANRD-EJECT-NOW"
  n=0
  while [ $n -lt 60 ] && dd if=/dev/sr0 of=/dev/null bs=2048 count=1 iflag=direct 2>/dev/null; do
    n=$((n + 1)); sleep 1
  done
  if dd if=/dev/sr0 of=/dev/null bs=2048 count=1 iflag=direct 2>/dev/null; then echo "LEANRD-EJECTED no"; else echo "LEANRD-EJECTED yes"; fi
  sync && echo 3 > /proc/sys/vm/drop_caches
  files=$(find /usr/bin /usr/sbin -type f | wc -l)
  bad=$(find /usr/bin /usr/sbin -type f -exec sh -c 'for f; do cat "$f" >/dev/null 2>&1 || echo "$f"; done' sh {} + | wc -l)
  echo "LEANRD-READ-AFTER-EJECT $files files, $bad unreadable; $(systemctl is-system-running)"
fi
"#;

static DEBIAN: OnceLock<Result<Option<DebianLive>, String>> = OnceLock::new();

fn debian_live() -> Result<Option<(&'static World, &'static DebianLive)>, String> {
    let Some(w) = world()? else { return Ok(None) };
    let need = ["grub-mkrescue", "mformat"];
    if need.iter().any(|t| !have(t)) || !Path::new(leanrd_testkit::OVMF_CODE).exists() {
        skip::<()>(&format!("needs {need:?}, grub-pc-bin, grub-efi-amd64-bin and OVMF"));
        return Ok(None);
    }
    let d = once(&DEBIAN, || {
        let tree = debian::prepare(&w.t, &w.kver, &init_binary()?, "")?;
        // The root is the overlay: nothing to mount from fstab.
        fs::write(tree.join("etc/fstab"), "").unwrap();
        let hook = tree.join("usr/local/sbin/leanrd-test-hook");
        fs::write(&hook, HOOK).unwrap();
        sh(&format!("chmod 755 {}", hook.display()));
        let iso = w.t.join("debian12-live.iso");
        ok(std::process::Command::new(debian::workspace().join("tools/make-live-iso"))
            .arg("--tree")
            .arg(&tree)
            .arg("--kernel")
            .arg(&w.kernel)
            .arg("--initrd")
            .arg(&w.image)
            .args(["--label", DEBIAN_LABEL, "--layout", "debian", "--timeout", "1", "--md5", "--comp", "zstd"])
            .args(["--append", "console=ttyS0 panic=-1 quiet", "-o"])
            .arg(&iso));
        sh(&format!("rm -rf {}", tree.display()));
        Some(DebianLive { iso })
    });
    Ok(d.as_ref().map(|d| (w, d)))
}

/// A Debian live boot: running, its root the overlay, no file from an earlier boot.
fn debian_boot(name: &str, w: &World, append: &str, qemu: Vec<String>) -> Boot {
    let mut b = Boot::new(name, &w.image, append, qemu).expect("LEANRD-ROOT overlay overlay");
    b.expect.extend(["LEANRD-LIVE-MARK written".into()]);
    b.stop = vec!["no rescue shell in this image".into(), "Kernel panic".into()];
    // The way down: systemd returns to the exitrd (a live root's loop), and no step fails
    // (a failed one is printed even with `quiet`).
    b.reject.push("leanrd: shutdown:".into());
    b
}

/// The hybrid ISO booted by the firmware, through its GRUB (`boot=live`): SeaBIOS from it as
/// an IDE CD, and OVMF from it written to a USB stick (xHCI).
fn debian12_live_firmware() -> Result<(), String> {
    let Some((w, d)) = debian_live()? else { return Ok(()) };
    let iso = d.iso.display();
    let mut bios = debian_boot(
        "debian12_live_bios_cd",
        w,
        "",
        vec!["-drive".into(), format!("file={iso},media=cdrom,if=ide,readonly=on"), "-boot".into(), "d".into()],
    )
    .expect("LEANRD-LIVE-MARK absent")
    .expect("LEANRD-INITRD [");
    bios.start = debian::Start::Bios;
    let mut uefi = debian_boot(
        "debian12_live_uefi_usb",
        w,
        "",
        vec![
            "-device".into(),
            "qemu-xhci,id=xhci".into(),
            "-drive".into(),
            format!("if=none,id=stick,format=raw,snapshot=on,file={iso}"),
            "-device".into(),
            "usb-storage,bus=xhci.0,drive=stick".into(),
        ],
    )
    .expect("LEANRD-LIVE-MARK absent")
    .expect("LEANRD-INITRD [");
    uefi.start = debian::Start::Uefi(w.t.join("live-vars.fd"));
    boots_pass(&w.kernel, &[bios, uefi], "Debian 12 from the hybrid ISO through the firmware: see above".into())
}

/// `boot=live toram` from a SCSI CD; the CD is ejected (QEMU's monitor) once the system runs,
/// and it reads on.
fn debian12_live_ram_eject() -> Result<(), String> {
    let Some((w, d)) = debian_live()? else { return Ok(()) };
    let mut qemu = cd(&d.iso, Cd::Scsi);
    qemu.extend(["-m".into(), "1024".into()]);
    let mut b = debian_boot("debian12_live_ram_eject", w, "quiet boot=live toram leanrd.test=eject", qemu)
        .expect("LEANRD-LIVE-MARK absent")
        .expect("copied into RAM in")
        .expect("LEANRD-LIVE-MEDIUM 0 mount(s)")
        .expect("[test: monitor `eject -f cd0`")
        .expect("LEANRD-EJECTED yes")
        .expect(" 0 unreadable; running");
    b.monitor = vec![("LEANRD-EJECT-NOW".into(), "eject -f cd0".into())];
    boots_pass(&w.kernel, &[b], "Debian 12 in RAM, its CD ejected: see above".into())
}

/// `rd.live.overlay=LABEL=persist`: the upper layer on a second disk; what one boot writes,
/// the next one reads. The overlay lives where dracut keeps it (/LiveOS/overlay-LABEL-UUID).
/// The first boot also checks the medium (`rd.live.check`).
fn debian12_live_persistent() -> Result<(), String> {
    let Some((w, d)) = debian_live()? else { return Ok(()) };
    let disk = w.t.join("persist.ext4");
    sh(&format!("truncate -s 256M {d} && mkfs.ext4 -q -L persist {d}", d = disk.display()));
    let mut qemu = cd(&d.iso, Cd::Ide);
    qemu.extend(["-drive".into(), format!("file={},if=virtio,format=raw", disk.display())]);
    let append = format!("quiet root=live:CDLABEL={DEBIAN_LABEL} rd.live.overlay=LABEL=persist");
    // The first boot also ejects the CD on the way down (rd.live.eject: the drive then says
    // its tray is open); the second is told not to (live-boot's noeject wins).
    let mut first = debian_boot(
        "debian12_live_persistent_first",
        w,
        &format!("{append} rd.live.check rd.live.eject leanrd.debug"),
        qemu.clone(),
    )
    .expect("LEANRD-LIVE-MARK absent")
    .expect("] live: rd.live.check: /dev/sr0 is intact (MD5 ")
    .expect("leanrd: shutdown: sr0: live medium ejected (the tray is open)")
    .expect("leanrd: shutdown: all taken apart in ");
    first.reject = vec!["step(s) failed".into()];
    let mut second = debian_boot(
        "debian12_live_persistent_second",
        w,
        &format!("{append} rd.live.eject noeject leanrd.debug"),
        qemu,
    )
    .expect("LEANRD-LIVE-MARK found")
    .expect("leanrd: shutdown: all taken apart in ");
    second.reject = vec!["step(s) failed".into(), "ejected".into()];
    for b in [first, second] {
        let name = b.name.clone();
        boots_pass(&w.kernel, &[b], format!("{name}: see the console above"))?;
    }
    let ls =
        String::from_utf8(ok(std::process::Command::new("debugfs").args(["-R", "ls -l /LiveOS"]).arg(&disk))).unwrap();
    if !ls.contains(&format!("overlay-{DEBIAN_LABEL}-")) {
        return Err(format!("no dracut-style overlay directory on the persistent disk:\n{ls}"));
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let mut trials: Vec<Trial> = CASES.iter().map(|c| test(c.name, move || boot_case(c))).collect();
    trials.push(test("debian12_live_firmware", debian12_live_firmware));
    trials.push(test("debian12_live_ram_eject", debian12_live_ram_eject));
    trials.push(test("debian12_live_persistent", debian12_live_persistent));
    run_tests(trials, cores())
}
