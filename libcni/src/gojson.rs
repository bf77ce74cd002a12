//! Go's `encoding/json` decoding rules, for every JSON the suite reads:
//! network configs and conflists, `runtimeConfig`, `args`, `prevResult`,
//! IPAM and delegate configs, results, the result cache and the files the
//! plugins keep. The Go plugins and Go libcni decode all of them with
//! `json.Unmarshal` into structs, and runtimes rely on its leniency:
//! containerd's go-cni writes its capability structs without JSON tags, so
//! `{"HostPort":8080}` and `{"IngressRate":…}` arrive capitalised.
//!
//! What Go does when it decodes an object into a struct, and so what
//! [`Deserializer`] does under any `#[derive(Deserialize)]` struct:
//! - a key goes to the field it names exactly; failing that, to the first
//!   field (in declaration order) whose name equals it under Unicode case
//!   folding (`K`, U+212A, folds to `k` and `ſ`, U+017F, to `s`, as in Go);
//! - a key that names no field is ignored;
//! - `null` leaves a field as it was: absent;
//! - when several keys land on one field, the last one wins; when the
//!   last ones are all objects, they are decoded one over the other, key
//!   by key with these same rules (Go decodes the later object into the
//!   struct the earlier one filled).
//!
//! Map keys (`capabilities`, tuning's `sysctl`) are kept exactly, as Go
//! keeps them. Exact duplicates of one key in the text follow the same
//! rule ([`parse_value`]): the later value replaces the earlier one, or is
//! merged into it when both are objects. Enum values (`"mode": "bridge"`)
//! stay exact, as Go's string comparisons are.
//!
//! Config structs must not use `#[serde(flatten)]` or untagged/internally
//! tagged enums: serde decodes those from its own buffer, past these rules.

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, EnumAccess, IntoDeserializer, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};
use serde_json::{Map, Value};
use std::fmt;

use crate::Error;

/// The error of a decode below the suite's error type.
pub type DecodeError = serde_json::Error;

/// Parses JSON text into a [`Value`], with Go's rule for exact duplicate
/// keys (the later wins; two objects merge).
pub fn parse_value(bytes: &[u8]) -> Result<Value, DecodeError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = GoValue.deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// Decodes `T` from JSON text with Go's rules. Not JSON is code 6; a key of
/// the wrong type or a missing required key is code 7 naming the key's
/// path (`ipam.ranges[0][0].subnet`).
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    let value =
        parse_value(bytes).map_err(|e| Error::Decode(format!("config is not valid JSON: {e}")))?;
    from_value_at(&value, "")
}

/// Decodes two views of the same JSON text with Go's rules, `A` first
/// (its errors win), from one parse: for keys that `flatten` would take
/// out of Go's decoding rules (those hold for a struct's own fields).
pub fn from_slice_twice<A: DeserializeOwned, B: DeserializeOwned>(
    bytes: &[u8],
) -> Result<(A, B), Error> {
    let value =
        parse_value(bytes).map_err(|e| Error::Decode(format!("config is not valid JSON: {e}")))?;
    Ok((from_value_at(&value, "")?, from_value_at(&value, "")?))
}

/// Decodes `T` from `value` with Go's rules; errors are code 7 naming the
/// key's path under `prefix` (the path of `value` itself, or "").
pub fn from_value_at<T: DeserializeOwned>(value: &Value, prefix: &str) -> Result<T, Error> {
    decode(value).map_err(|(path, msg)| {
        let key = match (prefix.is_empty(), path.is_empty()) {
            (true, _) => path,
            (false, true) => prefix.to_string(),
            (false, false) if path.starts_with('[') => format!("{prefix}{path}"),
            (false, false) => format!("{prefix}.{path}"),
        };
        Error::config(if key.is_empty() { "." } else { &key }, msg)
    })
}

/// Decodes `T` from `value` with Go's rules: on failure, the path of the
/// key at fault ("" for `value` itself) and serde's message.
pub fn decode<T: DeserializeOwned>(value: &Value) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize(Deserializer::new(value)).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        (path, e.into_inner().to_string())
    })
}

