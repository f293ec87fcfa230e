//! A dm-crypt device's volume key, read back from the kernel: the table of
//! /dev/mapper/NAME with its keys (`dmsetup table --showkeys`), through one DM_TABLE_STATUS
//! ioctl on /dev/mapper/control. For PCR 15 (crypttab's `tpm2-measure-pcr=`): systemd
//! measures the key it activated with, and /init, which opens containers with the
//! cryptsetup program, reads that same key back from the table cryptsetup loaded
//! (`--disable-keyring` puts it there rather than in the kernel keyring, where it cannot be
//! read). And a read-only device made from one target's table (DM_DEV_CREATE, DM_TABLE_LOAD,
//! resume), for dm-verity ([`crate::verity`]); read-write devices, a table reloaded into a live
//! device, and a device's status line, for dm-multipath maps and their partitions
//! ([`crate::multipath`]). No crate speaks the device-mapper ioctls without libdevmapper; the
//! header is linux/dm-ioctl.h's, written out here.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::prompt::Secret;
use crate::sys::{self, strerror};

const CONTROL: &str = "/dev/mapper/control";
/// `sizeof(struct dm_ioctl)`.
const HEADER: usize = 312;
/// The output room: one crypt target's line is a few hundred bytes.
const BUFFER: usize = 16 * 1024;
/// The interface version /init speaks (4.0.0: any 4.x kernel answers it).
const VERSION: [u32; 3] = [4, 0, 0];
/// DM_STATUS_TABLE_FLAG: the table, not the status.
const STATUS_TABLE: u32 = 1 << 4;
/// DM_BUFFER_FULL_FLAG: the output did not fit.
const BUFFER_FULL: u32 = 1 << 8;
/// DM_SECURE_DATA_FLAG: the kernel wipes its copies of the buffer (it holds a key).
const SECURE_DATA: u32 = 1 << 15;
/// `sizeof(struct dm_target_spec)`.
const TARGET_SPEC: usize = 40;
// Where `struct dm_ioctl`'s fields are: `__u32 version[3]` at 0, then the u32s `data_size`,
// `data_start`, `target_count`, `open_count`, `flags`, `event_nr`, `padding`, `__u64 dev`
// at 40, `char name[128]` at 48, `char uuid[129]`, `char data[7]`.
const AT_DATA_SIZE: usize = 12;
const AT_DATA_START: usize = 16;
const AT_TARGET_COUNT: usize = 20;
const AT_FLAGS: usize = 28;
const AT_NAME: usize = 48;

/// `struct dm_ioctl` and the room after it, as one buffer: the kernel reads the header and
/// writes the targets after `data_start`.
#[repr(C, align(8))]
struct Buffer([u8; HEADER + BUFFER]);

/// `struct dm_ioctl` alone, for the size the opcode carries.
#[repr(C)]
struct Header([u8; HEADER]);

/// DM_TABLE_STATUS: `_IOWR(0xfd, 12, struct dm_ioctl)`; the size in the opcode is the
/// header's, whatever follows it.
const DM_TABLE_STATUS: rustix::ioctl::Opcode = rustix::ioctl::opcode::read_write::<Header>(0xfd, 12);

/// The header for a table request of device `name`.
fn request(name: &str) -> Result<Buffer, String> {
    if name.is_empty() || name.len() >= 128 || name.contains('/') {
        return Err(format!("\"{name}\" is not a device-mapper name"));
    }
    let mut b = Buffer([0; HEADER + BUFFER]);
    let put = |b: &mut Buffer, at: usize, v: u32| b.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    for (i, v) in VERSION.iter().enumerate() {
        put(&mut b, i * 4, *v);
    }
    put(&mut b, AT_DATA_SIZE, (HEADER + BUFFER) as u32);
    put(&mut b, AT_DATA_START, HEADER as u32);
    put(&mut b, AT_FLAGS, STATUS_TABLE | SECURE_DATA);
    b.0[AT_NAME..AT_NAME + name.len()].copy_from_slice(name.as_bytes());
    Ok(b)
}

