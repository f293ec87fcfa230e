//! The tokens of a LUKS2 header: which ones are systemd's TPM2 tokens, and which of those
//! want a PIN (`systemd-cryptenroll --tpm2-with-pin=yes`). The generator reads them to know
//! which token plugins an image needs; /init, to know which tokens it may try without asking
//! (cryptsetup's format, luks2.h: a 4 KiB binary header, then the JSON area).
//!
//! The header comes from a disk: anything may be in it. The binary header is checked (magic,
//! version 2, a header size within LUKS2's bounds) and the JSON area is parsed by serde_json;
//! whatever does not fit gives no tokens, never a panic.

use alloc::string::String;
use alloc::vec::Vec;

use crate::clevis::ClevisToken;

/// The first bytes of a LUKS header.
pub const MAGIC: &[u8; 6] = b"LUKS\xba\xbe";
/// Where the JSON area begins: after the 4 KiB binary header.
pub const BINARY_HEADER: usize = 4096;
/// The largest header (binary header and JSON area) LUKS2 allows: 4 MiB.
const MAX_HEADER: u64 = 4 << 20;

/// One token of a LUKS2 header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// Its number, as `cryptsetup --token-id` takes it.
    pub id: u32,
    /// Its type (`systemd-tpm2`, `systemd-fido2`, `systemd-pkcs11`, ...).
    pub kind: String,
    /// A systemd TPM2 token sealed with a PIN (`"tpm2-pin": true`).
    pub pin: bool,
}

impl Token {
    /// A systemd TPM2 token.
    pub fn is_tpm2(&self) -> bool {
        self.kind == "systemd-tpm2"
    }
    /// A systemd FIDO2 token (a security key to touch).
    pub fn is_fido2(&self) -> bool {
        self.kind == "systemd-fido2"
    }
}

/// The size of the whole header (binary header and JSON area) that a LUKS2 binary header
/// says, within LUKS2's bounds; None for anything else (LUKS1, no LUKS, a size out of range).
pub fn header_size(head: &[u8]) -> Option<usize> {
    if head.len() < 16 || &head[..6] != MAGIC || head[6..8] != [0, 2] {
        return None;
    }
    let size = u64::from_be_bytes(head[8..16].try_into().ok()?);
    // LUKS2's JSON area sizes: 12 KiB to 4 MiB less the binary header, in 4 KiB steps.
    (size > BINARY_HEADER as u64 && size <= MAX_HEADER && size % 4096 == 0).then_some(size as usize)
}

/// The token objects of a LUKS2 header's JSON area, by number; empty for a header that is
/// not LUKS2 or whose JSON does not parse.
fn token_objects(header: &[u8]) -> Vec<(u32, serde_json::Value)> {
    let Some(size) = header_size(header) else { return Vec::new() };
    let Some(area) = header.get(BINARY_HEADER..size) else { return Vec::new() };
    // The JSON text ends at the first NUL; the rest of the area is zeros.
    let text = area.iter().position(|&b| b == 0).map_or(area, |end| &area[..end]);
    let Ok(serde_json::Value::Object(mut root)) = serde_json::from_slice::<serde_json::Value>(text) else {
        return Vec::new();
    };
    let Some(serde_json::Value::Object(all)) = root.remove("tokens") else { return Vec::new() };
    let mut out: Vec<(u32, serde_json::Value)> =
        all.into_iter().filter_map(|(id, t)| Some((id.parse().ok()?, t))).collect();
    out.sort_by_key(|(id, _)| *id);
    out
}

/// The tokens of a LUKS2 header (`header`: its first bytes, at least the size
/// [`header_size`] says), in the order of their numbers. Empty for a header that is not LUKS2
/// or whose JSON does not parse.
pub fn tokens(header: &[u8]) -> Vec<Token> {
    token_objects(header)
        .into_iter()
        .filter_map(|(id, t)| {
            let kind = t.get("type")?.as_str()?.into();
            let pin = t.get("tpm2-pin").and_then(serde_json::Value::as_bool).unwrap_or(false);
            Some(Token { id, kind, pin })
        })
        .collect()
}

