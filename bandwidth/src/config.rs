//! The plugin's keys: `ingressRate`/`ingressBurst`/`egressRate`/
//! `egressBurst` (bits per second, bits) at the top level, or the same four
//! under `runtimeConfig.bandwidth` (capability `bandwidth`) when none of
//! them is at the top level. Parsed and checked here, before anything
//! touches the kernel, into [`Limit`]s whose kernel numbers cannot overflow.

use libcni::netlink::tc::{self, PschedClock, Tbf};
use libcni::skel::CmdArgs;
use libcni::Error;
use serde::Deserialize;
use serde_json::Value;

/// How long a packet may wait in the TBF queue: the limit is what the rate
/// sends in this time, plus the burst (as the Go plugin: 25 ms).
pub const LATENCY_USEC: u32 = 25_000;

/// The four keys, raw: values are checked by hand so that every rejection
/// names its key.
#[derive(Debug, Default, Deserialize)]
struct Keys {
    #[serde(rename = "ingressRate")]
    ingress_rate: Option<Value>,
    #[serde(rename = "ingressBurst")]
    ingress_burst: Option<Value>,
    #[serde(rename = "egressRate")]
    egress_rate: Option<Value>,
    #[serde(rename = "egressBurst")]
    egress_burst: Option<Value>,
}

impl Keys {
    fn any_present(&self) -> bool {
        self.ingress_rate.is_some()
            || self.ingress_burst.is_some()
            || self.egress_rate.is_some()
            || self.egress_burst.is_some()
    }
}

#[derive(Debug, Default, Deserialize)]
struct RuntimeConfig {
    #[serde(default)]
    bandwidth: Option<Keys>,
}

/// `runtimeConfig`, beside the top-level [`Keys`]: both are decoded from
/// the one parse of the config ([`libcni::gojson::from_slice_twice`]).
#[derive(Debug, Default, Deserialize)]
struct Raw {
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: Option<RuntimeConfig>,
}

/// One direction's shaping: a rate and a burst, checked to fit the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// Bits per second, at least 8.
    pub rate_bits: u64,
    /// Bits, at least 8; in bytes below 4 GiB.
    pub burst_bits: u64,
}

impl Limit {
    /// Bytes per second.
    pub fn rate_bytes(&self) -> u64 {
        self.rate_bits / 8
    }

    /// The bucket in bytes.
    pub fn burst_bytes(&self) -> u32 {
        // Checked in `direction`: below u32::MAX.
        (self.burst_bits / 8) as u32
    }

    /// The TBF queue limit in bytes (checked to fit 32 bits).
    pub fn limit_bytes(&self) -> u32 {
        tc::tbf_limit(self.rate_bytes(), LATENCY_USEC, self.burst_bytes()) as u32
    }

    /// The TBF that enforces this limit, with the Go plugin's numbers
    /// (the same rate, bucket in ticks and limit read back). Only where
    /// Go's bucket wraps its 32 bits (more than ~275 s at this rate, as
    /// containerd's default burst at a low rate) does it saturate and send
    /// the burst in bytes too (`TCA_TBF_BURST`), so that the kernel sizes
    /// the bucket exactly instead.
    pub fn tbf(&self, clock: &PschedClock) -> Tbf {
        let buffer = tc::tbf_buffer_ticks(self.rate_bytes(), self.burst_bytes(), clock);
        let fits = u32::try_from(buffer).ok();
        Tbf {
            rate: self.rate_bytes(),
            buffer: fits.unwrap_or(u32::MAX),
            limit: self.limit_bytes(),
            burst: fits.is_none().then(|| self.burst_bytes()),
        }
    }

    /// Whether `buffer` (ticks, read back) is this limit's bucket: as the
    /// Go plugin (and we) compute it, or as the kernel derives it from the
    /// burst in bytes when that was sent.
    pub fn buffer_matches(&self, buffer: u32, clock: &PschedClock) -> bool {
        let kernel = tc::kernel_buffer_ticks(self.rate_bytes(), self.burst_bytes());
        let go = tc::tbf_buffer_ticks(self.rate_bytes(), self.burst_bytes(), clock);
        buffer == kernel || u64::from(buffer) == go
    }
}

