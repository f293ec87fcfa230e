#!/usr/bin/env python3
"""The servers' storage (issue 56): leanrd's universal image beside dracut's on the same disks,
the same kernel (the host's Debian 12 kernel) and the same command line (dracut's spelling where
leanrd takes it too: rd.lvm.lv=, rd.luks.uuid=), one boot per stack and generator in turn.

The disks are the boot tests' (crates/leanrd/tests/boot_init.rs), busybox roots whose /sbin/init
prints LEANRD-ROOT-OK:
  pool disks     boot_lvm_pools_and_bcache's, made by a prep VM and cached under the test cache's
                 disks/ (a directory holding vgs1.disk ... dm-integrity.disk; made by running
                 `cargo test --release -p leanrd --test boot_init -- lvm_pools_and_bcache_roots`
                 when missing): a thin LV, a raid1 LV, a cached LV (dm-cache) and a snapshot in
                 vgs (two disks), bcache (backing + cache disks), LUKS2 `--integrity
                 hmac-sha256`, a standalone dm-integrity device (integritysetup's defaults)
  multipath      a GPT disk with the busybox root (made here, as boot_multipath makes its own),
                 on two virtio-scsi paths with the same serial and WWN (share-rw=on); and the
                 LUKS2-on-multipath disk boot_multipath caches (`multipath-luks`), both paths up
  NBD            the busybox root's ext4 image served by nbd-server (copyonwrite: the client may
                 write, the file stays as it is; dracut's e2fsck -a cannot open a read-only
                 export) in a network namespace made here (a bridge and a tap, no route out), a
                 static ip=, the export by name in the port's place (dracut 059's spelling)
The passphrase (testkit's PASS) is typed on the serial console at "Enter passphrase" by the
harness, for both. Each boot writes to a snapshot (the multipath disks: a copy per boot).

Images, one each for every stack:
  leanrd   `leanrd build --universal --include nbd --sysroot SR` on the host, SR the host's /usr
           with the multipath.conf, bindings and wwids boot_multipath gives its sysroot
  dracut   `dracut --no-hostonly --zstd --omit "systemd systemd-initrd dracut-systemd
           systemd-networkd" --add "dm lvm crypt mdraid multipath bcache nbd network-legacy"
           --add-drivers "..."` in a chroot of the cached Debian 12 dracut root
           (tools/debian-root bookworm dracut) with dracut-network, multipath-tools, kpartx,
           thin-provisioning-tools, bcache-tools (its 90bcache module), nbd-client, mdadm,
           isc-dhcp-client and procps installed, and the same multipath files in its /etc.
           dracut's shell init, not its systemd one: systemd's switch-root refuses a root without
           /etc/os-release ("does not seem to be an OS tree"), and the test disks' busybox roots
           have none (--systemd adds a systemd dracut image, booted on the thin root only, to
           show it)
  dracut-checkers  the same with `--include /usr/lib/multipath /usr/lib/multipath`: Debian's
           multipath-tools keeps its path checkers (libcheck*.so) there and 90multipath leaves
           them out; booted on the multipath stacks only

Measured per boot, from the kernel's timestamps on the console (no `quiet`): the initramfs phase,
the kernel's "Run /init as init process" to its "Not activating Mandatory Access Control as
/sbin/tomoyo-init does not exist" (TOMOYO's line at the first exec of /sbin/init: the root's own
init, run by switch_root); the kernel start → that line; and, as a check, the harness's wall-clock
marks ("Run /init" → LEANRD-ROOT-OK). Medians of --runs. A boot that does not reach the root's
init is recorded as failed with the console's last lines; a generator that failed a stack in the
first run is not booted on it again.

Usage (root, Debian 12 host): LEANRD_VM_SLOTS=1 nice -n 10 python3 bench/storage.py [--runs 3]
  [--work DIR (kept; its images and disks used again)] [--only STACK,...] [--systemd]
Raw results: bench/results/storage-DATE-COMMIT.json.
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from common import (HARNESS, ktime, ROOT, build_leanrd, chroot_build, chroot_install, debian_tree, kernel, save, sh,
                    sysroot, tool_version)

PASS = "leanrd-test-passphrase"  # boot_init.rs's PASS
MARK = "LEANRD-ROOT-OK"
RUN_INIT = "Run /init as init process"
ROOT_INIT = "Not activating Mandatory Access Control"
# boot_init.rs's UUIDs and the multipath LUN's WWN.
BCACHE_ROOT_UUID = "bcbcbcbc-1111-2222-3333-444444444444"
INTEGRITY_ROOT_UUID = "1e1e1e1e-1111-2222-3333-444444444444"
DM_INTEGRITY_ROOT_UUID = "1e1e1e1e-5555-6666-7777-888888888888"
MPATH_LUKS_UUID = "3a3a3a3a-9999-aaaa-bbbb-cccccccccccc"
MPATH_LUKS_ROOT_UUID = "3a3a3a3a-dddd-eeee-ffff-000000000000"
MPATH_ROOT_UUID = "3a3a3a3a-1111-2222-3333-444444444444"
MPATH_WWN = "0x5000c50015ea71ac"
WWID = "3" + MPATH_WWN[2:]
MPATH_CONF = ("defaults {\n\tuser_friendly_names yes\n\tfind_multipaths strict\n\tpath_grouping_policy multibus\n"
              "\tpath_selector \"round-robin 0\"\n}\n")
MPATH_FILES = {"multipath.conf": MPATH_CONF,
               "multipath/bindings": f"# Multipath bindings, Version : 1.0\nmpatha {WWID}\n",
               "multipath/wwids": f"# Multipath wwids, Version : 1.0\n/{WWID}/\n"}
DRACUT_PACKAGES = ["dracut-network", "multipath-tools", "kpartx", "thin-provisioning-tools", "bcache-tools",
                   "nbd-client", "mdadm", "isc-dhcp-client", "procps"]
DRACUT_OMIT = "systemd systemd-initrd dracut-systemd systemd-networkd"
DRACUT_ADD = "dm lvm crypt mdraid multipath bcache nbd network-legacy"
DRACUT_DRIVERS = ("dm-integrity dm-multipath dm-thin-pool dm-cache dm-cache-smq dm-raid raid1 dm-snapshot bcache "
                  "nbd virtio_net virtio_scsi")
SERVER, CLIENT = "10.77.0.1", "10.77.0.9"
STOP = ["Kernel panic", "Entering emergency mode", "leanrd: cannot boot", "Could not boot", "dracut Warning: Could not",
        "Dropping to debug shell"]
# The root's init (boot_multipath's and the NBD root's): the root's device, its dm name and the
# dm devices with their slaves.
MPATH_INIT = """#!/bin/sh
export PATH=/bin
busybox echo LEANRD-ROOT-OK $(busybox cat /proc/uptime)
d=/sys/dev/block/$(busybox awk '$5=="/"{print $3}' /proc/self/mountinfo)
busybox echo LEANRD-MPATH-ROOT $(busybox basename $(busybox readlink $d)) $(busybox cat $d/dm/name 2>/dev/null) \
$(busybox cat $d/dm/uuid 2>/dev/null)
for m in /sys/block/dm-*; do [ -e $m ] || continue
  busybox echo LEANRD-MPATH-DM $(busybox basename $m) $(busybox cat $m/dm/name) $(busybox cat $m/dm/uuid) \
