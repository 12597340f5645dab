//! The reports as small tables for people to read: what `comcount inspect` prints.

use std::collections::BTreeMap;
use std::fmt::{self, Display, Formatter};
use std::time::Duration;

use comcount_core::{KeySpace, ParticipantId};

use crate::report::{
    CounterReport, FamilyKeyReport, FamilyReport, IntervalTotal, ParticipantFence, ServerTime,
};

impl Display for CounterReport {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let space = KeySpace::counter(&self.prefix, &self.name);
        writeln!(
            f,
            "counter {}: keys {}:N, interval {} ms",
            self.name,
            space.base(),
            self.interval_ms
        )?;
        write_now(f, self.now)?;
        write_totals(f, &self.intervals)?;
        write_fences(f, &self.fences)
    }
}

impl Display for FamilyKeyReport {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let space = KeySpace::partition(&self.prefix, &self.name, self.partition);
        writeln!(
            f,
            "family {}, key {:?}: partition {} of {}, keys {}:N, interval {} ms",
            self.name,
            self.key,
            self.partition,
            self.partitions,
            space.base(),
            self.interval_ms
        )?;
        write_now(f, self.now)?;
        write_totals(f, &self.intervals)?;
        write_fences(f, &self.fences)
    }
}

impl Display for FamilyReport {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let first = KeySpace::partition(&self.prefix, &self.name, 0);
        let last = KeySpace::partition(&self.prefix, &self.name, self.partitions - 1);
        let keys = if self.partitions == 1 {
            format!("keys {}:N", first.base())
        } else {
            format!("keys {}:N to {}:N", first.base(), last.base())
        };
        writeln!(
            f,
            "family {}: {} partition{}, {keys}, interval {} ms",
            self.name,
            self.partitions,
            plural(self.partitions as usize),
            self.interval_ms
        )?;
        write_now(f, self.now)?;

        let mut table = Table::new(["interval", "state", "keys", "total"]);
        for interval in &self.intervals {
            table.row([
                interval.interval.to_string(),
                state(interval.open).to_owned(),
                interval.keys.to_string(),
                interval.total.to_string(),
            ]);
        }
        writeln!(f)?;
        write!(f, "{table}")?;

        writeln!(f)?;
        if self.keys == 0 {
            writeln!(f, "no key has a total in these intervals")?;
        } else {
            writeln!(
                f,
                "top {} of {} key{}, by their total over these intervals",
                self.top.len(),
                self.keys,
                plural(self.keys)
            )?;
            let mut header = vec!["key".to_owned(), "partition".to_owned()];
            header.extend(self.intervals.iter().map(|i| i.interval.to_string()));
            header.push("sum".to_owned());
            let mut table = Table::new(header);
            for key in &self.top {
                let mut row = vec![key.key.clone(), key.partition.to_string()];
                row.extend(key.intervals.iter().map(|i| or_dash(i.total)));
                row.push(key.sum.to_string());
                table.row(row);
            }
            write!(f, "{table}")?;
        }

        // One row per participant: in how many partitions it has a fence, and the newest.
        writeln!(f)?;
        let mut participants: BTreeMap<ParticipantId, Vec<&ParticipantFence>> = BTreeMap::new();
        for fence in &self.fences {
            participants
                .entry(fence.participant)
                .or_default()
                .push(fence);
        }
        if participants.is_empty() {
            return writeln!(f, "{NO_FENCES}");
        }
        writeln!(
            f,
            "{} participant{} flushed",
            participants.len(),
            plural(participants.len())
        )?;
        let mut table = Table::new(["participant", "partitions", "last interval", "ttl"]);
        for (participant, fences) in participants {
            let last = fences.iter().map(|f| f.interval).max().unwrap_or_default();
            let ttl = fences.iter().filter_map(|f| f.ttl).min();
            table.row([
                participant.to_string(),
                fences.len().to_string(),
                last.to_string(),
                ttl.map_or_else(|| "none".to_owned(), seconds),
            ]);
        }
        write!(f, "{table}")
    }
}

const NO_FENCES: &str = "no fences: no participant has flushed within a fence's life";

fn write_now(f: &mut Formatter<'_>, now: ServerTime) -> fmt::Result {
    writeln!(
        f,
        "server time {}, in interval {}",
        utc(now.ms),
        now.interval
    )
}

fn write_totals(f: &mut Formatter<'_>, intervals: &[IntervalTotal]) -> fmt::Result {
    let mut table = Table::new(["interval", "state", "total"]);
    for interval in intervals {
        table.row([
            interval.interval.to_string(),
            state(interval.open).to_owned(),
            or_dash(interval.total),
        ]);
    }
    writeln!(f)?;
    write!(f, "{table}")
}

