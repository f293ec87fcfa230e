//! The console font: `Psf::parse` (crates/contract/src/font.rs), which the generator runs on the
//! font file a system names and /init on the file in the image. A broken or hostile file hands
//! it anything.
//!
//! Holds to:
//! - `parse`, `kernel_glyphs` and `unicode_pairs` never panic, whatever the bytes;
//! - what parses and the kernel takes gives exactly the glyph bytes KDFONTOP reads
//!   (`glyphs * ((width + 7) / 8) * 32`), and every Unicode pair names a glyph the font has.

#![no_main]

use leanrd_contract::Psf;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = Psf::parse(data) else { return };
    assert!(f.width > 0 && f.height > 0 && f.glyphs > 0);
    let refused = f.kernel_refuses();
    match f.kernel_glyphs() {
        Ok(g) => {
            assert!(refused.is_none());
            assert_eq!(g.len(), f.glyphs as usize * f.width.div_ceil(8) as usize * 32);
        }
        Err(_) => assert!(refused.is_some()),
    }
    if let Ok(pairs) = f.unicode_pairs() {
        assert!(pairs.iter().all(|(_, g)| u32::from(*g) < f.glyphs));
        assert!(f.has_unicode() || pairs.is_empty());
    }
});
