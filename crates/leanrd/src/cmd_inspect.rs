//! `leanrd inspect` (what is in an image and what it costs on disk) and `leanrd diff` (what
//! changed between two images).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use leanrd_archive::names::{canonical, escape, symlink_target};
use leanrd_archive::read::{ReadEntry, Segment, SegmentEnd, Visitor};
use leanrd_compress::Format;
use leanrd_newc::FileKind;
use serde_json::json;
use sha2::{Digest, Sha256};

const INSPECT_EXAMPLES: &str = "\
Examples:
  leanrd inspect /boot/initrd.img-$(uname -r)      who made it, segments, kinds, the largest files
  leanrd inspect --top 20 IMG                      the 20 largest
  leanrd inspect --json IMG                        as JSON";

#[derive(Args)]
#[command(after_long_help = INSPECT_EXAMPLES)]
pub(crate) struct InspectArgs {
    image: PathBuf,
    /// How many of the largest entries to show.
    #[arg(long, default_value_t = 10)]
    top: usize,
    #[arg(long)]
    json: bool,
}

const DIFF_EXAMPLES: &str = "\
Examples:
  leanrd diff old.img new.img                       entries added, removed or changed
  leanrd diff /boot/initrd.img.old /boot/initrd.img  exit 0 when they hold the same";

#[derive(Args)]
#[command(after_long_help = DIFF_EXAMPLES)]
pub(crate) struct DiffArgs {
    a: PathBuf,
    b: PathBuf,
}

#[derive(Default)]
struct Seg {
    offset: u64,
    len: u64,
    format: Option<Format>,
    uncompressed: u64,
    entries: usize,
}

#[derive(Default)]
struct Inspector {
    segs: Vec<Seg>,
    format: Option<Format>,
    largest: Vec<(u64, String)>,
    kinds: BTreeMap<&'static str, (usize, u64)>,
    eligible: usize,
    aligned: usize,
    /// Where the image starts in the file (a UKI's .initrd section).
    /// A UKI's initramfs sections (offsets in the file); empty: the file is the image.
    parts: Vec<(u64, u64)>,
    /// Which generator made it, by the files only it puts in.
    generator: Option<&'static str>,
}

/// A generator's signature file: leanrd's /init configuration, dracut's module tree,
/// initramfs-tools' configuration.
fn generator_of(name: &str) -> Option<&'static str> {
    match name.trim_start_matches("./") {
        "etc/leanrd/init.conf" => Some("leanrd"),
        n if n.starts_with("usr/lib/dracut/") || n == "dracut-state.sh" => Some("dracut"),
        "conf/initramfs.conf" => Some("initramfs-tools"),
        _ => None,
    }
}

fn kind(name: &str, mode: u32, head: &[u8]) -> &'static str {
    let elf = head.starts_with(b"\x7fELF");
    if leanrd_kmod::is_module_file(name) {
        "modules"
    } else if name.contains("lib/firmware/") || name.starts_with("kernel/x86/microcode/") {
        "firmware"
    } else if elf && (name.contains(".so") || name.contains("/ld-linux")) {
        "libraries"
    } else if elf && mode & 0o111 != 0 {
        "binaries"
    } else {
        "other files"
    }
}

impl Visitor for Inspector {
    fn segment(&mut self, s: &Segment) -> leanrd_archive::Result<()> {
        self.format = Some(s.format);
        Ok(())
    }
    fn entry(&mut self, e: &ReadEntry, data: &mut dyn Read) -> leanrd_archive::Result<()> {
        let h = &e.header;
        if h.kind() != Some(FileKind::Regular) {
            return Ok(());
        }
        let name = e.name_lossy();
        if self.generator.is_none() {
            self.generator = generator_of(&name);
        }
        let mut head = [0u8; 4];
        let n = if h.filesize >= 4 { data.read(&mut head)? } else { 0 };
        let k = kind(&name, h.mode, &head[..n]);
        let slot = self.kinds.entry(k).or_default();
        slot.0 += 1;
        slot.1 += h.filesize as u64;
        self.largest.push((h.filesize as u64, name));
        if let Some(off) = e.data_offset
            && h.filesize >= 4096
        {
            self.eligible += 1;
            if leanrd_archive::read::file_offset(&self.parts, off).is_multiple_of(4096) {
                self.aligned += 1;
            }
        }
        Ok(())
    }
    fn segment_end(&mut self, s: &SegmentEnd) -> leanrd_archive::Result<()> {
        self.segs.push(Seg {
            offset: s.offset,
            len: s.len,
            format: self.format,
            uncompressed: s.uncompressed,
            entries: s.entries,
        });
        Ok(())
    }
}

