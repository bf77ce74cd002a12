//! The black-box tests: one test binary, `suite`, whose modules are the
//! files of this directory (one per plugin, client or campaign; see
//! docs/testing.md). One binary links once where forty linked forty times.
//! Run one file's tests with `cargo test -p tests --test suite -- portmap::`.

mod bad_input;
mod bandwidth;
mod bridge;
mod bridge_masq;
mod calllog;
mod clients;
mod conf_loading;
mod containerd;
mod crash;
mod daemonset;
mod dhcp;
mod docs;
mod empty_root;
mod firewall;
mod flannel;
mod fs_safety;
mod fullkernel;
mod fuzz_corpus;
mod gc;
mod go_json;
mod host_device;
mod host_local;
mod install;
mod link_kinds;
mod loopback;
mod macvlan;
mod metrics;
mod metrics_server;
mod multicall;
mod nerdctl;
mod netfilter;
mod nomad;
mod operator;
mod podman;
mod portmap;
mod ptp;
mod release;
mod sbr;
mod soak;
mod r#static;
mod supply_chain;
mod tap;
mod tc_redirect_tap;
mod tidy;
mod tuning;
mod upstream;
