#!/usr/bin/env python3
"""Live-media benchmark: time to multi-user from a live ISO, leanrd against dracut's
dmsquash-live (Debian's dracut-live), on the same squashfs, in one run. QEMU TCG -m 1024,
the host's Debian 12 kernel booted directly (-kernel/-initrd), the ISO as an IDE CD.

The root: the Debian 12 test root of the "dracut" flavour (tools/debian-root bookworm dracut,
made a test system by the harness's finish-tree: the report unit prints LEANRD-STATE and
LEANRD-ANALYZE on the serial console and powers off), with an empty /etc/fstab (the root is
an overlay) and dracut-live installed (apt, in a chroot of it). The medium: one hybrid ISO,
`tools/make-live-iso --tree ROOT --layout dracut --label BENCH_LIVE` (the root as
/LiveOS/squashfs.img, zstd); both images boot that same ISO (the leanrd image it holds under
/boot is not used: the image is given to QEMU). Variants:

  leanrd universal          `leanrd build -k KVER --universal --include live --sysroot ROOT`,
                            on the host; `root=live:CDLABEL=BENCH_LIVE rd.live.image`
  dracut dmsquash-live      `dracut --no-hostonly -a dmsquash-live` in a chroot of the root;
                            the same command line
  leanrd universal ram      leanrd's image with `rd.live.ram` added (the squashfs copied into RAM)
  dracut dmsquash-live ram  dracut's image with `rd.live.ram` added

Every command line also holds `console=ttyS0 panic=-1` (the harness puts them first).
Measured, in one run: build seconds (median of --runs builds; both natively on the host, dracut
in a chroot), image bytes, and per boot (median of --runs boots, one VM at a time, the variants
taking turns): kernel start → multi-user.target (systemd-analyze's total) and the initramfs
phase ("Run /init" → the root's systemd starting, from the kernel's timestamps on the console;
it includes finding the CD, mounting the squashfs and the overlay, and for `ram` the copy).
Every boot must reach `is-system-running` = running.

Usage (root, Debian 12 host): python3 bench/live.py [--runs 3]
Raw results: bench/results/live-DATE-COMMIT.json.
"""

import os
import re
import shutil
import subprocess
import tempfile
import time

from common import ROOT, boot, boot_setup, chroot_build, debian_tree, harness, ratio, report, save, sh, tool_version
from debian import measure, med

LABEL = "BENCH_LIVE"
APPEND = f"root=live:CDLABEL={LABEL} rd.live.image"
DRACUT = "dracut --no-hostonly -a dmsquash-live --force /tmp/peer.img {kver}"
# A boot that stops here will not reach running: end it then, not at the timeout.
STOP = ("Kernel panic", "Entering emergency mode", "no rescue shell in this image", "dracut Warning: Could not boot")


def iso_file_size(iso, path):
    """The size of a file on the ISO (xorriso's listing), or None."""
    r = subprocess.run(["xorriso", "-indev", iso, "-lsl", path], capture_output=True, text=True)
    m = re.search(r"^-\S+\s+\d+\s+\S+\s+\S+\s+(\d+)\s", r.stdout, re.M)
    return int(m.group(1)) if m else None


