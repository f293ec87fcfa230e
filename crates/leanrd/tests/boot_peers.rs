//! `leanrd verify` against the truth: images made by initramfs-tools (MODULES=dep and
//! MODULES=most), dracut (--hostonly) and leanrd (host-only) on a Debian root booted under
//! QEMU, verified on that machine and on the same disk moved to an AHCI controller, then
//! booted on both. Every verdict must be what the boot shows.
//!
//! 1. Each peer's root (tools/debian-root initramfs-tools | dracut) boots a universal leanrd
//!    image from a virtio disk and builds its images there, as a user would (the peers detect
//!    the machine they run on); then `leanrd verify` judges each for that machine.
//! 2. The same disk on AHCI: a universal image boots it and `leanrd verify` judges each image
//!    for the moved disk.
//! 3. Each image boots the root on both machines. A boot counts when the root's systemd
//!    reaches multi-user (the report unit); a failed one is ended when its console says so.
//!
//! Needs root, qemu, mmdebstrap (the two peer roots are made once and cached: about five
//! minutes), mkfs.ext4 and sfdisk. About five minutes on two cores once the roots exist.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use common::debian::*;
use common::*;

/// Run by the root's report unit (as /usr/local/sbin/leanrd-test-hook): with
/// `leanrd.test=peers`, build the images; with `peers` or `verify`, judge every image in /boot
/// for this machine. Its output goes to the serial console.
const HOOK: &str = r#"#!/bin/sh
kver=$(uname -r)
out=/root/leanrd-peers.txt
: > $out
say() { echo "$*"; echo "$*" >> $out; }
if grep -qw leanrd.test=peers /proc/cmdline; then
  built() {
    if [ "$1" = 0 ]; then say "LEANRD-PEER $2 built in $(( $(date +%s) - t0 )) s"; else say "LEANRD-PEER $2 failed"; tail -n 20 /root/peer.log; fi
  }
  # A peer's image made on this machine by an earlier run is on the disk already (the test
  # cache's peer-images): not made again.
  if command -v mkinitramfs >/dev/null; then
    if [ -e /boot/peer-itools-dep.img ]; then say "LEANRD-PEER itools-dep cached"; else
      echo MODULES=dep > /etc/initramfs-tools/conf.d/leanrd-test
      # zstd -1: Debian's -9 costs minutes under TCG; the format is the same.
      t0=$(date +%s); mkinitramfs -c zstd -l 1 -o /boot/peer-itools-dep.img "$kver" >/root/peer.log 2>&1; built $? itools-dep
      rm -f /etc/initramfs-tools/conf.d/leanrd-test
    fi
    t0=$(date +%s); leanrd build -k "$kver" -o /boot/peer-leanrd-host.img >/root/peer.log 2>&1; built $? leanrd-host
  fi
  if command -v dracut >/dev/null; then
    if [ -e /boot/peer-dracut-host.img ]; then say "LEANRD-PEER dracut-host cached"; else
      t0=$(date +%s); dracut --hostonly --force --compress "zstd -1 -q -T0" /boot/peer-dracut-host.img "$kver" >/root/peer.log 2>&1
      built $? dracut-host
    fi
  fi
fi
if grep -qwE 'leanrd.test=(peers|verify)' /proc/cmdline; then
  for i in /boot/peer-*.img; do
    n=$(basename "$i" .img)
    if leanrd verify "$i" >/root/verify.log 2>&1; then v=boots; else v=fails; fi
    say "LEANRD-VERIFY $n $v"
    sed "s/^/LEANRD-VERIFY-SAYS $n: /" /root/verify.log >> $out
  done
fi
sync
"#;

/// What ends a boot that has failed, for each generator's /init.
const FAILED: &[&str] = &[
    "Gave up waiting for root",   // initramfs-tools
    "Entering emergency mode",    // dracut (systemd)
    "Could not boot",             // dracut
    "Kernel panic - not syncing", // any
];

/// The verdicts `leanrd verify` wrote: image → boots?
fn verdicts(text: &str) -> BTreeMap<String, bool> {
    text.lines()
        .filter_map(|l| l.strip_prefix("LEANRD-VERIFY "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, v)| (n.to_string(), v.trim() == "boots"))
        .collect()
}

/// What verify said of one image.
fn says(text: &str, image: &str) -> String {
    let p = format!("LEANRD-VERIFY-SAYS {image}: ");
    text.lines().filter_map(|l| l.strip_prefix(p.as_str())).collect::<Vec<_>>().join(" | ")
}