fn write_fences(f: &mut Formatter<'_>, fences: &[ParticipantFence]) -> fmt::Result {
    writeln!(f)?;
    if fences.is_empty() {
        return writeln!(f, "{NO_FENCES}");
    }
    writeln!(
        f,
        "{} participant{} flushed",
        fences.len(),
        plural(fences.len())
    )?;
    let mut table = Table::new(["participant", "seq", "interval", "ttl"]);
    for fence in fences {
        table.row([
            fence.participant.to_string(),
            fence.seq.to_string(),
            fence.interval.to_string(),
            fence.ttl.map_or_else(|| "none".to_owned(), seconds),
        ]);
    }
    write!(f, "{table}")
}

fn state(open: bool) -> &'static str {
    if open { "open" } else { "closed" }
}

fn or_dash(total: Option<u64>) -> String {
    total.map_or_else(|| "-".to_owned(), |t| t.to_string())
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn seconds(ttl: Duration) -> String {
    format!("{:.1} s", ttl.as_secs_f64())
}

/// `ms` since the Unix epoch as a UTC date and time, to the millisecond.
fn utc(ms: u64) -> String {
    let (days, of_day) = (ms / 86_400_000, ms % 86_400_000);
    let (hours, minutes) = (of_day / 3_600_000, of_day / 60_000 % 60);
    let (seconds, millis) = (of_day / 1_000 % 60, of_day % 1_000);
    // The proleptic Gregorian calendar from a day count, by eras of 400 years
    // (H. Hinnant, "chrono-Compatible Low-Level Date Algorithms", civil_from_days).
    let z = days + 719_468;
    let (era, day_of_era) = (z / 146_097, z % 146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {hours:02}:{minutes:02}:{seconds:02}.{millis:03} UTC")
}

/// Columns aligned on their widest cell: numbers to the right, the first column and text to
/// the left.
struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Self {
            rows: vec![header.into_iter().map(Into::into).collect()],
        }
    }

    fn row(&mut self, cells: impl IntoIterator<Item = String>) {
        self.rows.push(cells.into_iter().collect());
    }
}

impl Display for Table {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                let cells = self.rows.iter().filter_map(|row| row.get(c));
                cells.map(|cell| cell.chars().count()).max().unwrap_or(0)
            })
            .collect();
        let numbers: Vec<bool> = (0..columns)
            .map(|c| {
                let cells = self.rows[1..].iter().filter_map(|row| row.get(c));
                c > 0
                    && cells.clone().count() > 0
                    && cells.into_iter().all(|cell| {
                        cell == "-"
                            || cell == "none"
                            || cell.starts_with(|d: char| d.is_ascii_digit())
                    })
            })
            .collect();
        for row in &self.rows {
            let mut line = String::new();
            for (c, (cell, width)) in row.iter().zip(&widths).enumerate() {
                let gap = if c == 0 { "" } else { "  " };
                if numbers[c] {
                    line.push_str(&format!("{gap}{cell:>width$}"));
                } else {
                    line.push_str(&format!("{gap}{cell:<width$}"));
                }
            }
            writeln!(f, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00.000 UTC");
        assert_eq!(utc(1_700_000_000_123), "2023-11-14 22:13:20.123 UTC");
        assert_eq!(utc(4_107_542_399_999), "2100-02-28 23:59:59.999 UTC");
    }

    #[test]
    fn tables_align_their_columns() {
        let mut table = Table::new(["key", "total"]);
        table.row(["a".to_owned(), "1000".to_owned()]);
        table.row(["longer".to_owned(), "7".to_owned()]);
        assert_eq!(
            table.to_string(),
            "key     total\na        1000\nlonger      7\n"
        );
    }

    #[test]
    fn a_counter_report_shows_totals_and_fences() {
        let report = CounterReport {
            name: "requests".to_owned(),
            prefix: "app:".to_owned(),
            interval_ms: 1_000,
            now: ServerTime {
                ms: 1_700_000_000_123,
                interval: 1_700_000_000,
            },
            intervals: vec![
                IntervalTotal {
                    interval: 1_700_000_000,
                    open: true,
                    total: Some(80),
                },
                IntervalTotal {
                    interval: 1_699_999_999,
                    open: false,
                    total: None,
                },
            ],
            fences: vec![ParticipantFence {
                participant: ParticipantId::from_u64(0xa1),
                partition: None,
                seq: 12,
                interval: 1_700_000_000,
                ttl: Some(Duration::from_millis(599_800)),
            }],
        };
        assert_eq!(
            report.to_string(),
            "counter requests: keys app:{requests}:N, interval 1000 ms\n\
             server time 2023-11-14 22:13:20.123 UTC, in interval 1700000000\n\
             \n\
             interval    state   total\n\
             1700000000  open       80\n\
             1699999999  closed      -\n\
             \n\
             1 participant flushed\n\
             participant       seq    interval      ttl\n\
             00000000000000a1   12  1700000000  599.8 s\n"
        );
    }
}
