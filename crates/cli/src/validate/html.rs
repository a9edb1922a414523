//! `validate --html FILE`: the error table and, for each latency, every
//! request's simulated value against its real one (log–log, with the line
//! where they are equal), as one self-contained page.

use super::accuracy::{Error, Latency, Pair};
use crate::html::{err, escape, figure, page, svg, COLOURS};
use plotters::prelude::*;
use std::fmt::Write as _;

/// The page: `title` (what was compared with what), the errors, and one
/// scatter per latency of `pairs` (in [`Latency::ALL`] order).
pub fn render(
    title: &str,
    errors: &[Error],
    pairs: &[(Latency, Vec<Pair>)],
) -> Result<String, String> {
    let mut body = String::new();
    let _ = write!(
        body,
        "<h1>handoff-mocker validate</h1><p class=\"note\">{}</p>",
        escape(title)
    );
    body.push_str(
        "<table><tr><th></th><th>requests</th><th>MAPE %</th><th>median APE %</th>\
         <th>mean real / sim (ms)</th><th>median real / sim</th><th>p90 real / sim</th></tr>",
    );
    for e in errors {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td>\
             <td>{:.1} / {:.1} ({:+.1}%)</td><td>{:.1} / {:.1} ({:+.1}%)</td>\
             <td>{:.1} / {:.1} ({:+.1}%)</td></tr>",
            e.latency.label(),
            e.n,
            e.mape,
            e.median_ape,
            e.mean.real,
            e.mean.sim,
            e.mean.error,
            e.median.real,
            e.median.sim,
            e.median.error,
            e.p90.real,
            e.p90.sim,
            e.p90.error,
        );
    }
    body.push_str("</table><h2>Simulated against real, per request (ms)</h2>");
    for (latency, p) in pairs {
        figure(&mut body, "scatter", &scatter(latency.label(), p)?);
    }
    Ok(page("handoff-mocker validate", &body))
}

/// One scatter on log axes spanning both sets of values.
fn scatter(label: &str, pairs: &[Pair]) -> Result<String, String> {
    let kept: Vec<(f64, f64)> = pairs
        .iter()
        .filter(|p| p.real > 0.0 && p.sim > 0.0 && p.real.is_finite() && p.sim.is_finite())
        .map(|p| (p.real, p.sim))
        .collect();
    let (lo, hi) = kept.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &(r, s)| {
        (lo.min(r).min(s), hi.max(r).max(s))
    });
    let (lo, hi) = if kept.is_empty() {
        (1.0, 10.0)
    } else {
        (lo / 1.2, hi * 1.2)
    };
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("{label}: simulated against real"),
                ("sans-serif", 16),
            )
            .margin(10)
            .x_label_area_size(38)
            .y_label_area_size(56)
            .build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("real, ms")
            .y_desc("simulated, ms")
            .draw()
            .map_err(err)?;
        chart
            .draw_series(LineSeries::new(vec![(lo, lo), (hi, hi)], BLACK.mix(0.4)))
            .map_err(err)?;
        let c = COLOURS[0];
        chart
            .draw_series(
                kept.iter()
                    .map(|&(r, s)| Circle::new((r, s), 2, c.mix(0.6).filled())),
            )
            .map_err(err)?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_has_a_table_row_and_a_chart_per_latency() {
        let p = vec![
            Pair {
                real: 10.0,
                sim: 11.0,
            },
            Pair {
                real: 20.0,
                sim: 19.0,
            },
        ];
        let e = Error::of(Latency::Ttft, &p).unwrap();
        let page = render("a <run>", &[e], &[(Latency::Ttft, p)]).unwrap();
        assert!(page.contains("a &lt;run&gt;"));
        assert_eq!(page.matches("data-chart=\"scatter\"").count(), 1);
        assert!(page.contains("<td>TTFT</td><td>2</td>"));
    }

    #[test]
    fn no_positive_pair_still_draws() {
        let page = render(
            "t",
            &[],
            &[(
                Latency::Tpot,
                vec![Pair {
                    real: 0.0,
                    sim: 0.0,
                }],
            )],
        );
        assert!(page.is_ok());
    }
}
