//! `replay --html FILE`: one self-contained HTML page (no network: inline
//! SVG drawn with `plotters`, inline CSS, a few lines of inline script that
//! check the charts rendered) with the latency CDFs, the handoff phase
//! durations, every worker's stacked active / pinned / reserved / cached KV
//! blocks over time, the queue lengths, and the per-worker table; an
//! elastic run's scaling timeline first (`html_scaling.rs`).

use handoff_serving::timeline::Point;
use handoff_serving::{Details, Report};
use plotters::prelude::*;
use std::fmt::Write as _;

// The page kit every page shares (the plan's page is in handoff-plan).
pub(crate) use handoff_plan::chart::{err, escape, figure, svg, CHECK, COLOURS, CSS};

/// The KV categories, bottom to top of the stack, with their colours.
const LAYERS: [(&str, RGBColor); 4] = [
    ("active", RGBColor(0, 114, 178)),
    ("pinned (source)", RGBColor(213, 94, 0)),
    ("reserved (destination)", RGBColor(0, 158, 115)),
    ("cached (free)", RGBColor(190, 190, 190)),
];

/// A CDF chart of `series` (value in ms, fraction at or below). The x axis
/// ends a little past the largest 99.5th percentile, so one outlier does not
/// flatten the curve; the caption says so when values lie beyond.
fn cdf_chart(title: &str, series: &[(&str, &[(f64, f64)])]) -> Result<String, String> {
    let p995 = series
        .iter()
        .filter_map(|(_, p)| p.iter().find(|(_, y)| *y >= 0.995).map(|(x, _)| *x))
        .fold(0.0f64, f64::max);
    let max = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(x, _)| *x))
        .fold(0.0f64, f64::max);
    let xmax = (p995 * 1.2).min(max).max(1e-3) * 1.05;
    let caption = if max > xmax {
        format!("{title}, axis to p99.5 (max {max:.1} ms)")
    } else {
        title.to_string()
    };
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(caption, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(38)
            .y_label_area_size(46)
            .build_cartesian_2d(0f64..xmax, 0f64..1.0f64)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("ms")
            .y_desc("fraction of requests at or below")
            .draw()
            .map_err(err)?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            // A step at each point: the CDF holds until the next value.
            let mut path = vec![(0.0, 0.0)];
            let mut prev = 0.0;
            for &(x, y) in pts.iter() {
                let x = x.min(xmax);
                path.push((x, prev));
                path.push((x, y));
                prev = y;
            }
            chart
                .draw_series(LineSeries::new(path, c.stroke_width(2)))
                .map_err(err)?
                .label(*name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        Ok(())
    })
}

fn secs(p: &Point) -> f64 {
    p.at_ns as f64 / 1e9
}

/// `points` as a step function of `value`, ending at `end_s`.
fn steps(points: &[Point], end_s: f64, value: impl Fn(&Point) -> f64) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2 + 2);
    for (i, p) in points.iter().enumerate() {
        let v = value(p);
        out.push((secs(p), v));
        let next = points.get(i + 1).map_or(end_s, secs);
        out.push((next, v));
    }
    out
}

