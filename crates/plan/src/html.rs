//! `plan.html`: one self-contained page (inline SVG drawn with `plotters`,
//! [`crate::chart`]): every layout as a point of
//! tokens/s/GPU against tokens/s/user, filled when it holds the SLO, the
//! Pareto frontier as a line, and the ranked table with each layout's
//! handoff costs.

use crate::chart::{err, escape, figure, svg, CHECK, COLOURS, CSS};
use crate::error::PlanError;
use crate::rank::{Point, Ranked, FIGURES};
use plotters::prelude::*;
use serde_json::Value;
use std::fmt::Write as _;

/// The scatter of every point and the frontier through them.
fn chart(r: &Ranked) -> Result<String, String> {
    let xmax = r.order.iter().map(|p| p.per_user).fold(1.0f64, f64::max) * 1.1;
    let ymax = r.order.iter().map(|p| p.per_gpu).fold(1.0f64, f64::max) * 1.1;
    let line: Vec<(f64, f64)> = r
        .frontier
        .iter()
        .map(|&i| (r.order[i].per_user, r.order[i].per_gpu))
        .collect();
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption("tokens/s/GPU vs tokens/s/user", ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(38)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..xmax, 0f64..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("output tokens/s/user (1000 / mean TPOT)")
            .y_desc("output tokens/s/GPU")
            .draw()
            .map_err(err)?;
        let (held, missed) = (COLOURS[0], COLOURS[1]);
        chart
            .draw_series(LineSeries::new(line, COLOURS[6].stroke_width(1)))
            .map_err(err)?
            .label("Pareto frontier")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], COLOURS[6]));
        let dots = |want: bool| {
            r.order
                .iter()
                .filter(move |p| p.holds == want)
                .map(|p| (p.per_user, p.per_gpu))
                .collect::<Vec<_>>()
        };
        chart
            .draw_series(
                dots(true)
                    .into_iter()
                    .map(move |c| Circle::new(c, 4, held.filled())),
            )
            .map_err(err)?
            .label("holds the SLO")
            .legend(move |(x, y)| Circle::new((x + 8, y), 4, held.filled()));
        chart
            .draw_series(
                dots(false)
                    .into_iter()
                    .map(move |c| Circle::new(c, 4, missed.stroke_width(1))),
            )
            .map_err(err)?
            .label("misses it")
            .legend(move |(x, y)| Circle::new((x + 8, y), 4, missed.stroke_width(1)));
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

fn row(body: &mut String, rank: usize, p: &Point, frontier: bool) {
    let _ = write!(
        body,
        "<tr><td>{rank}</td><td>{}</td><td>{}</td><td>{}</td>",
        escape(&p.layout()),
        if frontier { "yes" } else { "" },
        p.gpus,
    );
    for (i, f) in p.figures("").iter().enumerate() {
        // SLO attainment (the fourth figure) in percent.
        let unit = if i == 3 { "%" } else { "" };
        let _ = write!(body, "<td>{f}{unit}</td>");
    }
    body.push_str("</tr>");
}

/// The layout column on one line.
const WIDE: &str = "td:nth-child(2){text-align:left;white-space:nowrap}";

/// The page of ranked layouts `r` of `summary`'s plan.
pub fn page(r: &Ranked, summary: &Value) -> Result<String, PlanError> {
    let mut body = String::new();
    let base: Vec<String> = summary["grid"]["base"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let _ = write!(
        body,
        "<h1>handoff-mocker plan</h1><p class=\"note\">{} layouts of {}..={} GPUs; \
         shared flags: {}</p>",
        r.order.len(),
        summary["grid"]["gpus"]["min"],
        summary["grid"]["gpus"]["max"],
        escape(&base.join(" "))
    );
    figure(&mut body, "pareto", &chart(r).map_err(PlanError::Chart)?);
    body.push_str(
        "<h2>Layouts, best goodput per GPU first</h2><p class=\"note\">stranded: source \
         KV block·seconds pinned for readers, summed over workers; resv: mean wait of a \
         destination for its reservation; xfer: mean KV transfer time.</p><table><tr>\
         <th>rank</th><th>layout</th><th>frontier</th><th>GPUs</th>",
    );
    for (_, _, heading) in FIGURES {
        let _ = write!(body, "<th>{heading}</th>");
    }
    body.push_str("</tr>");
    for (i, p) in r.order.iter().enumerate() {
        row(&mut body, i + 1, p, r.frontier.contains(&i));
    }
    body.push_str("</table>");
    Ok(format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\
         <title>handoff-mocker plan</title><style>{CSS}{WIDE}</style></head>\
         <body>{body}<script>{CHECK}</script></body></html>\n"
    ))
}
