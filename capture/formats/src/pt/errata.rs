//! The CPU errata that change what a PT trace holds, and which CPU has
//! which: libipt's table (`pt_cpu_errata`), ported so that reading a trace
//! needs no C library (the decoder's tests hold every CPU to libipt's),
//! and for CPUs newer than the bundled libipt knows, the errata Intel's
//! specification updates give them. Two change packets themselves (SKD007,
//! SKZ84), which [`read`](super::read) works around; the decoder works
//! around the rest.

/// The errata of one CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Errata {
    pub bdm70: bool,
    pub bdm64: bool,
    pub skd007: bool,
    pub skd022: bool,
    pub skd010: bool,
    pub skl014: bool,
    pub apl11: bool,
    pub apl12: bool,
    pub skl168: bool,
    pub skz84: bool,
}

impl Errata {
    /// libipt's table: the errata of the Intel CPUs it knows, by family
    /// and model (no erratum here depends on the stepping).
    pub fn known(family: u16, model: u8) -> Option<Errata> {
        let mut e = Errata::default();
        match (family, model) {
            // Broadwell.
            (0x6, 0x3d | 0x47 | 0x4f | 0x56) => {
                e.bdm70 = true;
                e.bdm64 = true;
            }
            // Skylake and Kaby Lake clients.
            (0x6, 0x4e | 0x5e | 0x8e | 0x9e | 0xa5 | 0xa6) => {
                e.bdm70 = true;
                e.skd007 = true;
                e.skd022 = true;
                e.skd010 = true;
                e.skl014 = true;
                e.skl168 = true;
            }
            // Skylake, Cascade Lake and Ice Lake servers.
            (0x6, 0x55 | 0x6a | 0x6c) => {
                e.bdm70 = true;
                e.skl014 = true;
                e.skd022 = true;
                e.skz84 = true;
            }
            // Sapphire, Emerald and Granite Rapids.
            (0x6, 0x8f | 0xcf | 0xad | 0xae) => {
                e.bdm70 = true;
                e.skd022 = true;
                e.skz84 = true;
            }
            // Cannon Lake, Ice Lake and Tiger Lake clients.
            (0x6, 0x66 | 0x7d | 0x7e | 0x8c | 0x8d | 0xa7 | 0xa8) => {
                e.bdm70 = true;
                e.skl014 = true;
                e.skd022 = true;
            }
            // Alder Lake, Raptor Lake, Meteor Lake, Arrow Lake and kin.
            (
                0x6,
                0x97 | 0x9a | 0xba | 0xb7 | 0xbf | 0xc5 | 0xc6 | 0xb5 | 0xaa | 0xac | 0xbd | 0xcc,
            ) => {
                e.bdm70 = true;
                e.skd022 = true;
                e.apl11 = true;
            }
            // Goldmont.
            (0x6, 0x5c | 0x5f) => {
                e.apl12 = true;
                e.apl11 = true;
            }
            // Goldmont Plus, Tremont and the other Atom cores.
            (0x6, 0x7a | 0x86 | 0x96 | 0x9c | 0xb6 | 0xaf | 0xdd) => {
                e.apl11 = true;
            }
            (0x13, 0x01) => {
                e.bdm70 = true;
                e.skd022 = true;
                e.skz84 = true;
            }
            _ => return None,
        }
        Some(e)
    }

    /// CPUs that the bundled libipt does not know: Lunar Lake (6/0xd5)
    /// and family 0x12 (models 1 and 3) have BDM70, SKD022 and APL11.
    pub fn newer(family: u16, model: u8) -> Option<Errata> {
        match (family, model) {
            (0x6, 0xd5) | (0x12, 0x01 | 0x03) => Some(Errata {
                bdm70: true,
                skd022: true,
                apl11: true,
                ..Errata::default()
            }),
            _ => None,
        }
    }

    /// The names of the errata this CPU has, as Intel's specification
    /// updates name them.
    pub fn names(&self) -> Vec<&'static str> {
        [
            (self.bdm70, "BDM70"),
            (self.bdm64, "BDM64"),
            (self.skd007, "SKD007"),
            (self.skd022, "SKD022"),
            (self.skd010, "SKD010"),
            (self.skl014, "SKL014"),
            (self.apl11, "APL11"),
            (self.apl12, "APL12"),
            (self.skl168, "SKL168"),
            (self.skz84, "SKZ84"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}
