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
