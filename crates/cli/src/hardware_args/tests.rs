//! Selection of profiles by model, GPU, TP and MoE layout.
use super::*;

/// `--model MODEL --gpu GPU [--tp TP]` and nothing else.
pub(crate) fn args(model: &str, gpu: &str, tp: Option<u32>) -> HardwareArgs {
    HardwareArgs {
        model: Some(model.into()),
        gpu: Some(gpu.into()),
        tp,
        ..HardwareArgs::default()
    }
}

#[test]
fn file_names_parse_into_keys() {
    let k = ProfileKey::parse("llama-3.1-8b-h100-tp1-vllm.json").unwrap();
    assert_eq!(
        (k.model.as_str(), k.gpu.as_str(), k.tp, k.backend),
        ("llama-3.1-8b", "h100", 1, "vllm")
    );
    assert_eq!(k.file_name(), "llama-3.1-8b-h100-tp1-vllm.json");
    for bad in [
        "x.json",
        "m-h100-tp1-tgi.json",
        "m-h100-tp0-vllm.json",
        "m-h100-tpx-vllm.json",
        "h100-tp1-vllm.json",
        "m-h100-tp1-vllm.txt",
    ] {
        assert_eq!(ProfileKey::parse(bad), None, "{bad}");
    }
}

/// The flags that select `k`: `--tp`, `--dp-size` and, for experts
/// over every rank, `--enable-expert-parallel` (else `--ep-size`).
pub(crate) fn args_of(k: &ProfileKey) -> HardwareArgs {
    let every = k.ep > 1 && k.ep == k.tp * k.dp;
    HardwareArgs {
        dp: k.dp,
        enable_expert_parallel: every,
        ep_size: (k.ep > 1 && !every).then_some(k.ep),
        ep_flag: (k.ep > 1).then_some("--enable-expert-parallel"),
        ..args(&k.model, &k.gpu, Some(k.tp))
    }
}

#[test]
fn every_shipped_profile_is_built_in_selectable_and_consistent() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../profiles/aic");
    let all = list_profiles(Path::new(dir)).unwrap();
    assert!(all.len() >= 45, "{all:?}");
    assert_eq!(all, embedded_profiles(), "the binary holds every profile");
    for k in &all {
        let backend = if k.backend == "vllm" {
            Backend::Vllm
        } else {
            Backend::Sglang
        };
        let s = args_of(k).select(backend).unwrap().unwrap();
        assert_eq!(
            s.file.profile.name(),
            k.file_name().trim_end_matches(".json")
        );
        assert!(s.file.profile.source().contains("Apache-2.0"), "{k}");
        // A layout's file records it; a TP-only one records none.
        match s.model.parallel {
            Some(p) => {
                assert_eq!((p.tp, p.attention_dp, p.moe_ep), (k.tp, k.dp, k.ep), "{k}");
                assert!(s.model.expert_weight_bytes > 0, "{k}");
                assert!(s.model.recorded_kv_bytes_per_rank.is_some(), "{k}");
            }
            None => assert!(!k.is_moe_layout(), "{k}"),
        }
    }
}

#[test]
fn the_smallest_tp_is_the_default_and_misses_are_explained() {
    let s = args("qwen3-32b", "h100", None)
        .select(Backend::Sglang)
        .unwrap()
        .unwrap();
    assert_eq!(s.model.tp, 2);
    assert_eq!(s.file.profile.name(), "qwen3-32b-h100-tp2-sglang");
    let e = args("qwen3-32b", "h100", Some(3))
        .select(Backend::Vllm)
        .unwrap_err();
    assert!(
        e.contains("--tp 3")
            && e.contains("for qwen3-32b there are: ")
            && e.contains("--model qwen3-32b --gpu h100 --tp 8 --backend vllm")
            && !e.contains("qwen3-8b"),
        "{e}"
    );
    let e = args("qwen9", "h100", None)
        .select(Backend::Vllm)
        .unwrap_err();
    assert!(
        e.contains("no profile is for qwen9; models with one: ") && e.contains("qwen3-32b"),
        "{e}"
    );
    let e = args("qwen3-8b", "h100", None)
        .select(Backend::TrtLlm)
        .unwrap_err();
    assert!(e.contains("no profile"), "{e}");
    assert!(HardwareArgs::default()
        .select(Backend::Vllm)
        .unwrap()
        .is_none());
    let e = HardwareArgs {
        profiles_dir: Some("/nonexistent/profiles".into()),
        ..args("qwen3-8b", "h100", None)
    }
    .select(Backend::Vllm)
    .unwrap_err();
    assert!(e.starts_with("--profiles-dir /nonexistent/profiles"), "{e}");
}

