//! What every self-contained page of handoff-mocker shares: inline SVG
//! drawn with `plotters` at one size, the colours, the stylesheet, and
//! the few lines of inline script that mark the page rendered (no
//! network: a page opens from a file).

use plotters::coord::Shift;
use plotters::prelude::*;
use std::fmt::Write as _;

/// Series colours, in order (colour-blind-safe Okabe–Ito).
pub const COLOURS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(120, 120, 120),
    RGBColor(0, 0, 0),
];

/// A chart's width, pixels.
pub const W: u32 = 520;
/// A chart's height, pixels.
pub const H: u32 = 300;

/// A drawing error as the page's error text.
pub fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("drawing a chart: {e:?}")
}

/// `s` safe inside HTML text and attribute values.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Draws into an SVG string of [`W`]×[`H`] with `draw`.
pub fn svg(
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), String>,
) -> Result<String, String> {
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        draw(&root)?;
        root.present().map_err(err)?;
    }
    Ok(buf)
}

/// Appends `svg` as a figure the render check counts, of kind `kind`.
pub fn figure(out: &mut String, kind: &str, svg: &str) {
    let _ = write!(out, "<figure data-chart=\"{kind}\">{svg}</figure>");
}

/// The pages' stylesheet.
pub const CSS: &str = "body{font-family:sans-serif;margin:24px;color:#222;max-width:1700px}\
h1{font-size:22px}h2{font-size:18px;margin-top:28px}.note{color:#555}\
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;\
text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}\
.grid{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0}";

/// Marks the page once it rendered: the number of charts, and whether
/// every one has a size (the headless-browser test reads both).
pub const CHECK: &str = "(function(){var s=document.querySelectorAll('figure[data-chart] svg');\
var ok=s.length>0;for(var i=0;i<s.length;i++){var b=s[i].getBoundingClientRect();\
if(!(b.width>0&&b.height>0)){ok=false;}}\
document.body.setAttribute('data-charts',String(s.length));\
document.body.setAttribute('data-render-ok',ok?'true':'false');})();";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_draws_one_svg() {
        assert_eq!(
            escape(r#"<a href="x">&</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;"
        );
        let s = svg(|_| Ok(())).unwrap();
        assert!(s.starts_with("<svg") && s.contains("width=\"520\""), "{s}");
        assert_eq!(svg(|_| Err("no".into())), Err("no".to_string()));
        let mut page = String::new();
        figure(&mut page, "k", "<svg/>");
        assert_eq!(page, "<figure data-chart=\"k\"><svg/></figure>");
    }
}
