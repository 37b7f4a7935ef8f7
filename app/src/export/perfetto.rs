//! Perfetto's TrackEvent protobuf. A process track per process and a
//! thread track per thread (with a child track for its source lines);
//! each slice a TYPE_SLICE_BEGIN and a TYPE_SLICE_END in nesting order,
//! times in ns. Names, categories, modules and source locations are
//! interned on the one packet sequence, so a function's strings go out
//! once however often it is called.
//!
//! The messages below are the subset of Perfetto's official schema
//! (`protos/perfetto/trace/…`) that ptscope writes, with its field
//! numbers; prost encodes them. The trace is a stream of `Trace.packet`
//! fields, each written as it is made.

use std::collections::HashMap;
use std::io::Write;

use anyhow::Result;
use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message;
use ptscope_model::TimeUnit;

use super::{put, Sink, Slice};

#[derive(Clone, PartialEq, Message)]
struct TracePacket {
    #[prost(uint64, optional, tag = "8")]
    timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "10")]
    trusted_packet_sequence_id: Option<u32>,
    #[prost(message, optional, tag = "11")]
    track_event: Option<TrackEvent>,
    #[prost(message, optional, tag = "12")]
    interned_data: Option<InternedData>,
    #[prost(uint32, optional, tag = "13")]
    sequence_flags: Option<u32>,
    #[prost(message, optional, tag = "60")]
    track_descriptor: Option<TrackDescriptor>,
    #[prost(bool, optional, tag = "87")]
    first_packet_on_sequence: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    uuid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    name: Option<String>,
    #[prost(message, optional, tag = "3")]
    process: Option<ProcessDescriptor>,
    #[prost(message, optional, tag = "4")]
    thread: Option<ThreadDescriptor>,
    #[prost(uint64, optional, tag = "5")]
    parent_uuid: Option<u64>,
}

