//! NVMe over Fabrics on TCP: the transport that brings a root's namespaces in over the
//! network. dracut's `rd.nvmf.discover=tcp,TRADDR,[HOST_TRADDR],[TRSVCID]` names a discovery
//! controller to ask for the subsystems; an image built on an NVMe/TCP-rooted host records
//! the subsystems themselves (and connects without asking).

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

/// The NVMe/TCP I/O port (as nvme-cli and libnvme default it).
pub const NVMF_PORT: u16 = 4420;
/// The discovery controllers' well-known port (as nvme-cli and libnvme default it).
pub const NVMF_DISCOVERY_PORT: u16 = 8009;
/// The discovery subsystem's well-known name.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// One NVMe/TCP controller to connect to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NvmfTarget {
    /// traddr: a host name, an IPv4 address, or an IPv6 address in brackets.
    pub address: String,
    /// trsvcid. None: [`NVMF_DISCOVERY_PORT`] to discover, [`NVMF_PORT`] for a subsystem.
    pub port: Option<u16>,
    /// host_traddr: the local address to connect from.
    pub host_address: Option<String>,
    /// The subsystem's NQN. None: a discovery controller, asked for the subsystems.
    pub nqn: Option<String>,
}

/// Why an `rd.nvmf.discover=` value (or a configuration line) could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("\"{spec}\" is not an NVMe over TCP target: {why}")]
pub struct NvmfError {
    /// The text that was given.
    pub spec: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// Whether a value can be written into /dev/nvme-fabrics' comma-separated `key=value`
/// options: one that could end its field or the line (a space, ',', '=', a control
/// character), or an empty one, is refused, never passed on.
pub fn option_value(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b > b' ' && b != b',' && b != b'=' && b != 0x7f)
}

impl NvmfTarget {
    /// The port to connect to: the given one, else [`NVMF_PORT`] for a subsystem or
    /// [`NVMF_DISCOVERY_PORT`] for a discovery controller.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(if self.nqn.is_some() { NVMF_PORT } else { NVMF_DISCOVERY_PORT })
    }

    /// `TRANSPORT,TRADDR,[HOST_TRADDR],[TRSVCID][,SUBNQN]`: dracut's `rd.nvmf.discover=`, with
    /// leanrd's fifth field naming a subsystem to connect to without asking (the configuration's
    /// form). Only the `tcp` transport is known.
    pub fn parse(spec: &str) -> Result<NvmfTarget, NvmfError> {
        let err = |why| NvmfError { spec: spec.to_string(), why };
        let f: Vec<&str> = spec.split(',').collect();
        if f.len() < 2 || f.len() > 5 {
            return Err(err("not TRANSPORT,TRADDR,[HOST_TRADDR],[TRSVCID]"));
        }
        if f[0] != "tcp" {
            return Err(err("leanrd's /init connects over tcp only"));
        }
        let field = |i: usize| f.get(i).copied().filter(|v| !v.is_empty());
        let address = field(1).ok_or(err("no traddr"))?;
        let v6 = |a: &str| a.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
        let address = match address.strip_prefix('[').and_then(|a| a.strip_suffix(']')) {
            Some(a) if v6(a) => address.to_string(),
            Some(_) => return Err(err("the bracketed traddr is not an IPv6 address")),
            // An IPv6 address without its brackets (a ':' says it is one, so it must be one).
            None if address.contains(':') && v6(address) => alloc::format!("[{address}]"),
            None if address.contains(':') => return Err(err("a traddr with ':' is not an IPv6 address")),
            None => address.to_string(),
        };
        let port = match field(3) {
            Some(p) => Some(p.parse().map_err(|_| err("trsvcid is not a port number"))?),
            None => None,
        };
        let t =
            NvmfTarget { address, port, host_address: field(2).map(str::to_string), nqn: field(4).map(str::to_string) };
        let values = [Some(t.address.as_str()), t.host_address.as_deref(), t.nqn.as_deref()];
        if values.into_iter().flatten().any(|v| !option_value(v)) {
            return Err(err("a space, comma, '=' or control character"));
        }
        Ok(t)
    }
}

/// The spelling [`NvmfTarget::parse`] reads back.
impl fmt::Display for NvmfTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tcp,{},{},", self.address, self.host_address.as_deref().unwrap_or(""))?;
        if let Some(p) = self.port {
            write!(f, "{p}")?;
        }
        if let Some(n) = &self.nqn {
            write!(f, ",{n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dracut_spellings_and_ours() {
        let p = |s| NvmfTarget::parse(s).unwrap();
        let t = p("tcp,192.168.1.3,,4420");
        assert_eq!((t.address.as_str(), t.port, t.nqn.as_deref()), ("192.168.1.3", Some(4420), None));
        assert_eq!(p("tcp,10.0.0.1").port(), NVMF_DISCOVERY_PORT);
        let t = p("tcp,fd00::2,fd00::5,,nqn.2026-11.test:root");
        assert_eq!((t.address.as_str(), t.host_address.as_deref()), ("[fd00::2]", Some("fd00::5")));
        assert_eq!(t.port(), NVMF_PORT);
        for s in ["tcp,10.0.0.1,,4420", "tcp,[fd00::2],,", "tcp,h,10.0.0.5,4421,nqn.x:y"] {
            let t = p(s);
            assert_eq!(NvmfTarget::parse(&t.to_string()).unwrap(), t, "{s}");
        }
    }

    #[test]
    fn bad_targets_say_why() {
        let e = |s: &str| NvmfTarget::parse(s).unwrap_err().why;
        assert_eq!(e("rdma,10.0.0.1,,4420"), "leanrd's /init connects over tcp only");
        assert_eq!(e("fc,auto"), "leanrd's /init connects over tcp only");
        assert_eq!(e("tcp"), "not TRANSPORT,TRADDR,[HOST_TRADDR],[TRSVCID]");
        assert_eq!(e("tcp,,,4420"), "no traddr");
        assert_eq!(e("tcp,h,,99999"), "trsvcid is not a port number");
        assert_eq!(e("tcp,h,,1,nqn=x"), "a space, comma, '=' or control character");
        assert_eq!(e("tcp,[zz],,"), "the bracketed traddr is not an IPv6 address");
        assert_eq!(e("tcp,a,b,c,d,e"), "not TRANSPORT,TRADDR,[HOST_TRADDR],[TRSVCID]");
    }

    /// An address with a ':' that is no IPv6 address was taken, and bracketed into a spelling
    /// that did not parse: a configuration /init could not read back (found by fuzz/
    /// `contract`: "tcp,Afd00:!2],,,nqn...").
    #[test]
    fn an_address_with_a_colon_is_an_ipv6_address_or_refused() {
        let e = |s: &str| NvmfTarget::parse(s).unwrap_err().why;
        assert_eq!(e("tcp,Afd00:!2],,,nqn.2026-11.test:root"), "a traddr with ':' is not an IPv6 address");
        assert_eq!(e("tcp,host:4420"), "a traddr with ':' is not an IPv6 address");
        let t = NvmfTarget::parse("tcp,fd00::2,,,nqn.x").unwrap();
        assert_eq!(NvmfTarget::parse(&t.to_string()), Ok(t));
    }
}
