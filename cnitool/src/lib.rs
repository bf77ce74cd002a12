//! The runtime side of CNI, as Go's `libcni`: loading network configuration
//! lists ([`conf`]), running them for ADD/CHECK/DEL/GC/STATUS ([`exec`]),
//! and the on-disk result cache shared with Go's libcni ([`cache`]).
//! `cnitool` is a thin command line over this module.

pub mod cache;
pub mod conf;
pub mod exec;

pub use cache::{CacheEntry, CacheKey, Cached, ResultCache};
pub use conf::{
    conf_from_single_bytes, conf_list_from_bytes, conf_list_from_file, load_conf_list,
    NetworkConfigList,
};
pub use exec::{CniConfig, RuntimeConf, DEFAULT_CACHE_DIR};
