//! Feature files (crates/gen/src/features.rs `parse`: /etc/leanrd/features.d/*.toml) and the
//! configuration file (crates/gen/src/request.rs `Settings::parse`: /etc/leanrd/leanrd.toml),
//! on the same text.
//!
//! Holds to:
//! - nothing panics;
//! - an error names the file it is about;
//! - no string read from either holds a NUL (`reject_nul`'s promise: every one is a name or a
//!   path, where a NUL cannot be), however the TOML spells it;
//! - a feature's `/init` capability is the one its `init` names.

#![no_main]

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use leanrd_gen::features;
use leanrd_gen::request::Settings;
use libfuzzer_sys::fuzz_target;

fn no_nul<'a>(what: &str, strings: impl IntoIterator<Item = &'a str>) {
    for s in strings {
        assert!(!s.contains('\0'), "{what}: a NUL got through in {s:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };

    match features::parse("fuzzed", text, "fuzzed.toml") {
        Err(e) => assert!(e.to_string().starts_with("fuzzed.toml"), "{e}"),
        Ok(f) => {
            assert_eq!(f.name, "fuzzed");
            let lists = [
                &f.fstypes,
                &f.requires,
                &f.modules,
                &f.universal_modules,
                &f.binaries,
                &f.libraries,
                &f.files,
                &f.dirs,
                &f.firmware,
            ];
            no_nul("feature", lists.into_iter().flatten().map(String::as_str));
            no_nul("feature", [&f.package, &f.fsck, &f.init_name].into_iter().flatten().map(String::as_str));
            no_nul("feature", [f.description.as_str()]);
            assert_eq!(f.init, f.init_name.as_deref().and_then(leanrd_contract::Capability::from_name));
            // Stack layers are only names the table has, and read back by them.
            for l in &f.stack {
                assert_eq!(leanrd_gen::StackLayer::from_name(l.name()), Some(*l));
            }
        }
    }

    match Settings::parse(text, Path::new("leanrd.toml")) {
        Err(e) => assert!(e.to_string().starts_with("leanrd.toml"), "{e}"),
        Ok(s) => {
            no_nul("settings", [&s.include, &s.exclude, &s.omit_modules].into_iter().flatten().map(String::as_str));
            no_nul("settings", s.output.as_deref());
            for p in [&s.init, &s.features_dir].into_iter().flatten() {
                assert!(!p.as_os_str().as_bytes().contains(&0), "settings: a NUL got through in {p:?}");
            }
            if let Some(m) = s.image_mode {
                assert!(m <= 0o7777);
            }
            if let Some(a) = s.data_align {
                assert!(leanrd_archive::layout::check_data_align(a).is_ok());
            }
        }
    }
});
