//! Start here: a whole main plugin on `libcni::skel` and `libcni::attach`,
//! the shape of `plugins/dummy` with the config read inline. It gives the
//! container a dummy interface named `CNI_IFNAME` with the addresses of
//! the config's IPAM plugin.
//!
//! Build and call it as a runtime would (as root, in a scratch namespace,
//! on a kernel with dummy links; without them ADD answers code 2 naming
//! the module):
//!
//! ```text
//! cargo build -p libcni --example minimal_main_plugin
//! ip netns add demo
//! echo '{"cniVersion":"1.1.0","name":"demo","type":"minimal_main_plugin",
//!        "ipam":{"type":"host-local","subnet":"10.99.0.0/24"}}' |
//!   CNI_COMMAND=ADD CNI_CONTAINERID=c1 CNI_NETNS=/run/netns/demo \
//!   CNI_IFNAME=eth0 CNI_PATH=target/x86_64-unknown-linux-gnu/debug \
//!   target/x86_64-unknown-linux-gnu/debug/examples/minimal_main_plugin
//! ```
//!
//! What the shared flow gives for free: `skel` parses the environment and
//! stdin, answers VERSION, converts the result to the config's version and
//! turns an `Error` into the spec's error JSON with its code; `attach::add`
//! opens the namespace, refuses an existing interface, finds IPAM before
//! anything is made, and undoes every step when a later one fails;
//! `attach::ContainerLinkPlugin` gives DEL (best effort, success when
//! things are already gone), GC and STATUS (IPAM's) to a plugin whose one
//! piece of state is its link in the container.

use libcni::attach::{self, Add, Check, ContainerLinkPlugin, KindLink, Lower};
use libcni::ipam::IfaceOptions;
use libcni::netlink::link_kinds::{NewKind, DUMMY_SUPPORT};
use libcni::skel::{self, CmdArgs};
use libcni::types::{CniResult, IpamConf};
use libcni::Error;
use serde::Deserialize;

/// The plugin's own keys (Go's decoding rules: exact key, then any case;
/// unknown keys ignored).
#[derive(Deserialize)]
struct Conf {
    #[serde(default)]
    ipam: Option<IpamConf>,
}

/// `ipam.type`, or code 7 naming the key.
fn ipam_type(args: &CmdArgs) -> Result<String, Error> {
    let conf: Conf = args.config()?;
    IpamConf::plugin(conf.ipam).ok_or_else(|| Error::config("ipam.type", "missing"))
}

struct Minimal;

impl ContainerLinkPlugin for Minimal {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        let ipam = ipam_type(args)?;
        attach::add(
            args,
            "minimal_main_plugin",
            Some(&ipam),
            |a: &mut Add<'_>| {
                let link = a.create_kind(KindLink {
                    kind: NewKind::Dummy,
                    mtu: None,
                    lower: Lower::None,
                    support: &DUMMY_SUPPORT,
                })?;
                let addresses = a.ipam_add(&ipam)?;
                a.configure_single(&link, addresses, IfaceOptions::default())
            },
        )
    }

    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        let ipam = ipam_type(args)?;
        let mut check = Check::begin(args, Some(&ipam))?;
        check.container_link("dummy")?;
        check.addresses_and_routes().map(drop)
    }

    fn status_before_ipam(&self, _args: &CmdArgs) -> Result<(), Error> {
        attach::kind_status("minimal_main_plugin", &DUMMY_SUPPORT)
    }
}

fn main() {
    skel::plugin_main(Minimal, "minimal")
}
