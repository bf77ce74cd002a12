//! libcni: the shared skeleton of the CNI suite.
//!
//! Plugin side: spec [`types`], the plugin entry point [`skel`], delegation
//! ([`invoke`]), network namespaces ([`netns`]), a synchronous netlink
//! client ([`netlink`]), MAC addresses ([`mac`]), the files kept on disk
//! ([`files`]), the shared flow of a main plugin ([`attach`]) and tap
//! devices ([`tuntap`]). The runtime side (conflist loading, chain
//! execution, the result cache, `cnitool`) is the `cnitool` crate: no
//! plugin needs it.

pub mod args;
pub mod attach;
pub mod calllog;
pub mod cli;
pub mod error;
pub mod family;
pub mod fault;
pub mod files;
pub mod gojson;
pub mod invoke;
pub mod ipam;
pub mod mac;
pub mod netfilter;
pub mod netlink;
pub mod netns;
pub mod skel;
pub mod sysctl;
pub mod tuntap;
pub mod types;
pub mod version;

pub use error::{Error, ErrorList, ErrorResult, Result};
pub use family::{IpFamily, PerFamily};
pub use version::{Version, PLUGIN_VERSION, SUITE_VERSION, UPSTREAM_VERSION};
