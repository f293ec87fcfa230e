//! Unified Kernel Images: systemd's EFI stub (`linuxx64.efi.stub`) with the kernel, the
//! initramfs, the command line, os-release and the kernel version added as PE sections, one
//! EFI executable that firmware or systemd-boot starts and Secure Boot signs as one unit.
//!
//! The stub is parsed with goblin; the layout of the added sections is written here (no crate
//! appends sections to a PE image): each section's raw data at a file offset that is a
//! multiple of the file alignment, its virtual address after the previous one's on a page
//! boundary, SizeOfImage and the checksum recomputed. `.initrd` and `.linux` start at file
//! offsets that are multiples of the output file system's block size, so that an uncompressed
//! archive written there with data aligned to blocks, and the kernel file, are cloned from
//! their sources on XFS and Btrfs rather than copied.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use goblin::pe::PE;

use crate::error::{Context, Result, bail};

/// IMAGE_SCN_CNT_INITIALIZED_DATA | IMAGE_SCN_MEM_READ, as ukify gives its sections.
const DATA_READ: u32 = 0x4000_0040;
const SECTION_HEADER: usize = 40;
const PAGE: u64 = 4096;

/// What goes into a UKI beside the stub.
pub struct Parts<'a> {
    /// Small sections written as given, in this order: `.osrel`, `.cmdline`, `.dtb`, `.uname`,
    /// `.ucode`, `.splash` (names without their data are left out).
    pub small: Vec<(&'a str, Vec<u8>)>,
    /// Sections whose data is known only once the UKI is written (`.pcrsig`, which signs
    /// the others' measurements), with the room kept for each: empty until [`fill`]ed.
    pub reserve: Vec<(&'a str, u64)>,
    /// The kernel image (`.linux`, the last section: cloned to the end of the file).
    pub kernel: &'a Path,
    /// The `.sbat` section's text ([`merge_sbat`]), in place of the stub's own: over its data
    /// where it fits, else as a section of its own (the stub's renamed `.sbat-st`, which
    /// nothing reads). None: the stub's is kept.
    pub sbat: Option<Vec<u8>>,
    /// The profiles of a multi-profile UKI (systemd-stub 257 and later), in order: profile 0
    /// (the stub's default) first. Empty: a UKI of one profile, the base alone.
    pub profiles: Vec<Profile<'a>>,
}

/// One profile of a multi-profile UKI: the sections that follow the base's, its `.profile`
/// first. The stub starts profile N (`@N`, the first word of its load options; 0 without
/// one) with the base's sections, each replaced by the profile's of the same name.
#[derive(Debug, Clone, Default)]
pub struct Profile<'a> {
    /// Its sections, written as given, `.profile` first (its os-release-style text: `ID=`,
    /// `TITLE=`), then those it has in place of the base's (`.cmdline`, `.dtb`).
    pub small: Vec<(&'a str, Vec<u8>)>,
    /// Its sections filled after the UKI is written ([`fill_nth`]: its own `.pcrsig`), with
    /// the room kept for each.
    pub reserve: Vec<(&'a str, u64)>,
}

/// The first line of every SBAT text: the format's own generation.
pub const SBAT_HEADER: &str = "sbat,1,SBAT Version,sbat,1,https://github.com/rhboot/shim/blob/main/SBAT.md";

/// The line ukify adds for the UKI itself, when the user gives no SBAT text of their own.
pub const SBAT_UKI: &str = "uki,1,UKI,uki,1,https://uapi-group.org/specifications/specs/unified_kernel_image/";

/// The line ukify gives an add-on when the user gives no SBAT text of their own.
pub const SBAT_ADDON: &str =
    "uki-addon,1,UKI Addon,addon,1,https://www.freedesktop.org/software/systemd/man/latest/systemd-stub.html";

/// One `.sbat` text from several (the stub's, the kernel's, the user's), as ukify merges them:
/// the header line once and first, then every other line of each in order, each line once,
/// ending with a NUL. A text whose first line is not an SBAT header is left out.
pub fn merge_sbat(texts: &[&[u8]]) -> Vec<u8> {
    let mut lines: Vec<String> = Vec::new();
    for t in texts {
        let t = String::from_utf8_lossy(t);
        let t = t.trim_end_matches('\0');
        let mut it = t.lines().map(str::trim).filter(|l| !l.is_empty());
        if !it.next().is_some_and(|first| first.starts_with("sbat,")) {
            continue;
        }
        for l in it {
            if !lines.iter().any(|x| x == l) {
                lines.push(l.to_string());
            }
        }
    }
    let mut out = String::from(SBAT_HEADER);
    for l in lines {
        out.push('\n');
        out.push_str(&l);
    }
    out.push_str("\n\0");
    out.into_bytes()
}

/// The architecture a PE image is for, as Rust's target triples spell it (`x86_64` for
/// IMAGE_FILE_MACHINE_AMD64, `aarch64` for ARM64); None for another or for no PE image.
pub fn pe_arch(image: &[u8]) -> Option<&'static str> {
    let pe_off = u32::from_le_bytes(image.get(0x3c..0x40)?.try_into().ok()?) as usize;
    if !image.starts_with(b"MZ") || image.get(pe_off..pe_off.checked_add(4)?)? != b"PE\0\0" {
        return None;
    }
    match u16::from_le_bytes(image.get(pe_off + 4..pe_off + 6)?.try_into().ok()?) {
        0x8664 => Some("x86_64"),
        0xaa64 => Some("aarch64"),
        _ => None,
    }
}

/// The first systemd-stub that hands a `.ucode` section to the kernel as an initrd of its own,
/// before `.initrd` (systemd 256).
pub const UCODE_STUB: u32 = 256;

/// The systemd version a systemd-stub was built from (the major number), from its `.sdmagic`
/// section (`#### LoaderInfo: systemd-stub 257.9-1~deb13u1 ####`); None for another stub or
/// none.
pub fn stub_version(image: &[u8]) -> Option<u32> {
    loader_info(image).filter(|(name, _)| name == "systemd-stub").map(|(_, v)| v)
}

/// What a systemd EFI program says it is in its `.sdmagic` section: its name (`systemd-stub`,
/// `systemd-addon`, `systemd-boot`) and the systemd version it was built from (the major
/// number); None where it says nothing readable.
pub fn loader_info(image: &[u8]) -> Option<(String, u32)> {
    let magic = section_data(image, ".sdmagic")?;
    let text = std::str::from_utf8(magic.split(|&b| b == 0).next()?).ok()?;
    let mut words = text.split("LoaderInfo: ").nth(1)?.split_whitespace();
    let name = words.next()?.to_string();
    let digits: String = words.next()?.chars().take_while(char::is_ascii_digit).collect();
    Some((name, digits.parse().ok()?))
}

/// The data of the section `name` of the PE image in the file `path`, read from the file's
/// headers and that section alone (not the whole file: a kernel is megabytes); None when there
/// is no such section or it is no PE image.
pub fn file_section(path: &Path, name: &str) -> Result<Option<Vec<u8>>> {
    let f = File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let mut head = vec![0u8; 4096];
    let n = f.read_at(&mut head, 0).with_context(|| format!("{}: cannot read", path.display()))?;
    let Some(s) = sections(&head[..n]).into_iter().find(|s| s.name == name) else { return Ok(None) };
    let len = s.len.min(f.metadata().map(|m| m.len()).unwrap_or(0).saturating_sub(s.offset));
    let mut data = vec![0u8; len as usize];
    f.read_exact_at(&mut data, s.offset).with_context(|| format!("{}: cannot read its {name}", path.display()))?;
    Ok(Some(data))
}

/// The data of the section `name` of the PE image `image` (its size in memory, as far as
/// the file holds it); None when there is no such section or `image` is no PE image.
pub fn section_data<'a>(image: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let s = sections(image).into_iter().find(|s| s.name == name)?;
    let start = usize::try_from(s.offset).ok()?;
    let end = start.checked_add(usize::try_from(s.len).ok()?)?.min(image.len());
    image.get(start..end)
}

