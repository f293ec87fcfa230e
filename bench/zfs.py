#!/usr/bin/env python3
"""A root on encrypted ZFS (issue 56), leanrd beside Debian's own ZFS initramfs and dracut's,
on the same disks: the boot scenario debian13_self_zfs_encrypted's (pool rpool on a GPT
partition of a virtio disk, encryption root rpool/ROOT with a passphrase, the root
rpool/ROOT/debian with rpool/ROOT/debian/var under it, /boot on a disk of its own), Debian 13's
own kernel (6.12) and the zfs.ko zfs-dkms built for it (tools/debian-root trixie zfs).

  leanrd universal     `leanrd build --universal --sysroot ROOT` on the host;
                       `root=ZFS=rpool/ROOT/debian`
  initramfs-tools      `mkinitramfs` (MODULES=most) with zfs-initramfs, in a chroot of a copy of
                       the root; `root=ZFS=rpool/ROOT/debian boot=zfs`
  dracut               `dracut --no-hostonly --add zfs` with zfs-dracut (trixie's dracut, with
                       its systemd), in a chroot of another copy; `root=zfs:rpool/ROOT/debian`

Each boot gets fresh copies of the disks (the pool exported, as the prep left it) and types the
passphrase when asked (leanrd and zfs load-key: "Enter passphrase"; dracut's
systemd-ask-password: "Encrypted ZFS password for"). Measured per boot (median of --runs): the
initramfs phase (the kernel's "Run /init" to the root's systemd starting, from the kernel's
timestamps: the typing is in it, the same for all), kernel start → multi-user.target
(systemd-analyze); and each image's bytes. Every boot must reach `is-system-running` = running.

The disks are made by the scenario (once, cached): run it first,
  cargo test --release -p leanrd --test boot -- debian13_self_zfs_encrypted

Usage (root): python3 bench/zfs.py [--runs 3]
Raw results: bench/results/zfs-DATE-COMMIT.json.
"""

import glob
import os
import shutil
import sys
import tempfile

from common import boot, build_leanrd, chroot_build, chroot_install, save, sh, suite_root, tool_version
from debian import measure, med

PASS = "leanrd-debian-passphrase"
DATASET = "rpool/ROOT/debian"


def cached_disks():
    """The scenario's cached ZFS disks (boot.disk, pool.disk): the newest made."""
    dirs = [os.path.dirname(p) for p in glob.glob("/var/cache/leanrd-tests/disks/*/pool.disk")
            if os.path.exists(os.path.join(os.path.dirname(p), "boot.disk"))]
    if not dirs:
        sys.exit("no cached ZFS disks: run the boot scenario debian13_self_zfs_encrypted first")
    d = max(dirs, key=os.path.getmtime)
    return os.path.join(d, "boot.disk"), os.path.join(d, "pool.disk")


def peer_tree(work, name, packages):
    """A copy of the ZFS root with `packages` installed (without recommends)."""
    tree = os.path.join(work, f"{name}-tree")
    sh(f"cp -a {suite_root('trixie', 'zfs')} {tree}")
    chroot_install(tree, packages)
    return tree


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    leanrd, init = build_leanrd()
    root = suite_root("trixie", "zfs")
    kver = os.path.basename(glob.glob(f"{root}/lib/modules/*")[0])
    vmlinuz = f"{root}/boot/vmlinuz-{kver}"
    boot_disk, pool_disk = cached_disks()
    work = tempfile.mkdtemp(prefix="leanrd-bench-zfs-", dir="/var/tmp")
    try:
        images = {}
        img = os.path.join(work, "leanrd.img")
        sh(f"{leanrd} build -k {kver} --universal --sysroot {root} --init {init} -o {img}")
        images["leanrd universal"] = (img, f"root=ZFS={DATASET}", None)
        it = peer_tree(work, "initramfs-tools", ["zfs-initramfs"])
        chroot_build(it, f"mkinitramfs -o /boot/peer.img {kver}", quiet=True)
        images["initramfs-tools"] = (f"{it}/boot/peer.img", f"root=ZFS={DATASET} boot=zfs", None)
        dr = peer_tree(work, "dracut", ["dracut", "zfs-dracut"])
        chroot_build(dr, f"dracut --no-hostonly --add zfs --force /boot/peer.img {kver}", quiet=True)
        images["dracut"] = (f"{dr}/boot/peer.img", f"root=zfs:{DATASET}", "Encrypted ZFS password for")
        peers = {
            "zfs-initramfs": tool_version(f"dpkg-query --admindir {it}/var/lib/dpkg -W -f '${{Version}}' zfs-initramfs"),
            "initramfs-tools": tool_version(
                f"dpkg-query --admindir {it}/var/lib/dpkg -W -f '${{Version}}' initramfs-tools"),
            "dracut": tool_version(f"dpkg-query --admindir {dr}/var/lib/dpkg -W -f '${{Version}}' dracut"),
            "zfs-dracut": tool_version(f"dpkg-query --admindir {dr}/var/lib/dpkg -W -f '${{Version}}' zfs-dracut"),
        }
        runs = []
        for i in range(a.runs):
            for name, (image, append, prompt) in images.items():
                disks = []
                for d in (boot_disk, pool_disk):
                    c = os.path.join(work, f"run-{os.path.basename(d)}")
                    sh(f"cp --reflink=auto --sparse=always {d} {c}")
                    disks.append(c)
                r = boot(vmlinuz, image, append, disks, passphrase=PASS, prompt=prompt, timeout=600)
                runs.append((name, r))
                ok, total, phase = measure(r["console"])
                print(f"run {i + 1} {name}: running={ok} multi-user={total} initramfs phase={phase} "
                      f"(VM {r['vm_seconds']:.0f} s)", flush=True)
        print("\n| variant | image bytes | initramfs phase s (passphrase typed) | kernel → multi-user s | running |")
        print("|---|---:|---:|---:|---:|")
        raw = {}
        for name, (image, append, _) in images.items():
            ms = [measure(r["console"]) for n, r in runs if n == name]
            size = os.path.getsize(image)
            raw[name] = {"image_bytes": size, "cmdline": append,
                         "boots": [dict(zip(("running", "multi_user_s", "initramfs_s"), measure(r["console"])),
                                        vm_seconds=r["vm_seconds"]) for n, r in runs if n == name]}
            ok = sum(1 for r, _, _ in ms if r)
            print(f"| {name} | {size} | {med([p for _, _, p in ms])} | {med([t for _, t, _ in ms])} | "
                  f"{ok}/{len(ms)} |")
            if ok < len(ms):
                bad = next(r["console"] for n, r in runs if n == name and "LEANRD-STATE running" not in r["console"])
                print(f"\n<details><summary>{name}: a boot that did not reach running</summary>\n\n```\n"
                      f"{bad[-3000:]}\n```\n</details>\n")
        save("zfs", {"kver": kver, "runs": a.runs, "variants": raw}, peers=peers)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
