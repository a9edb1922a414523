#!/usr/bin/env python3
"""The command line of derive_from_aic.py, without AIConfigurator (standard
library only): python3 -m unittest profiles/test_derive_args.py"""

import contextlib
import importlib.metadata
import io
import os
import sys
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import derive_from_aic as d  # noqa: E402


ONE = ["--model", "qwen3-8b", "--system", "h100_sxm", "--backend", "vllm", "--tp", "1"]


class Args(unittest.TestCase):
    def parse_fails(self, argv):
        """The exit status and message of a refused command line."""
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as cm:
            d.parse_args(argv)
        return cm.exception.code, err.getvalue()

    def test_one_profile_needs_all_four(self):
        a = d.parse_args(ONE + ["--out", "/tmp/x"])
        self.assertEqual((a.model, a.system, a.backend, a.tp, a.out), ("qwen3-8b", "h100_sxm", "vllm", 1, "/tmp/x"))
        code, msg = self.parse_fails(ONE[:6])
        self.assertEqual(code, 2)
        self.assertIn("needs --tp", msg)
        code, msg = self.parse_fails(ONE[:2])
        self.assertIn("needs --system, --backend, --tp", msg)

    def test_bad_values_exit_2(self):
        for argv, want in [
            (ONE[:5] + ["tgi"] + ONE[6:], "invalid choice"),
            (ONE[:7] + ["0"], "--tp 0: must be 1..64"),
            (ONE[:7] + ["x"], "invalid int"),
            (ONE + ["qwen3-8b"], "and --model together"),
            (["--list", "qwen3-8b"], "take no model"),
        ]:
            code, msg = self.parse_fails(argv)
            self.assertEqual(code, 2, argv)
            self.assertIn(want, msg, argv)

    def test_the_no_argument_modes_still_parse(self):
        a = d.parse_args([])
        self.assertEqual((a.models, a.model, a.list), ([], None, False))
        self.assertEqual(d.parse_args(["qwen3-8b", "qwen3-32b"]).models, ["qwen3-8b", "qwen3-32b"])
        self.assertTrue(d.parse_args(["--list"]).list)

    def test_an_unpinned_aiconfigurator_is_exit_2(self):
        err = io.StringIO()
        with mock.patch.object(importlib.metadata, "version", side_effect=importlib.metadata.PackageNotFoundError):
            with contextlib.redirect_stderr(err):
                self.assertEqual(d.main(["--list"]), 2)
        self.assertIn("pinned to 0.12.0", err.getvalue())


