//! Encrypted devices: which of the system's crypttab entries the image carries, the key
//! files and detached headers they need, the drivers of a key file's own device, and the
//! keyboard drivers to type a passphrase with. Only when the image can unlock LUKS (a
//! feature with `init = "luks"`: host-only when dm-crypt is in the stack, or universal).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use leanrd_contract::{Crypt, CryptEntry, CryptKey, CryptOptions, DeviceRef, crypttab_entries};

use crate::host::{self, Facts};
use crate::plan::host_path;
use crate::request::Request;

/// What the image gets for its encrypted devices.
#[derive(Debug, Default)]
pub(crate) struct CryptSelection {
    /// The entries for /init's configuration.
    pub entries: Vec<Crypt>,
    /// Files to copy, private (0600): (path in the image, source).
    pub files: Vec<(String, PathBuf)>,
    /// Modules, aliases and modaliases for the image: keyboards, key files' devices.
    pub modules: Vec<String>,
    /// Of those, what /init loads before it asks for a passphrase (the keyboard's).
    pub before_prompt: Vec<String>,
    /// Features the containers need: their tokens' (`luks-tpm2`, which requires `tpm`,
    /// `luks-fido2`, `luks-pkcs11`), and the TPM's drivers (`tpm`) for `tpm2-measure-pcr=`.
    pub token_features: BTreeSet<String>,
    /// What the user must hear about: crypttab lines that cannot be used, containers /init
    /// cannot open, key files or headers not found.
    pub warnings: Vec<String>,
    /// Unlocking over SSH, when asked for.
    pub ssh: Option<crate::ssh::SshSelection>,
    /// The needed containers bound with clevis: each name, and whether one of its tokens can
    /// open it from an image with the `clevis` feature (Err: why none can).
    pub clevis: Vec<(String, Result<(), String>)>,
}

/// The token types in a LUKS2 header (`systemd-tpm2`, ...), sorted, each once; none for a
/// header that is not LUKS2 (read here rather than by running `cryptsetup luksDump`, which
/// needs the device-mapper-free host to have cryptsetup).
pub(crate) fn luks2_token_types(header: &[u8]) -> Vec<String> {
    let mut types: Vec<String> = leanrd_contract::luks2::tokens(header).into_iter().map(|t| t.kind).collect();
    types.sort();
    types.dedup();
    types
}

/// The token features for an entry's options and a header's token types, and the TPM's
/// drivers where the TPM measures its key (a token's come with its feature's `requires`).
fn token_features(o: &CryptOptions, header_types: &[String]) -> Vec<&'static str> {
    let mut v = Vec::new();
    let has = |t: &str| header_types.iter().any(|h| h == t);
    if o.tpm2_device.is_some() || has("systemd-tpm2") {
        v.push("luks-tpm2");
    }
    if o.tpm2_measure_pcr.is_some() {
        v.push("tpm");
    }
    if o.fido2_device.is_some() || has("systemd-fido2") {
        v.push("luks-fido2");
    }
    if o.pkcs11_uri.is_some() || has("systemd-pkcs11") {
        v.push("luks-pkcs11");
    }
    if has("clevis") {
        v.push("clevis");
    }
    v
}

/// What a LUKS2 header's clevis tokens mean for the image: a warning for each token /init
/// cannot use (a pin it does not unlock, a JWE that does not read), naming the container.
pub(crate) fn clevis_warnings(name: &str, header: &[u8]) -> Vec<String> {
    use leanrd_contract::clevis::describe;
    let mut out = Vec::new();
    for t in leanrd_contract::luks2::clevis_tokens(header) {
        match &t.jwe {
            Err(e) => out.push(format!("{name}: clevis token {} cannot be read ({e}); it will not unlock", t.id)),
            Ok(j) => {
                if let Err(e) = usable(&j.pin) {
                    out.push(format!(
                        "{name}: clevis token {} ({}): {e}; this token will not unlock, and the container is asked \
                         for its passphrase",
                        t.id,
                        describe(&j.pin)
                    ));
                }
            }
        }
    }
    out
}

