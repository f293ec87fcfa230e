//! Values in the configuration are words: a byte that would end a word or a line (white
//! space, control characters) or `%` itself is written `%XX`.

use alloc::string::String;
use alloc::vec::Vec;

/// One value as one word.
pub(crate) fn word(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c == '%' || c.is_whitespace() || c.is_control() {
            let mut b = [0u8; 4];
            for byte in c.encode_utf8(&mut b).bytes() {
                out.push('%');
                out.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0').to_ascii_uppercase());
                out.push(char::from_digit(u32::from(byte & 15), 16).unwrap_or('0').to_ascii_uppercase());
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The value a word stands for; `None` for a broken escape or bytes that are not UTF-8.
pub(crate) fn unword(w: &str) -> Option<String> {
    let b = w.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = w.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        for s in ["", "plain", "a b", "100%", "tab\there", "new\nline", "ünï cödé", "%41", "\u{7f}\u{85}"] {
            let w = word(s);
            assert!(!w.contains(char::is_whitespace), "{w:?}");
            assert_eq!(unword(&w).as_deref(), Some(s), "{w:?}");
        }
        assert_eq!(unword("%4"), None);
        assert_eq!(unword("%zz"), None);
        assert_eq!(unword("%FF"), None, "not UTF-8");
    }
}
