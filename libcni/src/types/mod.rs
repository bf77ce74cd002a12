//! CNI spec types: configs, results in every version, addresses with prefix.

pub mod config;
pub mod net;
pub mod result;
pub mod route_conf;

pub use config::{Attachment, IpamConf, IpsArgs, NetConf};
pub use net::IpPrefix;
pub use result::{CniResult, Dns, DnsConf, Interface, IpConfig, Route};
