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

/// `cnitool --help`, and its manual page (crate `manpages`).
pub const USAGE: &str = "\
Usage: cnitool [--cache-dir DIR] [-i IFNAME | --ifname IFNAME] add|check|del <net> <netns>
       cnitool [--cache-dir DIR] gc <net> [<netns>[:<ifname>]]...
       cnitool status <net> [<netns>]

Runs the network configuration list <net> (found in NETCONFPATH) for the
network namespace <netns> (a path, e.g. /var/run/netns/test).

  add     attach; prints the result JSON
  check   check the attachment against the cached ADD result
  del     detach
  gc      keep the attachments of the listed namespaces (interface from
          :<ifname>, else the default interface) and remove everything
          else of <net>: cached attachments are DELeted, then every plugin
          gets GC with the kept ones as cni.dev/valid-attachments
  status  ask the plugins whether they can serve ADD

Options:
  -i, --ifname IFNAME   interface name in the container (default: $CNI_IFNAME or eth0)
      --cache-dir DIR   result cache directory (default: $CNI_CACHE_DIR or /var/lib/cni)
  -h, --help            print this help
      --version         print cnitool and its version

Environment:
  NETCONFPATH      configuration directory (default /etc/cni/net.d)
  CNI_PATH         plugin directories, ':'-separated
  CNI_ARGS         K=V;K2=V2 pairs passed to the plugins
  CAP_ARGS         JSON object of capability arguments (e.g. portMappings)
  CNI_IFNAME       interface name (overridden by --ifname)
  CNI_CONTAINERID  container ID (default: cnitool- + 20 hex of sha512(abs netns path))
  CNI_CACHE_DIR    result cache directory (overridden by --cache-dir)
";