/// A container bound with clevis (its header has clevis tokens): its name, and whether one of
/// them can open it unattended (Err: why none can). None without clevis tokens.
pub(crate) fn clevis_unattended(name: &str, header: &[u8]) -> Option<(String, Result<(), String>)> {
    let tokens = leanrd_contract::luks2::clevis_tokens(header);
    if tokens.is_empty() {
        return None;
    }
    let why: Vec<String> = tokens
        .iter()
        .filter_map(|t| match &t.jwe {
            Ok(j) => usable(&j.pin).err().map(|e| format!("token {}: {e}", t.id)),
            Err(e) => Some(format!("token {}: {e}", t.id)),
        })
        .collect();
    Some((name.to_string(), if why.len() < tokens.len() { Ok(()) } else { Err(why.join("; ")) }))
}

/// Whether /init can unlock a pin: tang over http, tpm2, sss with enough such shares; why not.
fn usable(p: &leanrd_contract::clevis::Pin) -> Result<(), String> {
    use leanrd_contract::clevis::Pin;
    match p {
        Pin::Tang(t) => tang_url_usable(&t.url),
        Pin::Sss { threshold, shares, .. } => {
            let why: Vec<String> = shares.iter().filter_map(|s| usable(&s.pin).err()).collect();
            if shares.len() - why.len() >= *threshold {
                Ok(())
            } else {
                Err(format!("sss needs {threshold} of its shares, and {} cannot open ({})", why.len(), why.join("; ")))
            }
        }
        // The TPM's drivers come with the clevis feature; whether the PCRs still match is the
        // boot's to find out (as with a systemd-tpm2 token).
        Pin::Tpm2(t) => match t.key.as_str() {
            "ecc" | "rsa" => Ok(()),
            k => Err(format!("pin tpm2: a primary key of type {k:?} (clevis makes ecc or rsa)")),
        },
        Pin::Other(n) => Err(format!("pin {n}: leanrd's /init unlocks tang, tpm2, and sss over them")),
    }
}

/// Whether /init can reach a Tang URL: plain http (its replies need no secrecy; clevis's
/// `https` would need a TLS client in the image).
pub(crate) fn tang_url_usable(url: &str) -> Result<(), String> {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("http") => Ok(()),
        Some("https") => Err(format!("Tang server {url}: https is not supported by leanrd's /init")),
        _ => Err(format!("Tang server {url}: not an http:// URL")),
    }
}

/// The LUKS2 header of a host block device (by kernel name); None when it cannot be read (a
/// fixture, or not root) or is not LUKS2.
fn host_header(host_root: &Path, name: &str) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let f = fs::File::open(host_root.join("dev").join(name)).ok()?;
    let mut head = vec![0u8; leanrd_contract::luks2::BINARY_HEADER];
    f.read_exact_at(&mut head, 0).ok()?;
    let size = leanrd_contract::luks2::header_size(&head)?;
    let mut all = vec![0u8; size];
    f.read_exact_at(&mut all, 0).ok()?;
    Some(all)
}

/// Whether a crypttab entry's device is the one a dm-crypt device sits on.
fn same_device(host_root: &Path, e: &CryptEntry, c: &host::CryptDev) -> bool {
    match &e.device {
        DeviceRef::Uuid(u) => c.luks_uuid.as_deref().is_some_and(|l| l.eq_ignore_ascii_case(u)),
        d => host::resolve_name(host_root, d).is_some_and(|n| c.backing.contains(&n)),
    }
}

