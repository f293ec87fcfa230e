//! What /init takes from a Tang server and from a LUKS2 header's clevis tokens when it unlocks
//! with nobody at the console: the HTTP reply (crates/init/src/http.rs `parse_reply`), the
//! server's JWK (clevis.rs `reply_key`), the McCallum-Relyea exchange with that answer
//! (tang.rs `decrypt`), clevis's JWEs (contract's `clevis::Jwe::compact`, `luks2::clevis_tokens`
//! on a header holding the bytes) and sss's points (sss.rs `combine`). A Tang server, anyone
//! between it and the machine, or whoever wrote the disk's header can send them.
//!
//! Holds to:
//! - nothing panics;
//! - a reply's body is never larger than the bound, nor than what came;
//! - a reply whole before the connection closed reads the same once it has;
//! - no answer but the server's own opens the test JWE (the fuzzer cannot forge it).

#![no_main]

use leanrd_contract::clevis::{Jwe, Pin};
use leanrd_init::{clevis, http, sss, tang};
use libfuzzer_sys::fuzz_target;

const JWE: &str = include_str!("../../crates/contract/testdata/clevis-tang.jwe");

fuzz_target!(|data: &[u8]| {
    // The HTTP reply.
    for closed in [false, true] {
        if let Ok(Some(r)) = http::parse_reply(data, closed) {
            assert!(r.body.len() <= http::MAX_REPLY && r.body.len() <= data.len(), "a body larger than the bound");
            if !closed {
                assert_eq!(http::parse_reply(data, true), Ok(Some(r)), "a whole reply reads otherwise once closed");
            }
        }
    }
    // The server's answer, and the exchange with it.
    if let Ok(k) = clevis::reply_key(data) {
        let j = Jwe::compact(JWE).unwrap();
        let Pin::Tang(t) = &j.pin else { unreachable!() };
        assert!(tang::decrypt(&j, t, &mut |_| Ok(k.clone())).is_err(), "a forged answer opened the JWE");
    }
    // clevis's JWEs, compact and in a header's token.
    let text = String::from_utf8_lossy(data);
    if let Ok(j) = Jwe::compact(&text) {
        let _ = leanrd_contract::clevis::describe(&j.pin);
        let _ = j.pins();
    }
    let mut h = vec![0u8; 16384];
    h[..6].copy_from_slice(leanrd_contract::luks2::MAGIC);
    h[6..8].copy_from_slice(&[0, 2]);
    h[8..16].copy_from_slice(&16384u64.to_be_bytes());
    let n = data.len().min(16384 - 4096);
    h[4096..4096 + n].copy_from_slice(&data[..n]);
    let _ = leanrd_contract::luks2::clevis_tokens(&h);
    // sss: the first byte splits a prime from the points.
    if let Some((&split, rest)) = data.split_first() {
        let at = usize::from(split).min(rest.len());
        let (prime, points) = rest.split_at(at);
        let points: Vec<Vec<u8>> = points.chunks((2 * prime.len()).max(1)).map(<[u8]>::to_vec).collect();
        let _ = sss::combine(prime, &points);
    }
});
