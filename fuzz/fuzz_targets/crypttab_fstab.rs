//! crypttab and fstab (crates/contract/src/crypttab.rs, fstab.rs): the generator reads the
//! system's, /init reads the new root's fstab for /usr (`leanrd_init::usr::from_fstab`).
//!
//! Holds to:
//! - nothing panics;
//! - every crypttab entry that parses survives the trip the generator gives it into the
//!   contract (a `crypt` line of `InitConfig`: encode, decode, the same entry);
//! - an entry whose words hold no white space is written back as a crypttab line that parses
//!   to the same entry; problems name lines that exist;
//! - every fstab entry, written back as an fstab line (octal escapes for white space and `\`),
//!   reads back the same; `fstab_entry` is the last entry for its mount point; the /usr /init
//!   picks is one of the fstab's /usr lines, and its options split into flags without a panic.

#![no_main]

use leanrd_contract::{Crypt, CryptEntry, InitConfig, fstab_entries, fstab_entry};
use leanrd_fuzz::fstab_escape;
use libfuzzer_sys::fuzz_target;

fn crypttab(text: &str) {
    let (entries, problems) = leanrd_contract::crypttab_entries(text);
    let lines = text.lines().count();
    for p in &problems {
        assert!((1..=lines).contains(&p.line), "problem on line {} of {lines}", p.line);
    }
    for (line, e) in entries {
        assert!((1..=lines).contains(&line));
        for needed in [true, false] {
            let c = InitConfig { crypt: vec![Crypt { entry: e.clone(), needed }], ..InitConfig::default() };
            let text = c.encode();
            let back = InitConfig::decode(&text).unwrap_or_else(|err| panic!("{e:?}: {err}\n{text}"));
            assert_eq!(back, c, "a crypttab entry changes in the contract:\n{text}");
        }
        let fields = [e.name.clone(), e.device.to_string(), e.key.to_string(), e.options.to_string()];
        if fields.iter().all(|f| !f.is_empty() && !f.contains(char::is_whitespace) && !f.starts_with('#')) {
            let words: Vec<&str> = fields.iter().map(String::as_str).collect();
            let (back, _) = CryptEntry::from_fields(&words).unwrap_or_else(|err| panic!("{fields:?}: {err}"));
            assert_eq!(back, e, "a crypttab entry written back as {fields:?} reads as another");
        }
    }
}

fn fstab(text: &str) {
    let entries = fstab_entries(text);
    let mut written = String::new();
    for e in &entries {
        let mut line = format!("{} {} {}", fstab_escape(&e.spec), fstab_escape(&e.file), e.vfstype);
        if let Some(o) = &e.mntops {
            line += &format!(" {o} 0 {}", e.passno);
        }
        written += &line;
        written.push('\n');
    }
    assert_eq!(fstab_entries(&written), entries, "fstab entries written back read as others:\n{written}");
    for e in entries.iter().take(8) {
        let want = e.file.trim_end_matches('/');
        let last = entries.iter().rfind(|x| x.file.trim_end_matches('/') == want);
        assert_eq!(fstab_entry(text, &e.file).as_ref(), last);
    }
    if let Some(u) = leanrd_init::usr::from_fstab(text) {
        let from = entries.iter().any(|e| e.file.trim_end_matches('/') == "/usr" && e.vfstype != "swap");
        assert!(from, "a /usr from no /usr line: {u:?}");
        let _ = leanrd_init::usr::flags_and_data(u.options.as_deref());
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    crypttab(&text);
    fstab(&text);
});
