//! The TPM's part in the boot, as systemd's initrd plays it:
//! - the boot phases in PCR 11, as systemd-pcrphase measures them: `enter-initrd` before
//!   anything is unsealed, `leave-initrd` just before the switch to the root. A policy
//!   signed for the phase `enter-initrd` (systemd-measure's prediction, in the UKI's
//!   `.pcrsig`) then unseals in the initramfs only: once /init has left, PCR 11 no longer
//!   matches it;
//! - a volume key in PCR 15 (crypttab's `tpm2-measure-pcr=`), as systemd-cryptsetup
//!   measures it: HMAC(volume key, `cryptsetup:NAME:UUID`) in each bank, so that a policy
//!   bound to PCR 15 unseals only once that very volume is open.
//!
//! As systemd does, only on a measured UKI boot: systemd-stub extended PCR 11 with the UKI's
//! sections (PCR 11 is the stub's alone: firmware and boot loaders leave it at zero). systemd
//! asks the stub's EFI variable; /init reads PCR 11 from sysfs (efivarfs is a module on
//! Debian's kernels, sysfs is always there): not zero means measured.
//!
//! Three TPM commands, hand-encoded (TPM 2.0 Part 3: TPM2_PCR_Event, TPM2_PCR_Extend,
//! TPM2_GetCapability) and sent to the kernel's resource manager /dev/tpmrm0. A phase is one
//! TPM2_PCR_Event: the TPM hashes the word with every bank it has and extends each, which is
//! exactly systemd's extend of H(word) into every bank (the string without its NUL). A volume
//! key needs an HMAC per bank, computed here (RustCrypto's hmac, sha1 and sha2, no_std) and
//! extended with TPM2_PCR_Extend. No TSS library: tpm2-tss is 600 KB of libraries in the
//! image, for three commands of a few dozen bytes.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use leanrd_contract::CryptOptions;

use crate::Init;
use crate::sys::{self, strerror};

/// The PCR systemd's stub and phases use.
pub const PCR_KERNEL_BOOT: u32 = 11;
/// The phase measured when /init starts.
pub const ENTER_INITRD: &str = "enter-initrd";
/// The phase measured just before the switch to the root.
pub const LEAVE_INITRD: &str = "leave-initrd";
/// The kernel's TPM resource manager.
const DEVICE: &str = "/dev/tpmrm0";

const TPM_ST_NO_SESSIONS: u16 = 0x8001;
const TPM_ST_SESSIONS: u16 = 0x8002;
const TPM_CC_PCR_EVENT: u32 = 0x0000_013c;
const TPM_CC_PCR_EXTEND: u32 = 0x0000_0182;
const TPM_CC_GET_CAPABILITY: u32 = 0x0000_017a;
/// TPM_CAP_PCRS: the PCR banks and which PCRs each has.
const TPM_CAP_PCRS: u32 = 5;
/// A password session (empty): PCRs 0-15 need no authorisation beyond it.
const TPM_RS_PW: u32 = 0x4000_0009;

/// What /init did about the phases.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Phases {
    /// Not looked at yet (or no TPM yet: asked again before unlocking).
    #[default]
    Unknown,
    /// Not a measured UKI boot (or no TPM): nothing is measured, as with systemd.
    Off,
    /// `enter-initrd` is in PCR 11.
    Entered,
    /// `leave-initrd` too.
    Left,
}

/// A command on a PCR with the password session (PCRs 0-15 need no other authorisation):
/// the header, the PCR's handle, the authorisation area, then `params`.
fn pcr_command(code: u32, pcr: u32, params: &[u8]) -> Vec<u8> {
    let mut c = Vec::with_capacity(27 + params.len());
    c.extend_from_slice(&TPM_ST_SESSIONS.to_be_bytes());
    c.extend_from_slice(&0u32.to_be_bytes()); // size, below
    c.extend_from_slice(&code.to_be_bytes());
    c.extend_from_slice(&pcr.to_be_bytes());
    // The authorisation area: the password session, no nonce, no attributes, no password.
    c.extend_from_slice(&9u32.to_be_bytes());
    c.extend_from_slice(&TPM_RS_PW.to_be_bytes());
    c.extend_from_slice(&0u16.to_be_bytes());
    c.push(0);
    c.extend_from_slice(&0u16.to_be_bytes());
    c.extend_from_slice(params);
    let size = c.len() as u32;
    c[2..6].copy_from_slice(&size.to_be_bytes());
    c
}

