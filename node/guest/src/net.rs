//! The container's network as the guest needs to know it.

use std::net::Ipv4Addr;

/// The gateway of the default route in `/proc/net/route`'s format (addresses are the
/// kernel's in-memory words, printed in hex: little-endian byte order on the machines
/// warren runs on).
pub fn default_gateway(routes: &str) -> Option<Ipv4Addr> {
    routes.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (dest, gw, flags) = (f.get(1)?, f.get(2)?, f.get(3)?);
        let flags = u32::from_str_radix(flags, 16).ok()?;
        // RTF_UP | RTF_GATEWAY
        if *dest != "00000000" || flags & 0x3 != 0x3 {
            return None;
        }
        let word = u32::from_str_radix(gw, 16).ok()?;
        Some(Ipv4Addr::from(word.to_le_bytes()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_routes_gateway_is_read() {
        let routes =
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                      eth0\t0000C80A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
                      eth0\t00000000\t0100C80A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
        assert_eq!(default_gateway(routes), Some(Ipv4Addr::new(10, 200, 0, 1)));
        assert_eq!(default_gateway("Iface\n"), None);
    }
}
