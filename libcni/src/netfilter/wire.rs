//! Netlink attributes as nfnetlink subsystems use them: a builder for
//! nested TLVs (integers in network byte order, strings NUL-terminated) and
//! an iterator to read them back. Shared by nf_tables and ctnetlink.

/// `NLA_F_NESTED`: set on every attribute that holds attributes.
pub(crate) const NLA_F_NESTED: u16 = 1 << 15;
/// Mask of the attribute type (drops `NLA_F_NESTED` and byte-order flags).
pub(crate) const NLA_TYPE_MASK: u16 = 0x3fff;

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// A growing buffer of netlink attributes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attrs {
    buf: Vec<u8>,
}

impl Attrs {
    pub fn new() -> Attrs {
        Attrs::default()
    }

    /// The encoded attributes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Adds one attribute with `data` as payload.
    pub fn put(&mut self, ty: u16, data: &[u8]) -> &mut Self {
        let len = 4 + data.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.buf.resize(align4(self.buf.len()), 0);
        self
    }

    pub fn put_u8(&mut self, ty: u16, v: u8) -> &mut Self {
        self.put(ty, &[v])
    }

    /// A 16-bit integer in network byte order.
    pub fn put_be16(&mut self, ty: u16, v: u16) -> &mut Self {
        self.put(ty, &v.to_be_bytes())
    }

    /// A 32-bit integer in network byte order (nf_tables' `NLA_U32`).
    pub fn put_be32(&mut self, ty: u16, v: u32) -> &mut Self {
        self.put(ty, &v.to_be_bytes())
    }

    /// A 64-bit integer in network byte order.
    pub fn put_be64(&mut self, ty: u16, v: u64) -> &mut Self {
        self.put(ty, &v.to_be_bytes())
    }

    /// A NUL-terminated string.
    pub fn put_str(&mut self, ty: u16, s: &str) -> &mut Self {
        let mut data = Vec::with_capacity(s.len() + 1);
        data.extend_from_slice(s.as_bytes());
        data.push(0);
        self.put(ty, &data)
    }

    /// A nested attribute whose content `f` builds.
    pub fn nest(&mut self, ty: u16, f: impl FnOnce(&mut Attrs)) -> &mut Self {
        let mut inner = Attrs::new();
        f(&mut inner);
        self.put(ty | NLA_F_NESTED, &inner.buf)
    }

    /// Appends already encoded attributes.
    pub fn extend(&mut self, other: &Attrs) -> &mut Self {
        self.buf.extend_from_slice(&other.buf);
        self
    }
}

/// One attribute read back: its type (flags masked off) and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    pub ty: u16,
    pub data: &'a [u8],
}

impl<'a> Attr<'a> {
    /// The nested attributes inside this one.
    pub fn nested(&self) -> AttrIter<'a> {
        AttrIter::new(self.data)
    }

    pub fn u8(&self) -> Option<u8> {
        self.data.first().copied()
    }

    pub fn be16(&self) -> Option<u16> {
        Some(u16::from_be_bytes(self.data.get(..2)?.try_into().ok()?))
    }

    pub fn be32(&self) -> Option<u32> {
        Some(u32::from_be_bytes(self.data.get(..4)?.try_into().ok()?))
    }

    pub fn be64(&self) -> Option<u64> {
        Some(u64::from_be_bytes(self.data.get(..8)?.try_into().ok()?))
    }

    /// A string attribute, without its NUL terminator.
    pub fn str(&self) -> String {
        let end = self
            .data
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.data.len());
        String::from_utf8_lossy(&self.data[..end]).into_owned()
    }
}

/// Iterates over the attributes of a buffer; stops at the first malformed one.
#[derive(Debug, Clone)]
pub struct AttrIter<'a> {
    rest: &'a [u8],
}

impl<'a> AttrIter<'a> {
    pub fn new(buf: &'a [u8]) -> AttrIter<'a> {
        AttrIter { rest: buf }
    }

    /// The first attribute of type `ty`.
    pub fn find(mut self, ty: u16) -> Option<Attr<'a>> {
        self.by_ref().find(|a| a.ty == ty)
    }
}

impl<'a> Iterator for AttrIter<'a> {
    type Item = Attr<'a>;

    fn next(&mut self) -> Option<Attr<'a>> {
        if self.rest.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([self.rest[0], self.rest[1]]) as usize;
        let ty = u16::from_ne_bytes([self.rest[2], self.rest[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > self.rest.len() {
            self.rest = &[];
            return None;
        }
        let data = &self.rest[4..len];
        self.rest = &self.rest[align4(len).min(self.rest.len())..];
        Some(Attr { ty, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netfilter_attrs_round_trip_with_padding_and_nesting() {
        let mut a = Attrs::new();
        a.put_str(1, "nat").put_be32(2, 0x0102_0304).nest(3, |n| {
            n.put_u8(1, 7).put_be16(2, 8080);
        });
        // "nat\0" is 4 bytes: 8; u32: 8; nest: 4 + (8 + 8).
        assert_eq!(a.bytes().len(), 8 + 8 + 20);
        let attrs: Vec<Attr> = AttrIter::new(a.bytes()).collect();
        assert_eq!(attrs.len(), 3);
        assert_eq!(attrs[0].str(), "nat");
        assert_eq!(attrs[1].be32(), Some(0x0102_0304));
        assert_eq!(attrs[2].ty, 3, "NLA_F_NESTED is masked off");
        let inner: Vec<Attr> = attrs[2].nested().collect();
        assert_eq!(inner[0].u8(), Some(7));
        assert_eq!(inner[1].be16(), Some(8080));
        assert_eq!(
            AttrIter::new(a.bytes()).find(2).and_then(|x| x.be32()),
            Some(0x0102_0304)
        );
    }

    #[test]
    fn netfilter_attrs_stop_at_a_truncated_attribute() {
        let mut a = Attrs::new();
        a.put_be32(1, 5);
        let mut bytes = a.bytes().to_vec();
        bytes.extend_from_slice(&[40, 0, 2, 0, 1]);
        assert_eq!(AttrIter::new(&bytes).count(), 1);
    }
}