/// The shaping a config asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bandwidth {
    /// Traffic into the container (shaped on the host veth).
    pub ingress: Option<Limit>,
    /// Traffic out of the container (shaped on the IFB).
    pub egress: Option<Limit>,
    /// Where the keys were found: "" (top level) or "runtimeConfig.bandwidth.".
    pub prefix: &'static str,
}

impl Bandwidth {
    /// Neither direction is shaped.
    pub fn is_empty(&self) -> bool {
        self.ingress.is_none() && self.egress.is_none()
    }

    /// The full name of key `key` (e.g. "ingressRate") where it was read.
    pub fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }
}

/// Parses and checks the plugin's keys from the config on stdin.
pub fn parse(args: &CmdArgs) -> Result<Bandwidth, Error> {
    parse_bytes(&args.stdin)
}

fn parse_bytes(stdin: &[u8]) -> Result<Bandwidth, Error> {
    let (top, raw): (Keys, Raw) = libcni::gojson::from_slice_twice(stdin)?;
    // Go's config embeds the top-level keys through a pointer that any of
    // them sets: then runtimeConfig is not looked at.
    let (keys, prefix) = if top.any_present() {
        (top, "")
    } else {
        match raw.runtime_config.and_then(|r| r.bandwidth) {
            Some(keys) => (keys, "runtimeConfig.bandwidth."),
            None => return Ok(Bandwidth::default()),
        }
    };
    Ok(Bandwidth {
        ingress: direction(prefix, "ingress", &keys.ingress_rate, &keys.ingress_burst)?,
        egress: direction(prefix, "egress", &keys.egress_rate, &keys.egress_burst)?,
        prefix,
    })
}

/// A key's value: absent or null is 0; anything but a non-negative integer
/// is refused naming the key.
fn number(key: &str, value: &Option<Value>, unit: &str) -> Result<u64, Error> {
    match value {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => {
            if let Some(v) = n.as_u64() {
                Ok(v)
            } else if n.as_i64().is_some() || n.as_f64().is_some_and(|f| f < 0.0) {
                Err(Error::config(
                    key,
                    format!("{n} is negative: it must be a positive number of {unit}"),
                ))
            } else {
                Err(Error::config(
                    key,
                    format!("{n} is not a whole number of {unit}"),
                ))
            }
        }
        Some(other) => Err(Error::config(
            key,
            format!("{other} is not a number of {unit}"),
        )),
    }
}