/// Where the sections went.
#[derive(Debug, Clone)]
pub struct Layout {
    /// (name, file offset, size) of every added section.
    pub sections: Vec<(String, u64, u64)>,
    /// File offset of the `.initrd` section's data (a multiple of the output's block size).
    pub initrd_offset: u64,
    /// Length of the `.initrd` section's data (the initramfs image) in bytes.
    pub initrd_len: u64,
    /// Bytes of the kernel cloned (shared with /boot/vmlinuz-KVER).
    pub kernel_cloned: u64,
    /// Bytes of the kernel copied (where cloning was not possible).
    pub kernel_copied: u64,
}

/// The stub's headers, as far as adding sections needs them.
struct Stub {
    bytes: Vec<u8>,
    /// Offset of the optional header (the COFF header's 20 bytes end there).
    opt: usize,
    /// Offset of the section table and the number of sections in it.
    table: usize,
    nsections: usize,
    file_align: u64,
    section_align: u64,
    /// End of the stub's sections in the file and in memory.
    file_end: u64,
    va_end: u64,
    /// Where the section table must end (SizeOfHeaders, the first section's raw data).
    table_limit: usize,
    /// The stub's `.sbat`: its index in the section table, file offset, raw size, and the
    /// room it has in memory (up to the next section).
    sbat: Option<(usize, u64, u64, u64)>,
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
fn put_u32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
fn align(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

fn parse_stub(path: &Path) -> Result<Stub> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read the EFI stub", path.display()))?;
    let pe = PE::parse(&bytes).map_err(|e| crate::error::invalid!("{}: not a PE image: {e}", path.display()))?;
    let Some(oh) = pe.header.optional_header else {
        bail!("{}: a PE image without an optional header is no EFI application", path.display());
    };
    if !pe.is_64 {
        bail!("{}: a 32-bit EFI stub (x86-64 needs linuxx64.efi.stub)", path.display());
    }
    for s in &pe.sections {
        let name = s.name().unwrap_or("");
        if [".linux", ".initrd", ".ucode", ".cmdline", ".osrel", ".uname", ".dtb", ".pcrsig", ".pcrpkey"]
            .contains(&name)
        {
            bail!("{}: already has a {name} section (a UKI, not a stub)", path.display());
        }
    }
    let coff = &pe.header.coff_header;
    let pe_off = pe.header.dos_header.pe_pointer as usize;
    let opt = pe_off + 24;
    // The fields written below (SizeOfImage at 56, CheckSum at 64, the certificate entry at
    // 144) are in PE32+'s fixed part and its data directories: an optional header said to be
    // shorter has the section table over them (found by fuzz/ `binaries`: the first added
    // section header was overwritten by SizeOfImage and the checksum).
    if (coff.size_of_optional_header as usize) < 112 + 5 * 8 {
        bail!(
            "{}: its optional header is {} bytes, too short for a PE32+ one with its data directories",
            path.display(),
            coff.size_of_optional_header
        );
    }
    let table = opt + coff.size_of_optional_header as usize;
    let nsections = coff.number_of_sections as usize;
    let wh = &oh.windows_fields;
    // The new sections go after the stub's, and never over its headers (a stub may have no
    // section, or only empty ones). Both fields are 32-bit: their sum is not.
    let file_end = pe
        .sections
        .iter()
        .map(|s| s.pointer_to_raw_data as u64 + s.size_of_raw_data as u64)
        .max()
        .unwrap_or(0)
        .max(wh.size_of_headers as u64);
    let va_end = pe
        .sections
        .iter()
        .map(|s| s.virtual_address as u64 + (s.virtual_size.max(s.size_of_raw_data)) as u64)
        .max()
        .unwrap_or(0);
    let first_raw =
        pe.sections.iter().filter(|s| s.size_of_raw_data > 0).map(|s| s.pointer_to_raw_data).min().unwrap_or(u32::MAX);
    let table_limit = (wh.size_of_headers as usize).min(first_raw as usize);
    if bytes.len() < table_limit {
        bail!("{}: its headers ({table_limit} bytes) run past its end ({} bytes)", path.display(), bytes.len());
    }
    // A cut stub (or a section pointing past the file) would leave a hole of zeros where
    // its code should be, and the new sections after it.
    if file_end > bytes.len() as u64 {
        bail!("{}: its sections run to byte {file_end}, past its end ({} bytes)", path.display(), bytes.len());
    }
    // A signed stub: its signature would not cover the new sections; drop it (the UKI is
    // signed as a whole when asked). goblin says whether there is one; the entry (the fifth
    // data directory) is 112 + 4 × 8 bytes into a PE32+ optional header.
    let sbat = pe.sections.iter().position(|x| x.name().unwrap_or("") == ".sbat").map(|i| {
        let x = &pe.sections[i];
        let va = x.virtual_address as u64;
        let next = pe.sections.iter().map(|y| y.virtual_address as u64).filter(|&v| v > va).min();
        let room = next.map_or(align(va + 1, (wh.section_alignment as u64).max(1)), |n| n) - va;
        (i, x.pointer_to_raw_data as u64, x.size_of_raw_data as u64, room)
    });
    let cert = oh.data_directories.get_certificate_table().is_some_and(|d| d.virtual_address != 0);
    let mut bytes = bytes;
    if cert {
        let at = opt + 112 + 4 * 8;
        bytes[at..at + 8].fill(0);
    }
    bytes.truncate(file_end as usize);
    Ok(Stub {
        bytes,
        opt,
        table,
        nsections,
        file_align: (wh.file_alignment as u64).max(1),
        section_align: (wh.section_alignment as u64).max(1),
        file_end,
        va_end,
        table_limit,
        sbat,
    })
}

/// The PE checksum (as in imagehlp's CheckSumMappedFile): 16-bit one's-complement-style sum
/// of the file with the checksum field taken as zero, plus the file's length.
fn checksum(f: &File, len: u64, field: u64) -> Result<u32> {
    let mut sum: u64 = 0;
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(buf.len() as u64) as usize;
        f.read_exact_at(&mut buf[..n], at).context("cannot read the UKI back")?;
        if (field..field + 4).any(|o| o >= at && o < at + n as u64) {
            for o in field..field + 4 {
                if o >= at && o < at + n as u64 {
                    buf[(o - at) as usize] = 0;
                }
            }
        }
        // `n` is even except at the very end (the chunks are 1 MiB).
        for w in buf[..n].chunks(2) {
            let v = if w.len() == 2 { u16::from_le_bytes([w[0], w[1]]) } else { w[0] as u16 };
            sum += v as u64;
            sum = (sum & 0xffff) + (sum >> 16);
        }
        at += n as u64;
    }
    sum = (sum & 0xffff) + (sum >> 16);
    Ok((sum as u32).wrapping_add(len as u32))
}

