//! Multi-device btrfs: every member /init probes is registered with the kernel (what udev's
//! `btrfs ready` does), and the file system counts as present only when all its members are
//! (unless `rootflags=degraded`). One ioctl does both: BTRFS_IOC_DEVICES_READY on
//! /dev/btrfs-control scans the named device and says whether its file system is complete.

use alloc::ffi::CString;

use rustix::fd::AsFd;
use rustix::ioctl::{Ioctl, IoctlOutput, Opcode, opcode};

use alloc::format;

use crate::Init;
use crate::devices::Dev;
use crate::sys::{self, Errno};

/// `struct btrfs_ioctl_vol_args`: a file descriptor and a path (BTRFS_PATH_NAME_MAX + 1).
#[repr(C)]
struct VolArgs {
    fd: i64,
    name: [u8; 4088],
}

/// BTRFS_IOC_DEVICES_READY: `_IOR(0x94, 39, struct btrfs_ioctl_vol_args)`; returns 0 when all
/// of the file system's devices are present.
struct DevicesReady(VolArgs);

// SAFETY: the opcode is the kernel's, the argument is the struct it reads (and writes), and the
// output is the ioctl's return value.
unsafe impl Ioctl for DevicesReady {
    type Output = IoctlOutput;
    const IS_MUTATING: bool = true;
    fn opcode(&self) -> Opcode {
        opcode::read::<VolArgs>(0x94, 39)
    }
    fn as_ptr(&mut self) -> *mut core::ffi::c_void {
        (&mut self.0 as *mut VolArgs).cast()
    }
    unsafe fn output_from_ptr(out: IoctlOutput, _: *mut core::ffi::c_void) -> rustix::io::Result<IoctlOutput> {
        Ok(out)
    }
}

/// Register the btrfs member at `path` with the kernel; whether its file system now has all
/// its devices. The btrfs module must be loaded (it makes /dev/btrfs-control).
pub fn register(path: &str) -> Result<bool, Errno> {
    let ctl = rustix::fs::open(
        "/dev/btrfs-control",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let c = CString::new(path).map_err(|_| Errno::INVAL)?;
    let bytes = c.as_bytes_with_nul();
    let mut args = VolArgs { fd: 0, name: [0; 4088] };
    if bytes.len() > args.name.len() {
        return Err(Errno::NAMETOOLONG);
    }
    args.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: see the Ioctl impl.
    let r = unsafe { rustix::ioctl::ioctl(ctl.as_fd(), DevicesReady(args)) }?;
    Ok(r == 0)
}

/// Register every btrfs member among `devs` (loading btrfs first if need be) and mark each
/// with whether its file system is complete.
pub fn mark(init: &mut Init, devs: &mut [Dev]) {
    for d in devs.iter_mut().filter(|d| d.probe.fstype.as_deref() == Some("btrfs")) {
        if !sys::exists("/dev/btrfs-control") {
            init.mods.load("btrfs", &mut init.log);
        }
        match register(&d.path()) {
            Ok(all) => d.complete = Some(all),
            Err(e) => init.log.step(&format!("btrfs: {}: {}", d.path(), sys::strerror(e))),
        }
    }
}
