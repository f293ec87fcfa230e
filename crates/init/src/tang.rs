//! The Tang exchange (McCallum-Relyea) and clevis's JWE decryption, as `clevis decrypt tang`
//! does them, in /init itself: no shell, jose, curl or OpenSSL in the image.
//!
//! At binding, clevis made an ephemeral key `c`, kept its public half `C = cG` in the JWE
//! (`epk`), and encrypted with ECDH-ES over `K = cS` (`S = sG`: the server's exchange key, in
//! the advertisement, named by `kid`). To recover `K` without the server learning it:
//! - a fresh `e`, and `X = C + eG`, posted to `URL/rec/KID`;
//! - the server answers `Y = sX = K + eS`;
//! - `K = Y - eS`: its x coordinate is ECDH-ES's shared secret (RFC 7518 §4.6), through
//!   Concat KDF (SHA-256) to the content key, and AES-256-GCM opens the ciphertext.
//!
//! The arithmetic and ciphers are RustCrypto's (p256/p384/p521, aes-gcm, sha2): nothing here
//! is hand-written cryptography. Whatever the server sends is checked: a point not on the
//! curve, the identity, the wrong curve or a reply that does not decrypt is an error, never a
//! panic.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes256Gcm, KeyInit};
use elliptic_curve::group::Group;
use elliptic_curve::sec1::{EncodedPoint, FromEncodedPoint, ModulusSize, ToEncodedPoint};
use elliptic_curve::{AffinePoint, CurveArithmetic, FieldBytesSize, NonZeroScalar, ProjectivePoint, PublicKey};
use leanrd_contract::clevis::{EcKey, Jwe, Tang, b64_encode};
use sha2::Digest;

/// The kernel's random numbers (getrandom(2)), for the ephemeral key. A getrandom that fails
/// (a kernel without it) marks the generator `failed` and fills with a non-zero pattern (so that
/// a scalar drawn from it terminates); the caller refuses what was drawn. /init never panics.
#[derive(Default)]
pub struct KernelRng {
    /// getrandom failed: nothing drawn may be used.
    pub failed: bool,
}

