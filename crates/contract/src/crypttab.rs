//! Encrypted devices as /etc/crypttab describes them — `NAME DEVICE KEY OPTIONS` — parsed once:
//! the generator reads the system's crypttab with it, /init reads `rd.luks.options=` and
//! `rd.luks.key=` with it, and the configuration carries the entries in the same words.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use crate::device::DeviceRef;

/// Where a container's key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CryptKey {
    /// A passphrase, asked for (`none`, `-` or an empty field).
    Passphrase,
    /// A key file at this path in the image.
    File(String),
    /// A key file at `path` on another (removable) device: waited for, then the passphrase.
    OnDevice {
        /// The key file's path on that device's file system.
        path: String,
        /// The device holding the key file.
        device: DeviceRef,
    },
}

impl CryptKey {
    /// The crypttab key field: `none`, `-`, a path, or `PATH:DEVICE` (systemd's key file on
    /// another device, the device as `UUID=`, `LABEL=`, `PARTUUID=`, `PARTLABEL=` or a /dev
    /// path).
    pub fn parse(field: &str) -> Result<CryptKey, String> {
        if field.is_empty() || field == "none" || field == "-" {
            return Ok(CryptKey::Passphrase);
        }
        if !field.starts_with('/') {
            return Err(format!("key \"{field}\" is not none, - or an absolute path"));
        }
        // The device after the first ':' that is followed by a device reference.
        let mut from = 0;
        while let Some(i) = field[from..].find(':').map(|i| from + i) {
            let dev = &field[i + 1..];
            let looks = ["UUID=", "LABEL=", "PARTUUID=", "PARTLABEL=", "/dev/"].iter().any(|p| dev.starts_with(p));
            if looks {
                let device = DeviceRef::parse(dev).map_err(|e| format!("key \"{field}\": {e}"))?;
                return Ok(CryptKey::OnDevice { path: field[..i].to_string(), device });
            }
            from = i + 1;
        }
        Ok(CryptKey::File(field.to_string()))
    }
}

impl fmt::Display for CryptKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CryptKey::Passphrase => f.write_str("none"),
            CryptKey::File(p) => f.write_str(p),
            CryptKey::OnDevice { path, device } => write!(f, "{path}:{device}"),
        }
    }
}

