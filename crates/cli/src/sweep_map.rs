//! `sweep --experiment --html FILE`: the D→P design map as one
//! self-contained page (inline HTML and CSS, no script, no network), drawn
//! from the sweep's summary alone, so the page is byte-identical whenever
//! the summary is (whatever the thread count or sharding).
//!
//! Over two chosen axes (`--map X,Y`): H4-2's verdict as a heatmap, with
//! E4's bypass hit rate and push bandwidth beside it; one such panel per
//! combination of the other axes' values. Below: per configuration, what
//! the prefill worker's store held at each of E4's reseeds (hit, evicted,
//! never pushed, too short, stale), which says whether LRU eviction or the
//! push throttle keeps the bypass from hitting.

use crate::html::escape;
use serde_json::Value;
use std::fmt::Write as _;

/// An axis of the grid: its key and values, as the summary lists them.
struct Axis {
    key: String,
    values: Vec<String>,
}

fn axes(summary: &Value) -> Vec<Axis> {
    summary["grid"]["axes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| Axis {
            key: a["key"].as_str().unwrap_or_default().to_string(),
            values: a["values"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| v.as_str().unwrap_or_default().to_string())
                .collect(),
        })
        .collect()
}

/// Indices of the X and Y axes (`None` for Y when the grid has one axis).
fn choose(axes: &[Axis], map: Option<&str>) -> Result<(usize, Option<usize>), String> {
    let find = |k: &str| {
        let k = k.trim().trim_start_matches("--").replace('_', "-");
        axes.iter().position(|a| a.key == k).ok_or_else(|| {
            let keys: Vec<&str> = axes.iter().map(|a| a.key.as_str()).collect();
            format!("--map: {k} is not a swept key ({})", keys.join(", "))
        })
    };
    match map {
        None => match axes.len() {
            0 => Err("the sweep has no axes".into()),
            1 => Ok((0, None)),
            _ => Ok((0, Some(1))),
        },
        Some(m) => {
            let (x, y) = m
                .split_once(',')
                .ok_or_else(|| format!("--map {m}: expected X,Y"))?;
            let (x, y) = (find(x)?, find(y)?);
            if x == y {
                return Err(format!("--map {m}: X and Y must differ"));
            }
            Ok((x, Some(y)))
        }
    }
}

/// Checks `--map` against the swept `keys` before anything runs.
pub fn check_map(keys: &[String], map: Option<&str>) -> Result<(), String> {
    let axes: Vec<Axis> = keys
        .iter()
        .map(|k| Axis {
            key: k.clone(),
            values: Vec::new(),
        })
        .collect();
    choose(&axes, map).map(|_| ())
}

/// A cell's background: `t` in 0..=1 from white to `rgb`.
fn shade(t: f64, rgb: (u8, u8, u8)) -> String {
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let mix = |c: u8| (255.0 - (255.0 - f64::from(c)) * t).round() as u8;
    format!("#{:02x}{:02x}{:02x}", mix(rgb.0), mix(rgb.1), mix(rgb.2))
}

fn status_colour(s: &str) -> &'static str {
    match s {
        "holds" => "#1a9850",
        "partial" => "#fdae61",
        "fails" => "#d73027",
        _ => "#bdbdbd",
    }
}

/// Which measure a heatmap shows.
#[derive(Clone, Copy)]
enum Measure {
    H42,
    HitRate,
    PushGbps { max: f64 },
}

