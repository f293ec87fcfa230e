//! The boot phases in PCR 11, as systemd-pcrphase measures them: `enter-initrd` before
//! anything is unsealed, `leave-initrd` just before the switch to the root. A policy signed
//! for the phase `enter-initrd` (systemd-measure's prediction, in the UKI's `.pcrsig`) then
//! unseals in the initramfs only: once /init has left, PCR 11 no longer matches it.
//!
//! As systemd does, only on a measured UKI boot: systemd-stub extended PCR 11 with the UKI's
//! sections (PCR 11 is the stub's alone: firmware and boot loaders leave it at zero). systemd
//! asks the stub's EFI variable; /init reads PCR 11 from sysfs (efivarfs is a module on
//! Debian's kernels, sysfs is always there): not zero means measured.
//!
//! One TPM command, hand-encoded (TPM 2.0 Part 3, TPM2_PCR_Event) and sent to the kernel's
//! resource manager /dev/tpmrm0: the TPM hashes the phase word with every PCR bank it has
//! and extends each, which is exactly systemd's extend of H(word) into every bank (the
//! string without its NUL), and /init carries no hash code, no TSS library (tpm2-tss is
//! 600 KB of libraries in the image) and no allocation of its own for it.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

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

const TPM_ST_SESSIONS: u16 = 0x8002;
const TPM_CC_PCR_EVENT: u32 = 0x0000_013c;
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

/// TPM2_PCR_Event for `pcr` with `data` (at most 1024 bytes, the TPM's event size).
pub fn pcr_event_command(pcr: u32, data: &[u8]) -> Vec<u8> {
    let mut c = Vec::with_capacity(29 + data.len());
    c.extend_from_slice(&TPM_ST_SESSIONS.to_be_bytes());
    c.extend_from_slice(&0u32.to_be_bytes()); // size, below
    c.extend_from_slice(&TPM_CC_PCR_EVENT.to_be_bytes());
    c.extend_from_slice(&pcr.to_be_bytes());
    // The authorisation area: the password session, no nonce, no attributes, no password.
    c.extend_from_slice(&9u32.to_be_bytes());
    c.extend_from_slice(&TPM_RS_PW.to_be_bytes());
    c.extend_from_slice(&0u16.to_be_bytes());
    c.push(0);
    c.extend_from_slice(&0u16.to_be_bytes());
    // TPM2B_EVENT.
    c.extend_from_slice(&(data.len() as u16).to_be_bytes());
    c.extend_from_slice(data);
    let size = c.len() as u32;
    c[2..6].copy_from_slice(&size.to_be_bytes());
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

/// The digests a TPM2_PCR_Event response reports (one per bank, each H(data)), or why it
/// failed.
pub fn parse_event_response(r: &[u8]) -> Result<Vec<(&'static str, Vec<u8>)>, String> {
    let be16 = |at: usize| r.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let be32 = |at: usize| r.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let short = || String::from("a short response");
    let size = be32(2).ok_or_else(short)? as usize;
    if size != r.len() {
        return Err(format!("a response of {} bytes that says {size}", r.len()));
    }
    match be32(6).ok_or_else(short)? {
        0 => {}
        rc => return Err(format!("the TPM refused: response code {rc:#x}")),
    }
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

/// Extend PCR 11 with `word`; the digests the TPM extended.
fn measure(word: &str) -> Result<Vec<(&'static str, Vec<u8>)>, String> {
    let fd =
        rustix::fs::open(DEVICE, rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty())
            .map_err(|e| format!("{DEVICE}: {}", strerror(e)))?;
    let cmd = pcr_event_command(PCR_KERNEL_BOOT, word.as_bytes());
    let n = rustix::io::write(&fd, &cmd).map_err(|e| format!("{DEVICE}: {}", strerror(e)))?;
    if n != cmd.len() {
        return Err(format!("{DEVICE}: wrote {n} of {} bytes", cmd.len()));
    }
    let mut buf = [0u8; 1024];
    let n = rustix::io::read(&fd, &mut buf).map_err(|e| format!("{DEVICE}: {}", strerror(e)))?;
    parse_event_response(&buf[..n])
}

/// systemd's userspace measurement log: what userspace extended into which PCR, beside the
/// firmware's event log (systemd-pcrlock and `systemd-analyze pcrs` read it to explain PCR
/// 11's value). /run goes to the root, whose systemd appends its own phases.
pub const MEASURE_LOG: &str = "/run/log/systemd/tpm2-measure.log";

/// One record of [`MEASURE_LOG`], as systemd writes it for a phase (tpm2-util.c,
/// `tpm2_userspace_log`): JSON-SEQ (RFC 7464: RS, one compact JSON object, LF) with the PCR,
/// each bank's digest, and the phase word as a `phase` event.
pub fn measure_log_record(pcr: u32, digests: &[(&str, Vec<u8>)], word: &str) -> String {
    let hex = |d: &[u8]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let digests: Vec<String> =
        digests.iter().map(|(alg, d)| format!("{{\"hashAlg\":\"{alg}\",\"digest\":\"{}\"}}", hex(d))).collect();
    // The word is one of the phases: no character JSON would need escaped.
    format!(
        "\u{1e}{{\"pcr\":{pcr},\"digests\":[{}],\"content_type\":\"systemd\",\"content\":{{\"string\":\"{word}\",\"eventType\":\"phase\"}}}}\n",
        digests.join(",")
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
            if let Err(e) = log_measurement(&measure_log_record(PCR_KERNEL_BOOT, &d, word)) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The record systemd writes for a phase, byte for byte (a JSON-SEQ record: RS, the
    /// object, LF; keys in systemd's order).
    #[test]
    fn a_phase_is_logged_as_systemd_logs_it() {
        let d = [("sha1", alloc::vec![0xab; 20]), ("sha256", alloc::vec![0x01; 32])];
        let r = measure_log_record(11, &d, "enter-initrd");
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
}
