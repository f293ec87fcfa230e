//! Features: small declarative TOML files saying what a capability needs and when it
//! applies. Built-ins ship inside leanrd (the repository's `features/` directory); files in
//! /etc/leanrd/features.d/ add features or override built-ins of the same name.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use leanrd_archive::{Context, Result, bail, invalid};
use leanrd_contract::Capability;
use serde::Deserialize;

use crate::stack::StackLayer;

/// When a feature is in the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum When {
    /// Always.
    Always,
    /// When host detection finds its condition (`fstypes`, `stack`); always in --universal.
    #[default]
    Detected,
    /// Only in --universal builds (host-only finds these drivers by modalias instead).
    Universal,
    /// Only with --include.
    Requested,
    /// When host detection finds its condition, or with --include; never by --universal
    /// alone: a software configuration (a network root) that a universal image would carry
    /// for nothing on the machines that do not use it.
    Needed,
}

/// One feature, as its TOML file declares it (see [`FEATURE_KEYS`] for what each key means).
#[derive(Debug, Clone, Deserialize, Default)]
// Every field may be left out.
#[serde(deny_unknown_fields, default)]
pub struct Feature {
    /// The feature's name: its file's name without `.toml`.
    #[serde(skip)]
    pub name: String,
    /// What the feature is for (`leanrd build` lists features by it).
    pub description: String,
    /// When it is in the image.
    pub when: When,
    /// Detected when the root's (or /usr's) file system type is one of these.
    pub fstypes: Vec<String>,
    /// Detected when the root's block stack has one of these layers.
    pub stack: Vec<StackLayer>,
    /// Detected when the host's kernel command line has one of these words and every binary
    /// of the feature is installed.
    pub cmdline: Vec<String>,
    /// Other features (by name) in the image whenever this one is, as required as it is.
    pub requires: Vec<String>,
    /// Module names, aliases (`fs-ext4`), or globs over the module tree (contain a `/`).
    pub modules: Vec<String>,
    /// Modules added only in --universal builds.
    pub universal_modules: Vec<String>,
    /// Programs, found in the sysroot's PATH directories (see `leanrd_contract::SEARCH_PATH`), each
    /// with the shared libraries it needs.
    pub binaries: Vec<String>,
    /// The distribution package that provides the binaries (named in warnings).
    pub package: Option<String>,
    /// The program that checks the feature's file systems (`e2fsck`): in the image when the
    /// initramfs mounts the root or /usr read-write and the fstab's pass number asks
    /// (host-only), or when installed (universal).
    pub fsck: Option<String>,
    /// Libraries loaded with dlopen (not in DT_NEEDED).
    pub libraries: Vec<String>,
    /// Files copied as they are (missing ones are skipped with a warning).
    pub files: Vec<String>,
    /// Directories made in the image.
    pub dirs: Vec<String>,
    /// Firmware files under /lib/firmware.
    pub firmware: Vec<String>,
    /// Put CPU microcode in an early uncompressed segment.
    pub microcode: bool,
    /// The /init capability the feature turns on (`init = "luks"`): see
    /// [`leanrd_contract::Capability`].
    #[serde(rename = "init")]
    pub init_name: Option<String>,
    /// The capability `init_name` names, once the file is parsed.
    #[serde(skip)]
    pub init: Option<Capability>,
}

/// One key of a feature file, defined once: the form of its value and what it does. The
/// reference (docs/features.md, leanrd-features(5)) is made from this table and the built-in
/// features themselves; a test holds it against the keys [`Feature`] reads.
pub struct FeatureKey {
    /// The key in a feature file.
    pub key: &'static str,
    /// The form of its value.
    pub value: &'static str,
    /// What it does.
    pub doc: &'static str,
}