/// The options /init acts on, from crypttab's fourth field (`luks,discard,tries=5`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CryptOptions {
    /// Not LUKS (`plain`, `tcrypt`, `bitlk`, ...): /init opens LUKS only; kept to say so.
    pub other_type: Option<String>,
    /// `discard`: pass discards down (cryptsetup `--allow-discards`).
    pub discard: bool,
    /// `no-read-workqueue`: dm-crypt decrypts reads without its work queue (a performance flag,
    /// cryptsetup `--perf-no_read_workqueue`).
    pub no_read_workqueue: bool,
    /// `no-write-workqueue`: dm-crypt encrypts writes without its work queue (a performance
    /// flag, cryptsetup `--perf-no_write_workqueue`).
    pub no_write_workqueue: bool,
    /// `same-cpu-crypt`: dm-crypt encrypts on the CPU that submitted the I/O (a performance
    /// flag, cryptsetup `--perf-same_cpu_crypt`).
    pub same_cpu_crypt: bool,
    /// `submit-from-crypt-cpus`: dm-crypt submits writes from its encryption threads (a
    /// performance flag, cryptsetup `--perf-submit_from_crypt_cpus`).
    pub submit_from_crypt_cpus: bool,
    /// `readonly` / `read-only`.
    pub readonly: bool,
    /// `tries=`: passphrase attempts (0: no limit). Default 3.
    pub tries: u32,
    /// `timeout=`: seconds the passphrase prompt waits (0: no limit).
    pub timeout: u64,
    /// `keyfile-offset=`: where in the key file the key starts, in bytes; None: at its start.
    pub keyfile_offset: Option<u64>,
    /// `keyfile-size=`: how many bytes of the key file are the key; None: all of it (from the
    /// offset on).
    pub keyfile_size: Option<u64>,
    /// `keyfile-timeout=`: seconds to wait for a key file's device before asking.
    pub keyfile_timeout: Option<u64>,
    /// `header=`: a detached LUKS header file (in the image).
    pub header: Option<String>,
    /// `key-slot=` / `keyslot=`.
    pub key_slot: Option<u32>,
    /// `tpm2-device=` (`auto` or a path): unlock with the TPM2 token enrolled in the LUKS2
    /// header first.
    pub tpm2_device: Option<String>,
    /// `fido2-device=` (`auto` or a path): unlock with the FIDO2 token enrolled in the LUKS2
    /// header first.
    pub fido2_device: Option<String>,
    /// `pkcs11-uri=` (`auto` or a URI): unlock with the PKCS#11 token enrolled in the LUKS2
    /// header first.
    pub pkcs11_uri: Option<String>,
    /// `token-timeout=`: seconds to wait for a token before asking.
    pub token_timeout: Option<u64>,
    /// `tpm2-measure-pcr=`: the PCR the volume key's measurement is extended into (`yes`:
    /// 15, systemd's "system identity" PCR; a number 0-23); None: not measured (`no`).
    pub tpm2_measure_pcr: Option<u32>,
    /// `tpm2-measure-bank=`: the PCR banks to extend, `:`-separated (`sha256:sha384`), in
    /// lower case; empty: the TPM's banks as systemd chooses them.
    pub tpm2_measure_banks: Vec<String>,
    /// `try-empty-password`: try an empty passphrase before asking.
    pub try_empty_password: bool,
    /// `headless`: never ask.
    pub headless: bool,
    /// `initramfs` (Debian's) and `x-initrd.attach` (systemd's): unlock it in the initramfs.
    pub initramfs: bool,
    /// `noauto`: not unlocked automatically at boot (not needed for the boot).
    pub noauto: bool,
    /// `nofail`: the boot goes on if it cannot be unlocked (not needed for the boot).
    pub nofail: bool,
    /// `swap`, `tmp`: made with a random key at every boot (never in the initramfs).
    pub swap_or_tmp: bool,
}

impl Default for CryptOptions {
    fn default() -> Self {
        CryptOptions {
            other_type: None,
            discard: false,
            no_read_workqueue: false,
            no_write_workqueue: false,
            same_cpu_crypt: false,
            submit_from_crypt_cpus: false,
            readonly: false,
            tries: 3,
            timeout: 0,
            keyfile_offset: None,
            keyfile_size: None,
            keyfile_timeout: None,
            header: None,
            key_slot: None,
            tpm2_device: None,
            fido2_device: None,
            pkcs11_uri: None,
            token_timeout: None,
            tpm2_measure_pcr: None,
            tpm2_measure_banks: Vec::new(),
            try_empty_password: false,
            headless: false,
            initramfs: false,
            noauto: false,
            nofail: false,
            swap_or_tmp: false,
        }
    }
}

/// Options that concern the running system, not the initramfs: accepted without a word.
const FOR_THE_SYSTEM: &[&str] = &[
    "luks",
    "defaults",
    "verify",
    "loud",
    "quiet",
    "_netdev",
    "keyfile-erase",
    "tpm2-pin",
    "tpm2-pcrs",
    "tpm2-public-key",
    "tpm2-public-key-pcrs",
    "tpm2-signature",
    "tpm2-pcrlock",
    "fido2-cid",
    "fido2-rp",
    "password-echo",
    "link-volume-key",
    "check",
    "checkargs",
    "discard-keyring",
];

