//! The boot harness for the benchmarks (bench/*.py): the kernel a suite boots, and boots run
//! as the tests run them (testkit's QEMU command lines, a VM slot each: no more VMs at once
//! than the machine has cores, across benchmarks and test suites). Every answer is one JSON
//! object (boot) or one tab-separated line (kernel) on stdout.
//!
//! ```text
//! leanrd-harness kernel [--suite bookworm|trixie|trixie-arm64] [--kver RELEASE]
//! leanrd-harness boot --kernel K --initrd I --append A [--disk FILE[,bus=BUS]]... [--snapshot]
//!     [--memory MIB] [--qemu ARG]... [--stop TEXT]... [--mark TEXT]... [--passphrase P [--prompt TEXT]]
//!     [--monitor TEXT=COMMAND]... [--timeout SECS]
//! leanrd-harness boot --uefi --disk ESP --disk ROOT ...
//! leanrd-harness boot --kernel K --initrd I --append A --nfs-export DIR... [--nic MAC]...
//! leanrd-harness boot --aarch64 --kernel K --initrd I ...   (qemu-system-aarch64's virt board)
//! leanrd-harness finish-tree TREE --leanrd LEANRD --init INIT [--console ttyAMA0]
//! leanrd-harness luks-disk TREE --out DISK      (the boot scenarios' installer LUKS layout)
//! leanrd-harness ram-key --disk DISK --dump RAM (copies of its volume key's halves in RAM)
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use leanrd_testkit::boot::{
    BOOT_MB, BOOT_START_MB, Bus, Disk, add_tools_from, finish_base_on, key_halves_in, luks_prep, luks_volume_key,
};
use leanrd_testkit::cli::{Start, VmBoot, suite_kernel};
use leanrd_testkit::netlab::{LabSpec, NetLab};
use serde::Deserialize;

#[derive(Parser)]
#[command(name = "leanrd-harness", about = "leanrd's boot harness, for the benchmarks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print `RELEASE<TAB>VMLINUZ` of the kernel a suite boots (the newest, by version order).
    Kernel {
        #[arg(long, default_value = "bookworm", value_parser = ["bookworm", "trixie", "trixie-arm64"])]
        suite: String,
        /// This release rather than the newest.
        #[arg(long)]
        kver: Option<String>,
    },
    /// Boot under QEMU TCG; print {"console", "vm_seconds", "slot_wait_seconds", "marks", "qemu"} as JSON.
    Boot(Box<BootArgs>),
    /// Make a root tree a test system as the boot tests make theirs: an identity, a module
    /// option, the report unit, and leanrd with its /init.
    FinishTree {
        tree: PathBuf,
        #[arg(long)]
        leanrd: PathBuf,
        #[arg(long)]
        init: PathBuf,
        /// The machine's serial console, which the report writes to (ttyAMA0 on arm64).
        #[arg(long, default_value = "ttyS0")]
        console: String,
    },
    /// Make the boot scenarios' `luks` disk of TREE at DISK (Debian's installer layout: GPT, an
    /// ESP, /boot, LUKS2 with the passphrase testkit's PASS holding the ext4 root, sda3_crypt
    /// in its crypttab) in a prep VM on the host's kernel; print the LUKS UUID, /boot's
    /// partition offset and size in bytes, tab-separated.
    LuksDisk {
        tree: PathBuf,
        #[arg(long)]
        out: PathBuf,
    },
    /// Print as JSON how many copies of each 32-byte half of DISK's LUKS volume key (read from
    /// its header with the passphrase) the RAM dump holds: {"key_bytes", "dump_bytes", "halves"}.
    RamKey {
        /// A disk made by luks-disk.
        #[arg(long)]
        disk: PathBuf,
        /// QEMU's `dump-guest-memory` of the machine.
        #[arg(long)]
        dump: PathBuf,
    },
}

