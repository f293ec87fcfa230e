//! Network roots under QEMU TCG: NFS exports served by nfs-ganesha, iSCSI targets by tgt,
//! DHCP and DNS by dnsmasq,
//! in a network namespace of the test's own (crates/testkit: netlab), QEMU inside it on taps.
//! Nothing leaves the namespace.
//!
//! - CASES: a busybox root over NFS with the host's kernel and a universal image with the
//!   nfs feature, one test each: the ways `root=` and `ip=` are written, two NICs, DNS, and
//!   the diagnoses (no DHCP server, no such export, no link).
//! - The real Debian roots over NFS, each to `systemctl is-system-running` = running: Debian
//!   12 over NFSv4 by DHCP, whose root then builds its own image with no options, which boots
//!   again; Debian 13 (its own 6.12 kernel, `.ko.xz` modules) over NFSv3 with a static `ip=` on
//!   the second of two NICs, chosen by `BOOTIF=`.
//! - Debian 13 at the NFSv4.2 that ganesha and its client agree on: the exec of the root's
//!   init fails with EIO, and the diagnosis names the version and the one to force.
//! - LACKING: an image without the network roots' features (and live's), no NIC, no lab: each
//!   root kind's missing feature said at once.
//!
//! `cargo test --release -p leanrd --test boot_net -- nfs4_root_path_from_dhcp_then_reboot`.
//! - iSCSI: the busybox root on a LUN (netroot=iscsi: by DHCP; root=iscsi:, the LUN itself,
//!   its portal by name with a static ip=), the diagnoses (a target nobody answers, a login
//!   refused), and Debian 12 on a LUN named by rd.iscsi.* to running.
//!
//! - NBD: the busybox root's ext4 image served by nbd-server; `root=nbd:` (the device itself)
//!   by DHCP and with a static `ip=` and the export by name, and the diagnoses (nobody
//!   answers, an export the server has not).
//!
//! Needs root, qemu, busybox-static, nfs-ganesha(-vfs), rpcbind, dnsmasq, iproute2, tgt,
//! open-iscsi (iscsistart), nbd-server and e2fsprogs.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::*;
use leanrd_testkit::boot::{self as debian, Boot};
use leanrd_testkit::netlab::{self, LabSpec, NetLab, NvmfSpec, SERVER};

const MARK: &str = "LEANRD-ROOT-OK";

/// The busybox root: prints the marker, how / is mounted, each NIC with its address, the
/// hand-over file and /init's step log; then powers off, or goes down through the exitrd
/// ([`WAY_DOWN`]) when the command line asks.
fn root_tree(t: &TempDir) -> PathBuf {
    busybox_script_root(
        t,
        &format!(
            "$b echo {MARK} $($b cat /proc/uptime)\n\
             $b echo ROOT-MOUNT $($b grep ' / ' /proc/mounts)\n\
             for i in /sys/class/net/*; do n=${{i##*/}}; \
               $b echo NIC $n $($b cat $i/address) $($b ip -4 addr show dev $n | $b grep -o 'inet [0-9./]*'); done\n\
             $b sed 's/^/HANDOVER /' /run/net-*.conf\n\
             $b sed 's/^/STEP /' /run/initramfs/leanrd.log\n\
             {WAY_DOWN}\
             $b poweroff -f\n"
        ),
    )
}

/// The way down as systemd-shutdown takes it when /run/initramfs/shutdown exists (systemd's
/// docs/INITRD_INTERFACE.md): pivoted into /run/initramfs, the old root at /oldroot, and
/// `/shutdown VERB` run as PID 1. `leanrd.test=down-reboot` and `leanrd.test=down-halt` give
/// the verb; `leanrd.test=server-gone` powers off with the NFS server gone in between: once
/// pivoted, the root says so, the test's QEMU monitor cuts the link, and the exitrd runs when
/// the carrier is gone (bounded: 10 s). Nothing runs from the NFS root once pivoted (its
/// busybox, even this script's next line, would wait for a server that is gone, as
/// systemd-shutdown, a program already running, does not): a busybox copied into the exitrd,
/// the rest an `sh -c` in memory.
const WAY_DOWN: &str = "verb= gone=\n\
    case \" $($b cat /proc/cmdline) \" in\n\
      *' leanrd.test=server-gone '*) verb=poweroff gone=1 ;;\n\
      *' leanrd.test=down-reboot '*) verb=reboot ;;\n\
      *' leanrd.test=down-halt '*) verb=halt ;;\n\
    esac\n\
    if [ -n \"$verb\" ]; then\n\
      $b mkdir -p /run/initramfs/oldroot /run/initramfs/sys /run/initramfs/t && $b cp $b /run/initramfs/t/busybox\n\
      $b mount -n --make-rprivate / && $b mount -n --bind /run/initramfs /run/initramfs\n\
      cd /run/initramfs && $b pivot_root . oldroot && exec /t/busybox sh -c 'b=/t/busybox; $b mount -t sysfs sysfs /sys; \
        if [ -n \"$2\" ]; then $b echo LEANRD-SERVER-GONE-NOW; \
          for i in $($b seq 50); do [ \"$($b cat /sys/class/net/eth0/carrier)\" = 0 ] && break; $b sleep 0.2; done; \
          $b echo LEANRD-CARRIER $($b cat /sys/class/net/eth0/carrier); fi; \
        exec /shutdown $1' sh \"$verb\" \"$gone\"\n\
    fi\n";