impl Measure {
    fn title(self) -> &'static str {
        match self {
            Measure::H42 => "H4-2 verdict",
            Measure::HitRate => "E4 bypass hits / reseeds",
            Measure::PushGbps { .. } => "E4 push GB/s",
        }
    }

    fn id(self) -> &'static str {
        match self {
            Measure::H42 => "h4-2",
            Measure::HitRate => "hit-rate",
            Measure::PushGbps { .. } => "push-gbps",
        }
    }

    /// The cell for `row` (`None`: not run): its value (the `data-v`
    /// attribute), the line under it, and its background.
    fn cell(self, row: Option<&Value>) -> (String, String, String) {
        let Some(row) = row.filter(|r| r["error"].is_null()) else {
            return ("error".into(), String::new(), "#bdbdbd".into());
        };
        let secs = |k: &str| row[k].as_f64().unwrap_or(0.0) / 1e3;
        match self {
            Measure::H42 => {
                let s = row["h4_2"].as_str().unwrap_or("?");
                let detail = format!(
                    "{:.1} s vs {:.1} s",
                    secs("e4_reseed_ttft_p50_ms"),
                    secs("e1_normal_ttft_p50_ms")
                );
                (s.to_string(), detail, status_colour(s).to_string())
            }
            Measure::HitRate => {
                let r = row["e4_bypass_hit_rate"].as_f64().unwrap_or(0.0);
                let n = row["e4_reseeds"].as_u64().unwrap_or(0);
                (
                    format!("{:.0}%", r * 100.0),
                    format!("of {n}"),
                    shade(r, (33, 102, 172)),
                )
            }
            Measure::PushGbps { max } => {
                let g = row["e4_push_gbps"].as_f64().unwrap_or(0.0);
                let t = if max > 0.0 { g / max } else { 0.0 };
                let gb = row["e4_push_gb"].as_f64().unwrap_or(0.0);
                (
                    format!("{g:.2}"),
                    format!("{gb:.0} GB"),
                    shade(t, (230, 85, 13)),
                )
            }
        }
    }

    /// What the line under a cell's value is.
    fn detail(self) -> &'static str {
        match self {
            Measure::H42 => "E4 reseed-path TTFT p50 vs E1 normal p50",
            Measure::HitRate => "of E4's reseeds",
            Measure::PushGbps { .. } => "and bytes pushed",
        }
    }
}

/// The row of the configuration whose values are `want` (axis index,
/// value).
fn row_at<'a>(rows: &'a [Value], axes: &[Axis], want: &[(usize, &str)]) -> Option<&'a Value> {
    rows.iter().find(|r| {
        want.iter()
            .all(|(i, v)| r["config"][axes[*i].key.as_str()].as_str() == Some(*v))
    })
}

