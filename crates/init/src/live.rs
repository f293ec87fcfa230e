//! A live root: find the medium (by label, UUID or device; or, for Debian's `boot=live`, the
//! first ISO 9660 medium that holds a live image), mount it read-only, find the image on it
//! (dracut's /LiveOS/squashfs.img, Debian's /live/*.squashfs, or where `rd.live.dir=` and
//! `rd.live.squashimg=` say), optionally copy it into RAM (`rd.live.ram`: the medium can then
//! go), attach it to a loop device (LOOP_CONFIGURE, done here: no losetup), mount it (squashfs
//! or erofs), and put an overlayfs on /newroot with its upper layer on tmpfs
//! (`rd.live.overlay.size=`) or on a persistent file system (`rd.live.overlay=DEVICE`, in
//! dracut's place: /LiveOS/overlay-LABEL-UUID on it).
//!
//! Everything is mounted under /run/initramfs, which moves into the root with /run: the
//! system sees its medium at /run/initramfs/live, as with dracut.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use leanrd_contract::{DeviceRef, LiveRoot, RootKind};
use rustix::fd::OwnedFd;
use rustix::fs::{Mode, OFlags};
use rustix::mount::MountFlags;

use crate::Init;
use crate::devices::Dev;
use crate::probe::ISO9660;
use crate::root::{NEWROOT, RootSource};
use crate::sys::{self, Errno, strerror};
use crate::wait::{DeviceWaiter, Waiter};

const MEDIUM: &str = "/run/initramfs/live";
const RAM: &str = "/run/initramfs/ram";
const IMAGE: &str = "/run/initramfs/rootfs";
const OVERLAY: &str = "/run/initramfs/overlayfs";

/// Where images are looked for, in order, when the command line names none.
const IMAGES: [&str; 2] = ["LiveOS/squashfs.img", "live/filesystem.squashfs"];

/// A live root: the medium (and a persistent overlay's device) to wait for, then an image on
/// it mounted under an overlayfs on [`NEWROOT`].
pub struct LiveSource {
    want: LiveRoot,
    waiter: MediumWaiter,
}

/// The medium (and the persistent overlay's device, when one is named).
pub struct MediumWaiter {
    named: Option<DeviceWaiter>,
    /// `boot=live`: the ISO 9660 media seen.
    any: Vec<Dev>,
    overlay: Option<DeviceWaiter>,
}

impl LiveSource {
    /// The source for `want`, waiting for its medium (`boot=live`: any ISO 9660 one) and for
    /// `rd.live.overlay=`'s device when given.
    pub fn new(init: &Init, want: LiveRoot) -> LiveSource {
        let named = want.medium.clone().map(|d| DeviceWaiter::new("live medium", d));
        let overlay = init.cmd.live.overlay.clone().map(|d| DeviceWaiter::new("live overlay", d));
        LiveSource { want, waiter: MediumWaiter { named, any: Vec::new(), overlay } }
    }
}

impl Waiter for MediumWaiter {
    fn describe(&self) -> String {
        let medium = match &self.named {
            Some(w) if w.found.is_none() => Some(format!("the live medium {}", w.want)),
            None if self.any.is_empty() => Some("a live medium (an ISO 9660 file system: no CD or stick found)".into()),
            _ => None,
        };
        let overlay =
            self.overlay.as_ref().filter(|o| o.found.is_none()).map(|o| format!("the persistent overlay's {}", o.want));
        [medium, overlay].into_iter().flatten().collect::<Vec<_>>().join(" and ")
    }
    fn wants(&self) -> Option<&DeviceRef> {
        self.named.as_ref().and_then(|w| w.wants())
    }
    fn offer(&mut self, devs: &[Dev], devno_of: &dyn Fn(&str) -> Option<(u32, u32)>) -> bool {
        let medium = match &mut self.named {
            Some(w) => w.found.is_some() || w.offer(devs, devno_of),
            None => {
                self.any = devs.iter().filter(|d| d.probe.fstype.as_deref() == Some(ISO9660)).cloned().collect();
                !self.any.is_empty()
            }
        };
        let overlay = match &mut self.overlay {
            Some(o) => o.found.is_some() || o.offer(devs, devno_of),
            None => true,
        };
        medium && overlay
    }
}