/// The targets of a DM_TABLE_STATUS answer: each one's type, and where its parameters are in
/// `b` (borrowed, not copied: a crypt target's hold its key).
pub fn targets(b: &[u8]) -> Result<Vec<(String, &[u8])>, String> {
    let u32_at = |at: usize| b.get(at..at + 4).map(|x| u32::from_ne_bytes([x[0], x[1], x[2], x[3]]));
    let bad = |what: &str| format!("the kernel's answer: {what}");
    let flags = u32_at(AT_FLAGS).ok_or_else(|| bad("short"))?;
    if flags & BUFFER_FULL != 0 {
        return Err(bad("the table did not fit"));
    }
    let count = u32_at(AT_TARGET_COUNT).ok_or_else(|| bad("short"))? as usize;
    let start = u32_at(AT_DATA_START).ok_or_else(|| bad("short"))? as usize;
    let mut at = start;
    let mut out = Vec::new();
    for i in 0..count {
        let spec = b.get(at..at + TARGET_SPEC).ok_or_else(|| bad("a target past its end"))?;
        let next = u32::from_ne_bytes([spec[20], spec[21], spec[22], spec[23]]) as usize;
        let kind = &spec[24..40];
        let kind = String::from_utf8_lossy(&kind[..kind.iter().position(|&c| c == 0).unwrap_or(16)]).into_owned();
        let params = b.get(at + TARGET_SPEC..).ok_or_else(|| bad("a target past its end"))?;
        let end = params.iter().position(|&c| c == 0).ok_or_else(|| bad("a target's line without its end"))?;
        out.push((kind, &params[..end]));
        // `next` counts from the first target (the data's start), as the kernel's
        // retrieve_status sets it and libdevmapper follows it; the last one's is not followed.
        if i + 1 < count {
            let to = start.checked_add(next).ok_or_else(|| bad("a target past its end"))?;
            if to < at + TARGET_SPEC {
                return Err(bad("targets that do not move on"));
            }
            at = to;
        }
    }
    Ok(out)
}

/// The key in a crypt target's parameters (`CIPHER KEY IV_OFFSET DEVICE OFFSET ...`): its
/// bytes when the table holds them in hex; an error that says where it is otherwise (a key
/// in the kernel keyring shows as `:SIZE:TYPE:DESCRIPTION`). Nothing is copied but the key
/// itself, into a [`Secret`].
pub fn crypt_key(params: &[u8]) -> Result<Secret, String> {
    let mut words = params.split(|&c| c == b' ');
    let _cipher = words.next();
    let key = words.next().unwrap_or(&[]);
    if key.starts_with(b":") {
        return Err("the key is in the kernel keyring, not in the table (opened without --disable-keyring)".into());
    }
    if key == b"-" || key.is_empty() {
        return Err("the table has no key".into());
    }
    if !key.len().is_multiple_of(2) || !key.iter().all(|c| c.is_ascii_hexdigit()) {
        return Err("the table's key is not hex".into());
    }
    let nibble = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
    Ok(Secret((0..key.len() / 2).map(|i| nibble(key[2 * i]) << 4 | nibble(key[2 * i + 1])).collect()))
}

/// The volume key of the open dm-crypt device /dev/mapper/`name`: its one crypt target's.
pub fn volume_key(name: &str) -> Result<Secret, String> {
    let mut b = request(name)?;
    let ctl = sys::open_node(CONTROL, rustix::fs::OFlags::RDWR).map_err(|e| format!("{CONTROL}: {}", strerror(e)))?;
    // SAFETY: DM_TABLE_STATUS takes a `struct dm_ioctl` whose data_size (set by `request`)
    // is the whole buffer's length; the kernel reads and writes within it, and `b` lives
    // until the call returns.
    let r = unsafe { rustix::ioctl::ioctl(&ctl, rustix::ioctl::Updater::<DM_TABLE_STATUS, Buffer>::new(&mut b)) };
    let answer = r.map_err(|e| format!("DM_TABLE_STATUS {name}: {}", strerror(e))).and_then(|()| {
        let t = targets(&b.0)?;
        match t.as_slice() {
            [(kind, params)] if kind == "crypt" => crypt_key(params),
            [(kind, _)] => Err(format!("{name} is a {kind} device, not crypt")),
            _ => Err(format!("{name} has {} targets, not one crypt target", t.len())),
        }
    });
    // The buffer held the key in hex: wiped, as Secret wipes its bytes.
    b.0.iter_mut().for_each(|x| {
        // SAFETY: a plain write through a valid &mut u8; volatile so it is not elided.
        unsafe { core::ptr::write_volatile(x, 0) }
    });
    answer
}

/// DM_DEV_REMOVE: `_IOWR(0xfd, 4, struct dm_ioctl)`.
const DM_DEV_REMOVE: rustix::ioctl::Opcode = rustix::ioctl::opcode::read_write::<Header>(0xfd, 4);

