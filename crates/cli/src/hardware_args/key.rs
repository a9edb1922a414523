//! A profile file's name taken apart: `MODEL-GPU-tpN[-dpD][-epE]-BACKEND.json`,
//! the key `--model`, `--gpu`, `--tp`, `--dp-size`, the expert-parallel
//! flags and `--backend` select by.
//!
//! `-dpD` (D > 1) names a mixture of experts whose D attention DP ranks
//! the MoE layer couples, `-epE` (E > 1) its experts spread over E GPUs
//! (the rest of the expert width tensor-parallel: `moe_tp = tp × D / E`,
//! AIConfigurator's width rule); the file's `deployment.parallel` says the
//! same ([`handoff_profiles::hardware::ParallelLayout`]). A name spells
//! `dp1` or `ep1` never, so each layout has one name.

/// A profile file's name, taken apart.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProfileKey {
    /// Model.
    pub model: String,
    /// GPU.
    pub gpu: String,
    /// Tensor-parallel size (attention, per DP rank).
    pub tp: u32,
    /// Attention DP ranks a MoE layer couples (1: none recorded).
    pub dp: u32,
    /// Expert-parallel size (1: no expert parallelism).
    pub ep: u32,
    /// Engine.
    pub backend: &'static str,
}

/// Strips a trailing `-{tag}N` (N in 1..=64) from `rest`.
fn strip_size<'a>(rest: &'a str, tag: &str) -> Option<(&'a str, u32)> {
    let (head, n) = rest.rsplit_once(&format!("-{tag}"))?;
    let n: u32 = n.parse().ok().filter(|t| (1..=64).contains(t))?;
    Some((head, n))
}

impl ProfileKey {
    /// The key of a file name, if it is a profile's.
    pub fn parse(file: &str) -> Option<ProfileKey> {
        let stem = file.strip_suffix(".json")?;
        let (rest, backend) = stem.rsplit_once('-')?;
        let backend = match backend {
            "vllm" => "vllm",
            "sglang" => "sglang",
            _ => return None,
        };
        let (rest, ep) = match strip_size(rest, "ep") {
            Some((r, e)) if e > 1 => (r, e),
            Some(_) => return None,
            None => (rest, 1),
        };
        let (rest, dp) = match strip_size(rest, "dp") {
            Some((r, d)) if d > 1 => (r, d),
            Some(_) => return None,
            None => (rest, 1),
        };
        let (rest, tp) = strip_size(rest, "tp")?;
        let (model, gpu) = rest.rsplit_once('-')?;
        let width_ok = (tp * dp) % ep == 0 && tp * dp <= 64;
        (!model.is_empty() && !gpu.is_empty() && width_ok).then(|| ProfileKey {
            model: model.to_string(),
            gpu: gpu.to_string(),
            tp,
            dp,
            ep,
            backend,
        })
    }

    /// The key's file name.
    pub fn file_name(&self) -> String {
        format!(
            "{}-{}-tp{}{}-{}.json",
            self.model,
            self.gpu,
            self.tp,
            self.layout_suffix(),
            self.backend
        )
    }

    /// `-dpD-epE`, each part only when over 1; empty for a TP-only profile.
    pub fn layout_suffix(&self) -> String {
        let mut s = String::new();
        if self.dp > 1 {
            s.push_str(&format!("-dp{}", self.dp));
        }
        if self.ep > 1 {
            s.push_str(&format!("-ep{}", self.ep));
        }
        s
    }

    /// Whether the key names a MoE layout (coupled DP ranks or EP).
    pub fn is_moe_layout(&self) -> bool {
        self.dp > 1 || self.ep > 1
    }
}

impl std::fmt::Display for ProfileKey {
    /// The flags that select it: `--dp-size D` for coupled DP ranks,
    /// `--enable-expert-parallel` for experts over every rank, else
    /// `--ep-size E`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "--model {} --gpu {} --tp {}",
            self.model, self.gpu, self.tp
        )?;
        if self.dp > 1 {
            write!(f, " --dp-size {}", self.dp)?;
        }
        if self.ep > 1 && self.ep == self.tp * self.dp {
            write!(f, " --enable-expert-parallel")?;
        } else if self.ep > 1 {
            write!(f, " --ep-size {}", self.ep)?;
        }
        write!(f, " --backend {}", self.backend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_parse_into_keys_with_one_name_each() {
        let k = ProfileKey::parse("qwen3-30b-a3b-b200-tp1-dp4-ep4-vllm.json").unwrap();
        assert_eq!(
            (
                k.model.as_str(),
                k.gpu.as_str(),
                k.tp,
                k.dp,
                k.ep,
                k.backend
            ),
            ("qwen3-30b-a3b", "b200", 1, 4, 4, "vllm")
        );
        assert_eq!(k.file_name(), "qwen3-30b-a3b-b200-tp1-dp4-ep4-vllm.json");
        assert_eq!(
            k.to_string(),
            "--model qwen3-30b-a3b --gpu b200 --tp 1 --dp-size 4 --enable-expert-parallel --backend vllm"
        );
        let k = ProfileKey::parse("qwen3-30b-a3b-b200-tp1-dp2-vllm.json").unwrap();
        assert_eq!((k.tp, k.dp, k.ep), (1, 2, 1));
        assert_eq!(
            k.to_string(),
            "--model qwen3-30b-a3b --gpu b200 --tp 1 --dp-size 2 --backend vllm"
        );
        let k = ProfileKey::parse("m-h100-tp4-ep4-sglang.json").unwrap();
        assert_eq!((k.tp, k.dp, k.ep), (4, 1, 4));
        assert!(k.is_moe_layout());
        // Experts over part of the width: named by --ep-size.
        let k = ProfileKey::parse("m-h100-tp2-dp2-ep2-vllm.json").unwrap();
        assert!(
            k.to_string().contains("--dp-size 2 --ep-size 2 --backend"),
            "{k}"
        );
        let plain = ProfileKey::parse("llama-3.1-8b-h100-tp1-vllm.json").unwrap();
        assert_eq!(
            (plain.dp, plain.ep, plain.layout_suffix()),
            (1, 1, String::new())
        );
        assert!(!plain.is_moe_layout());
        for bad in [
            "m-h100-tp1-dp1-vllm.json",
            "m-h100-tp1-dp2-ep1-vllm.json",
            "m-h100-tp1-dp4-ep3-vllm.json",
            "m-h100-tp8-dp16-vllm.json",
            "m-h100-tp1-dp0-vllm.json",
            "m-h100-tp1-ep-vllm.json",
            "m-h100-dp2-vllm.json",
            "h100-tp1-dp2-vllm.json",
        ] {
            assert_eq!(ProfileKey::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_model_s_plain_profile_sorts_before_its_layouts() {
        let mut keys: Vec<ProfileKey> = [
            "m-b200-tp1-dp4-ep4-vllm.json",
            "m-b200-tp2-vllm.json",
            "m-b200-tp1-vllm.json",
            "m-b200-tp1-dp2-vllm.json",
        ]
        .iter()
        .filter_map(|n| ProfileKey::parse(n))
        .collect();
        keys.sort();
        let names: Vec<String> = keys.iter().map(ProfileKey::file_name).collect();
        assert_eq!(
            names,
            [
                "m-b200-tp1-vllm.json",
                "m-b200-tp1-dp2-vllm.json",
                "m-b200-tp1-dp4-ep4-vllm.json",
                "m-b200-tp2-vllm.json"
            ]
        );
    }
}
