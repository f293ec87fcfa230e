//! Live media under QEMU TCG: a root as a squashfs image on an ISO 9660 medium (made with
//! squashfs-tools and xorriso), found by label or by what it holds, mounted through a loop
//! device /init sets up, with an overlay on top.
//!
//! - CASES (a busybox root, the host's kernel, a universal image with `--include live`), one
//!   test each: dracut's layout on an IDE CD by `root=live:CDLABEL=`, the same on a SCSI CD
//!   copied into RAM (`rd.live.ram`), Debian's layout found by `boot=live`, and the diagnoses
//!   (no medium with that label, a medium without an image).
//! - Persistence: `rd.live.overlay=LABEL=persist` on a second disk, two boots: a file the
//!   first writes is there in the second; without it, it is gone.
//! - The real Debian 12 root as a squashfs on a CD, to `systemctl is-system-running` = running.
//!
//! `cargo test --release -p leanrd --test boot_live -- live_cdlabel_ide`.
//! Needs root, qemu, busybox-static, squashfs-tools, xorriso and e2fsprogs.

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

/// An ISO 9660 image labelled `label` holding `tree` as a squashfs at `path` (none: no image).
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
        "xorriso -as mkisofs -quiet -V {label} -iso-level 3 -o {} {} 2>/dev/null",
        out.display(),
        top.display()
    ));
    out
}

/// How the medium is attached.
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
    /// (/live/filesystem.squashfs, label DEBIAN_LIVE), "empty" (no image, label EMPTY).
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
        append: "root=live:CDLABEL=LEANRD_LIVE rd.live.image",
        expect: &[
            MARK,
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
    let need = ["qemu-system-x86_64", "mksquashfs", "xorriso", "mkfs.ext4"];
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

/// `rd.live.overlay=LABEL=persist`: the upper layer on a second disk; what one boot writes,
/// the next one reads. The overlay lives where dracut keeps it (/LiveOS/overlay-LABEL-UUID).
fn persistent_overlay() -> Result<(), String> {
    let Some(w) = world()? else { return Ok(()) };
    let disk = w.t.join("persist.ext4");
    sh(&format!("truncate -s 64M {d} && mkfs.ext4 -q -L persist {d}", d = disk.display()));
    let mut qemu = cd(&medium(w, "dracut"), Cd::Ide);
    qemu.extend(["-drive".into(), format!("file={},if=virtio,format=raw", disk.display())]);
    let append = "quiet root=live:CDLABEL=LEANRD_LIVE rd.live.overlay=LABEL=persist";
    for (name, seen) in [("live_persistent_first", "PERSISTED no"), ("live_persistent_second", "PERSISTED yes")] {
        let mut b = Boot::new(name, &w.image, append, qemu.clone());
        b.expect = [MARK, seen, "WROTE ok"].map(String::from).to_vec();
        b.stop = vec!["no rescue shell in this image".into()];
        if !debian::run(&w.kernel, &[b]).is_empty() {
            return Err(format!("{name}: see the console above"));
        }
    }
    let ls =
        String::from_utf8(ok(std::process::Command::new("debugfs").args(["-R", "ls -l /LiveOS"]).arg(&disk))).unwrap();
    if !ls.contains("overlay-LEANRD_LIVE-") {
        return Err(format!("no dracut-style overlay directory on the persistent disk:\n{ls}"));
    }
    Ok(())
}

/// The real Debian 12 root as a squashfs on a CD, to running: its writes go to the overlay.
fn debian12_live() -> Result<(), String> {
    let Some(w) = world()? else { return Ok(()) };
    let tree = debian::prepare(&w.t, &w.kver, &init_binary().ok_or("no /init")?, "").ok_or("no Debian 12 root")?;
    fs::write(tree.join("etc/fstab"), "").unwrap();
    let medium = iso(&w.t, "bookworm-live", "DEBIAN12_LIVE", &tree, Some("LiveOS/squashfs.img"));
    let b = Boot::new("debian12_live_cd", &w.image, "root=live:CDLABEL=DEBIAN12_LIVE", cd(&medium, Cd::Scsi))
        .expect("LEANRD-ROOT overlay overlay");
    boots_pass(&w.kernel, &[b], "Debian 12 from a live CD did not reach running".into())
}

fn main() -> std::process::ExitCode {
    let mut trials: Vec<Trial> = CASES.iter().map(|c| test(c.name, move || boot_case(c))).collect();
    trials.push(test("live_persistent_overlay", persistent_overlay));
    trials.push(test("debian12_live_cd", debian12_live));
    run_tests(trials, cores())
}