/// initramfs-tools' MODULES=most image does not depend on the machine: made in a chroot of
/// the root on the host (under TCG it takes ten minutes).
fn itools_most(tree: &Path, kver: &str) {
    let (done, log) = in_chroot(tree, None, &format!("mkinitramfs -c zstd -l 1 -o /boot/peer-itools-most.img {kver}"));
    assert!(done, "mkinitramfs MODULES=most in a chroot: {log}");
}

/// The peers' images of a root (`flavour`), and the key they are cached by in the test cache
/// (peer-images/KEY): what they are made from is the peer's root, the kernel and its modules,
/// the hook that makes them and the machine it runs on (the first boot below: virtio-blk, 1
/// GiB). Made under TCG they cost two minutes each; a run that finds them copies them into
/// the root, and the hook makes only leanrd's.
fn peer_images(flavour: &str, kernel: &Path, kver: &str) -> (&'static [&'static str], String) {
    use leanrd_testkit::scenario::{file_key, key_of};
    let images: &[&str] = match flavour {
        "dracut" => &["peer-dracut-host.img"],
        _ => &["peer-itools-dep.img", "peer-itools-most.img"],
    };
    let root = debian_root(flavour).expect("the peer's root");
    let made = root.file_name().unwrap().to_string_lossy().into_owned();
    let key = key_of(&[
        b"peer-images-1 virtio-blk 1024M",
        made.as_bytes(),
        file_key(&root.join("var/lib/dpkg/status")).as_bytes(),
        file_key(kernel).as_bytes(),
        file_key(Path::new(&format!("/lib/modules/{kver}/modules.dep"))).as_bytes(),
        HOOK.as_bytes(),
    ]);
    (images, key)
}

/// The report the hook wrote on a root's disk.
fn report(t: &TempDir, disk: &Disk) -> String {
    let out = t.join("report.txt");
    take_file(t, disk, false, "root/leanrd-peers.txt", &out);
    fs::read_to_string(out).unwrap()
}