/// The entries and files for an image that unlocks LUKS. `facts` is None for a universal
/// image: then every entry that may be unlocked at boot is carried for its name, key and
/// options, and is unlocked only when the command line or the root asks for it (or, with
/// Debian's `initramfs` option, always).
pub(crate) fn select(r: &Request, facts: Option<&Facts>) -> CryptSelection {
    let mut s = CryptSelection::default();
    let path = host_path(&r.sysroot, "/etc/crypttab");
    let text = fs::read_to_string(&path).unwrap_or_default();
    let shown = path.display().to_string();
    let (all, problems) = crypttab_entries(&text);
    // Entries made at every boot with a random key (swap, tmp) are the system's business.
    let random: BTreeSet<usize> =
        all.iter().filter(|(_, e)| e.options.swap_or_tmp || is_random_key(&e.key)).map(|(l, _)| *l).collect();
    for p in problems.iter().filter(|p| !random.contains(&p.line)) {
        s.warnings.push(format!("{shown}:{}: {}", p.line, p.why));
    }
    let usable: Vec<(usize, CryptEntry)> = all.into_iter().filter(|(l, _)| !random.contains(l)).collect();
    match facts {
        Some(x) => {
            // The stack's dm-crypt devices, each with its crypttab entry (matched by name,
            // then by device); one missing from crypttab is unlocked by passphrase under its
            // current name.
            for c in &x.crypt {
                let found = usable
                    .iter()
                    .find(|(_, e)| e.name == c.name)
                    .or_else(|| usable.iter().find(|(_, e)| same_device(&r.host_root, e, c)));
                let entry = match found {
                    Some((_, e)) => e.clone(),
                    None => {
                        let device = match (&c.luks_uuid, c.backing.first()) {
                            (Some(u), _) => DeviceRef::Uuid(u.clone()),
                            (None, Some(b)) => DeviceRef::Kernel(b.clone()),
                            (None, None) => continue,
                        };
                        s.warnings.push(format!(
                            "{}: not in {shown}; the image unlocks {device} by passphrase as {}",
                            c.name, c.name
                        ));
                        CryptEntry {
                            name: c.name.clone(),
                            device,
                            key: CryptKey::Passphrase,
                            options: CryptOptions::default(),
                        }
                    }
                };
                let headers: Vec<Vec<u8>> = c.backing.iter().filter_map(|b| host_header(&r.host_root, b)).collect();
                let header: Vec<String> = headers.iter().flat_map(|h| luks2_token_types(h)).collect();
                for h in &headers {
                    s.warnings.extend(clevis_warnings(&c.name, h));
                    s.clevis.extend(clevis_unattended(&c.name, h));
                }
                s.token_features.extend(token_features(&entry.options, &header).into_iter().map(String::from));
                push(&mut s, r, entry, true);
            }
            // Debian's `initramfs` and systemd's `x-initrd.attach`: unlocked in the initramfs too.
            for (_, e) in usable.iter().filter(|(_, e)| e.options.initramfs) {
                s.token_features.extend(token_features(&e.options, &[]).into_iter().map(String::from));
                push(&mut s, r, e.clone(), true);
            }
            s.modules.extend(x.keyboard_modules.iter().cloned());
            s.before_prompt.extend(x.keyboard_modules.iter().cloned());
            if x.keyboards.is_empty() {
                s.warnings.push(
                    "no keyboard found in /sys/class/input: the passphrase can only be typed on a serial console"
                        .into(),
                );
            }
        }
        None => {
            for (_, e) in usable.into_iter().filter(|(_, e)| !e.options.noauto) {
                let needed = e.options.initramfs;
                s.token_features.extend(token_features(&e.options, &[]).into_iter().map(String::from));
                push(&mut s, r, e, needed);
            }
        }
    }
    s
}

fn is_random_key(k: &CryptKey) -> bool {
    matches!(k, CryptKey::File(p) if p.starts_with("/dev/urandom") || p.starts_with("/dev/random"))
}

