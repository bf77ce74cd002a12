//! IFB links (intermediate functional block): the device the bandwidth
//! plugin redirects a veth's incoming packets to, so that they can be
//! shaped on the IFB's way out.
//!
//! This module owns creating an IFB with its MTU, transmit queue length,
//! alias and up state, and bringing an existing one to that state.

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;

use super::link::Link;
use super::{is_exists, Netlink};
use crate::{Error, Result};

/// What an IFB should look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IfbSpec<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its MTU.
    pub mtu: u32,
    /// Its transmit queue length (`txqueuelen`).
    pub txqueuelen: u32,
    /// Its alias (`IFLA_IFALIAS`), e.g. to record who owns it.
    pub alias: &'a str,
}

fn attributes(spec: &IfbSpec) -> Vec<LinkAttribute> {
    vec![
        LinkAttribute::Mtu(spec.mtu),
        LinkAttribute::TxQueueLen(spec.txqueuelen),
        LinkAttribute::IfAlias(spec.alias.to_string()),
    ]
}

impl Netlink {
    /// Creates the IFB `spec.name`, up, with the MTU, queue length and
    /// alias of `spec`, and returns it. The kernel ignores an alias given at
    /// creation, so it is set by a second request. If a link of that name
    /// exists the error has errno `EEXIST` ([`super::is_exists`]).
    pub fn add_ifb(&mut self, spec: &IfbSpec) -> Result<Link> {
        let mut msg = LinkMessage::default();
        msg.header.flags = LinkFlags::Up;
        msg.header.change_mask = LinkFlags::Up;
        msg.attributes
            .push(LinkAttribute::IfName(spec.name.to_string()));
        msg.attributes.extend(attributes(spec));
        msg.attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Ifb)]));
        self.request(
            RouteNetlinkMessage::NewLink(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("add ifb {:?}", spec.name),
        )?;
        let link = self.created(spec)?;
        if !spec.alias.is_empty() {
            self.set_alias(link.index, spec.alias)?;
        }
        self.created(spec)
    }

    /// The link `spec.name` just created or configured.
    fn created(&mut self, spec: &IfbSpec) -> Result<Link> {
        self.link_by_name(spec.name)?.ok_or_else(|| {
            Error::kernel(
                format!("add ifb {:?}", spec.name),
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the link vanished right after it was configured",
                ),
            )
        })
    }

    /// Sets the MTU, queue length and alias of `spec` on link `index` and
    /// sets it up, in one request.
    pub fn configure_ifb(&mut self, index: u32, spec: &IfbSpec) -> Result<()> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        msg.header.flags = LinkFlags::Up;
        msg.header.change_mask = LinkFlags::Up;
        msg.attributes = attributes(spec);
        self.request(RouteNetlinkMessage::SetLink(msg), 0, || {
            format!(
                "set mtu {}, txqueuelen {}, alias {:?} and up on ifb {:?} (link {index})",
                spec.mtu, spec.txqueuelen, spec.alias, spec.name
            )
        })?;
        Ok(())
    }

    /// Makes sure the IFB `spec.name` exists as `spec` says, up: creates
    /// it, or reconfigures the IFB of that name that is already there (a
    /// retried ADD). A link of that name that is not an IFB is an error
    /// naming its kind, left untouched. Returns the link as it is now.
    pub fn ensure_ifb(&mut self, spec: &IfbSpec) -> Result<Link> {
        let link = match self.link_by_name(spec.name)? {
            Some(link) => link,
            None => match self.add_ifb(spec) {
                Ok(link) => return Ok(link),
                // Created by someone else between the look and the add.
                Err(e) if is_exists(&e) => self.created(spec)?,
                Err(e) => return Err(e),
            },
        };
        if link.kind.as_deref() != Some("ifb") {
            return Err(Error::kernel(
                format!("add ifb {:?}", spec.name),
                std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!(
                        "a link of that name exists and is a {} link, not an ifb",
                        link.kind.as_deref().unwrap_or("kindless")
                    ),
                ),
            ));
        }
        self.configure_ifb(link.index, spec)?;
        self.created(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::is_not_found;
    use crate::netns::testing::{new_netns, privileged};

    /// txqueuelen as the kernel reports it (the crate's `Link` does not carry it).
    fn txqueuelen(nl: &mut Netlink, index: u32) -> Option<u32> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        let replies = nl
            .request(RouteNetlinkMessage::GetLink(msg), 0, || "get link".into())
            .unwrap();
        replies.into_iter().find_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => l.attributes.into_iter().find_map(|a| match a {
                LinkAttribute::TxQueueLen(q) => Some(q),
                _ => None,
            }),
            _ => None,
        })
    }

    #[test]
    fn netlink_ifb_add_configure_ensure() {
        if !privileged("netlink_ifb_add_configure_ensure") {
            return;
        }
        let ns = new_netns();
        let mut nl = Netlink::open_in(&ns).unwrap();
        let spec = IfbSpec {
            name: "bwptest0",
            mtu: 1400,
            txqueuelen: 0,
            alias: "owner a",
        };
        let ifb = nl.add_ifb(&spec).unwrap();
        assert_eq!(nl.link_by_name("bwptest0").unwrap().as_ref(), Some(&ifb));
        assert_eq!(ifb.kind.as_deref(), Some("ifb"));
        assert_eq!((ifb.mtu, ifb.up), (1400, true));
        assert_eq!(ifb.alias.as_deref(), Some("owner a"));
        assert_eq!(txqueuelen(&mut nl, ifb.index), Some(0));
        assert!(is_exists(&nl.add_ifb(&spec).unwrap_err()));

        // ensure_ifb on the existing one: same index, new settings.
        nl.set_link_down(ifb.index).unwrap();
        let again = nl
            .ensure_ifb(&IfbSpec {
                mtu: 1300,
                txqueuelen: 5,
                alias: "owner b",
                ..spec
            })
            .unwrap();
        assert_eq!(again.index, ifb.index);
        assert_eq!((again.mtu, again.up), (1300, true));
        assert_eq!(again.alias.as_deref(), Some("owner b"));
        assert_eq!(txqueuelen(&mut nl, ifb.index), Some(5));

        // ensure_ifb creates a missing one.
        let other = nl
            .ensure_ifb(&IfbSpec {
                name: "bwptest1",
                ..spec
            })
            .unwrap();
        assert_eq!(other.kind.as_deref(), Some("ifb"));
        assert!(other.up);

        // A link of that name that is not an IFB is refused, untouched.
        nl.add_bridge("bwptest2", None).unwrap();
        let err = nl
            .ensure_ifb(&IfbSpec {
                name: "bwptest2",
                ..spec
            })
            .unwrap_err();
        assert_eq!(err.code(), 100);
        assert!(
            err.to_string().contains(
                "add ifb \"bwptest2\": a link of that name exists and is a bridge link, not an ifb"
            ),
            "{err}"
        );
        let br = nl.link_by_name("bwptest2").unwrap().unwrap();
        assert!(!br.up);

        nl.delete_link(ifb.index).unwrap();
        assert!(is_not_found(&nl.delete_link(ifb.index).unwrap_err()));
    }
}
