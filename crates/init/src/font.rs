//! The console font: the PSF file the generator put in the image (checked there with the same
//! reader, `leanrd_contract::Psf`), loaded on every virtual console with the VT's KDFONTOP
//! ioctl (KD_FONT_OP_SET), and its Unicode table with PIO_UNIMAPCLR and PIO_UNIMAP, so that
//! the prompt's text past ASCII finds its glyphs — what kbd's setfont does, without a program
//! in the image. Done once, before the first prompt or the diagnosis, whichever comes first.
//!
//! Every VT the kernel has allocated gets it (those with a /sys/class/vc/vcsN, as setupcon's
//! cached_setup_font.sh walks /dev/vcsN); a VT allocated later (a getty's) takes the
//! foreground VT's font from fbcon. The font needs a console driver that loads fonts: a
//! framebuffer (fbcon) takes any size up to 32x32, VGA text mode only 8-pixel-wide ones; with
//! the dummy console only (no screen yet, or none at all) nothing is loaded and the next
//! prompt tries again.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use leanrd_contract::{FONT_DIR, Psf};
use rustix::fd::BorrowedFd;
use rustix::fs::{Mode, OFlags};

use crate::{Init, sys};

/// KDFONTOP (linux/kd.h): font operations on the VT of the file descriptor.
const KDFONTOP: rustix::ioctl::Opcode = 0x4B72;
/// KD_FONT_OP_SET: the kernel reads `charcount` glyphs of `(width + 7) / 8 * 32` bytes.
const KD_FONT_OP_SET: u32 = 0;
/// PIO_UNIMAPCLR (linux/kd.h): empty the VT's Unicode map.
const PIO_UNIMAPCLR: rustix::ioctl::Opcode = 0x4B68;
/// PIO_UNIMAP (linux/kd.h): add (character, glyph) pairs to the VT's Unicode map.
const PIO_UNIMAP: rustix::ioctl::Opcode = 0x4B67;

/// struct console_font_op (linux/kd.h).
#[repr(C)]
struct ConsoleFontOp {
    op: u32,
    flags: u32,
    width: u32,
    height: u32,
    charcount: u32,
    data: *const u8,
}

/// struct unimapinit (linux/kd.h); the kernel no longer uses its hints.
#[repr(C)]
struct UnimapInit {
    advised_hashsize: u16,
    advised_hashstep: u16,
    advised_hashlevel: u16,
}

/// struct unipair (linux/kd.h).
#[repr(C)]
struct UniPair {
    unicode: u16,
    fontpos: u16,
}

/// struct unimapdesc (linux/kd.h).
#[repr(C)]
struct UnimapDesc {
    entry_ct: u16,
    entries: *const UniPair,
}

/// Load the glyphs (in the kernel's form, [`Psf::kernel_glyphs`]) into one VT.
fn set_font(vt: BorrowedFd<'_>, f: &Psf<'_>, glyphs: &[u8]) -> Result<(), String> {
    let mut op = ConsoleFontOp {
        op: KD_FONT_OP_SET,
        flags: 0,
        width: f.width,
        height: f.height,
        charcount: f.glyphs,
        data: glyphs.as_ptr(),
    };
    // SAFETY: KDFONTOP reads a struct console_font_op, which ConsoleFontOp is (repr(C)), and
    // writes it back; for KD_FONT_OP_SET the kernel reads charcount * ((width + 7) / 8) * 32
    // bytes at `data`, which is what `glyphs` holds (kernel_glyphs makes exactly that), and
    // `glyphs` outlives the call.
    unsafe { rustix::ioctl::ioctl(vt, rustix::ioctl::Updater::<KDFONTOP, ConsoleFontOp>::new(&mut op)) }
        .map_err(|e| format!("KDFONTOP: {}", sys::strerror(e)))
}

/// Replace one VT's Unicode map with `pairs`.
fn set_unimap(vt: BorrowedFd<'_>, pairs: &[UniPair]) -> Result<(), String> {
    let entry_ct =
        u16::try_from(pairs.len()).map_err(|_| format!("{} Unicode pairs, more than PIO_UNIMAP takes", pairs.len()))?;
    let init = UnimapInit { advised_hashsize: 0, advised_hashstep: 0, advised_hashlevel: 0 };
    // SAFETY: PIO_UNIMAPCLR reads at most a struct unimapinit, which UnimapInit is (repr(C)).
    unsafe { rustix::ioctl::ioctl(vt, rustix::ioctl::Setter::<PIO_UNIMAPCLR, UnimapInit>::new(init)) }
        .map_err(|e| format!("PIO_UNIMAPCLR: {}", sys::strerror(e)))?;
    let desc = UnimapDesc { entry_ct, entries: pairs.as_ptr() };
    // SAFETY: PIO_UNIMAP reads a struct unimapdesc, which UnimapDesc is (repr(C)), and then
    // entry_ct struct unipair at `entries`: `pairs` holds that many and outlives the call.
    unsafe { rustix::ioctl::ioctl(vt, rustix::ioctl::Setter::<PIO_UNIMAP, UnimapDesc>::new(desc)) }
        .map_err(|e| format!("PIO_UNIMAP: {}", sys::strerror(e)))
}

