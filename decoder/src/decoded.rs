//! What a decode returns: the [`Model`], which is data, and beside it the
//! fine pass's engine ([`LineSource`]) that re-decodes its segments. The
//! two are kept apart so that the model can go where no decoder may (the
//! viewer, the model cache) while the engine stays with whoever runs it.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use crate::passes::fine::worker::SegmentWorker;
use crate::passes::fine::LineSource;
use ptscope_model::Model;

/// A decoded input: its model, and what re-decodes it down to lines.
#[derive(Clone, Default)]
pub struct Decoded {
    pub model: Model,
    /// What the fine pass re-decodes from; `None` for inputs without an
    /// instruction trace (perf-script text) and for partial models.
    pub lines: Option<Arc<LineSource>>,
}

impl Decoded {
    /// A model with no fine pass behind it.
    pub fn without_lines(model: Model) -> Decoded {
        Decoded { model, lines: None }
    }

    /// The model to share, and a background fine pass over it caching up
    /// to `budget` bytes, which calls `notify` whenever a segment is ready;
    /// no fine pass for an input without an instruction trace.
    pub fn into_parts(
        self,
        budget: usize,
        notify: impl Fn() + Send + Sync + 'static,
    ) -> (Arc<Model>, Option<SegmentWorker>) {
        let model = Arc::new(self.model);
        let worker = self
            .lines
            .and_then(|lines| SegmentWorker::new(model.clone(), lines, budget, notify));
        (model, worker)
    }
}

impl Deref for Decoded {
    type Target = Model;

    fn deref(&self) -> &Model {
        &self.model
    }
}

impl DerefMut for Decoded {
    fn deref_mut(&mut self) -> &mut Model {
        &mut self.model
    }
}
