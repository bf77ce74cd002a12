//! CNI spec types: configs, results in every version, addresses with prefix.

pub mod config;
pub mod net;
pub mod result;

pub use config::{Attachment, IpamConf, NetConf};
pub use net::IpPrefix;
pub use result::{CniResult, Dns, Interface, IpConfig, Route};