/// `qwen3-30b-a3b` on `b200` under vLLM at `--tp tp --dp-size dp`.
fn moe(tp: Option<u32>, dp: u32) -> HardwareArgs {
    HardwareArgs {
        dp,
        ..args("qwen3-30b-a3b", "b200", tp)
    }
}

/// `h` with vLLM's `--enable-expert-parallel`, as `for_pool` sets it.
fn ep(h: HardwareArgs) -> HardwareArgs {
    HardwareArgs {
        enable_expert_parallel: true,
        ..h
    }
    .for_pool(PoolSide::Prefill)
}

fn name(h: &HardwareArgs) -> Result<String, String> {
    h.select(Backend::Vllm)
        .map(|s| s.unwrap().file.profile.name().to_string())
}

#[test]
fn dp_and_expert_parallelism_select_the_layout_s_profile() {
    use handoff_profiles::hardware::ParallelLayout;
    let s = ep(moe(Some(1), 4)).select(Backend::Vllm).unwrap().unwrap();
    assert_eq!(s.file.profile.name(), "qwen3-30b-a3b-b200-tp1-dp4-ep4-vllm");
    assert_eq!(
        s.model.parallel,
        Some(ParallelLayout {
            tp: 1,
            attention_dp: 4,
            moe_tp: 1,
            moe_ep: 4
        })
    );
    assert_eq!(
        s.origin,
        "profiles/aic/qwen3-30b-a3b-b200-tp1-dp4-ep4-vllm.json"
    );
    // Without --tp: the smallest TP that has the layout.
    assert_eq!(
        name(&ep(moe(None, 8))).unwrap(),
        "qwen3-30b-a3b-b200-tp1-dp8-ep8-vllm"
    );
    // EP over the TP ranks of one DP rank, and none on one GPU.
    assert_eq!(
        name(&ep(moe(Some(4), 1))).unwrap(),
        "qwen3-30b-a3b-b200-tp4-ep4-vllm"
    );
    assert_eq!(
        name(&ep(moe(Some(1), 1))).unwrap(),
        "qwen3-30b-a3b-b200-tp1-vllm"
    );
    // DP without EP: the experts tensor-parallel over the DP ranks.
    assert_eq!(
        name(&moe(Some(1), 2)).unwrap(),
        "qwen3-30b-a3b-b200-tp1-dp2-vllm"
    );
    assert_eq!(
        name(&moe(Some(1), 1)).unwrap(),
        "qwen3-30b-a3b-b200-tp1-vllm"
    );
    // SGLang's --ep-size N = TP × DP is the same layout.
    let size = |n, tp, dp| {
        HardwareArgs {
            ep_size: Some(n),
            ..moe(tp, dp)
        }
        .for_pool(PoolSide::Decode)
    };
    assert_eq!(
        name(&size(4, Some(1), 4)).unwrap(),
        "qwen3-30b-a3b-b200-tp1-dp4-ep4-vllm"
    );
    assert_eq!(
        name(&size(2, None, 2)).unwrap(),
        "qwen3-30b-a3b-b200-tp1-dp2-ep2-vllm"
    );
    let e = name(&size(2, Some(1), 4)).unwrap_err();
    assert_eq!(
        e,
        "--ep-size 2: must be --tp 1 × --dp-size 4 = 4 (SGLang's EP with DP attention \
         spans every GPU of the worker)"
    );
    // The flags a key prints select it again.
    for k in embedded_profiles().iter().filter(|k| k.is_moe_layout()) {
        let shown = k.to_string();
        assert!(shown.contains(&format!("--tp {}", k.tp)), "{shown}");
        assert_eq!(shown.contains("--dp-size"), k.dp > 1, "{shown}");
    }
}

