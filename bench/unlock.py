#!/usr/bin/env python3
"""Network unlock benchmark (issue 52), one run, the peers measured in the same run.

A LUKS2 root bound to a Tang server as `clevis luks bind` binds it (boot_luks's disk and
binding: a key slot for a random key and a `clevis` token with `clevis encrypt tang`'s JWE of
it), booted under QEMU TCG with the same kernel, nothing typed:

  leanrd           leanrd --universal with --include clevis (Tang in Rust, inside /init; it
                   takes DHCP for Tang by itself), and with --ssh-authorized-keys (dropbear)
  initramfs-tools  MODULES=most, cryptsetup-initramfs, clevis-initramfs and dropbear-initramfs
                   (crypttab's `initramfs` option: the chroot's root is not the container);
                   `ip=dhcp` as a user gives it
  dracut           --no-hostonly --add "crypt clevis clevis-pin-tang" (clevis-dracut; its
                   11-ifcfg.conf names the ifcfg module Debian lacks: --omit ifcfg; the
                   systemd-networkd module wants dbus and procps in the root), booted with
                   `rd.luks.uuid=... rd.neednet=1 ip=dhcp`

The peers' images are built in chroots of the cached Debian 12 root (tools/debian-root) with
the same crypttab. Each boots in a network namespace of its own (testkit's netlab, run by
boot_luks's ignored `bench_unlock` test): DHCP by dnsmasq and tangd for the Tang boots; a
static address and no Tang server for the SSH boots, where the client sends the passphrase as
soon as port 22 opens (`printf 'PASS\\n' | ssh -T root@GUEST [cryptroot-unlock]`).

Measured from the kernel log's timestamps (printk.time=1; seconds since the kernel started):
the container unlocked (leanrd's "unlocked as" line; the peers' messages, placed by their
console time relative to the next kernel line), the root file system on dm-0 mounted (the
kernel's EXT4-fs line, the same for all), and the root's init (its /proc/uptime).
Image sizes: each generator without and with the unlock features.

Usage (root): python3 bench/unlock.py [--runs 3] [--no-ssh]
Raw results: bench/results/unlock-DATE-COMMIT.json.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import common
from common import ROOT, build_leanrd, chroot_build, chroot_install, debian_tree, save, sh, sysroot

LUKS_UUID = "0c0c0c0c-1111-4222-8333-444444444444"
FS_UUID = "0e0e0e0e-1111-4222-8333-444444444444"  # the ext4 inside (boot_luks's ROOT_UUID)
CRYPTTAB = f"sda3_crypt UUID={LUKS_UUID} none luks,discard\n"
ROOT_ARG = "root=/dev/mapper/sda3_crypt"
GUEST = "10.77.0.9"
SERVER = "10.77.0.1"
MARK = "LEANRD-LUKS-ROOT-OK"
# What each image says when the container is open (console text; the peers' lines carry no
# kernel timestamp of their own).
UNLOCKED = {"leanrd": "unlocked as /dev/mapper/sda3_crypt", "initramfs-tools": "sda3_crypt: set up successfully",
            "dracut": "Finished \x1b[0;1;39msystemd-cryptsetu"}
MOUNTED = "EXT4-fs (dm-0): mounted"


def host_kernel():
    """The release boot_luks boots (testkit: the host's newest /lib/modules)."""
    rel = sorted(os.listdir("/lib/modules"), key=lambda v: [int(x) if x.isdigit() else x
                                                            for x in re.split(r"[.-]", v)])[-1]
    return rel


def versions(tree, pkgs):
    out = {}
    for p in pkgs:
        r = subprocess.run(["dpkg-query", f"--admindir={tree}/var/lib/dpkg", "-W", "-f", "${Version}", p],
                           capture_output=True, text=True)
        out[p] = r.stdout.strip() or None
    return out


def stamp(console, what):
    """The kernel timestamp of the first line holding `what`."""
    for line in console.splitlines():
        if what in line:
            m = re.match(r"\s*\[\s*(\d+\.\d+)\]", line)
            if m:
                return float(m.group(1))
    return None


def measure(flavour, doc):
    """(unlocked s, root mounted s, root's init s) since the kernel's start, None where absent."""
    c = doc["console"]
    mounted = stamp(c, MOUNTED)
    unlocked = stamp(c, UNLOCKED[flavour])
    if unlocked is None and mounted is not None and UNLOCKED[flavour] in doc["marks"] and MOUNTED in doc["marks"]:
        # The peer's line has no timestamp: place it by the console's clock before the mount's.
        unlocked = mounted - (doc["marks"][MOUNTED] - doc["marks"][UNLOCKED[flavour]])
    m = re.search(MARK + r" (\d+\.\d+)", c)
    return unlocked, mounted, float(m.group(1)) if m else None


def med(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 2) if xs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-ssh", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    leanrd, init = build_leanrd()
    kver = host_kernel()
    work = tempfile.mkdtemp(prefix="leanrd-bench-unlock-")
    try:
        key = f"{work}/ssh-key"
        sh(f"ssh-keygen -q -t ed25519 -N '' -C bench -f {key}")
        images, sizes = {}, {}

        # leanrd: universal, without and with each unlock feature.
        sr = f"{work}/sysroot"
        sysroot(sr, {"crypttab": CRYPTTAB})
        for name, extra in [("leanrd", []), ("leanrd +clevis", ["--include", "clevis"]),
                            ("leanrd +ssh", ["--ssh-authorized-keys", f"{key}.pub"]),
                            ("leanrd +clevis +ssh", ["--include", "clevis", "--ssh-authorized-keys", f"{key}.pub"])]:
            out = f"{work}/{name.replace(' ', '').replace('+', '-')}.img"
            sh(" ".join([leanrd, "build", "-k", kver, "--universal", "--sysroot", sr, "--init", init, "-o", out,
                         "--force"] + extra), stderr=subprocess.DEVNULL)
            sizes[name] = os.path.getsize(out)
            images[name] = out

        # initramfs-tools: cryptsetup-initramfs alone, then with clevis-initramfs and dropbear-initramfs.
        it = debian_tree(work, "initramfs-tools", kver)
        open(f"{it}/etc/crypttab", "w").write(CRYPTTAB.replace("luks,discard", "luks,discard,initramfs"))
        open(f"{it}/etc/fstab", "w").write("/dev/mapper/sda3_crypt / ext4 errors=remount-ro 0 1\n")
        chroot_build(it, f"mkinitramfs -o /tmp/plain.img {kver}", quiet=True)
        sizes["initramfs-tools"] = os.path.getsize(f"{it}/tmp/plain.img")
        chroot_install(it, ["clevis-initramfs", "dropbear-initramfs"])
        shutil.copy(f"{key}.pub", f"{it}/etc/dropbear/initramfs/authorized_keys")
        chroot_build(it, f"mkinitramfs -o /tmp/peer.img {kver}", quiet=True)
        sizes["initramfs-tools +clevis +dropbear"] = os.path.getsize(f"{it}/tmp/peer.img")
        images["initramfs-tools"] = f"{it}/tmp/peer.img"

        # dracut: generic with crypt, then with clevis and its Tang pin.
        dr = debian_tree(work, "dracut", kver)
        open(f"{dr}/etc/crypttab", "w").write(CRYPTTAB)
        open(f"{dr}/etc/fstab", "w").write("/dev/mapper/sda3_crypt / ext4 errors=remount-ro 0 1\n")
        chroot_build(dr, f"dracut --no-hostonly --add crypt --zstd --force /tmp/plain.img {kver}", quiet=True)
        sizes["dracut"] = os.path.getsize(f"{dr}/tmp/plain.img")
        chroot_install(dr, ["clevis-dracut", "procps", "dbus"])
        chroot_build(dr, f"dracut --no-hostonly --add 'crypt clevis clevis-pin-tang' --omit ifcfg --zstd --force "
                         f"/tmp/peer.img {kver}", quiet=True)
        sizes["dracut +clevis"] = os.path.getsize(f"{dr}/tmp/peer.img")
        images["dracut"] = f"{dr}/tmp/peer.img"

        peers = {"initramfs-tools": versions(it, ["initramfs-tools", "cryptsetup-initramfs", "clevis-initramfs",
                                                  "dropbear-initramfs", "clevis", "busybox"]),
                 "dracut": versions(dr, ["dracut", "clevis-dracut", "clevis", "systemd"])}

        static = f"ip={GUEST}::{SERVER}:255.255.255.0"
        kinds = [
            ("leanrd", "tang", images["leanrd +clevis"], f"{ROOT_ARG} leanrd.debug printk.time=1", []),
            ("initramfs-tools", "tang", images["initramfs-tools"], f"{ROOT_ARG} ip=dhcp printk.time=1", []),
            # clevis-initramfs 19 takes `ip=dhcp`'s "dhcp" for an interface's name and waits 10 s
            # for it to appear: the same with the NIC named.
            ("initramfs-tools", "tang-nic", images["initramfs-tools"], f"{ROOT_ARG} ip=:::::ens3:dhcp printk.time=1",
             []),
            ("dracut", "tang", images["dracut"],
             f"root=UUID={FS_UUID} rd.luks.uuid={LUKS_UUID} rd.neednet=1 ip=dhcp printk.time=1", []),
        ]
        if not a.no_ssh:
            kinds += [
                ("leanrd", "ssh", images["leanrd +ssh"], f"{ROOT_ARG} leanrd.debug {static}::eth0:off printk.time=1",
                 []),
                ("initramfs-tools", "ssh", images["initramfs-tools"], f"{ROOT_ARG} {static}:::off printk.time=1",
                 ["cryptroot-unlock"]),
            ]
        boots = []
        for r in range(a.runs):
            for flavour, how, image, append, args in kinds:
                boots.append({"name": f"{flavour}-{how}-{r + 1}", "flavour": flavour, "how": how, "image": image,
                              "append": append, "marks": [UNLOCKED[flavour], MOUNTED], "ssh_key": key,
                              "ssh_args": args, "newline": not args, "guest": GUEST})
        outdir = f"{work}/boots"
        os.makedirs(outdir)
        spec = f"{work}/spec.json"
        json.dump({"out": outdir, "boots": boots}, open(spec, "w"))
        env = dict(os.environ, LEANRD_BENCH_UNLOCK=spec)
        r = subprocess.run(["nice", "-n", "5", "cargo", "test", "--release", "-q", "-p", "leanrd", "--test",
                            "boot_luks", "--", "--ignored", "--exact", "bench_unlock", "--nocapture"],
                           cwd=ROOT, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout[-3000:] + r.stderr[-3000:], file=sys.stderr)

        raw = []
        for b in boots:
            p = f"{outdir}/{b['name']}.json"
            if not os.path.exists(p):
                raw.append({**b, "error": "no boot"})
                continue
            doc = json.load(open(p))
            u, m, i = measure(b["flavour"], doc)
            raw.append({"name": b["name"], "flavour": b["flavour"], "how": b["how"], "append": b["append"],
                        "unlocked_s": u, "root_mounted_s": m, "root_init_s": i, "vm_seconds": doc["vm_seconds"],
                        "ssh": doc.get("ssh"), "console_tail": doc["console"][-4000:]})
            if i is None:
                print(f"\n{b['name']}: did not reach the root's init; console's end:\n{doc['console'][-2500:]}\n")

        print(f"\nkernel {kver}, QEMU TCG, {a.runs} runs, medians (seconds since the kernel's start)\n")
        print("| image | unlock by | unlocked s | root mounted s | root's init s | reached | image bytes |")
        print("|---|---|---:|---:|---:|---:|---:|")
        size_of = {"leanrd-tang": "leanrd +clevis", "leanrd-ssh": "leanrd +ssh",
                   "initramfs-tools-tang-nic": "initramfs-tools +clevis +dropbear",
                   "initramfs-tools-tang": "initramfs-tools +clevis +dropbear",
                   "initramfs-tools-ssh": "initramfs-tools +clevis +dropbear", "dracut-tang": "dracut +clevis"}
        for flavour, how, *_ in kinds:
            rs = [x for x in raw if x.get("flavour") == flavour and x.get("how") == how]
            ok = sum(1 for x in rs if x.get("root_init_s") is not None)
            key_ = f"{flavour}-{how}"
            by = {"tang": "Tang", "tang-nic": "Tang (NIC named)", "ssh": "SSH"}[how]
            print(f"| {flavour} | {by} | {med([x.get('unlocked_s') for x in rs])} | "
                  f"{med([x.get('root_mounted_s') for x in rs])} | {med([x.get('root_init_s') for x in rs])} | "
                  f"{ok}/{len(rs)} | {sizes[size_of[key_]]} |")
        print("\n| image | bytes | added by the unlock features |\n|---|---:|---:|")
        base = {"leanrd": sizes["leanrd"], "initramfs-tools": sizes["initramfs-tools"], "dracut": sizes["dracut"]}
        for n, s in sizes.items():
            print(f"| {n} | {s} | {s - base[n.split()[0]]:+d} |")
        save("unlock", {"kernel": kver, "runs": a.runs, "image_bytes": sizes, "boots": raw}, peers=peers)
    finally:
        if a.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