impl CryptOptions {
    /// Parse a comma list; the second value lists what was not understood (or not
    /// supported by /init), each with why.
    pub fn parse(s: &str) -> (CryptOptions, Vec<String>) {
        let mut o = CryptOptions::default();
        let mut bad = Vec::new();
        for opt in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            let (k, v) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            let num = |bad: &mut Vec<String>| -> Option<u64> {
                match v.map(str::parse::<u64>) {
                    Some(Ok(n)) => Some(n),
                    _ => {
                        bad.push(format!("{opt}: not a number"));
                        None
                    }
                }
            };
            // systemd takes timeouts as "30s" or "30"; seconds here.
            let secs = |bad: &mut Vec<String>| -> Option<u64> {
                let t = v.unwrap_or("").trim_end_matches('s');
                match t.parse::<u64>() {
                    Ok(n) => Some(n),
                    Err(_) => {
                        bad.push(format!("{opt}: not a number of seconds"));
                        None
                    }
                }
            };
            let text = |bad: &mut Vec<String>| -> Option<String> {
                match v {
                    Some(t) if !t.is_empty() => Some(t.to_string()),
                    _ => {
                        bad.push(format!("{opt}: needs a value"));
                        None
                    }
                }
            };
            match k {
                "plain" | "tcrypt" | "bitlk" | "veracrypt" | "tcrypt-hidden" | "tcrypt-system" | "tcrypt-veracrypt" => {
                    o.other_type = Some(k.to_string());
                    bad.push(format!("{opt}: leanrd's /init opens LUKS containers only"));
                }
                "keyscript" | "cipher" | "size" | "hash" | "offset" | "skip" | "sector-size" => {
                    bad.push(format!("{opt}: not supported by leanrd's /init (LUKS keeps these in its header)"));
                }
                "discard" | "allow-discards" => o.discard = true,
                "no-read-workqueue" => o.no_read_workqueue = true,
                "no-write-workqueue" => o.no_write_workqueue = true,
                "same-cpu-crypt" => o.same_cpu_crypt = true,
                "submit-from-crypt-cpus" => o.submit_from_crypt_cpus = true,
                "readonly" | "read-only" => o.readonly = true,
                "tries" => o.tries = num(&mut bad).map_or(3, |n| n.min(u64::from(u32::MAX)) as u32),
                "timeout" => o.timeout = secs(&mut bad).unwrap_or(0),
                "keyfile-offset" => o.keyfile_offset = num(&mut bad),
                "keyfile-size" => o.keyfile_size = num(&mut bad),
                "keyfile-timeout" => o.keyfile_timeout = secs(&mut bad),
                "header" => o.header = text(&mut bad),
                "key-slot" | "keyslot" => o.key_slot = num(&mut bad).map(|n| n as u32),
                "tpm2-device" => o.tpm2_device = text(&mut bad),
                "fido2-device" => o.fido2_device = text(&mut bad),
                "pkcs11-uri" => o.pkcs11_uri = text(&mut bad),
                "token-timeout" => o.token_timeout = secs(&mut bad),
                "tpm2-measure-pcr" => match measure_pcr(v.unwrap_or("")) {
                    Ok(p) => o.tpm2_measure_pcr = p,
                    Err(e) => bad.push(format!("{opt}: {e}")),
                },
                "tpm2-measure-bank" => match measure_banks(v.unwrap_or("")) {
                    Ok(b) => o.tpm2_measure_banks = b,
                    Err(e) => bad.push(format!("{opt}: {e}")),
                },
                "try-empty-password" => o.try_empty_password = v.is_none_or(|v| v != "false" && v != "no"),
                "headless" => o.headless = v.is_none_or(|v| v != "false" && v != "no"),
                "initramfs" | "x-initrd.attach" => o.initramfs = true,
                "noauto" => o.noauto = true,
                "nofail" => o.nofail = true,
                "swap" | "tmp" => o.swap_or_tmp = true,
                k if FOR_THE_SYSTEM.contains(&k) || k.starts_with("x-systemd.") => {}
                _ => bad.push(format!("{opt}: unknown option")),
            }
        }
        (o, bad)
    }
}