/// How a case's NICs are attached.
#[derive(Clone, Copy)]
enum Nics {
    /// One virtio NIC on the bridge.
    One,
    /// virtio (…:01) and e1000 (…:02), both on the bridge.
    Two,
    /// One virtio NIC on a tap that is on no bridge: nobody answers.
    Unwired,
    /// virtio (…:01) on no bridge, e1000 (…:02) on the bridge.
    SecondWired,
}

/// One boot: ten lines of data. In `append`, `expect` and `reject`: `{export}` is the busybox
/// export's path, `{mac1}`/`{mac2}` the NICs' MACs and `{bootif2}` the second's in PXE's form
/// (each boot has MACs of its own: two VMs on one bridge with one MAC would take each other's
/// packets).
struct Case {
    name: &'static str,
    append: &'static str,
    nics: Nics,
    expect: &'static [&'static str],
    reject: &'static [&'static str],
}

const CASES: &[Case] = &[
    // The kernel's form with nothing but DHCP: the server and path come from option 17. Then
    // the way down with `reboot`: the exitrd unmounts the NFS root and reboots.
    Case {
        name: "nfs4_root_path_from_dhcp_then_reboot",
        append: "root=/dev/nfs ip=dhcp leanrd.test=down-reboot leanrd.debug",
        nics: Nics::One,
        expect: &[
            MARK,
            " / nfs4 ro,",
            "HANDOVER PROTO='dhcp'",
            "HANDOVER ROOTPATH='10.77.0.1:",
            "] net: lease eth0: dhcp 10.77.0.",
            "leanrd: shutdown: the way down: reboot",
            "leanrd: shutdown: unmounted /oldroot (",
            "leanrd: shutdown: all taken apart in ",
            "reboot: Restarting system",
        ],
        reject: &[],
    },
    // dracut's form, NFSv3, a static address on the NIC named by ifname= (the second one).
    // Then the way down with `halt`: the exitrd unmounts the NFS root and halts.
    Case {
        name: "nfs3_static_ip_on_a_named_nic_then_halt",
        append: "root=nfs:10.77.0.1:{export}:vers=3 ifname=boot0:{mac2} \
                 ip=10.77.0.9:10.77.0.1::255.255.255.0:box:boot0:off leanrd.test=down-halt leanrd.debug",
        nics: Nics::Two,
        expect: &[
            MARK,
            " / nfs ro,",
            "vers=3",
            "NIC boot0 {mac2} inet 10.77.0.9/24",
            "HANDOVER PROTO='none'",
            "leanrd: shutdown: the way down: halt",
            "leanrd: shutdown: unmounted /oldroot (",
            "leanrd: shutdown: all taken apart in ",
            "reboot: System halted",
        ],
        reject: &["{mac1} inet"],
    },
    // PXE's BOOTIF= picks the second NIC for DHCP; the first stays unconfigured.
    Case {
        name: "bootif_chooses_one_of_two_nics",
        append: "root=nfs:10.77.0.1:{export} rw ip=dhcp BOOTIF={bootif2}",
        nics: Nics::Two,
        expect: &[MARK, " / nfs4 rw,", "{mac2} inet 10.77.0."],
        reject: &["{mac1} inet"],
    },
    // A server by name: looked up with the DNS server DHCP gave. Then the way down with the
    // server gone (the link cut): the exitrd gives the NFS root's unmount its bound
    // (rd.shutdown.timeout.umount=3), detaches it and powers off.
    Case {
        name: "nfs4_server_by_name_then_gone_at_shutdown",
        append: "root=nfs4:nfs.leanrd.test:{export} ip=dhcp leanrd.test=server-gone rd.shutdown.timeout.umount=3",
        nics: Nics::One,
        expect: &[
            MARK,
            " / nfs4 ro,",
            "] dns: nfs.leanrd.test is 10.77.0.1",
            "LEANRD-CARRIER 0",
            "leanrd: shutdown: unmount /oldroot: no answer in 3 s",
            "going down all the same: poweroff",
            "reboot: Power down",
        ],
        reject: &[],
    },
    Case {
        name: "no_dhcp_server_diagnosed",
        append: "root=nfs:10.77.0.1:{export} ip=dhcp leanrd.timeout=6",
        nics: Nics::Unwired,
        expect: &["leanrd: cannot boot: no DHCP lease on eth0 after", "(no DHCP server answered)"],
        reject: &[MARK],
    },
    Case {
        name: "wrong_export_diagnosed",
        append: "root=nfs:10.77.0.1:/no/such/export ip=dhcp",
        nics: Nics::One,
        expect: &[
            "leanrd: cannot boot: mount refused: 10.77.0.1:/no/such/export (server 10.77.0.1) on eth0: vers=4.2:",
        ],
        reject: &[MARK],
    },
    Case {
        name: "no_link_diagnosed",
        append: "root=nfs:10.77.0.1:{export} ip=eth7:dhcp leanrd.timeout=5",
        nics: Nics::One,
        expect: &["leanrd: cannot boot: waited 5 s for network interface eth7 (no link"],
        reject: &[MARK],
    },
    // iSCSI (tgt in the lab): the root by its UUID on the target netroot= names, by DHCP.
    Case {
        name: "iscsi_netroot_dhcp",
        append: "root=UUID={bbuuid} netroot=iscsi:10.77.0.1::::{bbiqn} ip=dhcp",
        nics: Nics::One,
        expect: &[
            MARK,
            "ROOT-MOUNT /dev/sda / ext4 ro,",
            "] iscsi: logged in to {bbiqn} at 10.77.0.1:3260",
            "HANDOVER PROTO='dhcp'",
        ],
        reject: &[],
    },
    // dracut's root=iscsi: (the LUN itself is the root), the portal by name through the DNS
    // server a static ip= gives, an initiator name of the command line's.
    Case {
        name: "iscsi_lun_is_the_root_static_ip",
        append: "root=iscsi:nfs.leanrd.test:::1:{bbiqn} rd.iscsi.initiator=iqn.2026-11.test:box \
                 ip=10.77.0.9::10.77.0.1:255.255.255.0:box:eth0:off:10.77.0.1",
        nics: Nics::One,
        expect: &[
            MARK,
            "ROOT-MOUNT /dev/sda / ext4 ro,",
            "] dns: nfs.leanrd.test is 10.77.0.1",
            "as iqn.2026-11.test:box",
            "HANDOVER PROTO='none'",
        ],
        reject: &[],
    },
    Case {
        name: "iscsi_unreachable_target_diagnosed",
        append: "root=UUID={bbuuid} netroot=iscsi:10.77.0.1::3261::{bbiqn} ip=dhcp leanrd.timeout=6",
        nics: Nics::One,
        expect: &[
            "leanrd: cannot boot: iSCSI target {bbiqn} at 10.77.0.1:3261 is unreachable from eth0: Connection refused",
            "Connection refused (tried ",
        ],
        reject: &[MARK],
    },
    Case {
        name: "iscsi_login_refused_diagnosed",
        append: "root=UUID={bbuuid} netroot=iscsi:10.77.0.1::::iqn.2026-11.test.leanrd:nosuch ip=dhcp leanrd.timeout=6",
        nics: Nics::One,
        expect: &[
            "leanrd: cannot boot: iSCSI login to iqn.2026-11.test.leanrd:nosuch at 10.77.0.1:3260 failed (iscsistart:",
        ],
        reject: &[MARK],
    },
    // NVMe over TCP (a target VM in the lab): the subsystems from the discovery controller.
    Case {
        name: "nvmf_discovered_by_dhcp",
        append: "root=UUID={bbuuid} rd.nvmf.discover=tcp,10.77.0.2,,4420 ip=dhcp",
        nics: Nics::One,
        expect: &[
            MARK,
            "ROOT-MOUNT /dev/nvme",
            "] nvmf: discovery at 10.77.0.2:4420: ",
            "] nvmf: connected to {bbnqn} at 10.77.0.2:4420 as nvme",
        ],
        reject: &[],
    },
    Case {
        name: "nvmf_unreachable_target_diagnosed",
        append: "root=UUID={bbuuid} rd.nvmf.discover=tcp,10.77.0.2,,4421 ip=dhcp leanrd.timeout=6",
        nics: Nics::One,
        expect: &[
            "leanrd: cannot boot: NVMe/TCP the discovery controller at 10.77.0.2:4421 is unreachable from eth0: \
             Connection refused",
        ],
        reject: &[MARK],
    },
    // NBD (nbd-server in the lab): the device is the root, by DHCP; the export named where
    // dracut puts the port.
    Case {
        name: "nbd_root_dhcp",
        append: "root=nbd:10.77.0.1:busybox ip=dhcp",
        nics: Nics::One,
        expect: &[
            MARK,
            "ROOT-MOUNT /dev/nbd0 / ext4 ro,",
            "] nbd: connected NBD export \"busybox\" at 10.77.0.1:10809 as nbd0 (",
            "HANDOVER PROTO='dhcp'",
        ],
        reject: &[],
    },
    // A static ip=, the port and the export both, the file system type and options in the
    // root= value (dracut's FSTYPE and ROOTFLAGS).
    Case {
        name: "nbd_root_static_ip",
        append: "root=nbd:10.77.0.1:10809/busybox:ext4:ro,errors=remount-ro \
                 ip=10.77.0.9::10.77.0.1:255.255.255.0:box:eth0:off",
        nics: Nics::One,
        expect: &[MARK, "ROOT-MOUNT /dev/nbd0 / ext4 ro,", "errors=remount-ro", "HANDOVER PROTO='none'"],
        reject: &[],
    },
    Case {
        name: "nbd_unreachable_server_diagnosed",
        append: "root=nbd:10.77.0.1:10810/busybox ip=dhcp leanrd.timeout=5",
        nics: Nics::One,
        expect: &["leanrd: cannot boot: NBD export \"busybox\" at 10.77.0.1:10810 is unreachable from eth0: \
             Connection refused"],
        reject: &[MARK],
    },
    Case {
        name: "nbd_unknown_export_diagnosed",
        append: "root=nbd:10.77.0.1:nosuch ip=dhcp leanrd.timeout=5",
        nics: Nics::One,
        expect: &["leanrd: cannot boot: NBD export \"nosuch\" at 10.77.0.1:10809: the export was refused: "],
        reject: &[MARK],
    },
];