fn heatmap(
    s: &mut String,
    m: Measure,
    rows: &[Value],
    axes: &[Axis],
    (x, y): (usize, Option<usize>),
    fixed: &[(usize, &str)],
) {
    let ys: Vec<&str> = match y {
        Some(y) => axes[y].values.iter().map(String::as_str).collect(),
        None => vec!["-"],
    };
    let _ = write!(
        s,
        "<table class=\"heatmap\" data-measure=\"{}\"><caption>{}<br><small>{}</small></caption><tr><th>y \\ x</th>",
        m.id(),
        m.title(),
        m.detail()
    );
    for xv in &axes[x].values {
        let _ = write!(s, "<th>{}</th>", escape(xv));
    }
    s.push_str("</tr>");
    for yv in ys {
        let _ = write!(s, "<tr><th>{}</th>", escape(yv));
        for xv in &axes[x].values {
            let mut want = fixed.to_vec();
            want.push((x, xv.as_str()));
            if let Some(y) = y {
                want.push((y, yv));
            }
            let (value, detail, bg) = m.cell(row_at(rows, axes, &want));
            let (value, detail) = (escape(&value), escape(&detail));
            let _ = write!(
                s,
                "<td style=\"background:{bg}\" data-v=\"{value}\">{value}<br><small>{detail}</small></td>"
            );
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>");
}

/// The freshness categories, in bar order, with their colours.
const FRESHNESS: [(&str, &str, &str); 5] = [
    ("hit", "bypass hit", "#1a9850"),
    ("miss_evicted", "miss: evicted (LRU)", "#d73027"),
    ("miss_never_pushed", "miss: no push landed yet", "#fdae61"),
    ("miss_short", "miss: snapshot too short", "#abd9e9"),
    ("miss_stale", "miss: stale", "#762a83"),
];

fn freshness(s: &mut String, rows: &[Value], axes: &[Axis]) {
    s.push_str("<h2>Snapshot freshness at E4's reseeds</h2><p class=\"legend\">");
    for (_, name, c) in FRESHNESS {
        let _ = write!(s, "<span style=\"background:{c}\"></span>{name} ");
    }
    s.push_str("</p><table class=\"freshness\"><tr><th>#</th>");
    for a in axes {
        let _ = write!(s, "<th>{}</th>", escape(&a.key));
    }
    s.push_str("<th>reseeds</th><th>outcome</th><th>hit age p50</th></tr>");
    let (mut evicted, mut misses) = (0u64, 0u64);
    for r in rows {
        let _ = write!(s, "<tr><td>{}</td>", r["index"]);
        for a in axes {
            let v = r["config"][a.key.as_str()].as_str().unwrap_or_default();
            let _ = write!(s, "<td>{}</td>", escape(v));
        }
        let total = r["reseeds"].as_u64().unwrap_or(0);
        let _ = write!(s, "<td>{total}</td><td><div class=\"bar\">");
        for (key, name, c) in FRESHNESS {
            let n = r[key].as_u64().unwrap_or(0);
            if n == 0 || total == 0 {
                continue;
            }
            let pct = n as f64 * 100.0 / total as f64;
            let _ = write!(
                s,
                "<span style=\"width:{pct:.2}%;background:{c}\" title=\"{name}: {n}\"></span>"
            );
        }
        let age = r["hit_age_p50_s"].as_f64().unwrap_or(0.0);
        let _ = write!(s, "</div></td><td>{age:.1} s</td></tr>");
        evicted += r["miss_evicted"].as_u64().unwrap_or(0);
        misses += total.saturating_sub(r["hit"].as_u64().unwrap_or(0));
    }
    s.push_str("</table>");
    if misses > 0 {
        let _ = write!(
            s,
            "<p>Over the sweep, {evicted} of {misses} bypass misses ({:.1}%) found the session's snapshot evicted.</p>",
            evicted as f64 * 100.0 / misses as f64
        );
    }
}

/// Every combination of the values of the axes not in `skip`, the first
/// varying slowest.
fn combinations(axes: &[Axis], skip: &[usize]) -> Vec<Vec<(usize, String)>> {
    let mut out = vec![Vec::new()];
    for (i, a) in axes.iter().enumerate() {
        if skip.contains(&i) {
            continue;
        }
        out = out
            .into_iter()
            .flat_map(|c| {
                a.values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push((i, v.clone()));
                    c
                })
            })
            .collect();
    }
    out
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin:0 1.5em 1em 0}\
td,th{border:1px solid #ccc;padding:3px 7px;text-align:center;font-size:13px}\
caption{font-weight:bold;padding:4px}\
small{font-weight:normal;color:#444;font-size:11px}\
.panel{display:flex;flex-wrap:wrap;align-items:flex-start}\
.bar{display:flex;width:320px;height:14px;background:#eee}\
.bar span{display:block;height:14px}\
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 10px}";

/// The page of an experiment sweep's `summary` (see the module docs).
pub fn page(summary: &Value, map: Option<&str>) -> Result<String, String> {
    if summary["grid"]["kind"].as_str() != Some("experiment") {
        return Err("--html draws the map of an experiment sweep (sweep --experiment)".into());
    }
    let axes = axes(summary);
    let (x, y) = choose(&axes, map)?;
    let rows: Vec<Value> = summary["rows"].as_array().cloned().unwrap_or_default();
    let max_push = rows
        .iter()
        .filter_map(|r| r["e4_push_gbps"].as_f64())
        .fold(0.0f64, f64::max);
    let mut s = String::with_capacity(16 << 10);
    let _ = write!(
        s,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>D→P push map</title><style>{STYLE}</style></head><body>"
    );
    s.push_str("<h1>D→P snapshot push: where it pays</h1><p>What the model says for each configuration of the sweep (seed 002's E1/E3/E4/E4-ablate on the one engine): H4-2 holds when E4's reseed share stays within tolerance of E3's and its reseed-path TTFT median is at most E1's normal-path median.</p>");
    let _ = write!(
        s,
        "<p>Base flags: <code>{}</code></p>",
        escape(
            &summary["grid"]["base"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" ")
        )
    );
    let skip: Vec<usize> = std::iter::once(x).chain(y).collect();
    for fixed in combinations(&axes, &skip) {
        let title: Vec<String> = fixed
            .iter()
            .map(|(i, v)| format!("{}={v}", axes[*i].key))
            .collect();
        if !title.is_empty() {
            let _ = write!(s, "<h2>{}</h2>", escape(&title.join(", ")));
        }
        let fixed: Vec<(usize, &str)> = fixed.iter().map(|(i, v)| (*i, v.as_str())).collect();
        let _ = write!(
            s,
            "<p>x: {}, y: {}</p><div class=\"panel\">",
            escape(&axes[x].key),
            y.map_or("-".into(), |y| escape(&axes[y].key))
        );
        for m in [
            Measure::H42,
            Measure::HitRate,
            Measure::PushGbps { max: max_push },
        ] {
            heatmap(&mut s, m, &rows, &axes, (x, y), &fixed);
        }
        s.push_str("</div>");
    }
    freshness(&mut s, &rows, &axes);
    s.push_str("</body></html>\n");
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn summary() -> Value {
        let row = |i: u32, a: &str, b: &str, h: &str, hit: u64| {
            json!({"index": i, "config": {"a": a, "b": b}, "error": null, "h4_2": h,
                   "e4_bypass_hit_rate": hit as f64 / 4.0, "e4_reseeds": 4, "e4_push_gbps": 0.5,
                   "reseeds": 4, "hit": hit, "miss_evicted": 4 - hit})
        };
        json!({"grid": {"kind": "experiment", "base": [], "configurations": 4,
                        "axes": [{"key": "a", "values": ["1", "2"]},
                                 {"key": "b", "values": ["x", "y"]}]},
               "rows": [row(0, "1", "x", "fails", 0), row(1, "1", "y", "partial", 1),
                        row(2, "2", "x", "holds", 4), row(3, "2", "y", "holds", 3)]})
    }

    #[test]
    fn the_heatmap_puts_each_verdict_in_its_cell() {
        let p = page(&summary(), Some("b,a")).unwrap();
        assert_eq!(p.matches("class=\"heatmap\"").count(), 3);
        // Y = a (rows 1, 2), X = b (columns x, y).
        let h = &p[p.find("data-measure=\"h4-2\"").unwrap()..];
        let h = &h[..h.find("</table>").unwrap()];
        let cells: Vec<&str> = h
            .split("data-v=\"")
            .skip(1)
            .map(|c| &c[..c.find('"').unwrap()])
            .collect();
        assert_eq!(cells, ["fails", "partial", "holds", "holds"]);
        assert!(p.contains("8 of 8 bypass misses (100.0%) found the session's snapshot evicted"));
    }

    #[test]
    fn bad_maps_and_replay_sweeps_are_refused() {
        let keys = ["a".to_string(), "b-c".to_string()];
        assert_eq!(check_map(&keys, Some("a,--b_c")), Ok(()));
        assert!(check_map(&keys, Some("a,d")).is_err());
        assert!(check_map(&keys[..0], None).is_err());
        assert!(page(&summary(), Some("a,a"))
            .unwrap_err()
            .contains("differ"));
        assert!(page(&summary(), Some("a,c"))
            .unwrap_err()
            .contains("not a swept key"));
        assert!(page(&summary(), Some("a")).unwrap_err().contains("X,Y"));
        let mut s = summary();
        s["grid"]["kind"] = Value::Null;
        assert!(page(&s, None).unwrap_err().contains("experiment sweep"));
    }

    #[test]
    fn other_axes_make_one_panel_each_and_shades_stay_in_range() {
        let mut s = summary();
        s["grid"]["axes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "c", "values": ["p", "q"]}));
        let p = page(&s, None).unwrap();
        assert!(p.contains("<h2>c=p</h2>") && p.contains("<h2>c=q</h2>"));
        // No row has c: every cell of both panels is an error cell.
        assert_eq!(p.matches("data-v=\"error\"").count(), 24);
        assert_eq!(shade(2.0, (0, 0, 0)), "#000000");
        assert_eq!(shade(f64::NAN, (0, 0, 0)), "#ffffff");
    }
}
