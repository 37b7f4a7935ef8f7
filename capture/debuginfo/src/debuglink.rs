//! The `.gnu_debuglink` section: the name of a binary's separate debug
//! file and the CRC-32 of that file's contents, which tells a file of the
//! same name from another build's. Written by `objcopy
//! --add-gnu-debuglink`; read as gdb and elfutils read it.

use std::io::Read;
use std::path::Path;

use object::{Object, ObjectSection};

/// A binary's debuglink: the debug file's name and its CRC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Debuglink {
    pub name: String,
    pub crc: u32,
}

/// The debuglink of the ELF file at `path`, if it has a sound one. Only
/// its headers and the section are read, not the whole binary: a large
/// program read whole for a few bytes was a tenth of a re-open.
pub(crate) fn read_file(path: &Path) -> Option<Debuglink> {
    let file = std::fs::File::open(path).ok()?;
    read_from(&object::read::ReadCache::new(file))
}

/// The debuglink of the ELF file whose bytes are `data`, if it has a
/// sound one.
pub(crate) fn read(data: &[u8]) -> Option<Debuglink> {
    read_from(data)
}

fn read_from<'d, R: object::ReadRef<'d>>(data: R) -> Option<Debuglink> {
    let file = object::File::parse(data).ok()?;
    let section = file.section_by_name(".gnu_debuglink")?;
    let bytes = section.data().ok()?;
    parse(bytes, file.is_little_endian())
}

/// The section's contents: the name, NUL-terminated and padded to four
/// bytes, then the CRC in the file's byte order.
fn parse(bytes: &[u8], little_endian: bool) -> Option<Debuglink> {
    let nul = bytes.iter().position(|&b| b == 0)?;
    let name = std::str::from_utf8(&bytes[..nul]).ok()?;
    // A name is a file name, never a path: one that climbs out of the
    // directories searched is not followed.
    if name.is_empty() || name.contains('/') {
        return None;
    }
    let at = (nul + 1).next_multiple_of(4);
    let crc: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    let crc = if little_endian {
        u32::from_le_bytes(crc)
    } else {
        u32::from_be_bytes(crc)
    };
    Some(Debuglink {
        name: name.to_string(),
        crc,
    })
}

/// The CRC-32 (the zlib polynomial, as the debuglink records it) of the
/// file at `path`.
pub(crate) fn file_crc(path: &Path) -> std::io::Result<u32> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(hasher.finalize());
        }
        hasher.update(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_name_and_the_crc_after_the_padding() {
        let mut s = b"libfoo.so.debug\0".to_vec();
        s.extend(0x1234_5678u32.to_le_bytes());
        let link = parse(&s, true).unwrap();
        assert_eq!(
            (link.name.as_str(), link.crc),
            ("libfoo.so.debug", 0x1234_5678)
        );
        // "ab\0" pads to 4 bytes before the CRC.
        let mut s = b"ab\0\0".to_vec();
        s.extend(7u32.to_be_bytes());
        assert_eq!(parse(&s, false).unwrap().crc, 7);
    }

    #[test]
    fn damaged_or_climbing_links_are_none() {
        assert_eq!(parse(b"", true), None);
        assert_eq!(parse(b"name-without-nul", true), None);
        assert_eq!(parse(b"x\0\0\0\x01\x02", true), None);
        let mut s = b"../../etc/x\0".to_vec();
        s.extend(0u32.to_le_bytes());
        assert_eq!(parse(&s, true), None);
    }

    #[test]
    fn a_binarys_link_is_read_from_its_headers_and_section() {
        let dir = tempfile::tempdir().unwrap();
        let debug = dir.path().join("prog.debug");
        std::fs::write(&debug, b"the debug file's bytes").unwrap();
        // /bin/true has a link of its own: it is replaced.
        let linked = dir.path().join("prog");
        let out = std::process::Command::new("objcopy")
            .arg("--remove-section=.gnu_debuglink")
            .arg(format!("--add-gnu-debuglink={}", debug.display()))
            .arg("/bin/true")
            .arg(&linked)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let link = read_file(&linked).unwrap();
        assert_eq!(link.name, "prog.debug");
        assert_eq!(link.crc, file_crc(&debug).unwrap());
        // Not ELF, cut short, or not there: none.
        assert_eq!(read_file(&debug), None);
        let bytes = std::fs::read(&linked).unwrap();
        let cut = dir.path().join("cut");
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        assert_eq!(read_file(&cut), None);
        assert_eq!(read_file(&dir.path().join("gone")), None);
    }

    #[test]
    fn the_crc_is_zlibs() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"123456789").unwrap();
        // The standard check value of CRC-32 (IEEE).
        assert_eq!(file_crc(&p).unwrap(), 0xcbf4_3926);
    }
}
