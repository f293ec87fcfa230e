//! dm-verity roots, for real, under QEMU TCG with the host's kernel and a universal image: a
//! busybox ext4 root whose hash tree `veritysetup format` made on plain files, on a GPT disk
//! laid out as systemd-repart lays a verified image out (the root partition's PARTUUID is the
//! root hash's first 128 bits, the verity partition's its last 128, DPS's type UUIDs). /init
//! sets the device up with the DM ioctls; the host needs no device-mapper.
//!
//! One test, four short boots:
//! - `roothash=` alone: the partitions found by the hash's halves, /dev/mapper/root mounted
//!   read-only, a file read through it, with `systemd.volatile=overlay` over it (a write taken
//!   in memory; the disk, written through, is the same byte for byte afterwards: the write is
//!   gone at the next boot); the same boot's `usrhash=` sets up /usr (DPS's usr and usr-verity
//!   partitions on the same disk, named by its halves) as /dev/mapper/usr, read-only on the
//!   root's /usr, a file read from it;
//! - the devices named (`systemd.verity_root_data=`/`_hash=`) on a disk where one byte of a file
//!   the root reads is flipped: the root (/dev/mapper/root, read-only: no write) boots, that read
//!   fails with EIO; with `systemd.volatile=state`, a tmpfs on its /var;
//! - one byte of the hash tree flipped: refused at setup, the diagnosis says the first block
//!   does not verify;
//! - a verity-sig partition (signed by a key the kernel does not trust) with
//!   `dm-verity.require_signatures=1`: refused, the diagnosis says the kernel refused the
//!   signature.
//!
//! Needs root, qemu, mkfs.ext4, sfdisk, veritysetup (cryptsetup-bin), openssl, debugfs,
//! busybox-static. `cargo test --release -p leanrd --test boot_verity`.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const MARK: &str = "LEANRD-VERITY-ROOT";
const PAYLOAD: &str = "LEANRD-VERITY-PAYLOAD";
const ROOT_TYPE: &str = "4f68bce3-e8cd-4db1-96e7-fbcaf984b709";
const VERITY_TYPE: &str = "2c7357ed-ebd2-46d9-aec1-23d437ec2bf5";
const SIG_TYPE: &str = "41092b05-9fc8-4523-994f-2def0408b176";
const USR_TYPE: &str = "8484680c-9521-48c6-9c11-b0720656f69e";
const USR_VERITY_TYPE: &str = "77ff5f63-e7b6-4633-acf4-1565b864c0e6";
const USR_PAYLOAD: &str = "LEANRD-VERITY-USR";

/// The root: its init says how / is mounted, what dm-0 is, and what reading the payload gives.
fn root_tree(t: &TempDir) -> PathBuf {
    let r = busybox_script_root(
        t,
        &format!(
            "$b mount -t proc proc /proc 2>/dev/null; $b mount -t sysfs sys /sys 2>/dev/null\n\
             $b mount -t tmpfs tmp /tmp\n\
             $b echo {MARK} $($b cut -d' ' -f1 /proc/uptime)\n\
             $b echo ROOT-MOUNT $($b grep ' / ' /proc/mounts)\n\
             $b echo DM-0 $($b cat /sys/block/dm-0/dm/name) ro=$($b cat /sys/block/dm-0/ro)\n\
             $b echo USR-MOUNT $($b grep ' /usr ' /proc/mounts)\n\
             $b echo VAR-MOUNT $($b grep ' /var ' /proc/mounts)\n\
             $b echo DM-1 $($b cat /sys/block/dm-1/dm/name 2>&1) ro=$($b cat /sys/block/dm-1/ro 2>&1)\n\
             $b grep -q {USR_PAYLOAD} /usr/payload 2>/dev/null && $b echo USR-READ\n\
             $b echo written > /etc/written 2>/dev/null && $b echo WROTE $($b cat /etc/written)\n\
             if $b cat /etc/payload >/tmp/p 2>/tmp/err && $b grep -q {PAYLOAD} /tmp/p; then $b echo PAYLOAD-READ; \
             else $b echo PAYLOAD-FAILED $($b cat /tmp/err); fi\n\
             $b poweroff -f\n"
        ),
    );
    fs::create_dir_all(r.join("etc")).unwrap();
    fs::create_dir_all(r.join("usr")).unwrap();
    fs::create_dir_all(r.join("var")).unwrap();
    // Two blocks of its own (no inline data): one flipped byte fails the read of one block.
    fs::write(r.join("etc/payload"), format!("{PAYLOAD}\n").repeat(400)).unwrap();
    r
}