/// The value of object `value`'s key `name` as a Go struct with a field
/// `name` (and no other field folding onto it) would see it: every key
/// equal to `name` under case folding, collapsed as [`Deserializer`] does
/// (the last wins; trailing objects merge). `None` when absent or null.
pub fn lookup(value: &Value, name: &str) -> Option<Value> {
    lookup_in(value.as_object()?, name)
}

/// [`lookup`] in an object's map.
pub fn lookup_in(map: &Map<String, Value>, name: &str) -> Option<Value> {
    let values: Vec<&Value> = map
        .iter()
        .filter(|(k, v)| !v.is_null() && (k.as_str() == name || key_folds_to(k, name)))
        .map(|(_, v)| v)
        .collect();
    if values.is_empty() {
        return None;
    }
    Some(match collapse(values) {
        Node::One(v) => v.clone(),
        Node::Merged(objects) => {
            let mut out = Map::new();
            for (k, v) in objects.into_iter().flat_map(|m| m.iter()) {
                insert_as_go(&mut out, k.clone(), v.clone());
            }
            Value::Object(out)
        }
    })
}

/// The first key that appears twice among the objects under the top-level
/// key `field` of JSON text `bytes` (every top-level key equal to `field`
/// or folding to it, as they all land on one Go struct field whose map Go
/// fills key by key), or `None`. For maps whose Go key type refuses a key
/// it has already seen (upstream tuning's `sysctl`), which the decoded
/// [`Value`] cannot show: it keeps the later value. Text that is not a
/// JSON object, or a `field` that is not an object, is `None`: the decode
/// proper reports those.
pub fn repeated_key_under(bytes: &[u8], field: &str) -> Option<String> {
    struct Top<'f>(&'f str);
    struct Keys<'s>(&'s mut Vec<String>, &'s mut Option<String>);

    impl<'de> Visitor<'de> for Top<'_> {
        type Value = Option<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<String>, A::Error> {
            let (mut seen, mut repeated) = (Vec::new(), None);
            while let Some(key) = map.next_key::<String>()? {
                if key == self.0 || key_folds_to(&key, self.0) {
                    map.next_value_seed(Keys(&mut seen, &mut repeated))?;
                } else {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
            Ok(repeated)
        }
    }

    impl<'de> DeserializeSeed<'de> for Keys<'_> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Keys<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                map.next_value::<de::IgnoredAny>()?;
                if self.1.is_none() && self.0.contains(&key) {
                    *self.1 = Some(key.clone());
                }
                self.0.push(key);
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element::<de::IgnoredAny>()?.is_some() {}
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    }

    let mut de = serde_json::Deserializer::from_slice(bytes);
    de::Deserializer::deserialize_map(&mut de, Top(field))
        .ok()
        .flatten()
}

/// A config key read for a teardown (DEL, GC): a value that cannot be
/// decoded does not fail the whole parse but is kept as the reason, so a
/// teardown goes on without it. Under a config unchanged since ADD (the
/// spec's rule), a key ADD could not read made ADD fail before it created
/// anything from that key: there is nothing to remove on its account.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Lenient<T> {
    #[default]
    Absent,
    Usable(T),
    /// serde's message.
    Unusable(String),
}

impl<T> Lenient<T> {
    /// The value when usable; `None` otherwise, with the reason on stderr
    /// naming `key`.
    pub fn usable(self, key: &str) -> Option<T> {
        match self {
            Lenient::Absent => None,
            Lenient::Usable(v) => Some(v),
            Lenient::Unusable(why) => {
                eprintln!("ignoring the unusable config key {key}: {why}");
                None
            }
        }
    }
}

impl<'de, T: DeserializeOwned> de::Deserialize<'de> for Lenient<T> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v: Value = de::Deserialize::deserialize(d)?;
        if v.is_null() {
            return Ok(Lenient::Absent);
        }
        Ok(match decode::<T>(&v) {
            Ok(t) => Lenient::Usable(t),
            Err((path, msg)) if path.is_empty() => Lenient::Unusable(msg),
            Err((path, msg)) => Lenient::Unusable(format!("{path}: {msg}")),
        })
    }
}