/// TPM2_PCR_Event for `pcr` with `data` (at most 1024 bytes, the TPM's event size).
pub fn pcr_event_command(pcr: u32, data: &[u8]) -> Vec<u8> {
    // TPM2B_EVENT.
    let mut p = Vec::with_capacity(2 + data.len());
    p.extend_from_slice(&(data.len() as u16).to_be_bytes());
    p.extend_from_slice(data);
    pcr_command(TPM_CC_PCR_EVENT, pcr, &p)
}

/// TPM2_PCR_Extend for `pcr` with one digest per bank (TPML_DIGEST_VALUES); None for a bank
/// this /init does not know.
pub fn pcr_extend_command(pcr: u32, digests: &[(&str, Vec<u8>)]) -> Option<Vec<u8>> {
    let mut p = Vec::new();
    p.extend_from_slice(&(digests.len() as u32).to_be_bytes());
    for (bank, d) in digests {
        let (id, len) = algorithm_of(bank)?;
        if d.len() != len {
            return None;
        }
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(d);
    }
    Some(pcr_command(TPM_CC_PCR_EXTEND, pcr, &p))
}

/// TPM2_GetCapability(TPM_CAP_PCRS): the PCR banks the TPM has allocated.
pub fn pcr_banks_command() -> Vec<u8> {
    let mut c = Vec::with_capacity(22);
    c.extend_from_slice(&TPM_ST_NO_SESSIONS.to_be_bytes());
    c.extend_from_slice(&22u32.to_be_bytes());
    c.extend_from_slice(&TPM_CC_GET_CAPABILITY.to_be_bytes());
    c.extend_from_slice(&TPM_CAP_PCRS.to_be_bytes());
    c.extend_from_slice(&0u32.to_be_bytes()); // property
    c.extend_from_slice(&1u32.to_be_bytes()); // propertyCount
    c
}

/// The name and digest size of a TPM hash algorithm.
fn algorithm(id: u16) -> Option<(&'static str, usize)> {
    Some(match id {
        0x0004 => ("sha1", 20),
        0x000b => ("sha256", 32),
        0x000c => ("sha384", 48),
        0x000d => ("sha512", 64),
        0x0012 => ("sm3_256", 32),
        _ => return None,
    })
}

/// The TPM id and digest size of a bank by its name.
fn algorithm_of(name: &str) -> Option<(u16, usize)> {
    [0x0004, 0x000b, 0x000c, 0x000d, 0x0012].into_iter().find_map(|id| {
        let (n, len) = algorithm(id)?;
        (n == name).then_some((id, len))
    })
}

/// A response's code checked, and its size: the response itself.
fn checked(r: &[u8]) -> Result<&[u8], String> {
    let size = r.get(2..6).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let rc = r.get(6..10).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    match (size, rc) {
        (Some(s), _) if s != r.len() => Err(format!("a response of {} bytes that says {s}", r.len())),
        (Some(_), Some(0)) => Ok(r),
        (Some(_), Some(rc)) => Err(format!("the TPM refused: response code {rc:#x}")),
        _ => Err(String::from("a short response")),
    }
}

/// The banks of a TPM2_GetCapability(TPM_CAP_PCRS) response: (algorithm id, whether all 24
/// PCRs are allocated in it), in the TPM's order.
pub fn parse_pcr_banks(r: &[u8]) -> Result<Vec<(u16, bool)>, String> {
    let r = checked(r)?;
    let short = || String::from("a short response");
    // moreData (1), capability (4), then TPML_PCR_SELECTION.
    let cap = r.get(11..15).ok_or_else(short)?;
    if u32::from_be_bytes([cap[0], cap[1], cap[2], cap[3]]) != TPM_CAP_PCRS {
        return Err(String::from("an answer about another capability"));
    }
    let count = r.get(15..19).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])).ok_or_else(short)?;
    if count > 16 {
        return Err(format!("{count} banks"));
    }
    let mut at = 19;
    let mut out = Vec::new();
    for _ in 0..count {
        let h = r.get(at..at + 3).ok_or_else(short)?;
        let (id, size) = (u16::from_be_bytes([h[0], h[1]]), usize::from(h[2]));
        let select = r.get(at + 3..at + 3 + size).ok_or_else(short)?;
        // systemd's tpm2_bank_has24: a client PC's TPM has 24 PCRs, all of them selected.
        out.push((id, size >= 3 && select[..3] == [0xff; 3]));
        at += 3 + size;
    }
    Ok(out)
}