/// Remove the device-mapper device `name` (`dmsetup remove --noudevsync`): the kernel tears its
/// table down, a crypt target wiping its key. EBUSY: something holds it open; ENXIO: none.
pub fn remove(name: &str) -> Result<(), sys::Errno> {
    let mut b = request(name).map_err(|_| sys::Errno::INVAL)?;
    // No table is asked for, and no udev cookie is set: nothing waits on udev.
    b.0[AT_FLAGS..AT_FLAGS + 4].copy_from_slice(&0u32.to_ne_bytes());
    let ctl = sys::open_node(CONTROL, rustix::fs::OFlags::RDWR)?;
    // SAFETY: DM_DEV_REMOVE takes a `struct dm_ioctl` whose data_size (set by `request`) is the
    // whole buffer's length; the kernel reads and writes within it, and `b` lives until the
    // call returns.
    unsafe { rustix::ioctl::ioctl(&ctl, rustix::ioctl::Updater::<DM_DEV_REMOVE, Buffer>::new(&mut b)) }
}

/// DM_DEV_CREATE: `_IOWR(0xfd, 3, struct dm_ioctl)`.
const DM_DEV_CREATE: rustix::ioctl::Opcode = rustix::ioctl::opcode::read_write::<Header>(0xfd, 3);
/// DM_DEV_SUSPEND: `_IOWR(0xfd, 6, struct dm_ioctl)`; without DM_SUSPEND_FLAG it resumes, making
/// the table loaded live.
const DM_DEV_SUSPEND: rustix::ioctl::Opcode = rustix::ioctl::opcode::read_write::<Header>(0xfd, 6);
/// DM_TABLE_LOAD: `_IOWR(0xfd, 9, struct dm_ioctl)`.
const DM_TABLE_LOAD: rustix::ioctl::Opcode = rustix::ioctl::opcode::read_write::<Header>(0xfd, 9);
/// DM_READONLY_FLAG: the device (and the table) read-only.
pub const READONLY: u32 = 1 << 0;
/// Where `struct dm_ioctl`'s `dev` and `uuid` are.
const AT_DEV: usize = 40;
const AT_UUID: usize = 176;

/// A request for device `name` with `flags`, carrying `table` (one target of `sectors` sectors
/// of type `kind`) when given.
fn table_request(
    name: &str,
    flags: u32,
    uuid: Option<&str>,
    table: Option<(&str, u64, &str)>,
) -> Result<Buffer, String> {
    let mut b = request(name)?;
    b.0[AT_FLAGS..AT_FLAGS + 4].copy_from_slice(&flags.to_ne_bytes());
    if let Some(u) = uuid {
        if u.len() >= 129 {
            return Err(format!("\"{u}\" is too long for a device-mapper UUID"));
        }
        b.0[AT_UUID..AT_UUID + u.len()].copy_from_slice(u.as_bytes());
    }
    if let Some((kind, sectors, params)) = table {
        // `struct dm_target_spec`: sector_start, length, status, next, target_type[16]; then
        // the parameters, NUL-terminated, the whole padded to 8 bytes.
        let len = (TARGET_SPEC + params.len() + 1).next_multiple_of(8);
        if len > BUFFER || kind.len() >= 16 {
            return Err(format!("a {kind} table of {} bytes does not fit", params.len()));
        }
        let at = HEADER;
        b.0[at + 8..at + 16].copy_from_slice(&sectors.to_ne_bytes());
        b.0[at + 20..at + 24].copy_from_slice(&(len as u32).to_ne_bytes());
        b.0[at + 24..at + 24 + kind.len()].copy_from_slice(kind.as_bytes());
        b.0[at + TARGET_SPEC..at + TARGET_SPEC + params.len()].copy_from_slice(params.as_bytes());
        b.0[AT_TARGET_COUNT..AT_TARGET_COUNT + 4].copy_from_slice(&1u32.to_ne_bytes());
    }
    Ok(b)
}

/// One ioctl on /dev/mapper/control.
fn call<const OP: rustix::ioctl::Opcode>(b: &mut Buffer) -> Result<(), sys::Errno> {
    let ctl = sys::open_node(CONTROL, rustix::fs::OFlags::RDWR)?;
    // SAFETY: every DM ioctl takes a `struct dm_ioctl` whose data_size (set by `request`) is the
    // whole buffer's length; the kernel reads and writes within it, and `b` lives until the call
    // returns.
    unsafe { rustix::ioctl::ioctl(&ctl, rustix::ioctl::Updater::<OP, Buffer>::new(b)) }
}

/// Why a DM step failed: the step, and the kernel's errno.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DmError {
    /// DM_DEV_CREATE, DM_TABLE_LOAD, DM_DEV_SUSPEND (resume).
    pub step: &'static str,
    /// What the kernel said.
    pub errno: sys::Errno,
}

