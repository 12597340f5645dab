//! What a counter's background task is built from, as the builder hands it over.

use std::sync::Arc;

use crate::diagnostics::Reporter;
use crate::engine::slow_alarm::SharedAlarm;
use crate::handle::settings::Settings;
use crate::handle::shared::Shared;
use crate::protocol::participant::ParticipantId;

/// Everything the flush loops of a counter or a family share, for as long as its worker runs.
pub(crate) struct Parts<S, T> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) store: S,
    pub(crate) timer: T,
    pub(crate) settings: Settings,
    pub(crate) report: Reporter,
    pub(crate) participant: ParticipantId,
    /// The sequence number the first flush follows.
    pub(crate) first_seq: u64,
    /// Tells when the store answers too slowly, for every partition.
    pub(crate) alarm: SharedAlarm,
}