/// Every key a feature file can hold.
pub const FEATURE_KEYS: &[FeatureKey] = &[
    FeatureKey {
        key: "description",
        value: "\"TEXT\"",
        doc: "What the feature is for (`leanrd build` lists features by it).",
    },
    FeatureKey {
        key: "when",
        value: "\"always\"|\"detected\"|\"universal\"|\"requested\"|\"needed\"",
        doc: "When it is in the image: always; detected (the default: when host detection finds its `fstypes` or \
              `stack`, and in every --universal image); universal (only in --universal images: host-only ones find \
              these drivers by modalias); requested (only with --include); needed (when detected, or with \
              --include, never by --universal alone: a software configuration such as a network root).",
    },
    FeatureKey {
        key: "fstypes",
        value: "[\"TYPE\", ...]",
        doc: "Detected when the root's (or /usr's) file system type is one of these.",
    },
    FeatureKey {
        key: "stack",
        value: "[\"LAYER\", ...]",
        doc: "Detected when the root's block stack has one of these layers (listed below).",
    },
    FeatureKey {
        key: "cmdline",
        value: "[\"WORD\", ...]",
        doc: "Detected when the kernel command line the host booted with (the one the image is built for) has one \
              of these words (`splash`), and every one of the feature's `binaries` is installed.",
    },
    FeatureKey {
        key: "requires",
        value: "[\"FEATURE\", ...]",
        doc: "Other features in the image whenever this one is.",
    },
    FeatureKey {
        key: "modules",
        value: "[\"MODULE\", ...]",
        doc: "Kernel modules: names, aliases (`fs-ext4`) or globs over the module tree (with a `/`), each with \
              what it depends on.",
    },
    FeatureKey {
        key: "universal_modules",
        value: "[\"MODULE\", ...]",
        doc: "Modules added in --universal images only.",
    },
    FeatureKey {
        key: "binaries",
        value: "[\"NAME\", ...]",
        doc: "Programs, found in the sysroot's PATH directories, each with the shared libraries it needs.",
    },
    FeatureKey {
        key: "package",
        value: "\"PACKAGES\"",
        doc: "The distribution packages that provide the binaries (named when one is missing).",
    },
    FeatureKey {
        key: "fsck",
        value: "\"PROGRAM\"",
        doc: "The checker of the feature's file systems (`e2fsck`): in the image when the initramfs mounts the root \
              or /usr read-write and fstab's pass number asks (host-only), or when installed (universal).",
    },
    FeatureKey {
        key: "libraries",
        value: "[\"NAME\", ...]",
        doc: "Libraries loaded with dlopen (not in any DT_NEEDED), by name or path under the library directories.",
    },
    FeatureKey {
        key: "files",
        value: "[\"PATH\", ...]",
        doc: "Files copied as they are (a missing one is skipped, with a warning when the machine needs the feature); `DIR/*.conf` (one `*`, in the last component) copies the files of DIR that match, if any.",
    },
    FeatureKey { key: "dirs", value: "[\"PATH\", ...]", doc: "Directories made in the image." },
    FeatureKey { key: "firmware", value: "[\"PATH\", ...]", doc: "Firmware files, under /lib/firmware." },
    FeatureKey {
        key: "microcode",
        value: "true|false",
        doc: "Put the CPU's microcode in an early uncompressed segment.",
    },
    FeatureKey {
        key: "init",
        value: "\"CAPABILITY\"",
        doc: "The /init capability the feature turns on (luks, lvm, md, nfs, iscsi, nvmf, live, rescue, ...).",
    },
];

/// The feature reference in Markdown: docs/features.md (the keys, then every built-in feature).
#[cfg(test)]
pub(crate) fn features_markdown() -> Result<String> {
    let mut s = String::from(
        "# Feature files\n\n<!-- Generated from crates/gen/src/features.rs (FEATURE_KEYS) and features/*.toml by \
         its unit tests (LEANRD_BLESS=1 rewrites it): edit those, not this. -->\n\n\
         A feature is a TOML file saying what a capability needs and when it applies; also `man 5 \
         leanrd-features`. The built-in ones are leanrd's features/*.toml; files in /etc/leanrd/features.d \
         (`features_dir`) add features, or replace a built-in one of the same name. Every key is optional; an \
         unknown key is an error naming the file and line.\n\n## Keys\n\n",
    );
    for k in FEATURE_KEYS {
        s += &format!("- `{} = {}`: {}\n", k.key, k.value, k.doc);
    }
    s += "\n## Stack layers\n\n";
    for d in crate::stack::LAYERS {
        s += &format!("- `{}`: {}\n", d.name, d.doc);
    }
    s += "\n## Built-in features\n\n| feature | when | what |\n|---|---|---|\n";
    for (name, f) in load(None)? {
        let when = format!("{:?}", f.when).to_lowercase();
        s += &format!("| {name} | {when} | {} |\n", f.description.replace('|', "\\|"));
    }
    Ok(s)
}