slaves: $(busybox ls $m/slaves); done
busybox poweroff -f
"""


def stacks(pool, work):
    """Each stack: name, disks ("pool:NAME" a pool disk; "mpath:FILE" that file on two paths; "nbd"),
    the command line (both generators), what the console must show besides MARK, and what the
    root's device line shows."""
    luks_integ = subprocess.run(["blkid", "-p", "-o", "value", "-s", "UUID", f"{pool}/integrity.disk"],
                                capture_output=True, text=True).stdout.strip()
    ip = f"ip={CLIENT}::{SERVER}:255.255.255.0:box:eth0:off"
    lv = lambda n, kind: {"name": f"LVM {n}", "disks": ["pool:vgs1", "pool:vgs2"],
                          "append": f"root=/dev/mapper/vgs-{n} rd.lvm.lv=vgs/{n}", "expect": [f"vgs-{n} {kind}"]}
    return [
        {"name": "multipath, 2 paths", "disks": [f"mpath:{work}/mpath.disk"],
         "append": f"ro root=UUID={MPATH_ROOT_UUID}", "expect": [f"LEANRD-MPATH-DM dm-0 mpatha mpath-{WWID}"]},
        {"name": "LUKS2 on multipath", "disks": [f"mpath:{work}/disks/mpath-luks.disk"],
         "append": f"ro root=UUID={MPATH_LUKS_ROOT_UUID} rd.luks.uuid={MPATH_LUKS_UUID}",
         "expect": ["Enter passphrase", f"mpath-{WWID}"], "passphrase": True},
        {"name": "bcache", "disks": ["pool:back", "pool:cache"], "append": f"root=UUID={BCACHE_ROOT_UUID}",
         "expect": ["ROOTDEV bcache0 bcache"]},
        {"name": "dm-integrity (standalone)", "disks": ["pool:dm-integrity"],
         "append": f"root=UUID={DM_INTEGRITY_ROOT_UUID}", "expect": ["dm-integrity-crc32c"]},
        {"name": "LUKS2 --integrity hmac-sha256", "disks": ["pool:integrity"],
         "append": f"root=UUID={INTEGRITY_ROOT_UUID} rd.luks.uuid={luks_integ}",
         "expect": ["Enter passphrase", "luks2-hmac-sha256"], "passphrase": True},
        lv("thin", "thin"), lv("mirror", "mirror"), lv("cached", "cached"), lv("snap", "orig"),
        {"name": "NBD, static ip=", "disks": ["nbd"],
         "append": f"root=nbd:{SERVER}:busybox:ext4:ro {ip} net.ifnames=0",
         "expect": ["LEANRD-MPATH-ROOT nbd0"]},
    ]