/// systemd's PCR for the volume key (and the machine ID, the root's identity): "system
/// identity".
pub const PCR_SYSTEM_IDENTITY: u32 = 15;

/// The PCR banks a volume key can be measured into (systemd's, through OpenSSL's digests).
pub const MEASURE_BANKS: [&str; 4] = ["sha1", "sha256", "sha384", "sha512"];

/// `tpm2-measure-pcr=` as systemd-cryptsetup reads it: a PCR number first, else a boolean
/// (yes: [`PCR_SYSTEM_IDENTITY`]).
fn measure_pcr(v: &str) -> Result<Option<u32>, String> {
    if let Ok(n) = v.parse::<u32>() {
        return if n < 24 { Ok(Some(n)) } else { Err(format!("PCR {n} is outside 0-23")) };
    }
    match v {
        "yes" | "y" | "true" | "t" | "on" => Ok(Some(PCR_SYSTEM_IDENTITY)),
        "no" | "n" | "false" | "f" | "off" => Ok(None),
        _ => Err("not a PCR number or a boolean".into()),
    }
}

/// `tpm2-measure-bank=`: `:`-separated bank names, each one of [`MEASURE_BANKS`] (any case).
fn measure_banks(v: &str) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for b in v.split(':') {
        let b = b.to_ascii_lowercase();
        if !MEASURE_BANKS.contains(&b.as_str()) {
            return Err(format!("bank \"{b}\" is not one of {}", MEASURE_BANKS.join(", ")));
        }
        if !out.contains(&b) {
            out.push(b);
        }
    }
    Ok(out)
}

impl fmt::Display for CryptOptions {
    /// The canonical comma list ([`CryptOptions::parse`] reads it back to the same value).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut v: Vec<String> = Vec::new();
        v.push(self.other_type.clone().unwrap_or_else(|| "luks".into()));
        for (on, name) in [
            (self.discard, "discard"),
            (self.no_read_workqueue, "no-read-workqueue"),
            (self.no_write_workqueue, "no-write-workqueue"),
            (self.same_cpu_crypt, "same-cpu-crypt"),
            (self.submit_from_crypt_cpus, "submit-from-crypt-cpus"),
            (self.readonly, "readonly"),
            (self.try_empty_password, "try-empty-password"),
            (self.headless, "headless"),
            (self.initramfs, "initramfs"),
            (self.noauto, "noauto"),
            (self.nofail, "nofail"),
            (self.swap_or_tmp, "swap"),
        ] {
            if on {
                v.push(name.to_string());
            }
        }
        if self.tries != 3 {
            v.push(format!("tries={}", self.tries));
        }
        if self.timeout != 0 {
            v.push(format!("timeout={}", self.timeout));
        }
        let nums = [
            ("keyfile-offset", self.keyfile_offset),
            ("keyfile-size", self.keyfile_size),
            ("keyfile-timeout", self.keyfile_timeout),
            ("key-slot", self.key_slot.map(u64::from)),
            ("token-timeout", self.token_timeout),
            ("tpm2-measure-pcr", self.tpm2_measure_pcr.map(u64::from)),
        ];
        for (k, n) in nums {
            if let Some(n) = n {
                v.push(format!("{k}={n}"));
            }
        }
        let texts = [
            ("header", &self.header),
            ("tpm2-device", &self.tpm2_device),
            ("fido2-device", &self.fido2_device),
            ("pkcs11-uri", &self.pkcs11_uri),
        ];
        for (k, t) in texts {
            if let Some(t) = t {
                v.push(format!("{k}={t}"));
            }
        }
        if !self.tpm2_measure_banks.is_empty() {
            v.push(format!("tpm2-measure-bank={}", self.tpm2_measure_banks.join(":")));
        }
        f.write_str(&v.join(","))
    }
}

/// One crypttab line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CryptEntry {
    /// The device-mapper name (/dev/mapper/NAME).
    pub name: String,
    /// The encrypted device.
    pub device: DeviceRef,
    /// Where its key comes from (the third field; a passphrase when absent).
    pub key: CryptKey,
    /// The fourth field's options (the defaults when absent).
    pub options: CryptOptions,
}

