#!/usr/bin/env python3
"""The way down (issue 53): `systemctl poweroff` to the power off, from a Debian 13 root on LUKS,
leanrd (its exitrd) against initramfs-tools (which leaves none) and dracut's shutdown module, in
one run; and in the same boots, whether the RAM of the machine that went down still holds the
LUKS volume key.

The disks: the boot scenarios' `luks` layout (Debian's installer's: GPT, an ESP, /boot, LUKS2
holding the ext4 root, `sda3_crypt` in crypttab), made by `leanrd-harness luks-disk` (testkit's
luks_prep in a prep VM) from a copy of the cached Debian 13 root with the peer installed
(tools/debian-root trixie initramfs-tools | dracut), made a test system by the harness's
finish-tree. leanrd's and initramfs-tools' images boot the initramfs-tools root; dracut's its
own root (dracut conflicts with initramfs-tools), whose /boot holds the dracut image as
initrd.img-KVER: dracut-shutdown.service unpacks it into /run/initramfs at shutdown. Images:

  leanrd            `leanrd build --universal --sysroot ROOT` (the exitrd is on by default)
  initramfs-tools   `mkinitramfs` (MODULES=most) in a chroot of the root, cryptsetup-initramfs,
                    crypttab's `initramfs` option (the chroot's root is not the container)
  dracut            `dracut --no-hostonly --add "crypt shutdown"` in a chroot of the root, with
                    systemd-cryptsetup installed (Debian 13's dracut unlocks with it, and nothing
                    pulls it in: without it the image never asks), booted with
                    rd.luks.name=UUID=sda3_crypt; as shipped, and again with
                    /run/initramfs/.need_shutdown made by the root before the poweroff
                    ("dracut, forced"): dracut-initramfs-restore unpacks the image only when that
                    file exists, and with systemd in the initrd only dracut's non-systemd unlock
                    (cryptroot-ask), LVM, md, dmraid and multipath scripts make it; the systemd
                    cryptsetup path that unlocked this root does not

The passphrase is typed on the serial console by the harness at each generator's own prompt.
Each boot: once the root's report has run (tools/boot-report: multi-user reached, the state
printed), the bench's hook (/usr/local/sbin/leanrd-test-hook, this root's copy only) writes a
mark to /dev/kmsg and runs `systemctl poweroff` (not -f: systemd stops the units, then
systemd-shutdown pivots into /run/initramfs when an exitrd is there). Measured from the kernel's
timestamps on the console: the mark → "reboot: Power down". QEMU stays up after the power off
(-no-shutdown) for the monitor's `dump-guest-memory`; `leanrd-harness ram-key` counts the copies
of each 32-byte half of the volume key (read from the header with the passphrase) in that RAM.
Also noted per boot: the mark → systemd-shutdown's first line (every unit stopped), whether
systemd-shutdown entered an exitrd ("Entering exitrd"), and leanrd's own teardown lines
(leanrd.debug, on leanrd's command line only).

Usage (root, Debian 12 host, qemu-system-x86_64): python3 bench/shutdown.py [--runs 3]
Raw results: bench/results/shutdown-DATE-COMMIT.json (every boot's figures).
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile

from common import (boot, build_leanrd, chroot_build, chroot_install, debian_tree, harness, kernel, save, sh,
                    tool_version)

PASS = "leanrd-debian-passphrase"  # testkit's PASS, with which luks-disk makes the container
MARK = "LEANRD-BENCH-POWEROFF"
HOOK = r"""#!/bin/sh
# bench/shutdown.py: a mark in the kernel's log (its timestamp), then a real poweroff: systemd
# stops every unit and systemd-shutdown runs. The report never reaches its own `poweroff -f`.
FORCE
printf '<2>%s\n' MARK >/dev/kmsg
systemctl poweroff
exec sleep 600
"""
# What each generator asks on the console: the harness types the passphrase there.
PROMPT = {"leanrd": "Enter passphrase", "initramfs-tools": "Please unlock disk", "dracut": "passphrase for disk"}


def prepare(work, flavour, kver, leanrd, init, force_dracut=False):
    """The Debian 13 root with `flavour`, made a test system (finish-tree), with the bench's
    hook; returns the tree."""
    tree = debian_tree(work, flavour, kver, "trixie")
    harness("finish-tree", tree, "--leanrd", leanrd, "--init", init)
    hook = HOOK.replace("MARK", MARK).replace(
        "FORCE", "! grep -qw leanrd.bench=need-shutdown /proc/cmdline || { mkdir -p /run/initramfs && "
        ": >/run/initramfs/.need_shutdown; }")
    os.makedirs(f"{tree}/usr/local/sbin", exist_ok=True)
    with open(f"{tree}/usr/local/sbin/leanrd-test-hook", "w") as f:
        f.write(hook)
    os.chmod(f"{tree}/usr/local/sbin/leanrd-test-hook", 0o755)
    return tree


def luks_disk(tree, out):
    """The installer's LUKS layout of `tree` at `out` (a prep VM); (LUKS UUID, /boot's offset,
    /boot's size)."""
    uuid, off, size = harness("luks-disk", tree, "--out", out).strip().split("\t")
    return uuid, int(off), int(size)