#[derive(Clone, PartialEq, Message)]
struct ProcessDescriptor {
    #[prost(int32, optional, tag = "1")]
    pid: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
struct ThreadDescriptor {
    #[prost(int32, optional, tag = "1")]
    pid: Option<i32>,
    #[prost(int32, optional, tag = "2")]
    tid: Option<i32>,
    #[prost(string, optional, tag = "5")]
    thread_name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct TrackEvent {
    #[prost(uint64, repeated, packed = "false", tag = "3")]
    category_iids: Vec<u64>,
    #[prost(message, repeated, tag = "4")]
    debug_annotations: Vec<DebugAnnotation>,
    /// `TrackEvent.Type`: 1 slice begin, 2 slice end.
    #[prost(int32, optional, tag = "9")]
    r#type: Option<i32>,
    #[prost(uint64, optional, tag = "10")]
    name_iid: Option<u64>,
    #[prost(uint64, optional, tag = "11")]
    track_uuid: Option<u64>,
    #[prost(uint64, optional, tag = "34")]
    source_location_iid: Option<u64>,
}

#[derive(Clone, PartialEq, Message)]
struct DebugAnnotation {
    #[prost(uint64, optional, tag = "1")]
    name_iid: Option<u64>,
    #[prost(bool, optional, tag = "2")]
    bool_value: Option<bool>,
    #[prost(uint64, optional, tag = "17")]
    string_value_iid: Option<u64>,
}

#[derive(Clone, PartialEq, Message)]
struct InternedData {
    #[prost(message, repeated, tag = "1")]
    event_categories: Vec<Named>,
    #[prost(message, repeated, tag = "2")]
    event_names: Vec<Named>,
    #[prost(message, repeated, tag = "3")]
    debug_annotation_names: Vec<Named>,
    #[prost(message, repeated, tag = "4")]
    source_locations: Vec<SourceLocation>,
    #[prost(message, repeated, tag = "29")]
    debug_annotation_string_values: Vec<InternedString>,
}

/// `EventName`, `EventCategory` and `DebugAnnotationName`: an iid and a
/// name, fields 1 and 2 in each.
#[derive(Clone, PartialEq, Message)]
struct Named {
    #[prost(uint64, optional, tag = "1")]
    iid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct SourceLocation {
    #[prost(uint64, optional, tag = "1")]
    iid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    file_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    function_name: Option<String>,
    #[prost(uint32, optional, tag = "4")]
    line_number: Option<u32>,
}

#[derive(Clone, PartialEq, Message)]
struct InternedString {
    #[prost(uint64, optional, tag = "1")]
    iid: Option<u64>,
    #[prost(bytes = "vec", optional, tag = "2")]
    str: Option<Vec<u8>>,
}

const SEQUENCE: u32 = 1;
const SLICE_BEGIN: i32 = 1;
const SLICE_END: i32 = 2;
/// `SEQ_INCREMENTAL_STATE_CLEARED`, `SEQ_NEEDS_INCREMENTAL_STATE`.
const CLEARED: u32 = 1;
const NEEDS_STATE: u32 = 2;

/// The debug annotations' names.
const MODULE: u64 = 1;
const ESTIMATED: u64 = 2;
const INFERRED_START: u64 = 3;

/// One interning table: a string's iid, from 1.
#[derive(Default)]
struct Interned(HashMap<String, u64>);

impl Interned {
    /// `s`'s iid, and whether it is new (its definition must go out).
    fn iid(&mut self, s: &str) -> (u64, bool) {
        if let Some(&i) = self.0.get(s) {
            return (i, false);
        }
        let i = self.0.len() as u64 + 1;
        self.0.insert(s.to_string(), i);
        (i, true)
    }
}

/// A track's open slices: each one's depth and the end still to write.
#[derive(Default)]
struct Track {
    uuid: u64,
    open: Vec<(u32, u64)>,
}

pub struct Perfetto<'w> {
    out: &'w mut dyn Write,
    buf: Vec<u8>,
    first: bool,
    names: Interned,
    categories: Interned,
    modules: Interned,
    sources: Interned,
    /// The current thread's call track and lines track.
    calls: Track,
    lines: Option<Track>,
    thread: (i32, i32, String),
    processes: Vec<i32>,
    next_uuid: u64,
    /// Whether the debug annotations' names went out (with the first
    /// slice).
    annotation_names_sent: bool,
}

impl<'w> Perfetto<'w> {
    pub fn new(out: &'w mut dyn Write) -> Perfetto<'w> {
        Perfetto {
            out,
            buf: Vec::with_capacity(256),
            first: true,
            names: Interned::default(),
            categories: Interned::default(),
            modules: Interned::default(),
            sources: Interned::default(),
            calls: Track::default(),
            lines: None,
            thread: (0, 0, String::new()),
            processes: Vec::new(),
            next_uuid: 1,
            annotation_names_sent: false,
        }
    }

    /// Writes `p` as one `Trace.packet` field, on the sequence.
    fn packet(&mut self, mut p: TracePacket) -> Result<()> {
        p.trusted_packet_sequence_id = Some(SEQUENCE);
        if std::mem::take(&mut self.first) {
            p.first_packet_on_sequence = Some(true);
            p.sequence_flags = Some(CLEARED | NEEDS_STATE);
        } else if p.track_event.is_some() {
            p.sequence_flags = Some(NEEDS_STATE);
        }
        self.buf.clear();
        encode_key(1, WireType::LengthDelimited, &mut self.buf);
        encode_varint(p.encoded_len() as u64, &mut self.buf);
        p.encode(&mut self.buf)?;
        put(self.out, &self.buf)
    }

    fn uuid(&mut self) -> u64 {
        self.next_uuid += 1;
        self.next_uuid
    }

    fn track(&mut self, name: Option<String>, thread: bool, parent: Option<u64>) -> Result<u64> {
        let uuid = self.uuid();
        let (pid, tid, comm) = self.thread.clone();
        self.packet(TracePacket {
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(uuid),
                name,
                process: None,
                thread: thread.then_some(ThreadDescriptor {
                    pid: Some(pid),
                    tid: Some(tid),
                    thread_name: Some(comm),
                }),
                parent_uuid: parent,
            }),
            ..TracePacket::default()
        })?;
        Ok(uuid)
    }

    /// Ends the open slices a slice at `depth` starting at `start` does
    /// not nest in: those as deep or deeper (a call's depth is exact, in
    /// tree order) and, for lines, which come in time order, those that
    /// ended by `start`.
    fn close(&mut self, lines: bool, depth: u32, start: u64) -> Result<()> {
        loop {
            let track = if lines {
                self.lines.as_mut().expect("a lines track")
            } else {
                &mut self.calls
            };
            let Some(&(d, end)) = track.open.last() else {
                return Ok(());
            };
            if d < depth && !(lines && end <= start) {
                return Ok(());
            }
            track.open.pop();
            let uuid = track.uuid;
            self.packet(TracePacket {
                timestamp: Some(end),
                track_event: Some(TrackEvent {
                    r#type: Some(SLICE_END),
                    track_uuid: Some(uuid),
                    ..TrackEvent::default()
                }),
                ..TracePacket::default()
            })?;
        }
    }