/// Create the read-only device `name` with one target (`kind`, `sectors` long, `params`) and
/// make it live (`dmsetup create --readonly --noudevsync`): its (major, minor). Nothing is left
/// behind when a step fails.
pub fn create_readonly(name: &str, uuid: &str, kind: &str, sectors: u64, params: &str) -> Result<(u32, u32), DmError> {
    create(name, uuid, READONLY, kind, sectors, params)
}

/// Create device `name` (DM UUID `uuid`, `flags` [`READONLY`] or 0) with one target and make it
/// live (`dmsetup create --noudevsync`): its (major, minor). Nothing is left behind when a step
/// fails.
pub fn create(
    name: &str,
    uuid: &str,
    flags: u32,
    kind: &str,
    sectors: u64,
    params: &str,
) -> Result<(u32, u32), DmError> {
    let bad = |step| move |errno| DmError { step, errno };
    let inval = |step| DmError { step, errno: sys::Errno::INVAL };
    let mut b = table_request(name, flags, Some(uuid), None).map_err(|_| inval("DM_DEV_CREATE"))?;
    call::<DM_DEV_CREATE>(&mut b).map_err(bad("DM_DEV_CREATE"))?;
    let dev = u64::from_ne_bytes(core::array::from_fn(|i| b.0[AT_DEV + i]));
    // The kernel's huge_encode_dev: minor's low 8 bits, major, then minor's high bits.
    let devno = (((dev >> 8) & 0xfff) as u32, ((dev & 0xff) | ((dev >> 12) & !0xff)) as u32);
    match load_and_resume(name, flags, kind, sectors, params) {
        Ok(()) => Ok(devno),
        Err(e) => {
            let _ = remove(name);
            Err(e)
        }
    }
}

/// Load a new table into the live device `name` and make it live (`dmsetup reload` and
/// `resume`): the kernel suspends the device, swaps the tables and resumes it, no I/O lost.
pub fn reload(name: &str, kind: &str, sectors: u64, params: &str) -> Result<(), DmError> {
    load_and_resume(name, 0, kind, sectors, params)
}

fn load_and_resume(name: &str, flags: u32, kind: &str, sectors: u64, params: &str) -> Result<(), DmError> {
    let bad = |step| move |errno| DmError { step, errno };
    let inval = |step| DmError { step, errno: sys::Errno::INVAL };
    let mut b = table_request(name, flags, None, Some((kind, sectors, params))).map_err(|_| inval("DM_TABLE_LOAD"))?;
    call::<DM_TABLE_LOAD>(&mut b).map_err(bad("DM_TABLE_LOAD"))?;
    let mut b = table_request(name, 0, None, None).map_err(|_| inval("DM_DEV_SUSPEND"))?;
    call::<DM_DEV_SUSPEND>(&mut b).map_err(bad("DM_DEV_SUSPEND (resume)"))
}