/// The clevis tokens of a LUKS2 header (`clevis luks bind`), in the order of their numbers,
/// each with its JWE or why that could not be read.
pub fn clevis_tokens(header: &[u8]) -> Vec<ClevisToken> {
    token_objects(header)
        .into_iter()
        .filter(|(_, t)| t.get("type").and_then(serde_json::Value::as_str) == Some("clevis"))
        .map(|(id, t)| ClevisToken::from_json(id, &t))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// A LUKS2 header holding `json` in a 16 KiB header, as cryptsetup writes one.
    fn header(json: &str) -> Vec<u8> {
        let mut h = alloc::vec![0u8; 16384];
        h[..6].copy_from_slice(MAGIC);
        h[6..8].copy_from_slice(&[0, 2]);
        h[8..16].copy_from_slice(&16384u64.to_be_bytes());
        h[BINARY_HEADER..BINARY_HEADER + json.len()].copy_from_slice(json.as_bytes());
        h
    }

    // The shape systemd-cryptenroll writes (abridged): one token sealed with a PIN, one
    // without, and a FIDO2 one.
    const JSON: &str = r#"{"keyslots":{"0":{"type":"luks2"}},"tokens":{
        "2":{"type":"systemd-fido2","keyslots":["2"],"fido2-clientPin-required":true},
        "0":{"type":"systemd-tpm2","keyslots":["1"],"tpm2-pcrs":[7],"tpm2-pin":true},
        "1":{"type":"systemd-tpm2","keyslots":["3"],"tpm2-pcrs":[],"tpm2_pubkey_pcrs":[11]}},
        "segments":{},"digests":{},"config":{"json_size":"12288"}}"#;

    #[test]
    fn the_tokens_and_their_pins() {
        let t = tokens(&header(JSON));
        let got: Vec<(u32, &str, bool)> = t.iter().map(|t| (t.id, t.kind.as_str(), t.pin)).collect();
        assert_eq!(got, [(0, "systemd-tpm2", true), (1, "systemd-tpm2", false), (2, "systemd-fido2", false)]);
        assert!(t[0].is_tpm2() && !t[2].is_tpm2());
    }

    #[test]
    fn what_is_not_a_luks2_header_has_no_tokens() {
        let good = header(JSON);
        let mut luks1 = good.clone();
        luks1[7] = 1;
        let mut huge = good.clone();
        huge[8..16].copy_from_slice(&(8u64 << 20).to_be_bytes());
        let mut odd = good.clone();
        odd[8..16].copy_from_slice(&5000u64.to_be_bytes());
        for bad in [&luks1, &huge, &odd, &good[..8192].to_vec(), &header("{\"tokens\":[1,2]}"), &header("{not json")] {
            assert!(tokens(bad).is_empty());
        }
        // A token whose number or type is not as LUKS2 has them is left out, not the others.
        let t = tokens(&header(r#"{"tokens":{"x":{"type":"a"},"1":{"type":5},"3":{"type":"systemd-tpm2"}}}"#));
        assert_eq!(t, [Token { id: 3, kind: "systemd-tpm2".into(), pin: false }]);
    }

    #[test]
    fn clevis_tokens_carry_their_jwe() {
        let parts: Vec<&str> = crate::clevis::tests::TANG_JWE.trim().split('.').collect();
        let json = alloc::format!(
            r#"{{"tokens":{{"0":{{"type":"systemd-tpm2"}},"1":{{"type":"clevis","keyslots":["1"],"jwe":{{"ciphertext":"{}","encrypted_key":"","iv":"{}","protected":"{}","tag":"{}"}}}},"2":{{"type":"clevis","keyslots":["2"],"jwe":{{"protected":"e30"}}}}}}}}"#,
            parts[3],
            parts[2],
            parts[0],
            parts[4]
        );
        let mut h = alloc::vec![0u8; 16384];
        h[..6].copy_from_slice(MAGIC);
        h[6..8].copy_from_slice(&[0, 2]);
        h[8..16].copy_from_slice(&16384u64.to_be_bytes());
        h[BINARY_HEADER..BINARY_HEADER + json.len()].copy_from_slice(json.as_bytes());
        let c = clevis_tokens(&h);
        assert_eq!(c.len(), 2);
        assert_eq!((c[0].id, c[0].keyslots.as_slice()), (1, [alloc::string::String::from("1")].as_slice()));
        assert_eq!(c[0].jwe.as_ref().unwrap(), &crate::clevis::Jwe::compact(crate::clevis::tests::TANG_JWE).unwrap());
        assert!(c[1].jwe.is_err(), "a token without a whole JWE says so");
        assert_eq!(
            tokens(&h).iter().map(|t| t.kind.as_str()).collect::<Vec<_>>(),
            ["systemd-tpm2", "clevis", "clevis"]
        );
    }
}
