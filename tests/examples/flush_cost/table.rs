//! Printing the fleets' and the events' tables.

use crate::baseline::{Baseline, Benchmarked};
use crate::events::{Design, EVENT_PARTICIPANTS, EVENTS_INTERVAL, EventRow, TASKS_PER_PARTICIPANT};
use crate::fleets::FleetRow;

pub(crate) fn print_fleets(fleets: &[FleetRow], baseline: &Baseline) {
    println!("## Flush cost");
    println!();
    println!(
        "Every participant has its own `Counter` per counter name and one multiplexed \
         connection for all of them; each counter is incremented every 5 ms. A flush is one \
         `EVALSHA` of the flush script. 'Counted/s' is the flushes the counters report counted \
         (`flush completed`); 'EVALSHA/s' is every call, wrong-interval replies and resends \
         included. Redis usec/call is `cmdstat_evalsha` usec / calls. CPU is user + system \
         time, of redis-server (`INFO cpu`) and of this process (`/proc/self/stat`)."
    );
    println!();
    println!(
        "| interval | counters × participants | offered flushes/s | counted/s | EVALSHA/s | \
         failed | Redis usec/call | Redis CPU µs/call | Redis CPU µs/counted | \
         client CPU µs/counted | keys | used_memory growth |"
    );
    println!(
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for f in fleets {
        println!(
            "| {} ms | {} × {} | {:.0} | {:.0} | {:.0} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.1} MB |",
            f.interval.as_millis(),
            f.counters,
            f.participants,
            f.offered(),
            f.flushes_per_s(),
            f.calls_per_s(),
            f.failed,
            f.usec_per_call(),
            f.cpu_per_call(),
            f.cpu_per_flush(),
            f.client_cpu * 1e6 / f.flushes.max(1) as f64,
            f.keys,
            f.memory_growth as f64 / 1e6,
        );
    }
    println!();
    println!(
        "What became of the flushes sent in the window, per 100 sent ('cut off' is a flush the \
         counter stopped waiting for, after its timeout; 'in flight' one still unanswered at \
         the window's end; the ends in the window include those of flushes sent just before \
         it, so a row may add up to a little over 100):"
    );
    println!();
    println!(
        "| interval | counters × participants | sent | applied | duplicate | stale | fenced | \
         wrong interval | error | cut off | in flight |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for f in fleets {
        let o = f.outcomes;
        let per_100 = |n: u64| format!("{:.1}", n as f64 * 100.0 / o.sent.max(1) as f64);
        println!(
            "| {} ms | {} × {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            f.interval.as_millis(),
            f.counters,
            f.participants,
            o.sent,
            per_100(o.applied),
            per_100(o.duplicate),
            per_100(o.stale),
            per_100(o.fenced),
            per_100(o.wrong_interval),
            per_100(o.failed),
            per_100(o.cut),
            per_100(o.in_flight()),
        );
    }
    println!();
    let Some(best) = fleets
        .iter()
        .max_by(|a, b| a.flushes_per_s().total_cmp(&b.flushes_per_s()))
    else {
        return;
    };
    println!(
        "Ratios to the baseline, at the most flushes counted per second ({} ms, {} × {}):",
        best.interval.as_millis(),
        best.counters,
        best.participants
    );
    println!();
    println!(
        "| ratio | to plain `INCRBY` | to `EVALSHA` bare `INCRBY` | to `EVALSHA` flush script |"
    );
    println!("| --- | ---: | ---: | ---: |");
    let row = |what: &str, ours: f64, of: fn(&Benchmarked) -> f64| {
        println!(
            "| {what} | {:.2} | {:.2} | {:.2} |",
            ours / of(&baseline.incrby),
            ours / of(&baseline.bare_script),
            ours / of(&baseline.flush_script),
        );
    };
    row("Redis usec/call", best.usec_per_call(), |b| b.usec_per_call);
    row("Redis CPU per call", best.cpu_per_call(), |b| {
        b.cpu_per_call
    });
    row("Redis CPU per counted flush", best.cpu_per_flush(), |b| {
        b.cpu_per_call
    });
    row(
        "throughput: counted/s ÷ requests/s",
        best.flushes_per_s(),
        |b| b.requests_per_s,
    );
    row(
        "throughput: EVALSHA/s ÷ requests/s",
        best.calls_per_s(),
        |b| b.requests_per_s,
    );
    println!();
}

pub(crate) fn print_events(rows: &[EventRow]) {
    println!("## Events: counters against one INCRBY per event");
    println!();
    println!(
        "{EVENT_PARTICIPANTS} participants, each with one multiplexed connection and \
         {TASKS_PER_PARTICIPANT} tasks that handle events one after the other on a fixed \
         schedule (the offered rate, shared out). Counters: each participant has one `Counter` \
         (interval {EVENTS_INTERVAL:?}) and calls `increment(1)` per event. Naive: each event \
         is an `INCRBY` that its task awaits before the next; the connection pipelines the \
         commands of a participant's tasks. Offered rates are a half and ten times the \
         `INCRBY` requests/s of the baseline."
    );
    println!();
    println!(
        "| design | offered events/s | events/s handled | Redis commands/event | \
         Redis CPU µs/event | client CPU µs/event |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for r in rows {
        let events = r.events.max(1) as f64;
        println!(
            "| {} | {:.0} | {:.0} | {} | {:.4} | {:.4} |",
            match r.design {
                Design::Counters => "counters",
                Design::Naive => "naive INCRBY",
            },
            r.offered,
            r.events as f64 / r.seconds,
            significant(r.commands as f64 / events),
            r.redis_cpu * 1e6 / events,
            r.client_cpu * 1e6 / events,
        );
    }
    println!();
    for pair in rows.chunks(2) {
        if let [ours, naive] = pair {
            let per = |r: &EventRow| r.redis_cpu / r.events.max(1) as f64;
            println!(
                "At {:.0} events/s offered: counters handled {:.2}× the events/s of the naive \
                 design, at {} of its Redis CPU per event.",
                ours.offered,
                (ours.events as f64 / ours.seconds) / (naive.events as f64 / naive.seconds),
                significant(per(ours) / per(naive)),
            );
        }
    }
    println!();
}

/// A small ratio with three significant digits, without exponent.
pub(crate) fn significant(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let digits = (2 - x.abs().log10().floor() as i32).max(0) as usize;
    format!("{x:.digits$}")
}