/// The repository's features/*.toml, by name (build.rs lists them).
const BUILTIN: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/builtin_features.rs"));

/// Refuse a NUL character in TOML text (literal, or written `\u0000` / `\U00000000`): every
/// string leanrd reads from TOML is a name or a path, where NUL cannot be, and later errors
/// could not say where it came from. The error names the file and line.
pub fn reject_nul(text: &str, origin: &str) -> Result<()> {
    for (i, line) in text.lines().enumerate() {
        let lower = line.to_ascii_lowercase();
        if line.contains('\0') || lower.contains("\\u0000") || lower.contains("\\u00000000") {
            bail!("{origin}:{}: a NUL character in a string: names and paths cannot hold one", i + 1);
        }
    }
    Ok(())
}

/// The feature `name` from its TOML `text`; an error, naming `origin` (and the line), for a NUL
/// character, invalid TOML, an unknown key or an unknown `init` capability.
pub fn parse(name: &str, text: &str, origin: &str) -> Result<Feature> {
    reject_nul(text, origin)?;
    let mut f: Feature = toml::from_str(text).map_err(|e| {
        // toml's message names the line and column.
        invalid!("{origin}: {}", e.to_string().trim_end())
    })?;
    f.name = name.to_string();
    if let Some(c) = &f.init_name {
        f.init = Some(Capability::from_name(c).with_context(|| {
            let known: Vec<&str> = Capability::ALL.iter().map(|c| c.name()).collect();
            format!("{origin}: init = {c:?} is not an /init capability ({})", known.join(", "))
        })?);
    }
    Ok(f)
}

/// Built-ins, then every `*.toml` in `dir` (overriding built-ins by name).
pub fn load(dir: Option<&Path>) -> Result<BTreeMap<String, Feature>> {
    let mut all = BTreeMap::new();
    for (name, text) in BUILTIN {
        all.insert(name.to_string(), parse(name, text, &format!("built-in feature {name}"))?);
    }
    if let Some(dir) = dir {
        let rd = match fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(all),
            Err(e) => return Err(e).with_context(|| format!("{}: cannot list", dir.display())),
        };
        let mut paths: Vec<_> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        paths.sort();
        for p in paths.into_iter().filter(|p| p.extension().is_some_and(|e| e == "toml")) {
            let name = p.file_stem().expect("has stem").to_string_lossy().into_owned();
            let text = fs::read_to_string(&p).with_context(|| format!("{}: cannot read", p.display()))?;
            all.insert(name.clone(), parse(&name, &text, &p.display().to_string())?);
        }
    }
    for f in all.values() {
        if let Some(r) = f.requires.iter().find(|r| !all.contains_key(r.as_str())) {
            bail!("feature {}: requires = [\"{r}\"], and there is no feature {r}", f.name);
        }
    }
    Ok(all)
}

/// One random mutation of TOML text (tokens that break strings, arrays and escapes put in,
/// characters cut or changed), for the parsers' fuzz tests; `state` is the generator's.
#[doc(hidden)]
#[cfg(test)]
pub(crate) fn mutate_toml(state: &mut u64, text: &str) -> String {
    let mut next = || {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    };
    let tokens = ["\\u0000", "\"", "[", "]", "=", "\n", "when", "\u{0}", "\u{ff}", "\'\'\'", "#", "1e99", "0o777"];
    let mut t: Vec<char> = text.chars().collect();
    for _ in 0..1 + next() % 4 {
        let at = next() as usize % (t.len() + 1);
        match next() % 3 {
            0 => {
                let tok = tokens[next() as usize % tokens.len()];
                t.splice(at..at, tok.chars());
            }
            1 => {
                let n = (next() as usize % 5).min(t.len() - at);
                t.drain(at..at + n);
            }
            _ => {
                if at < t.len() {
                    t[at] = char::from_u32((next() % 0x250) as u32).unwrap_or('x');
                }
            }
        }
    }
    t.into_iter().collect()
}