    /// Ends every open slice of the current thread.
    fn close_thread(&mut self) -> Result<()> {
        self.close(false, 0, u64::MAX)?;
        if self.lines.is_some() {
            self.close(true, 0, u64::MAX)?;
        }
        Ok(())
    }
}

impl Sink for Perfetto<'_> {
    fn thread(&mut self, pid: i32, tid: i32, comm: &str) -> Result<()> {
        self.close_thread()?;
        if !self.processes.contains(&pid) {
            self.processes.push(pid);
            let uuid = self.uuid();
            self.packet(TracePacket {
                track_descriptor: Some(TrackDescriptor {
                    uuid: Some(uuid),
                    process: Some(ProcessDescriptor { pid: Some(pid) }),
                    ..TrackDescriptor::default()
                }),
                ..TracePacket::default()
            })?;
        }
        self.thread = (pid, tid, comm.to_string());
        let uuid = self.track(None, true, None)?;
        self.calls = Track {
            uuid,
            open: Vec::new(),
        };
        self.lines = None;
        Ok(())
    }

    fn slice(&mut self, s: &Slice) -> Result<()> {
        if s.line && self.lines.is_none() {
            let parent = self.calls.uuid;
            let name = format!("{} {} lines", s.tid, self.thread.2);
            let uuid = self.track(Some(name), false, Some(parent))?;
            self.lines = Some(Track {
                uuid,
                open: Vec::new(),
            });
        }
        self.close(s.line, s.depth, s.start)?;
        let mut interned = InternedData::default();
        let (name, new) = self.names.iid(s.name);
        if new {
            interned.event_names.push(Named {
                iid: Some(name),
                name: Some(s.name.to_string()),
            });
        }
        let (category, new) = self.categories.iid(s.category);
        if new {
            interned.event_categories.push(Named {
                iid: Some(category),
                name: Some(s.category.to_string()),
            });
        }
        let mut annotations = Vec::new();
        if !s.module.is_empty() {
            let (module, new) = self.modules.iid(s.module);
            if new {
                interned
                    .debug_annotation_string_values
                    .push(InternedString {
                        iid: Some(module),
                        str: Some(s.module.as_bytes().to_vec()),
                    });
            }
            annotations.push(DebugAnnotation {
                name_iid: Some(MODULE),
                string_value_iid: Some(module),
                ..DebugAnnotation::default()
            });
        }
        for (flag, name) in [(s.estimated, ESTIMATED), (s.inferred_start, INFERRED_START)] {
            if flag {
                annotations.push(DebugAnnotation {
                    name_iid: Some(name),
                    bool_value: Some(true),
                    ..DebugAnnotation::default()
                });
            }
        }
        let location = match s.source {
            Some(src) => {
                let key = format!("{src}\0{}", s.name);
                let (iid, new) = self.sources.iid(&key);
                if new {
                    let (file, line) = match src.rsplit_once(':') {
                        Some((f, l)) => (f, l.parse().ok()),
                        None => (src, None),
                    };
                    interned.source_locations.push(SourceLocation {
                        iid: Some(iid),
                        file_name: Some(file.to_string()),
                        function_name: Some(s.name.to_string()),
                        line_number: line,
                    });
                }
                Some(iid)
            }
            None => None,
        };
        if !std::mem::replace(&mut self.annotation_names_sent, true) {
            for (iid, n) in [
                (MODULE, "module"),
                (ESTIMATED, "estimated"),
                (INFERRED_START, "inferred_start"),
            ] {
                interned.debug_annotation_names.push(Named {
                    iid: Some(iid),
                    name: Some(n.to_string()),
                });
            }
        }
        let track = if s.line {
            self.lines.as_ref().expect("made above").uuid
        } else {
            self.calls.uuid
        };
        let has_interned = interned != InternedData::default();
        self.packet(TracePacket {
            timestamp: Some(s.start),
            interned_data: has_interned.then_some(interned),
            track_event: Some(TrackEvent {
                category_iids: vec![category],
                debug_annotations: annotations,
                r#type: Some(SLICE_BEGIN),
                name_iid: Some(name),
                track_uuid: Some(track),
                source_location_iid: location,
            }),
            ..TracePacket::default()
        })?;
        let t = if s.line {
            self.lines.as_mut().expect("made above")
        } else {
            &mut self.calls
        };
        t.open.push((s.depth, s.end));
        Ok(())
    }

    fn finish(&mut self, _unit: TimeUnit) -> Result<()> {
        self.close_thread()
    }
}