/// A serde deserializer over a [`Value`] that applies Go's rules (module
/// docs) to every struct below it.
pub struct Deserializer<'a>(Node<'a>);

enum Node<'a> {
    One(&'a Value),
    /// Objects decoded one over the other: several keys landed on one field.
    Merged(Vec<&'a Map<String, Value>>),
}

impl<'a> Deserializer<'a> {
    pub fn new(value: &'a Value) -> Self {
        Deserializer(Node::One(value))
    }
}

/// Whether JSON key `key` names field `field` under Go's case folding.
pub fn key_folds_to(key: &str, field: &str) -> bool {
    let mut a = key.chars().map(fold);
    let mut b = field.chars().map(fold);
    loop {
        match (a.next(), b.next()) {
            (None, None) => return true,
            (Some(x), Some(y)) if x == y => {}
            _ => return false,
        }
    }
}

/// One representative of `c`'s case-folding orbit: ASCII letters fold to
/// upper case, and so do the two non-ASCII letters that Go folds onto
/// ASCII ones; other characters to the least of themselves and their
/// single-character upper and lower case.
fn fold(c: char) -> char {
    match c {
        'a'..='z' => c.to_ascii_uppercase(),
        '\u{212A}' => 'K',
        '\u{017F}' => 'S',
        c if c.is_ascii() => c,
        c => {
            fn single(mut it: impl Iterator<Item = char>) -> Option<char> {
                let first = it.next()?;
                it.next().is_none().then_some(first)
            }
            [Some(c), single(c.to_uppercase()), single(c.to_lowercase())]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(c)
        }
    }
}

/// The field of `fields` that JSON key `key` goes to, as Go picks it.
fn field_for(fields: &'static [&'static str], key: &str) -> Option<&'static str> {
    fields
        .iter()
        .copied()
        .find(|f| *f == key)
        .or_else(|| fields.iter().copied().find(|f| key_folds_to(key, f)))
}

/// The entries a struct gets from `objects`: each key mapped to its field,
/// unknown keys and nulls dropped, and keys landing on one field collapsed
/// into one entry (the last wins; trailing objects merge).
fn struct_entries<'a>(
    objects: &[&'a Map<String, Value>],
    fields: &'static [&'static str],
) -> Vec<(&'static str, Node<'a>)> {
    let mut groups: Vec<(&'static str, Vec<&'a Value>)> = Vec::new();
    for m in objects {
        for (k, v) in m.iter() {
            if v.is_null() {
                continue;
            }
            let Some(field) = field_for(fields, k) else {
                continue;
            };
            match groups.iter_mut().find(|(f, _)| *f == field) {
                Some((_, values)) => values.push(v),
                None => groups.push((field, vec![v])),
            }
        }
    }
    groups
        .into_iter()
        .map(|(field, values)| (field, collapse(values)))
        .collect()
}

/// The value of a field several keys landed on.
fn collapse(values: Vec<&Value>) -> Node<'_> {
    let start = match values.iter().rposition(|v| !v.is_object()) {
        Some(i) if i + 1 == values.len() => return Node::One(values[i]),
        Some(i) => i + 1,
        None => 0,
    };
    let objects: Vec<&Map<String, Value>> = values[start..]
        .iter()
        .filter_map(|v| v.as_object())
        .collect();
    if objects.len() == 1 {
        Node::One(values[start])
    } else {
        Node::Merged(objects)
    }
}