/// Add an entry (once, by name) with the files it needs in the image and the drivers of its
/// key file's device.
fn push(s: &mut CryptSelection, r: &Request, mut e: CryptEntry, needed: bool) {
    if let Some(c) = s.entries.iter_mut().find(|c| c.entry.name == e.name) {
        c.needed |= needed;
        return;
    }
    if let Some(t) = &e.options.other_type {
        s.warnings.push(format!("{}: type {t} cannot be opened by leanrd's /init; left to the system", e.name));
        return;
    }
    if let CryptKey::File(p) = &e.key {
        let src = host_path(&r.sysroot, p);
        if src.is_file() {
            s.files.push((p.clone(), src));
        } else {
            s.warnings.push(format!("{}: key file {p} not found; the passphrase is asked instead", e.name));
            e.key = CryptKey::Passphrase;
        }
    }
    if let Some(h) = &e.options.header {
        let src = host_path(&r.sysroot, h);
        if src.is_file() {
            s.files.push((h.clone(), src));
        } else {
            s.warnings.push(format!("{}: header {h} not found; the container cannot be opened", e.name));
        }
    }
    if let CryptKey::OnDevice { device, path } = &e.key {
        key_device(s, r, &e.name, device, path);
    }
    s.entries.push(Crypt { entry: e, needed });
}

