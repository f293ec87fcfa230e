//! The console font: a PC Screen Font (PSF, version 1 or 2, as kbd's setfont reads them),
//! read by the generator to check it before it goes into the image, by the boot proof, and
//! by /init to load it with the VT's KDFONTOP ioctl — one reader on every side.
//!
//! The image holds the font file itself, decompressed (`NAME.psf` under [`FONT_DIR`]),
//! rather than the kernel's form of it: that keeps it a file kbd's tools read (a rescue
//! shell's `setfont` can load it again), and the kernel's form is only the glyphs padded to
//! 32 rows, made in memory by [`Psf::kernel_glyphs`] at load time.
//!
//! Hand-written: the format is two fixed headers, the glyphs and a table of Unicode strings
//! (kbd's psf.h); no maintained crate reads PSF without std. UTF-8 in the PSF2 table is
//! decoded by `core::str`.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// Where the image keeps its console font (`NAME.psf`, decompressed).
pub const FONT_DIR: &str = "/etc/leanrd/fonts";

/// The kernel's limits for a console font (drivers/tty/vt/vt.c, con_font_set): at most 512
/// glyphs, at most 32 pixels wide and high.
pub const MAX_GLYPHS: u32 = 512;
/// The widest and tallest glyph the kernel takes, in pixels.
pub const MAX_SIDE: u32 = 32;

const PSF1_MAGIC: [u8; 2] = [0x36, 0x04];
const PSF1_MODE512: u8 = 0x01;
const PSF1_MODEHASTAB: u8 = 0x02;
const PSF1_MODESEQ: u8 = 0x04;
const PSF1_SEPARATOR: u16 = 0xFFFF;
const PSF1_STARTSEQ: u16 = 0xFFFE;

const PSF2_MAGIC: [u8; 4] = [0x72, 0xb5, 0x4a, 0x86];
const PSF2_HAS_UNICODE_TABLE: u32 = 0x01;
const PSF2_SEPARATOR: u8 = 0xFF;
const PSF2_STARTSEQ: u8 = 0xFE;

