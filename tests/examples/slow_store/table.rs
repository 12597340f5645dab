//! Printing the table.

use std::time::Duration;

use crate::round_trip::Row;

pub(crate) fn percent(part: u64, whole: u64) -> f64 {
    100.0 * part as f64 / whole.max(1) as f64
}

pub(crate) fn print_header() {
    println!(
        "| round trip | rule | flushes asked | applied | copies sent | copies/applied | total known | landed in Redis / counted | `flush completed` amounts / counted | dropped | unsettled | left in buffers | `total went stale` | intervals with a flush | counted replies with no total | `round trip slow` |"
    );
    println!(
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
    );
}

pub(crate) fn print_row(ratio: f64, interval: Duration, row: &Row, participants: usize) {
    let slow = match row.first_slow_ms {
        Some(ms) => format!(
            "{} of {participants}, first after {ms} ms; {} back to normal",
            row.slow_raised, row.back_to_normal
        ),
        None => "no".to_owned(),
    };
    println!(
        "| {ratio} × = {} ms | {} | {} | {} ({:.1}%) | {} | {:.2} | {:.1}% | {} / {} ({:.2}%) | {:.2}% | {} | {} | {} | {} | {:.0}% | {:.0}% | {slow} |",
        interval.mul_f64(ratio).as_millis(),
        row.rules.label(),
        row.asked,
        row.applied,
        percent(row.applied, row.asked),
        row.copies,
        row.copies as f64 / row.applied.max(1) as f64,
        100.0 * row.known,
        row.landed,
        row.counted,
        percent(row.landed, row.counted),
        percent(row.applied_amount, row.counted),
        row.dropped,
        row.unsettled,
        row.buffered,
        row.stale,
        100.0 * row.reached,
        100.0 * row.without_total,
    );
}
