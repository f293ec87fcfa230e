//! What the benchmarks' harness binary (`leanrd-harness`, src/bin/leanrd-harness.rs) runs: a
//! boot as data ([`VmBoot`]) made into the QEMU command lines the tests use
//! ([`crate::qemu_command`], [`crate::boot::qemu_args`]) and run on a VM slot like every test
//! boot ([`crate::boot::run_console`]), giving the console, the time the VM ran (not
//! the wait for its slot) and when each of some console marks first showed; and the kernel a
//! suite boots.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::boot::{Console, Disk, Monitor, boot_console_timed, qemu_args, run_console, run_console_answering};
use crate::*;

/// What a boot gave.
#[derive(Debug, serde::Serialize)]
pub struct Run {
    /// The serial console's output.
    pub console: String,
    /// Seconds from QEMU's start (once the VM slot was held) to its end.
    pub vm_seconds: f64,
    /// Seconds spent waiting for the VM slot.
    pub slot_wait_seconds: f64,
    /// Seconds from QEMU's start to the first console output holding each mark seen.
    pub marks: BTreeMap<String, f64>,
}

impl From<Console> for Run {
    fn from(c: Console) -> Run {
        Run {
            console: c.console,
            vm_seconds: c.ran.as_secs_f64(),
            slot_wait_seconds: c.waited.as_secs_f64(),
            marks: c.marks,
        }
    }
}

/// QEMU's arguments giving the VM `mib` MiB of memory (after [`qemu_args`]': the last wins).
pub fn memory_args(mib: u64) -> Vec<String> {
    vec!["-m".into(), mib.to_string()]
}

/// How a VM starts: a kernel and an initramfs, or UEFI firmware.
#[derive(Clone, Debug)]
pub enum Start {
    /// QEMU loads the kernel and the initramfs itself (`-kernel`, `-initrd`, `-append`).
    Kernel {
        /// The kernel image (vmlinuz).
        kernel: PathBuf,
        /// The initramfs image.
        initrd: PathBuf,
        /// The kernel command line, after `console=ttyS0 panic=-1`.
        append: String,
    },
    /// OVMF, starting what the disks hold (an ESP's \EFI\BOOT\BOOTX64.EFI).
    Firmware,
}

/// One benchmark boot, as data.
#[derive(Clone, Debug)]
pub struct VmBoot {
    /// How the VM starts.
    pub start: Start,
    /// The disks, attached in order; each image must exist.
    pub disks: Vec<Disk>,
    /// The disks' writes go to a temporary overlay (the images stay as they are).
    pub snapshot: bool,
    /// Memory, MiB; None: what [`qemu_args`] gives.
    pub memory_mib: Option<u64>,
    /// More QEMU arguments, after all the others.
    pub extra: Vec<String>,
    /// A passphrase to type (with Enter) at the first [`VmBoot::prompt`] on the console.
    pub answer: Option<String>,
    /// The prompt `answer` answers (None: "Enter passphrase"; systemd's agent asks "Please
    /// enter passphrase for disk ...").
    pub prompt: Option<String>,
    /// Commands typed on QEMU's human monitor (a unix socket of the boot's own) when the
    /// console shows a text: (text, command), in order, each once ([`Monitor`]; with
    /// `-no-shutdown` in `extra`, `dump-guest-memory FILE` at "reboot: Power down" keeps the
    /// RAM of the machine that went down).
    pub monitor: Vec<(String, String)>,
    /// Console texts that end the VM at once (a boot that has failed).
    pub stop: Vec<String>,
    /// Console texts to time: when each first shows, in seconds from QEMU's start.
    pub marks: Vec<String>,
    /// Seconds before the VM is killed.
    pub secs: u64,
    /// The network namespace QEMU runs in (a [`crate::netlab::NetLab`]'s).
    pub netns: Option<String>,
    /// An arm64 machine: qemu-system-aarch64's `virt` board ([`crate::aarch64_qemu_command`],
    /// [`crate::aavmf_command`]).
    pub aarch64: bool,
}

impl VmBoot {
    /// QEMU's arguments after the start's own: the disks, the memory, the extras.
    pub fn qemu_extra(&self) -> Vec<String> {
        let disks: Vec<&Disk> = self.disks.iter().collect();
        let mut a = qemu_args(&disks, self.snapshot);
        a.extend(self.memory_mib.map(memory_args).unwrap_or_default());
        a.extend(self.extra.iter().cloned());
        a
    }

