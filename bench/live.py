#!/usr/bin/env python3
"""Live-media benchmark: time to multi-user from a live ISO, leanrd against dracut's
dmsquash-live (Debian 12's dracut-live 059), on the same squashfs, in one run: QEMU TCG, the
host's Debian 12 kernel booted directly (-kernel/-initrd), the ISO as an IDE CD
(`-drive file=ISO,media=cdrom,if=ide,readonly=on`), one VM at a time.

The root: the Debian 12 test root of the "dracut" flavour (tools/debian-root bookworm dracut,
made a test system by the harness's finish-tree: its report unit prints LEANRD-STATE and
LEANRD-ANALYZE on the serial console and powers off), with an empty /etc/fstab (the root is
an overlay) and dracut-live installed (apt, in a chroot of it). The medium: one hybrid ISO,
`tools/make-live-iso --tree ROOT --layout dracut --label BENCH_LIVE` (the root itself as
/LiveOS/squashfs.img, zstd); every variant boots that same ISO (the leanrd image the ISO holds
under /boot is not used: each image is given to QEMU). Command line: `console=ttyS0 panic=-1
root=live:CDLABEL=BENCH_LIVE rd.live.image`, plus `rd.live.ram` for the `ram` variants.

  leanrd universal          `leanrd build -k KVER --universal --include live --sysroot ROOT`,
                            on the host
  dracut dmsquash-live      `dracut --no-hostonly -a dmsquash-live` in a chroot of the root,
                            with a tmpfiles.d file (--include) that makes /run/overlayfs and
                            /run/ovlwork: Debian 12's dracut 059 with systemd 252 cannot boot a
                            squashfs that is the root itself otherwise (its sysroot.mount, the
                            overlay, runs before anything makes the upper directory: "overlayfs:
                            failed to resolve '/run/overlayfs': -2"; dracutdevs/dracut issue
                            1820, dracut-ng issue 431; systemd 255 makes it itself). The image
                            as shipped (without the file) is built and booted once too, and
                            its outcome printed.
  ... ram                   the same images with `rd.live.ram` (the squashfs copied into RAM);
                            at -m 1024 (dracut copies into systemd's /run, 20 % of RAM: 1 GiB
                            is too little for this squashfs) and at -m 1536.

Measured: build seconds (median of --runs builds, both natively on the host, dracut in a
chroot), image bytes, and per boot (median of --runs boots, the variants taking turns):
kernel start → multi-user.target (systemd-analyze's total) and the initramfs phase ("Run
/init" → the root's systemd starting, from the kernel's timestamps on the console: finding
the CD, mounting the squashfs and the overlay, for `ram` the copy), and how many boots reached
`is-system-running` = running (every boot must; one that does not is printed).

Usage (root, Debian 12 host): python3 bench/live.py [--runs 3]
Raw results: bench/results/live-DATE-COMMIT.json.
"""

import os
import re
import shutil
import subprocess
import tempfile
import time

from common import ROOT, boot, boot_setup, chroot_build, chroot_install, timed_builds, debian_tree, harness, ratio, report, save, sh, tool_version
from debian import measure, med

LABEL = "BENCH_LIVE"
APPEND = f"root=live:CDLABEL={LABEL} rd.live.image"
# Debian 12's dracut 059 with systemd 252 mounts the overlay (sysroot.mount) before anything
# makes its upper and work directories when the squashfs is the root itself; a tmpfiles.d
# file in the image makes them (as systemd 255 does for an overlay mount unit).
FIX = "d /run/overlayfs 0755 - - -\nd /run/ovlwork 0755 - - -\n"
FIX_SRC, FIX_DST = "/tmp/leanrd-bench-dmsquash-overlay.conf", "/usr/lib/tmpfiles.d/dmsquash-overlay.conf"
DRACUT = "dracut --no-hostonly -a dmsquash-live {extra}--force /tmp/peer.img {kver}"
# A boot that stops here will not reach running: end it then, not at the timeout.
# (dracut's "Refusing to continue" halts, and a halted VM stays until the timeout.)
STOP = ("Kernel panic", "Entering emergency mode", "no rescue shell in this image", "Refusing to continue",
        "reboot: System halted")