pub(crate) fn inspect(a: InspectArgs) -> Result<ExitCode> {
    let f = File::open(&a.image).with_context(|| format!("{}: cannot open", a.image.display()))?;
    // A UKI: its .initrd section (after its .ucode, where it has one) is the image;
    // alignment counts in the file.
    let mut v = Inspector { parts: leanrd_archive::read::uki_initramfs(&f), ..Default::default() };
    let uki = v.parts.last().copied();
    leanrd_archive::read::read_image_file(f.try_clone().context("cannot reopen the image")?, &mut v)?;
    v.largest.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
    v.largest.truncate(a.top);
    let size = f.metadata()?.len();
    let usage = leanrd_archive::fiemap::usage(&f).ok();
    let uki_usage = uki.and_then(|(o, l)| leanrd_archive::fiemap::usage_range(&f, o, l).ok());
    let share = if v.eligible == 0 { None } else { Some(100.0 * v.aligned as f64 / v.eligible as f64) };
    let u = if uki.is_some() { uki_sections(&f)? } else { UkiSections::default() };
    if a.json {
        let out = json!({
            "image": a.image,
            "size": size,
            "generator": v.generator,
            "uki": uki.map(|(o, l)| json!({"initrd_offset": o, "initrd_length": l,
                "initrd_fiemap": uki_usage.map(|u| json!({"total": u.total, "shared": u.shared, "exclusive": u.exclusive})),
                "sections": u.sections.iter().zip(&u.profile_of)
                    .map(|(s, p)| json!({"name": s.name, "offset": s.offset, "size": s.len, "profile": p,
                        "detail": u.details.get(&s.offset)})).collect::<Vec<_>>(),
                "pcrsig": u.pcrsigs.iter().find(|(p, _)| p.is_none()).map(|(_, v)| v),
                "profiles": u.profiles.iter().enumerate().map(|(i, text)| json!({"profile": i, "text": text,
                    "pcrsig": u.pcrsigs.iter().find(|(p, _)| *p == Some(i)).map(|(_, v)| v)})).collect::<Vec<_>>()})),
            "segments": v.segs.iter().map(|s| json!({"offset": s.offset, "length": s.len,
                "compression": s.format.map(|f| f.name()), "uncompressed": s.uncompressed, "entries": s.entries})).collect::<Vec<_>>(),
            "largest": v.largest.iter().map(|(n, name)| json!({"name": name, "size": n})).collect::<Vec<_>>(),
            "kinds": v.kinds.iter().map(|(k, (n, b))| (k.to_string(), json!({"files": n, "bytes": b}))).collect::<serde_json::Map<_, _>>(),
            "eligible": v.eligible,
            "aligned": v.aligned,
            "aligned_percent": share,
            "fiemap": usage.map(|u| json!({"total": u.total, "shared": u.shared, "exclusive": u.exclusive, "extents": u.extents})),
        });
        outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    outln!("{}: {size} bytes, {} segment(s)", a.image.display(), v.segs.len());
    if let Some(g) = v.generator {
        outln!("made by {g}");
    }
    if let Some((o, l)) = uki {
        match v.parts.first().filter(|_| v.parts.len() > 1) {
            Some((uo, ul)) => outln!(
                "a Unified Kernel Image: its .ucode section ({ul} bytes at offset {uo}, the early microcode) and \
                 .initrd section ({l} bytes at offset {o}) are the image read here"
            ),
            None => {
                outln!("a Unified Kernel Image: its .initrd section ({l} bytes at offset {o}) is the image read here")
            }
        }
        if let Some(u) = uki_usage {
            outln!("  .initrd on disk: {} bytes shared with other files, {} exclusive", u.shared, u.exclusive);
        }
        outln!("  {:<10} {:>7} {:>12} {:>12}", "section", "profile", "offset", "size");
        for (s, p) in u.sections.iter().zip(&u.profile_of) {
            let p = p.map_or("base".to_string(), |p| p.to_string());
            outln!("  {:<10} {:>7} {:>12} {:>12}", s.name, p, s.offset, s.len);
            for line in u.details.get(&s.offset).into_iter().flatten() {
                outln!("               {line}");
            }
        }
        if !u.profiles.is_empty() {
            outln!(
                "  profiles: each the base's sections with its own in their place; the stub starts profile 0, or N \
                 when its load options begin with @N"
            );
            for (i, text) in u.profiles.iter().enumerate() {
                let own: Vec<&str> = u
                    .sections
                    .iter()
                    .zip(&u.profile_of)
                    .filter(|(s, p)| **p == Some(i) && s.name != ".profile")
                    .map(|(s, _)| s.name.as_str())
                    .collect();
                let own = if own.is_empty() { String::new() } else { format!(" (its own {})", own.join(" ")) };
                outln!("    {i}: {}{own}", text.lines().collect::<Vec<_>>().join(" "));
            }
        }
        for (p, sig) in &u.pcrsigs {
            let whose = p.map_or(String::new(), |p| format!(" of profile {p}"));
            outln!(
                "  signed PCR predictions (.pcrsig{whose}): policy digests a TPM2 token enrolled with the .pcrpkey accepts"
            );
            for (bank, entries) in sig.as_object().into_iter().flatten() {
                for e in entries.as_array().into_iter().flatten() {
                    let pcrs: Vec<String> = e["pcrs"].as_array().into_iter().flatten().map(|p| p.to_string()).collect();
                    outln!(
                        "    {bank} PCR {}: policy {} (key {})",
                        pcrs.join("+"),
                        e["pol"].as_str().unwrap_or("?"),
                        e["pkfp"].as_str().unwrap_or("?")
                    );
                }
            }
        }
    }
    outln!("{:>4} {:>12} {:>12} {:>8} {:>14} {:>8}", "seg", "offset", "length", "format", "uncompressed", "entries");
    for (i, s) in v.segs.iter().enumerate() {
        outln!(
            "{i:>4} {:>12} {:>12} {:>8} {:>14} {:>8}",
            s.offset,
            s.len,
            s.format.map(|f| f.name()).unwrap_or("?"),
            s.uncompressed,
            s.entries
        );
    }
    outln!("files by kind:");
    for (k, (n, b)) in &v.kinds {
        outln!("  {k:<12} {n:>6} files {b:>12} bytes");
    }
    outln!("largest entries:");
    for (n, name) in &v.largest {
        outln!("  {n:>12} {name}");
    }
    match share {
        Some(p) => outln!("data aligned to 4096: {} of {} eligible files ({p:.1} %)", v.aligned, v.eligible),
        None => outln!("data aligned to 4096: no eligible files in uncompressed segments"),
    }
    match usage {
        Some(u) => outln!(
            "on disk (FIEMAP): total {} bytes, shared {} ({:.1} %), exclusive {} ({:.1} %), {} extents",
            u.total,
            u.shared,
            pct(u.shared, u.total),
            u.exclusive,
            pct(u.exclusive, u.total),
            u.extents
        ),
        None => outln!("on disk (FIEMAP): not supported by this file system"),
    }
    Ok(ExitCode::SUCCESS)
}

/// What a device-tree section is for: `.dtb` and `.dtbauto` show their root's model and
/// compatible (what the stub chooses a `.dtbauto` by), `.hwids` each machine's CHID and the
/// compatible it gets. A section that cannot be read says why.
fn section_detail(name: &str, b: &[u8]) -> Vec<String> {
    use leanrd_archive::devicetree;
    match name {
        ".hwids" => match devicetree::hwids_entries(b) {
            Ok(es) => es
                .iter()
                .map(|e| {
                    format!("CHID {} {:?} -> compatible {:?}", devicetree::chid_text(&e.chid), e.name, e.compatible)
                })
                .collect(),
            Err(e) => vec![format!("(not a .hwids table: {e})")],
        },
        ".dtb" | ".dtbauto" => match devicetree::root(b) {
            Ok(r) => vec![format!(
                "model {:?}, compatible {}",
                r.model.unwrap_or_default(),
                r.compatible.iter().map(|c| format!("{c:?}")).collect::<Vec<_>>().join(" ")
            )],
            Err(e) => vec![format!("(not a device tree: {e})")],
        },
        _ => Vec::new(),
    }
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { 100.0 * a as f64 / b as f64 }
}

/// What an entry is, for comparison.
#[derive(Debug, Clone)]
struct Ident {
    mode: u32,
    owner: (u32, u32),
    size: u32,
    digest: String,
    target: Option<Vec<u8>>,
    rdev: (u32, u32),
    /// The name as written (`./x`); entries are compared by the path they unpack to (`x`).
    spelling: Vec<u8>,
}

impl PartialEq for Ident {
    /// Equal as unpacked: the spelling of the name does not count.
    fn eq(&self, o: &Ident) -> bool {
        (self.mode, self.owner, self.size, &self.digest, &self.target, self.rdev)
            == (o.mode, o.owner, o.size, &o.digest, &o.target, o.rdev)
    }
}

/// Entries by (segment, the path they unpack to).
#[derive(Default)]
struct Collect(BTreeMap<(usize, Vec<u8>), Ident>);

impl Visitor for Collect {
    fn entry(&mut self, e: &ReadEntry, data: &mut dyn Read) -> leanrd_archive::Result<()> {
        let h = &e.header;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut target = None;
        if h.kind() == Some(FileKind::Symlink) {
            let mut t = Vec::new();
            data.take(leanrd_newc::PATH_MAX as u64 + 1).read_to_end(&mut t)?;
            target = Some(symlink_target(&t).to_vec());
        } else if h.filesize > 0 {
            loop {
                let n = data.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
            }
        }
        let digest: String = hasher.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
        let id = Ident {
            mode: h.mode,
            owner: (h.uid, h.gid),
            size: h.filesize,
            digest,
            target,
            rdev: (h.rdev_major, h.rdev_minor),
            spelling: e.name.clone(),
        };
        let key = (e.segment, canonical(&e.name).into_owned());
        // Hard-link members without data: keep the member that carries it.
        match self.0.get(&key) {
            Some(old) if h.filesize == 0 && old.size > 0 => {}
            _ => {
                self.0.insert(key, id);
            }
        }
        Ok(())
    }
}

/// A canonical name for display: `.` for the root itself.
fn shown(name: &[u8]) -> String {
    if name.is_empty() { ".".into() } else { escape(name) }
}

fn collect(p: &Path) -> Result<BTreeMap<(usize, Vec<u8>), Ident>> {
    let mut c = Collect::default();
    crate::cmd_read::walk(p, &mut c)?;
    Ok(c.0)
}

pub(crate) fn diff(a: DiffArgs) -> Result<ExitCode> {
    let (x, y) = (collect(&a.a)?, collect(&a.b)?);
    let mut n = 0;
    let mut spelled = 0;
    for (k, v) in &x {
        let shown = shown(&k.1);
        match y.get(k) {
            None => {
                outln!("- segment {} {shown}", k.0);
                n += 1;
            }
            Some(w) if w != v => {
                let mut what = Vec::new();
                if v.mode != w.mode {
                    what.push(format!("mode {:o} -> {:o}", v.mode, w.mode));
                }
                if v.owner != w.owner {
                    what.push(format!("owner {}:{} -> {}:{}", v.owner.0, v.owner.1, w.owner.0, w.owner.1));
                }
                if v.size != w.size {
                    what.push(format!("size {} -> {}", v.size, w.size));
                }
                if v.digest != w.digest && v.size == w.size {
                    what.push("content".into());
                }
                if v.target != w.target {
                    let t = |t: &Option<Vec<u8>>| escape(t.as_deref().unwrap_or_default());
                    what.push(format!("target {:?} -> {:?}", t(&v.target), t(&w.target)));
                }
                if v.rdev != w.rdev {
                    what.push(format!("device {}:{} -> {}:{}", v.rdev.0, v.rdev.1, w.rdev.0, w.rdev.1));
                }
                outln!("~ segment {} {shown}: {}", k.0, what.join(", "));
                n += 1;
            }
            Some(w) if w.spelling != v.spelling => spelled += 1,
            _ => {}
        }
    }
    for k in y.keys().filter(|k| !x.contains_key(*k)) {
        outln!("+ segment {} {}", k.0, shown(&k.1));
        n += 1;
    }
    if spelled > 0 {
        outln!("{spelled} entries are the same but spelled differently (e.g. ./x and x: they unpack to one path)");
    }
    if n == 0 {
        outln!("{} and {} hold the same entries", a.a.display(), a.b.display());
        Ok(ExitCode::SUCCESS)
    } else {
        outln!("{n} difference(s)");
        Ok(ExitCode::FAILURE)
    }
}

/// What `inspect` shows of a UKI's sections.
#[derive(Default)]
struct UkiSections {
    /// Every section, in the section table's order.
    sections: Vec<leanrd_archive::uki::Section>,
    /// The profile each section belongs to (None: the base, before the first `.profile`).
    profile_of: Vec<Option<usize>>,
    /// Each profile's `.profile` text, by number.
    profiles: Vec<String>,
    /// Each `.pcrsig` (signed PCR predictions), with the profile it belongs to.
    pcrsigs: Vec<(Option<usize>, serde_json::Value)>,
    /// What device-tree sections hold, by their offset (section_detail).
    details: BTreeMap<u64, Vec<String>>,
}

/// A UKI's sections, its profiles and its `.pcrsig`s.
fn uki_sections(f: &File) -> Result<UkiSections> {
    use std::os::unix::fs::FileExt;
    let mut head = vec![0u8; 65536];
    let n = f.read_at(&mut head, 0).context("cannot read the UKI's headers")?;
    let mut u = UkiSections { sections: leanrd_archive::uki::sections(&head[..n]), ..Default::default() };
    let data = |s: &leanrd_archive::uki::Section, what: &str| -> Result<Vec<u8>> {
        let mut d = vec![0u8; s.len.min(1 << 20) as usize];
        f.read_exact_at(&mut d, s.offset).with_context(|| format!("cannot read the UKI's {what}"))?;
        Ok(d)
    };
    let mut current = None;
    for s in &u.sections {
        if s.name == ".profile" {
            current = Some(u.profiles.len());
            u.profiles.push(String::from_utf8_lossy(&data(s, ".profile")?).trim_end_matches('\0').to_string());
        }
        u.profile_of.push(current);
        if [".dtb", ".dtbauto", ".hwids"].contains(&s.name.as_str()) {
            u.details.insert(s.offset, section_detail(&s.name, &data(s, &s.name)?));
        }
        if s.name == ".pcrsig" {
            let d = data(s, ".pcrsig")?;
            let sig =
                serde_json::from_slice(&d).unwrap_or_else(|e| serde_json::Value::String(format!("not JSON: {e}")));
            u.pcrsigs.push((current, sig));
        }
    }
    Ok(u)
}
