//! Clevis's JWEs: what `clevis luks bind` puts in a LUKS2 token (`"type": "clevis"`, the JWE
//! in flattened JSON form under `"jwe"`), and the pins their protected headers name: `tang`
//! (McCallum-Relyea over HTTP), `tpm2` (a key sealed by the machine's TPM), `sss` (Shamir's
//! threshold over other pins' JWEs, nested) and any other (`null`, `yubikey`...), by name.
//!
//! The generator reads them for what an image needs (the network for a Tang server); /init to
//! unlock. A header comes from a disk and a JWE from wherever it was written: whatever does not
//! have clevis's shape is an error that says which part, never a panic (fuzzed: `contract`).

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use base64ct::{Base64UrlUnpadded, Encoding};
use serde_json::{Map, Value};

/// How deep `sss` may nest: clevis's own policies go two deep; a header that goes deeper is
/// refused rather than walked (a hostile one would exhaust the stack).
const MAX_DEPTH: usize = 4;

/// A clevis JWE, its parts decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jwe {
    /// The protected header as written (base64url): the AEAD's additional data.
    pub protected: String,
    /// The JOSE key management algorithm: `ECDH-ES` (tang), `dir` (sss).
    pub alg: String,
    /// The content encryption: `A256GCM` (clevis writes no other).
    pub enc: String,
    /// ECDH-ES's `apu` and `apv` (decoded; empty when absent).
    pub apu: Vec<u8>,
    /// See `apu`.
    pub apv: Vec<u8>,
    /// The initialisation vector.
    pub iv: Vec<u8>,
    /// The ciphertext.
    pub ciphertext: Vec<u8>,
    /// The authentication tag.
    pub tag: Vec<u8>,
    /// The pin that holds the key.
    pub pin: Pin,
}

/// What holds a JWE's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pin {
    /// A Tang server.
    Tang(Tang),
    /// Shamir's secret sharing: `threshold` of the shares, each a JWE of its own pin.
    Sss {
        /// How many shares open it (`t`).
        threshold: usize,
        /// The prime field's modulus, big-endian (`p`).
        prime: Vec<u8>,
        /// The shares (`jwe`).
        shares: Vec<Jwe>,
    },
    /// A key sealed by the TPM (`clevis encrypt tpm2`).
    Tpm2(Tpm2),
    /// Any other pin (`null`, `yubikey`...), by name.
    Other(String),
}

/// A tpm2 pin's header: the sealed object `tpm2_create` wrote, and what recreates its parent
/// (a primary key under the owner hierarchy from tpm2-tools' default template) and its
/// policy (the PCRs it was sealed to).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tpm2 {
    /// The name algorithm of the primary key and the object: `sha1`, `sha256`, `sha384`,
    /// `sha512` (`hash`).
    pub hash: String,
    /// The primary key's type: `ecc` or `rsa` (`key`).
    pub key: String,
    /// The PCR bank of the policy (`pcr_bank`); empty without a policy.
    pub pcr_bank: String,
    /// The PCRs of the policy (`pcr_ids`, `7` or `0,7`); empty: none, the object opens with
    /// an empty password.
    pub pcr_ids: Vec<u8>,
    /// The object's TPM2B_PUBLIC and TPM2B_PRIVATE, as marshalled (`jwk_pub`, `jwk_priv`).
    pub public: Vec<u8>,
    /// See `public`.
    pub private: Vec<u8>,
}

/// A tang pin's header: the server, its advertised keys, and the client's half of the
/// exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tang {
    /// The server (`clevis.tang.url`).
    pub url: String,
    /// The thumbprint of the server's exchange key (`kid`): `POST URL/rec/KID`.
    pub kid: String,
    /// The client's ephemeral public key of the binding (`epk`).
    pub epk: EcKey,
    /// The advertisement's keys (`clevis.tang.adv.keys`).
    pub adv: Vec<EcKey>,
}

/// A public elliptic-curve JWK, as Tang's keys and replies are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EcKey {
    /// `P-256`, `P-384` or `P-521`.
    pub crv: String,
    /// The affine coordinates, big-endian, as given.
    pub x: Vec<u8>,
    /// See `x`.
    pub y: Vec<u8>,
    /// `alg`: `ECMR` for a Tang exchange key, `ES512`... for a signing key.
    pub alg: Option<String>,
}

