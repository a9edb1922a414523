//! The HTML report's scaling section (an elastic run only): the fleet's
//! worker count per pool over time with every scale event marked, SLO
//! attainment per window of arrivals (with `--slo`), and what scaling cost.

use handoff_plan::chart::{err, escape, figure, svg, COLOURS};
use handoff_serving::report::{FleetCountPoint, ScaleEventRow, ScalingReport, SloWindow};
use handoff_serving::Report;
use plotters::prelude::*;
use std::fmt::Write as _;

/// A scale event kind, its marker colour and its legend label.
const MARKS: [(&str, RGBColor, &str); 6] = [
    ("provision", RGBColor(86, 180, 233), "scale-up"),
    ("ready", RGBColor(0, 158, 115), "ready"),
    ("drain", RGBColor(230, 159, 0), "drain"),
    ("drained", RGBColor(120, 120, 120), "drained"),
    ("removed", RGBColor(213, 0, 0), "removed"),
    ("at_ceiling", RGBColor(0, 0, 0), "at ceiling"),
];

/// One count of a fleet point.
type Count = fn(&FleetCountPoint) -> u32;

/// `points` as steps of `value` up to `end_s`.
fn steps(
    points: &[FleetCountPoint],
    end_s: f64,
    value: impl Fn(&FleetCountPoint) -> u32,
) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2);
    for (i, p) in points.iter().enumerate() {
        let v = f64::from(value(p));
        let next = points.get(i + 1).map_or(end_s, |n| n.t_s);
        out.push((p.t_s, v));
        out.push((next, v));
    }
    out
}

/// Workers per pool over time, with a vertical mark at each scale event.
fn fleet_chart(
    points: &[FleetCountPoint],
    events: &[ScaleEventRow],
    end_s: f64,
) -> Result<String, String> {
    let ymax = points
        .iter()
        .map(|p| p.prefill.max(p.decode).max(p.provisioning).max(p.draining))
        .max()
        .unwrap_or(0)
        .max(1) as f64
        * 1.25;
    let lines: [(&str, Count); 4] = [
        ("prefill (ready)", |p| p.prefill),
        ("decode (ready)", |p| p.decode),
        ("provisioning", |p| p.provisioning),
        ("draining", |p| p.draining),
    ];
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption("workers per pool", ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(38)
            .y_label_area_size(46)
            .build_cartesian_2d(0f64..end_s.max(1e-3), 0f64..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("model time, s")
            .y_desc("workers")
            .draw()
            .map_err(err)?;
        for (i, (name, value)) in lines.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            chart
                .draw_series(LineSeries::new(
                    steps(points, end_s, value),
                    c.stroke_width(2),
                ))
                .map_err(err)?
                .label(*name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
        }
        for (kind, c, label) in MARKS {
            let at: Vec<f64> = events
                .iter()
                .filter(|e| e.event == kind)
                .map(|e| e.t_s)
                .collect();
            if at.is_empty() {
                continue;
            }
            chart
                .draw_series(at.into_iter().map(|t| {
                    PathElement::new(vec![(t, 0.0), (t, ymax)], c.mix(0.6).stroke_width(1))
                }))
                .map_err(err)?
                .label(label)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 3, y + 5)], c.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        Ok(())
    })
}

/// SLO attainment of each window's arrivals (a step per window).
fn attainment_chart(windows: &[SloWindow], window_s: f64) -> Result<String, String> {
    let end_s = windows.last().map_or(window_s, |w| w.start_s + window_s);
    let path: Vec<(f64, f64)> = windows
        .iter()
        .flat_map(|w| {
            [
                (w.start_s, w.attainment),
                (w.start_s + window_s, w.attainment),
            ]
        })
        .collect();
    let c = COLOURS[0];
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("SLO attainment per {window_s} s of arrivals"),
                ("sans-serif", 16),
            )
            .margin(10)
            .x_label_area_size(38)
            .y_label_area_size(46)
            .build_cartesian_2d(0f64..end_s.max(1e-3), 0f64..1.05f64)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("arrival time, s")
            .y_desc("share meeting every target")
            .draw()
            .map_err(err)?;
        chart
            .draw_series(LineSeries::new(path, c.stroke_width(2)))
            .map_err(err)?;
        Ok(())
    })
}

/// The costs table: machine time, drains, stranded KV, unwound roles.
fn costs_table(body: &mut String, s: &ScalingReport) {
    let unwound = if s.unwound_by_removal.is_empty() {
        "none".to_string()
    } else {
        s.unwound_by_removal
            .iter()
            .map(|(r, n)| format!("{} {n}", escape(r)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = write!(
        *body,
        "<table><tr><th>GPU-hours</th><th>prefill worker-hours</th>\
         <th>decode worker-hours</th><th>provisioning (s)</th><th>draining (s)</th>\
         <th>removals</th><th>roles unwound by removal</th>\
         <th>KV stranded on draining workers (block·s: pinned + reserved)</th></tr>\
         <tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
         <td>{} + {} = {}</td></tr></table>",
        s.gpu_hours,
        s.prefill_worker_hours,
        s.decode_worker_hours,
        s.provisioning_s,
        s.draining_s,
        s.removals,
        unwound,
        s.stranded_kv.pinned_source_block_s,
        s.stranded_kv.reserved_destination_block_s,
        s.stranded_kv.total_block_s,
    );
}

/// The section, when `report` has a scaling section (nothing otherwise, so
/// a fixed fleet's page is as it was).
pub(crate) fn section(body: &mut String, report: &Report) -> Result<(), String> {
    let Some(s) = &report.scaling else {
        return Ok(());
    };
    let end_s = s
        .events
        .last()
        .map_or(0.0, |e| e.t_s)
        .max(report.duration_s);
    let planner = s
        .planner
        .as_deref()
        .map(|p| format!(", sized by {}", escape(p)))
        .unwrap_or_default();
    let _ = write!(
        *body,
        "<h2>Scaling</h2><p class=\"note\">The fleet's routable workers per pool, \
         with the workers provisioning and draining, and every scale event{planner}.</p>"
    );
    costs_table(body, s);
    body.push_str("<div class=\"grid\">");
    figure(
        body,
        "fleet",
        &fleet_chart(&s.workers_over_time, &s.events, end_s)?,
    );
    if let (Some(w), Some(len)) = (&s.slo_windows, s.slo_window_s) {
        figure(body, "slo-windows", &attainment_chart(w, len)?);
    }
    body.push_str("</div>");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_hold_each_count_until_the_next_change() {
        let p = |t_s, prefill| FleetCountPoint {
            t_s,
            prefill,
            decode: 1,
            provisioning: 0,
            draining: 0,
        };
        let s = steps(&[p(0.0, 1), p(10.0, 2)], 30.0, |p| p.prefill);
        assert_eq!(s, [(0.0, 1.0), (10.0, 1.0), (10.0, 2.0), (30.0, 2.0)]);
    }
}
