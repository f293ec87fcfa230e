//! Clevis's `sss` pin: Shamir's secret sharing over a prime field, as clevis's
//! src/pins/sss/sss.c (`sss_recover`) and clevis-decrypt-sss.c do it.
//!
//! At binding, `clevis encrypt sss` drew a prime `p` of 32 bytes and a random polynomial
//! `f` of degree `t - 1` below it; `f(0)` is the key. Each child pin encrypted one point of
//! `f`: `x || y`, each big-endian and as long as `p`'s encoding. The outer JWE is `alg: dir`,
//! `enc: A256GCM`, and its header keeps `p`, `t` and the children's compact JWEs
//! (`clevis.sss`).
//!
//! To open it: `t` of the children decrypted through their own pins (the caller's part),
//! Lagrange interpolation at `x = 0` over GF(p) gives `f(0)`, encoded big-endian on `p`'s
//! length, and that is the content key as it is: clevis-decrypt-sss.c makes it the `k` of an
//! `{"kty":"oct"}` JWK and hands it to `jose_jwe_dec_cek_io`, which uses a JWK's `k` as the
//! content encryption key (no key wrapping: `dir`). AES-256-GCM is [`crate::tang::open_content`].
//!
//! The field arithmetic is RustCrypto's crypto-bigint (Montgomery form with a modulus set at
//! run time, its constant-time inversion): nothing here is hand-written bignum code. The header
//! and the points come from a disk: a prime or a point that is not what clevis writes is an
//! error that says which, never a panic.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crypto_bigint::modular::runtime_mod::{DynResidue, DynResidueParams};
use crypto_bigint::{Encoding, U256};
use leanrd_contract::clevis::Jwe;

/// The longest prime read, in bytes. Clevis draws its prime with 32 bytes (256 bits, the size
/// of the A256GCM key it becomes: `sss_generate(32, t)` in clevis-encrypt-sss.c, not
/// configurable), and the recovered key is as long as the prime, so any other length could
/// not open the A256GCM content anyway. The arithmetic is crypto-bigint 0.5's fixed-size
/// `U256` (the version elliptic-curve already builds for tang; 0.5 has no run-time-sized
/// Montgomery form): a longer prime is refused, saying so, rather than cut.
pub const MAX_PRIME_BYTES: usize = 32;

const LIMBS: usize = U256::LIMBS;

/// A big-endian number of at most [`MAX_PRIME_BYTES`] bytes (the caller checked).
fn uint(be: &[u8]) -> U256 {
    let mut buf = [0u8; MAX_PRIME_BYTES];
    buf[MAX_PRIME_BYTES - be.len()..].copy_from_slice(be);
    U256::from_be_bytes(buf)
}