impl EcKey {
    /// An EC JWK (`kty` `EC`); other members are ignored.
    pub fn from_json(v: &Value) -> Result<EcKey, String> {
        let o = v.as_object().ok_or("a JWK that is not an object")?;
        if o.get("kty").and_then(Value::as_str) != Some("EC") {
            return Err("a JWK whose kty is not EC".into());
        }
        Ok(EcKey {
            crv: text(o, "crv")?.to_owned(),
            x: b64(o, "x")?,
            y: b64(o, "y")?,
            alg: o.get("alg").and_then(Value::as_str).map(ToOwned::to_owned),
        })
    }

    /// A JWK's JSON text (a Tang server's answer).
    pub fn parse(text: &[u8]) -> Result<EcKey, String> {
        let v: Value = serde_json::from_slice(text).map_err(|e| format!("not JSON ({e})"))?;
        EcKey::from_json(&v)
    }

    /// The JWK as JSON: the members RFC 7638 requires, with `alg` when the key has one.
    pub fn to_json(&self) -> String {
        let alg = self.alg.as_deref().map(|a| format!("\"alg\":\"{a}\",")).unwrap_or_default();
        format!(
            "{{{alg}\"crv\":\"{}\",\"kty\":\"EC\",\"x\":\"{}\",\"y\":\"{}\"}}",
            self.crv,
            Base64UrlUnpadded::encode_string(&self.x),
            Base64UrlUnpadded::encode_string(&self.y)
        )
    }

    /// The JSON RFC 7638's thumbprint hashes: the required members only, in order.
    pub fn thumbprint_input(&self) -> String {
        EcKey { alg: None, ..self.clone() }.to_json()
    }
}

/// The key of a symmetric JWK (`{"kty":"oct","k":...}`): what a tpm2 pin seals.
pub fn oct_key(jwk: &[u8]) -> Result<Vec<u8>, String> {
    let v: Value = serde_json::from_slice(jwk).map_err(|_| String::from("not a JWK (not JSON)"))?;
    if v.get("kty").and_then(Value::as_str) != Some("oct") {
        return Err("a JWK whose kty is not oct".into());
    }
    b64(v.as_object().ok_or("a JWK that is not an object")?, "k")
}

/// Base64url without padding, as JOSE writes it.
pub fn b64_decode(s: &str) -> Result<Vec<u8>, String> {
    Base64UrlUnpadded::decode_vec(s.trim_end_matches('=')).map_err(|_| "not base64url".to_string())
}

/// Base64url without padding.
pub fn b64_encode(b: &[u8]) -> String {
    Base64UrlUnpadded::encode_string(b)
}

fn text<'a>(o: &'a Map<String, Value>, k: &str) -> Result<&'a str, String> {
    o.get(k).and_then(Value::as_str).ok_or_else(|| format!("no \"{k}\""))
}

fn b64(o: &Map<String, Value>, k: &str) -> Result<Vec<u8>, String> {
    b64_decode(text(o, k)?).map_err(|e| format!("\"{k}\": {e}"))
}

impl Jwe {
    /// The compact form (`HEADER.KEY.IV.CIPHERTEXT.TAG`), as `clevis encrypt` prints it and
    /// as `sss` nests its shares.
    pub fn compact(s: &str) -> Result<Jwe, String> {
        Jwe::compact_at(s, 0)
    }

    /// The flattened JSON form, as a LUKS2 clevis token holds it under `"jwe"`.
    pub fn flattened(v: &Value) -> Result<Jwe, String> {
        let o = v.as_object().ok_or("the JWE is not an object")?;
        Jwe::parts(text(o, "protected")?, text(o, "iv")?, text(o, "ciphertext")?, text(o, "tag")?, 0)
    }

    fn compact_at(s: &str, depth: usize) -> Result<Jwe, String> {
        let p: Vec<&str> = s.trim().split('.').collect();
        let [protected, _key, iv, ciphertext, tag] = p[..] else {
            return Err(format!("a compact JWE has 5 parts, this one {}", p.len()));
        };
        Jwe::parts(protected, iv, ciphertext, tag, depth)
    }

