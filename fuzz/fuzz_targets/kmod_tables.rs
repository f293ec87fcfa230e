//! The module tables (crates/kmod/src/tables.rs `ModuleDb::parse`): /init reads the image's
//! modules.dep, modules.alias, modules.softdep, modules.builtin and modules.builtin.modinfo,
//! the generator the system's. The input is the five tables one after another, separated by
//! the bytes `\n\xff\n`.
//!
//! Holds to:
//! - nothing panics or hangs (resolution of names, aliases and modaliases included, over
//!   cycles in dependencies and soft dependencies);
//! - an error names a table and a line that exists;
//! - the tables the generator writes for all the modules (`ModuleDb::subset`, with
//!   modules.builtin.modinfo as it was, which the writer leaves out) parse, and resolve every
//!   name and alias to the same modules to load; writing them again gives the same tables
//!   (for tables that do not call a module both built in and a file, as depmod never does).

#![no_main]

use std::collections::BTreeSet;

use leanrd_kmod::{ModuleDb, Resolved, Tables};
use libfuzzer_sys::fuzz_target;

const SEP: &[u8] = b"\n\xff\n";

fn split(data: &[u8]) -> Tables {
    let mut parts: Vec<&[u8]> = Vec::new();
    let mut rest = data;
    while parts.len() < 4 {
        match rest.windows(SEP.len()).position(|w| w == SEP) {
            Some(i) => {
                parts.push(&rest[..i]);
                rest = &rest[i + SEP.len()..];
            }
            None => break,
        }
    }
    parts.push(rest);
    parts.resize(5, &[]);
    Tables {
        dep: parts[0].to_vec(),
        alias: parts[1].to_vec(),
        softdep: parts[2].to_vec(),
        builtin: parts[3].to_vec(),
        builtin_modinfo: parts[4].to_vec(),
    }
}

/// What a resolution makes /init load.
fn loads(r: Resolved) -> Vec<String> {
    match r {
        Resolved::Modules(m) => m,
        Resolved::Builtin | Resolved::Missing => Vec::new(),
    }
}

fuzz_target!(|data: &[u8]| {
    let t = split(data);
    let db = match ModuleDb::parse(&t) {
        Ok(db) => db,
        Err(e) => {
            let table = match e.file {
                "modules.dep" => &t.dep,
                "modules.alias" => &t.alias,
                "modules.softdep" => &t.softdep,
                other => panic!("an error in {other}"),
            };
            let lines = String::from_utf8_lossy(table).lines().count();
            assert!((1..=lines).contains(&e.line), "{e} (of {lines} lines)");
            return;
        }
    };
    // depmod never lists a module as built in and as a file: where tables say both, "an alias
    // only built-in modules provide" depends on which other modules the tables name, and a
    // subset names fewer. Such tables are only parsed.
    if db.paths.keys().any(|m| db.builtin.contains(m)) {
        return;
    }
    let all: BTreeSet<String> = db.paths.keys().cloned().collect();
    let mut written = db.subset(&all, |n| db.paths[n].clone());
    written.builtin_modinfo = t.builtin_modinfo.clone();
    let back = ModuleDb::parse(&written).unwrap_or_else(|e| panic!("the written tables do not parse: {e}"));
    let mut again = back.subset(&all, |n| back.paths[n].clone());
    again.builtin_modinfo = t.builtin_modinfo.clone();
    assert_eq!(again, written, "writing the tables read back gives other tables");

    // Names, aliases (as patterns and as words of the tables), and a few modaliases.
    let mut queries: BTreeSet<String> = BTreeSet::new();
    queries.extend(db.paths.keys().take(24).cloned());
    queries.extend(db.aliases.iter().take(24).map(|(p, _)| p.clone()));
    queries.extend(db.softdeps.keys().take(8).cloned());
    queries.extend(db.builtin.iter().take(8).cloned());
    let text = String::from_utf8_lossy(data);
    queries.extend(text.split_whitespace().take(24).map(str::to_string));
    queries.extend(
        ["fs-ext4", "pci:v00001AF4d00001042sv00001AF4sd00001100bc01sc00i00", "crypto-crc32c"].map(String::from),
    );
    for q in &queries {
        let (a, b) = (db.resolve(q), back.resolve(q));
        if db.paths.contains_key(&leanrd_kmod::normalize(q)) {
            assert_eq!(a, b, "{q:?} resolves otherwise from the written tables");
        } else {
            assert_eq!(loads(a), loads(b), "{q:?} loads other modules from the written tables");
        }
    }
});