/// The secret from `points` (each `x || y`, big-endian, each half as long as `prime`): the
/// value at `x = 0` of the polynomial through them over GF(`prime`), big-endian and padded to
/// the prime's length, as `sss_recover` encodes it.
///
/// Every point must be exactly twice the prime's length, with `0 < x < p`, `y < p` and no two
/// x equal; at least one point. With fewer points than the threshold this still answers (a
/// wrong secret: the content then does not open): how many are needed is the caller's.
pub fn combine(prime: &[u8], points: &[Vec<u8>]) -> Result<Vec<u8>, String> {
    let len = prime.len();
    if len == 0 {
        return Err("pin sss: the prime p is empty".into());
    }
    if len > MAX_PRIME_BYTES {
        return Err(format!(
            "pin sss: a prime of {len} bytes; clevis writes them of 32 (the A256GCM key) and this reads up to {MAX_PRIME_BYTES}"
        ));
    }
    let p = uint(prime);
    if prime[len - 1] & 1 == 0 {
        return Err("pin sss: the prime p is even: not one clevis makes".into());
    }
    if p == U256::ONE {
        return Err("pin sss: the prime p is 1".into());
    }
    if points.is_empty() {
        return Err("pin sss: no share to combine".into());
    }
    let mut xs: Vec<U256> = Vec::with_capacity(points.len());
    let mut ys: Vec<U256> = Vec::with_capacity(points.len());
    for (i, point) in points.iter().enumerate() {
        let n = i + 1;
        if point.len() != 2 * len {
            return Err(format!(
                "pin sss: share {n} is {} bytes, not a point (x and y of {len} bytes each, as p)",
                point.len()
            ));
        }
        let (x, y) = point.split_at(len);
        let (x, y) = (uint(x), uint(y));
        if x == U256::ZERO {
            return Err(format!("pin sss: share {n} has x = 0"));
        }
        if x >= p {
            return Err(format!("pin sss: share {n} has an x not below p"));
        }
        if y >= p {
            return Err(format!("pin sss: share {n} has a y not below p"));
        }
        if let Some(j) = xs.iter().position(|o| *o == x) {
            return Err(format!("pin sss: shares {} and {n} have the same x", j + 1));
        }
        xs.push(x);
        ys.push(y);
    }

    // k = Σ_i y_i · Π_{j≠i} (0 - x_j) / (x_i - x_j)   (mod p)
    let params = DynResidueParams::<LIMBS>::new(&p); // p is odd: checked above
    let zero = DynResidue::zero(params);
    let mut k = zero;
    for (i, (xi, yi)) in xs.iter().zip(&ys).enumerate() {
        let xi = DynResidue::new(xi, params);
        let mut num = DynResidue::one(params);
        let mut den = DynResidue::one(params);
        for (j, xj) in xs.iter().enumerate() {
            if i != j {
                let xj = DynResidue::new(xj, params);
                num *= zero - xj;
                den *= xi - xj;
            }
        }
        // The x are distinct and below p, so den is not 0: with p prime it has an inverse.
        let (inv, ok) = den.invert();
        if !bool::from(ok) {
            return Err("pin sss: the shares' x differences have no inverse mod p: p is not prime".into());
        }
        k += DynResidue::new(yi, params) * num * inv;
    }
    let be = k.retrieve().to_be_bytes();
    Ok(be[MAX_PRIME_BYTES - len..].to_vec())
}