def iso_file_size(iso, path):
    """The size of a file on the ISO (xorriso's listing), or None."""
    r = subprocess.run(["xorriso", "-indev", iso, "-lsl", path], capture_output=True, text=True)
    m = re.search(r"^-\S+\s+\d+\s+\S+\s+\S+\s+(\d+)\s", r.stdout, re.M)
    return int(m.group(1)) if m else None


def live_measure(log):
    """debian.measure, with no figures for a boot that did not reach running (its initrd's
    systemd would pass for the root's)."""
    running, total, phase = measure(log)
    return (running, total, phase) if running else (False, None, None)


def ram_copy(log):
    """Seconds the copy into RAM took (leanrd's own line, or dracut's two kmsg lines), or None."""
    m = re.search(r"live: \d+ MiB copied into RAM in (\d+) ms", log)
    if m:
        return int(m.group(1)) / 1000
    a = re.search(r"\[\s*([0-9.]+)\] Copying live image to RAM", log)
    b = re.search(r"\[\s*([0-9.]+)\] Done copying live image to RAM", log)
    return round(float(b.group(1)) - float(a.group(1)), 3) if a and b else None


def why(log):
    """The console lines that tell why a boot did not reach running."""
    keys = ("overlayfs:", "FAILED", "FATAL", "Could not boot", "Can't mount", "wrong fs type", "emergency mode",
            "Kernel panic", "leanrd-init", "live:", "waited")
    return [line.strip() for line in log.splitlines()
            if any(k in line for k in keys) and "ommand line" not in line][:12]