/// A boot of an image built without the feature a root needs: `--universal` with no
/// `--include`, so without nfs, iscsi, nvmf and live. /init must say which feature the image
/// lacks and the option that adds it at once, before it brings a network up or waits for a
/// medium: no NIC, no server, no lab (a regression would wait out `leanrd.timeout` and say
/// `waited`, or look for a network interface).
struct Lacking {
    name: &'static str,
    append: &'static str,
    /// The diagnosis, whole (its `leanrd: cannot boot: ` line).
    expect: &'static str,
}

const LACKING: &[Lacking] = &[
    // The kernel's NFS form, alone: the commonest network root.
    Lacking {
        name: "no_nfs_feature_said_at_once",
        append: "root=/dev/nfs ip=dhcp",
        expect: "leanrd: cannot boot: the command line asks for an NFS root (root=/dev/nfs), but this image was \
                 built without the `nfs` feature: rebuild it with `--include nfs`",
    },
    // A live medium on an iSCSI LUN or an NVMe/TCP namespace: the root's kind and both
    // transports, each said, in one boot.
    Lacking {
        name: "no_live_iscsi_nvmf_features_said_at_once",
        append: "root=live:CDLABEL=LEANRD_LIVE netroot=iscsi:10.77.0.1::::iqn.2026-11.test.leanrd:busybox \
                 rd.nvmf.discover=tcp,10.77.0.2,,4420 ip=dhcp",
        expect: "leanrd: cannot boot: the command line asks for a live root (root=live:CDLABEL=LEANRD_LIVE), but \
                 this image was built without the `live` feature: rebuild it with `--include live`; the command \
                 line asks for a root on iSCSI (netroot=iscsi:10.77.0.1::::iqn.2026-11.test.leanrd:busybox), but \
                 this image was built without the `iscsi` feature: rebuild it with `--include iscsi`; the command \
                 line asks for a root on NVMe over TCP (rd.nvmf.discover=tcp,10.77.0.2,,4420), but this image was \
                 built without the `nvmf` feature: rebuild it with `--include nvmf`",
    },
];