/// Write a UKI into `out` (an empty file): the stub at `stub`, then `parts.small`, then the
/// initramfs written by `initrd(out, offset)` (which returns the offset where it ends), then
/// the kernel.
pub fn write(out: &File, stub: &Path, parts: &Parts, initrd: impl FnOnce(&File, u64) -> Result<u64>) -> Result<Layout> {
    let body = Some((parts.kernel, Box::new(initrd) as InitrdWriter));
    write_pe(out, stub, &parts.small, &parts.reserve, &parts.profiles, parts.sbat.as_deref(), body)
}

/// The initramfs writer of [`write`]: it writes at the offset given and returns where it ends.
type InitrdWriter<'a> = Box<dyn FnOnce(&File, u64) -> Result<u64> + 'a>;

/// Write a UKI add-on into `out` (an empty file): systemd's add-on stub
/// (`addonx64.efi.stub`) with `small`'s sections (`.cmdline`, `.uname`) and `sbat` as for
/// [`write`], and no kernel or initramfs. systemd-stub 254 and later read the `.cmdline` of
/// the add-ons beside a UKI (`NAME.efi.extra.d/*.addon.efi`, `/loader/addons/`).
pub fn write_addon(out: &File, stub: &Path, small: Vec<(&str, Vec<u8>)>, sbat: Option<Vec<u8>>) -> Result<Layout> {
    write_pe(out, stub, &small, &[], &[], sbat.as_deref(), None)
}

/// A section as it is placed: its name, file offset, size in memory (0 for room kept), raw
/// size in the file, and the memory it spans before the next one's virtual address.
struct Placed {
    name: String,
    file: u64,
    len: u64,
    raw: u64,
    span: u64,
}