/// A PSF font, as read from its bytes (borrowed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Psf<'a> {
    /// 1 or 2.
    pub version: u8,
    /// Glyph width in pixels.
    pub width: u32,
    /// Glyph height in pixels.
    pub height: u32,
    /// How many glyphs.
    pub glyphs: u32,
    /// The glyphs: `glyphs` of `height` rows of `(width + 7) / 8` bytes each.
    data: &'a [u8],
    /// The Unicode table after the glyphs, if the font has one.
    table: Option<&'a [u8]>,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl<'a> Psf<'a> {
    /// Read a PSF1 or PSF2 font; an error says what is wrong with it. Never panics.
    pub fn parse(b: &'a [u8]) -> Result<Psf<'a>, String> {
        if b.starts_with(&PSF2_MAGIC) {
            Self::parse2(b)
        } else if b.starts_with(&PSF1_MAGIC) {
            Self::parse1(b)
        } else {
            Err("not a PSF font (no PSF1 or PSF2 magic)".into())
        }
    }

    fn parse1(b: &'a [u8]) -> Result<Psf<'a>, String> {
        let [_, _, mode, height, ..] = *b else { return Err("PSF1: truncated header".into()) };
        let glyphs: u32 = if mode & PSF1_MODE512 != 0 { 512 } else { 256 };
        if height == 0 {
            return Err("PSF1: glyph height 0".into());
        }
        let size = glyphs as usize * height as usize;
        let data = b.get(4..4 + size).ok_or_else(|| {
            format!("PSF1: truncated: {glyphs} glyphs of 8x{height} need {size} bytes, {} there", b.len() - 4)
        })?;
        let has_table = mode & (PSF1_MODEHASTAB | PSF1_MODESEQ) != 0;
        let table = has_table.then(|| &b[4 + size..]);
        Ok(Psf { version: 1, width: 8, height: u32::from(height), glyphs, data, table })
    }

    fn parse2(b: &'a [u8]) -> Result<Psf<'a>, String> {
        if b.len() < 32 {
            return Err("PSF2: truncated header".into());
        }
        let (version, header, flags) = (u32_at(b, 4), u32_at(b, 8), u32_at(b, 12));
        let (glyphs, charsize, height, width) = (u32_at(b, 16), u32_at(b, 20), u32_at(b, 24), u32_at(b, 28));
        if version != 0 {
            return Err(format!("PSF2: version {version}, not 0"));
        }
        if !(32..=4096).contains(&header) {
            return Err(format!("PSF2: header size {header}"));
        }
        if glyphs == 0 || width == 0 || height == 0 {
            return Err(format!("PSF2: {glyphs} glyphs of {width}x{height}"));
        }
        let row = width.div_ceil(8) as u64;
        if u64::from(charsize) != row * u64::from(height) {
            return Err(format!(
                "PSF2: {charsize} bytes a glyph for {width}x{height}, not {}",
                row * u64::from(height)
            ));
        }
        let size = u64::from(glyphs) * u64::from(charsize);
        let end = u64::from(header) + size;
        if end > b.len() as u64 {
            return Err(format!(
                "PSF2: truncated: {glyphs} glyphs of {width}x{height} need {size} bytes, {} there",
                (b.len() as u64).saturating_sub(u64::from(header))
            ));
        }
        let (header, end) = (header as usize, end as usize);
        let table = (flags & PSF2_HAS_UNICODE_TABLE != 0).then(|| &b[end..]);
        Ok(Psf { version: 2, width, height, glyphs, data: &b[header..end], table })
    }

    /// Whether the font maps Unicode characters to its glyphs.
    pub fn has_unicode(&self) -> bool {
        self.table.is_some()
    }

    /// Why the kernel would refuse the font (its limits: [`MAX_GLYPHS`], [`MAX_SIDE`]);
    /// None when it takes it.
    pub fn kernel_refuses(&self) -> Option<String> {
        if self.glyphs > MAX_GLYPHS {
            return Some(format!("{} glyphs; the kernel takes at most {MAX_GLYPHS}", self.glyphs));
        }
        if self.width > MAX_SIDE || self.height > MAX_SIDE {
            return Some(format!("{}x{}; the kernel takes at most {MAX_SIDE}x{MAX_SIDE}", self.width, self.height));
        }
        None
    }

    /// The glyphs as KDFONTOP's KD_FONT_OP_SET reads them: each glyph 32 rows of
    /// `(width + 7) / 8` bytes, the rows past its height zero. Err when the kernel would refuse
    /// the font.
    pub fn kernel_glyphs(&self) -> Result<Vec<u8>, String> {
        if let Some(why) = self.kernel_refuses() {
            return Err(why);
        }
        let row = self.width.div_ceil(8) as usize;
        let glyph = row * self.height as usize;
        let mut out = vec![0u8; row * MAX_SIDE as usize * self.glyphs as usize];
        for (src, dst) in self.data.chunks_exact(glyph).zip(out.chunks_exact_mut(row * MAX_SIDE as usize)) {
            dst[..glyph].copy_from_slice(src);
        }
        Ok(out)
    }

    /// The Unicode table as (character, glyph) pairs, as PIO_UNIMAP takes them: only
    /// characters of the Basic Multilingual Plane (the kernel's map holds 16-bit ones), and
    /// no sequences (the kernel has no use for them). Empty without a table; an error for a
    /// table that is not well formed.
    pub fn unicode_pairs(&self) -> Result<Vec<(u16, u16)>, String> {
        if let Some(why) = self.kernel_refuses() {
            return Err(why);
        }
        let Some(t) = self.table else { return Ok(Vec::new()) };
        let mut pairs = Vec::new();
        let mut glyph: u32 = 0;
        if self.version == 1 {
            let mut in_seq = false;
            for c in t.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])) {
                if glyph >= self.glyphs {
                    break;
                }
                match c {
                    PSF1_SEPARATOR => {
                        glyph += 1;
                        in_seq = false;
                    }
                    PSF1_STARTSEQ => in_seq = true,
                    c if !in_seq => pairs.push((c, glyph as u16)),
                    _ => {}
                }
            }
        } else {
            for entry in t.split(|b| *b == PSF2_SEPARATOR).take(self.glyphs as usize) {
                // Before the first sequence mark: single characters; after: sequences.
                let singles = entry.split(|b| *b == PSF2_STARTSEQ).next().unwrap_or_default();
                let s = core::str::from_utf8(singles)
                    .map_err(|e| format!("PSF2: the Unicode table of glyph {glyph} is not UTF-8 ({e})"))?;
                pairs.extend(s.chars().filter_map(|c| u16::try_from(u32::from(c)).ok()).map(|c| (c, glyph as u16)));
                glyph += 1;
            }
        }
        Ok(pairs)
    }

    /// What the font is, for messages: `16x32, 512 glyphs, Unicode table`.
    pub fn describe(&self) -> String {
        let table = if self.has_unicode() { ", Unicode table" } else { "" };
        format!("{}x{}, {} glyphs{table}", self.width, self.height, self.glyphs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PSF2 font of `glyphs` glyphs `w`x`h`, glyph i's bytes all i, with a table mapping
    /// glyph i to `'A' + i` and glyph 1 to 'é' and a sequence too.
    pub(crate) fn psf2(glyphs: u32, w: u32, h: u32) -> Vec<u8> {
        let row = w.div_ceil(8);
        let mut b = PSF2_MAGIC.to_vec();
        for v in [0, 32, PSF2_HAS_UNICODE_TABLE, glyphs, row * h, h, w] {
            b.extend(v.to_le_bytes());
        }
        for i in 0..glyphs {
            b.extend(vec![i as u8; (row * h) as usize]);
        }
        for i in 0..glyphs {
            b.push(b'A' + (i % 26) as u8);
            if i == 1 {
                b.extend("é".as_bytes());
                b.push(PSF2_STARTSEQ);
                b.extend("e\u{301}".as_bytes());
            }
            b.push(PSF2_SEPARATOR);
        }
        b
    }

    #[test]
    fn reads_psf2_and_pads_glyphs_for_the_kernel() {
        let b = psf2(3, 16, 20);
        let f = Psf::parse(&b).unwrap();
        assert_eq!((f.version, f.width, f.height, f.glyphs), (2, 16, 20, 3));
        assert_eq!(f.describe(), "16x20, 3 glyphs, Unicode table");
        let k = f.kernel_glyphs().unwrap();
        assert_eq!(k.len(), 3 * 2 * 32);
        assert_eq!(&k[64..64 + 40], &[1u8; 40][..]);
        assert_eq!(&k[64 + 40..128], &[0u8; 24][..], "rows past the height are zero");
        assert_eq!(f.unicode_pairs().unwrap(), [(0x41, 0), (0x42, 1), (0xe9, 1), (0x43, 2)]);
    }

    #[test]
    fn reads_psf1() {
        let mut b = vec![0x36, 0x04, PSF1_MODEHASTAB, 14];
        b.extend(vec![7u8; 256 * 14]);
        for i in 0..256u16 {
            b.extend(i.to_le_bytes());
            if i == 3 {
                b.extend([PSF1_STARTSEQ, 0x65, 0x301].iter().flat_map(|c| c.to_le_bytes()));
            }
            b.extend(PSF1_SEPARATOR.to_le_bytes());
        }
        let f = Psf::parse(&b).unwrap();
        assert_eq!((f.version, f.width, f.height, f.glyphs), (1, 8, 14, 256));
        let pairs = f.unicode_pairs().unwrap();
        assert_eq!(pairs.len(), 256, "the sequence is left out");
        assert_eq!(pairs[3], (3, 3));
        assert_eq!(f.kernel_glyphs().unwrap().len(), 256 * 32);
        b[2] = 0;
        assert!(!Psf::parse(&b).unwrap().has_unicode());
    }

    #[test]
    fn garbled_fonts_are_errors_not_panics() {
        let good = psf2(4, 8, 16);
        assert!(Psf::parse(b"").unwrap_err().contains("not a PSF font"));
        assert!(Psf::parse(&[0x36, 0x04, 0]).unwrap_err().contains("truncated"));
        assert!(Psf::parse(&[0x36, 0x04, 0, 0]).unwrap_err().contains("height 0"));
        assert!(Psf::parse(&good[..20]).unwrap_err().contains("truncated header"));
        assert!(Psf::parse(&good[..90]).unwrap_err().contains("truncated"));
        let set = |at: usize, v: u32| {
            let mut b = good.clone();
            b[at..at + 4].copy_from_slice(&v.to_le_bytes());
            Psf::parse(&b).map(|f| f.glyphs)
        };
        assert!(set(4, 1).unwrap_err().contains("version 1"));
        assert!(set(8, 8).unwrap_err().contains("header size"));
        assert!(set(8, u32::MAX).unwrap_err().contains("header size"));
        assert!(set(16, u32::MAX).unwrap_err().contains("truncated"));
        assert!(set(16, 0).unwrap_err().contains("0 glyphs"));
        assert!(set(20, 17).unwrap_err().contains("17 bytes a glyph"));
        assert!(set(24, u32::MAX).is_err());
        assert!(set(28, u32::MAX).is_err());
        // Too large for the kernel: read, but refused for loading.
        let big = psf2(600, 8, 16);
        let f = Psf::parse(&big).unwrap();
        assert!(f.kernel_glyphs().unwrap_err().contains("at most 512"));
        let wide = psf2(2, 40, 16);
        assert!(Psf::parse(&wide).unwrap().kernel_refuses().unwrap().contains("at most 32x32"));
        // A table that is not UTF-8.
        let mut bad = good.clone();
        let t = 32 + 4 * 16;
        bad[t] = 0xC3;
        assert!(Psf::parse(&bad).unwrap().unicode_pairs().unwrap_err().contains("not UTF-8"));
        // A table cut short or absent is what it is: fewer pairs.
        assert!(Psf::parse(&good[..t + 1]).unwrap().unicode_pairs().unwrap().len() == 1);
    }
}