/// The host's kernel and its universal image without the network roots and live.
struct Bare {
    kernel: PathBuf,
    image: PathBuf,
    _t: TempDir,
}

static BARE: OnceLock<Result<Option<Bare>, String>> = OnceLock::new();

fn make_bare() -> Option<Bare> {
    let kernel = kernel()?;
    let init = init_binary()?;
    let t = TempDir::new("bootnet-bare");
    let image = t.join("universal.img");
    ok(leanrd().args(["build", "-k", &kver_of(&kernel), "--universal", "--init"]).arg(&init).arg("-o").arg(&image));
    Some(Bare { kernel, image, _t: t })
}

fn boot_lacking(c: &Lacking) -> Result<(), String> {
    let Some(w) = once(&BARE, make_bare).as_ref() else { return Ok(()) };
    let mut b = Boot::new(c.name, &w.image, &format!("quiet {}", c.append), Vec::new());
    b.secs = 120;
    b.expect = vec![c.expect.into()];
    // Nothing waited for, no network brought up: the diagnosis is the first thing /init says.
    // No block device hint either: no driver was loaded, and an NFS root is on none.
    b.reject =
        ["waited", "] net:", "interface", "DHCP", "block devices seen", "disk controller"].map(String::from).into();
    b.stop = vec!["no rescue shell in this image".into()];
    boots_pass(&w.kernel, &[b], format!("{}: see the console above", c.name))
}