def busybox_tree(path):
    """The busybox root of boot_multipath (its init above), with a /kind."""
    for d in ("sbin", "bin", "dev", "proc", "sys", "run"):
        os.makedirs(f"{path}/{d}")
    shutil.copy("/bin/busybox", f"{path}/bin/busybox")
    os.symlink("busybox", f"{path}/bin/sh")
    with open(f"{path}/sbin/init", "w") as f:
        f.write(MPATH_INIT)
    os.chmod(f"{path}/sbin/init", 0o755)


def pool_disks():
    """The newest cached directory of boot_lvm_pools_and_bcache's disks (made by the test when none)."""
    cache = os.environ.get("LEANRD_TEST_CACHE", "/var/cache/leanrd-tests")
    names = ["vgs1", "vgs2", "back", "cache", "integrity", "dm-integrity"]

    def found():
        dirs = [d for d in glob.glob(f"{cache}/disks/*/") if all(os.path.exists(f"{d}/{n}.disk") for n in names)]
        return max(dirs, key=os.path.getmtime).rstrip("/") if dirs else None
    if not found():
        sh("cargo test --release -q -p leanrd --test boot_init -- lvm_pools_and_bcache_roots", cwd=ROOT)
    return found()


def mpath_luks_disk():
    """The cached disk of boot_multipath's LUKS boot: a GPT partition holding LUKS2 MPATH_LUKS_UUID."""
    cache = os.environ.get("LEANRD_TEST_CACHE", "/var/cache/leanrd-tests")

    def found():
        for d in sorted(glob.glob(f"{cache}/disks/*/luks.disk"), key=os.path.getmtime, reverse=True):
            u = subprocess.run(["blkid", "-p", "-O", "1048576", "-o", "value", "-s", "UUID", d],
                               capture_output=True, text=True).stdout.strip()
            if u == MPATH_LUKS_UUID:
                return d
        return None
    if not found():
        sh("cargo test --release -q -p leanrd --test boot_init -- multipath_roots", cwd=ROOT)
    return found()