    fn parts(protected: &str, iv: &str, ciphertext: &str, tag: &str, depth: usize) -> Result<Jwe, String> {
        let header = b64_decode(protected).map_err(|e| format!("protected header: {e}"))?;
        let header: Value = serde_json::from_slice(&header).map_err(|e| format!("protected header: {e}"))?;
        let h = header.as_object().ok_or("the protected header is not an object")?;
        let opt = |k: &str| match h.get(k) {
            None => Ok(Vec::new()),
            Some(_) => b64(h, k),
        };
        let field = |name: &str, v: &str| b64_decode(v).map_err(|e| format!("{name}: {e}"));
        Ok(Jwe {
            protected: protected.to_owned(),
            alg: text(h, "alg")?.to_owned(),
            enc: text(h, "enc")?.to_owned(),
            apu: opt("apu")?,
            apv: opt("apv")?,
            iv: field("iv", iv)?,
            ciphertext: field("ciphertext", ciphertext)?,
            tag: field("tag", tag)?,
            pin: Pin::from_header(h, depth)?,
        })
    }

    /// Every pin this JWE's key depends on, itself first, then the shares', depth first.
    pub fn pins(&self) -> Vec<&Pin> {
        let mut out = alloc::vec![&self.pin];
        if let Pin::Sss { shares, .. } = &self.pin {
            for s in shares {
                out.extend(s.pins());
            }
        }
        out
    }
}

impl Pin {
    fn from_header(h: &Map<String, Value>, depth: usize) -> Result<Pin, String> {
        let c = h.get("clevis").and_then(Value::as_object).ok_or("no \"clevis\" in the protected header")?;
        let name = text(c, "pin")?;
        let conf = |n: &str| c.get(n).and_then(Value::as_object).ok_or_else(|| format!("pin {n}: no \"{n}\" object"));
        match name {
            "tang" => {
                let t = conf("tang")?;
                let keys = t
                    .get("adv")
                    .and_then(|a| a.get("keys"))
                    .and_then(Value::as_array)
                    .ok_or("pin tang: no advertisement (clevis.tang.adv.keys)")?;
                Ok(Pin::Tang(Tang {
                    url: text(t, "url").map_err(|e| format!("pin tang: {e}"))?.to_owned(),
                    kid: text(h, "kid").map_err(|e| format!("pin tang: {e}"))?.to_owned(),
                    epk: EcKey::from_json(h.get("epk").ok_or("pin tang: no \"epk\"")?)
                        .map_err(|e| format!("pin tang: epk: {e}"))?,
                    // Signing keys and others that are not EC are skipped, not refused.
                    adv: keys.iter().filter_map(|k| EcKey::from_json(k).ok()).collect(),
                }))
            }
            "sss" => {
                if depth >= MAX_DEPTH {
                    return Err(format!("pin sss: nested more than {MAX_DEPTH} deep"));
                }
                let s = conf("sss")?;
                let threshold = s.get("t").and_then(Value::as_u64).ok_or("pin sss: no threshold \"t\"")?;
                let shares = s.get("jwe").and_then(Value::as_array).ok_or("pin sss: no shares \"jwe\"")?;
                let shares = shares
                    .iter()
                    .map(|j| {
                        let j = j.as_str().ok_or("pin sss: a share that is not a compact JWE")?;
                        Jwe::compact_at(j, depth + 1).map_err(|e| format!("pin sss: a share: {e}"))
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                let threshold = usize::try_from(threshold).unwrap_or(usize::MAX);
                if threshold == 0 || threshold > shares.len() {
                    return Err(format!("pin sss: threshold {threshold} of {} shares", shares.len()));
                }
                Ok(Pin::Sss { threshold, prime: b64(s, "p").map_err(|e| format!("pin sss: {e}"))?, shares })
            }
            "tpm2" => {
                let t = conf("tpm2")?;
                let f = |n: &str| text(t, n).map_err(|e| format!("pin tpm2: {e}"));
                let pcr_ids = match t.get("pcr_ids") {
                    None => Vec::new(),
                    // clevis writes a string ("0,7"); a list of numbers is taken as well.
                    Some(Value::String(s)) if s.trim().is_empty() => Vec::new(),
                    Some(Value::String(s)) => s
                        .split(',')
                        .map(|p| p.trim().parse::<u8>().ok().filter(|n| *n < 24))
                        .collect::<Option<Vec<u8>>>()
                        .ok_or_else(|| format!("pin tpm2: pcr_ids {s:?} are not PCR numbers"))?,
                    Some(Value::Array(a)) => a
                        .iter()
                        .map(|p| p.as_u64().filter(|n| *n < 24).map(|n| n as u8))
                        .collect::<Option<Vec<u8>>>()
                        .ok_or("pin tpm2: pcr_ids are not PCR numbers")?,
                    Some(_) => return Err("pin tpm2: pcr_ids are not PCR numbers".into()),
                };
                let hash = f("hash")?.to_owned();
                let key = f("key")?.to_owned();
                let pcr_bank = if pcr_ids.is_empty() { String::new() } else { f("pcr_bank")?.to_owned() };
                Ok(Pin::Tpm2(Tpm2 {
                    hash,
                    key,
                    pcr_bank,
                    pcr_ids,
                    public: b64(t, "jwk_pub").map_err(|e| format!("pin tpm2: {e}"))?,
                    private: b64(t, "jwk_priv").map_err(|e| format!("pin tpm2: {e}"))?,
                }))
            }
            other => Ok(Pin::Other(other.to_owned())),
        }
    }

    /// The pin's name, as clevis spells it.
    pub fn name(&self) -> &str {
        match self {
            Pin::Tang(_) => "tang",
            Pin::Sss { .. } => "sss",
            Pin::Tpm2(_) => "tpm2",
            Pin::Other(n) => n,
        }
    }

    /// Whether any Tang server is among this pin's (nested) pins.
    pub fn uses_tang(&self) -> bool {
        match self {
            Pin::Tang(_) => true,
            Pin::Sss { shares, .. } => shares.iter().any(|s| s.pin.uses_tang()),
            Pin::Tpm2(_) | Pin::Other(_) => false,
        }
    }
}

/// A clevis token of a LUKS2 header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClevisToken {
    /// The token's number.
    pub id: u32,
    /// The key slots it opens.
    pub keyslots: Vec<String>,
    /// Its JWE, or why it could not be read.
    pub jwe: Result<Jwe, String>,
}

impl ClevisToken {
    /// A `"type": "clevis"` token object.
    pub(crate) fn from_json(id: u32, t: &Value) -> ClevisToken {
        let keyslots = t
            .get("keyslots")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(ToOwned::to_owned).collect())
            .unwrap_or_default();
        let jwe = match t.get("jwe") {
            Some(j) => Jwe::flattened(j),
            None => Err("no \"jwe\"".into()),
        };
        ClevisToken { id, keyslots, jwe }
    }
}