def main():
    a, kver, kernel, leanrd, init = boot_setup()
    work = tempfile.mkdtemp(prefix="leanrd-bench-live-", dir="/var/tmp")
    try:
        tree = debian_tree(work, "dracut", kver)
        harness("finish-tree", tree, "--leanrd", leanrd, "--init", init)
        with open(f"{tree}/etc/fstab", "w") as f:
            f.write("")
        # dracut's live support (modules 90dmsquash-live, 99img-lib...) is Debian's dracut-live.
        shutil.copy("/etc/resolv.conf", f"{tree}/etc/resolv.conf")
        chroot_build(tree, "sh -c 'apt-get -o APT::Sandbox::User=root update -qq && "
                           "DEBIAN_FRONTEND=noninteractive apt-get -o APT::Sandbox::User=root install -y -qq "
                           "--no-install-recommends dracut-live && apt-get clean'", quiet=True)
        peers = {p: tool_version(f"dpkg-query --admindir {tree}/var/lib/dpkg -W -f '${{Version}}' {p}")
                 for p in ("dracut", "dracut-live")}
        peers["qemu"] = tool_version("qemu-system-x86_64 --version")
        peers["squashfs-tools"] = tool_version("dpkg-query -W -f '${Version}' squashfs-tools")
        images, builds = {}, {}

        name = "leanrd universal"
        out = os.path.join(work, "leanrd-universal.img")
        builds[name] = []
        for _ in range(a.runs):
            s = time.perf_counter()
            sh(f"{leanrd} build -k {kver} --universal --include live --force --sysroot {tree} --init {init} -o {out}",
               stderr=subprocess.DEVNULL)
            builds[name].append(time.perf_counter() - s)
        images[name] = out

        name = "dracut dmsquash-live"
        builds[name] = [chroot_build(tree, DRACUT.format(kver=kver)) for _ in range(a.runs)]
        images[name] = os.path.join(work, "dracut-dmsquash-live.img")
        shutil.move(f"{tree}/tmp/peer.img", images[name])

        # The medium: the root (with dracut-live, without the peer's image) as dracut's
        # /LiveOS/squashfs.img on a hybrid ISO.
        iso = os.path.join(work, "live.iso")
        sh(f"{ROOT}/tools/make-live-iso --tree {tree} --kernel {kernel} --initrd {images['leanrd universal']} "
           f"--label {LABEL} --layout dracut --append 'console=ttyS0 panic=-1' --timeout 1 -o {iso}",
           stdout=subprocess.DEVNULL)
        medium = {"iso_bytes": os.path.getsize(iso), "squashfs_bytes": iso_file_size(iso, "/LiveOS/squashfs.img"),
                  "tree_bytes": int(subprocess.run(["du", "-sb", tree], capture_output=True, text=True,
                                                   check=True).stdout.split()[0])}
        shutil.rmtree(tree)

        appends = {"leanrd universal": APPEND, "dracut dmsquash-live": APPEND,
                   "leanrd universal ram": APPEND + " rd.live.ram", "dracut dmsquash-live ram": APPEND + " rd.live.ram"}
        images["leanrd universal ram"] = images["leanrd universal"]
        images["dracut dmsquash-live ram"] = images["dracut dmsquash-live"]
        cd = ["-drive", f"file={iso},media=cdrom,if=ide,readonly=on"]

        # One VM at a time, the variants taking turns.
        runs = []
        for _ in range(a.runs):
            for name in images:
                runs.append((name, boot(kernel, images[name], appends[name], memory=1024, qemu=cd, stop=STOP,
                                        timeout=420)))

        print(f"## Debian 12 live ISO (dracut layout, squashfs {medium['squashfs_bytes']} bytes zstd, IDE CD), "
              f"{time.strftime('%Y-%m-%d')}, kernel {kver}, QEMU TCG -m 1024, direct kernel boot, one VM at a time; "
              f"medians of {a.runs}\n")
        raw, res = report(images, builds, runs, measure, med)
        for name in raw:
            raw[name]["append"] = "console=ttyS0 panic=-1 " + appends[name]
        print()
        for lean, peer in (("leanrd universal", "dracut dmsquash-live"),
                           ("leanrd universal ram", "dracut dmsquash-live ram")):
            print(f"- {lean} / {peer}: initramfs phase {ratio(res, lean, peer, 1)}, "
                  f"kernel → multi-user {ratio(res, lean, peer, 0)}")
        for name in raw:
            ram = [m for m in (re.search(r"copied into RAM in [^\n]*", r["console"]) for n, r in runs if n == name)
                   if m]
            if ram:
                raw[name]["ram_copy"] = [m.group(0).strip() for m in ram]
        save("live", {"kernel": kver, "runs": a.runs, "label": LABEL, "medium": medium,
                      "dracut_build": DRACUT.format(kver=kver), "variants": raw}, peers)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