/// Check names given on the command line.
pub(crate) fn check_names(all: &BTreeMap<String, Feature>, names: &[String]) -> Result<()> {
    for n in names {
        if !all.contains_key(n) {
            bail!("unknown feature {n:?}; known: {}", all.keys().cloned().collect::<Vec<_>>().join(", "));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table and the keys a feature file takes are the same set (serde's own list), and
    /// the committed reference is what the table and the built-ins give.
    #[test]
    fn every_feature_key_is_documented_and_the_reference_current() {
        let e = parse("x", "no_such_key = 1\n", "x.toml").unwrap_err().to_string();
        crate::request::tests::assert_same_keys(&e, FEATURE_KEYS.iter().map(|k| k.key));
        let md = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/features.md");
        let want = features_markdown().unwrap();
        if std::env::var_os("LEANRD_BLESS").is_some() {
            fs::write(md, &want).unwrap();
        }
        assert!(
            fs::read_to_string(md).unwrap_or_default() == want,
            "{md}: run `LEANRD_BLESS=1 cargo test -p leanrd-gen`"
        );
    }

    #[test]
    fn builtins_parse() {
        let all = load(None).unwrap();
        assert!(all["base"].when == When::Always);
        assert_eq!(all["fs-ext4"].fstypes, ["ext4", "ext3", "ext2"]);
        assert_eq!(all["fs-ext4"].fsck.as_deref(), Some("e2fsck"));
        assert_eq!(all["fs-xfs"].fsck, None);
        assert!(all["luks"].binaries.contains(&"cryptsetup".to_string()));
        assert_eq!(all["luks"].init, Some(Capability::Luks));
        assert_eq!(all["mdraid"].init, Some(Capability::Md));
    }

    /// /init's diagnosis for a root the image cannot mount says `--include NAME`: the built-in
    /// feature of that name must turn on the capability the root needs.
    #[test]
    fn each_root_feature_is_the_feature_of_its_name() {
        let all = load(None).unwrap();
        for f in leanrd_contract::RootFeature::ALL {
            let feature = all.get(f.feature()).unwrap_or_else(|| panic!("no built-in feature {}", f.feature()));
            assert_eq!(feature.init, Some(f.capability()), "{}", f.feature());
        }
    }

    /// Bounded mutation fuzzing: every built-in feature text, mutated, parses or fails with
    /// an error naming the file; never a panic.
    #[test]
    fn mutated_features_never_panic() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for i in 0..3000 {
            let (_, text) = BUILTIN[i % BUILTIN.len()];
            let text = mutate_toml(&mut state, text);
            if let Err(e) = parse("x", &text, "x.toml") {
                assert!(e.to_string().starts_with("x.toml"), "case {i}: {e}");
            }
        }
    }

    #[test]
    fn errors_name_the_line_and_overrides_work() {
        let e = parse("x", "when = \"detected\"\nmodules = [1\n", "x.toml").unwrap_err().to_string();
        assert!(e.starts_with("x.toml:") && e.contains("line 2"), "{e}");
        let e = parse("x", "init = \"cifs\"\n", "x.toml").unwrap_err().to_string();
        assert_eq!(
            e,
            "x.toml: init = \"cifs\" is not an /init capability (luks, lvm, md, rescue, token, iscsi, nvmf, nbd, nfs, live, clevis, ssh, plymouth, bcache, integrity, multipath, zfs)"
        );
        let e = parse("x", "bogus = 1\n", "x.toml").unwrap_err().to_string();
        assert!(e.contains("bogus"), "{e}");
        let e = parse("x", "when = \"always\"\nfiles = [\"/etc/a\\u0000b\"]\n", "x.toml").unwrap_err().to_string();
        assert!(e.starts_with("x.toml:2: a NUL"), "{e}");
        let tmpdir = tempfile::tempdir().unwrap();
        let d = tmpdir.path().to_path_buf();
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("fs-ext4.toml"), "when = \"always\"\nmodules = [\"ext4\", \"crc32c_generic\"]\n").unwrap();
        fs::write(d.join("mine.toml"), "when = \"requested\"\nbinaries = [\"sh\"]\n").unwrap();
        let all = load(Some(&d)).unwrap();
        assert_eq!(all["fs-ext4"].when, When::Always);
        assert_eq!(all["mine"].binaries, ["sh"]);
        assert!(check_names(&all, &["nope".into()]).is_err());
        fs::write(d.join("mine.toml"), "when = \"requested\"\nrequires = [\"nowhere\"]\n").unwrap();
        let e = load(Some(&d)).unwrap_err().to_string();
        assert_eq!(e, "feature mine: requires = [\"nowhere\"], and there is no feature nowhere");
    }
}