def put_boot(work, disk, off, size, name, src):
    """Copy `src` into the disk's /boot partition as `name`."""
    mnt = os.path.join(work, "boot.mnt")
    os.makedirs(mnt, exist_ok=True)
    loop = subprocess.run(["losetup", "-f", "--show", "-o", str(off), "--sizelimit", str(size), disk], check=True,
                          capture_output=True, text=True).stdout.strip()
    try:
        sh(f"mount {loop} {mnt}")
        shutil.copy(src, f"{mnt}/{name}")
    finally:
        subprocess.run(["umount", mnt])
        subprocess.run(["losetup", "-d", loop])


def kernel_time(log, pattern):
    """The kernel timestamp of the first console line matching `pattern` (None when none)."""
    m = re.search(r"\[\s*([0-9]+\.[0-9]+)\] " + pattern, log)
    return float(m.group(1)) if m else None


def one_boot(kernel_path, v, work, memory):
    """Boot one variant, power off, dump and search the RAM; the boot's figures."""
    dump = os.path.join(work, f"ram-{os.getpid()}-{v['name'].replace(' ', '-').replace(',', '')}.elf")
    got = boot(kernel_path, v["image"], v["append"], disks=[v["disk"]], snapshot=True, memory=memory,
               passphrase=PASS, timeout=900,
               stop=["reboot: Power down", "Kernel panic"],
               qemu=["-no-shutdown"], monitor=[f"reboot: Power down=dump-guest-memory {dump}"],
               prompt=v["prompt"])
    log = got["console"]
    mark, down = kernel_time(log, MARK), kernel_time(log, "reboot: Power down")
    # systemd-shutdown's first line: every unit stopped, what is left is its own loop and the
    # exitrd (when it pivots into one).
    final = kernel_time(log, r"systemd-shutdown\[1\]:")
    r = {"running": "LEANRD-STATE running" in log, "mark_s": mark, "power_down_s": down,
         "poweroff_s": round(down - mark, 3) if mark is not None and down is not None else None,
         "units_stopped_s": round(final - mark, 3) if mark is not None and final is not None else None,
         "entered_exitrd": "Entering exitrd" in log,
         "leanrd_teardown": [l.strip() for l in log.splitlines() if "leanrd: shutdown:" in l],
         "vm_seconds": got["vm_seconds"]}
    if os.path.exists(dump):
        k = json.loads(harness("ram-key", "--disk", v["disk"], "--dump", dump))
        os.remove(dump)
        r["ram_dump_bytes"] = k["dump_bytes"]
        # A dump cut short would find nothing.
        r["key_halves_in_ram"] = k["halves"] if k["dump_bytes"] >= (memory - 16) << 20 else None
        r["key_bytes"] = k["key_bytes"]
    else:
        r["key_halves_in_ram"] = None
    if r["poweroff_s"] is None or r["key_halves_in_ram"] is None or not r["running"]:
        r["console_tail"] = log[-4000:]
    return r


def make(work, kver, leanrd, init):
    """The two LUKS disks and the three images in `work`; ({flavour: (LUKS UUID, /boot's offset,
    /boot's size)}, the peers' versions)."""
    trees = {f: prepare(work, f, kver, leanrd, init) for f in ("initramfs-tools", "dracut")}
    # Debian 13's dracut unlocks with systemd-cryptsetup, a package of its own that nothing pulls
    # in: without it the image has no way to open the container (and never asks).
    chroot_install(trees["dracut"], ["systemd-cryptsetup"])
    peers = {f: tool_version(f"dpkg-query --admindir {t}/var/lib/dpkg -W -f '${{Version}}' {f}")
             for f, t in trees.items()}
    for p in ("systemd", "systemd-cryptsetup"):
        peers[p] = tool_version(f"dpkg-query --admindir {trees['dracut']}/var/lib/dpkg -W -f '${{Version}}' {p}")
    disks = {f: os.path.join(work, f"{f}.disk") for f in trees}
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        made = dict(zip(trees, ex.map(lambda f: luks_disk(trees[f], disks[f]), trees)))
    crypttab = lambda uuid, opts: f"sda3_crypt UUID={uuid} none {opts}\n"
    uuid_it, uuid_dr = made["initramfs-tools"][0], made["dracut"][0]
    with open(f"{trees['initramfs-tools']}/etc/crypttab", "w") as f:
        f.write(crypttab(uuid_it, "luks,discard,initramfs"))
    with open(f"{trees['dracut']}/etc/crypttab", "w") as f:
        f.write(crypttab(uuid_dr, "luks,discard"))

    images = {"leanrd": os.path.join(work, "leanrd.img")}
    sh(f"nice -n 10 {leanrd} build -k {kver} --universal --force --sysroot {trees['initramfs-tools']} "
       f"--init {init} -o {images['leanrd']}", stderr=subprocess.DEVNULL)
    chroot_build(trees["initramfs-tools"], f"nice -n 10 mkinitramfs -o /tmp/peer.img {kver}", quiet=True)
    images["initramfs-tools"] = os.path.join(work, "initramfs-tools.img")
    shutil.move(f"{trees['initramfs-tools']}/tmp/peer.img", images["initramfs-tools"])
    chroot_build(trees["dracut"], f"nice -n 10 dracut --no-hostonly --add 'crypt shutdown' --force "
                 f"/tmp/peer.img {kver}", quiet=True)
    images["dracut"] = os.path.join(work, "dracut.img")
    shutil.move(f"{trees['dracut']}/tmp/peer.img", images["dracut"])
    # dracut-shutdown.service restores /run/initramfs from the root's /boot.
    put_boot(work, disks["dracut"], made["dracut"][1], made["dracut"][2], f"initrd.img-{kver}", images["dracut"])
    for t in trees.values():
        shutil.rmtree(t)
    return made, peers