impl rand_core::RngCore for KernelRng {
    fn next_u32(&mut self) -> u32 {
        rand_core::impls::next_u32_via_fill(self)
    }
    fn next_u64(&mut self) -> u64 {
        rand_core::impls::next_u64_via_fill(self)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        let mut done = 0;
        while done < dest.len() {
            // Blocks until the kernel's pool is initialised (it is, long before /init asks
            // here: the CRNG is seeded at boot on every machine leanrd supports).
            match rustix::rand::getrandom(&mut dest[done..], rustix::rand::GetRandomFlags::empty()) {
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => {
                    self.failed = true;
                    dest[done..].fill(1);
                    return;
                }
            }
        }
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl rand_core::CryptoRng for KernelRng {}

/// The advertised exchange key the JWE's `kid` names: its RFC 7638 thumbprint, SHA-256 (what
/// clevis writes now) or SHA-1 (what older clevis wrote).
pub fn server_key(t: &Tang) -> Result<&EcKey, String> {
    t.adv
        .iter()
        .find(|k| {
            let input = k.thumbprint_input();
            b64_encode(&sha2::Sha256::digest(input.as_bytes())) == t.kid
                || b64_encode(&sha1::Sha1::digest(input.as_bytes())) == t.kid
        })
        .ok_or_else(|| format!("no key of the advertisement has the thumbprint {} (kid)", t.kid))
}

/// One curve's points from JWKs and back.
fn point<C>(k: &EcKey) -> Result<PublicKey<C>, String>
where
    C: CurveArithmetic,
    AffinePoint<C>: FromEncodedPoint<C> + ToEncodedPoint<C>,
    FieldBytesSize<C>: ModulusSize,
{
    let size = <FieldBytesSize<C> as elliptic_curve::generic_array::typenum::Unsigned>::USIZE;
    if k.x.len() > size || k.y.len() > size {
        return Err(format!("a {} point with coordinates longer than the curve's", k.crv));
    }
    let mut sec1 = alloc::vec![0u8; 1 + 2 * size];
    sec1[0] = 4;
    sec1[1 + size - k.x.len()..1 + size].copy_from_slice(&k.x);
    sec1[1 + 2 * size - k.y.len()..].copy_from_slice(&k.y);
    PublicKey::<C>::from_sec1_bytes(&sec1).map_err(|_| format!("a point that is not on {}", k.crv))
}

fn key_of<C>(p: ProjectivePoint<C>, crv: &str) -> Result<EcKey, String>
where
    C: CurveArithmetic,
    AffinePoint<C>: FromEncodedPoint<C> + ToEncodedPoint<C>,
    FieldBytesSize<C>: ModulusSize,
{
    let pk = PublicKey::<C>::from_affine(p.into()).map_err(|_| "the point at infinity".to_string())?;
    let e: EncodedPoint<C> = pk.to_encoded_point(false);
    let (Some(x), Some(y)) = (e.x(), e.y()) else { return Err("the point at infinity".into()) };
    Ok(EcKey { crv: crv.into(), x: x.to_vec(), y: y.to_vec(), alg: Some("ECMR".into()) })
}

/// McCallum-Relyea on curve `C`: the shared secret's x coordinate. `rec` posts `X` and
/// returns the server's `Y`.
fn exchange<C>(
    epk: &EcKey,
    srv: &EcKey,
    rec: &mut dyn FnMut(&EcKey) -> Result<EcKey, String>,
) -> Result<Vec<u8>, String>
where
    C: CurveArithmetic,
    AffinePoint<C>: FromEncodedPoint<C> + ToEncodedPoint<C>,
    FieldBytesSize<C>: ModulusSize,
{
    let c = point::<C>(epk).map_err(|e| format!("epk: {e}"))?;
    let s = point::<C>(srv).map_err(|e| format!("the server's key: {e}"))?;
    let mut rng = KernelRng::default();
    let e = NonZeroScalar::<C>::random(&mut rng);
    if rng.failed {
        return Err("the kernel gave no random numbers (getrandom failed)".into());
    }
    let x = c.to_projective() + ProjectivePoint::<C>::generator() * *e;
    let y = rec(&key_of::<C>(x, &epk.crv)?)?;
    if y.crv != epk.crv {
        return Err(format!("the server answered on {}, not {}", y.crv, epk.crv));
    }
    let y = point::<C>(&y).map_err(|e| format!("the server's answer: {e}"))?;
    let k = y.to_projective() - s.to_projective() * *e;
    key_of::<C>(k, &epk.crv).map(|k| k.x).map_err(|e| format!("the server's answer gives {e}"))
}

/// The shared secret for a tang pin: the exchange on the JWE's curve.
pub fn shared_secret(t: &Tang, rec: &mut dyn FnMut(&EcKey) -> Result<EcKey, String>) -> Result<Vec<u8>, String> {
    let srv = server_key(t)?;
    match t.epk.crv.as_str() {
        "P-256" => exchange::<p256::NistP256>(&t.epk, srv, rec),
        "P-384" => exchange::<p384::NistP384>(&t.epk, srv, rec),
        "P-521" => exchange::<p521::NistP521>(&t.epk, srv, rec),
        c => Err(format!("curve {c}: not one Tang uses (P-256, P-384, P-521)")),
    }
}

/// RFC 7518 §4.6.2's Concat KDF with SHA-256, for ECDH-ES in direct key agreement: the key of
/// `bits` for `enc`.
pub fn concat_kdf(z: &[u8], enc: &str, apu: &[u8], apv: &[u8], bits: u32) -> Vec<u8> {
    let len = |b: &[u8]| (b.len() as u32).to_be_bytes();
    let mut out = Vec::new();
    let mut round = 1u32;
    while out.len() * 8 < bits as usize {
        let mut h = sha2::Sha256::new();
        h.update(round.to_be_bytes());
        h.update(z);
        h.update(len(enc.as_bytes()));
        h.update(enc.as_bytes());
        h.update(len(apu));
        h.update(apu);
        h.update(len(apv));
        h.update(apv);
        h.update(bits.to_be_bytes());
        out.extend_from_slice(&h.finalize());
        round += 1;
    }
    out.truncate(bits as usize / 8);
    out
}

/// Open a JWE's A256GCM content with its key; the protected header is the additional data.
pub fn open_content(jwe: &Jwe, key: &[u8]) -> Result<Vec<u8>, String> {
    if jwe.enc != "A256GCM" {
        return Err(format!("content encryption {}: clevis writes A256GCM", jwe.enc));
    }
    if jwe.iv.len() != 12 || jwe.tag.len() != 16 {
        return Err("an IV or tag not of A256GCM's size".into());
    }
    let cipher = Aes256Gcm::new_from_slice(key).map_err(|_| "a content key not of 256 bits".to_string())?;
    let mut buf = jwe.ciphertext.clone();
    cipher
        .decrypt_in_place_detached(
            aes_gcm::Nonce::from_slice(&jwe.iv),
            jwe.protected.as_bytes(),
            &mut buf,
            aes_gcm::Tag::from_slice(&jwe.tag),
        )
        .map_err(|_| "the JWE does not decrypt with the key recovered (not the key it was bound to)".to_string())?;
    Ok(buf)
}

/// Decrypt a tang pin's JWE, `rec` doing the server's part.
pub fn decrypt(jwe: &Jwe, t: &Tang, rec: &mut dyn FnMut(&EcKey) -> Result<EcKey, String>) -> Result<Vec<u8>, String> {
    if jwe.alg != "ECDH-ES" {
        return Err(format!("key management {}: a tang pin's is ECDH-ES", jwe.alg));
    }
    let z = shared_secret(t, rec)?;
    let key = concat_kdf(&z, &jwe.enc, &jwe.apu, &jwe.apv, 256);
    open_content(jwe, &key)
}

/// The server's half, for tests: `Y = dX` with the exchange key's private scalar `d`.
#[cfg(test)]
pub fn server_answer(d: &[u8], x: &EcKey) -> Result<EcKey, String> {
    fn on<C>(d: &[u8], x: &EcKey) -> Result<EcKey, String>
    where
        C: CurveArithmetic,
        AffinePoint<C>: FromEncodedPoint<C> + ToEncodedPoint<C>,
        FieldBytesSize<C>: ModulusSize,
    {
        let sk = elliptic_curve::SecretKey::<C>::from_slice(d).map_err(|_| "a bad private key".to_string())?;
        key_of::<C>(point::<C>(x)?.to_projective() * *sk.to_nonzero_scalar(), &x.crv)
    }
    match x.crv.as_str() {
        "P-256" => on::<p256::NistP256>(d, x),
        "P-384" => on::<p384::NistP384>(d, x),
        "P-521" => on::<p521::NistP521>(d, x),
        c => Err(format!("curve {c}")),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use leanrd_contract::clevis::{Pin, b64_decode};

    /// A JWE `clevis encrypt tang` wrote, and the private half of the server's exchange key
    /// (tang's own key file).
    pub(crate) const JWE: &str = include_str!("../../contract/testdata/clevis-tang.jwe");
    pub(crate) const ECMR_D: &str =
        "ARSBI4agHsfg7adRFtDegKTrKz99UB_3G85vOwAs0DJy2CoLLScDPvGQbrB4KyESGE3mINWhDXu7BrxqTWwfa04x";

    fn tang(j: &Jwe) -> &Tang {
        let Pin::Tang(t) = &j.pin else { panic!("not tang") };
        t
    }

    #[test]
    fn clevis_tang_jwe_decrypts_with_the_servers_answer() {
        let j = Jwe::compact(JWE).unwrap();
        let d = b64_decode(ECMR_D).unwrap();
        let mut posted = Vec::new();
        let got = decrypt(&j, tang(&j), &mut |x| {
            posted.push(x.clone());
            server_answer(&d, x)
        })
        .unwrap();
        assert_eq!(got, b"secret-passphrase-123");
        // Another run blinds with another e: the server never sees the same point twice.
        decrypt(&j, tang(&j), &mut |x| {
            posted.push(x.clone());
            server_answer(&d, x)
        })
        .unwrap();
        assert_ne!(posted[0], posted[1]);
        assert_ne!(posted[0].x, tang(&j).epk.x, "what is posted is not the binding's epk");
    }

    #[test]
    fn a_wrong_or_hostile_answer_is_an_error() {
        let j = Jwe::compact(JWE).unwrap();
        let t = tang(&j);
        // Another server's key: decrypts to nothing.
        let other =
            b64_decode("AVXSfXgOVLiwrtRCIy2DQcQtE2XCp1oQCDdkaT37FTOZuLqPvZ4zHOJeRIM-MksoPmJaZMewUVagRc7azA1BpOEC")
                .unwrap();
        assert!(decrypt(&j, t, &mut |x| server_answer(&other, x)).unwrap_err().contains("does not decrypt"));
        // Echoing X back (Y = X): no panic, no secret.
        assert!(decrypt(&j, t, &mut |x| Ok(x.clone())).is_err());
        // A point off the curve, too long, the wrong curve, nothing.
        let mut off = t.epk.clone();
        off.y[65] ^= 1;
        assert!(decrypt(&j, t, &mut |_| Ok(off.clone())).unwrap_err().contains("not on P-521"));
        let mut long = t.epk.clone();
        long.x.extend_from_slice(&[0; 8]);
        assert!(decrypt(&j, t, &mut |_| Ok(long.clone())).unwrap_err().contains("longer"));
        let wrong = EcKey { crv: "P-256".into(), ..t.epk.clone() };
        assert!(decrypt(&j, t, &mut |_| Ok(wrong.clone())).unwrap_err().contains("P-256"));
        assert_eq!(decrypt(&j, t, &mut |_| Err("down".into())).unwrap_err(), "down");
        // Y = eS exactly makes K the identity: refused. (Tested through the point check:
        // the identity has no SEC1 uncompressed form, so an answer cannot name it.)
    }

    #[test]
    fn the_kid_names_the_exchange_key() {
        let j = Jwe::compact(JWE).unwrap();
        let mut t = tang(&j).clone();
        assert_eq!(server_key(&t).unwrap().alg.as_deref(), Some("ECMR"));
        t.kid = "nothing".into();
        assert!(server_key(&t).unwrap_err().contains("thumbprint nothing"));
    }

    #[test]
    fn concat_kdf_matches_rfc7518_appendix_c() {
        // RFC 7518 C: ECDH-ES direct, A128GCM, apu "Alice", apv "Bob".
        let z = [
            158, 86, 217, 29, 129, 113, 53, 211, 114, 131, 66, 131, 191, 132, 38, 156, 251, 49, 110, 163, 218, 128,
            106, 72, 246, 218, 167, 121, 140, 254, 144, 196,
        ];
        let k = concat_kdf(&z, "A128GCM", b"Alice", b"Bob", 128);
        assert_eq!(k, [86, 170, 141, 234, 248, 35, 109, 32, 92, 34, 40, 205, 113, 167, 16, 26]);
    }
}