class Layouts(unittest.TestCase):
    def parse_fails(self, argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as cm:
            d.parse_args(argv)
        return cm.exception.code, err.getvalue()

    def test_no_layout_flag_is_the_tp_only_export(self):
        self.assertIsNone(d.parse_args(ONE).layout)
        self.assertEqual(d.layout_suffix(None), "")

    def test_expert_parallel_is_ep_over_every_rank(self):
        a = d.parse_args(ONE[:7] + ["1", "--attention-dp", "4", "--expert-parallel"])
        self.assertEqual(a.layout, {"tp": 1, "attention_dp": 4, "moe_tp": 1, "moe_ep": 4})
        self.assertEqual(d.layout_suffix(a.layout), "-dp4-ep4")
        a = d.parse_args(ONE[:7] + ["4", "--expert-parallel"])
        self.assertEqual(a.layout, {"tp": 4, "attention_dp": 1, "moe_tp": 1, "moe_ep": 4})
        self.assertEqual(d.layout_suffix(a.layout), "-ep4")

    def test_one_moe_size_infers_the_other_and_dp_alone_shards_experts(self):
        self.assertEqual(d.layout_of(1, 2, None, None, False), {"tp": 1, "attention_dp": 2, "moe_tp": 2, "moe_ep": 1})
        self.assertEqual(d.layout_suffix(d.layout_of(1, 2, None, None, False)), "-dp2")
        self.assertEqual(d.layout_of(2, 4, 2, None, False)["moe_ep"], 4)
        self.assertEqual(d.layout_of(2, 4, None, 8, False)["moe_tp"], 1)
        self.assertEqual(d.layout_suffix(d.layout_of(2, 4, 2, 4, False)), "-dp4-ep4")

    def test_impossible_layouts_exit_2_naming_the_flag(self):
        for more, want in [
            (["--attention-dp", "0"], "--attention-dp 0: must be 1..64"),
            (["--moe-ep", "3", "--attention-dp", "4"], "--moe-ep 3: does not divide tp x attention-dp = 4"),
            (["--moe-tp", "3", "--attention-dp", "4"], "--moe-tp 3: does not divide"),
            (["--moe-tp", "2", "--moe-ep", "4", "--attention-dp", "4"], "--moe-tp 2 x --moe-ep 4 = 8, but the experts must span"),
            (["--attention-dp", "65"], "--attention-dp 65: must be 1..64"),
            (["--attention-dp", "16", "--expert-parallel"], "--tp 8 x --attention-dp 16 = 128 GPUs: at most 64"),
            (["--expert-parallel", "--moe-tp", "2"], "--expert-parallel sets --moe-ep 8 --moe-tp 1"),
        ]:
            tp = "8" if "16" in more else "1" if "--expert-parallel" not in more else "8"
            code, msg = self.parse_fails(ONE[:7] + [tp] + more)
            self.assertEqual(code, 2, more)
            self.assertIn(want, msg, more)
        code, msg = self.parse_fails(["--attention-dp", "2"])
        self.assertIn("need --model", msg)

    def test_the_selecting_flags_of_a_layout(self):
        a = d.parse_args(ONE[:7] + ["1", "--attention-dp", "4", "--expert-parallel"])
        self.assertEqual(d.select_flags(a), " --dp-size 4 --enable-expert-parallel")
        a = d.parse_args(ONE[:7] + ["1", "--attention-dp", "2"])
        self.assertEqual(d.select_flags(a), " --dp-size 2")
        self.assertEqual(d.layout_flags(a), " --attention-dp 2 --moe-tp 2 --moe-ep 1")


# Trimmed Hugging Face configs as AIC ships them.
QWEN3_30B = {
    "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
    "head_dim": 128, "num_experts": 128, "moe_intermediate_size": 768, "num_experts_per_tok": 8,
    "vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": False, "intermediate_size": 6144,
}
DEEPSEEK_V3 = {
    "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
    "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "q_lora_rank": 1536,
    "n_routed_experts": 256, "n_shared_experts": 1, "first_k_dense_replace": 3, "moe_intermediate_size": 2048,
    "intermediate_size": 18432, "num_experts_per_tok": 8, "vocab_size": 129280, "max_position_embeddings": 163840,
    "tie_word_embeddings": False, "quantization_config": {"quant_method": "fp8"},
}


class Facts(unittest.TestCase):
    def test_moe_facts_match_the_shipped_profiles(self):
        f = d.facts_of_config("Qwen/Qwen3-30B-A3B", QWEN3_30B)
        # profiles/aic/qwen3-30b-a3b-*.json: the TP-only export's numbers.
        self.assertEqual((f["weight_bytes"], f["active_intermediate_size"]), (61064220672, 6144))
        self.assertEqual(f["expert_weight_bytes"], 48 * 128 * 3 * 2048 * 768 * 2)
        self.assertEqual(d.kv_bytes_per_token_per_rank(f, 1), 2 * 48 * 4 * 128 * 2)
        # Attention DP does not split a rank's KV; TP splits the heads.
        self.assertEqual(d.kv_bytes_per_token_per_rank(f, 2), 2 * 48 * 2 * 128 * 2)
        self.assertEqual(d.kv_bytes_per_token_per_rank(f, 8), 2 * 48 * 1 * 128 * 2)

    def test_latent_attention_caches_one_latent_per_rank_in_fp8(self):
        f = d.facts_of_config("deepseek-ai/DeepSeek-V3", DEEPSEEK_V3)
        self.assertTrue(f["kv_latent"] and f["moe"])
        self.assertEqual(d.kv_bytes_per_token_per_rank(f, 1), 61 * 576)
        self.assertEqual(d.kv_bytes_per_token_per_rank(f, 8), 61 * 576)
        self.assertEqual(f["expert_weight_bytes"], 58 * 256 * 3 * 7168 * 2048)
        # About 671B parameters in one byte each.
        self.assertTrue(660e9 < f["weight_bytes"] < 690e9, f["weight_bytes"])
        self.assertEqual(f["active_intermediate_size"], 9 * 2048)


class Names(unittest.TestCase):
    def test_gpu_slugs(self):
        for system, slug in [
            ("rtx_pro_6000_server", "rtxpro6000"),
            ("h100_sxm", "h100"),
            ("h100_pcie", "h100pcie"),
            ("gb200", "gb200"),
            ("l40s", "l40s"),
            ("a100_sxm", "a100"),
            ("b300_sxm", "b300"),
        ]:
            self.assertEqual(d.gpu_slug(system), slug)
            self.assertNotIn("-", d.gpu_slug(system))

    def test_models_resolve_by_slug_or_id_and_unknown_ones_are_refused(self):
        ids = ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B", "meta-llama/Meta-Llama-3.1-8B"]
        self.assertEqual(d.resolve_model("qwen3-8b", ids), ("qwen3-8b", "Qwen/Qwen3-8B"))
        self.assertEqual(d.resolve_model("meta-llama/Meta-Llama-3.1-8B", ids), ("llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B"))
        self.assertEqual(d.resolve_model("Qwen/Qwen3-0.6B", ids), ("qwen3-0.6b", "Qwen/Qwen3-0.6B"))
        self.assertEqual(d.resolve_model("qwen3-0.6b", ids), ("qwen3-0.6b", "Qwen/Qwen3-0.6B"))
        for bad in ["qwen9", "Qwen/Qwen9", ""]:
            with self.assertRaises(d.Refused) as cm:
                d.resolve_model(bad, ids)
            self.assertIn(f"--model {bad}: ", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
