//! The step log /init keeps (/run/initramfs/leanrd.log, and the kernel log with
//! `leanrd.debug`), as `leanrd analyze` reads it back: the line format and the steps that
//! mark the boot's phases are defined once here, for the writer and the reader.

use alloc::format;
use alloc::string::String;

/// Where the real system finds the step log.
pub const SAVED: &str = "/run/initramfs/leanrd.log";

/// What /init's lines in the kernel log start with (after the kernel's timestamp).
pub const KMSG_PREFIX: &str = "leanrd: ";

/// The first step: `leanrd-init VERSION for KVER: CMDLINE`.
pub const STARTED: &str = "leanrd-init ";
/// The root device was found: `root is /dev/...`.
pub const ROOT_FOUND: &str = "root is ";
/// A LUKS device is being opened: `unlocking DEV as NAME`.
pub const UNLOCKING: &str = "unlocking ";
/// A secret is asked for, the wait being the user's: `asking for the passphrase of NAME on
/// CONSOLES`, or `asking for the TPM2 PIN of NAME on CONSOLES`.
pub const ASKING: &str = "asking for the ";
/// Opened: `DEV unlocked as /dev/mapper/NAME with HOW`.
pub const UNLOCKED: &str = " unlocked as ";
/// The root file system is mounted.
pub const ROOT_MOUNTED: &str = "root mounted";
/// The last step before the root's init runs.
pub const SWITCHING: &str = "switching to the new root";

/// One record line: `[    1.234] msg` (seconds since boot, CLOCK_MONOTONIC, as the kernel
/// log counts).
pub fn record_line(ms: u64, msg: &str) -> String {
    format!("[{:5}.{:03}] {msg}\n", ms / 1000, ms % 1000)
}

/// A line of any log with a kernel-style timestamp (`[ 1.234]`, `[    1.234567]`): the time
/// in seconds and the rest.
pub fn timestamped(line: &str) -> Option<(f64, &str)> {
    let rest = line.trim_start().strip_prefix('[')?;
    let (t, msg) = rest.split_once(']')?;
    let t: f64 = t.trim().parse().ok()?;
    Some((t, msg.strip_prefix(' ').unwrap_or(msg)))
}

/// The step of a module that loaded: `loaded NAME[ OPTIONS] (N ms)`.
pub fn module_loaded(name: &str, options: &str, ms: u64) -> String {
    if options.is_empty() { format!("loaded {name} ({ms} ms)") } else { format!("loaded {name} {options} ({ms} ms)") }
}

/// Read back [`module_loaded`]: the module's name and how long its load took, in ms.
pub fn parse_module_loaded(step: &str) -> Option<(&str, u64)> {
    let rest = step.strip_prefix("loaded ")?;
    let (head, ms) = rest.strip_suffix(" ms)")?.rsplit_once(" (")?;
    let name = head.split(' ').next()?;
    Some((name, ms.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let l = record_line(12_345, "root mounted");
        assert_eq!(l, "[   12.345] root mounted\n");
        assert_eq!(timestamped(l.trim_end()), Some((12.345, "root mounted")));
        assert_eq!(
            timestamped("[    0.512034] Run /init as init process"),
            Some((0.512034, "Run /init as init process"))
        );
        assert_eq!(timestamped("no stamp"), None);
        assert_eq!(parse_module_loaded(&module_loaded("virtio_blk", "", 12)), Some(("virtio_blk", 12)));
        assert_eq!(parse_module_loaded(&module_loaded("loop", "max_loop=8 x=1", 3)), Some(("loop", 3)));
        assert_eq!(parse_module_loaded("loaded 3 modules"), None);
    }
}
