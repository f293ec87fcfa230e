//! The kernel command line as /init reads it (`leanrd_init::cmdline::Cmdline::parse`), and the
//! contract's parsers it hands values to: `Root::parse`, `DeviceRef::parse`,
//! `IscsiTarget::parse`, `NvmfTarget::parse`, `NbdTarget::parse`, `CryptKey::parse`, `CryptOptions::parse`,
//! `verity::VerityOptions::parse` and `verity::parse_root_hash` (`roothash=`). A boot
//! loader entry, a PXE server or a user at the prompt writes it.
//!
//! Holds to:
//! - nothing panics;
//! - every value that parses has a spelling (`Display`) that parses back to the same value,
//!   and that spelling is a fixed point: the generator writes these spellings into the
//!   contract and /init reads them back (the root, /usr, resume, live overlay, key devices,
//!   iSCSI, NVMe-oF and NBD targets, crypttab keys and options);
//! - the command line as /init logs and shows it (`redact_secrets`) holds no CHAP password the
//!   parser took from it.

#![no_main]

use leanrd_contract::verity::{self, Geometry, VerityOptions};
use leanrd_contract::{CryptKey, CryptOptions, DeviceRef, IscsiTarget, NbdTarget, NvmfTarget, Root, redact_secrets};
use leanrd_init::cmdline::{Cmdline, words};
use libfuzzer_sys::fuzz_target;

fn device(d: &DeviceRef) {
    let s = d.to_string();
    let back = DeviceRef::parse(&s).unwrap_or_else(|e| panic!("{d:?} is spelled {s:?}, which does not parse: {e}"));
    assert_eq!(&back, d, "{d:?} is spelled {s:?}, which parses to {back:?}");
    assert_eq!(back.to_string(), s);
}

fn root(r: &Root) {
    let s = r.to_string();
    let back = Root::parse(&s, None).unwrap_or_else(|e| panic!("{r:?} is spelled {s:?}, which does not parse: {e}"));
    assert_eq!(&back, r, "{r:?} is spelled {s:?}, which parses to {back:?}");
    assert_eq!(back.to_string(), s);
}

fn iscsi(t: &IscsiTarget) {
    // The group is not part of the spelling (the contract writes it beside it).
    let t = IscsiTarget { group: None, ..t.clone() };
    let s = t.to_string();
    let back = IscsiTarget::parse(&s).unwrap_or_else(|e| panic!("{t:?} is spelled {s:?}, which does not parse: {e}"));
    assert_eq!(back, t, "{t:?} is spelled {s:?}, which parses to {back:?}");
    assert_eq!(back.to_string(), s);
}

fn nvmf(t: &NvmfTarget) {
    let s = t.to_string();
    let back = NvmfTarget::parse(&s).unwrap_or_else(|e| panic!("{t:?} is spelled {s:?}, which does not parse: {e}"));
    assert_eq!(&back, t, "{t:?} is spelled {s:?}, which parses to {back:?}");
    assert_eq!(back.to_string(), s);
}

fn nbd(t: &NbdTarget) {
    let s = t.to_string();
    let back = NbdTarget::parse(&s).unwrap_or_else(|e| panic!("{t:?} is spelled {s:?}, which does not parse: {e}"));
    assert_eq!(&back, t, "{t:?} is spelled {s:?}, which parses to {back:?}");
    assert_eq!(back.to_string(), s);
}

fn key(k: &CryptKey) {
    let s = k.to_string();
    let back = CryptKey::parse(&s).unwrap_or_else(|e| panic!("{k:?} is spelled {s:?}, which does not parse: {e}"));
    assert_eq!(&back, k, "{k:?} is spelled {s:?}, which parses to {back:?}");
    if let CryptKey::OnDevice { device: d, .. } = k {
        device(d);
    }
}

fn options(o: &CryptOptions) {
    let s = o.to_string();
    let (back, bad) = CryptOptions::parse(&s);
    // Only a type /init does not open is reported (and kept, to say so).
    assert!(bad.iter().all(|b| b.contains("opens LUKS containers only")), "{o:?} is spelled {s:?}: {bad:?}");
    assert_eq!(&back, o, "{o:?} is spelled {s:?}, which parses to {back:?}");
    assert_eq!(back.to_string(), s);
}

/// Each parser on a value as the command line would give it.
fn every_parser(v: &str) {
    if let Ok(d) = DeviceRef::parse(v) {
        device(&d);
    }
    if let Ok(r) = Root::parse(v, None) {
        root(&r);
    }
    if let Ok(t) = IscsiTarget::parse(v) {
        iscsi(&t);
    }
    if let Ok(t) = NvmfTarget::parse(v) {
        nvmf(&t);
    }
    if let Ok(t) = NbdTarget::parse(v) {
        nbd(&t);
    }
    if let Ok(k) = CryptKey::parse(v) {
        key(&k);
    }
    let (o, _) = CryptOptions::parse(v);
    options(&o);
    // veritytab's options (systemd.verity_root_options=) and a root hash: never a panic, and
    // what parses builds a table.
    if let Ok(o) = VerityOptions::parse(v)
        && let Ok(g) = Geometry::new(&o, None)
    {
        let _ = verity::table(&g, "8:1", "8:2", &[0; 32], &o, None, None);
    }
    let _ = verity::parse_root_hash(v);
}

fn count(hay: &str, needle: &str) -> usize {
    hay.match_indices(needle).count()
}

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let c = Cmdline::parse(&s);

    if let Some(r) = &c.mounts.root {
        root(r);
    }
    let v = &c.verity;
    let verity = [&v.root.data, &v.root.hash_device, &v.usr.data, &v.usr.hash_device];
    for d in [&c.mounts.usr, &c.resume, &c.live.overlay].into_iter().chain(verity).flatten() {
        device(d);
    }
    for (_, k) in &c.luks_keys {
        key(k);
    }
    for (_, o) in &c.luks_options {
        options(o);
    }
    for t in &c.iscsi.targets {
        // Credentials from rd.iscsi.username= and the like are never spelled (the contract
        // leaves them out); the target itself is.
        iscsi(&IscsiTarget { chap: None, ..t.clone() });
    }
    for t in &c.nvmf.targets {
        nvmf(t);
    }
    if let Some(t) = &c.nbd.target {
        nbd(t);
    }

    // The parsers on each word's value, and on the whole text.
    let ws = words(&s);
    for w in ws.iter().take(16) {
        every_parser(w.split_once('=').map_or(w.as_str(), |(_, v)| v));
    }
    if s.len() < 512 {
        every_parser(&s);
    }

    // What is shown of the command line holds none of the passwords /init took from it. A
    // password that also stands elsewhere in the text (or in the redaction's own marks) says
    // nothing, so only one that is in the text once is looked for.
    let shown = redact_secrets(s.trim());
    for t in &c.iscsi.targets {
        let Some(chap) = &t.chap else { continue };
        for p in [Some(&chap.password), chap.in_password.as_ref()].into_iter().flatten() {
            if p.len() >= 3 && !p.contains('*') && count(&s, p) == 1 {
                assert!(!shown.contains(p.as_str()), "the password {p:?} is shown: {shown:?}");
            }
        }
    }
});