/// The busybox root's file system on its LUN, and the targets' names.
const BB_UUID: &str = "1e5c5100-b0b0-4b0b-8b0b-000000000001";
const BB_IQN: &str = "iqn.2026-11.test.leanrd:busybox";
const DEB_UUID: &str = "1e5c5100-deb1-4b0b-8b0b-000000000012";
const DEB_IQN: &str = "iqn.2026-11.test.leanrd:bookworm";
const BB_NQN: &str = "nqn.2026-11.test.leanrd:busybox";
const DEB_NQN: &str = "nqn.2026-11.test.leanrd:bookworm";

/// What the cases share: the lab (its servers export the busybox root and the Debian
/// trees), the kernel and the universal image with the nfs feature.
struct World {
    t: TempDir,
    lab: NetLab,
    kernel: PathBuf,
    kver: String,
    init: PathBuf,
    image: PathBuf,
    export: PathBuf,
    /// The Debian trees exported: 12 (with the host's kernel) and 13 (its own).
    bookworm: PathBuf,
    trixie: PathBuf,
    /// Debian 12's NVMe/TCP namespace (the target VM's disk).
    deb_ns: PathBuf,
}

static WORLD: OnceLock<Result<Option<World>, String>> = OnceLock::new();

fn world() -> Result<Option<&'static World>, String> {
    Ok(once(&WORLD, make_world).as_ref())
}

fn make_world() -> Option<World> {
    let mut need: Vec<&str> = netlab::TOOLS.to_vec();
    need.extend(netlab::ISCSI_TOOLS);
    need.extend(netlab::NBD_TOOLS);
    need.extend(["iscsistart", "mkfs.ext4", "debugfs", "cpio", "modprobe"]);
    if !is_root() || !Path::new("/bin/busybox").exists() || need.iter().any(|t| !have(t)) {
        return skip(&format!("needs root, /bin/busybox and {need:?}"));
    }
    let kernel = kernel()?;
    let init = init_binary()?;
    let kver = kver_of(&kernel);
    let t = TempDir::new("bootnet");
    let export = root_tree(&t);
    let bookworm = debian::prepare(&t, &kver, &init, "")?;
    let trixie = debian::prepare_trixie(&t, &init, "")?;
    // No fstab: the root is what /init mounted.
    for tree in [&bookworm, &trixie] {
        fs::write(tree.join("etc/fstab"), "").unwrap();
    }
    let root_path = format!("{SERVER}:{}", export.display());
    // The LUNs: the busybox root (read-only by every boot that uses it) and the Debian 12
    // tree (its boot's own).
    let bb_lun = debian::ext4_image_with(&t, "busybox-lun", 64, BB_UUID, &export, &[]);
    let deb_lun = debian::ext4_image_with(&t, "bookworm-lun", 1536, DEB_UUID, &bookworm, &[]);
    let luns: [(&str, &Path); 2] = [(BB_IQN, &bb_lun), (DEB_IQN, &deb_lun)];
    // NVMe/TCP's namespaces: the busybox root (read by both servers) and a Debian 12 disk of
    // its own (sparse copy).
    let deb_ns = t.join("bookworm-nvme.ext4");
    sh(&format!("cp --sparse=always {} {}", deb_lun.display(), deb_ns.display()));
    let subsystems: [(&str, &Path); 2] = [(BB_NQN, &bb_lun), (DEB_NQN, &deb_ns)];
    let spec = LabSpec {
        exports: &[&export, &bookworm, &trixie],
        dhcp: true,
        root_path: Some(&root_path),
        luns: &luns,
        nvmf: Some(NvmfSpec { kernel: &kernel, subsystems: &subsystems }),
        tang: None,
    };
    let mut lab = NetLab::start("nfs", &spec).unwrap_or_else(|e| panic!("the network lab: {e}"));
    lab.nbd(&[("busybox", &bb_lun)]).unwrap_or_else(|e| panic!("the network lab: {e}"));
    let image = t.join("universal-net.img");
    ok(leanrd()
        .args(["build", "-k", &kver, "--universal", "--include", "nfs", "--include", "iscsi", "--include", "nvmf"])
        .args(["--include", "nbd"])
        .arg("--init")
        .arg(&init)
        .arg("-o")
        .arg(&image));
    Some(World { t, lab, kernel, kver, init, image, export, bookworm, trixie, deb_ns })
}