/// The images to look for on a medium: the command line's, else [`IMAGES`] and any
/// `live/*.squashfs`.
fn image_paths(init: &Init, top: &str) -> Vec<String> {
    let l = &init.cmd.live;
    let mut out: Vec<String> = Vec::new();
    match (&l.dir, &l.squashimg) {
        (Some(d), Some(i)) => out.push(format!("{d}/{i}")),
        (None, Some(i)) => out.push(format!("LiveOS/{i}")),
        (Some(d), None) => {
            out.push(format!("{d}/squashfs.img"));
            out.extend(squashfs_in(&format!("{top}/{d}")).into_iter().map(|f| format!("{d}/{f}")));
        }
        (None, None) => {
            out.extend(IMAGES.iter().map(|s| s.to_string()));
            out.extend(squashfs_in(&format!("{top}/live")).into_iter().map(|f| format!("live/{f}")));
        }
    }
    out
}

/// The `*.squashfs` files of a directory, sorted (live-boot's order).
fn squashfs_in(dir: &str) -> Vec<String> {
    let mut v: Vec<String> = sys::list_dir(dir)
        .unwrap_or_default()
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.ends_with(".squashfs"))
        .collect();
    v.sort();
    v
}

// ---- the loop device ----

/// `struct loop_info64` and `struct loop_config` (linux/loop.h): rustix has no type for them.
#[repr(C)]
struct LoopInfo64 {
    device: u64,
    inode: u64,
    rdevice: u64,
    offset: u64,
    sizelimit: u64,
    number: u32,
    encrypt_type: u32,
    encrypt_key_size: u32,
    flags: u32,
    file_name: [u8; 64],
    crypt_name: [u8; 64],
    encrypt_key: [u8; 32],
    init: [u64; 2],
}

#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

const LOOP_CTL_GET_FREE: rustix::ioctl::Opcode = 0x4C82;
const LOOP_CONFIGURE: rustix::ioctl::Opcode = 0x4C0A;
const LO_FLAGS_READ_ONLY: u32 = 1;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// LOOP_CTL_GET_FREE: no argument, the free device's number as the call's result.
struct GetFree;

// SAFETY: LOOP_CTL_GET_FREE takes no argument and returns the number; nothing is read or
// written through the (null) pointer.
unsafe impl rustix::ioctl::Ioctl for GetFree {
    type Output = i32;
    const IS_MUTATING: bool = false;
    fn opcode(&self) -> rustix::ioctl::Opcode {
        LOOP_CTL_GET_FREE
    }
    fn as_ptr(&mut self) -> *mut core::ffi::c_void {
        core::ptr::null_mut()
    }
    unsafe fn output_from_ptr(out: rustix::ioctl::IoctlOutput, _: *mut core::ffi::c_void) -> rustix::io::Result<i32> {
        Ok(out)
    }
}