/// A pin's tree for messages: `sss(t=2: tang http://a, tpm2)`.
pub fn describe(p: &Pin) -> String {
    match p {
        Pin::Tang(t) => format!("tang {}", t.url),
        Pin::Sss { threshold, shares, .. } => {
            let inner: Vec<String> = shares.iter().map(|s| describe(&s.pin)).collect();
            format!("sss(t={threshold}: {})", inner.join(", "))
        }
        Pin::Tpm2(t) if t.pcr_ids.is_empty() => "tpm2".into(),
        Pin::Tpm2(t) => {
            let ids: Vec<String> = t.pcr_ids.iter().map(|p| p.to_string()).collect();
            format!("tpm2 PCR {}:{}", t.pcr_bank, ids.join(","))
        }
        Pin::Other(n) => n.clone(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A JWE `clevis encrypt tang` wrote (clevis 19, tang 11, an advertisement given as a file).
    pub(crate) const TANG_JWE: &str = include_str!("../testdata/clevis-tang.jwe");

    #[test]
    fn a_tang_jwe_is_read() {
        let j = Jwe::compact(TANG_JWE).unwrap();
        assert_eq!((j.alg.as_str(), j.enc.as_str()), ("ECDH-ES", "A256GCM"));
        let Pin::Tang(t) = &j.pin else { panic!("{:?}", j.pin) };
        assert_eq!(t.url, "http://10.0.2.2:7500");
        assert_eq!(t.kid, "lVOYGV-oaACTKeXOQXy3gnXZzJPx17F2WthHIpvJjD8");
        assert_eq!((t.epk.crv.as_str(), t.epk.x.len(), t.epk.y.len()), ("P-521", 66, 66));
        assert_eq!(t.adv.len(), 2);
        assert_eq!((j.iv.len(), j.tag.len()), (12, 16));
        assert!(j.pin.uses_tang());
        assert_eq!(describe(&j.pin), "tang http://10.0.2.2:7500");
    }

    #[test]
    fn a_tpm2_jwe_is_read() {
        // `clevis encrypt tpm2 '{"pcr_ids":"7","pcr_bank":"sha256"}'` (clevis 19, tpm2-tools 5.4).
        let j = Jwe::compact(include_str!("../testdata/clevis-tpm2-pcr7.jwe")).unwrap();
        assert_eq!((j.alg.as_str(), j.enc.as_str()), ("dir", "A256GCM"));
        let Pin::Tpm2(t) = &j.pin else { panic!("{:?}", j.pin) };
        assert_eq!((t.hash.as_str(), t.key.as_str(), t.pcr_bank.as_str()), ("sha256", "ecc", "sha256"));
        assert_eq!(t.pcr_ids, [7]);
        // TPM2B_PUBLIC and TPM2B_PRIVATE: each its size first.
        assert_eq!(usize::from(u16::from_be_bytes([t.public[0], t.public[1]])), t.public.len() - 2);
        assert_eq!(usize::from(u16::from_be_bytes([t.private[0], t.private[1]])), t.private.len() - 2);
        assert_eq!(describe(&j.pin), "tpm2 PCR sha256:7");
        assert!(!j.pin.uses_tang());
    }

    #[test]
    fn what_is_not_clevis_is_an_error_that_says_what() {
        let j = |h: &str| Jwe::compact(&format!("{}..AA.AA.AA", b64_encode(h.as_bytes())));
        assert!(j("{\"alg\":\"dir\",\"enc\":\"A256GCM\"}").unwrap_err().contains("clevis"));
        assert!(
            j(r#"{"alg":"dir","enc":"A256GCM","clevis":{"pin":"tpm2","tpm2":{}}}"#).unwrap_err().contains("pin tpm2")
        );
        assert_eq!(
            j(r#"{"alg":"dir","enc":"A256GCM","clevis":{"pin":"yubikey","yubikey":{}}}"#).unwrap().pin,
            Pin::Other("yubikey".into())
        );
        let bad = r#"{"alg":"dir","enc":"A256GCM","clevis":{"pin":"tpm2","tpm2":{"hash":"sha256","key":"ecc","pcr_bank":"sha256","pcr_ids":"7,99","jwk_pub":"AA","jwk_priv":"AA"}}}"#;
        assert!(j(bad).unwrap_err().contains("\"7,99\" are not PCR numbers"));
        assert!(
            j(r#"{"alg":"ECDH-ES","enc":"A256GCM","clevis":{"pin":"tang","tang":{"url":"u"}}}"#)
                .unwrap_err()
                .contains("advertisement")
        );
        assert!(Jwe::compact("a.b.c").unwrap_err().contains("5 parts"));
        assert!(Jwe::compact("!!..AA.AA.AA").unwrap_err().contains("base64url"));
        // sss: a threshold above the shares, and nesting past the bound.
        let null = format!("{}..AA.AA.AA", b64_encode(br#"{"alg":"dir","enc":"A256GCM","clevis":{"pin":"null"}}"#));
        let sss = |t: u32, inner: &str| {
            format!(
                r#"{{"alg":"dir","enc":"A256GCM","clevis":{{"pin":"sss","sss":{{"t":{t},"p":"AQ","jwe":["{inner}"]}}}}}}"#
            )
        };
        let ok = j(&sss(1, &null)).unwrap();
        assert_eq!(describe(&ok.pin), "sss(t=1: null)");
        assert_eq!(ok.pins().len(), 2);
        assert!(j(&sss(2, &null)).unwrap_err().contains("threshold 2 of 1"));
        let mut deep = null.clone();
        for _ in 0..6 {
            deep = format!("{}..AA.AA.AA", b64_encode(sss(1, &deep).as_bytes()));
        }
        assert!(Jwe::compact(&deep).unwrap_err().contains("nested"));
    }

    #[test]
    fn an_oct_jwk_gives_its_key() {
        assert_eq!(oct_key(br#"{"alg":"A256GCM","k":"AQI","kty":"oct"}"#).unwrap(), [1, 2]);
        assert!(oct_key(b"{}").unwrap_err().contains("not oct"));
        assert!(oct_key(br#"{"kty":"oct"}"#).unwrap_err().contains("\"k\""));
        assert!(oct_key(b"\x00").is_err());
    }

    #[test]
    fn thumbprint_input_is_rfc7638s() {
        let k = EcKey { crv: "P-256".into(), x: alloc::vec![1], y: alloc::vec![2], alg: Some("ECMR".into()) };
        assert_eq!(k.thumbprint_input(), r#"{"crv":"P-256","kty":"EC","x":"AQ","y":"Ag"}"#);
        assert_eq!(k.to_json(), r#"{"alg":"ECMR","crv":"P-256","kty":"EC","x":"AQ","y":"Ag"}"#);
    }
}
