//! What /init takes from the network before the root is there: DHCP replies
//! (crates/init/src/dhcp.rs `Reply::parse`, `udp_payload` on the raw packet), DNS answers
//! (net.rs `dns_answer`) and NVMe-oF discovery log pages (nvmf.rs `records`). Anyone on the
//! link can send them.
//!
//! Holds to:
//! - nothing panics;
//! - a DHCP reply that parses, written again as a server writes one (`leanrd_fuzz::dhcp_reply`,
//!   long options split as RFC 3396 allows), parses to the same lease;
//! - the UDP payload found in a packet lies inside it; a datagram the client builds
//!   (`udp_packet`) around these bytes gives them back;
//! - a DNS answer is an address the reply carries, only for the query's id;
//! - a discovery record's NQN and address are safe in /dev/nvme-fabrics' options, and there are
//!   no more records than the page has room for.

#![no_main]

use leanrd_init::dhcp::{self, Reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // DHCP.
    if let Ok(r) = Reply::parse(data) {
        let written = leanrd_fuzz::dhcp_reply(&r);
        assert_eq!(Reply::parse(&written), Ok(r), "a lease written again reads otherwise");
    }

    // IPv4/UDP.
    if let Some(p) = dhcp::udp_payload(data, dhcp::CLIENT_PORT) {
        let range = data.as_ptr_range();
        assert!(range.contains(&p.as_ptr()) || p.is_empty(), "a payload outside the packet");
        assert!(p.len() <= data.len());
        let _ = Reply::parse(p);
    }
    if data.len() <= 1400 {
        let pkt = dhcp::udp_packet(([10, 0, 0, 1], dhcp::SERVER_PORT), ([255, 255, 255, 255], dhcp::CLIENT_PORT), data);
        assert_eq!(dhcp::udp_payload(&pkt, dhcp::CLIENT_PORT), Some(data), "a datagram does not give its payload back");
        assert_eq!(dhcp::udp_payload(&pkt, dhcp::SERVER_PORT), None);
    }

    // DNS: the id is the reply's own, so the rest of it is looked at.
    if data.len() >= 2 {
        let id = u16::from_be_bytes([data[0], data[1]]);
        if let Ok(a) = leanrd_init::net::dns_answer(id, data) {
            assert!(data[12..].windows(4).any(|w| w == a), "an address the answer does not carry");
        }
        assert!(leanrd_init::net::dns_answer(id ^ 1, data).is_err(), "an answer to another query taken");
    }

    // NVMe-oF discovery log page.
    let records = leanrd_init::nvmf::records(data);
    assert!(records.len() <= data.len().saturating_sub(1024) / 1024);
    for r in &records {
        assert!(leanrd_contract::option_value(&r.nqn) && leanrd_contract::option_value(&r.address), "{r:?}");
    }
});