/// The digests a TPM2_PCR_Event response reports (one per bank, each H(data)), or why it
/// failed.
pub fn parse_event_response(r: &[u8]) -> Result<Vec<(&'static str, Vec<u8>)>, String> {
    let be16 = |at: usize| r.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let be32 = |at: usize| r.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let short = || String::from("a short response");
    checked(r)?;
    // parameterSize, then TPML_DIGEST_VALUES.
    let count = be32(14).ok_or_else(short)?;
    if count > 16 {
        return Err(format!("{count} digests"));
    }
    let mut at = 18;
    let mut out = Vec::new();
    for _ in 0..count {
        let id = be16(at).ok_or_else(short)?;
        let (name, len) = algorithm(id).ok_or_else(|| format!("hash algorithm {id:#06x}, unknown"))?;
        let d = r.get(at + 2..at + 2 + len).ok_or_else(short)?;
        out.push((name, d.to_vec()));
        at += 2 + len;
    }
    Ok(out)
}

/// Whether systemd-stub measured this boot: PCR 11 of any bank sysfs shows is not zero.
/// None: no TPM (or a kernel without the PCR files, before 5.12).
pub fn stub_measured() -> Option<bool> {
    let banks = sys::list_dir("/sys/class/tpm/tpm0").ok()?;
    let mut seen = false;
    for (name, _) in banks.iter().filter(|(n, _)| n.starts_with("pcr-")) {
        let Some(v) = sys::read_string(&format!("/sys/class/tpm/tpm0/{name}/{PCR_KERNEL_BOOT}")) else { continue };
        seen = true;
        if v.trim().bytes().any(|b| b != b'0') {
            return Some(true);
        }
    }
    seen.then_some(false)
}

/// The TPM's resource manager, open: the transient objects and sessions made through it live
/// until it is closed (the kernel flushes them then).
pub struct Device(rustix::fd::OwnedFd);

impl Device {
    /// /dev/tpmrm0, waiting up to `wait_ms` for it to appear (its driver may still be
    /// probing).
    pub fn open(wait_ms: u64) -> Result<Device, String> {
        let until = sys::now_ms().saturating_add(wait_ms);
        loop {
            match rustix::fs::open(
                DEVICE,
                rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            ) {
                Ok(fd) => return Ok(Device(fd)),
                Err(rustix::io::Errno::NOENT) if sys::now_ms() < until => sys::sleep_ms(50),
                Err(rustix::io::Errno::NOENT) => {
                    return Err(format!("no TPM: {DEVICE} did not appear (no TPM2, or its driver not in the image)"));
                }
                Err(e) => return Err(format!("{DEVICE}: {}", strerror(e))),
            }
        }
    }

    /// One command and its response.
    pub fn transact(&self, cmd: &[u8]) -> Result<Vec<u8>, String> {
        let n = rustix::io::write(&self.0, cmd).map_err(|e| format!("{DEVICE}: {}", strerror(e)))?;
        if n != cmd.len() {
            return Err(format!("{DEVICE}: wrote {n} of {} bytes", cmd.len()));
        }
        let mut buf = vec![0u8; 4096];
        let n = rustix::io::read(&self.0, &mut buf).map_err(|e| format!("{DEVICE}: {}", strerror(e)))?;
        buf.truncate(n);
        Ok(buf)
    }
}

/// One command to the TPM and its response.
fn transact(cmd: &[u8]) -> Result<Vec<u8>, String> {
    Device::open(0)?.transact(cmd)
}

/// Extend PCR 11 with `word`; the digests the TPM extended.
fn measure(word: &str) -> Result<Vec<(&'static str, Vec<u8>)>, String> {
    parse_event_response(&transact(&pcr_event_command(PCR_KERNEL_BOOT, word.as_bytes()))?)
}

/// systemd's userspace measurement log: what userspace extended into which PCR, beside the
/// firmware's event log (systemd-pcrlock and `systemd-analyze pcrs` read it to explain PCR
/// 11's value). /run goes to the root, whose systemd appends its own phases.
pub const MEASURE_LOG: &str = "/run/log/systemd/tpm2-measure.log";