/// A boot's NICs: the QEMU arguments and the two MACs (the second unused with one NIC).
fn nics(w: &World, n: Nics) -> Result<(Vec<String>, [String; 2]), String> {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
    let k = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let macs = [format!("52:54:00:{k:02x}:00:01"), format!("52:54:00:{k:02x}:00:02")];
    let a = match n {
        Nics::One => w.lab.nics(&[&macs[0]], "virtio-net-pci", true)?,
        Nics::Unwired => w.lab.nics(&[&macs[0]], "virtio-net-pci", false)?,
        Nics::Two | Nics::SecondWired => {
            let mut a = w.lab.nics(&[&macs[0]], "virtio-net-pci", matches!(n, Nics::Two))?;
            a.extend(w.lab.nics(&[&macs[1]], "e1000", true)?);
            a
        }
    };
    Ok((a, macs))
}

fn boot_case(c: &Case) -> Result<(), String> {
    let Some(w) = world()? else { return Ok(()) };
    let (qemu, macs) = nics(w, c.nics)?;
    let fill = |s: &str| {
        s.replace("{export}", &w.export.display().to_string())
            .replace("{mac1}", &macs[0])
            .replace("{mac2}", &macs[1])
            .replace("{bootif2}", &format!("01-{}", macs[1].replace(':', "-")))
            .replace("{bbuuid}", BB_UUID)
            .replace("{bbiqn}", BB_IQN)
            .replace("{bbnqn}", BB_NQN)
    };
    let mut b = Boot::new(c.name, &w.image, &format!("quiet {}", fill(c.append)), qemu);
    b.netns = Some(w.lab.ns.clone());
    b.secs = 180;
    b.expect = c.expect.iter().map(|s| fill(s)).collect();
    b.reject = c.reject.iter().map(|s| fill(s)).collect();
    // A failed boot ends at the diagnosis (there is no shell in the image to wait in); a
    // good one powers off.
    // A halted machine stays on: ended once it says so.
    b.stop = vec!["no rescue shell in this image".into(), "reboot: System halted".into()];
    // The server gone: the NIC's link cut by QEMU's monitor when the root asks.
    if c.append.contains("leanrd.test=server-gone") {
        let id = b.qemu.iter().find_map(|a| a.strip_prefix("tap,id=")?.split(',').next()).unwrap_or("n0");
        b.monitor = vec![("LEANRD-SERVER-GONE-NOW".into(), format!("set_link {id} off"))];
        b.secs = 60;
    }
    let failed = debian::run(&w.kernel, &[b]);
    if failed.is_empty() { Ok(()) } else { Err(format!("{}: see the console above\n{}", c.name, w.lab.log("dnsmasq"))) }
}

/// Debian 12 over NFSv4 by DHCP (the universal image), running; its root builds its own
/// image with no options (host-only: the NFS root from the mount table, the NIC's driver),
/// which boots the same root again with nothing on the command line.
fn debian12_nfs_and_self_built() -> Result<(), String> {
    let Some(w) = world()? else { return Ok(()) };
    let tree = &w.bookworm;
    let image = w.t.join("bookworm-universal-nfs.img");
    ok(leanrd()
        .args(["build", "-k", &w.kver, "--universal", "--include", "nfs", "--sysroot"])
        .arg(tree)
        .arg("--init")
        .arg(&w.init)
        .arg("-o")
        .arg(&image));
    let append = format!("root=nfs:{SERVER}:{} rw ip=dhcp leanrd.test=selfbuild leanrd.debug", tree.display());
    // The same MAC for both boots: one machine, rebooted.
    let (qemu, _) = nics(w, Nics::One)?;
    let mut b = Boot::new("debian12_nfs4_dhcp", &image, &append, qemu.clone())
        .expect("LEANRD-ROOT 10.77.0.1:")
        .expect("LEANRD-SELFBUILD ok")
        // The way down: the NFS root unmounted by the exitrd, within its bound.
        .expect("Returning to initrd")
        .expect("leanrd: shutdown: unmounted /oldroot (")
        .expect("leanrd: shutdown: all taken apart in ");
    b.reject = vec!["leanrd: shutdown: unmount /".into(), "step(s) failed".into()];
    b.netns = Some(w.lab.ns.clone());
    if !debian::run(&w.kernel, &[b]).is_empty() {
        return Err("Debian 12 over NFSv4 did not reach running, or its own build failed".into());
    }
    let own = tree.join(format!("boot/initrd.img-{}", w.kver));
    let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&own))).unwrap();
    for m in ["virtio_net.ko", "nfsv4.ko"] {
        if !ls.lines().any(|l| l.ends_with(m)) {
            return Err(format!("the self-built image lacks {m}"));
        }
    }
    for m in ["ext4.ko", "virtio_blk.ko", "e1000.ko"] {
        if ls.lines().any(|l| l.ends_with(m)) {
            return Err(format!("the self-built image holds {m}, which an NFS root over virtio-net does not need"));
        }
    }
    // The same NIC on the same tap (the first VM has ended).
    let mut b = Boot::new("debian12_nfs_self_built", &own, "", qemu).expect("LEANRD-ROOT 10.77.0.1:");
    b.netns = Some(w.lab.ns.clone());
    boots_pass(&w.kernel, &[b], "the self-built NFS image did not boot".into())
}