#[test]
fn a_layout_without_a_profile_is_refused_naming_what_exists() {
    // The model has layouts on b200: DP 4 without EP has none, and is
    // not silently timed as independent TP1 engines.
    let e = name(&moe(Some(1), 4)).unwrap_err();
    assert!(
        e.starts_with(
            "--model qwen3-30b-a3b --gpu b200 --tp 1 --dp-size 4 --backend vllm: no profile"
        ) && e.contains("--tp 1 --dp-size 4 --enable-expert-parallel --backend vllm"),
        "{e}"
    );
    let e = name(&ep(moe(Some(2), 4))).unwrap_err();
    assert!(
        e.contains("--tp 2 --dp-size 4 --enable-expert-parallel --backend vllm: no profile"),
        "{e}"
    );
    // A dense model has no expert layout.
    let dense = ep(HardwareArgs {
        dp: 2,
        ..args("llama-3.1-8b", "h200", Some(1))
    });
    let e = dense.select(Backend::Sglang).unwrap_err();
    assert!(
        e.contains("--enable-expert-parallel --backend sglang: no profile"),
        "{e}"
    );
    // ... and its DP ranks are independent engines: the TP profile.
    let s = HardwareArgs {
        dp: 2,
        ..args("llama-3.1-8b", "h200", Some(2))
    }
    .select(Backend::Sglang)
    .unwrap()
    .unwrap();
    assert_eq!(s.file.profile.name(), "llama-3.1-8b-h200-tp2-sglang");
    // A MoE model with no layout profile on that GPU, likewise.
    let s = HardwareArgs {
        dp: 2,
        ..args("qwen3-30b-a3b", "h100", None)
    };
    assert_eq!(name(&s).unwrap(), "qwen3-30b-a3b-h100-tp1-vllm");
}

#[test]
fn expert_parallelism_is_per_pool() {
    let h = HardwareArgs {
        decode_expert_parallel: true,
        dp: 2,
        ..args("qwen3-30b-a3b", "b200", Some(1))
    };
    assert!(h.expert_parallel());
    assert!(!h.expert_parallel_for(PoolSide::Prefill));
    assert!(h.expert_parallel_for(PoolSide::Decode));
    assert!(!h.pools_alike());
    assert_eq!(
        name(&h.for_pool(PoolSide::Prefill)).unwrap(),
        "qwen3-30b-a3b-b200-tp1-dp2-vllm"
    );
    assert_eq!(
        name(&h.for_pool(PoolSide::Decode)).unwrap(),
        "qwen3-30b-a3b-b200-tp1-dp2-ep2-vllm"
    );
    let both = HardwareArgs {
        enable_expert_parallel: true,
        ..h.clone()
    };
    assert!(both.pools_alike() && both.expert_parallel_for(PoolSide::Prefill));
    assert!(!args("qwen3-8b", "h100", None).expert_parallel());
}

#[test]
fn a_perf_file_s_layout_is_checked_against_the_flags() {
    let name = "qwen3-30b-a3b-b200-tp1-dp4-ep4-vllm.json";
    let file = built_in(name);
    let ok = ep(moe(None, 4)).select_with_perf(Backend::Vllm, name, file.clone());
    assert!(ok.is_ok(), "{ok:?}");
    let e = moe(None, 4)
        .select_with_perf(Backend::Vllm, name, file.clone())
        .unwrap_err();
    assert!(
        e.contains("no expert-parallel flag but the file times TP 1 × DP 4"),
        "{e}"
    );
    let e = ep(moe(None, 2))
        .select_with_perf(Backend::Vllm, name, file)
        .unwrap_err();
    assert!(
        e.contains("--dp-size 2 but the file is for 4 DP ranks"),
        "{e}"
    );
    let plain = "qwen3-30b-a3b-b200-tp1-vllm.json";
    let e = ep(moe(None, 1))
        .select_with_perf(Backend::Vllm, plain, built_in(plain))
        .unwrap_err();
    assert!(
        e.contains("--enable-expert-parallel but the file times no MoE layout"),
        "{e}"
    );
}

