//! The binary formats leanrd reads besides newc: Unified Kernel Images (`uki::initrd_section`,
//! which `leanrd ls`/`check`/`extract` try on every image file, and the UKI writer's reading
//! of an EFI stub), glibc's ld.so.cache (`elf::LdCache::parse`) and kernel modules as `leanrd
//! verify` reads them from an image (`modules::ModuleFile::read`: compression by magic, ELF
//! `.modinfo`). The same bytes go to each.
//!
//! Holds to:
//! - nothing panics;
//! - a UKI's initramfs (`.ucode`, then `.initrd`) is read through its window as the same
//!   archive as those bytes alone, one after the other;
//! - a stub the UKI writer accepts gives a UKI whose `.initrd` the reader finds where the
//!   writer put it, and lists as the archive written there, and whose first `.sbat` is the
//!   merged one the writer was given; the same stub as an add-on's has the `.cmdline` and
//!   `.sbat` it was given and no initramfs;
//! - ld.so.cache entries that parse, written back as a cache (a reference writer of glibc's
//!   format), parse to the same entries;
//! - a module's facts are the bytes' (ELF magic, signature mark, `.modinfo` firmware);
//! - a device tree's root and a `.hwids` table are read or refused, never a panic, and a
//!   `.hwids` written from entries reads back as as many entries.

#![no_main]

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::OnceLock;

use leanrd_archive::read::{ReadEntry, Visitor, read_image, read_image_file};
use leanrd_archive::uki;
use leanrd_gen::LdCache;
use leanrd_gen::ModuleFile;
use libfuzzer_sys::fuzz_target;

#[derive(Default)]
struct Names(Vec<(Vec<u8>, u32)>);
impl Visitor for Names {
    fn entry(&mut self, e: &ReadEntry, _: &mut dyn Read) -> leanrd_archive::Result<()> {
        self.0.push((e.name.clone(), e.header.filesize));
        Ok(())
    }
}

fn listing(r: leanrd_archive::Result<()>, n: Names) -> (bool, Vec<(Vec<u8>, u32)>) {
    (r.is_ok(), n.0)
}

/// A small archive the writer's `.initrd` holds.
const INITRD: &[u8] = b"07070100000001000041ED0000000000000000000000020000000000000000000000000000000000000000000000000000000200000000d\0\
    070701000000020000A1FF0000000000000000000000010000000000000006000000000000000000000000000000000000000400000000d/l\0\0\0target\0\0\
    07070100000000000000000000000000000000000000010000000000000000000000000000000000000000000000000000000B00000000TRAILER!!!\0\0\0\0";

fn paths() -> &'static (PathBuf, PathBuf, PathBuf) {
    static P: OnceLock<(PathBuf, PathBuf, PathBuf)> = OnceLock::new();
    P.get_or_init(|| {
        let d = leanrd_fuzz::scratch();
        let kernel = d.join("vmlinuz");
        std::fs::write(&kernel, vec![0x4b; 5000]).unwrap();
        (d.join("stub.efi"), kernel, d.join("uki.efi"))
    })
}