/// Debian 13's kernel and the universal image with the nfs feature built from its root, made
/// once for the boots that share it.
fn trixie_image(w: &World) -> (PathBuf, &'static PathBuf) {
    static IMAGE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let kernel = root_kernel(&w.trixie);
    let image = once(&IMAGE, || {
        let image = w.t.join("trixie-universal-nfs.img");
        ok(leanrd()
            .args(["build", "-k", &kver_of(&kernel), "--universal", "--include", "nfs", "--sysroot"])
            .arg(&w.trixie)
            .arg("--init")
            .arg(&w.init)
            .arg("-o")
            .arg(&image));
        image
    });
    (kernel, image)
}

/// Debian 13 (its own 6.12 client) over NFS with nothing forced: the client and ganesha 4.3
/// agree on NFSv4.2, and the exec of the root's init fails with a real EIO (the same root
/// boots at vers=3, [`debian13_nfs3_static`]). /init says so with the version the mount is at
/// and the lower one to force; an NFS root's diagnosis lists no block devices (none are
/// attached) and gives no disk controller hint.
fn debian13_nfs42_exec_eio_diagnosed() -> Result<(), String> {
    let Some(w) = world()? else { return Ok(()) };
    let (kernel, image) = trixie_image(w);
    let (qemu, _) = nics(w, Nics::One)?;
    let tree = w.trixie.display();
    let mut b =
        Boot::new("debian13_nfs42_exec_eio_diagnosed", image, &format!("quiet root=nfs:{SERVER}:{tree} ip=dhcp"), qemu);
    b.netns = Some(w.lab.ns.clone());
    b.secs = 180;
    // The init's file reads whole before the switch (read(2) gets no error); the exec after
    // it fails. What follows /sbin/init's failure (/bin/sh's) is the server's too.
    b.expect = vec![
        "leanrd: cannot boot: the root's init could not be run: exec /sbin/init: Input/output error".into(),
        format!(
            " (the root {SERVER}:{tree} is mounted with NFS vers=4.2: a server that fails this version's reads may \
             serve a lower one: force vers=4.1 in the NFS options, as root=nfs:SERVER:PATH:vers=4.1 or \
             nfsroot=SERVER:PATH,vers=4.1)"
        ),
    ];
    b.reject = vec!["block devices seen".into(), "disk controller".into(), "LEANRD-ROOT".into()];
    b.stop = vec!["no rescue shell in this image".into()];
    boots_pass(&kernel, &[b], format!("the NFSv4.2 exec failure was not diagnosed\n{}", w.lab.log("ganesha")))
}

/// Debian 13 with its own kernel over NFSv3, a static address on the NIC BOOTIF= names (the
/// second of two).
fn debian13_nfs3_static() -> Result<(), String> {
    let Some(w) = world()? else { return Ok(()) };
    let tree = &w.trixie;
    let (kernel, image) = trixie_image(w);
    // Two NICs, PXE's BOOTIF= naming the second (e1000, the only one wired to the server):
    // the static address goes there, or the root is not reached.
    let (qemu, macs) = nics(w, Nics::SecondWired)?;
    let append = format!(
        "root=nfs:{SERVER}:{}:vers=3 rw ip=10.77.0.20:{SERVER}:{SERVER}:255.255.255.0:trixie::off BOOTIF=01-{}",
        tree.display(),
        macs[1].replace(':', "-")
    );
    let mut b = Boot::new("debian13_nfs3_static", image, &append, qemu)
        .expect("LEANRD-ROOT 10.77.0.1:")
        .expect("vers=3")
        .expect(": none 10.77.0.20/24 gateway 10.77.0.1");
    b.netns = Some(w.lab.ns.clone());
    boots_pass(&kernel, &[b], "Debian 13 over NFSv3 did not reach running".into())
}

/// Debian 12 on an iSCSI LUN (the universal image), named by dracut's rd.iscsi.* words, by
/// DHCP: running, its root the LUN's disk. The way down: systemd returns to the exitrd, which
/// logs out of the session; the target then has no session of that initiator left (a VM
/// that powers off without logging out leaves its session at the target: QEMU sends no FIN;
/// measured with rd.leanrd.exitrd=0, where this check fails).
fn debian12_iscsi() -> Result<(), String> {
    const INITIATOR: &str = "iqn.2026-11.test:bookworm";
    let Some(w) = world()? else { return Ok(()) };
    let append = format!(
        "root=UUID={DEB_UUID} rw rd.iscsi.target.name={DEB_IQN} rd.iscsi.target.ip={SERVER} \
         rd.iscsi.initiator={INITIATOR} ip=dhcp leanrd.debug"
    );
    let (qemu, _) = nics(w, Nics::One)?;
    let mut b = Boot::new("debian12_iscsi", &w.image, &append, qemu)
        .expect("LEANRD-ROOT /dev/sda ext4")
        .expect("] iscsi: logged in to iqn.2026-11.test.leanrd:bookworm at 10.77.0.1:3260")
        .expect("Returning to initrd")
        .expect(&format!("leanrd: shutdown: session1 ({DEB_IQN}): logged out ("))
        .expect("leanrd: shutdown: all taken apart in ");
    b.reject = vec!["leanrd: shutdown: unmount /".into(), "step(s) failed".into()];
    b.netns = Some(w.lab.ns.clone());
    boots_pass(&w.kernel, &[b], format!("Debian 12 on iSCSI did not reach running\n{}", w.lab.log("tgt")))?;
    let show = w.lab.tgt_show()?;
    if show.contains(INITIATOR) {
        return Err(format!("the target still has a session of {INITIATOR} after the power-off:\n{show}"));
    }
    Ok(())
}

