//! The `dummy` plugin: gives the container a dummy interface (a link with
//! no lower device and no peer: traffic to its addresses stays in the
//! container), created there under `CNI_IFNAME`, with IPAM. Tests, service
//! meshes and upstream's own test suites use it for an address without a
//! network. Behaviour follows the Go reference
//! (containernetworking/plugins `plugins/main/dummy`, v1.9); the
//! deliberate differences are in the README.

pub mod config;

use libcni::attach::{self, Add, Check, ContainerLinkPlugin, KindLink, Lower};
use libcni::ipam::IfaceOptions;
use libcni::netlink::link_kinds::{NewKind, DUMMY_SUPPORT};
use libcni::skel::CmdArgs;
use libcni::types::CniResult;
use libcni::Error;

use crate::config::Conf;

/// The upstream plugin this one replaces, as its about line names it
/// (`CNI dummy plugin v…`).
pub const NAME: &str = "dummy";

pub struct Dummy;

impl ContainerLinkPlugin for Dummy {
    /// Over the shared flow (`libcni::attach`): the dummy created in the
    /// container (a kernel without dummy links refuses it before anything
    /// exists: code 2 naming the module), IPAM, the addresses and routes.
    /// A failure after the link exists deletes it again, and a failure
    /// after IPAM was called releases the address.
    fn add(&self, args: &CmdArgs) -> Result<CniResult, Error> {
        let conf = Conf::parse(args)?;
        attach::add(args, "dummy", Some(&conf.ipam), |a: &mut Add<'_>| {
            let link = a.create_kind(KindLink {
                kind: NewKind::Dummy,
                mtu: None,
                lower: Lower::None,
                support: &DUMMY_SUPPORT,
            })?;
            let allocated = a.ipam_add(&conf.ipam)?;
            a.configure_single(&link, allocated, IfaceOptions::default())
        })
    }

    /// IPAM's CHECK, then the interface of `prevResult` in this sandbox: a
    /// dummy, up, with the result's MAC; its addresses and routes. A
    /// difference is code 102.
    fn check(&self, args: &CmdArgs) -> Result<(), Error> {
        let conf = Conf::parse(args)?;
        let mut c = Check::begin(args, Some(&conf.ipam))?;
        let link = c.container_link("dummy")?;
        if !link.up {
            return Err(Error::CheckFailed(format!(
                "container interface {:?} is down",
                args.ifname
            )));
        }
        c.addresses_and_routes().map(drop)
    }

    /// The kernel has dummy links.
    fn status_before_ipam(&self, _args: &CmdArgs) -> Result<(), Error> {
        attach::kind_status("dummy", &DUMMY_SUPPORT)
    }
}