fn uuid(h: &str) -> String {
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// Flip one byte of `file` at `at`.
fn flip(file: &Path, at: u64) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = fs::OpenOptions::new().read(true).write(true).open(file).unwrap();
    let mut b = [0u8];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut b).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&[b[0] ^ 0x5a]).unwrap();
}

/// A /usr file system, its hash tree and its root hash.
struct UsrFs<'a>(&'a Path, &'a Path, &'a str);

/// A GPT disk: the data, its hash tree, (when given) a signature partition and a /usr with its
/// hash tree, as DPS names them.
fn disk(
    t: &TempDir,
    name: &str,
    data: &Path,
    hash: &Path,
    root_hash: &str,
    sig: Option<&Path>,
    usr: Option<UsrFs>,
) -> PathBuf {
    let d = t.join(format!("{name}.disk"));
    let sectors = |p: &Path| fs::metadata(p).unwrap().len().div_ceil(1 << 20) * 2048;
    let (ds, hs) = (sectors(data), sectors(hash));
    let ss = sig.map(sectors).unwrap_or(0);
    let (first, last) = (uuid(&root_hash[..32]), uuid(&root_hash[root_hash.len() - 32..]));
    let mut script = format!(
        "label: gpt\nstart=2048, size={ds}, type={ROOT_TYPE}, uuid={first}, name=root\n\
         start={}, size={hs}, type={VERITY_TYPE}, uuid={last}, name=root-verity, attrs=GUID:60\n",
        2048 + ds
    );
    if sig.is_some() {
        script += &format!("start={}, size={ss}, type={SIG_TYPE}, name=root-verity-sig\n", 2048 + ds + hs);
    }
    let us = usr.as_ref().map(|u| (sectors(u.0), sectors(u.1))).unwrap_or((0, 0));
    let at = 2048 + ds + hs + ss;
    if let Some(UsrFs(_, _, h)) = &usr {
        let (first, last) = (uuid(&h[..32]), uuid(&h[h.len() - 32..]));
        script += &format!(
            "start={at}, size={}, type={USR_TYPE}, uuid={first}, name=usr\n\
             start={}, size={}, type={USR_VERITY_TYPE}, uuid={last}, name=usr-verity\n",
            us.0,
            at + us.0,
            us.1
        );
    }
    sh(&format!("truncate -s {} {}", (at + us.0 + us.1 + 2048) * 512, d.display()));
    let o = run_stdin(Command::new("sfdisk").arg("-q").arg(&d), script.as_bytes());
    assert!(o.status.success(), "sfdisk: {}", String::from_utf8_lossy(&o.stderr));
    let put = |p: &Path, at: u64| {
        sh(&format!("dd if={} of={} bs=512 seek={at} conv=notrunc status=none", p.display(), d.display()))
    };
    put(data, 2048);
    put(hash, 2048 + ds);
    if let Some(s) = sig {
        put(s, 2048 + ds + hs);
    }
    if let Some(UsrFs(data, hash, _)) = &usr {
        put(data, at);
        put(hash, at + us.0);
    }
    d
}

fn boot(kernel: &Path, img: &Path, disk: &Path, append: &str) -> String {
    boot_on(kernel, img, disk, append, true)
}

/// [`boot`]; `snapshot`: QEMU keeps the disk as it was (else the guest's writes reach the file).
fn boot_on(kernel: &Path, img: &Path, disk: &Path, append: &str, snapshot: bool) -> String {
    let snap = if snapshot { ",snapshot=on" } else { "" };
    let drive = format!("file={},if=virtio,format=raw{snap}", disk.display());
    let t = std::time::Instant::now();
    let log = qemu_boot(kernel, img, append, &["-drive", &drive], 120);
    eprintln!("boot ({append}): {:.1} s", t.elapsed().as_secs_f64());
    log
}

fn tail(log: &str) -> &str {
    &log[log.floor_char_boundary(log.len().saturating_sub(4000))..]
}

fn line<'a>(log: &'a str, what: &str) -> &'a str {
    log.lines().find(|l| l.contains(what)).unwrap_or("").trim()
}