/// Debian 12 on NVMe over TCP (the universal image, the subsystems discovered), running; its
/// root builds its own image with no options (host-only: the subsystem from sysfs, the NIC's
/// driver), which boots the same root again with nothing on the command line.
fn debian12_nvmf_and_self_built() -> Result<(), String> {
    let Some(w) = world()? else { return Ok(()) };
    let append = format!(
        "root=UUID={DEB_UUID} rw rd.nvmf.discover=tcp,10.77.0.2,,4420 \
         rd.nvmf.hostnqn=nqn.2014-08.org.nvmexpress:uuid:6c65616e-7264-0000-0000-000000000012 ip=dhcp \
         leanrd.test=selfbuild leanrd.debug"
    );
    let (qemu, _) = nics(w, Nics::One)?;
    let mut b = Boot::new("debian12_nvmf", &w.image, &append, qemu.clone())
        .expect("LEANRD-ROOT /dev/nvme")
        .expect(&format!("] nvmf: connected to {DEB_NQN} at 10.77.0.2:4420"))
        .expect("LEANRD-SELFBUILD ok")
        // The way down: the exitrd disconnects the controller after unmounting the root.
        .expect("Returning to initrd")
        .expect(": NVMe-oF controller disconnected (")
        .expect("leanrd: shutdown: all taken apart in ");
    b.reject = vec!["leanrd: shutdown: unmount /".into(), "step(s) failed".into()];
    b.netns = Some(w.lab.ns.clone());
    if !debian::run(&w.kernel, &[b]).is_empty() {
        return Err(format!(
            "Debian 12 on NVMe/TCP did not reach running, or its own build failed\n{}",
            w.lab.log("nvmet")
        ));
    }
    // The image it wrote, from its disk (the target VM's, flushed by the root's sync).
    let own = w.t.join("nvmf-self-built.img");
    let dump = format!("dump /boot/initrd.img-{} {}", w.kver, own.display());
    ok(std::process::Command::new("debugfs").args(["-R", &dump]).arg(&w.deb_ns));
    let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&own))).unwrap();
    for m in ["virtio_net.ko", "nvme-tcp.ko"] {
        if !ls.lines().any(|l| l.ends_with(m)) {
            return Err(format!("the self-built image lacks {m}"));
        }
    }
    if ls.lines().any(|l| l.ends_with("virtio_blk.ko") || l.ends_with("iscsi_tcp.ko") || l.ends_with("nfsv4.ko")) {
        return Err("the self-built image holds drivers an NVMe/TCP root over virtio-net does not need".into());
    }
    let mut b = Boot::new("debian12_nvmf_self_built", &own, "", qemu)
        .expect("LEANRD-ROOT /dev/nvme")
        .expect(&format!("] nvmf: connected to {DEB_NQN} at 10.77.0.2:4420"));
    b.netns = Some(w.lab.ns.clone());
    boots_pass(&w.kernel, &[b], "the self-built NVMe/TCP image did not boot".into())
}

fn main() -> std::process::ExitCode {
    let mut trials: Vec<Trial> = CASES.iter().map(|c| test(c.name, move || boot_case(c))).collect();
    trials.extend(LACKING.iter().map(|c| test(c.name, move || boot_lacking(c))));
    trials.push(test("debian12_nfs4_dhcp_and_self_built", debian12_nfs_and_self_built));
    trials.push(test("debian13_nfs3_static", debian13_nfs3_static));
    trials.push(test("debian13_nfs42_exec_eio_diagnosed", debian13_nfs42_exec_eio_diagnosed));
    trials.push(test("debian12_iscsi", debian12_iscsi));
    trials.push(test("debian12_nvmf_and_self_built", debian12_nvmf_and_self_built));
    let code = run_tests(trials, cores());
    // The lab's servers and namespace end with the binary (a static is never dropped).
    if let Some(Ok(Some(w))) = WORLD.get() {
        w.lab.stop();
    }
    code
}
