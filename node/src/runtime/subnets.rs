//! Carving sandbox subnets out of a pool: pure arithmetic, no IO.

use std::net::Ipv4Addr;

/// An IPv4 network in CIDR form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    pub base: u32,
    pub prefix: u8,
}

impl Cidr {
    pub fn new(addr: Ipv4Addr, prefix: u8) -> Self {
        let mask = mask(prefix);
        Cidr {
            base: u32::from(addr) & mask,
            prefix,
        }
    }

    /// `a.b.c.d/n` (host bits are dropped: `10.1.2.3/16` is `10.1.0.0/16`).
    pub fn parse(s: &str) -> Option<Cidr> {
        let net: ipnet::Ipv4Net = s.parse().ok()?;
        Some(Cidr::new(net.addr(), net.prefix_len()))
    }

    pub fn size(&self) -> u64 {
        1u64 << (32 - self.prefix)
    }

    pub fn last(&self) -> u32 {
        self.base + (self.size() - 1) as u32
    }

    pub fn overlaps(&self, other: &Cidr) -> bool {
        self.base <= other.last() && other.base <= self.last()
    }

    /// The first host address, used as the gateway.
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.base + 1)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.base), self.prefix)
    }
}

fn mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    }
}

/// Blocks of `block_prefix` inside `pool`.
#[derive(Debug, Clone, Copy)]
pub struct SubnetPool {
    pub pool: Cidr,
    pub block_prefix: u8,
}

impl SubnetPool {
    pub fn blocks(&self) -> u32 {
        if self.block_prefix < self.pool.prefix {
            return 0;
        }
        1u32 << (self.block_prefix - self.pool.prefix)
    }

    pub fn block(&self, index: u32) -> Cidr {
        Cidr {
            base: self.pool.base + index * (1u32 << (32 - self.block_prefix)),
            prefix: self.block_prefix,
        }
    }

    /// The first block, from `start` on (wrapping), that overlaps none of `taken`.
    pub fn next_free(&self, start: u32, taken: &[Cidr]) -> Option<(u32, Cidr)> {
        let n = self.blocks();
        (0..n)
            .map(|i| (start + i) % n)
            .map(|i| (i, self.block(i)))
            .find(|(_, c)| !taken.iter().any(|t| t.overlaps(c)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_parse_with_host_bits_dropped_and_nonsense_refused() {
        assert_eq!(
            Cidr::parse("10.1.2.3/16"),
            Some(Cidr::new(Ipv4Addr::new(10, 1, 0, 0), 16))
        );
        assert_eq!(
            Cidr::parse("10.1.2.3/16").unwrap().to_string(),
            "10.1.0.0/16"
        );
        for bad in [
            "10.1.2.3",
            "10.1.2.3/33",
            "10.1.2/8",
            "::1/64",
            "10.0.0.0/x",
            "",
        ] {
            assert_eq!(Cidr::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn blocks_and_overlap() {
        let pool = SubnetPool {
            pool: Cidr::parse("10.200.0.0/16").unwrap(),
            block_prefix: 29,
        };
        assert_eq!(pool.blocks(), 8192);
        assert_eq!(pool.block(1).to_string(), "10.200.0.8/29");
        assert_eq!(pool.block(1).gateway(), Ipv4Addr::new(10, 200, 0, 9));
        let taken = vec![pool.block(0), Cidr::parse("10.200.0.8/30").unwrap()];
        let (i, c) = pool.next_free(0, &taken).unwrap();
        assert_eq!((i, c.to_string()), (2, "10.200.0.16/29".to_string()));
        // A big foreign network covering the start pushes allocation past it.
        let taken = vec![Cidr::parse("10.200.0.0/24").unwrap()];
        assert_eq!(
            pool.next_free(0, &taken).unwrap().1.to_string(),
            "10.200.1.0/29"
        );
        // Wrapping from the end.
        assert_eq!(pool.next_free(8191, &[]).unwrap().0, 8191);
        let all = vec![Cidr::parse("10.0.0.0/8").unwrap()];
        assert!(pool.next_free(0, &all).is_none());
    }
}