/// A key file on another device: that device's drivers and file system, when it is
/// plugged in on the host; otherwise the common ones for a USB stick.
fn key_device(s: &mut CryptSelection, r: &Request, name: &str, device: &DeviceRef, path: &str) {
    let fat = ["fs-vfat", "nls_cp437", "nls_iso8859-1", "nls_utf8"];
    let found = host::resolve_name(&r.host_root, device)
        .and_then(|n| fs::canonicalize(r.host_root.join("sys/class/block").join(&n)).ok().map(|d| (n, d)));
    let Some((kname, dir)) = found else {
        s.warnings.push(format!(
            "{name}: the device holding key file {path} ({device}) is not plugged in; the image gets USB storage \
             and vfat drivers for it"
        ));
        s.modules.extend(["usb_storage", "uas", "sd_mod", "xhci_pci", "ehci_pci"].map(String::from));
        s.modules.extend(fat.map(String::from));
        return;
    };
    let mut aliases = BTreeSet::new();
    let mut drivers = BTreeSet::new();
    host::device_drivers(&r.host_root, &dir, &mut aliases, &mut drivers);
    s.modules.extend(aliases.into_iter().chain(drivers));
    s.modules.push("sd_mod".into());
    match host::fs_type(&r.host_root, &kname) {
        Some(t) if t == "vfat" => s.modules.extend(fat.map(String::from)),
        Some(t) => s.modules.push(format!("fs-{t}")),
        None => {
            s.warnings.push(format!("{name}: the file system of {device} is not known; vfat drivers are added"));
            s.modules.extend(fat.map(String::from));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Settings;

    fn request(t: &Path, crypttab: &str) -> Request {
        let sys = t.join("sys");
        fs::create_dir_all(sys.join("etc/keys")).unwrap();
        fs::write(sys.join("etc/crypttab"), crypttab).unwrap();
        fs::write(sys.join("etc/keys/home.key"), b"secret").unwrap();
        let s = Settings {
            kver: Some("x".into()),
            sysroot: Some(sys),
            host_root: Some(t.join("host")),
            init: Some(t.into()),
            ..Default::default()
        };
        Request::new(s, t).unwrap()
    }

    const TAB: &str = "sda3_crypt UUID=11111111-2222-3333-4444-555555555555 none luks,discard\n\
                       home UUID=aaaa /etc/keys/home.key luks\n\
                       gone UUID=bbbb /etc/keys/missing.key luks,initramfs\n\
                       cryptswap /dev/sda4 /dev/urandom swap,cipher=aes-xts-plain64,size=512\n\
                       old UUID=cccc none luks,noauto,bogus\n";

    #[test]
    fn host_only_carries_the_stacks_entries_and_their_keys() {
        let t = tempfile::tempdir().unwrap();
        let r = request(t.path(), TAB);
        let facts = Facts {
            crypt: vec![host::CryptDev {
                name: "sda3_crypt".into(),
                luks_uuid: Some("11111111-2222-3333-4444-555555555555".into()),
                backing: vec!["sda3".into()],
            }],
            keyboards: vec!["input3".into()],
            keyboard_modules: ["serio:ty06pr00id00ex00".to_string()].into(),
            ..Facts::default()
        };
        let s = select(&r, Some(&facts));
        let names: Vec<(&str, bool)> = s.entries.iter().map(|c| (c.entry.name.as_str(), c.needed)).collect();
        assert_eq!(names, [("sda3_crypt", true), ("gone", true)]);
        assert_eq!(s.entries[1].entry.key, CryptKey::Passphrase, "a missing key file falls back to the passphrase");
        assert!(s.files.is_empty());
        assert_eq!(s.before_prompt, ["serio:ty06pr00id00ex00"]);
        let w = s.warnings.join("\n");
        assert!(w.contains("crypttab:5: bogus: unknown option"), "{w}");
        assert!(!w.contains("cipher"), "swap lines' options are the system's: {w}");
        assert!(w.contains("gone: key file /etc/keys/missing.key not found"), "{w}");

        // Matched by the LUKS UUID when crypttab names it differently; one not there is named
        // as the system names it now.
        let facts = Facts {
            crypt: vec![
                host::CryptDev { name: "luks-x".into(), luks_uuid: Some("AAAA".into()), backing: vec![] },
                host::CryptDev { name: "cryptroot".into(), luks_uuid: Some("dddd".into()), backing: vec![] },
            ],
            ..Facts::default()
        };
        let s = select(&r, Some(&facts));
        let e: Vec<(&str, String)> =
            s.entries.iter().map(|c| (c.entry.name.as_str(), c.entry.key.to_string())).collect();
        assert_eq!(
            e,
            [("home", "/etc/keys/home.key".to_string()), ("cryptroot", "none".into()), ("gone", "none".into())]
        );
        assert_eq!(s.files, [("/etc/keys/home.key".to_string(), r.sysroot.join("etc/keys/home.key"))]);
        assert!(s.warnings.iter().any(|w| w.contains("cryptroot: not in")), "{:?}", s.warnings);
        assert!(s.warnings.iter().any(|w| w.contains("no keyboard found")));
    }

    #[test]
    fn reads_token_types_from_luks2_headers() {
        let mut h = vec![0u8; 16384];
        h[..6].copy_from_slice(b"LUKS\xba\xbe");
        h[6..8].copy_from_slice(&2u16.to_be_bytes());
        h[8..16].copy_from_slice(&16384u64.to_be_bytes());
        let json = br#"{"keyslots":{},"tokens":{"0":{"type":"systemd-tpm2","keyslots":["1"]},"1":{"type":"systemd-tpm2"},"2":{"type":"systemd-fido2"}},"segments":{}}"#;
        h[4096..4096 + json.len()].copy_from_slice(json);
        assert_eq!(luks2_token_types(&h), ["systemd-fido2", "systemd-tpm2"]);
        let feats = token_features(&CryptOptions::default(), &luks2_token_types(&h));
        assert_eq!(feats, ["luks-tpm2", "luks-fido2"]);
        h[4096..4096 + 12].copy_from_slice(br#"{"tokens":{}"#);
        h[4096 + 12] = b'}';
        h[4096 + 13..4096 + json.len()].fill(0);
        assert_eq!(luks2_token_types(&h), Vec::<String>::new());
        assert!(luks2_token_types(&h[..100]).is_empty());
        h[6..8].copy_from_slice(&1u16.to_be_bytes());
        assert_eq!(luks2_token_types(&h), Vec::<String>::new(), "LUKS1 has no tokens");
        let (o, _) = CryptOptions::parse("tpm2-device=auto");
        assert_eq!(token_features(&o, &[]), ["luks-tpm2"]);
        let (o, _) = CryptOptions::parse("tpm2-measure-pcr=yes");
        assert_eq!(token_features(&o, &[]), ["tpm"], "measured: the drivers, not the token plugin");
    }

    #[test]
    fn clevis_tokens_bring_the_feature_and_say_which_will_not_unlock() {
        let b64 = leanrd_contract::clevis::b64_encode;
        let jwe = |header: &str| {
            format!(
                r#"{{"protected":"{}","iv":"AAAAAAAAAAAAAAAA","ciphertext":"AA","tag":"AAAAAAAAAAAAAAAAAAAAAA"}}"#,
                b64(header.as_bytes())
            )
        };
        let tang = |url: &str| {
            jwe(&format!(
                r#"{{"alg":"ECDH-ES","enc":"A256GCM","kid":"k","epk":{{"kty":"EC","crv":"P-521","x":"AQ","y":"Ag"}},"clevis":{{"pin":"tang","tang":{{"url":"{url}","adv":{{"keys":[]}}}}}}}}"#
            ))
        };
        let tpm2 = jwe(r#"{"alg":"dir","enc":"A256GCM","clevis":{"pin":"yubikey","yubikey":{}}}"#);
        let json = format!(
            r#"{{"tokens":{{"0":{{"type":"clevis","keyslots":["1"],"jwe":{}}},"1":{{"type":"clevis","keyslots":["2"],"jwe":{tpm2}}},"2":{{"type":"clevis","keyslots":["3"],"jwe":{}}},"3":{{"type":"clevis"}}}}}}"#,
            tang("http://tang.lan:7500"),
            tang("https://tang.lan")
        );
        let mut h = vec![0u8; 16384];
        h[..6].copy_from_slice(b"LUKS\xba\xbe");
        h[6..8].copy_from_slice(&2u16.to_be_bytes());
        h[8..16].copy_from_slice(&16384u64.to_be_bytes());
        h[4096..4096 + json.len()].copy_from_slice(json.as_bytes());
        assert_eq!(token_features(&CryptOptions::default(), &luks2_token_types(&h)), ["clevis"]);
        let w = clevis_warnings("root_crypt", &h);
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(
            w[0].starts_with("root_crypt: clevis token 1 (yubikey): pin yubikey: leanrd's /init unlocks tang"),
            "{w:?}"
        );
        assert!(
            w[1].contains("token 2 (tang https://tang.lan): Tang server https://tang.lan: https is not supported"),
            "{w:?}"
        );
        assert!(w[2].contains("token 3 cannot be read (no \"jwe\")"), "{w:?}");
        // Token 0 opens from an image with clevis: the container opens unattended.
        assert_eq!(clevis_unattended("root_crypt", &h), Some(("root_crypt".into(), Ok(()))));
        let only_tpm2 = format!(r#"{{"tokens":{{"1":{{"type":"clevis","keyslots":["2"],"jwe":{tpm2}}}}}}}"#);
        h[4096..].fill(0);
        h[4096..4096 + only_tpm2.len()].copy_from_slice(only_tpm2.as_bytes());
        let (_, r) = clevis_unattended("root_crypt", &h).unwrap();
        assert!(r.unwrap_err().starts_with("token 1: pin yubikey"), "fails closed");
        h[4096..].fill(0);
        h[4096..4098].copy_from_slice(b"{}");
        assert_eq!(clevis_unattended("root_crypt", &h), None, "no clevis token: nothing to prove");
    }

    #[test]
    fn universal_carries_every_bootable_entry_unlocking_only_when_asked() {
        let t = tempfile::tempdir().unwrap();
        let r = request(t.path(), TAB);
        let s = select(&r, None);
        let names: Vec<(&str, bool)> = s.entries.iter().map(|c| (c.entry.name.as_str(), c.needed)).collect();
        assert_eq!(names, [("sda3_crypt", false), ("home", false), ("gone", true)]);
        assert_eq!(s.files.len(), 1);
    }
}
