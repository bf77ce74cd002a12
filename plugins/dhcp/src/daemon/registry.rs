//! The daemon's leases, one slot per attachment ([`Key`]): the verbs of the
//! protocol on them. A slot's lock is held for the whole of a verb on that
//! attachment (an ADD waits on its server with it), so the verbs of one
//! attachment are serialised while other attachments go on in parallel.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use libcni::types::Attachment;
use libcni::version::Version;
use libcni::Error;

use super::lease::{self, Context, Running, Start};
use super::store::Held;
use crate::ack;
use crate::proto::{Key, Request, Response};

#[derive(Default)]
struct Slot {
    lease: Mutex<Option<Running>>,
}

pub struct Registry {
    ctx: Arc<Context>,
    slots: Mutex<HashMap<Key, Arc<Slot>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The ADD result of a lease, in the 1.1.0 shape.
fn result_of(held: &Held) -> Result<Response, Error> {
    let r = ack::result(&held.ack, &held.binding, held.record.priority);
    Ok(Response {
        result: Some(r.to_json(Version::V1_1_0)?),
        ..Response::ok()
    })
}

impl Registry {
    pub fn new(ctx: Arc<Context>) -> Registry {
        Registry {
            ctx,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// Runs `f` on `key`'s slot with its lock held; a slot left empty is
    /// removed from the map.
    fn with_slot<T>(&self, key: &Key, f: impl FnOnce(&mut Option<Running>) -> T) -> T {
        loop {
            let slot = lock(&self.slots).entry(key.clone()).or_default().clone();
            let mut lease = lock(&slot.lease);
            // The slot may have been removed while we waited for it.
            let current = lock(&self.slots)
                .get(key)
                .is_some_and(|s| Arc::ptr_eq(s, &slot));
            if !current {
                continue;
            }
            let out = f(&mut lease);
            if lease.is_none() {
                let mut slots = lock(&self.slots);
                if slots.get(key).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
                    slots.remove(key);
                }
            }
            return out;
        }
    }

    /// Takes up the leases on disk (a daemon start).
    pub fn restore(&self) {
        let (held, bad) = match self.ctx.store.load() {
            Ok(x) => x,
            Err(e) => {
                super::log(format_args!(
                    "cannot read the lease directory {}: {e}",
                    self.ctx.store.dir().display()
                ));
                return;
            }
        };
        for why in bad {
            super::log(format_args!("leaving an unreadable lease file: {why}"));
        }
        for h in held {
            let key = h.record.key.clone();
            lease::log(&key, format!("taking up {} from disk", h.binding.prefix()));
            self.with_slot(&key, |slot| {
                match lease::spawn(self.ctx.clone(), h, Start::Restored) {
                    Ok(r) => *slot = Some(r),
                    Err(e) => lease::log(&key, format!("cannot start its thread: {e}")),
                }
            });
        }
    }

    pub fn handle(&self, req: &Request) -> Response {
        let out = match req.op.as_str() {
            "status" => Ok(Response::ok()),
            "add" => self.add(req),
            "del" => self.key_of(req).and_then(|k| self.del(&k)),
            "check" => self.key_of(req).and_then(|k| self.check(&k)),
            "gc" => self.gc(&req.network, &req.valid),
            other => Err(Error::Decode(format!("unknown request {other:?}"))),
        };
        out.unwrap_or_else(|e| Response::error(&e))
    }

    fn key_of(&self, req: &Request) -> Result<Key, Error> {
        let key = req
            .key
            .clone()
            .ok_or_else(|| Error::Decode(format!("a {} request without a key", req.op)))?;
        key.validate()?;
        Ok(key)
    }

    fn add(&self, req: &Request) -> Result<Response, Error> {
        let key = self.key_of(req)?;
        if !req.netns.starts_with('/') {
            return Err(Error::InvalidEnv(format!(
                "CNI_NETNS {:?} is not an absolute path",
                req.netns
            )));
        }
        if req
            .options
            .provide
            .iter()
            .any(|p| p.value.len() > crate::config::MAX_OPTION_LEN)
        {
            return Err(Error::config(
                "ipam.provide",
                "an option value over 255 bytes",
            ));
        }
        let id = (req.netns_dev, req.netns_ino);
        let ctx = &self.ctx;
        self.with_slot(&key, |slot| {
            if let Some(running) = slot.as_ref() {
                let v = running.ctl.view();
                let r = &v.held.record;
                if v.state.is_live() && r.netns == req.netns && (r.netns_dev, r.netns_ino) == id {
                    // The same ADD again: the lease it has (as the reference).
                    return result_of(&v.held);
                }
                if let Some(old) = slot.take().and_then(Running::finish) {
                    lease::release(ctx, &old);
                }
                let _ = ctx.store.remove(&key);
            }
            let held = lease::acquire(ctx, &key, &req.netns, id, &req.options, req.priority)?;
            let undo = |e: Error| {
                lease::release(ctx, &held);
                let _ = ctx.store.remove(&key);
                e
            };
            ctx.store.write(&held).map_err(|why| {
                undo(Error::io(
                    "saving the lease",
                    std::io::Error::other(why.to_string()),
                ))
            })?;
            let running = lease::spawn(ctx.clone(), held.clone(), Start::Fresh)
                .map_err(|e| undo(Error::io("starting the lease's thread", e)))?;
            *slot = Some(running);
            lease::log(
                &key,
                format!(
                    "acquired {} from {} for {} s",
                    held.binding.prefix(),
                    held.binding.server,
                    held.binding.lease.map(|l| l.as_secs()).unwrap_or(0)
                ),
            );
            result_of(&held)
        })
    }

    /// Stops and releases `key`'s lease; none is success.
    fn del(&self, key: &Key) -> Result<Response, Error> {
        let ctx = &self.ctx;
        self.with_slot(key, |slot| {
            if let Some(held) = slot.take().and_then(Running::finish) {
                lease::release(ctx, &held);
            }
            ctx.store.remove(key).map_err(|e| {
                Error::io(format!("removing {}", ctx.store.path_of(key).display()), e)
            })?;
            Ok(Response::ok())
        })
    }

    fn check(&self, key: &Key) -> Result<Response, Error> {
        self.with_slot(key, |slot| match slot {
            Some(r) => Ok(Response {
                lease: Some(r.ctl.view().lease_view()),
                ..Response::ok()
            }),
            None => Err(Error::CheckFailed(format!(
                "the dhcp daemon holds no lease for container {:?}, network {:?}, interface {:?}",
                key.container_id, key.network, key.ifname
            ))),
        })
    }

    /// Releases every lease of `network` whose attachment is not in `valid`.
    fn gc(&self, network: &str, valid: &[Attachment]) -> Result<Response, Error> {
        let stale: Vec<Key> = lock(&self.slots)
            .keys()
            .filter(|k| k.network == network)
            .filter(|k| {
                !valid
                    .iter()
                    .any(|a| a.container_id == k.container_id && a.ifname == k.ifname)
            })
            .cloned()
            .collect();
        let mut errors = libcni::ErrorList::new();
        for key in stale {
            lease::log(&key, "collected (not a valid attachment)");
            errors.record(self.del(&key));
        }
        errors.finish().map(|()| Response::ok())
    }
}