def main():
    a, kver, kernel, leanrd, init = boot_setup()
    work = tempfile.mkdtemp(prefix="leanrd-bench-live-", dir="/var/tmp")
    try:
        tree = debian_tree(work, "dracut", kver)
        harness("finish-tree", tree, "--leanrd", leanrd, "--init", init)
        with open(f"{tree}/etc/fstab", "w") as f:
            f.write("")
        # dracut's live support (modules 90dmsquash-live, 99img-lib...) is Debian's dracut-live.
        chroot_install(tree, ["dracut-live"])
        peers = {p: tool_version(f"dpkg-query --admindir {tree}/var/lib/dpkg -W -f '${{Version}}' {p}")
                 for p in ("dracut", "dracut-live", "systemd")}
        peers["qemu"] = tool_version("qemu-system-x86_64 --version")
        peers["squashfs-tools"] = tool_version("dpkg-query -W -f '${Version}' squashfs-tools")
        images, builds = {}, {}

        name = "leanrd universal"
        out = os.path.join(work, "leanrd-universal.img")
        builds[name] = timed_builds(
            f"{leanrd} build -k {kver} --universal --include live --force --sysroot {tree} --init {init} -o {out}",
            a.runs)
        images[name] = out

        # dracut as Debian ships it, once: does it boot this medium?
        shipped = os.path.join(work, "dracut-shipped.img")
        shipped_build = chroot_build(tree, DRACUT.format(extra="", kver=kver), quiet=True)
        shutil.move(f"{tree}/tmp/peer.img", shipped)

        name = "dracut dmsquash-live"
        with open(tree + FIX_SRC, "w") as f:
            f.write(FIX)
        dracut_cmd = DRACUT.format(extra=f"--include {FIX_SRC} {FIX_DST} ", kver=kver)
        builds[name] = [chroot_build(tree, dracut_cmd, quiet=True) for _ in range(a.runs)]
        images[name] = os.path.join(work, "dracut-dmsquash-live.img")
        shutil.move(f"{tree}/tmp/peer.img", images[name])
        os.remove(tree + FIX_SRC)

        # The medium: the root (with dracut-live, without the peers' images) as dracut's
        # /LiveOS/squashfs.img on a hybrid ISO.
        iso = os.path.join(work, "live.iso")
        sh(f"{ROOT}/tools/make-live-iso --tree {tree} --kernel {kernel} --initrd {images['leanrd universal']} "
           f"--label {LABEL} --layout dracut --append 'console=ttyS0 panic=-1' --timeout 1 -o {iso}",
           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        medium = {"iso_bytes": os.path.getsize(iso), "squashfs_bytes": iso_file_size(iso, "/LiveOS/squashfs.img"),
                  "tree_bytes": int(subprocess.run(["du", "-sb", tree], capture_output=True, text=True,
                                                   check=True).stdout.split()[0])}
        shutil.rmtree(tree)

        cd = ["-drive", f"file={iso},media=cdrom,if=ide,readonly=on"]
        ram = APPEND + " rd.live.ram"
        # name: (image, command line, memory MiB)
        variants = {
            "leanrd universal": (images["leanrd universal"], APPEND, 1024),
            "dracut dmsquash-live": (images["dracut dmsquash-live"], APPEND, 1024),
            "leanrd universal ram": (images["leanrd universal"], ram, 1024),
            "dracut dmsquash-live ram": (images["dracut dmsquash-live"], ram, 1024),
            "leanrd universal ram -m 1536": (images["leanrd universal"], ram, 1536),
            "dracut dmsquash-live ram -m 1536": (images["dracut dmsquash-live"], ram, 1536),
        }
        table = {n: v[0] for n, v in variants.items()}
        for n in variants:
            builds.setdefault(n, builds["leanrd universal" if n.startswith("leanrd") else "dracut dmsquash-live"])

        first = boot(kernel, shipped, APPEND, memory=1024, qemu=cd, stop=STOP, timeout=420)
        ok, total, phase = live_measure(first["console"])
        as_shipped = {"build_s": shipped_build, "image_bytes": os.path.getsize(shipped), "running": ok,
                      "multi_user_s": total, "initramfs_s": phase, "vm_seconds": first["vm_seconds"],
                      "why": [] if ok else why(first["console"])}

        # One VM at a time, the variants taking turns.
        runs = []
        for _ in range(a.runs):
            for name, (image, append, mem) in variants.items():
                runs.append((name, boot(kernel, image, append, memory=mem, qemu=cd, stop=STOP, timeout=420)))

        print(f"## Debian 12 live ISO (dracut layout, squashfs {medium['squashfs_bytes']} bytes zstd, IDE CD), "
              f"{time.strftime('%Y-%m-%d')}, kernel {kver}, QEMU TCG -m 1024 unless said, direct kernel boot, one VM "
              f"at a time; medians of {a.runs}\n")
        raw, res = report(table, builds, runs, live_measure, med)
        for name, (image, append, mem) in variants.items():
            raw[name]["append"] = "console=ttyS0 panic=-1 " + append
            raw[name]["memory_mib"] = mem
            copies = [ram_copy(r["console"]) for n, r in runs if n == name]
            if "ram" in name:
                raw[name]["ram_copy_s"] = copies
            raw[name]["why"] = [why(r["console"]) for n, r in runs if n == name and not live_measure(r["console"])[0]]
        print()
        for lean, peer in (("leanrd universal", "dracut dmsquash-live"),
                           ("leanrd universal ram", "dracut dmsquash-live ram"),
                           ("leanrd universal ram -m 1536", "dracut dmsquash-live ram -m 1536")):
            print(f"- {lean} / {peer}: initramfs phase {ratio(res, lean, peer, 1)}, "
                  f"kernel → multi-user {ratio(res, lean, peer, 0)}")
        for name in variants:
            c = [x for x in raw[name].get("ram_copy_s", []) if x is not None]
            if c:
                print(f"- {name}: the copy into RAM took {med(c)} s (median)")
        print(f"- dracut as shipped (`{DRACUT.format(extra='', kver=kver)}`, no tmpfiles.d file): "
              + ("reached running" if ok else "did not reach running: " + " | ".join(as_shipped["why"][:4])))
        save("live", {"kernel": kver, "runs": a.runs, "label": LABEL, "medium": medium,
                      "leanrd_build": f"leanrd build -k {kver} --universal --include live --force --sysroot ROOT "
                                      f"--init INIT -o OUT",
                      "dracut_build": dracut_cmd, "dracut_tmpfiles": FIX, "dracut_as_shipped": as_shipped,
                      "variants": raw}, peers)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