#[test]
fn verity_roots() {
    let need = ["mkfs.ext4", "sfdisk", "veritysetup", "openssl", "debugfs", "qemu-system-x86_64"];
    if !is_root() || !Path::new("/bin/busybox").exists() || need.iter().any(|t| !have(t)) {
        skip::<()>(&format!("needs root, /bin/busybox and {need:?}"));
        return;
    }
    let Some(kernel) = kernel() else { return };
    let Some(init) = init_binary() else { return };
    let kver = kver_of(&kernel);
    if !Path::new(&format!("/lib/modules/{kver}/modules.dep")).exists() {
        skip::<()>(&format!("no modules for {kver}"));
        return;
    }
    let t = TempDir::new("bootverity");
    let tree = root_tree(&t);
    let img = t.join("universal.img");
    ok(leanrd().args(["build", "-k", &kver, "--universal", "--init"]).arg(&init).arg("-o").arg(&img));

    // The data (ext4, 4 KiB blocks) and its hash tree, with a superblock, as veritysetup makes them.
    let (data, hash) = (t.join("root.fs"), t.join("root.verity"));
    sh(&format!(
        "truncate -s 32M {d} && mkfs.ext4 -q -b 4096 -d {r} -L vroot {d}",
        d = data.display(),
        r = tree.display()
    ));
    let out = ok(Command::new("veritysetup").arg("format").arg(&data).arg(&hash));
    let out = String::from_utf8_lossy(&out);
    let root_hash =
        out.lines().find_map(|l| l.strip_prefix("Root hash:")).map(|h| h.trim().to_string()).expect("a root hash");
    assert_eq!(root_hash.len(), 64, "{out}");

    // One byte of the payload's first block flipped (debugfs says where it is).
    let bad_data = t.join("root-bad.fs");
    fs::copy(&data, &bad_data).unwrap();
    let bmap = ok(Command::new("debugfs").args(["-R", "bmap /etc/payload 0"]).arg(&data));
    let block: u64 = String::from_utf8_lossy(&bmap).trim().parse().expect("the payload's block");
    flip(&bad_data, block * 4096 + 100);
    // One byte of the hash tree's top level flipped (after the 4 KiB superblock block).
    let bad_hash = t.join("root-bad.verity");
    fs::copy(&hash, &bad_hash).unwrap();
    flip(&bad_hash, 4096 + 7);
    // A signature partition as systemd-repart writes it, signed by a key the kernel does not know.
    let (key, cert, sig, json) = (t.join("k.pem"), t.join("c.pem"), t.join("sig.der"), t.join("sig.json"));
    sh(&format!(
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout {k} -out {c} -subj /CN=leanrd-test -days 2 2>/dev/null && \
         printf %s {root_hash} | openssl smime -sign -nocerts -noattr -binary -inkey {k} -signer {c} -outform der \
         -out {s}",
        k = key.display(),
        c = cert.display(),
        s = sig.display()
    ));
    let b64 = String::from_utf8(ok(Command::new("base64").arg("-w0").arg(&sig))).unwrap();
    fs::write(&json, format!(r#"{{"rootHash":"{root_hash}","certificateFingerprint":"00","signature":"{b64}"}}"#))
        .unwrap();

    // /usr: ext4 with a file of its own, its hash tree beside it (usr and usr-verity partitions
    // whose PARTUUIDs are usrhash='s halves).
    let usr_tree = t.join("usr-tree");
    fs::create_dir_all(&usr_tree).unwrap();
    fs::write(usr_tree.join("payload"), format!("{USR_PAYLOAD}\n")).unwrap();
    let (usr_data, usr_hash) = (t.join("usr.fs"), t.join("usr.verity"));
    sh(&format!(
        "truncate -s 8M {d} && mkfs.ext4 -q -b 4096 -d {r} -L vusr {d}",
        d = usr_data.display(),
        r = usr_tree.display()
    ));
    let out = ok(Command::new("veritysetup").arg("format").arg(&usr_data).arg(&usr_hash));
    let out = String::from_utf8_lossy(&out);
    let usr_root_hash =
        out.lines().find_map(|l| l.strip_prefix("Root hash:")).map(|h| h.trim().to_string()).expect("a root hash");

    let usr = Some(UsrFs(&usr_data, &usr_hash, &usr_root_hash));
    let good = disk(&t, "good", &data, &hash, &root_hash, None, usr);
    let file_flipped = disk(&t, "file-flipped", &bad_data, &hash, &root_hash, None, None);
    let tree_flipped = disk(&t, "tree-flipped", &data, &bad_hash, &root_hash, None, None);
    let signed = disk(&t, "signed", &data, &hash, &root_hash, Some(&json), None);

    let mut failures = Vec::new();
    let mut check = |what: &str, log: &str, ok: bool| {
        if !ok {
            failures.push(format!("{what}:\n{}", tail(log)));
        }
    };

    // roothash= alone: found by the halves, verified, read; systemd.volatile=overlay over it
    // takes a write (in memory: the verity device itself is read-only). The disk is written
    // through (no snapshot): after the boot it must be the same, byte for byte, so the write is
    // gone at the next boot without a VM to show it.
    let digest = |p: &Path| String::from_utf8(ok(Command::new("sha256sum").arg(p))).unwrap();
    let before = digest(&good);
    let log = boot_on(
        &kernel,
        &img,
        &good,
        &format!(
            "roothash={root_hash} systemd.verity_root_options=check-at-most-once systemd.volatile=overlay \
             usrhash={usr_root_hash}"
        ),
        false,
    );
    let unchanged = digest(&good) == before;
    eprintln!("the disk after the volatile boot's write: {}", if unchanged { "unchanged" } else { "CHANGED" });
    check("systemd.volatile=overlay: the disk unchanged after the boot's write", &log, unchanged);
    eprintln!(
        "{}\n{}\n{}\n{}\n{}\n{}\n{}",
        line(&log, "ROOT-MOUNT"),
        line(&log, "DM-0"),
        line(&log, "WROTE"),
        line(&log, "PAYLOAD-"),
        line(&log, "USR-MOUNT"),
        line(&log, "DM-1"),
        line(&log, "USR-READ")
    );
    check(
        "roothash= with systemd.volatile=overlay",
        &log,
        log.contains("ROOT-MOUNT overlay / overlay")
            && log.contains("lowerdir=/newroot")
            && log.contains("DM-0 root ro=1")
            && log.contains("WROTE written")
            && log.contains("PAYLOAD-READ"),
    );
    // usrhash=: /usr's partitions by its halves, /dev/mapper/usr read-only on the root's /usr.
    check(
        "usrhash=: /usr verified on the root's /usr",
        &log,
        line(&log, "USR-MOUNT").contains(" /usr ext4 ro") && log.contains("DM-1 usr ro=1") && log.contains("USR-READ"),
    );

    // The devices named; the flipped block fails its read in the root, the rest boots. With
    // systemd.volatile=state: the verified root as it is, a tmpfs on its /var.
    let log = boot(
        &kernel,
        &img,
        &file_flipped,
        &format!(
            "roothash={root_hash} systemd.verity_root_data=PARTLABEL=root systemd.verity_root_hash=PARTLABEL=root-verity \
             systemd.volatile=state"
        ),
    );
    eprintln!("{}\n{}", line(&log, "PAYLOAD-"), line(&log, "VAR-MOUNT"));
    check(
        "systemd.volatile=state: a tmpfs on the verified root's /var",
        &log,
        log.contains("ROOT-MOUNT /dev/mapper/root / ext4 ro") && line(&log, "VAR-MOUNT").contains(" /var tmpfs rw"),
    );
    check(
        "a flipped byte in a file",
        &log,
        log.contains("ROOT-MOUNT /dev/mapper/root / ext4 ro")
            && !log.contains("WROTE")
            && log.contains(MARK)
            && log.lines().any(|l| l.contains("PAYLOAD-FAILED") && l.contains("Input/output error"))
            && log.contains("data block")
            && log.contains("is corrupted"),
    );

    // The hash tree flipped: refused before the mount.
    let log = boot(&kernel, &img, &tree_flipped, &format!("roothash={root_hash}"));
    eprintln!("{}", line(&log, "cannot boot"));
    check(
        "a flipped byte in the hash tree",
        &log,
        log.contains("leanrd: cannot boot: dm-verity root") && log.contains("its first block does not verify"),
    );

    // A signature the kernel cannot check, signatures required: refused, and said so.
    let log = boot(&kernel, &img, &signed, &format!("roothash={root_hash} dm-verity.require_signatures=1"));
    eprintln!("{}", line(&log, "cannot boot"));
    check(
        "an untrusted signature with require_signatures=1",
        &log,
        log.contains("leanrd: cannot boot: dm-verity root")
            && log.contains("the kernel refused the root hash's signature"),
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
