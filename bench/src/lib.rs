//! `cni-bench`: times our plugins against the Go reference plugins (issue 8).
//! A command, not a test: `cargo test` runs only the unit tests below.
//!
//! Code map: [`options`] (flags), [`namespaces`] and [`scratch`] (the
//! throwaway node, pods and temp dir), [`interrupt`] (SIGINT/SIGTERM),
//! [`chains`] (the conflists), [`dhcp`] (the dhcp chain's LAN, dnsmasq and
//! daemons), [`cprog`] (the C programs it builds: no-op plugin, start floors),
//! [`process`] (one plugin process: timed, or traced for peak RSS),
//! [`runner`] (a chain, through libcni's runtime or plugin by plugin),
//! [`measure`] (the main table), [`calllog_cost`] (the call log on and
//! off), [`multicall`] (the multicall form against
//! the separate binaries), [`static_build`] (static binaries against
//! dynamic ones), [`burst`] (pods ADDed and DELed at once), [`floors`]
//! (each chain against plugins that do nothing and against the kernel's
//! own work, with `src/bin/floor.rs`), [`status`] (STATUS per plugin), [`sweep`] (the scaling sweep),
//! [`diagnose`] (where the time goes, reading strace's traces with
//! [`trace`]), [`machine`], [`stats`], and the
//! output: [`report`] (RESULTS.md, its table cells in [`cells`]) and
//! [`plot`] (the SVG).

pub mod burst;
pub mod calllog_cost;
pub mod cells;
pub mod chains;
pub mod cprog;
pub mod dhcp;
pub mod diagnose;
pub mod floors;
pub mod interrupt;
pub mod machine;
pub mod measure;
pub mod multicall;
pub mod namespaces;
pub mod options;
pub mod plot;
pub mod process;
pub mod report;
pub mod runner;
pub mod scratch;
pub mod static_build;
pub mod stats;
pub mod status;
pub mod sweep;
pub mod trace;
