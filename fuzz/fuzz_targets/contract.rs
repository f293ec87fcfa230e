//! The boot contract /init reads at every boot: /etc/leanrd/init.conf, `InitConfig::decode`
//! (crates/contract/src/config.rs). A damaged image or one written by another build hands it
//! anything.
//!
//! Holds to:
//! - `decode` never panics, whatever the text;
//! - what decodes, encodes to text that decodes to the same configuration, and encoding that
//!   again gives the same text (decode(encode(x)) == x; encode is a fixed point).

#![no_main]

use leanrd_contract::InitConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(c) = InitConfig::decode(&text) else { return };
    let encoded = c.encode();
    let back = InitConfig::decode(&encoded).unwrap_or_else(|e| panic!("encode's text does not decode: {e}\n{encoded}"));
    assert_eq!(back, c, "decode(encode(x)) != x\n{encoded}");
    assert_eq!(back.encode(), encoded);
});
