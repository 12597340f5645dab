//! The run as an SVG chart: what the store held, what flushes added, what participants were told.

use std::fmt::Write as _;
use std::time::Duration;

use crate::options::Fault;
use crate::record::{Report, Row};

/// A step for axis ticks: 1, 2 or 5 times a power of ten, giving about `ticks` ticks over
/// `range`.
fn tick_step(range: f64, ticks: f64) -> f64 {
    let rough = (range / ticks).max(f64::MIN_POSITIVE);
    let power = 10f64.powf(rough.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|step| *step >= rough)
        .unwrap_or(10.0 * power)
}

/// An SVG chart of the rows over time: what the store held, what the flushes added, and what
/// participants were told, with the fault's time shaded.
pub(crate) fn chart(report: &Report, interval: Duration) -> String {
    let (width, height) = (860.0, 440.0);
    let (left, right, top, bottom) = (80.0, 30.0, 65.0, 60.0);
    let rows = &report.rows;
    let half = interval.as_secs_f64() / 2.0;
    let t_max = rows
        .last()
        .map_or(1.0, |r| r.at_s + 2.0 * half)
        .max(report.fault.map_or(0.0, |(_, _, to)| to))
        .max(1.0);
    let c_max = rows
        .iter()
        .map(|r| r.counted.max(r.held.unwrap_or(0)).max(r.told.unwrap_or(0)))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let c_step = tick_step(c_max, 5.0);
    let c_top = (c_max / c_step).ceil() * c_step;
    let t_step = tick_step(t_max, 10.0);
    let x = |t: f64| left + (width - left - right) * t / t_max;
    let y = |v: f64| height - bottom - (height - top - bottom) * v / c_top;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{left}" y="25" font-size="15">Count per {interval:?} interval: what the store held, and what participants were told</text>"#
    );
    if let Some((fault, from, to)) = report.fault {
        let label = match fault {
            Fault::Cut => "connections cut",
            Fault::Restart => "Redis restarting",
        };
        let (x0, x1) = (x(from.max(0.0)), x(to.min(t_max)));
        let _ = writeln!(
            svg,
            r##"<rect x="{x0:.1}" y="{top}" width="{:.1}" height="{:.1}" fill="#e8e8e8"/><text x="{:.1}" y="{:.1}" fill="#555">{label}</text>"##,
            (x1 - x0).max(1.0),
            height - top - bottom,
            x0 + 4.0,
            top + 14.0
        );
    }
    // Axes, ticks and their labels.
    let (x_axis, y_axis) = (height - bottom, left);
    let _ = writeln!(
        svg,
        r#"<line x1="{y_axis}" y1="{x_axis}" x2="{:.1}" y2="{x_axis}" stroke="black"/><line x1="{y_axis}" y1="{top}" x2="{y_axis}" y2="{x_axis}" stroke="black"/>"#,
        width - right
    );
    let mut t = 0.0;
    while t <= t_max + 1e-9 {
        let _ = writeln!(
            svg,
            r#"<line x1="{0:.1}" y1="{x_axis}" x2="{0:.1}" y2="{1}" stroke="black"/><text x="{0:.1}" y="{2}" text-anchor="middle">{t}</text>"#,
            x(t),
            x_axis + 5.0,
            x_axis + 18.0
        );
        t += t_step;
    }
    let mut c = 0.0;
    while c <= c_top + 1e-9 {
        let _ = writeln!(
            svg,
            r##"<line x1="{0}" y1="{1:.1}" x2="{2:.1}" y2="{1:.1}" stroke="#eee"/><line x1="{3}" y1="{1:.1}" x2="{0}" y2="{1:.1}" stroke="black"/><text x="{4}" y="{5:.1}" text-anchor="end">{c}</text>"##,
            y_axis,
            y(c),
            width - right,
            y_axis - 5.0,
            y_axis - 8.0,
            y(c) + 4.0
        );
        c += c_step;
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">time (s)</text>"#,
        left + (width - left - right) / 2.0,
        height - 18.0
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(22 {:.1}) rotate(-90)" text-anchor="middle">count per interval</text>"#,
        top + (height - top - bottom) / 2.0
    );
    // Each interval is drawn at its middle.
    let point = |r: &Row, v: u64| format!("{:.1},{:.1}", x(r.at_s + half), y(v as f64));
    // An interval with no key held nothing.
    let held: Vec<String> = rows.iter().map(|r| point(r, r.held.unwrap_or(0))).collect();
    let counted: Vec<String> = rows.iter().map(|r| point(r, r.counted)).collect();
    let _ = writeln!(
        svg,
        r#"<polyline fill="none" stroke="black" stroke-width="2" points="{}"/>"#,
        held.join(" ")
    );
    let _ = writeln!(
        svg,
        r##"<polyline fill="none" stroke="#ff7f0e" stroke-width="2" stroke-dasharray="6 3" points="{}"/>"##,
        counted.join(" ")
    );
    for r in rows {
        if let Some(told) = r.told {
            let _ = writeln!(
                svg,
                r##"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="#1f77b4"/>"##,
                x(r.at_s + half),
                y(told as f64)
            );
        }
    }
    for (i, (label, swatch)) in [
        (
            "held by the store",
            r#"<rect x="0" y="-2" width="14" height="3" fill="black"/>"#,
        ),
        (
            "added by the flushes",
            r##"<rect x="0" y="-2" width="6" height="3" fill="#ff7f0e"/><rect x="8" y="-2" width="6" height="3" fill="#ff7f0e"/>"##,
        ),
        (
            "told to participants (largest)",
            r##"<circle cx="7" cy="0" r="3.5" fill="#1f77b4"/>"##,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let _ = writeln!(
            svg,
            r#"<g transform="translate({:.1} 45)">{swatch}<text x="20" y="4">{label}</text></g>"#,
            left + 200.0 * i as f64
        );
    }
    svg.push_str("</svg>\n");
    svg
}