def make(work, kver, leanrd, init, with_systemd):
    """The disks (copies) and the images in `work`; what is kept in made.json."""
    os.makedirs(f"{work}/disks", exist_ok=True)
    pool = pool_disks()
    for n in ("vgs1", "vgs2", "back", "cache", "integrity", "dm-integrity"):
        sh(f"cp --reflink=auto {pool}/{n}.disk {work}/disks/")
    sh(f"cp --reflink=auto {mpath_luks_disk()} {work}/disks/mpath-luks.disk")
    # The multipath root (GPT, one partition) and the NBD export: the same busybox tree.
    tree = f"{work}/bbroot"
    busybox_tree(tree)
    sh(f"truncate -s 64M {work}/root.fs && mkfs.ext4 -q -d {tree} -U {MPATH_ROOT_UUID} -L mproot {work}/root.fs")
    sh(f"truncate -s 66M {work}/mpath.disk && printf 'label: gpt\\nstart=2048, type=L\\n' | "
       f"sfdisk -q {work}/mpath.disk && dd if={work}/root.fs of={work}/mpath.disk bs=512 seek=2048 conv=notrunc "
       f"status=none")
    shutil.copy(f"{work}/root.fs", f"{work}/nbd.fs")
    shutil.rmtree(tree)

    sr = f"{work}/sysroot"
    sysroot(sr, {})
    for name, text in MPATH_FILES.items():
        os.makedirs(os.path.dirname(f"{sr}/etc/{name}"), exist_ok=True)
        with open(f"{sr}/etc/{name}", "w") as f:
            f.write(text)
    lcmd = (f"{leanrd} build -k {kver} --universal --include nbd --force --sysroot {sr} --init {init} "
            f"-o {work}/leanrd.img")
    s = time.perf_counter()
    sh(f"nice -n 10 {lcmd}", stderr=subprocess.DEVNULL)
    lbuild = time.perf_counter() - s
    shutil.rmtree(sr)

    dtree = debian_tree(work, "dracut", kver)
    chroot_install(dtree, DRACUT_PACKAGES)
    for name, text in MPATH_FILES.items():
        os.makedirs(os.path.dirname(f"{dtree}/etc/{name}"), exist_ok=True)
        with open(f"{dtree}/etc/{name}", "w") as f:
            f.write(text)
    dcmd = (f"dracut --no-hostonly --zstd --omit '{DRACUT_OMIT}' --add '{DRACUT_ADD}' "
            f"--add-drivers '{DRACUT_DRIVERS}' --force /tmp/peer.img {kver}")
    dbuild = chroot_build(dtree, f"nice -n 10 {dcmd}", quiet=True)
    shutil.move(f"{dtree}/tmp/peer.img", f"{work}/dracut.img")
    made = {"builds": {"leanrd": {"command": lcmd.replace(work, "WORK"), "build_s": lbuild},
                       "dracut": {"command": dcmd, "build_s": dbuild}}}
    # The same with multipath-tools' path checkers (Debian's /lib/multipath/libcheck*.so), which
    # dracut's 90multipath leaves out: booted on the multipath stacks only.
    ccmd = dcmd.replace(" --force", " --include /usr/lib/multipath /usr/lib/multipath --force")
    cbuild = chroot_build(dtree, f"nice -n 10 {ccmd}", quiet=True)
    shutil.move(f"{dtree}/tmp/peer.img", f"{work}/dracut-checkers.img")
    made["builds"]["dracut-checkers"] = {"command": ccmd, "build_s": cbuild}
    if with_systemd:
        scmd = (f"dracut --no-hostonly --zstd --add '{DRACUT_ADD}' "
                f"--add-drivers '{DRACUT_DRIVERS}' --force /tmp/peer.img {kver}")
        sbuild = chroot_build(dtree, f"nice -n 10 {scmd}", quiet=True)
        shutil.move(f"{dtree}/tmp/peer.img", f"{work}/dracut-systemd.img")
        made["builds"]["dracut-systemd"] = {"command": scmd, "build_s": sbuild}
    q = lambda p: tool_version(f"dpkg-query --admindir {dtree}/var/lib/dpkg -W -f '${{Version}}' {p}")
    made["peers"] = {p: q(p) for p in ["dracut", "dracut-network", "multipath-tools", "lvm2", "cryptsetup-bin",
                                        "thin-provisioning-tools", "bcache-tools", "nbd-client", "systemd"]}
    made["peers"]["nbd-server"] = tool_version("dpkg-query -W -f '${Version}' nbd-server")
    shutil.rmtree(dtree)
    return made


def mpath_args(disk):
    """`disk` on two virtio-scsi controllers as one LUN (boot_multipath's paths)."""
    out = []
    for i in range(2):
        out += ["-device", f"virtio-scsi-pci,id=scsi{i}",
                "-blockdev", f"driver=file,filename={disk},node-name=f{i},locking=off",
                "-blockdev", f"driver=raw,file=f{i},node-name=p{i}",
                "-device", f"scsi-hd,bus=scsi{i}.0,drive=p{i},serial=LEANRDMPATH,wwn={MPATH_WWN},share-rw=on"]
    return out