#[derive(clap::Args)]
struct BootArgs {
    #[arg(long, required_unless_present = "uefi", conflicts_with = "uefi")]
    kernel: Option<PathBuf>,
    #[arg(long, required_unless_present = "uefi", conflicts_with = "uefi")]
    initrd: Option<PathBuf>,
    /// The kernel's command line (after testkit's `console=ttyS0 panic=-1`).
    #[arg(long, default_value = "", conflicts_with = "uefi")]
    append: String,
    /// UEFI firmware (OVMF; AAVMF with --aarch64) starts what the disks hold, no --kernel.
    #[arg(long)]
    uefi: bool,
    /// An arm64 machine: qemu-system-aarch64's virt board (console ttyAMA0).
    #[arg(long)]
    aarch64: bool,
    /// A raw disk image, on a controller: virtio-blk (the default), virtio-scsi, ahci, nvme.
    #[arg(long = "disk", value_name = "FILE[,bus=BUS]")]
    disks: Vec<String>,
    /// The disks' writes go to a temporary overlay.
    #[arg(long)]
    snapshot: bool,
    /// Memory in MiB (else testkit's 1024).
    #[arg(long)]
    memory: Option<u64>,
    /// One more QEMU argument (repeat for each).
    #[arg(long = "qemu", value_name = "ARG", allow_hyphen_values = true)]
    qemu: Vec<String>,
    /// Console text that ends the VM at once.
    #[arg(long = "stop", value_name = "TEXT")]
    stop: Vec<String>,
    /// Console text whose first appearance is timed from QEMU's start.
    #[arg(long = "mark", value_name = "TEXT")]
    marks: Vec<String>,
    /// Typed at the first "Enter passphrase" (or --prompt).
    #[arg(long)]
    passphrase: Option<String>,
    /// The prompt --passphrase answers, rather than "Enter passphrase".
    #[arg(long, requires = "passphrase")]
    prompt: Option<String>,
    /// A command typed on QEMU's monitor once the console shows TEXT (in order, each once):
    /// `--monitor 'reboot: Power down=dump-guest-memory FILE'` with `--qemu=-no-shutdown`.
    #[arg(long = "monitor", value_name = "TEXT=COMMAND")]
    monitor: Vec<String>,
    /// Seconds before the VM is killed.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// A directory exported over NFS (v3 and v4, read-write) by nfs-ganesha in a network
    /// namespace made for this boot, with DHCP and DNS from dnsmasq there (testkit's netlab:
    /// the server is 10.77.0.1); QEMU runs in it with a NIC on its bridge.
    #[arg(long = "nfs-export", value_name = "DIR")]
    nfs_exports: Vec<PathBuf>,
    /// The MAC of a virtio NIC on the lab's bridge (default: one NIC, 52:54:00:12:34:56).
    #[arg(long = "nic", value_name = "MAC", requires = "nfs_exports")]
    nics: Vec<String>,
}

/// FILE[,bus=BUS] as a disk.
fn disk(spec: &str) -> Result<Disk, String> {
    let (path, opts) = spec.split_once(',').unwrap_or((spec, ""));
    let mut bus = Bus::VirtioBlk;
    for o in opts.split(',').filter(|o| !o.is_empty()) {
        let Some(b) = o.strip_prefix("bus=") else {
            return Err(format!("--disk {spec}: {o}: not an option (bus=BUS)"));
        };
        bus = Bus::deserialize(serde::de::value::StrDeserializer::<serde::de::value::Error>::new(b))
            .map_err(|_| format!("--disk {spec}: {b}: not a bus (virtio-blk, virtio-scsi, ahci, nvme, virtio-mmio)"))?;
    }
    Ok(Disk { path: PathBuf::from(path), gpt: false, bus })
}