/// The kinds of event systemd's log names (tpm2-util.c's `Tpm2UserspaceEventType`), of
/// those /init measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A boot phase (PCR 11).
    Phase,
    /// A volume key (PCR 15).
    VolumeKey,
}

impl Event {
    fn name(self) -> &'static str {
        match self {
            Event::Phase => "phase",
            Event::VolumeKey => "volume-key",
        }
    }
}

/// A string as a JSON string's contents.
fn json_escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// One record of [`MEASURE_LOG`], as systemd writes it (tpm2-util.c, `tpm2_userspace_log`):
/// JSON-SEQ (RFC 7464: RS, one compact JSON object, LF) with the PCR, each bank's digest, and
/// what was measured (the phase word, or the volume's `cryptsetup:NAME:UUID`) with its kind.
pub fn measure_log_record(pcr: u32, digests: &[(&str, Vec<u8>)], what: &str, event: Event) -> String {
    let hex = |d: &[u8]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let digests: Vec<String> =
        digests.iter().map(|(alg, d)| format!("{{\"hashAlg\":\"{alg}\",\"digest\":\"{}\"}}", hex(d))).collect();
    format!(
        "\u{1e}{{\"pcr\":{pcr},\"digests\":[{}],\"content_type\":\"systemd\",\"content\":{{\"string\":\"{}\",\"eventType\":\"{}\"}}}}\n",
        digests.join(","),
        json_escaped(what),
        event.name()
    )
}

/// Append a record to [`MEASURE_LOG`] (created 0600 as systemd creates it, under an exclusive
/// lock as systemd takes it, one write).
fn log_measurement(record: &str) -> Result<(), String> {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    sys::mkdir_p("/run/log/systemd");
    let fd = rustix::fs::open(
        MEASURE_LOG,
        OFlags::WRONLY | OFlags::CREATE | OFlags::APPEND | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NOCTTY,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| format!("{MEASURE_LOG}: {}", strerror(e)))?;
    rustix::fs::flock(&fd, FlockOperation::LockExclusive).map_err(|e| format!("{MEASURE_LOG}: {}", strerror(e)))?;
    match rustix::io::write(&fd, record.as_bytes()) {
        Ok(n) if n == record.len() => Ok(()),
        Ok(n) => Err(format!("{MEASURE_LOG}: wrote {n} of {} bytes", record.len())),
        Err(e) => Err(format!("{MEASURE_LOG}: {}", strerror(e))),
    }
}

/// Measure a phase and log it (a failure is logged: the boot goes on, and a policy bound to
/// the phase then does not unseal, so the passphrase is asked for).
fn phase(init: &mut Init, word: &str) -> bool {
    match measure(word) {
        Ok(d) => {
            let banks: Vec<&str> = d.iter().map(|(n, _)| *n).collect();
            init.log.step(&format!("PCR 11 extended with {word} ({})", banks.join(", ")));
            if let Err(e) = log_measurement(&measure_log_record(PCR_KERNEL_BOOT, &d, word, Event::Phase)) {
                init.log.error(&format!("the measurement of {word} is not in the log: {e}"));
            }
            true
        }
        Err(e) => {
            init.log.error(&format!("PCR 11: {word} not measured: {e}"));
            init.notes.push(format!("PCR 11: {word} not measured: {e}"));
            false
        }
    }
}

/// `enter-initrd`, once, on a measured UKI boot with a TPM; called when /init starts and
/// again before anything is unlocked (a TPM whose driver is a module is there by then).
pub fn enter(init: &mut Init) {
    if init.phases != Phases::Unknown {
        return;
    }
    match stub_measured() {
        None => {} // no TPM yet
        Some(false) => {
            init.log.step("PCR 11 is zero: not a measured UKI boot, no boot phases measured");
            init.phases = Phases::Off;
        }
        Some(true) => {
            init.phases = if phase(init, ENTER_INITRD) { Phases::Entered } else { Phases::Off };
        }
    }
}

/// Where systemd-stub puts a UKI's `.pcrsig` and `.pcrpkey` for the initramfs, and where
/// systemd's initrd copies them (tmpfiles' 20-systemd-stub.conf) for cryptsetup's TPM2
/// token plugin and systemd-cryptsetup to find: (from, to).
pub const SIGNATURE_FILES: [(&str, &str); 2] = [
    ("/.extra/tpm2-pcr-signature.json", "/run/systemd/tpm2-pcr-signature.json"),
    ("/.extra/tpm2-pcr-public-key.pem", "/run/systemd/tpm2-pcr-public-key.pem"),
];