    /// The command line; a firmware boot's variable store is copied into `scratch`.
    pub fn command(&self, scratch: &TempDir) -> Result<Command, String> {
        for d in &self.disks {
            if !d.path.exists() {
                return Err(format!("{}: no such disk image", d.path.display()));
            }
        }
        let extra = self.qemu_extra();
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        match &self.start {
            Start::Kernel { kernel, initrd, append } => {
                for f in [kernel, initrd] {
                    if !f.exists() {
                        return Err(format!("{}: no such file", f.display()));
                    }
                }
                let q = if self.aarch64 {
                    crate::aarch64_qemu_command(kernel, initrd, append, &extra, self.secs)
                } else {
                    qemu_command_as_is(kernel, initrd, append, &extra, self.secs)
                };
                Ok(match &self.netns {
                    Some(ns) => crate::netlab::in_netns(ns, &q),
                    None => q,
                })
            }
            Start::Firmware if self.aarch64 => {
                if !Path::new(crate::AAVMF[0]).exists() {
                    return Err(format!("{}: no such file (apt install qemu-efi-aarch64)", crate::AAVMF[0]));
                }
                Ok(crate::aavmf_command(&scratch.join("AAVMF_VARS.fd"), &extra, self.secs))
            }
            Start::Firmware => {
                if !Path::new(OVMF_CODE).exists() {
                    return Err(format!("{OVMF_CODE}: no such file (apt install ovmf)"));
                }
                let vars = scratch.join("OVMF_VARS.fd");
                fs::copy(OVMF_VARS, &vars).map_err(|e| format!("{OVMF_VARS}: {e}"))?;
                Ok(firmware_command(&vars, &extra, self.secs))
            }
        }
    }

    /// Boot; what it gave, and its command line. A kernel boot without marks is
    /// [`boot_console_timed`]'s, as every test's; the others are [`run_console`]'s.
    pub fn run(&self) -> Result<(Run, Vec<String>), String> {
        let scratch = TempDir::new("harness");
        let cmd = self.command(&scratch)?;
        let line = std::iter::once(cmd.get_program()).chain(cmd.get_args()).map(|a| a.to_string_lossy().into_owned());
        let line = line.collect();
        let answer = self.answer.as_deref();
        if !self.monitor.is_empty() || self.prompt.is_some() {
            return Ok((self.run_acting(cmd, &scratch), line));
        }
        let run = match &self.start {
            Start::Kernel { kernel, initrd, append }
                if self.marks.is_empty() && self.netns.is_none() && !self.aarch64 =>
            {
                boot_console_timed(kernel, initrd, append, &self.qemu_extra(), answer, &self.stop, self.secs).into()
            }
            _ => run_console(cmd, answer, &self.stop, &self.marks).into(),
        };
        Ok((run, line))
    }

    /// [`VmBoot::run`] with a prompt of its own and monitor commands: [`run_console_answering`]
    /// on the command line, with the monitor's socket in `scratch`.
    fn run_acting(&self, mut cmd: Command, scratch: &TempDir) -> Run {
        let socket = scratch.join("monitor");
        if !self.monitor.is_empty() {
            cmd.args(["-monitor", &format!("unix:{},server=on,wait=off", socket.display())]);
        }
        let prompt = self.prompt.as_deref().unwrap_or("Enter passphrase");
        let answers: Vec<(&str, &str)> = self.answer.as_deref().map(|a| (prompt, a)).into_iter().collect();
        let monitor = Some(Monitor { socket: &socket, on: &self.monitor }).filter(|m| !m.on.is_empty());
        run_console_answering(cmd, &answers, &self.stop, &self.marks, monitor).into()
    }
}

/// The kernel a suite boots, as (release, vmlinuz): Debian 12 ("bookworm") the host's newest
/// module tree ([`kver`]) and its /boot/vmlinuz-RELEASE, Debian 13 ("trixie") the newest in
/// the cached trixie root's own /boot ([`root_kernel`]); by version order. `release` asks for
/// that one rather than the newest.
pub fn suite_kernel(suite: &str, release: Option<&str>) -> Result<(String, PathBuf), String> {
    match suite {
        "bookworm" => {
            let k = match release {
                Some(r) => r.to_string(),
                None => kver().ok_or("no kernel module tree in /lib/modules")?,
            };
            let vmlinuz = PathBuf::from(format!("/boot/vmlinuz-{k}"));
            if !vmlinuz.exists() {
                return Err(format!("{}: no such kernel", vmlinuz.display()));
            }
            Ok((k, vmlinuz))
        }
        "trixie" | "trixie-arm64" => {
            let root = debian_suite_root(&suite.replace('-', " "), "")
                .ok_or("no Debian 13 root (needs root and mmdebstrap; arm64: qemu-user-static)")?;
            let vmlinuz = match release {
                Some(r) => root.join(format!("boot/vmlinuz-{r}")),
                None => root_kernel(&root),
            };
            if !vmlinuz.exists() {
                return Err(format!("{}: no such kernel", vmlinuz.display()));
            }
            Ok((crate::boot::kver_of(&vmlinuz), vmlinuz))
        }
        s => Err(format!("{s}: not a suite (bookworm, trixie or trixie-arm64)")),
    }
}