/// [`write`] and [`write_addon`]: the base's sections and the profiles', and, with `body`,
/// the kernel and the initramfs writer.
///
/// The section table (and the virtual addresses, which ascend with it) holds the base's
/// sections, `.initrd` and `.linux`, then each profile's: the stub takes every section before
/// the first `.profile` as the base. In the file, the profiles' sections come before
/// `.initrd`, so that `.initrd` and `.linux` stay on block boundaries and the kernel is cloned
/// up to the file's end.
fn write_pe(
    out: &File,
    stub: &Path,
    base_small: &[(&str, Vec<u8>)],
    base_reserve: &[(&str, u64)],
    profiles: &[Profile],
    sbat: Option<&[u8]>,
    body: Option<(&Path, InitrdWriter)>,
) -> Result<Layout> {
    let mut s = parse_stub(stub)?;
    let block = crate::write::block_size(out).max(PAGE);
    // The .sbat: over the stub's where it fits in the file and in memory, else a section of
    // its own with the stub's renamed (shim reads the first section named .sbat).
    let mut small: Vec<(&str, &[u8])> = base_small.iter().map(|(n, d)| (*n, d.as_slice())).collect();
    if let Some(data) = sbat {
        let len = data.len() as u64;
        match s.sbat {
            Some((i, file, raw, room))
                if len <= raw
                    && len <= room
                    && file as usize >= s.table_limit
                    && s.table + (i + 1) * SECTION_HEADER <= s.table_limit =>
            {
                let (file, raw) = (file as usize, raw as usize);
                s.bytes[file..file + raw].fill(0);
                s.bytes[file..file + data.len()].copy_from_slice(data);
                put_u32(&mut s.bytes, s.table + i * SECTION_HEADER + 8, len as u32);
            }
            _ => {
                // Every one of the stub's (a stub may have more than one).
                for i in 0..s.nsections {
                    let h = s.table + i * SECTION_HEADER;
                    if let Some(name) = s.bytes.get_mut(h..h + 8).filter(|n| *n == b".sbat\0\0\0") {
                        name.copy_from_slice(b".sbat-st");
                    }
                }
                small.insert(0, (".sbat", data));
            }
        }
    }
    let in_profiles: usize = profiles.iter().map(|p| p.small.len() + p.reserve.len()).sum();
    let count = small.len() + base_reserve.len() + in_profiles + if body.is_some() { 2 } else { 0 };
    if s.table + (s.nsections + count) * SECTION_HEADER > s.table_limit {
        let why = match (sbat, s.sbat) {
            (Some(d), Some((_, _, raw, room))) if small.first().is_some_and(|x| x.0 == ".sbat") => format!(
                "; the merged .sbat ({} bytes) does not fit over the stub's either ({} bytes in the file, {} in memory)",
                d.len(),
                raw,
                room
            ),
            _ => String::new(),
        };
        bail!(
            "{}: no room in its headers for {count} more section headers ({} bytes left){why}",
            stub.display(),
            s.table_limit.saturating_sub(s.table + s.nsections * SECTION_HEADER)
        );
    }
    out.set_len(0).context("cannot truncate the output")?;
    // The small sections and the room kept, base then profiles, one after the other in the
    // file.
    let mut file_at = s.file_end;
    let mut place = |name: &str, data: Option<&[u8]>, room: u64| -> Result<Placed> {
        file_at = align(file_at, s.file_align);
        let p = match data {
            Some(d) => {
                out.write_all_at(d, file_at).context("cannot write the UKI")?;
                let raw = align(d.len() as u64, s.file_align);
                Placed {
                    name: name.to_string(),
                    file: file_at,
                    len: d.len() as u64,
                    raw,
                    span: (d.len() as u64).max(1),
                }
            }
            None => {
                let raw = align(room.max(1), s.file_align);
                Placed { name: name.to_string(), file: file_at, len: 0, raw, span: raw }
            }
        };
        file_at += p.raw;
        Ok(p)
    };
    let mut table: Vec<Placed> = Vec::new();
    for (name, data) in &small {
        table.push(place(name, Some(data), 0)?);
    }
    for (name, room) in base_reserve {
        table.push(place(name, None, *room)?);
    }
    let mut groups: Vec<Placed> = Vec::new();
    for p in profiles {
        for (name, data) in &p.small {
            groups.push(place(name, Some(data), 0)?);
        }
        for (name, room) in &p.reserve {
            groups.push(place(name, None, *room)?);
        }
    }
    let (initrd_offset, initrd_len, kernel_cloned, kernel_copied, file_len) = match body {
        Some((kernel, initrd)) => {
            // .initrd on a block boundary: the archive's block-aligned data is block-aligned in
            // the file.
            let initrd_offset = align(file_at, block);
            let end = initrd(out, initrd_offset)?;
            let initrd_len = end - initrd_offset;
            let raw = align(initrd_len, s.file_align);
            table.push(Placed {
                name: ".initrd".into(),
                file: initrd_offset,
                len: initrd_len,
                raw,
                span: initrd_len.max(1),
            });
            // The kernel last: cloned up to its end, which is the file's.
            let kernel_offset = align(initrd_offset + raw, block);
            out.set_len(kernel_offset).context("cannot size the UKI")?;
            let (kernel_cloned, kernel_copied) = crate::write::place_file(kernel, out, kernel_offset)?;
            let klen = kernel_cloned + kernel_copied;
            let raw = align(klen, s.file_align);
            table.push(Placed { name: ".linux".into(), file: kernel_offset, len: klen, raw, span: klen.max(1) });
            (initrd_offset, initrd_len, kernel_cloned, kernel_copied, kernel_offset + raw)
        }
        None => (0, 0, 0, 0, align(file_at, s.file_align)),
    };
    table.extend(groups);
    out.set_len(file_len).context("cannot size the UKI")?;
    // No gaps between sections in the file: each one's raw data runs up to the next one's in
    // the file (the alignment padding is its own, zeros), so that Authenticode hashes every
    // byte and sbsign does not warn.
    let mut by_file: Vec<usize> = (0..table.len()).collect();
    by_file.sort_by_key(|&i| table[i].file);
    for w in by_file.windows(2) {
        table[w[0]].raw = table[w[1]].file - table[w[0]].file;
    }
    // Virtual addresses in the table's order, each on a page after the one before.
    let mut va_at = align(s.va_end, PAGE);
    let mut headers: Vec<[u8; SECTION_HEADER]> = Vec::new();
    for p in &table {
        let mut h = [0u8; SECTION_HEADER];
        h[..p.name.len()].copy_from_slice(p.name.as_bytes());
        let name = &p.name;
        let u32_of = |v: u64, what: &str| -> Result<u32> {
            u32::try_from(v).map_err(|_| crate::error::invalid!("section {name}: {what} {v} exceeds a PE32+ field"))
        };
        put_u32(&mut h, 8, u32_of(p.len, "size")?);
        put_u32(&mut h, 12, u32_of(va_at, "virtual address")?);
        put_u32(&mut h, 16, u32_of(p.raw, "raw size")?);
        put_u32(&mut h, 20, u32_of(p.file, "file offset")?);
        put_u32(&mut h, 36, DATA_READ);
        headers.push(h);
        va_at = align(va_at + p.span, PAGE);
    }
    let size_of_image = align(va_at, s.section_align);
    // The headers: section count, the new section headers, SizeOfImage; then the checksum.
    let n = s.nsections + headers.len();
    s.bytes[s.opt - 18..s.opt - 16].copy_from_slice(&(n as u16).to_le_bytes());
    for (i, h) in headers.iter().enumerate() {
        let o = s.table + (s.nsections + i) * SECTION_HEADER;
        s.bytes[o..o + SECTION_HEADER].copy_from_slice(h);
    }
    let size_of_image = u32::try_from(size_of_image)
        .map_err(|_| crate::error::invalid!("the UKI's image size {size_of_image} exceeds 4 GiB"))?;
    put_u32(&mut s.bytes, s.opt + 56, size_of_image);
    put_u32(&mut s.bytes, s.opt + 64, 0);
    out.write_all_at(&s.bytes, 0).context("cannot write the UKI")?;
    let sum = checksum(out, file_len, (s.opt + 64) as u64)?;
    out.write_all_at(&sum.to_le_bytes(), (s.opt + 64) as u64).context("cannot write the UKI")?;
    let sections = table.into_iter().map(|p| (p.name, p.file, p.len)).collect();
    Ok(Layout { sections, initrd_offset, initrd_len, kernel_cloned, kernel_copied })
}

/// Write `data` into the section `name` that [`write()`] kept room for ([`Parts::reserve`]):
/// its size becomes the data's, and the checksum is made again. The UKI is signed after.
pub fn fill(out: &File, name: &str, data: &[u8]) -> Result<()> {
    fill_nth(out, name, 0, data)
}

/// [`fill`] for the `n`th section named `name` (counting from 0, in the section table): a
/// multi-profile UKI keeps room for a `.pcrsig` in each profile ([`Profile::reserve`]).
pub fn fill_nth(out: &File, name: &str, n: usize, data: &[u8]) -> Result<()> {
    let mut head = vec![0u8; 65536];
    let got = out.read_at(&mut head, 0).context("cannot read the UKI back")?;
    head.truncate(got);
    let (sec, h) = sections_with_headers(&head)
        .into_iter()
        .filter(|(s, _)| s.name == name)
        .nth(n)
        .with_context(|| format!("the UKI has no {name} section number {n} to fill"))?;
    // The room: in the file (its raw size, which runs up to the next section's data) and in
    // memory (up to the next section's virtual address, or the image's end).
    let va = u32_at(&head, h + 12) as u64;
    let pe_off = u32_at(&head, 0x3c) as usize;
    let image_end = u32_at(&head, pe_off + 24 + 56) as u64;
    let next_va = sections_with_headers(&head)
        .iter()
        .map(|(_, o)| u32_at(&head, o + 12) as u64)
        .filter(|&v| v > va)
        .min()
        .unwrap_or(image_end);
    let room = (u32_at(&head, h + 16) as u64).min(next_va.saturating_sub(va));
    if data.len() as u64 > room {
        bail!("{name}: {} bytes, more than the {room} bytes kept for it", data.len());
    }
    out.write_all_at(data, sec.offset).context("cannot write the UKI")?;
    out.write_all_at(&(data.len() as u32).to_le_bytes(), (h + 8) as u64).context("cannot write the UKI")?;
    let len = out.metadata().context("cannot read the UKI back")?.len();
    let field = (u32_at(&head, 0x3c) as usize + 24 + 64) as u64;
    let sum = checksum(out, len, field)?;
    out.write_all_at(&sum.to_le_bytes(), field).context("cannot write the UKI")?;
    Ok(())
}