/// Hand the UKI's signed PCR 11 predictions to the TPM2 token plugin, as systemd's initrd
/// does: read-only copies in /run/systemd, before anything is unlocked (a token enrolled
/// with `systemd-cryptenroll --tpm2-public-key=` unseals only with a signature the key
/// made for the PCR values the TPM has). /run goes on to the root's systemd as it is.
pub fn hand_over_signatures(init: &mut Init) {
    for (from, to) in SIGNATURE_FILES {
        let Ok(data) = sys::read(from) else { continue };
        sys::mkdir_p("/run/systemd");
        let text = String::from_utf8_lossy(&data);
        match sys::write_file_mode(to, &text, 0o444) {
            Ok(()) => init.log.step(&format!("{from} handed on as {to}")),
            Err(e) => init.log.error(&format!("{to}: {}", strerror(e))),
        }
    }
}

/// `leave-initrd`, when `enter-initrd` was measured: the last thing before the switch.
pub fn leave(init: &mut Init) {
    if init.phases == Phases::Entered && phase(init, LEAVE_INITRD) {
        init.phases = Phases::Left;
    }
}

/// What systemd-cryptsetup extends with a volume key: `cryptsetup:NAME:UUID`, the mapper name
/// escaped by systemd's `xescape(name, ":")` (a control or non-ASCII byte, `\\` and `:` as
/// `\\xNN`), so that the fields cannot run into each other.
pub fn volume_key_event(name: &str, uuid: &str) -> String {
    let mut s = String::from("cryptsetup:");
    for &b in name.as_bytes() {
        if !(b' '..0x7f).contains(&b) || b == b'\\' || b == b':' {
            s.push_str(&format!("\\x{b:02x}"));
        } else {
            s.push(char::from(b));
        }
    }
    s.push(':');
    s.push_str(uuid);
    s
}

/// HMAC(`key`, `data`) with a bank's hash: the digest systemd extends for a secret.
pub fn hmac(bank: &str, key: &[u8], data: &[u8]) -> Option<Vec<u8>> {
    use hmac::{Mac, SimpleHmac};
    macro_rules! with {
        ($d:ty) => {{
            let mut m = <SimpleHmac<$d> as Mac>::new_from_slice(key).ok()?;
            m.update(data);
            m.finalize().into_bytes().to_vec()
        }};
    }
    Some(match bank {
        "sha1" => with!(sha1::Sha1),
        "sha256" => with!(sha2::Sha256),
        "sha384" => with!(sha2::Sha384),
        "sha512" => with!(sha2::Sha512),
        _ => return None,
    })
}

/// Whether a PCR's value (sysfs's hex) has been extended: systemd's `tpm2_pcr_mask_good`
/// takes all zeros and all ones for "never measured".
fn extended(hex: &str) -> bool {
    let h = hex.trim();
    !h.is_empty() && !h.bytes().all(|c| c == b'0') && !h.bytes().all(|c| c == b'f' || c == b'F')
}

/// The banks systemd-cryptsetup extends when crypttab names none (`tpm2_get_good_pcr_banks`):
/// of the banks with all 24 PCRs, those where `pcr` has been extended already; when it has
/// been in none, all of them. `value` gives a bank's PCR as sysfs shows it. Like systemd,
/// a bank it has no name for (SM3) stops the measurement.
pub fn banks_for(
    allocated: &[(u16, bool)],
    pcr: u32,
    value: &dyn Fn(&str, u32) -> Option<String>,
) -> Result<Vec<&'static str>, String> {
    let mut good = Vec::new();
    let mut fallback = Vec::new();
    for &(id, _) in allocated.iter().filter(|(_, has24)| *has24) {
        let name = algorithm(id).map(|(n, _)| n);
        if name.and_then(|n| value(n, pcr)).is_some_and(|v| extended(&v)) {
            good.push((id, name));
        } else {
            fallback.push((id, name));
        }
    }
    let banks = if good.is_empty() { fallback } else { good };
    if banks.is_empty() {
        return Err(String::from("the TPM has no bank with 24 PCRs"));
    }
    // A chosen bank systemd has no digest for (SM3) stops it; one not chosen does not.
    banks
        .into_iter()
        .map(|(id, name)| match name {
            Some(n) if n != "sm3_256" => Ok(n),
            _ => Err(format!("the TPM's bank {id:#06x} is one systemd does not measure into")),
        })
        .collect()
}

