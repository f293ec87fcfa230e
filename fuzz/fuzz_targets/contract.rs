//! The boot contract /init reads at every boot: /etc/leanrd/init.conf, `InitConfig::decode`
//! (crates/contract/src/config.rs), and the exitrd's record it reads on the way down,
//! `Exitrd::decode` (crates/contract/src/exitrd.rs). A damaged image or one written by another
//! build hands it anything.
//!
//! Holds to:
//! - `decode` never panics, whatever the text;
//! - what decodes, encodes to text that decodes to the same configuration, and encoding that
//!   again gives the same text (decode(encode(x)) == x; encode is a fixed point).

#![no_main]

use leanrd_contract::InitConfig;
use leanrd_contract::exitrd::Exitrd;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(e) = Exitrd::decode(&text) {
        let encoded = e.encode();
        let back = Exitrd::decode(&encoded).unwrap_or_else(|e| panic!("the record's text does not decode: {e}\n{encoded}"));
        assert_eq!(back, e, "decode(encode(x)) != x\n{encoded}");
    }
    let Ok(c) = InitConfig::decode(&text) else { return };
    let encoded = c.encode();
    let back = InitConfig::decode(&encoded).unwrap_or_else(|e| panic!("encode's text does not decode: {e}\n{encoded}"));
    assert_eq!(back, c, "decode(encode(x)) != x\n{encoded}");
    assert_eq!(back.encode(), encoded);
});
