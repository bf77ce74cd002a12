// The plugins' own parsers, compiled in from their crates' source: the
// plugin crates are binaries, so there is no library to depend on. The
// names are the ones the files refer to each other by (`crate::range`,
// `crate::config`, `crate::subnet_env`). Included (`include!`) by
// fuzz/src/lib.rs and by libcni/tests/fuzz_corpus.rs, both two levels
// below the workspace root, so these paths hold for both.

/// host-local: ranges and range sets.
#[allow(dead_code, unused_imports)]
#[path = "../../host-local/src/range.rs"]
mod range;
/// host-local: the IPAM config.
#[allow(dead_code, unused_imports)]
#[path = "../../host-local/src/config.rs"]
mod hl_config;
/// bridge: its config.
#[allow(dead_code, unused_imports)]
#[path = "../../bridge/src/config.rs"]
mod bridge_config;
/// bandwidth: its config and the TBF numbers.
#[allow(dead_code, unused_imports)]
#[path = "../../bandwidth/src/config.rs"]
mod bandwidth_config;
/// portmap: its config.
#[allow(dead_code, unused_imports)]
#[path = "../../portmap/src/config.rs"]
mod portmap_config;
/// flannel: its config (named `config`: `delegate_conf` says `crate::config`).
#[allow(dead_code, unused_imports)]
#[path = "../../flannel-meta/src/config.rs"]
mod config;
/// flannel: subnet.env.
#[allow(dead_code, unused_imports)]
#[path = "../../flannel-meta/src/subnet_env.rs"]
mod subnet_env;
/// flannel: the rendered delegate config.
#[allow(dead_code, unused_imports)]
#[path = "../../flannel-meta/src/delegate_conf.rs"]
mod delegate_conf;
/// tuning: its config.
#[allow(dead_code, unused_imports)]
#[path = "../../plugins/tuning/src/config.rs"]
mod tuning_config;
/// macvlan: its config.
#[allow(dead_code, unused_imports)]
#[path = "../../plugins/macvlan/src/config.rs"]
mod macvlan_config;