/// Open an sss pin's JWE: `shares` are the plaintexts (points) of the shares that opened
/// through their own pins, in the order they did; as clevis, the first `threshold` of them
/// give the key, which opens the A256GCM content directly (`alg: dir`).
pub fn decrypt(jwe: &Jwe, threshold: usize, prime: &[u8], shares: &[Vec<u8>]) -> Result<Vec<u8>, String> {
    if jwe.alg != "dir" {
        return Err(format!("key management {}: an sss pin's is dir", jwe.alg));
    }
    if threshold == 0 {
        return Err("pin sss: a threshold of 0".to_string());
    }
    if shares.len() < threshold {
        return Err(format!("pin sss: {} of the {threshold} shares it needs opened", shares.len()));
    }
    let key = combine(prime, &shares[..threshold])?;
    crate::tang::open_content(jwe, &key).map_err(|e| format!("pin sss: with the shares' key: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use leanrd_contract::clevis::{Pin, b64_decode};

    /// A JWE clevis 19 wrote: `clevis encrypt sss '{"t":2,"pins":{"tang":[{"url":
    /// "http://10.0.2.2:7501","adv":ADV},{...:7502...},{...:7503...}]}}' -y`, the plaintext
    /// `sss-secret-passphrase-456`, ADV the advertisement of testdata/tang-db (one Tang
    /// server's keys under three URLs).
    const JWE: &str = include_str!("../../contract/testdata/clevis-sss-tang.jwe");
    const SECRET: &[u8] = b"sss-secret-passphrase-456";

    fn sss(j: &Jwe) -> (usize, &[u8], &[Jwe]) {
        let Pin::Sss { threshold, prime, shares } = &j.pin else { panic!("not sss: {:?}", j.pin) };
        (*threshold, prime, shares)
    }

    /// The JWE, and its three shares opened through the tang pin (the server's answer made
    /// with testdata/tang-db's exchange key).
    fn opened() -> (Jwe, Vec<Vec<u8>>) {
        let j = Jwe::compact(JWE).unwrap();
        let d = b64_decode(crate::tang::tests::ECMR_D).unwrap();
        let points = sss(&j)
            .2
            .iter()
            .map(|s| {
                let Pin::Tang(t) = &s.pin else { panic!("a share not tang") };
                crate::tang::decrypt(s, t, &mut |x| crate::tang::server_answer(&d, x)).unwrap()
            })
            .collect();
        (j, points)
    }

    #[test]
    fn sss_any_two_of_clevis_three_shares_open_it() {
        let (j, points) = opened();
        let (t, p, shares) = sss(&j);
        assert_eq!((t, p.len(), shares.len()), (2, 32, 3));
        assert_eq!((j.alg.as_str(), j.enc.as_str()), ("dir", "A256GCM"));
        assert!(points.iter().all(|pt| pt.len() == 64));
        let key = combine(p, &points[..2]).unwrap();
        assert_eq!(key.len(), 32);
        for (a, b) in [(0, 1), (0, 2), (1, 2), (1, 0), (2, 0), (2, 1)] {
            let two = [points[a].clone(), points[b].clone()];
            assert_eq!(combine(p, &two).unwrap(), key, "shares {a} and {b}");
            assert_eq!(decrypt(&j, t, p, &two).unwrap(), SECRET, "shares {a} and {b}");
        }
        // Three points of a line interpolate the same line; decrypt takes the first t.
        assert_eq!(combine(p, &points).unwrap(), key);
        assert_eq!(decrypt(&j, t, p, &points).unwrap(), SECRET);
    }

    #[test]
    fn sss_below_the_threshold_does_not_open() {
        let (j, points) = opened();
        let (t, p, _) = sss(&j);
        let one = &points[..1];
        assert_eq!(decrypt(&j, t, p, one).unwrap_err(), "pin sss: 1 of the 2 shares it needs opened");
        assert!(decrypt(&j, t, p, &[]).unwrap_err().contains("0 of the 2"));
        assert!(decrypt(&j, 0, p, &points).unwrap_err().contains("threshold of 0"));
        // One point alone is a constant polynomial: its y, not the secret.
        let wrong = combine(p, one).unwrap();
        assert_eq!(wrong, points[0][32..]);
        assert!(crate::tang::open_content(&j, &wrong).unwrap_err().contains("does not decrypt"));
        assert!(decrypt(&j, 1, p, one).unwrap_err().contains("does not decrypt"));
    }

    #[test]
    fn sss_a_tampered_point_is_an_error() {
        let (j, points) = opened();
        let (t, p, _) = sss(&j);
        for (byte, bit) in [(0, 0), (31, 0), (32, 7), (63, 0), (40, 3)] {
            let mut two = [points[0].clone(), points[2].clone()];
            two[1][byte] ^= 1 << bit;
            let e = decrypt(&j, t, p, &two).unwrap_err();
            assert!(e.contains("does not decrypt") || e.contains("not below p"), "{byte}/{bit}: {e}");
        }
        let mut high = [points[0].clone(), points[1].clone()];
        high[0][32] = 0xff; // p starts 0xc1: y is now above it
        assert!(decrypt(&j, t, p, &high).unwrap_err().contains("share 1 has a y not below p"));
        let mut jwe = j.clone();
        jwe.alg = "ECDH-ES".into();
        assert!(decrypt(&jwe, t, p, &points).unwrap_err().contains("sss pin's is dir"));
        jwe = j.clone();
        jwe.tag[0] ^= 1;
        assert!(decrypt(&jwe, t, p, &points).unwrap_err().contains("does not decrypt"));
    }

    #[test]
    fn sss_small_fields_by_hand() {
        // f(x) = 5 + 3x over GF(11): (1, 8), (2, 0), (4, 6).
        let p = [11u8];
        assert_eq!(combine(&p, &[vec![1, 8], vec![4, 6]]).unwrap(), [5]);
        assert_eq!(combine(&p, &[vec![2, 0], vec![1, 8]]).unwrap(), [5]);
        // f(x) = 2 + x + x² over GF(13): (1, 4), (2, 8), (3, 1); on p's length, leading zeros
        // and all.
        let p = [0u8, 13];
        assert_eq!(combine(&p, &[vec![0, 1, 0, 4], vec![0, 2, 0, 8], vec![0, 3, 0, 1]]).unwrap(), [0, 2]);
        // The largest prime below 2^256 (2^256 - 189) and f(x) = 7 + x: (p - 1, 6), (1, 8).
        let mut big = [0xffu8; 32];
        big[31] = 0x43;
        let mut pm1 = big.to_vec();
        pm1[31] -= 1;
        let pad = |v: u8| {
            let mut b = [0u8; 32];
            b[31] = v;
            b
        };
        let a = [pm1.as_slice(), &pad(6)].concat();
        let b = [pad(1), pad(8)].concat();
        assert_eq!(combine(&big, &[a, b]).unwrap(), pad(7));
    }

    #[test]
    fn sss_malformed_primes_and_points_are_refused() {
        let (j, points) = opened();
        let p = sss(&j).1;
        let two = |a: &[u8], b: &[u8]| combine(p, &[a.to_vec(), b.to_vec()]);
        let (a, b) = (points[0].as_slice(), points[1].as_slice());
        assert!(combine(p, &[]).unwrap_err().contains("no share"));
        assert!(two(&a[..63], b).unwrap_err().contains("share 1 is 63 bytes"));
        assert!(two(a, &[b, &[0][..]].concat()).unwrap_err().contains("share 2 is 65 bytes"));
        assert!(two(a, &[]).unwrap_err().contains("share 2 is 0 bytes"));
        let mut zero = a.to_vec();
        zero[..32].fill(0);
        assert!(two(b, &zero).unwrap_err().contains("share 2 has x = 0"));
        let mut dup = b.to_vec();
        dup[..32].copy_from_slice(&a[..32]);
        assert!(two(a, &dup).unwrap_err().contains("shares 1 and 2 have the same x"));
        let mut xp = a.to_vec();
        xp[..32].copy_from_slice(p);
        assert!(two(xp.as_slice(), b).unwrap_err().contains("share 1 has an x not below p"));
        xp[..32].fill(0xff);
        assert!(two(xp.as_slice(), b).unwrap_err().contains("x not below p"));
        let mut yp = a.to_vec();
        yp[32..].copy_from_slice(p);
        assert!(two(b, &yp).unwrap_err().contains("share 2 has a y not below p"));
        // Primes that are not: empty, too long, even, 1, odd but composite (15: x 3 and 8
        // differ by 10, which has no inverse mod 15).
        assert!(combine(&[], &points).unwrap_err().contains("empty"));
        let long = [&[1u8][..], p].concat();
        assert!(combine(&long, &[[long.clone(), long.clone()].concat()]).unwrap_err().contains("33 bytes"));
        assert!(combine(&[12], &[vec![1, 1]]).unwrap_err().contains("even"));
        assert!(combine(&[1], &[vec![1, 0]]).unwrap_err().contains("is 1"));
        assert!(combine(&[15], &[vec![3, 1], vec![8, 2]]).unwrap_err().contains("not prime"));
    }

    #[test]
    fn sss_random_input_never_panics() {
        let (j, points) = opened();
        let p = sss(&j).1.to_vec();
        let mut s = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let primes: [Vec<u8>; 4] = [p.clone(), vec![0xfb], vec![0x00, 0x65], vec![0xff; 32]];
        let mut opened = 0;
        for round in 0..3000 {
            let r = next();
            // Half the rounds on primes that pass (so that the arithmetic is reached), half
            // on anything at all.
            let prime: Vec<u8> = if round % 2 == 0 {
                primes[(r % 4) as usize].clone()
            } else {
                (0..r % 40).map(|_| next() as u8).collect()
            };
            let n = (next() % 5) as usize;
            let pts: Vec<Vec<u8>> = (0..n)
                .map(|_| {
                    let r = next();
                    let len = if r % 4 == 0 { (r >> 8) as usize % 70 } else { 2 * prime.len() };
                    let mut v: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                    if r % 3 == 0 && !v.is_empty() {
                        v[0] = 0; // below p more often
                        if prime.len() < v.len() {
                            v[prime.len()] = 0;
                        }
                    }
                    v
                })
                .collect();
            if let Ok(k) = combine(&prime, &pts) {
                assert_eq!(k.len(), prime.len());
                opened += 1;
            }
            let _ = decrypt(&j, (next() % 4) as usize, &prime, &pts);
            // A real point with a random one.
            let mixed = [points[(r % 3) as usize].clone(), (0..64).map(|_| next() as u8).collect()];
            assert!(decrypt(&j, 2, &p, &mixed).is_err());
        }
        assert!(opened > 100, "the arithmetic was reached {opened} times");
    }
}