/// A PCR's value as sysfs shows it (kernels from 5.12).
fn sysfs_pcr(bank: &str, pcr: u32) -> Option<String> {
    sys::read_string(&format!("/sys/class/tpm/tpm0/pcr-{bank}/{pcr}"))
}

/// Extend `pcr` with HMAC(volume key, `cryptsetup:NAME:UUID`) in `banks` (crypttab's, else
/// systemd's choice); the digests extended.
fn extend_volume_key(
    pcr: u32,
    banks: &[String],
    event: &str,
    key: &[u8],
) -> Result<Vec<(&'static str, Vec<u8>)>, String> {
    let banks: Vec<&'static str> = if banks.is_empty() {
        let allocated = parse_pcr_banks(&transact(&pcr_banks_command())?)?;
        banks_for(&allocated, pcr, &sysfs_pcr)?
    } else {
        let known = leanrd_contract::MEASURE_BANKS;
        banks.iter().filter_map(|b| known.iter().find(|k| *k == b).copied()).collect()
    };
    let mut digests = Vec::new();
    for b in banks {
        let d = hmac(b, key, event.as_bytes()).ok_or_else(|| format!("no HMAC for bank {b}"))?;
        digests.push((b, d));
    }
    let cmd = pcr_extend_command(pcr, &digests).ok_or_else(|| String::from("a digest of the wrong size"))?;
    checked(&transact(&cmd)?)?;
    Ok(digests)
}

/// Whether the volume key of a container with these options is to be measured when it
/// opens: crypttab asks (`tpm2-measure-pcr=`) and this is a measured UKI boot, as
/// systemd-cryptsetup decides. Asked before it opens: the key must then go to the table
/// (`--disable-keyring`), where [`measure_volume_key`] reads it.
pub fn measures_volume_key(init: &mut Init, name: &str, o: &CryptOptions) -> bool {
    let Some(pcr) = o.tpm2_measure_pcr else { return false };
    match stub_measured() {
        Some(true) => true,
        Some(false) => {
            init.log.step(&format!("{name}: not a measured UKI boot (PCR 11 is zero), PCR {pcr} not extended"));
            false
        }
        None => {
            let why = format!("{name}: tpm2-measure-pcr={pcr}, but no TPM is there; the volume key is not measured");
            init.log.error(&why);
            init.notes.push(why);
            false
        }
    }
}