#[test]
fn the_flag_names_the_folder_before_the_environment() {
    let env = Some(OsString::from("/from/env"));
    let flag = HardwareArgs {
        profiles_dir: Some("/from/flag".into()),
        ..HardwareArgs::default()
    };
    let d = flag.profile_dir_with(env.clone()).unwrap();
    assert_eq!(
        (d.path.to_str(), d.named_by),
        (Some("/from/flag"), "--profiles-dir")
    );
    let d = HardwareArgs::default().profile_dir_with(env).unwrap();
    assert_eq!(
        (d.path.to_str(), d.named_by),
        (Some("/from/env"), PROFILES_DIR_ENV)
    );
    let none = HardwareArgs::default();
    assert_eq!(none.profile_dir_with(Some(OsString::new())), None);
    assert_eq!(none.profile_dir_with(None), None);
}

/// The built-in file `name` as `--perf profile:` reads it.
fn built_in(name: &str) -> ProfileFile {
    let text = EMBEDDED.iter().find(|(n, _)| *n == name).unwrap().1;
    profile_file::parse_file(text, name).unwrap()
}

#[test]
fn a_perf_file_with_a_deployment_is_the_model_and_is_checked() {
    let name = "qwen3-8b-h100-tp1-vllm.json";
    let only_model = HardwareArgs {
        model: Some("qwen3-8b".into()),
        ..HardwareArgs::default()
    };
    let s = only_model
        .select_with_perf(Backend::Vllm, name, built_in(name))
        .unwrap();
    assert_eq!(
        (s.model.model.as_str(), s.model.gpu.as_str()),
        ("qwen3-8b", "h100")
    );
    let hf = HardwareArgs {
        model: Some("Qwen/Qwen3-8B".into()),
        ..HardwareArgs::default()
    };
    assert!(hf
        .select_with_perf(Backend::Vllm, name, built_in(name))
        .is_ok());
    let cases = [
        (
            args("llama-3.1-8b", "h100", None),
            Backend::Vllm,
            "--model llama-3.1-8b but the file is for model qwen3-8b",
        ),
        (
            args("qwen3-8b", "a100", None),
            Backend::Vllm,
            "--gpu a100 but the file is for GPU h100",
        ),
        (
            args("qwen3-8b", "h100", Some(2)),
            Backend::Vllm,
            "--tp 2 but the file is for TP 1",
        ),
        (
            args("qwen3-8b", "h100", None),
            Backend::Sglang,
            "--backend sglang but the file times vllm",
        ),
    ];
    for (a, backend, want) in cases {
        let e = a
            .select_with_perf(backend, name, built_in(name))
            .unwrap_err();
        assert!(
            e.starts_with("--perf profile:qwen3-8b-h100-tp1-vllm.json: its deployment")
                && e.contains(want),
            "{e}"
        );
    }
}

#[test]
fn a_perf_file_without_a_deployment_needs_the_gpu() {
    let text = EMBEDDED[0].1;
    let mut file = profile_file::parse_file(text, "x").unwrap();
    file.deployment = None;
    let s = args("qwen3-8b", "h100", None)
        .select_with_perf(Backend::Vllm, "x.json", file.clone())
        .unwrap();
    assert_eq!(s.model.gpu, "h100");
    let no_gpu = HardwareArgs {
        model: Some("qwen3-8b".into()),
        ..HardwareArgs::default()
    };
    let e = no_gpu
        .select_with_perf(Backend::Vllm, "x.json", file.clone())
        .unwrap_err();
    assert!(
        e.contains("--gpu must name") && e.contains("--gpu h100"),
        "{e}"
    );
    let tp_only = HardwareArgs {
        tp: Some(2),
        ..HardwareArgs::default()
    };
    let e = tp_only
        .select_with_perf(Backend::Vllm, "x.json", file)
        .unwrap_err();
    assert!(
        e.starts_with("--tp 2: --perf profile:x.json has no deployment"),
        "{e}"
    );
}