/// [`sections`], each with its header's offset in `head`.
fn sections_with_headers(head: &[u8]) -> Vec<(Section, usize)> {
    let Some(pe_off) = head.get(0x3c..0x40).map(|b| u32_at(b, 0) as usize) else { return Vec::new() };
    let Some(opt_len) = head.get(pe_off + 20..pe_off + 22).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize) else {
        return Vec::new();
    };
    let table = pe_off + 24 + opt_len;
    sections(head).into_iter().enumerate().map(|(i, s)| (s, table + i * SECTION_HEADER)).collect()
}

/// A PE section header: its name, where its data is in the file and how long it is (the
/// size in memory: what systemd-stub measures; the file's raw data may be longer, padded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The section's name (`.linux`, `.initrd`, ...), without NUL padding.
    pub name: String,
    /// File offset of its data.
    pub offset: u64,
    /// Its size in memory, in bytes.
    pub len: u64,
}

/// The sections of a PE image (a UKI), from `head` (the file's first bytes, its headers at
/// least); empty when it is no PE image.
pub fn sections(head: &[u8]) -> Vec<Section> {
    let table = || -> Option<Vec<Section>> {
        if !head.starts_with(b"MZ") {
            return None;
        }
        let pe_off = u32::from_le_bytes(head.get(0x3c..0x40)?.try_into().ok()?) as usize;
        if head.get(pe_off..pe_off.checked_add(4)?)? != b"PE\0\0" {
            return None;
        }
        let n = u16::from_le_bytes(head.get(pe_off + 6..pe_off + 8)?.try_into().ok()?) as usize;
        let opt_len = u16::from_le_bytes(head.get(pe_off + 20..pe_off + 22)?.try_into().ok()?) as usize;
        let table = pe_off + 24 + opt_len;
        (0..n)
            .map(|i| {
                let h = head.get(table + i * SECTION_HEADER..table + (i + 1) * SECTION_HEADER)?;
                let name = String::from_utf8_lossy(&h[..8]).trim_end_matches('\0').to_string();
                Some(Section { name, offset: u32_at(h, 20) as u64, len: u32_at(h, 8) as u64 })
            })
            .collect()
    };
    table().unwrap_or_default()
}

/// The `.initrd` section of a UKI: (file offset, length); None when `head` (the file's first
/// bytes, its headers at least) is no PE image with one.
pub fn initrd_section(head: &[u8]) -> Option<(u64, u64)> {
    sections(head).into_iter().find(|s| s.name == ".initrd").map(|s| (s.offset, s.len))
}