/// The VTs the kernel has allocated (`tty1`...), in order: /sys/class/vc's `vcsN`.
fn allocated_vts() -> Vec<String> {
    let mut n: Vec<u32> = sys::list_dir("/sys/class/vc")
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(name, _)| name.strip_prefix("vcs")?.parse().ok())
        .filter(|n| *n > 0)
        .collect();
    n.sort_unstable();
    n.into_iter().map(|n| format!("tty{n}")).collect()
}

/// Whether a console driver that loads fonts (fbcon, VGA text mode) is bound to the VTs: not
/// only the dummy console a machine without a screen (or before its display driver) has.
fn font_console_bound() -> bool {
    sys::list_dir("/sys/class/vtconsole").unwrap_or_default().into_iter().any(|(c, _)| {
        let read = |f: &str| sys::read_string(&format!("/sys/class/vtconsole/{c}/{f}")).unwrap_or_default();
        read("bind").trim() == "1" && !read("name").contains("dummy")
    })
}

/// Load the console font /init's configuration names, once: on every allocated VT, with its
/// Unicode map. A failure is a note and a log line, and the boot goes on with the kernel's
/// font; with no VT, or only the dummy console, it is a log line and a later call tries again.
pub fn load(init: &mut Init) {
    if init.font_done {
        return;
    }
    let Some(name) = init.conf.font.clone() else {
        init.font_done = true;
        return;
    };
    let vts = allocated_vts();
    if vts.is_empty() || !font_console_bound() {
        init.log.step(&format!("console font {name}: no framebuffer or text console yet; not loaded"));
        return;
    }
    init.font_done = true;
    let path = format!("{FONT_DIR}/{name}.psf");
    let data = match sys::read(&path) {
        Ok(d) => d,
        Err(e) => {
            let why = format!("console font {name}: {path}: {}", sys::strerror(e));
            init.log.step(&why);
            init.notes.push(why);
            return;
        }
    };
    match load_on(&data, &vts) {
        Ok((what, done, failed)) => {
            if !done.is_empty() {
                init.log.step(&format!("console font {name}: {what}, on {}", done.join(", ")));
            }
            for f in failed {
                let why = format!("console font {name}: {f}; the kernel's font stays there");
                init.log.step(&why);
                init.notes.push(why);
            }
        }
        Err(e) => {
            let why = format!("console font {name}: {path}: {e}");
            init.log.step(&why);
            init.notes.push(why);
        }
    }
}

/// Load the font file's bytes on each VT named: what the font is, the VTs it went on, and
/// what failed on the others; Err when the file cannot be loaded at all.
fn load_on(data: &[u8], vts: &[String]) -> Result<(String, Vec<String>, Vec<String>), String> {
    let f = Psf::parse(data)?;
    let glyphs = f.kernel_glyphs()?;
    let pairs: Vec<UniPair> =
        f.unicode_pairs()?.into_iter().map(|(unicode, fontpos)| UniPair { unicode, fontpos }).collect();
    let (mut done, mut failed) = (Vec::new(), Vec::new());
    for tty in vts {
        let flags = OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let r = rustix::fs::open(format!("/dev/{tty}").as_str(), flags, Mode::empty())
            .map_err(|e| format!("/dev/{tty}: {}", sys::strerror(e)))
            .and_then(|fd| {
                use rustix::fd::AsFd;
                set_font(fd.as_fd(), &f, &glyphs).map_err(|e| format!("{tty}: {e}"))?;
                if !pairs.is_empty() {
                    set_unimap(fd.as_fd(), &pairs).map_err(|e| format!("{tty}: the Unicode map: {e}"))?;
                }
                Ok(())
            });
        match r {
            Ok(()) => done.push(tty.clone()),
            Err(e) => failed.push(e),
        }
    }
    Ok((f.describe(), done, failed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn the_kernels_structs_have_its_layout() {
        assert_eq!(core::mem::size_of::<ConsoleFontOp>(), 32);
        assert_eq!(core::mem::offset_of!(ConsoleFontOp, data), 24);
        assert_eq!(core::mem::size_of::<UnimapDesc>(), 16);
        assert_eq!(core::mem::offset_of!(UnimapDesc, entries), 8);
        assert_eq!(core::mem::size_of::<UniPair>(), 4);
        assert_eq!(core::mem::size_of::<UnimapInit>(), 6);
    }

    /// A garbled font file is an error naming the cause, never a panic, before any VT is
    /// opened.
    #[test]
    fn garbled_fonts_are_errors() {
        let vts = ["tty-none".into()];
        assert!(load_on(b"", &vts).unwrap_err().contains("not a PSF font"));
        assert!(load_on(&[0x36, 0x04, 0, 16, 1, 2], &vts).unwrap_err().contains("truncated"));
        // A good font on a VT that is not there: a failure for that VT.
        let mut psf = alloc::vec![0x36, 0x04, 0, 16];
        psf.extend([0u8; 256 * 16]);
        let (what, done, failed) = load_on(&psf, &vts).unwrap();
        assert_eq!(what, "8x16, 256 glyphs");
        assert!(done.is_empty());
        assert_eq!(failed, ["/dev/tty-none: No such file or directory"]);
    }
}