#[test]
fn verify_verdicts_match_the_boots_of_peer_images() {
    // The run's longest chain (build in a VM, then verify, then boot): its VMs go first.
    vm_priority();
    let Some((kernel, init, kver, t)) = setup("peers", &["mkfs.ext4", "sfdisk", "losetup", "chroot"]) else { return };
    let mut roots = Vec::new();
    for (n, flavour) in ["initramfs-tools", "dracut"].into_iter().enumerate() {
        let Some(tree) = prepare(&t, &kver, &init, flavour) else { return };
        let hook = tree.join("usr/local/sbin/leanrd-test-hook");
        fs::write(&hook, HOOK).unwrap();
        sh(&format!("chmod 755 {}", hook.display()));
        let (images, key) = peer_images(flavour, &kernel, &kver);
        let cached = leanrd_testkit::scenario::cached_if_made("peer-images", &key);
        if let Some(dir) = &cached {
            for i in images {
                fs::copy(dir.join(i), tree.join("boot").join(i)).unwrap();
            }
            eprintln!("{flavour}: the peer's images made by an earlier run ({})", dir.display());
        } else if flavour == "initramfs-tools" {
            itools_most(&tree, &kver);
        }
        let f = Fs { kind: "ext4", uuid: uuid(40 + n as u32), subvol: false };
        let fstab = format!("UUID={} / ext4 defaults 0 1\n", f.uuid);
        let disks = make(&t, &format!("peer-{flavour}"), true, Bus::VirtioBlk, &f, &tree, Some(&fstab));
        sh(&format!("rm -rf {}", tree.display()));
        roots.push((flavour, f, disks.into_iter().next().unwrap(), cached.is_none().then_some((images, key))));
    }
    let univ = t.join("universal.img");
    let sysroot = prepare(&t, &kver, &init, "").unwrap();
    ok(leanrd()
        .args(["build", "-k", &kver, "--universal", "--sysroot"])
        .arg(&sysroot)
        .arg("--init")
        .arg(&init)
        .arg("-o")
        .arg(&univ));
    sh(&format!("rm -rf {}", sysroot.display()));

    // 1. Build the images on the virtio machine and judge them there; 2. the disk moved to
    // AHCI, judge them again. Both write their report on the disk (the console may mix
    // kernel messages into a line).
    let mut verdict = BTreeMap::new();
    for (machine, bus, test) in [("virtio-blk", Bus::VirtioBlk, "peers"), ("AHCI", Bus::Ahci, "verify")] {
        let boots: Vec<Boot> = roots
            .iter()
            .map(|(flavour, f, d, _)| {
                let disk = Disk { path: d.path.clone(), gpt: d.gpt, bus };
                let what = if test == "peers" { "builds its images" } else { "verify" };
                let mut b = Boot::new(
                    &format!("{flavour} root on {machine}: {what}"),
                    &univ,
                    &format!("root=UUID={} leanrd.test={test}", f.uuid),
                    qemu_args(&[&disk], false),
                );
                b.secs = 1200;
                b
            })
            .collect();
        for ((b, o), (flavour, _, d, to_cache)) in boots.iter().zip(run_all(&kernel, &boots)).zip(&roots) {
            assert!(o.met, "{}: missing {:?}, unwanted {:?}\n{}", b.name, o.missing, o.unwanted, tail(&o.log));
            let text = report(&t, d);
            if test == "peers" {
                let made: &[&str] =
                    if *flavour == "dracut" { &["dracut-host"] } else { &["itools-dep", "leanrd-host"] };
                for m in made {
                    let there = ["built", "cached"].iter().any(|how| text.contains(&format!("LEANRD-PEER {m} {how}")));
                    assert!(there, "{}: {m} not built:\n{text}", b.name);
                }
                if let Some((images, key)) = to_cache {
                    leanrd_testkit::scenario::cached("peer-images", key, |dir| {
                        for i in *images {
                            take_file(&t, d, false, &format!("boot/{i}"), &dir.join(i));
                        }
                    });
                }
            }
            for (img, v) in verdicts(&text) {
                let why = says(&text, &img);
                verdict.insert((img, machine), (v, why));
            }
        }
    }

    // 3. Every image boots its root on both machines.
    let mut boots = Vec::new();
    let mut cases = Vec::new();
    for (flavour, f, d, _) in &roots {
        let images: BTreeSet<&String> = verdict.keys().map(|(i, _)| i).collect();
        for img in images {
            let file: PathBuf = t.join(format!("{flavour}-{img}.img"));
            if take_file_maybe(&t, d, &format!("boot/{img}.img"), &file).is_none() {
                continue; // the other root's
            }
            // Each /init's own way to end a failed boot soon, on its own command line:
            // initramfs-tools waits rootdelay= for the root, then reboots on panic=; dracut's
            // emergency powers off with rd.shell=0; leanrd gives up after leanrd.timeout= (its
            // rootdelay= is the kernel's: a pause before looking, 20 s lost on every boot).
            let extra = match img.split('-').nth(1) {
                Some("itools") => "quiet rootdelay=20",
                Some("dracut") => "quiet rd.retry=20 rd.timeout=40 rd.shell=0 rd.emergency=poweroff",
                _ => "quiet leanrd.timeout=20",
            };
            for (machine, bus) in [("virtio-blk", Bus::VirtioBlk), ("AHCI", Bus::Ahci)] {
                let disk = Disk { path: d.path.clone(), gpt: d.gpt, bus };
                let mut b = Boot::new(
                    &format!("{flavour}: {img} on {machine}"),
                    &file,
                    &format!("root=UUID={} {extra}", f.uuid),
                    qemu_args(&[&disk], true),
                );
                for s in FAILED {
                    b = b.stop(s);
                }
                cases.push((img.clone(), machine));
                boots.push(b);
            }
        }
    }
    let outcomes = run_all(&kernel, &boots);
    let mut mismatches = Vec::new();
    let mut table = Vec::new();
    let word = |b: bool| if b { "boots" } else { "does not boot" };
    for ((img, machine), o) in cases.iter().zip(&outcomes) {
        let booted = o.log.contains("LEANRD-STATE running");
        let Some((v, why)) = verdict.get(&(img.clone(), *machine)) else {
            mismatches.push(format!("{img} on {machine}: no verdict"));
            continue;
        };
        table.push(format!("{img} on {machine}: verify says it {}, QEMU: it {} ({why})", word(*v), word(booted)));
        if *v != booted {
            mismatches.push(format!(
                "{img} on {machine}: verify says it {}, the boot shows it {}: {why}\n{}",
                word(*v),
                word(booted),
                tail(&o.log)
            ));
        }
    }
    eprintln!("verdicts:\n  {}", table.join("\n  "));
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    // Both kinds of verdict occurred (the move to AHCI breaks the host-only images).
    let fails = outcomes.iter().filter(|o| !o.log.contains("LEANRD-STATE running")).count();
    assert!(cases.len() >= 8 && fails >= 1 && fails < cases.len(), "{fails} of {} do not boot: {table:?}", cases.len());
}