/// The parts of a UKI's initramfs as the stub hands them to the kernel, in order: `.ucode`
/// (the early microcode archive, where the UKI has one) and `.initrd`, each as (file offset,
/// length); empty when `head` is no PE image with an `.initrd`.
pub fn initramfs_sections(head: &[u8]) -> Vec<(u64, u64)> {
    let all = sections(head);
    let Some(initrd) = all.iter().find(|s| s.name == ".initrd") else { return Vec::new() };
    all.iter().find(|s| s.name == ".ucode").into_iter().chain([initrd]).map(|s| (s.offset, s.len)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_matches_the_stubs_own() {
        let stub = Path::new("/usr/lib/systemd/boot/efi/linuxx64.efi.stub");
        if !stub.exists() {
            leanrd_testkit::skip::<()>("no systemd-boot-efi stub");
            return;
        }
        let bytes = std::fs::read(stub).unwrap();
        let pe_off = u32_at(&bytes, 0x3c) as usize;
        let field = pe_off + 24 + 64;
        let want = u32_at(&bytes, field);
        if want == 0 {
            return; // a stub without a checksum
        }
        let f = File::open(stub).unwrap();
        assert_eq!(checksum(&f, bytes.len() as u64, field as u64).unwrap(), want);
    }

    /// A minimal PE32+ EFI application: headers of 0x200 bytes, one `.text` section at
    /// `raw` (file offset) of `len` bytes, or none.
    fn pe(section: Option<(u32, u32)>) -> Vec<u8> {
        let mut b = vec![0u8; 0x200];
        b[..2].copy_from_slice(b"MZ");
        put_u32(&mut b, 0x3c, 0x40);
        b[0x40..0x44].copy_from_slice(b"PE\0\0");
        b[0x44..0x46].copy_from_slice(&0x8664u16.to_le_bytes());
        b[0x46..0x48].copy_from_slice(&(section.is_some() as u16).to_le_bytes());
        b[0x54..0x56].copy_from_slice(&240u16.to_le_bytes());
        b[0x56..0x58].copy_from_slice(&0x22u16.to_le_bytes());
        let opt = 0x58;
        b[opt..opt + 2].copy_from_slice(&0x20bu16.to_le_bytes());
        put_u32(&mut b, opt + 32, 0x1000); // section alignment
        put_u32(&mut b, opt + 36, 0x200); // file alignment
        put_u32(&mut b, opt + 56, 0x2000); // size of image
        put_u32(&mut b, opt + 60, 0x200); // size of headers
        b[opt + 68..opt + 70].copy_from_slice(&10u16.to_le_bytes()); // EFI application
        put_u32(&mut b, opt + 108, 16);
        if let Some((raw, len)) = section {
            let h = opt + 240;
            b[h..h + 8].copy_from_slice(b".text\0\0\0");
            put_u32(&mut b, h + 8, len);
            put_u32(&mut b, h + 12, 0x1000);
            put_u32(&mut b, h + 16, len);
            put_u32(&mut b, h + 20, raw);
            put_u32(&mut b, h + 36, 0x6000_0020);
        }
        b
    }

    /// A stub of one section with room in its headers for three more, a kernel file and an
    /// empty output in `t`: (stub path, stub bytes, kernel path, output).
    fn fixture(t: &tempfile::TempDir) -> (std::path::PathBuf, Vec<u8>, std::path::PathBuf, File) {
        let stub = t.path().join("stub.efi");
        let mut b = pe(Some((0x200, 0x200)));
        b.resize(0x400, 0xc3);
        std::fs::write(&stub, &b).unwrap();
        let kernel = t.path().join("vmlinuz");
        std::fs::write(&kernel, b"kernel").unwrap();
        let out =
            File::options().read(true).write(true).create(true).truncate(true).open(t.path().join("uki")).unwrap();
        (stub, b, kernel, out)
    }

    /// A stub whose section's raw data would end past 4 GiB: its end is not computed in 32
    /// bits (that overflowed: a panic in debug builds, a wrong end in release ones), and a
    /// section that ends past the file is refused (the UKI had a hole where its data should
    /// be, gigabytes long here). Found by fuzz/ `binaries`.
    #[test]
    fn a_section_ending_past_the_stub_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let stub = t.path().join("stub.efi");
        std::fs::write(&stub, pe(Some((0xffff_0000, 0x2_0000)))).unwrap();
        let e = parse_stub(&stub).err().unwrap().to_string();
        assert!(e.ends_with("its sections run to byte 4295032832, past its end (512 bytes)"), "{e}");
        let mut b = pe(Some((0x200, 0x200)));
        b.resize(0x400, 0xc3);
        std::fs::write(&stub, &b).unwrap();
        assert_eq!(parse_stub(&stub).map(|s| s.file_end).ok(), Some(0x400));
        std::fs::write(&stub, &b[..0x300]).unwrap();
        assert!(parse_stub(&stub).is_err());
    }

    /// A stub without sections: the UKI's sections go after its headers, not over them (the
    /// headers were cut to nothing, and writing the section table panicked). Found by fuzz/
    /// `binaries`.
    #[test]
    fn a_stub_without_sections_keeps_its_headers() {
        let t = tempfile::tempdir().unwrap();
        let stub = t.path().join("stub.efi");
        std::fs::write(&stub, pe(None)).unwrap();
        let kernel = t.path().join("vmlinuz");
        std::fs::write(&kernel, b"kernel").unwrap();
        let out =
            File::options().read(true).write(true).create(true).truncate(true).open(t.path().join("uki")).unwrap();
        let parts = Parts {
            small: vec![(".cmdline", b"quiet".to_vec())],
            reserve: Vec::new(),
            kernel: &kernel,
            sbat: None,
            profiles: Vec::new(),
        };
        let l = write(&out, &stub, &parts, |f, at| {
            f.write_all_at(b"070701", at)?;
            Ok(at + 6)
        })
        .unwrap();
        assert!(l.sections[0].1 >= 0x200, "{:?}", l.sections);
        let mut head = vec![0u8; 4096];
        let n = out.read_at(&mut head, 0).unwrap();
        assert_eq!(initrd_section(&head[..n]), Some((l.initrd_offset, 6)));
        // A stub cut short inside its headers is refused.
        std::fs::write(&stub, &pe(None)[..0x150]).unwrap();
        assert!(parse_stub(&stub).is_err());
    }

    /// Room kept for a section known only at the end (.pcrsig): filled, its size is the
    /// data's and the checksum is right again; more than the room is refused.
    #[test]
    fn a_kept_section_is_filled_after_the_rest() {
        let t = tempfile::tempdir().unwrap();
        let (stub, _, kernel, out) = fixture(&t);
        // The test stub's headers have room for three more sections.
        let parts = Parts {
            small: Vec::new(),
            reserve: vec![(".pcrsig", 3000)],
            kernel: &kernel,
            sbat: None,
            profiles: Vec::new(),
        };
        let l = write(&out, &stub, &parts, |f, at| {
            f.write_all_at(b"070701", at)?;
            Ok(at + 6)
        })
        .unwrap();
        let sig = br#"{"sha256":[]}"#;
        fill(&out, ".pcrsig", sig).unwrap();
        let mut head = vec![0u8; 4096];
        out.read_at(&mut head, 0).unwrap();
        let secs = sections(&head);
        let names: Vec<&str> = secs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, [".text", ".pcrsig", ".initrd", ".linux"]);
        let p = &secs[1];
        assert_eq!(p.len, sig.len() as u64);
        let mut got = vec![0u8; sig.len()];
        out.read_at(&mut got, p.offset).unwrap();
        assert_eq!(got, sig);
        assert_eq!(initrd_section(&head), Some((l.initrd_offset, 6)));
        let field = 0x40 + 24 + 64;
        let len = out.metadata().unwrap().len();
        assert_eq!(checksum(&out, len, field as u64).unwrap(), u32_at(&head, field));
        let e = fill(&out, ".pcrsig", &[b' '; 5000]).unwrap_err().to_string();
        assert!(e.contains("more than the"), "{e}");
        assert!(fill(&out, ".nothere", b"x").is_err());
    }

    /// A multi-profile UKI: the section table has the base's sections, `.initrd` and `.linux`
    /// (the stub takes everything before the first `.profile` as the base), then each
    /// profile's, at ascending virtual addresses; in the file the profiles' data comes before
    /// `.initrd`, so the kernel still ends the file, and the raw data tiles the file without a
    /// gap. Each profile's room is filled by its number.
    #[test]
    fn profiles_follow_the_base_in_the_table_and_precede_the_initrd_in_the_file() {
        let t = tempfile::tempdir().unwrap();
        let stub = t.path().join("stub.efi");
        // Headers of 0x400 bytes: room for the ten sections.
        let mut b = pe(Some((0x400, 0x200)));
        put_u32(&mut b, 0x58 + 60, 0x400);
        b.resize(0x600, 0xc3);
        std::fs::write(&stub, &b).unwrap();
        let kernel = t.path().join("vmlinuz");
        std::fs::write(&kernel, vec![0x4d; 5000]).unwrap();
        let out =
            File::options().read(true).write(true).create(true).truncate(true).open(t.path().join("uki")).unwrap();
        let profile = |text: &str, cmdline: Option<&str>| Profile {
            small: [(".profile", Some(text)), (".cmdline", cmdline)]
                .into_iter()
                .filter_map(|(n, d)| d.map(|d| (n, d.as_bytes().to_vec())))
                .collect(),
            reserve: vec![(".pcrsig", 700)],
        };
        let parts = Parts {
            small: vec![(".osrel", b"ID=test\n".to_vec()), (".cmdline", b"base\0".to_vec())],
            reserve: Vec::new(),
            kernel: &kernel,
            sbat: None,
            profiles: vec![profile("ID=main\n", None), profile("ID=rescue\n", Some("rescue\0"))],
        };
        let l = write(&out, &stub, &parts, |f, at| {
            f.write_all_at(b"070701", at)?;
            Ok(at + 6)
        })
        .unwrap();
        fill_nth(&out, ".pcrsig", 1, b"{\"rescue\":1}").unwrap();
        fill_nth(&out, ".pcrsig", 0, b"{\"main\":1}").unwrap();
        assert!(fill_nth(&out, ".pcrsig", 2, b"{}").unwrap_err().to_string().contains("number 2"));
        let mut img = Vec::new();
        std::io::Read::read_to_end(&mut &out, &mut img).unwrap();
        let names: Vec<String> = sections(&img).into_iter().map(|s| s.name).collect();
        let want = [
            ".text", ".osrel", ".cmdline", ".initrd", ".linux", ".profile", ".pcrsig", ".profile", ".cmdline",
            ".pcrsig",
        ];
        assert_eq!(names, want);
        let pe = PE::parse(&img).unwrap();
        let vas: Vec<u32> = pe.sections.iter().map(|s| s.virtual_address).collect();
        assert!(vas.windows(2).all(|w| w[0] < w[1]), "{vas:?}");
        // Each section's memory ends before the next one's begins, the last within the image.
        let image_size = pe.header.optional_header.unwrap().windows_fields.size_of_image;
        let ends: Vec<u32> = pe.sections.iter().map(|s| s.virtual_address + s.virtual_size).collect();
        assert!(
            ends.iter().zip(vas.iter().skip(1).chain([&image_size])).all(|(e, next)| e <= next),
            "{ends:?} {vas:?}"
        );

        let mut raw: Vec<(u32, u32)> =
            pe.sections.iter().map(|s| (s.pointer_to_raw_data, s.size_of_raw_data)).collect();
        raw.sort();
        assert!(raw.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0), "{raw:?}");
        assert_eq!((raw.last().unwrap().0 + raw.last().unwrap().1) as usize, img.len());
        let secs = sections(&img);
        let (initrd, linux) = (&secs[3], &secs[4]);
        assert_eq!((initrd.offset, initrd.len), (l.initrd_offset, 6));
        assert!(secs[5..].iter().all(|s| s.offset < initrd.offset), "{secs:?}");
        assert_eq!(linux.offset % PAGE, 0);
        assert_eq!(raw.last().unwrap().0 as u64, linux.offset);
        let data = |s: &Section| &img[s.offset as usize..(s.offset + s.len) as usize];
        assert_eq!(data(&secs[7]), b"ID=rescue\n");
        assert_eq!(data(&secs[8]), b"rescue\0");
        assert_eq!(data(&secs[6]), b"{\"main\":1}");
        assert_eq!(data(&secs[9]), b"{\"rescue\":1}");
        let field = 0x40 + 24 + 64;
        assert_eq!(checksum(&out, img.len() as u64, field as u64).unwrap(), u32_at(&img, field));
        assert_eq!(l.sections.iter().map(|s| s.0.as_str()).collect::<Vec<_>>(), want[1..]);
        // The room: the last profile's .pcrsig runs in the file up to .initrd's block (3072
        // bytes), and in memory to the image's end (a page).
        let e = fill_nth(&out, ".pcrsig", 1, &[b' '; 3073]).unwrap_err().to_string();
        assert!(e.contains("more than the 3072 bytes"), "{e}");
        fill_nth(&out, ".pcrsig", 1, &[b' '; 3072]).unwrap();
    }

    /// The stub's systemd version, from its .sdmagic: what decides whether the microcode goes
    /// into a .ucode section.
    #[test]
    fn the_stubs_version_is_read_from_its_sdmagic() {
        let with = |name: &[u8; 8], text: &[u8]| {
            let mut b = pe(Some((0x200, text.len() as u32)));
            b[0x58 + 240..0x58 + 248].copy_from_slice(name);
            b.resize(0x400, 0);
            b[0x200..0x200 + text.len()].copy_from_slice(text);
            b
        };
        assert_eq!(
            stub_version(&with(b".sdmagic", b"#### LoaderInfo: systemd-stub 257.9-1~deb13u1 ####\0")),
            Some(257)
        );
        assert_eq!(stub_version(&with(b".sdmagic", b"#### LoaderInfo: systemd-stub 252.39-1~deb12u2 ####")), Some(252));
        assert_eq!(stub_version(&with(b".sdmagic", b"#### LoaderInfo: systemd-boot 257 ####")), None);
        assert_eq!(stub_version(&with(b".sdmagic", b"#### LoaderInfo: systemd-stub x ####")), None);
        assert_eq!(stub_version(&with(b".sdmagic", b"LoaderInfo: systemd-stub 99999999999999999999")), None);
        let addon = with(b".sdmagic", b"#### LoaderInfo: systemd-addon 257.13-1~deb13u1 ####\0");
        assert_eq!(loader_info(&addon), Some(("systemd-addon".into(), 257)));
        assert_eq!(stub_version(&addon), None);
        assert_eq!(stub_version(&with(b".text\0\0\0", b"systemd-stub 257")), None);
        assert_eq!(stub_version(b"MZ"), None);
    }

    /// A UKI with a .ucode: its initramfs is the .ucode, then the .initrd, as the stub hands
    /// them to the kernel; without one, the .initrd alone.
    #[test]
    fn a_ucode_section_comes_before_the_initrd() {
        let t = tempfile::tempdir().unwrap();
        let (stub, b, kernel, out) = fixture(&t);
        let parts = Parts {
            small: vec![(".ucode", b"07070100".to_vec())],
            reserve: Vec::new(),
            kernel: &kernel,
            sbat: None,
            profiles: Vec::new(),
        };
        let l = write(&out, &stub, &parts, |f, at| {
            f.write_all_at(b"070701", at)?;
            Ok(at + 6)
        })
        .unwrap();
        let mut head = vec![0u8; 4096];
        let n = out.read_at(&mut head, 0).unwrap();
        let ucode = &l.sections[0];
        assert_eq!(ucode.0, ".ucode");
        assert_eq!(initramfs_sections(&head[..n]), vec![(ucode.1, 8), (l.initrd_offset, 6)]);
        assert_eq!(initrd_section(&head[..n]), Some((l.initrd_offset, 6)));
        // A stub that already has a .ucode is a UKI.
        let mut b = b.clone();
        b[0x58 + 240..0x58 + 248].copy_from_slice(b".ucode\0\0");
        std::fs::write(&stub, &b).unwrap();
        assert!(parse_stub(&stub).err().unwrap().to_string().contains("already has a .ucode section"));
        assert!(initramfs_sections(b"MZ").is_empty());
    }

    /// An add-on: the stub with its small sections and the .sbat, no .initrd or .linux; its
    /// image size covers the last section and its checksum is right.
    #[test]
    fn an_addon_has_its_sections_and_no_kernel() {
        let t = tempfile::tempdir().unwrap();
        let stub = t.path().join("addon.stub");
        let mut b = pe(Some((0x200, 0x200)));
        b.resize(0x400, 0xc3);
        std::fs::write(&stub, &b).unwrap();
        let out =
            File::options().read(true).write(true).create(true).truncate(true).open(t.path().join("a.efi")).unwrap();
        let sbat = merge_sbat(&[format!("{SBAT_HEADER}\n{SBAT_ADDON}\n").as_bytes()]);
        let l = write_addon(&out, &stub, vec![(".cmdline", b"quiet\0".to_vec())], Some(sbat.clone())).unwrap();
        let names: Vec<&str> = l.sections.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(names, [".sbat", ".cmdline"]);
        let len = out.metadata().unwrap().len();
        let mut all = vec![0u8; len as usize];
        out.read_exact_at(&mut all, 0).unwrap();
        assert_eq!(section_data(&all, ".cmdline"), Some(&b"quiet\0"[..]));
        assert_eq!(section_data(&all, ".sbat"), Some(sbat.as_slice()));
        assert!(initramfs_sections(&all).is_empty());
        assert_eq!(len % 0x200, 0);
        let field = 0x40 + 24 + 64;
        assert_eq!(checksum(&out, len, field as u64).unwrap(), u32_at(&all, field));
        let last = sections(&all).into_iter().last().unwrap();
        let va = u32_at(&all, 0x58 + 240 + 2 * 40 + 12) as u64;
        assert!(va > 0x1000);
        assert_eq!(last.name, ".cmdline");
        assert!(u32_at(&all, 0x58 + 56) as u64 >= va + last.len);
    }

    #[test]
    fn sbat_texts_merge_as_ukify_merges_them() {
        let stub = format!("{SBAT_HEADER}\nsystemd,1,The systemd Developers,systemd,252,https://systemd.io/\n\0");
        let kernel = format!("{SBAT_HEADER}\r\nlinux,1,The Linux Developers,linux,6.14,https://linux.org\n");
        let user =
            format!("{SBAT_HEADER}\n{SBAT_UKI}\nsystemd,1,The systemd Developers,systemd,252,https://systemd.io/");
        let m = merge_sbat(&[stub.as_bytes(), b"not,an sbat text\nx,1", kernel.as_bytes(), user.as_bytes()]);
        let want = format!(
            "{SBAT_HEADER}\nsystemd,1,The systemd Developers,systemd,252,https://systemd.io/\n\
             linux,1,The Linux Developers,linux,6.14,https://linux.org\n{SBAT_UKI}\n\0"
        );
        assert_eq!(String::from_utf8(m).unwrap(), want);
        assert_eq!(merge_sbat(&[]), format!("{SBAT_HEADER}\n\0").into_bytes());
    }

    /// A stub's .sbat: the merged text goes over it where it fits (its size in memory is the
    /// new text's), else into a .sbat of its own, the stub's renamed so that shim, which reads
    /// the first .sbat, reads the merged one.
    #[test]
    fn the_merged_sbat_replaces_the_stubs() {
        let t = tempfile::tempdir().unwrap();
        let stub = t.path().join("stub.efi");
        let mut b = pe(Some((0x200, 0x100)));
        let h = 0x58 + 240;
        b[h..h + 8].copy_from_slice(b".sbat\0\0\0");
        put_u32(&mut b, h + 16, 0x200);
        b.resize(0x400, 0);
        let own = format!("{SBAT_HEADER}\nsystemd,1,x,systemd,252,https://systemd.io/\n");
        b[0x200..0x200 + own.len()].copy_from_slice(own.as_bytes());
        std::fs::write(&stub, &b).unwrap();
        let kernel = t.path().join("vmlinuz");
        std::fs::write(&kernel, b"kernel").unwrap();
        let uki = |sbat: Vec<u8>| -> (Vec<Section>, Vec<u8>) {
            let out =
                File::options().read(true).write(true).create(true).truncate(true).open(t.path().join("uki")).unwrap();
            let parts = Parts {
                small: Vec::new(),
                reserve: Vec::new(),
                kernel: &kernel,
                sbat: Some(sbat),
                profiles: Vec::new(),
            };
            write(&out, &stub, &parts, |f, at| {
                f.write_all_at(b"070701", at)?;
                Ok(at + 6)
            })
            .unwrap();
            let all = std::fs::read(t.path().join("uki")).unwrap();
            (sections(&all), all)
        };
        let merged = merge_sbat(&[own.as_bytes(), format!("{SBAT_HEADER}\n{SBAT_UKI}").as_bytes()]);
        let (secs, all) = uki(merged.clone());
        let names: Vec<&str> = secs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, [".sbat", ".initrd", ".linux"]);
        assert_eq!(section_data(&all, ".sbat"), Some(merged.as_slice()));
        let long = merge_sbat(&[
            merged.as_slice(),
            format!("{SBAT_HEADER}\n{}", (0..60).map(|i| format!("c{i},1,b\n")).collect::<String>()).as_bytes(),
        ]);
        let (secs, all) = uki(long.clone());
        let names: Vec<&str> = secs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, [".sbat-st", ".sbat", ".initrd", ".linux"]);
        assert_eq!(section_data(&all, ".sbat"), Some(long.as_slice()));
    }

    /// A stub whose optional header is said to be 6 bytes long: its section table lies where
    /// SizeOfImage and the checksum are written. Refused (the UKI's first added section header
    /// was overwritten). Found by fuzz/ `binaries`.
    #[test]
    fn a_short_optional_header_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let stub = t.path().join("stub.efi");
        let mut b = pe(None);
        b[0x54..0x56].copy_from_slice(&6u16.to_le_bytes());
        std::fs::write(&stub, &b).unwrap();
        let e = parse_stub(&stub).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("its optional header is 6 bytes"), "{e:?}");
    }

    #[test]
    fn a_section_is_read_from_a_file_alone() {
        let t = tempfile::tempdir().unwrap();
        let mut b = pe(Some((0x200, 0x10)));
        b.resize(0x400, 0);
        b[0x200..0x210].copy_from_slice(b"0123456789abcdef");
        let p = t.path().join("k.efi");
        std::fs::write(&p, &b).unwrap();
        assert_eq!(file_section(&p, ".text").unwrap().as_deref(), Some(&b"0123456789abcdef"[..]));
        assert_eq!(file_section(&p, ".sbat").unwrap(), None);
        assert!(file_section(&t.path().join("none"), ".sbat").is_err());
    }

    #[test]
    fn a_pe_image_says_its_architecture() {
        let mut b = pe(None);
        assert_eq!(pe_arch(&b), Some("x86_64"));
        b[0x44..0x46].copy_from_slice(&0xaa64u16.to_le_bytes());
        assert_eq!(pe_arch(&b), Some("aarch64"));
        b[0x44..0x46].copy_from_slice(&0x14cu16.to_le_bytes());
        assert_eq!(pe_arch(&b), None, "i386");
        assert_eq!(pe_arch(b"MZ"), None);
    }

    #[test]
    fn no_initrd_section_in_what_is_no_uki() {
        assert_eq!(initrd_section(b"070701"), None);
        assert_eq!(initrd_section(b"MZ"), None);
        let mut junk = vec![0u8; 256];
        junk[..2].copy_from_slice(b"MZ");
        junk[0x3c] = 0xff;
        assert_eq!(initrd_section(&junk), None);
    }
}
