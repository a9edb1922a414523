//! `cargo xtask bench`'s `overlay` workload: a Mooncake trace overlaid on
//! itself `copies` times at the same timestamps, each copy's `hash_ids`
//! moved past the previous copy's, so the copies share no prefix: the same
//! load per engine on a cluster `copies` times the size.

use std::path::{Path, PathBuf};

/// Writes the overlaid trace to a temporary file and returns its path.
pub fn overlaid_trace(trace: &Path, copies: u64) -> Result<PathBuf, String> {
    let text = std::fs::read_to_string(trace).map_err(|e| format!("{}: {e}", trace.display()))?;
    let mut rows = Vec::new();
    let mut span = 0u64;
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| format!("{}:{}: {e}", trace.display(), n + 1))?;
        let ids = v
            .get("hash_ids")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| format!("{}:{}: hash_ids: not a list", trace.display(), n + 1))?;
        for id in ids {
            let id = id
                .as_u64()
                .ok_or_else(|| format!("{}:{}: hash_ids: not integers", trace.display(), n + 1))?;
            span = span.max(id + 1);
        }
        rows.push(v);
    }
    let mut out = String::with_capacity(text.len() * copies as usize);
    for v in &rows {
        for k in 0..copies {
            let mut c = v.clone();
            let ids: Vec<u64> = v["hash_ids"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(serde_json::Value::as_u64)
                .map(|id| id + k * span)
                .collect();
            c["hash_ids"] = serde_json::json!(ids);
            out.push_str(&c.to_string());
            out.push('\n');
        }
    }
    let p = std::env::temp_dir().join(format!("xtask-bench-overlay-{}.jsonl", std::process::id()));
    std::fs::write(&p, out).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_keep_times_and_share_no_hash() {
        let dir = std::env::temp_dir().join(format!("xtask-overlay-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let t = dir.join("t.jsonl");
        std::fs::write(
            &t,
            "{\"timestamp\": 3, \"input_length\": 100, \"output_length\": 5, \"hash_ids\": [0, 4]}\n\
             {\"timestamp\": 7, \"input_length\": 50, \"output_length\": 2, \"hash_ids\": [0]}\n",
        )
        .unwrap();
        let p = overlaid_trace(&t, 3).unwrap();
        let rows: Vec<serde_json::Value> = std::fs::read_to_string(&p)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 6);
        let ids: Vec<_> = rows.iter().map(|r| r["hash_ids"].clone()).collect();
        assert_eq!(
            ids[..3],
            [
                serde_json::json!([0, 4]),
                serde_json::json!([5, 9]),
                serde_json::json!([10, 14])
            ]
        );
        assert_eq!(ids[5], serde_json::json!([10]));
        assert!(rows[..3]
            .iter()
            .all(|r| r["timestamp"] == 3 && r["output_length"] == 5));
        let _ = std::fs::remove_file(p);
        let _ = std::fs::remove_dir_all(dir);
    }
}