fn direction(
    prefix: &str,
    dir: &str,
    rate: &Option<Value>,
    burst: &Option<Value>,
) -> Result<Option<Limit>, Error> {
    let rate_key = format!("{prefix}{dir}Rate");
    let burst_key = format!("{prefix}{dir}Burst");
    let rate = number(&rate_key, rate, "bits per second")?;
    let burst = number(&burst_key, burst, "bits")?;
    match (rate, burst) {
        (0, 0) => return Ok(None),
        (_, 0) => {
            return Err(Error::config(
                burst_key,
                format!("must be set (and not 0) when {rate_key} is set"),
            ))
        }
        (0, _) => {
            return Err(Error::config(
                rate_key,
                format!("must be set (and not 0) when {burst_key} is set"),
            ))
        }
        _ => {}
    }
    if rate < 8 {
        return Err(Error::config(
            rate_key,
            format!("{rate} bits per second is less than one byte per second"),
        ));
    }
    if burst < 8 {
        return Err(Error::config(
            burst_key,
            format!("{burst} bits is less than one byte"),
        ));
    }
    if burst / 8 >= u64::from(u32::MAX) {
        return Err(Error::config(
            burst_key,
            format!(
                "{burst} bits: the burst cannot be 4 GiB or more (the kernel keeps it in 32 bits)"
            ),
        ));
    }
    let limit = Limit {
        rate_bits: rate,
        burst_bits: burst,
    };
    let queue = tc::tbf_limit(limit.rate_bytes(), LATENCY_USEC, limit.burst_bytes());
    if queue > u64::from(u32::MAX) {
        let by_rate = tc::tbf_limit(limit.rate_bytes(), LATENCY_USEC, 0) > u64::from(u32::MAX);
        let key = if by_rate { rate_key } else { burst_key };
        return Err(Error::config(
            key,
            format!(
                "the queue limit (25 ms at {rate} bits/s plus the {burst} bits burst) is {queue} bytes, \
                 more than the kernel's 32 bits hold"
            ),
        ));
    }
    Ok(Some(limit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Bandwidth, Error> {
        let mut conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "bandwidth"});
        conf.as_object_mut()
            .unwrap()
            .extend(v.as_object().unwrap().clone());
        parse_bytes(conf.to_string().as_bytes())
    }

    fn limit(rate_bits: u64, burst_bits: u64) -> Option<Limit> {
        Some(Limit {
            rate_bits,
            burst_bits,
        })
    }

    fn rejected(v: Value, key: &str, msg: &str) {
        let e = parse(v.clone()).unwrap_err();
        assert_eq!(e.code(), 7, "{e}");
        let want = format!("invalid network config: {key}: {msg}");
        assert!(e.to_string().starts_with(&want), "{v}: {e}\nwanted: {want}");
    }

    #[test]
    fn top_level_keys_win_over_runtime_config() {
        let bw = parse(json!({"ingressRate": 8000, "ingressBurst": 800,
            "runtimeConfig": {"bandwidth": {"egressRate": 16000, "egressBurst": 1600}}}))
        .unwrap();
        assert_eq!(
            bw,
            Bandwidth {
                ingress: limit(8000, 800),
                egress: None,
                prefix: ""
            }
        );
        // Any of the four present at the top level, even 0, hides runtimeConfig.
        let bw = parse(json!({"egressRate": 0,
            "runtimeConfig": {"bandwidth": {"egressRate": 16000, "egressBurst": 1600}}}))
        .unwrap();
        assert!(bw.is_empty());
        let bw = parse(
            json!({"runtimeConfig": {"bandwidth": {"egressRate": 16000, "egressBurst": 1600}}}),
        )
        .unwrap();
        assert_eq!(
            bw,
            Bandwidth {
                ingress: None,
                egress: limit(16000, 1600),
                prefix: "runtimeConfig.bandwidth."
            }
        );
        assert_eq!(bw.key("egressRate"), "runtimeConfig.bandwidth.egressRate");
        assert!(parse(json!({})).unwrap().is_empty());
        assert!(parse(json!({"runtimeConfig": {"portMappings": []}}))
            .unwrap()
            .is_empty());
        assert!(parse(json!({"ingressRate": 0, "ingressBurst": 0}))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn rate_and_burst_go_together() {
        rejected(
            json!({"ingressRate": 1000}),
            "ingressBurst",
            "must be set (and not 0) when ingressRate is set",
        );
        rejected(
            json!({"egressBurst": 1000, "egressRate": 0}),
            "egressRate",
            "must be set (and not 0) when egressBurst is set",
        );
        rejected(
            json!({"runtimeConfig": {"bandwidth": {"ingressRate": 1000}}}),
            "runtimeConfig.bandwidth.ingressBurst",
            "must be set (and not 0) when runtimeConfig.bandwidth.ingressRate is set",
        );
    }

    #[test]
    fn values_must_be_positive_whole_numbers() {
        rejected(
            json!({"ingressRate": -8000, "ingressBurst": 800}),
            "ingressRate",
            "-8000 is negative",
        );
        rejected(
            json!({"ingressRate": 8000, "ingressBurst": -1}),
            "ingressBurst",
            "-1 is negative",
        );
        rejected(
            json!({"egressRate": 8000.5, "egressBurst": 800}),
            "egressRate",
            "8000.5 is not a whole number of bits per second",
        );
        rejected(
            json!({"egressRate": "8M", "egressBurst": 800}),
            "egressRate",
            "\"8M\" is not a number of bits per second",
        );
        rejected(
            json!({"ingressRate": 7, "ingressBurst": 800}),
            "ingressRate",
            "7 bits per second is less than one byte per second",
        );
        rejected(
            json!({"ingressRate": 8, "ingressBurst": 7}),
            "ingressBurst",
            "7 bits is less than one byte",
        );
        rejected(
            json!({"runtimeConfig": "x"}),
            "runtimeConfig",
            "invalid type",
        );
    }

    #[test]
    fn values_must_fit_the_kernels_32_bit_fields() {
        // Go's bound: burst/8 >= MaxUint32 is refused.
        let max_ok = (u64::from(u32::MAX) - 1) * 8;
        rejected(
            json!({"ingressRate": 8, "ingressBurst": max_ok + 8}),
            "ingressBurst",
            &format!("{} bits: the burst cannot be 4 GiB or more", max_ok + 8),
        );
        // The limit (25 ms of rate + burst) overflows through the burst...
        rejected(
            json!({"egressRate": 8_000_000, "egressBurst": max_ok}),
            "egressBurst",
            "the queue limit (25 ms at 8000000 bits/s plus the",
        );
        // ... or through the rate alone.
        rejected(json!({"egressRate": 2_000_000_000_000u64, "egressBurst": 8}), "egressRate", "the queue limit (25 ms at 2000000000000 bits/s plus the 8 bits burst) is 6250000001 bytes");
        // Just fits.
        let bw = parse(json!({"egressRate": 8, "egressBurst": max_ok})).unwrap();
        assert_eq!(bw.egress.unwrap().limit_bytes(), u32::MAX - 1);
        // containerd's "no burst" (MaxUint32 bits) at 1 Mbit/s: a bucket
        // whose ticks overflow 32 bits (Go wraps them) is fine: the kernel
        // gets the bytes.
        let l = parse(json!({"ingressRate": 1_000_000, "ingressBurst": u32::MAX}))
            .unwrap()
            .ingress
            .unwrap();
        let clock = PschedClock::parse("000003e8 00000040 000f4240 3b9aca00").unwrap();
        let tbf = l.tbf(&clock);
        assert_eq!(
            tbf,
            Tbf {
                rate: 125_000,
                buffer: u32::MAX,
                limit: 3125 + 536_870_911,
                burst: Some(536_870_911)
            }
        );
    }

    #[test]
    fn tbf_numbers_follow_the_go_plugin() {
        let clock = PschedClock::parse("000003e8 00000040 000f4240 3b9aca00").unwrap();
        let l = limit(8_000_000, 800_000).unwrap();
        assert_eq!(
            l.tbf(&clock),
            Tbf {
                rate: 1_000_000,
                buffer: 1_562_500,
                limit: 125_000,
                burst: None
            }
        );
        // Go truncates the bucket to whole microseconds: 15432 bytes at
        // 1.25e6 bytes/s is 12345.6 us, sent as 12345 us = 192890 ticks.
        let odd = limit(10_000_000, 123_456).unwrap();
        assert_eq!(odd.tbf(&clock).buffer, 192_890);
        // What the kernel would derive from the bytes is accepted too.
        assert!(odd.buffer_matches(192_890, &clock));
        assert!(odd.buffer_matches(tc::kernel_buffer_ticks(1_250_000, 15_432), &clock));
        assert_eq!(tc::kernel_buffer_ticks(1_250_000, 15_432), 192_900);
        assert!(l.buffer_matches(1_562_500, &clock));
        assert!(!l.buffer_matches(1_562_499, &clock));
        assert_eq!(l.limit_bytes(), 25_000 + 100_000);
    }
}