macro_rules! forward_to_value {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
            match self.0 {
                Node::One(v) => v.$method(visitor),
                Node::Merged(_) => self.deserialize_any(visitor),
            }
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Deserializer<'de> {
    type Error = DecodeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.0 {
            Node::One(Value::Array(a)) => visitor.visit_seq(Elements(a.iter())),
            Node::One(Value::Object(m)) => visitor.visit_map(Entries::new(vec![m])),
            Node::One(v) => v.deserialize_any(visitor),
            Node::Merged(objects) => visitor.visit_map(Entries::new(objects)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.0 {
            Node::One(Value::Null) => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        let objects = match self.0 {
            Node::One(Value::Object(m)) => vec![m],
            // Go: null into a struct leaves it as it was.
            Node::One(Value::Null) => vec![],
            Node::Merged(objects) => objects,
            // serde would fill a struct from a list; Go does not.
            Node::One(Value::Array(_)) => {
                return Err(de::Error::invalid_type(
                    de::Unexpected::Seq,
                    &"a JSON object",
                ))
            }
            Node::One(_) => return self.deserialize_any(visitor),
        };
        visitor.visit_map(StructEntries {
            entries: struct_entries(&objects, fields).into_iter(),
            value: None,
        })
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.0 {
            Node::One(Value::Null) => visitor.visit_map(Entries::new(vec![])),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.0 {
            Node::One(Value::Null) => visitor.visit_seq(Elements([].iter())),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        match self.0 {
            Node::One(Value::Object(m)) if m.len() == 1 => {
                let (variant, value) = m.iter().next().expect("one entry");
                visitor.visit_enum(Variant { variant, value })
            }
            Node::One(v) => v.deserialize_enum(name, variants, visitor),
            Node::Merged(_) => self.deserialize_any(visitor),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        match self.0 {
            Node::One(v) => v.deserialize_unit_struct(name, visitor),
            Node::Merged(_) => self.deserialize_any(visitor),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        visitor.visit_unit()
    }

    forward_to_value! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char deserialize_str
        deserialize_string deserialize_bytes deserialize_byte_buf deserialize_unit
        deserialize_identifier
    }
}

/// A struct's entries, keys already mapped to its fields.
struct StructEntries<'a> {
    entries: std::vec::IntoIter<(&'static str, Node<'a>)>,
    value: Option<Node<'a>>,
}

impl<'de> MapAccess<'de> for StructEntries<'de> {
    type Error = DecodeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DecodeError> {
        match self.entries.next() {
            Some((field, node)) => {
                self.value = Some(node);
                seed.deserialize(field.into_deserializer()).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, DecodeError> {
        let node = self
            .value
            .take()
            .ok_or_else(|| de::Error::custom("value asked for before its key"))?;
        seed.deserialize(Deserializer(node))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// A map's entries, keys exact, from one object or several in a row.
struct Entries<'a> {
    entries: Box<dyn Iterator<Item = (&'a String, &'a Value)> + 'a>,
    value: Option<&'a Value>,
}

impl<'a> Entries<'a> {
    fn new(objects: Vec<&'a Map<String, Value>>) -> Self {
        Entries {
            entries: Box::new(objects.into_iter().flat_map(|m| m.iter())),
            value: None,
        }
    }
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = DecodeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DecodeError> {
        match self.entries.next() {
            Some((k, v)) => {
                self.value = Some(v);
                seed.deserialize(de::value::BorrowedStrDeserializer::new(k.as_str()))
                    .map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, DecodeError> {
        let v = self
            .value
            .take()
            .ok_or_else(|| de::Error::custom("value asked for before its key"))?;
        seed.deserialize(Deserializer::new(v))
    }
}

struct Elements<'a>(std::slice::Iter<'a, Value>);

impl<'de> SeqAccess<'de> for Elements<'de> {
    type Error = DecodeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DecodeError> {
        match self.0.next() {
            Some(v) => seed.deserialize(Deserializer::new(v)).map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

/// An externally tagged enum value: `{"variant": value}`.
struct Variant<'a> {
    variant: &'a String,
    value: &'a Value,
}

impl<'de> EnumAccess<'de> for Variant<'de> {
    type Error = DecodeError;
    type Variant = Deserializer<'de>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self::Variant), DecodeError> {
        let tag = seed.deserialize(de::value::BorrowedStrDeserializer::new(
            self.variant.as_str(),
        ))?;
        Ok((tag, Deserializer::new(self.value)))
    }
}

impl<'de> VariantAccess<'de> for Deserializer<'de> {
    type Error = DecodeError;

    fn unit_variant(self) -> Result<(), DecodeError> {
        de::Deserialize::deserialize(self)
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, DecodeError> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        de::Deserializer::deserialize_seq(self, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        de::Deserializer::deserialize_struct(self, "", fields, visitor)
    }
}

/// Builds a [`Value`] from JSON text, merging exact duplicate keys as Go
/// decodes them (see [`parse_value`]).
struct GoValue;

impl<'de> DeserializeSeed<'de> for GoValue {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(GoValue)
    }
}

impl<'de> Visitor<'de> for GoValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_string()))
    }
    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(GoValue)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(GoValue)?;
            insert_as_go(&mut out, key, value);
        }
        Ok(Value::Object(out))
    }
}

/// Sets `key` in `map` as a later occurrence of it would in Go: the new
/// value goes last; an object over an object merges into it.
fn insert_as_go(map: &mut Map<String, Value>, key: String, value: Value) {
    let value = match (map.shift_remove(&key), value) {
        (Some(Value::Object(mut old)), Value::Object(new)) => {
            for (k, v) in new {
                insert_as_go(&mut old, k, v);
            }
            Value::Object(old)
        }
        (_, v) => v,
    };
    map.insert(key, value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    struct Mapping {
        #[serde(rename = "hostPort")]
        host_port: u16,
        #[serde(rename = "containerPort")]
        container_port: u16,
        #[serde(default)]
        protocol: Option<String>,
        #[serde(rename = "hostIP", default)]
        host_ip: Option<String>,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    struct Runtime {
        #[serde(rename = "portMappings", default)]
        port_mappings: Vec<Mapping>,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    struct Conf {
        #[serde(default)]
        name: String,
        #[serde(rename = "runtimeConfig", default)]
        runtime_config: Runtime,
        #[serde(default)]
        mtu: u32,
        #[serde(default)]
        sysctl: BTreeMap<String, String>,
        #[serde(default)]
        ipam: Option<Ipam>,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    struct Ipam {
        #[serde(rename = "type", default)]
        plugin_type: String,
        #[serde(default)]
        subnet: String,
    }

    fn parse<T: DeserializeOwned>(v: Value) -> T {
        from_value_at(&v, "").unwrap()
    }

    #[test]
    fn containerd_capitalised_keys_reach_their_fields() {
        let c: Conf = parse(json!({
            "name": "n",
            "RuntimeConfig": {"PortMappings": [
                {"HostPort": 8080, "ContainerPort": 80, "Protocol": "tcp", "HostIP": ""}
            ]}
        }));
        assert_eq!(
            c.runtime_config.port_mappings,
            [Mapping {
                host_port: 8080,
                container_port: 80,
                protocol: Some("tcp".into()),
                host_ip: Some(String::new()),
            }]
        );
        let c: Conf = parse(json!({"NAME": "x", "mTu": 1400, "IPAM": {"TYPE": "host-local"}}));
        assert_eq!((c.name.as_str(), c.mtu), ("x", 1400));
        assert_eq!(c.ipam.unwrap().plugin_type, "host-local");
    }

    #[test]
    fn an_exact_key_beats_a_folded_one_and_the_last_of_one_field_wins() {
        let c: Conf = parse(json!({"MTU": 1, "mtu": 2}));
        assert_eq!(c.mtu, 2);
        let c: Conf = parse(json!({"mtu": 2, "MTU": 1}));
        assert_eq!(c.mtu, 1, "Go: keys in order, the later assignment stays");
        // Objects landing on one field are decoded one over the other.
        let c: Conf = parse(json!({"ipam": {"type": "a", "subnet": "s"}, "IPAM": {"Type": "b"}}));
        assert_eq!(
            c.ipam.unwrap(),
            Ipam {
                plugin_type: "b".into(),
                subnet: "s".into()
            }
        );
        // A non-object after objects replaces them.
        let e = from_value_at::<Conf>(&json!({"ipam": {"type": "a"}, "Ipam": 5}), "").unwrap_err();
        assert_eq!(e.code(), 7);
        assert!(e.to_string().contains("ipam"), "{e}");
    }

    #[test]
    fn unknown_keys_are_ignored_and_null_is_absent() {
        let c: Conf = parse(json!({"whatever": [1, 2], "mtu": null, "ipam": null, "name": "n"}));
        assert_eq!(c.mtu, 0);
        assert_eq!(c.ipam, None);
        // null where a list or an object is expected is empty, as Go's nil.
        let r: Runtime = parse(json!({"portMappings": null}));
        assert!(r.port_mappings.is_empty());
        let v: Vec<Mapping> = from_value_at(&json!(null), "").unwrap();
        assert!(v.is_empty());
    }

    #[test]
    fn map_keys_stay_exact() {
        let c: Conf = parse(json!({"SYSCTL": {"Net.Core.Somaxconn": "1"}}));
        assert_eq!(c.sysctl.keys().collect::<Vec<_>>(), ["Net.Core.Somaxconn"]);
    }

    #[test]
    fn go_folds_kelvin_and_long_s_onto_ascii() {
        assert!(key_folds_to("\u{212A}ind", "kind"));
        assert!(key_folds_to("\u{017F}ubnet", "subnet"));
        assert!(key_folds_to("SUBNET", "subnet"));
        assert!(!key_folds_to("subnets", "subnet"));
        assert!(!key_folds_to("sübnet", "subnet"));
        assert!(key_folds_to("ÄB", "äb"));
    }

    #[test]
    fn errors_name_the_path_with_the_field_name() {
        let e = from_value_at::<Conf>(
            &json!({"runtimeConfig": {"portMappings": [{"HostPort": "x", "containerPort": 1}]}}),
            "",
        )
        .unwrap_err();
        assert_eq!(e.code(), 7);
        assert!(
            e.to_string()
                .starts_with("invalid network config: runtimeConfig.portMappings[0].hostPort:"),
            "{e}"
        );
        let e = from_value_at::<Mapping>(&json!({"hostPort": 1}), "runtimeConfig.portMappings[3]")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid network config: runtimeConfig.portMappings[3]: missing field `containerPort`"
        );
        assert_eq!(from_slice::<Conf>(b"{").unwrap_err().code(), 6);
    }

    #[test]
    fn a_key_repeated_under_a_field_is_found_in_the_text() {
        let find = |t: &str| repeated_key_under(t.as_bytes(), "sysctl");
        assert_eq!(find(r#"{"sysctl": {"a": "1", "b": "2"}}"#), None);
        assert_eq!(
            find(r#"{"sysctl": {"a": "1", "b": "2", "a": "3"}}"#),
            Some("a".into())
        );
        // Two keys landing on the field fill one map.
        assert_eq!(
            find(r#"{"sysctl": {"a": "1"}, "SYSCTL": {"a": "2"}}"#),
            Some("a".into())
        );
        // Elsewhere, or not an object: not this function's business.
        assert_eq!(find(r#"{"args": {"sysctl": {"a": "1", "a": "2"}}}"#), None);
        assert_eq!(find(r#"{"sysctl": "a"}"#), None);
        assert_eq!(find("[1]"), None);
    }

    #[test]
    fn exact_duplicate_keys_in_the_text_follow_go() {
        let v =
            parse_value(br#"{"mtu": 1, "a": {"x": 1, "y": 1}, "mtu": 2, "a": {"y": 2}}"#).unwrap();
        assert_eq!(v, json!({"mtu": 2, "a": {"x": 1, "y": 2}}));
        let v = parse_value(br#"{"a": {"x": 1}, "a": 3}"#).unwrap();
        assert_eq!(v, json!({"a": 3}));
        assert!(parse_value(b"{} x").is_err());
    }

    #[derive(Debug, Deserialize, PartialEq)]
    enum Mode {
        #[serde(rename = "bridge")]
        Bridge,
    }

    #[test]
    fn enum_values_stay_exact() {
        let m: Mode = parse(json!("bridge"));
        assert_eq!(m, Mode::Bridge);
        assert!(from_value_at::<Mode>(&json!("Bridge"), "mode").is_err());
    }
}
