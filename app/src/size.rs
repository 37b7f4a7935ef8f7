//! Byte sizes as users type them (`65536`, `64K`, `4M`, `1G`), for the
//! command line and the Capture panel alike, so a size one accepts the
//! other accepts too.

/// The smallest ring a capture keeps: one page.
pub const MIN_RING: u64 = 4096;

/// A size with an optional `K`, `M` or `G` suffix (binary: 1K = 1024);
/// blanks around the number and the suffix are allowed.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{t}` is not a size (e.g. 65536, 64K, 4M)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{t}` is too large"))
}

/// The size of a capture's ring: at least [`MIN_RING`].
pub fn parse_ring_size(s: &str) -> Result<u64, String> {
    let size = parse_size(s)?;
    if size < MIN_RING {
        return Err(format!("ring size {size} is too small; use at least 4K"));
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_as_typed() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size(" 64 k "), Ok(64 << 10));
        assert_eq!(parse_size("4M"), Ok(4 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert!(parse_size("").is_err());
        assert!(parse_size("K").is_err());
        assert!(parse_size("4T").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999G")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn a_ring_is_at_least_a_page() {
        assert_eq!(parse_ring_size("4K"), Ok(4096));
        let e = parse_ring_size("1K").unwrap_err();
        assert!(e.contains("at least 4K"), "{e}");
    }
}