/// The status line of each target of device `name` (`dmsetup status`): its type and the line.
pub fn status(name: &str) -> Result<Vec<(String, String)>, String> {
    let mut b = table_request(name, 0, None, None)?;
    call::<DM_TABLE_STATUS>(&mut b).map_err(|e| format!("DM_TABLE_STATUS {name}: {}", strerror(e)))?;
    Ok(targets(&b.0)?.into_iter().map(|(k, p)| (k, String::from_utf8_lossy(p).into_owned())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DM_TABLE_STATUS answer as the kernel writes it: the header, then each target's
    /// spec and its line.
    fn answer(targets_: &[(&str, &str)], flags: u32) -> Vec<u8> {
        let mut b = request("root").unwrap().0.to_vec();
        b[AT_TARGET_COUNT..AT_TARGET_COUNT + 4].copy_from_slice(&(targets_.len() as u32).to_ne_bytes());
        b[AT_FLAGS..AT_FLAGS + 4].copy_from_slice(&flags.to_ne_bytes());
        let mut at = HEADER;
        for (kind, line) in targets_ {
            let len = (TARGET_SPEC + line.len() + 1).next_multiple_of(8);
            // `next`: the following target's offset from the data's start, as the kernel sets it.
            b[at + 20..at + 24].copy_from_slice(&((at + len - HEADER) as u32).to_ne_bytes());
            b[at + 24..at + 24 + kind.len()].copy_from_slice(kind.as_bytes());
            b[at + TARGET_SPEC..at + TARGET_SPEC + line.len()].copy_from_slice(line.as_bytes());
            at += len;
        }
        b
    }

    #[test]
    fn the_request_names_the_device_and_asks_for_the_table_securely() {
        let b = request("sda3_crypt").unwrap();
        assert_eq!(&b.0[0..12], [4u32, 0, 0].map(u32::to_ne_bytes).concat());
        assert_eq!(u32::from_ne_bytes(b.0[12..16].try_into().unwrap()) as usize, HEADER + BUFFER);
        assert_eq!(u32::from_ne_bytes(b.0[28..32].try_into().unwrap()), (1 << 4) | (1 << 15));
        assert_eq!(&b.0[48..58], b"sda3_crypt");
        assert_eq!(b.0[58], 0);
        assert!(request("").is_err() && request("a/b").is_err() && request(&"x".repeat(128)).is_err());
        // _IOWR(0xfd, 12, struct dm_ioctl), as libdevmapper's DM_TABLE_STATUS.
        assert_eq!(DM_TABLE_STATUS, 0xc138fd0c);
        // _IOWR(0xfd, 4, struct dm_ioctl), as libdevmapper's DM_DEV_REMOVE; and the others.
        assert_eq!(DM_DEV_REMOVE, 0xc138fd04);
        assert_eq!((DM_DEV_CREATE, DM_DEV_SUSPEND, DM_TABLE_LOAD), (0xc138fd03, 0xc138fd06, 0xc138fd09));
    }

    #[test]
    fn a_table_load_carries_one_target_as_libdevmapper_writes_it() {
        let b = table_request("root", READONLY, None, Some(("verity", 2048, "1 8:1 8:2"))).unwrap();
        assert_eq!(u32::from_ne_bytes(b.0[AT_FLAGS..AT_FLAGS + 4].try_into().unwrap()), READONLY);
        assert_eq!(u32::from_ne_bytes(b.0[AT_TARGET_COUNT..AT_TARGET_COUNT + 4].try_into().unwrap()), 1);
        // The kernel's own reader of a status answer walks it back the same.
        assert_eq!(targets(&b.0).unwrap(), [("verity".to_string(), &b"1 8:1 8:2"[..])]);
        assert_eq!(u64::from_ne_bytes(b.0[HEADER + 8..HEADER + 16].try_into().unwrap()), 2048);
        assert_eq!(u32::from_ne_bytes(b.0[HEADER + 20..HEADER + 24].try_into().unwrap()), 56);
        let c = table_request("root", READONLY, Some("LEANRD-VERITY-root"), None).unwrap();
        assert_eq!(&c.0[AT_UUID..AT_UUID + 19], b"LEANRD-VERITY-root\0");
        assert!(table_request("root", 0, None, Some(("verity", 1, &"x".repeat(BUFFER)))).is_err());
        assert!(table_request("root", 0, Some(&"u".repeat(129)), None).is_err());
    }

    #[test]
    fn a_crypt_tables_key_is_read_in_hex_and_nothing_else_is_taken_for_one() {
        let line = "aes-xts-plain64 00ff10ab 0 252:3 32768 1 allow_discards";
        let b = answer(&[("crypt", line)], 0);
        let t = targets(&b).unwrap();
        assert_eq!(t, [("crypt".to_string(), line.as_bytes())]);
        assert_eq!(crypt_key(t[0].1).unwrap().0, [0x00, 0xff, 0x10, 0xab]);
        let keyring = b"aes-xts-plain64 :64:logon:cryptsetup:0c0c-d0 0 252:3 32768";
        assert!(crypt_key(keyring).err().unwrap().contains("keyring"));
        assert!(crypt_key(b"aes-xts-plain64 - 0 252:3 0").is_err());
        assert!(crypt_key(b"aes-xts-plain64 0g 0 252:3 0").is_err());
        assert!(crypt_key(b"aes-xts-plain64 abc 0 252:3 0").is_err());
        // Three targets are walked by `next`, counted from the data's start; a full buffer or
        // a spec past the end is refused.
        let three = answer(&[("linear", "252:3 0"), ("linear", "252:4 0"), ("crypt", line)], 0);
        let kinds: Vec<String> = targets(&three).unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(kinds, ["linear", "linear", "crypt"]);
        let two = answer(&[("linear", "252:3 0"), ("crypt", line)], 0);
        assert_eq!(targets(&two).unwrap().len(), 2);
        assert!(targets(&answer(&[("crypt", line)], BUFFER_FULL)).is_err());
        let mut past = answer(&[("crypt", line)], 0);
        past[AT_DATA_START..AT_DATA_START + 4].copy_from_slice(&((HEADER + BUFFER) as u32).to_ne_bytes());
        assert!(targets(&past).is_err());
        let mut stuck = two.clone();
        stuck[HEADER + 20..HEADER + 24].copy_from_slice(&0u32.to_ne_bytes());
        assert!(targets(&stuck).is_err());
    }
}