/// Attach `file` read-only to a free loop device; its path, and the device held open: the
/// device is cleared when its last user goes (the mount made on it, once this is dropped).
pub fn attach(file: &str) -> Result<(String, OwnedFd), String> {
    let err = |what: &str, e: Errno| format!("{what}: {}", strerror(e));
    let backing = rustix::fs::open(file, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).map_err(|e| err(file, e))?;
    let ctl = sys::open_node("/dev/loop-control", OFlags::RDWR).map_err(|e| err("/dev/loop-control", e))?;
    let mut last = Errno::BUSY;
    // Another process may take the free device first: ask again.
    for _ in 0..8 {
        // SAFETY: GetFree is LOOP_CTL_GET_FREE on /dev/loop-control (see its impl).
        let n = unsafe { rustix::ioctl::ioctl(&ctl, GetFree) }.map_err(|e| err("LOOP_CTL_GET_FREE", e))?;
        let dev = format!("/dev/loop{n}");
        let fd = sys::open_node(&dev, OFlags::RDONLY).map_err(|e| err(&dev, e))?;
        let mut name = [0u8; 64];
        let b = file.as_bytes();
        name[..b.len().min(63)].copy_from_slice(&b[..b.len().min(63)]);
        let mut cfg = LoopConfig {
            fd: u32::try_from(rustix::fd::AsRawFd::as_raw_fd(&backing)).unwrap_or(u32::MAX),
            block_size: 0,
            info: LoopInfo64 {
                device: 0,
                inode: 0,
                rdevice: 0,
                offset: 0,
                sizelimit: 0,
                number: 0,
                encrypt_type: 0,
                encrypt_key_size: 0,
                flags: LO_FLAGS_READ_ONLY | LO_FLAGS_AUTOCLEAR,
                file_name: name,
                crypt_name: [0; 64],
                encrypt_key: [0; 32],
                init: [0; 2],
            },
            reserved: [0; 8],
        };
        // SAFETY: LOOP_CONFIGURE reads a `struct loop_config`, which LoopConfig lays out
        // (304 bytes, checked by a test), alive for the call; the kernel writes nothing back.
        let r =
            unsafe { rustix::ioctl::ioctl(&fd, rustix::ioctl::Updater::<LOOP_CONFIGURE, LoopConfig>::new(&mut cfg)) };
        match r {
            Ok(()) => return Ok((dev, fd)),
            Err(Errno::BUSY) => last = Errno::BUSY,
            Err(e) => return Err(err(&format!("LOOP_CONFIGURE {dev} with {file}"), e)),
        }
    }
    Err(err("no free loop device", last))
}

/// The image's file system, by its magic: squashfs ("hsqs" at 0) or erofs (at 1024).
fn image_type(dev: &str) -> Option<&'static str> {
    let f = sys::open(dev).ok()?;
    if sys::read_at(&f, 0, 4).is_some_and(|b| b == b"hsqs") {
        return Some("squashfs");
    }
    if sys::read_at(&f, 1024, 4).is_some_and(|b| b == [0xE2, 0xE1, 0xF5, 0xE0]) {
        return Some("erofs");
    }
    None
}