class NbdLab:
    """A network namespace with a bridge (SERVER) and a tap for the VM, nbd-server serving
    `export` as "busybox" read-only; no route out."""

    def __init__(self, work, export):
        self.ns = f"lrbench{os.getpid()}"
        self.dir, self.export = work, export
        ip = lambda *a: sh("ip " + " ".join(a))
        ip("netns add", self.ns)
        try:
            ip("-n", self.ns, "link set lo up")
            ip("-n", self.ns, "link add br0 type bridge")
            ip("-n", self.ns, f"addr add {SERVER}/24 dev br0")
            ip("-n", self.ns, "link set br0 up")
            ip("-n", self.ns, "tuntap add dev tap0 mode tap")
            ip("-n", self.ns, "link set tap0 master br0")
            ip("-n", self.ns, "link set tap0 up")
            conf = f"{work}/nbd-server.conf"
            with open(conf, "w") as f:
                f.write(f"[generic]\nlistenaddr = {SERVER}\nport = 10809\nallowlist = true\n"
                        f"[busybox]\nexportname = {export}\ncopyonwrite = true\n")
            # nbd-server forks; its processes are the namespace's (ended in close()).
            sh(f"ip netns exec {self.ns} unshare -m sh -c 'mount -t tmpfs none /run && nbd-server -C {conf}'")
            for _ in range(100):
                r = subprocess.run(f"ip netns exec {self.ns} ss -Hltn 'sport = :10809'", shell=True,
                                   capture_output=True, text=True)
                if r.stdout.strip():
                    break
                time.sleep(0.1)
            else:
                raise SystemExit("nbd-server did not listen in 10 s")
        except BaseException:
            self.close()
            raise

    def close(self):
        pids = subprocess.run(["ip", "netns", "pids", self.ns], capture_output=True, text=True).stdout.split()
        for p in pids:
            subprocess.run(["kill", p])
        time.sleep(0.5)
        for p in subprocess.run(["ip", "netns", "pids", self.ns], capture_output=True, text=True).stdout.split():
            subprocess.run(["kill", "-9", p])
        subprocess.run(["ip", "netns", "del", self.ns])
        for f in glob.glob(f"{self.dir}/*.diff"):
            os.remove(f)


