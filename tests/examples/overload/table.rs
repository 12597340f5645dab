//! Printing the tables.

use std::time::Duration;

use crate::capacity::{CAPACITY_TASKS, CAPACITY_WINDOW, Capacity};
use crate::options::Settings;
use crate::sweep::{Row, TOUCH_EVERY};

pub(crate) fn print_capacity(runs: &[(&str, Capacity)]) {
    println!("## Capacity: closed loop on one shared multiplexed connection");
    println!();
    println!(
        "{CAPACITY_TASKS} tasks, each sending the flush script through `RedisStore` as soon as \
         its last reply came. {} s measured after 1 s.",
        CAPACITY_WINDOW.as_secs()
    );
    println!();
    println!(
        "| when | keys | applied/s | calls applied | Redis CPU µs/applied | client CPU µs/applied |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    for (when, c) in runs {
        println!(
            "| {when} | {} | {:.0} | {:.1}% | {:.1} | {:.1} |",
            c.load.label(),
            c.applied_per_s,
            100.0 * c.applied_share,
            c.cpu_per_applied_us,
            c.client_cpu_per_applied_us
        );
    }
    println!();
}

pub(crate) fn print_header(settings: &Settings) {
    println!(
        "## Sweep: {} ms interval, every counter incremented every {} ms, one shared \
         connection, response timeout {}",
        settings.interval.as_millis(),
        TOUCH_EVERY.as_millis(),
        settings.timeout_label()
    );
    println!();
    println!(
        "| counters | rule | asked/s | applied/s | applied/asked | applied/capacity | applied/one-key | copies/s | resent copies | wrong-interval replies | error replies | EVALSHA/s | Redis CPU µs/applied | client CPU µs/applied | polls/applied | total known | counters that never knew it | longest gap (p99 of counters) | dropped | unsettled | `round trip slow` raised |"
    );
    println!(
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
}

pub(crate) fn print_row(row: &Row, interval: Duration, capacity: f64, one_key: f64) {
    let [
        copies,
        resent,
        wrong,
        errors,
        applied,
        dropped,
        unsettled,
        slow,
        polls,
    ] = row.counts.0;
    let per_s = |n: u64| n as f64 / row.seconds;
    let asked = row.counters as f64 / interval.as_secs_f64();
    let in_intervals = |ms: u64| ms as f64 / interval.as_millis() as f64;
    println!(
        "| {} | {} | {:.0} | {:.0} | {:.1}% | {:.2} | {:.2} | {:.0} | {} ({:.1}%) | {} ({:.1}%) | {} | {:.0} | {:.1} | {:.1} | {:.2} | {:.1}% | {:.1}% | {:.1} ({:.1}) intervals | {} | {} | {} |",
        row.counters,
        row.rules.label(),
        asked,
        per_s(applied),
        100.0 * per_s(applied) / asked,
        per_s(applied) / capacity,
        per_s(applied) / one_key,
        per_s(copies),
        resent,
        100.0 * resent as f64 / copies.max(1) as f64,
        wrong,
        100.0 * wrong as f64 / copies.max(1) as f64,
        errors,
        per_s(row.evalsha),
        row.redis_cpu * 1e6 / applied.max(1) as f64,
        row.client_cpu * 1e6 / applied.max(1) as f64,
        polls as f64 / applied.max(1) as f64,
        100.0 * row.known.share,
        100.0 * row.known.never,
        in_intervals(row.longest_gap_ms),
        in_intervals(row.p99_gap_ms),
        dropped,
        unsettled,
        slow,
    );
}