/// Copy `from` to `to` (a tmpfs); the bytes copied.
fn copy(from: &str, to: &str) -> Result<u64, String> {
    let src = rustix::fs::open(from, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| format!("{from}: {}", strerror(e)))?;
    let dst = rustix::fs::open(
        to,
        OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| format!("{to}: {}", strerror(e)))?;
    let mut total = 0u64;
    // In the kernel when it can (same file system type); else through a buffer (a CD to a
    // tmpfs is EXDEV since Linux 5.19).
    loop {
        match rustix::fs::copy_file_range(&src, None, &dst, None, 1 << 24) {
            Ok(0) => return Ok(total),
            Ok(n) => total += n as u64,
            Err(Errno::INTR) => {}
            Err(Errno::XDEV | Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => break,
            Err(e) => return Err(format!("copying {from} into RAM: {}", strerror(e))),
        }
    }
    let mut buf = alloc::vec![0u8; 1 << 20];
    loop {
        match rustix::io::read(&src, &mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => {
                if !sys::write_all(&dst, &buf[..n]) {
                    return Err(format!("copying {from} into RAM: the write failed"));
                }
                total += n as u64;
            }
            Err(Errno::INTR) => {}
            Err(e) => return Err(format!("copying {from} into RAM: {}", strerror(e))),
        }
    }
}

/// `rd.live.check`: the medium's implanted MD5 ([`crate::isomd5`]), read from its device.
fn check_medium(init: &mut Init, medium: &Dev) -> Result<(), String> {
    let dev = medium.path();
    let started = sys::now_ms();
    init.log.step(&format!("live: rd.live.check: reading {dev} for its MD5"));
    let f = sys::open(&dev).map_err(|e| format!("rd.live.check: {dev}: {}", strerror(e)))?;
    let outcome = crate::isomd5::check(&mut |at, buf| loop {
        match rustix::io::pread(&f, &mut *buf, at) {
            Err(Errno::INTR) => {}
            r => return r.map_err(|e| format!("reading at byte {at}: {}", strerror(e))),
        }
    })
    .map_err(|e| format!("rd.live.check: {dev}: {e}"))?;
    let ms = sys::now_ms().saturating_sub(started);
    match outcome {
        crate::isomd5::Checked::Passed { md5, bytes } => {
            init.log.step(&format!("live: rd.live.check: {dev} is intact (MD5 {md5}, {} MiB in {ms} ms)", bytes >> 20));
            Ok(())
        }
        crate::isomd5::Checked::Failed { implanted, read } => Err(format!(
            "rd.live.check: {dev} is damaged: its MD5 is {read}, the one implanted when it was made is {implanted} \
             (make the medium again, or boot without rd.live.check at your own risk)"
        )),
        crate::isomd5::Checked::NotImplanted => {
            init.log.step(&format!(
                "live: rd.live.check: {dev} carries no implanted MD5 (isomd5sum's implantisomd5): nothing to check it against"
            ));
            Ok(())
        }
    }
}

impl LiveSource {
    /// Mount a medium and find its image; None (the medium unmounted again) without one.
    fn image_on(&self, init: &mut Init, dev: &Dev, looked: &mut Vec<String>) -> Result<Option<String>, String> {
        sys::mkdir_p(MEDIUM);
        crate::root::mount_at(init, dev, MEDIUM, None, MountFlags::RDONLY, None)?;
        for p in image_paths(init, MEDIUM) {
            let full = format!("{MEDIUM}/{p}");
            if sys::exists(&full) {
                return Ok(Some(full));
            }
            looked.push(format!("{}:/{p}", dev.path()));
        }
        let _ = rustix::mount::unmount(MEDIUM, rustix::mount::UnmountFlags::empty());
        Ok(None)
    }

    /// The upper layer and work directory: on the persistent device (dracut's place), else on
    /// a tmpfs.
    fn upper(&self, init: &mut Init, medium: &Dev) -> Result<(String, String), String> {
        sys::mkdir_p(OVERLAY);
        match self.waiter.overlay.as_ref().and_then(|o| o.found.clone()) {
            Some(dev) => {
                crate::root::mount_at(init, &dev, OVERLAY, None, MountFlags::empty(), None)
                    .map_err(|e| format!("the persistent overlay: {e}"))?;
                let name = format!(
                    "overlay-{}-{}",
                    medium.probe.label.as_deref().unwrap_or("none").replace('/', "_"),
                    medium.probe.uuid.as_deref().unwrap_or("none").replace('/', "_")
                );
                Ok((format!("{OVERLAY}/LiveOS/{name}"), format!("{OVERLAY}/LiveOS/ovlwork")))
            }
            None => {
                let size = init.cmd.live.overlay_size.as_deref().map(|s| {
                    if s.bytes().all(|b| b.is_ascii_digit()) { format!(",size={s}m") } else { format!(",size={s}") }
                });
                let opts = format!("mode=0755{}", size.unwrap_or_default());
                sys::mount("tmpfs", OVERLAY, "tmpfs", MountFlags::NOSUID | MountFlags::NODEV, Some(&opts))
                    .map_err(|e| format!("the overlay's tmpfs ({opts}): {}", strerror(e)))?;
                Ok((format!("{OVERLAY}/upper"), format!("{OVERLAY}/work")))
            }
        }
    }
}

impl RootSource for LiveSource {
    fn kind(&self) -> RootKind {
        RootKind::Live
    }

    fn waiter(&mut self) -> &mut dyn Waiter {
        &mut self.waiter
    }

    fn mount(&mut self, init: &mut Init) -> Result<(), String> {
        let r = self.assemble(init);
        if r.is_err() {
            // Nothing half-made stays for the rescue shell or the next attempt: the image's
            // copy in RAM (up to half the memory) least of all.
            for m in [OVERLAY, IMAGE, RAM, MEDIUM] {
                let _ = rustix::mount::unmount(m, rustix::mount::UnmountFlags::DETACH);
            }
        }
        r
    }
}

impl LiveSource {
    /// Medium, image, loop device, overlay: the root on [`NEWROOT`].
    fn assemble(&mut self, init: &mut Init) -> Result<(), String> {
        for m in ["loop", "fs-squashfs", "fs-overlay"] {
            init.mods.load(m, &mut init.log);
        }
        let media: Vec<Dev> = match &self.waiter.named {
            Some(w) => w.found.iter().cloned().collect(),
            None => self.waiter.any.clone(),
        };
        let mut looked = Vec::new();
        let mut found = None;
        for dev in &media {
            if let Some(image) = self.image_on(init, dev, &mut looked)? {
                found = Some((dev.clone(), image));
                break;
            }
        }
        let what = self.want.medium.as_ref().map(|d| d.to_string()).unwrap_or_else(|| "boot=live".into());
        let Some((medium, mut image)) = found else {
            return Err(format!("no live image on the medium ({what}): looked for {}", looked.join(", ")));
        };
        init.log.step(&format!("{}{} ({image})", leanrd_contract::steplog::ROOT_FOUND, medium.path()));
        init.live_medium = Some(medium.name.clone());
        if init.cmd.live.check {
            check_medium(init, &medium)?;
        }
        if init.cmd.live.ram {
            let started = sys::now_ms();
            sys::mkdir_p(RAM);
            sys::mount("tmpfs", RAM, "tmpfs", MountFlags::NOSUID | MountFlags::NODEV, Some("mode=0700"))
                .map_err(|e| format!("rd.live.ram: a tmpfs for the image: {}", strerror(e)))?;
            let copied = format!("{RAM}/{}", image.rsplit('/').next().unwrap_or("image"));
            let bytes = copy(&image, &copied).map_err(|e| format!("rd.live.ram: {e} (too little memory?)"))?;
            let _ = rustix::mount::unmount(MEDIUM, rustix::mount::UnmountFlags::empty());
            init.log.step(&format!(
                "live: {} MiB copied into RAM in {} ms; the medium is free",
                bytes >> 20,
                sys::now_ms().saturating_sub(started)
            ));
            image = copied;
        }
        let (dev, held) = attach(&image)?;
        let fstype = image_type(&dev).ok_or_else(|| format!("{image} is neither squashfs nor erofs"))?;
        init.mods.load(&format!("fs-{fstype}"), &mut init.log);
        sys::mkdir_p(IMAGE);
        sys::mount(&dev, IMAGE, fstype, MountFlags::RDONLY, None)
            .map_err(|e| format!("cannot mount {image} ({fstype}, on {dev}): {}", strerror(e)))?;
        drop(held);
        init.log.step(&format!("live: {image} ({fstype}) on {dev}, mounted on {IMAGE}"));
        let (upper, work) = self.upper(init, &medium)?;
        sys::mkdir_p(&upper);
        sys::mkdir_p(&work);
        // overlayfs splits its options at ',' and takes a backslash as an escape: a medium's label
        // (in the persistent overlay's path) holding either must not split upperdir=.
        let esc = |p: &str| p.replace('\\', "\\\\").replace(',', "\\,");
        let opts = format!("lowerdir={IMAGE},upperdir={},workdir={}", esc(&upper), esc(&work));
        sys::mount("overlay", NEWROOT, "overlay", MountFlags::empty(), Some(&opts)).map_err(|e| {
            format!(
                "the overlay was refused ({opts}): {}{}",
                strerror(e),
                if e == Errno::NODEV { " (no overlayfs in the kernel or the image)" } else { "" }
            )
        })?;
        init.log.step(&format!("mounted overlay ({opts}) on {NEWROOT}"));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_config_has_the_kernels_layout() {
        assert_eq!(core::mem::size_of::<LoopInfo64>(), 232);
        assert_eq!(core::mem::size_of::<LoopConfig>(), 304);
    }
}