/// PCR 15 (or crypttab's): the volume key of the open /dev/mapper/`name`, as
/// systemd-cryptsetup measures it, and the record in [`MEASURE_LOG`]. A failure is logged
/// and the boot goes on (as with systemd: a policy bound to that PCR then does not unseal).
/// The key is held in a [`crate::prompt::Secret`] (wiped when dropped); the HMAC's padded-key
/// blocks are not wiped (the RustCrypto state has no zeroize), and go with /init's memory at
/// the switch to the root, whose exec replaces it.
pub fn measure_volume_key(init: &mut Init, name: &str, uuid: &str, o: &CryptOptions) {
    let Some(pcr) = o.tpm2_measure_pcr else { return };
    let event = volume_key_event(name, uuid);
    let r = crate::dm::volume_key(name).and_then(|key| extend_volume_key(pcr, &o.tpm2_measure_banks, &event, &key.0));
    match r {
        Ok(d) => {
            let banks: Vec<&str> = d.iter().map(|(n, _)| *n).collect();
            init.log.step(&format!("PCR {pcr} extended with {event} and its volume key ({})", banks.join(", ")));
            if let Err(e) = log_measurement(&measure_log_record(pcr, &d, &event, Event::VolumeKey)) {
                init.log.error(&format!("the measurement of {event} is not in the log: {e}"));
            }
        }
        Err(e) => {
            let why = format!("PCR {pcr}: {name}'s volume key not measured: {e}");
            init.log.error(&why);
            init.notes.push(why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record systemd writes for a phase, byte for byte (a JSON-SEQ record: RS, the
    /// object, LF; keys in systemd's order).
    #[test]
    fn a_phase_is_logged_as_systemd_logs_it() {
        let d = [("sha1", alloc::vec![0xab; 20]), ("sha256", alloc::vec![0x01; 32])];
        let r = measure_log_record(11, &d, "enter-initrd", Event::Phase);
        let want = format!(
            "\u{1e}{{\"pcr\":11,\"digests\":[{{\"hashAlg\":\"sha1\",\"digest\":\"{}\"}},{{\"hashAlg\":\"sha256\",\
             \"digest\":\"{}\"}}],\"content_type\":\"systemd\",\"content\":{{\"string\":\"enter-initrd\",\
             \"eventType\":\"phase\"}}}}\n",
            "ab".repeat(20),
            "01".repeat(32)
        );
        assert_eq!(r, want);
        let v: serde_json::Value = serde_json::from_str(r.trim_start_matches('\u{1e}')).unwrap();
        assert_eq!(v["digests"][1]["digest"], "01".repeat(32));
    }

    #[test]
    fn the_command_is_tpm2_pcr_event_with_a_password_session() {
        let c = pcr_event_command(11, b"enter-initrd");
        let want: Vec<u8> = [
            &[0x80, 0x02][..],
            &(29u32 + 12).to_be_bytes(),
            &[0, 0, 1, 0x3c],
            &[0, 0, 0, 11],
            &[0, 0, 0, 9, 0x40, 0, 0, 9, 0, 0, 0, 0, 0],
            &[0, 12],
            b"enter-initrd",
        ]
        .concat();
        assert_eq!(c, want);
    }

    #[test]
    fn responses_give_every_bank_or_say_why_not() {
        let sha1 = [0x11u8; 20];
        let sha256 = [0x22u8; 32];
        let mut r = vec![0x80, 0x02, 0, 0, 0, 0, 0, 0, 0, 0];
        r.extend_from_slice(&(4 + 2 + 20 + 2 + 32u32).to_be_bytes());
        r.extend_from_slice(&2u32.to_be_bytes());
        r.extend_from_slice(&[0, 4]);
        r.extend_from_slice(&sha1);
        r.extend_from_slice(&[0, 0x0b]);
        r.extend_from_slice(&sha256);
        r.extend_from_slice(&[0, 0, 1, 0, 0]);
        let n = r.len() as u32;
        r[2..6].copy_from_slice(&n.to_be_bytes());
        assert_eq!(parse_event_response(&r).unwrap(), [("sha1", sha1.to_vec()), ("sha256", sha256.to_vec())]);
        // Refused (TPM_RC_LOCALITY), short, lying about its size, an unknown bank.
        let refused = [0x80, 0x01, 0, 0, 0, 10, 0, 0, 0x09, 0x07];
        assert!(parse_event_response(&refused).unwrap_err().contains("0x907"));
        for cut in [0, 5, 12, 20, r.len() - 10] {
            let mut short = r[..cut].to_vec();
            if cut >= 6 {
                short[2..6].copy_from_slice(&(cut as u32).to_be_bytes());
            }
            assert!(parse_event_response(&short).is_err(), "{cut}");
        }
        let mut lying = r.clone();
        lying[5] ^= 1;
        assert!(parse_event_response(&lying).is_err());
        let mut odd = r.clone();
        odd[19] = 0x99;
        assert!(parse_event_response(&odd).unwrap_err().contains("unknown"));
    }

    #[test]
    fn the_volume_key_event_is_systemds_string() {
        assert_eq!(
            volume_key_event("sda3_crypt", "0c0c0c0c-1111-4222-8333-444444444444"),
            "cryptsetup:sda3_crypt:0c0c0c0c-1111-4222-8333-444444444444"
        );
        // xescape(name, ":"): the separator, the backslash, control and non-ASCII bytes.
        assert_eq!(volume_key_event("a:b\\c\td\u{e9}", "u"), "cryptsetup:a\\x3ab\\x5cc\\x09d\\xc3\\xa9:u");
    }

    /// RFC 4231's test case 2 (key "Jefe"), and RFC 2202's for SHA-1.
    #[test]
    fn hmacs_are_the_rfcs() {
        let hex = |d: Vec<u8>| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let data = b"what do ya want for nothing?";
        assert_eq!(hex(hmac("sha1", b"Jefe", data).unwrap()), "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79");
        assert_eq!(
            hex(hmac("sha256", b"Jefe", data).unwrap()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert!(hex(hmac("sha384", b"Jefe", data).unwrap()).starts_with("af45d2e376484031617f78d2b58a6b1b"));
        assert!(hex(hmac("sha512", b"Jefe", data).unwrap()).starts_with("164b7a7bfcf819e2e395fbe73b56e0a3"));
        assert_eq!(hmac("sm3_256", b"k", b"d"), None);
    }

    #[test]
    fn a_volume_key_is_extended_with_one_digest_per_bank() {
        let d = [("sha1", vec![0x11; 20]), ("sha256", vec![0x22; 32])];
        let c = pcr_extend_command(15, &d).unwrap();
        let want: Vec<u8> = [
            &[0x80, 0x02][..],
            &(27u32 + 4 + 2 + 20 + 2 + 32).to_be_bytes(),
            &[0, 0, 1, 0x82],
            &[0, 0, 0, 15],
            &[0, 0, 0, 9, 0x40, 0, 0, 9, 0, 0, 0, 0, 0],
            &[0, 0, 0, 2],
            &[0, 4],
            &[0x11; 20],
            &[0, 0x0b],
            &[0x22; 32],
        ]
        .concat();
        assert_eq!(c, want);
        assert_eq!(pcr_extend_command(15, &[("sha256", vec![0; 20])]), None, "a digest of the wrong size");
        assert_eq!(pcr_extend_command(15, &[("md5", vec![0; 16])]), None);
        let r = measure_log_record(15, &d[1..], "cryptsetup:a\\x3ab\"c:u", Event::VolumeKey);
        let v: serde_json::Value = serde_json::from_str(r.trim_start_matches('\u{1e}')).unwrap();
        assert_eq!(v["content"]["string"], "cryptsetup:a\\x3ab\"c:u");
        assert_eq!(v["content"]["eventType"], "volume-key");
        assert_eq!(v["pcr"], 15);
    }

    #[test]
    fn banks_are_chosen_as_systemd_chooses_them() {
        let mut r = vec![0x80, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        r.extend_from_slice(&5u32.to_be_bytes());
        r.extend_from_slice(&4u32.to_be_bytes());
        for (id, sel) in
            [(4u16, [0xff, 0xff, 0xff]), (0x0b, [0xff, 0xff, 0xff]), (0x0c, [0xff, 0xff, 0xff]), (0x0d, [0, 0, 0])]
        {
            r.extend_from_slice(&id.to_be_bytes());
            r.push(3);
            r.extend_from_slice(&sel);
        }
        let n = r.len() as u32;
        r[2..6].copy_from_slice(&n.to_be_bytes());
        assert_eq!(pcr_banks_command(), [0x80, 0x01, 0, 0, 0, 22, 0, 0, 1, 0x7a, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 1]);
        let a = parse_pcr_banks(&r).unwrap();
        assert_eq!(a, [(4, true), (0x0b, true), (0x0c, true), (0x0d, false)]);
        // PCR 15 untouched everywhere: every bank with 24 PCRs; extended in sha256 only: that one.
        let zero = |_: &str, _: u32| Some("0".repeat(64));
        assert_eq!(banks_for(&a, 15, &zero).unwrap(), ["sha1", "sha256", "sha384"]);
        let one = |b: &str, _: u32| Some(if b == "sha256" { "AB".repeat(32) } else { "F".repeat(64) });
        assert_eq!(banks_for(&a, 15, &one).unwrap(), ["sha256"]);
        assert_eq!(banks_for(&a, 15, &|_, _| None).unwrap(), ["sha1", "sha256", "sha384"]);
        assert!(banks_for(&[(0x12, true)], 15, &zero).is_err(), "SM3, as systemd");
        // An SM3 bank not chosen (PCR 15 extended in sha256 only) does not stop it.
        assert_eq!(banks_for(&[(0x12, true), (0x0b, true)], 15, &one).unwrap(), ["sha256"]);
        assert!(banks_for(&[(0x0b, false)], 15, &zero).is_err());
        let mut other = r.clone();
        other[14] = 6;
        assert!(parse_pcr_banks(&other).is_err());
        for cut in [5, 12, 17, r.len() - 2] {
            let mut short = r[..cut].to_vec();
            if cut >= 6 {
                short[2..6].copy_from_slice(&(cut as u32).to_be_bytes());
            }
            assert!(parse_pcr_banks(&short).is_err(), "{cut}");
        }
    }
}