/// One worker's stacked KV blocks over time.
fn stack_chart(
    title: &str,
    points: &[Point],
    total_blocks: u64,
    end_s: f64,
) -> Result<String, String> {
    let ymax = points
        .iter()
        .map(|p| p.active + p.pinned + p.reserved + p.cached)
        .max()
        .unwrap_or(0)
        .max(total_blocks.min(1))
        .max(1) as f64
        * 1.05;
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(38)
            .y_label_area_size(58)
            .build_cartesian_2d(0f64..end_s.max(1e-3), 0f64..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("model time, s")
            .y_desc("KV blocks")
            .draw()
            .map_err(err)?;
        // Top of the stack first; each lower layer is drawn over it.
        for k in (0..LAYERS.len()).rev() {
            let (name, c) = LAYERS[k];
            let top = |p: &Point| {
                let layers = [p.active, p.pinned, p.reserved, p.cached];
                layers[..=k].iter().sum::<u64>() as f64
            };
            chart
                .draw_series(AreaSeries::new(steps(points, end_s, top), 0.0, c.mix(0.85)))
                .map_err(err)?
                .label(name)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
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

/// Queue lengths (`value`) of every worker over time.
fn queue_chart(
    title: &str,
    y_desc: &str,
    workers: &[(String, &[Point])],
    end_s: f64,
    value: fn(&Point) -> u64,
) -> Result<String, String> {
    let ymax = workers
        .iter()
        .flat_map(|(_, p)| p.iter().map(value))
        .max()
        .unwrap_or(0)
        .max(1) as f64
        * 1.1;
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(38)
            .y_label_area_size(46)
            .build_cartesian_2d(0f64..end_s.max(1e-3), 0f64..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("model time, s")
            .y_desc(y_desc)
            .draw()
            .map_err(err)?;
        for (i, (name, pts)) in workers.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            chart
                .draw_series(LineSeries::new(
                    steps(pts, end_s, |p| value(p) as f64),
                    c.stroke_width(2),
                ))
                .map_err(err)?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
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

/// The SLO targets' attainment, goodput, GPUs and cost, when the report
/// has them (`--slo`, `--gpu-hour-usd`).
fn sizing_section(body: &mut String, report: &Report) {
    if let Some(s) = &report.slo {
        let _ = write!(
            body,
            "<h2>SLO ({})</h2><table><tr><th>target</th><th>bound (ms)</th>\
             <th>requests met</th><th>attainment</th><th>holds</th></tr>",
            escape(&s.spec)
        );
        for t in &s.targets {
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2}%</td><td>{}</td></tr>",
                escape(&t.target),
                t.bound_ms,
                t.met_requests,
                t.attainment * 100.0,
                if t.holds { "yes" } else { "no" }
            );
        }
        let _ = write!(
            body,
            "<tr><td>all</td><td></td><td>{}</td><td>{:.2}%</td><td>{}</td></tr></table>\
             <p>Goodput: {:.3} req/s, {:.1} output tok/s.</p>",
            s.met_all_requests,
            s.attainment_all * 100.0,
            if s.holds { "yes" } else { "no" },
            s.goodput_rps,
            s.goodput_output_tok_s
        );
    }
    if let Some(z) = &report.sizing {
        let _ = write!(
            body,
            "<p>{} GPUs ({} per rank): {:.1} output tok/s/GPU, {:.1} tok/s/user",
            z.gpus, z.gpus_per_rank, z.output_tok_s_per_gpu, z.output_tok_s_per_user
        );
        if let Some(g) = z.goodput_tok_s_per_gpu {
            let _ = write!(body, ", goodput {g:.1} tok/s/GPU");
        }
        if let (Some(p), Some(c)) = (z.gpu_hour_usd, z.usd_per_million_output_tokens) {
            let _ = write!(body, "; ${c:.3} per million output tokens at ${p}/GPU-hour");
        }
        body.push_str(".</p>");
    }
}

/// The page for `report` and its `details`.
pub fn render(report: &Report, details: &Details, title: &str) -> Result<String, String> {
    let mut body = String::new();
    summary(&mut body, report, title);
    crate::html_scaling::section(&mut body, report)?;
    latencies(&mut body, report, details)?;
    phases(&mut body, report, details)?;
    timelines(&mut body, report, details)?;
    workers(&mut body, report);
    Ok(page("handoff-mocker report", &body))
}

/// A self-contained page titled `title` around `body`: no network (a
/// content security policy allowing inline style and script only), the
/// shared style, and the script that checks the charts rendered.
pub(crate) fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\
         <title>{title}</title><style>{CSS}</style></head>\
         <body>{body}<script>{CHECK}</script></body></html>\n"
    )
}

/// The run's configuration and totals.
fn summary(body: &mut String, report: &Report, title: &str) {
    let c = &report.config;
    let _ = write!(
        *body,
        "<h1>handoff-mocker replay</h1><p class=\"note\">{}</p>\
         <p>{} backend, {} ordering, {} prefill + {} decode workers, {} router, \
         transfer {} ({} ms base), message latency {} µs, faults: {}</p>",
        escape(title),
        escape(c.backend),
        escape(c.policy),
        c.prefill_workers,
        c.decode_workers,
        escape(c.router),
        escape(c.transfer.model),
        c.transfer.base_ms,
        c.message_latency_us,
        if c.faults.is_empty() {
            "none".to_string()
        } else {
            escape(&c.faults)
        },
    );
    let _ = write!(
        *body,
        "<p>{} requests: {} completed, {} failed; {} input and {} output tokens over {:.3} s of \
         model time; {:.2} req/s, {:.1} output tok/s; prefix cache reused {:.1}%.</p>",
        report.num_requests,
        report.completed_requests,
        report.failed_requests,
        report.total_input_tokens,
        report.total_output_tokens,
        report.duration_s,
        report.request_throughput_rps,
        report.output_token_throughput_tps,
        report.prefix_cache_reused_ratio * 100.0,
    );
    sizing_section(body, report);
}

/// The latency table and each latency's CDF.
fn latencies(body: &mut String, report: &Report, details: &Details) -> Result<(), String> {
    // Latency table.
    body.push_str(
        "<h2>Latencies (ms)</h2><table><tr><th></th><th>mean</th><th>p50</th>\
         <th>p75</th><th>p90</th><th>p95</th><th>p99</th><th>max</th><th>std</th></tr>",
    );
    let f = &report.flat;
    for (name, d) in [
        ("time to first token", f.ttft),
        ("time to second token", f.ttst),
        ("time per output token", f.tpot),
        ("inter-token latency", f.itl),
        ("end to end", f.e2e_latency),
    ] {
        let _ = write!(
            *body,
            "<tr><td>{name}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td>\
             <td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td></tr>",
            d.mean, d.median, d.p75, d.p90, d.p95, d.p99, d.max, d.std
        );
    }
    body.push_str("</table>");
    body.push_str("<h2>Latency distributions</h2><div class=\"grid\">");
    for (name, pts) in &details.latency_cdfs {
        let chart = cdf_chart(&format!("{name} (CDF)"), &[(name, pts.as_slice())])?;
        figure(body, "latency-cdf", &chart);
    }
    Ok(())
}

/// The handoff phases' CDFs and table.
fn phases(body: &mut String, report: &Report, details: &Details) -> Result<(), String> {
    body.push_str("</div><h2>Handoff phase durations</h2><div class=\"grid\">");
    let phases: Vec<(&str, &[(f64, f64)])> = details
        .phase_cdfs
        .iter()
        .map(|(n, p)| (*n, p.as_slice()))
        .collect();
    figure(
        body,
        "phase-cdf",
        &cdf_chart("handoff phases (CDF)", &phases)?,
    );
    let l = &report.lifecycle;
    let _ = write!(
        *body,
        "<table><tr><th>phase (ms)</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th>\
         <th>max</th></tr>"
    );
    for (name, s) in [
        ("source pinned (stranded)", l.source_pinned_ms),
        ("reservation wait", l.reservation_wait_ms),
        ("transfer", l.transfer_ms),
        ("reserved -> activated", l.reservation_to_activation_ms),
    ] {
        let _ = write!(
            *body,
            "<tr><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td></tr>",
            escape(name),
            s.mean,
            s.p50,
            s.p90,
            s.p99,
            s.max
        );
    }
    body.push_str("</table></div>");
    Ok(())
}

/// KV blocks and queue lengths per worker over time.
fn timelines(body: &mut String, report: &Report, details: &Details) -> Result<(), String> {
    let end_s = details
        .timelines
        .iter()
        .filter_map(|(_, _, s)| s.points().last().map(secs))
        .fold(report.duration_s, f64::max);
    body.push_str(
        "<h2>KV blocks per worker</h2><p class=\"note\">Stacked: active, pinned by a \
         finished prefill waiting for its reader (stranding), reserved for incoming KV, and \
         free blocks still holding prefix cache.</p><div class=\"grid\">",
    );
    for (w, pool, s) in &details.timelines {
        let chart = stack_chart(
            &format!("worker {} ({pool})", w.0),
            s.points(),
            s.total_blocks(),
            end_s,
        )?;
        figure(body, "kv-stack", &chart);
    }
    body.push_str("</div><h2>Queue lengths</h2><div class=\"grid\">");
    let lanes: Vec<(String, &[Point])> = details
        .timelines
        .iter()
        .map(|(w, pool, s)| (format!("worker {} ({pool})", w.0), s.points()))
        .collect();
    figure(
        body,
        "queue",
        &queue_chart("waiting for admission", "requests", &lanes, end_s, |p| {
            p.waiting
        })?,
    );
    figure(
        body,
        "queue",
        &queue_chart("running batch", "requests", &lanes, end_s, |p| p.running)?,
    );
    Ok(())
}

/// The per-worker table.
fn workers(body: &mut String, report: &Report) {
    body.push_str(
        "</div><h2>Workers</h2><table><tr><th>worker</th><th>pool</th><th>steps</th>\
        <th>prefill tokens</th><th>peak pinned blocks</th><th>peak reserved blocks</th>\
        <th>pinned block·s</th><th>reserved block·s</th><th>drained</th>\
        <th>final used blocks</th></tr>",
    );
    for w in &report.workers {
        let _ = write!(
            *body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{:.3}</td><td>{:.3}</td><td>{}</td><td>{}</td></tr>",
            w.worker,
            w.pool,
            w.steps,
            w.prefill_tokens,
            w.peak_pinned_blocks,
            w.peak_reserved_blocks,
            w.pinned_block_seconds,
            w.reserved_block_seconds,
            w.drained,
            w.final_kv_used_blocks
        );
    }
    body.push_str("</table>");
}