fn boot(a: BootArgs) -> Result<String, String> {
    let start = if a.uefi {
        Start::Firmware
    } else {
        Start::Kernel { kernel: a.kernel.unwrap_or_default(), initrd: a.initrd.unwrap_or_default(), append: a.append }
    };
    let mut extra = a.qemu;
    // The lab lives until the boot is over.
    let lab = if a.nfs_exports.is_empty() {
        None
    } else {
        let exports: Vec<&Path> = a.nfs_exports.iter().map(PathBuf::as_path).collect();
        let lab = NetLab::start(
            "bench",
            &LabSpec { exports: &exports, dhcp: true, root_path: None, luns: &[], nvmf: None, tang: None },
        )?;
        let macs: Vec<&str> =
            if a.nics.is_empty() { vec!["52:54:00:12:34:56"] } else { a.nics.iter().map(String::as_str).collect() };
        extra.extend(lab.nics(&macs, "virtio-net-pci", true)?);
        Some(lab)
    };
    let b = VmBoot {
        netns: lab.as_ref().map(|l| l.ns.clone()),
        start,
        disks: a.disks.iter().map(|d| disk(d)).collect::<Result<_, _>>()?,
        snapshot: a.snapshot,
        memory_mib: a.memory,
        extra,
        answer: a.passphrase,
        prompt: a.prompt,
        monitor: a
            .monitor
            .iter()
            .map(|m| {
                m.split_once('=')
                    .map(|(t, c)| (t.to_string(), c.to_string()))
                    .ok_or_else(|| format!("--monitor {m}: not TEXT=COMMAND"))
            })
            .collect::<Result<_, _>>()?,
        stop: a.stop,
        marks: a.marks,
        secs: a.timeout,
        aarch64: a.aarch64,
    };
    let (run, qemu) = b.run()?;
    drop(lab);
    let mut v = serde_json::to_value(&run).map_err(|e| e.to_string())?;
    v["qemu"] = qemu.into();
    Ok(v.to_string())
}

fn finish_tree(tree: &Path, leanrd: &Path, init: &Path, console: &str) -> Result<String, String> {
    for p in [tree, leanrd, init] {
        if !p.exists() {
            return Err(format!("{}: no such file or directory", p.display()));
        }
    }
    for d in ["etc/systemd/system/multi-user.target.wants", "usr/bin"] {
        if !tree.join(d).is_dir() {
            return Err(format!("{}: not a root with systemd (no {d})", tree.display()));
        }
    }
    finish_base_on(tree, console);
    add_tools_from(tree, leanrd, init);
    Ok(tree.display().to_string())
}

fn luks_disk(tree: &Path, out: &Path) -> Result<String, String> {
    if !tree.join("etc").is_dir() {
        return Err(format!("{}: not a root tree", tree.display()));
    }
    let host = leanrd_testkit::kernel().ok_or("the host's kernel (the prep VM runs it)")?;
    let t = leanrd_testkit::TempDir::new("harness-luks-prep");
    let (prep, disks, _, luks_uuid) =
        luks_prep(&t, &leanrd_testkit::boot::kver_of(&host), tree, out).ok_or("the LUKS prep image")?;
    leanrd_testkit::scenario::prep_boot(&prep, &disks, &format!("LUKS {}", out.display()));
    Ok(format!("{luks_uuid}\t{}\t{}", BOOT_START_MB << 20, BOOT_MB << 20))
}

fn ram_key(disk: &Path, dump: &Path) -> Result<String, String> {
    let key = luks_volume_key(disk, (BOOT_START_MB + BOOT_MB) << 20)?;
    let ram = std::fs::read(dump).map_err(|e| format!("{}: {e}", dump.display()))?;
    let halves = key_halves_in(&ram, &key);
    Ok(serde_json::json!({"key_bytes": key.len(), "dump_bytes": ram.len(), "halves": halves}).to_string())
}

fn main() -> ExitCode {
    let out = match Cli::parse().cmd {
        Cmd::Kernel { suite, kver } => {
            suite_kernel(&suite, kver.as_deref()).map(|(k, path)| format!("{k}\t{}", path.display()))
        }
        Cmd::Boot(a) => boot(*a),
        Cmd::FinishTree { tree, leanrd, init, console } => finish_tree(&tree, &leanrd, &init, &console),
        Cmd::LuksDisk { tree, out } => luks_disk(&tree, &out),
        Cmd::RamKey { disk, dump } => ram_key(&disk, &dump),
    };
    match out {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("leanrd-harness: {e}");
            ExitCode::from(2)
        }
    }
}