/// A crypttab line that could not be used; `line` counts from 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrypttabProblem {
    /// The crypttab line, counting from 1.
    pub line: usize,
    /// What could not be used, and why.
    pub why: String,
}

impl CryptEntry {
    /// One line's fields (2 to 4 of them): the entry and what in its options was not
    /// understood.
    pub fn from_fields(fields: &[&str]) -> Result<(CryptEntry, Vec<String>), String> {
        let [name, device, rest @ ..] = fields else { return Err("fewer than two fields".into()) };
        if rest.len() > 2 {
            return Err(format!("{} fields, at most four", fields.len()));
        }
        if name.contains('/') {
            return Err(format!("name \"{name}\" contains '/'"));
        }
        let device = DeviceRef::parse(device).map_err(|e| e.to_string())?;
        let key = CryptKey::parse(rest.first().copied().unwrap_or("none"))?;
        let (options, unknown) = CryptOptions::parse(rest.get(1).copied().unwrap_or(""));
        Ok((CryptEntry { name: name.to_string(), device, key, options }, unknown))
    }
}

/// Parse a crypttab: the entries with their line numbers (from 1), and the problems by line
/// (a line that cannot be used, or an option that is not understood — its entry is still
/// kept).
pub fn crypttab_entries(text: &str) -> (Vec<(usize, CryptEntry)>, Vec<CrypttabProblem>) {
    let mut entries = Vec::new();
    let mut problems = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        match CryptEntry::from_fields(&fields) {
            Ok((e, unknown)) => {
                problems.extend(unknown.into_iter().map(|why| CrypttabProblem { line: i + 1, why }));
                entries.push((i + 1, e));
            }
            Err(why) => problems.push(CrypttabProblem { line: i + 1, why }),
        }
    }
    (entries, problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn debian_installer_and_systemd_lines() {
        let text = "# <target name> <source device> <key file> <options>\n\
            sda3_crypt UUID=0a1b2c3d-0000-4000-8000-000000000001 none luks,discard\n\
            \n\
            home PARTUUID=aa-bb /etc/keys/home.key luks,keyfile-offset=512,keyfile-size=64,nofail\n\
            data /dev/sdb1 /keys/data.key:LABEL=KEYSTICK luks,keyfile-timeout=10s,tries=0\n\
            tpm UUID=t - tpm2-device=auto,x-systemd.device-timeout=0,x-initrd.attach\n\
            swap /dev/sda4 /dev/urandom swap,cipher=aes-xts-plain64,size=256\n\
            broken\n\
            odd UUID=x none luks,bogus,tries=many\n";
        let (e, p) = crypttab_entries(text);
        assert_eq!(e.iter().map(|(l, _)| *l).collect::<Vec<_>>(), [2, 4, 5, 6, 7, 9]);
        let e: Vec<CryptEntry> = e.into_iter().map(|(_, e)| e).collect();
        assert_eq!(e[0].name, "sda3_crypt");
        assert_eq!(e[0].device, DeviceRef::Uuid("0a1b2c3d-0000-4000-8000-000000000001".into()));
        assert_eq!(e[0].key, CryptKey::Passphrase);
        assert!(e[0].options.discard && e[0].options.tries == 3);
        assert_eq!(e[1].key, CryptKey::File("/etc/keys/home.key".into()));
        assert_eq!((e[1].options.keyfile_offset, e[1].options.keyfile_size), (Some(512), Some(64)));
        assert!(e[1].options.nofail);
        assert_eq!(
            e[2].key,
            CryptKey::OnDevice { path: "/keys/data.key".into(), device: DeviceRef::Label("KEYSTICK".into()) }
        );
        assert_eq!((e[2].options.keyfile_timeout, e[2].options.tries), (Some(10), 0));
        assert_eq!(e[3].options.tpm2_device.as_deref(), Some("auto"));
        assert!(e[3].options.initramfs);
        assert!(e[4].options.swap_or_tmp);
        let lines: Vec<(usize, &str)> = p.iter().map(|p| (p.line, p.why.as_str())).collect();
        assert_eq!(
            lines,
            vec![
                (7, "cipher=aes-xts-plain64: not supported by leanrd's /init (LUKS keeps these in its header)"),
                (7, "size=256: not supported by leanrd's /init (LUKS keeps these in its header)"),
                (8, "fewer than two fields"),
                (9, "bogus: unknown option"),
                (9, "tries=many: not a number"),
            ]
        );
    }

    #[test]
    fn options_round_trip_through_their_text() {
        for s in [
            "",
            "luks,discard,no-read-workqueue,no-write-workqueue,readonly,tries=0,timeout=30",
            "keyfile-offset=1,keyfile-size=2,keyfile-timeout=3,header=/etc/h.img,key-slot=1,tpm2-device=auto",
            "fido2-device=auto,pkcs11-uri=auto,token-timeout=5,try-empty-password,headless,initramfs,noauto,nofail",
            "same-cpu-crypt,submit-from-crypt-cpus",
            "tpm2-measure-pcr=yes,tpm2-measure-bank=SHA256:sha1",
            "tpm2-measure-pcr=7",
        ] {
            let (o, bad) = CryptOptions::parse(s);
            assert!(bad.is_empty(), "{s}: {bad:?}");
            let text = o.to_string();
            assert_eq!(CryptOptions::parse(&text), (o, vec![]), "{s} -> {text}");
        }
    }

    #[test]
    fn volume_key_measurement_as_systemd_reads_it() {
        let pcr = |s: &str| CryptOptions::parse(s).0.tpm2_measure_pcr;
        assert_eq!(pcr("tpm2-measure-pcr=yes"), Some(15));
        assert_eq!(pcr("tpm2-measure-pcr=true"), Some(15));
        // A number is a PCR before it is a boolean, as in systemd-cryptsetup.
        assert_eq!(pcr("tpm2-measure-pcr=1"), Some(1));
        assert_eq!(pcr("tpm2-measure-pcr=0"), Some(0));
        assert_eq!(pcr("tpm2-measure-pcr=no"), None);
        assert_eq!(pcr("luks"), None);
        let (o, bad) = CryptOptions::parse("tpm2-measure-bank=SHA384:sha256:sha384");
        assert!(bad.is_empty());
        assert_eq!(o.tpm2_measure_banks, ["sha384", "sha256"]);
        let (_, bad) = CryptOptions::parse("tpm2-measure-pcr=24,tpm2-measure-pcr=maybe,tpm2-measure-bank=sm3_256");
        assert_eq!(
            bad,
            [
                "tpm2-measure-pcr=24: PCR 24 is outside 0-23",
                "tpm2-measure-pcr=maybe: not a PCR number or a boolean",
                "tpm2-measure-bank=sm3_256: bank \"sm3_256\" is not one of sha1, sha256, sha384, sha512",
            ]
        );
    }

    #[test]
    fn keys() {
        assert_eq!(CryptKey::parse("-"), Ok(CryptKey::Passphrase));
        assert_eq!(CryptKey::parse("/a:b/c.key"), Ok(CryptKey::File("/a:b/c.key".into())));
        assert_eq!(
            CryptKey::parse("/a:b/k:UUID=12-34"),
            Ok(CryptKey::OnDevice { path: "/a:b/k".into(), device: DeviceRef::Uuid("12-34".into()) })
        );
        assert!(CryptKey::parse("relative.key").is_err());
        for k in ["none", "/k", "/k:UUID=1", "/k:/dev/sdb1"] {
            let key = CryptKey::parse(k).unwrap();
            assert_eq!(CryptKey::parse(&key.to_string()), Ok(key));
        }
    }
}