def one_boot(vmlinuz, image, st, work, lab):
    """One boot of `image` on the stack `st`; its figures."""
    args = ["boot", "--kernel", vmlinuz, "--initrd", image, "--append", st["append"], "--timeout", "240",
            "--mark", RUN_INIT, "--mark", MARK]
    for s in STOP:
        args += ["--stop", s]
    copies = []
    prefix = []
    for d in st["disks"]:
        if d.startswith("pool:"):
            args += ["--disk", f"{work}/disks/{d[5:]}.disk"]
        elif d.startswith("mpath:"):
            copy = f"{work}/boot-copy.disk"
            sh(f"cp --reflink=auto {d[6:]} {copy}")
            copies.append(copy)
            args += [f"--qemu={a}" for a in mpath_args(copy)]
        elif d == "nbd":
            prefix = ["ip", "netns", "exec", lab.ns]
            args += [f"--qemu={a}" for a in ["-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no",
                                              "-device", "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:56"]]
    if any(d.startswith("pool:") for d in st["disks"]):
        args.append("--snapshot")
    if st.get("passphrase"):
        args += ["--passphrase", PASS]
    try:
        r = subprocess.run(prefix + [HARNESS] + args,
                           capture_output=True, text=True, errors="replace")
    finally:
        for c in copies:
            os.remove(c)
    if r.returncode != 0:
        return {"ok": False, "error": r.stderr.strip()[-2000:]}
    got = json.loads(r.stdout)
    log = got["console"]
    run_init, root_init = ktime(log, RUN_INIT), ktime(log, ROOT_INIT)
    marks = got.get("marks") or {}
    ok = MARK in log and all(e in log for e in st["expect"])
    b = {"ok": ok, "run_init_s": run_init, "root_init_s": root_init,
         "initramfs_s": round(root_init - run_init, 3) if ok and run_init is not None and root_init is not None
         else None,
         "wall_initramfs_s": round(marks[MARK] - marks[RUN_INIT], 3) if ok and MARK in marks and RUN_INIT in marks
         else None,
         "vm_seconds": got["vm_seconds"],
         "root_lines": [l.strip() for l in log.splitlines()
                        if l.startswith(("ROOTDEV", "LEANRD-MPATH-ROOT", "LEANRD-MPATH-DM"))][:6]}
    if not ok:
        b["console_tail"] = log[-3000:]
    return b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", help="a directory kept after the run; its disks and images, when there, are used "
                                   "again")
    ap.add_argument("--only", help="the stacks to boot, comma-separated (names as in the table)")
    ap.add_argument("--systemd", action="store_true", help="also dracut with its systemd modules, on the thin root")
    a = ap.parse_args()
    leanrd, init = build_leanrd()
    kver, vmlinuz = kernel("bookworm")
    work = a.work or tempfile.mkdtemp(prefix="leanrd-bench-storage-", dir="/var/tmp")
    os.makedirs(work, exist_ok=True)
    state = f"{work}/made.json"
    lab = None
    try:
        if not os.path.exists(state):
            made = make(work, kver, leanrd, init, a.systemd)
            with open(state, "w") as f:
                json.dump(made, f)
        with open(state) as f:
            made = json.load(f)
        images = {"leanrd": f"{work}/leanrd.img", "dracut": f"{work}/dracut.img"}
        all_stacks = stacks(f"{work}/disks", work)
        if a.only:
            want = [s.strip() for s in a.only.split(",")]
            all_stacks = [s for s in all_stacks if s["name"] in want]
        plan = [(st, g) for st in all_stacks for g in images]
        images["dracut-checkers"] = f"{work}/dracut-checkers.img"
        plan += [(st, "dracut-checkers") for st in all_stacks if st["disks"][0].startswith("mpath:")]
        if a.systemd and os.path.exists(f"{work}/dracut-systemd.img"):
            images["dracut-systemd"] = f"{work}/dracut-systemd.img"
            plan += [(st, "dracut-systemd") for st in all_stacks if st["name"] == "LVM thin"]
        if any("nbd" in st["disks"] for st in all_stacks):
            lab = NbdLab(work, f"{work}/nbd.fs")
        boots = {}
        for i in range(a.runs):
            for st, g in plan:
                got = boots.setdefault(st["name"], {}).setdefault(g, [])
                if got and not got[0]["ok"]:
                    continue  # failed in the first run: not booted again
                b = one_boot(vmlinuz, images[g], st, work, lab)
                got.append(b)
                print(f"run {i + 1} {st['name']} {g}: ok {b['ok']}, initramfs {b.get('initramfs_s')} s "
                      f"(wall {b.get('wall_initramfs_s')} s), vm {b.get('vm_seconds')} s", flush=True)
                if not b["ok"]:
                    print("  " + "\n  ".join((b.get("console_tail") or b.get("error", "")).splitlines()[-12:]),
                          flush=True)

        def med(xs):
            xs = [x for x in xs if x is not None]
            return statistics.median(xs) if xs else None
        fmt = lambda x: "–" if x is None else f"{x:.2f}"
        print(f"\n## Storage stacks, kernel {kver}, QEMU TCG, one VM at a time; medians of {a.runs}\n")
        print("image bytes: " + ", ".join(f"{g} {os.path.getsize(p)}" for g, p in images.items()))
        print("| stack | " + " | ".join(f"{g} initramfs s | {g} booted" for g in images) + " |")
        for name, per in boots.items():
            cells = []
            for g in images:
                bs = per.get(g, [])
                cells += [fmt(med(b.get("initramfs_s") for b in bs)) if bs else "–",
                          f"{sum(b['ok'] for b in bs)}/{len(bs)}"]
            print(f"| {name} | " + " | ".join(cells) + " |")
        raw = {"kernel": kver, "runs": a.runs,
               "images": {g: {"image_bytes": os.path.getsize(p), **made["builds"].get(g, {})}
                          for g, p in images.items()},
               "stacks": [{"name": st["name"], "append": st["append"], "disks": st["disks"],
                           "boots": boots.get(st["name"], {})} for st in all_stacks]}
        for st in raw["stacks"]:
            st["disks"] = [d.replace(work, "WORK") for d in st["disks"]]
        save("storage", raw, made["peers"])
    finally:
        if lab:
            lab.close()
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