/// The writer on the bytes as a stub, when they are small and align sections to at most
/// 4 KiB: the UKI's checksum adds up every 16-bit word of it, which under the fuzzer's
/// instrumentation costs tens of milliseconds for a real stub's 100 KiB (whose UKIs the boot
/// tests make) or 64 KiB alignments (PE's largest).
fn uki_writer(data: &[u8]) {
    if data.len() > 32 << 10 {
        return;
    }
    let Ok(pe) = goblin::pe::PE::parse(data) else { return };
    let Some(oh) = pe.header.optional_header else { return };
    if oh.windows_fields.file_alignment > 0x1000 {
        return;
    }
    let (stub, kernel, out_path) = paths();
    std::fs::write(stub, data).unwrap();
    let out = File::options().read(true).write(true).create(true).truncate(true).open(out_path).unwrap();
    // A merged .sbat, as long as the stub's own and a line per 64 bytes of input: over the
    // stub's where it fits, else a section of its own.
    let own = uki::section_data(data, ".sbat").unwrap_or_default();
    let extra: String = (0..data.len() / 64).map(|i| format!("fuzz{i},1,F,fuzz,1,x\n")).collect();
    let sbat = uki::merge_sbat(&[own, format!("{}\n{extra}", uki::SBAT_HEADER).as_bytes()]);
    let parts = uki::Parts {
        small: vec![(".osrel", b"ID=fuzz\n".to_vec()), (".cmdline", b"quiet".to_vec())],
        reserve: vec![(".pcrsig", 64)],
        kernel,
        sbat: Some(sbat.clone()),
        // Odd inputs: a multi-profile UKI, a profile with its own .cmdline and room for its
        // own .pcrsig after the base.
        profiles: if data.len() % 2 == 1 {
            vec![uki::Profile {
                small: vec![(".profile", b"ID=fuzz\n".to_vec()), (".cmdline", b"profile\0".to_vec())],
                reserve: vec![(".pcrsig", 64)],
            }]
        } else {
            Vec::new()
        },
    };
    let r = uki::write(&out, stub, &parts, |f, at| {
        f.write_all_at(INITRD, at)?;
        Ok(at + INITRD.len() as u64)
    });
    let Ok(layout) = r else { return };
    // The room kept for a signature is there to fill.
    uki::fill(&out, ".pcrsig", br#"{"sha256":[]}"#).expect("fill the .pcrsig the writer kept room for");
    if !parts.profiles.is_empty() {
        uki::fill_nth(&out, ".pcrsig", 1, br#"{"sha1":[]}"#).expect("fill the profile's .pcrsig");
        let mut all = vec![0u8; out.metadata().unwrap().len() as usize];
        out.read_exact_at(&mut all, 0).unwrap();
        let pe = goblin::pe::PE::parse(&all).expect("the UKI parses");
        // Virtual addresses ascend in the table, each section's memory before the next's.
        let size = pe.header.optional_header.unwrap().windows_fields.size_of_image;
        let va: Vec<u32> = pe.sections.iter().map(|s| s.virtual_address).collect();
        for (i, s) in pe.sections.iter().enumerate().skip(pe.sections.len().saturating_sub(9)) {
            let next = va.get(i + 1).copied().unwrap_or(size);
            assert!(s.virtual_address + s.virtual_size <= next, "section {i} runs into the next: {va:?}");
        }
        let names: Vec<String> = uki::sections(&all).into_iter().map(|s| s.name).collect();
        let tail: Vec<&str> = names.iter().rev().take(3).rev().map(String::as_str).collect();
        assert_eq!(tail, [".profile", ".cmdline", ".pcrsig"], "the profile's sections end the table");
    }
    let mut head = vec![0u8; 4096];
    let n = out.read_at(&mut head, 0).unwrap();
    assert_eq!(
        uki::initrd_section(&head[..n]),
        Some((layout.initrd_offset, layout.initrd_len)),
        "the reader does not find the .initrd the writer wrote"
    );
    // The .sbat shim reads (the first section so named) is the merged one.
    let mut all = vec![0u8; out.metadata().unwrap().len() as usize];
    out.read_exact_at(&mut all, 0).unwrap();
    assert_eq!(uki::section_data(&all, ".sbat"), Some(sbat.as_slice()), "the UKI's .sbat is not the merged one");
    let mut names = Names::default();
    let r = read_image_file(out.try_clone().unwrap(), &mut names);
    let mut want = Names::default();
    let w = read_image(INITRD, &mut want);
    assert_eq!(listing(r, names), listing(w, want), "the UKI's archive lists otherwise than the archive");
    // The same stub as an add-on's: its .cmdline and the merged .sbat are there to read, and
    // it has no initramfs.
    let _ = uki::loader_info(data);
    let out = File::options().read(true).write(true).create(true).truncate(true).open(out_path).unwrap();
    if uki::write_addon(&out, stub, vec![(".cmdline", b"quiet\0".to_vec())], Some(sbat.clone())).is_ok() {
        let mut all = vec![0u8; out.metadata().unwrap().len() as usize];
        out.read_exact_at(&mut all, 0).unwrap();
        assert_eq!(uki::section_data(&all, ".cmdline"), Some(&b"quiet\0"[..]), "the add-on's .cmdline");
        assert_eq!(uki::section_data(&all, ".sbat"), Some(sbat.as_slice()), "the add-on's .sbat");
        assert!(uki::initramfs_sections(&all).is_empty(), "an add-on with an initramfs");
    }
}

/// glibc's ld.so.cache format (dl-cache.h, the new format alone), written from entries.
fn ld_cache(libs: &HashMap<String, String>) -> Vec<u8> {
    let mut entries: Vec<(&String, &String)> = libs.iter().collect();
    entries.sort();
    let header = 48 + 24 * entries.len();
    let mut strings: Vec<u8> = Vec::new();
    let mut b = b"glibc-ld.so.cache1.1".to_vec();
    b.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    b.resize(48, 0);
    for (k, v) in &entries {
        let key = header + strings.len();
        strings.extend_from_slice(k.as_bytes());
        strings.push(0);
        let value = header + strings.len();
        strings.extend_from_slice(v.as_bytes());
        strings.push(0);
        b.extend_from_slice(&0x0303i32.to_le_bytes());
        b.extend_from_slice(&(key as u32).to_le_bytes());
        b.extend_from_slice(&(value as u32).to_le_bytes());
        b.extend_from_slice(&[0; 12]);
    }
    b.extend_from_slice(&strings);
    b
}

fuzz_target!(|data: &[u8]| {
    // The initramfs of a UKI (its .ucode, where it has one, then its .initrd), through the
    // file's window, is the archive in those bytes one after the other.
    let head = &data[..data.len().min(4096)];
    let parts = uki::initramfs_sections(head);
    if !parts.is_empty() {
        let f = leanrd_fuzz::memfile(data).try_clone().unwrap();
        let mut through = Names::default();
        let r = read_image_file(f, &mut through);
        let bytes: Option<Vec<u8>> = parts
            .iter()
            .map(|&(off, len)| data.get(off as usize..(off.saturating_add(len)) as usize))
            .collect::<Option<Vec<&[u8]>>>()
            .map(|v| v.concat());
        if let Some(bytes) = bytes {
            let mut alone = Names::default();
            let w = read_image(bytes.as_slice(), &mut alone);
            assert_eq!(listing(r, through), listing(w, alone), "a UKI's initramfs reads otherwise through its window");
        }
    }
    uki_writer(data);

    // A device tree's root and a .hwids table are read or refused; a table read back is
    // written again as the same entries (when its strings are where the writer puts them).
    let _ = leanrd_archive::devicetree::root(data);
    if let Ok(entries) = leanrd_archive::devicetree::hwids_entries(data) {
        let devices: Vec<leanrd_archive::devicetree::HwidDevice> = entries
            .iter()
            .filter(|e| e.kind == 1 && !e.name.is_empty() && !e.compatible.is_empty())
            .map(|e| leanrd_archive::devicetree::HwidDevice {
                name: e.name.clone(),
                compatible: e.compatible.clone(),
                chids: vec![e.chid],
            })
            .collect();
        let again = leanrd_archive::devicetree::hwids_entries(&leanrd_archive::devicetree::hwids_section(&devices))
            .expect("a written .hwids reads back");
        // Each device's CHIDs sorted and each once, with its own name and compatible.
        let mut want: Vec<(String, String, [u8; 16])> = Vec::new();
        for d in &devices {
            let mut c = d.chids.clone();
            c.sort_unstable();
            c.dedup();
            want.extend(c.into_iter().map(|c| (d.name.clone(), d.compatible.clone(), c)));
        }
        let got: Vec<(String, String, [u8; 16])> =
            again.into_iter().map(|e| (e.name, e.compatible, e.chid)).collect();
        assert_eq!(got, want, "a written .hwids reads back otherwise");
    }

    if let Ok(cache) = LdCache::parse(data) {
        let back = LdCache::parse(&ld_cache(&cache.libs)).expect("a written cache parses");
        assert_eq!(back.libs, cache.libs, "ld.so.cache entries written back read otherwise");
    }

    let m = ModuleFile::read(data, None);
    if m.compression.is_none() {
        assert_eq!(m.elf, data.starts_with(b"\x7fELF"));
        assert_eq!(m.signed, data.ends_with(leanrd_gen::MODULE_SIG_STRING));
        assert_eq!(m.firmware, leanrd_gen::modinfo(data, "firmware"));
        assert!(m.corrupt.is_none());
    }
});