def med(xs):
    xs = [x for x in xs if x is not None]
    return f"{statistics.median(xs):.2f}" if xs else "–"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--memory", type=int, default=1024, help="the VMs' memory, MiB (the RAM dumped)")
    ap.add_argument("--work", help="a directory kept after the run; its disks and images, when there, are "
                                   "used again (each boot writes to a snapshot)")
    a = ap.parse_args()
    leanrd, init = build_leanrd()
    kver, vmlinuz = kernel("trixie")
    work = a.work or tempfile.mkdtemp(prefix="leanrd-bench-shutdown-", dir="/var/tmp")
    os.makedirs(work, exist_ok=True)
    state = os.path.join(work, "made.json")
    try:
        if not os.path.exists(state):
            made, peers = make(work, kver, leanrd, init)
            with open(state, "w") as f:
                json.dump({"made": made, "peers": peers}, f)
        with open(state) as f:
            kept = json.load(f)
        made, peers = kept["made"], kept["peers"]
        images = {n: os.path.join(work, f"{n}.img") for n in ("leanrd", "initramfs-tools", "dracut")}
        disks = {f: os.path.join(work, f"{f}.disk") for f in ("initramfs-tools", "dracut")}
        uuid_dr = made["dracut"][0]


        root = "root=/dev/mapper/sda3_crypt"
        variants = [
            {"name": "leanrd", "image": images["leanrd"], "disk": disks["initramfs-tools"],
             "append": f"{root} leanrd.debug", "prompt": PROMPT["leanrd"]},
            {"name": "initramfs-tools", "image": images["initramfs-tools"], "disk": disks["initramfs-tools"],
             "append": root, "prompt": PROMPT["initramfs-tools"]},
            {"name": "dracut", "image": images["dracut"], "disk": disks["dracut"],
             "append": f"{root} rd.luks.name={uuid_dr}=sda3_crypt", "prompt": PROMPT["dracut"]},
            {"name": "dracut, forced", "image": images["dracut"], "disk": disks["dracut"],
             "append": f"{root} rd.luks.name={uuid_dr}=sda3_crypt leanrd.bench=need-shutdown",
             "prompt": PROMPT["dracut"]},
        ]
        boots = {v["name"]: [] for v in variants}
        # The variants take turns, one VM at a time (the RAM dumps are the VMs' whole memory).
        for i in range(a.runs):
            for v in variants:
                r = one_boot(vmlinuz, v, work, a.memory)
                boots[v["name"]].append(r)
                print(f"run {i + 1} {v['name']}: poweroff {r['poweroff_s']} s, key halves in RAM "
                      f"{r['key_halves_in_ram']}, exitrd entered {r['entered_exitrd']}, running {r['running']}",
                      flush=True)

        print(f"\n## The way down: Debian 13 root on LUKS2 (systemd {peers['systemd']}), kernel {kver}, "
              f"QEMU TCG -m {a.memory}, one VM at a time; medians of {a.runs}\n")
        print("| variant | `systemctl poweroff` → power off, s | systemd entered an exitrd | "
              "volume key halves left in RAM | running |")
        print("|---|---:|---:|---:|---:|")
        raw = {}
        for v in variants:
            bs = boots[v["name"]]
            halves = [b["key_halves_in_ram"] for b in bs]
            shown = sorted({str(h) for h in halves})
            print(f"| {v['name']} | {med([b['poweroff_s'] for b in bs])} | "
                  f"{sum(b['entered_exitrd'] for b in bs)}/{len(bs)} | {', '.join(shown)} | "
                  f"{sum(b['running'] for b in bs)}/{len(bs)} |")
            raw[v["name"]] = {"image_bytes": os.path.getsize(v["image"]), "append": v["append"], "boots": bs}
        print("\nKey halves: copies of each 32-byte half of the 64-byte XTS volume key in the dumped RAM.")
        save("shutdown", {"suite": "trixie", "kernel": kver, "runs": a.runs, "memory_mib": a.memory,
                          "variants": raw}, peers)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
