"""Tests of the Python module trainsim (docs/python.md), run by ctest (python.module) with
build/python on PYTHONPATH. Expected values come from the scenario files and closed forms
(tokens per iteration, the summary's own identities), never from numbers a run printed."""
import concurrent.futures
import json
import os
import tempfile
import unittest

import trainsim

SOURCE = os.environ.get("TRAINSIM_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SMALL = os.path.join(SOURCE, "scenarios", "gpt-1.7b_tp1_pp1_dp32.yaml")
LLAMA_HF = os.path.join(SOURCE, "scenarios", "h100", "hf", "llama3-8b.config.json")


def small_dict(**parallel):
    """A one-node GPT whose simulation takes a fraction of a second."""
    p = {"micro_batch_size": 1, "global_batch_size": 8, "precision": "bf16"}
    p.update(parallel)
    return {
        "name": "py-small",
        "model": {"num_layers": 4, "hidden_size": 1024, "num_attention_heads": 16,
                  "seq_length": 1024, "padded_vocab_size": 51200},
        "parallel": p,
        "cluster": {"system": "dgx-a100-80gb", "nodes": 1},
    }


class Simulate(unittest.TestCase):
    def test_file_scenario_returns_the_summary(self):
        s = trainsim.simulate(SMALL)
        with open(os.path.join(SOURCE, "docs", "summary.schema.json")) as f:
            schema = json.load(f)
        for key in schema.get("required", []):
            self.assertIn(key, s)
        self.assertEqual(s["name"], "gpt-1.7b_tp1_pp1_dp32")
        # Tokens per iteration: global batch 512 x sequence 2048 (the scenario file).
        self.assertAlmostEqual(s["tokens_per_s"] * s["iteration_time_s"], 512 * 2048,
                               delta=512 * 2048 * 1e-6)
        self.assertNotIn("trace", s)
        self.assertNotIn("memory_timeline", s)

    def test_same_summary_as_the_command_line(self):
        cli = os.environ.get("TRAINSIM_CLI")
        if not cli:
            self.skipTest("TRAINSIM_CLI not set (ctest sets it)")
        import subprocess
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "s.json")
            subprocess.run([cli, "simulate", SMALL, "--set", "parallel.micro_batch_size=8",
                            "--json", out], check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                expected = json.load(f)
        self.assertEqual(trainsim.simulate(SMALL, {"parallel.micro_batch_size": 8}), expected)

    def test_dict_scenario_and_overrides(self):
        base = trainsim.simulate(small_dict())
        self.assertEqual(base["name"], "py-small")
        more = trainsim.simulate(small_dict(), overrides={"parallel.global_batch_size": 16})
        # Twice the microbatches on one pipeline stage: more time, same tokens per microbatch.
        self.assertGreater(more["iteration_time_s"], base["iteration_time_s"])
        self.assertAlmostEqual(more["tokens_per_s"] * more["iteration_time_s"], 16 * 1024,
                               delta=16 * 1024 * 1e-6)

    def test_trace_and_memory_timeline(self):
        s = trainsim.simulate(small_dict(tensor_model_parallel_size=8), trace=True,
                              memory_timeline=True)
        self.assertIn("traceEvents", s["trace"])
        rows = s["memory_timeline"]
        self.assertTrue(rows)
        gpu = [r for r in rows if r["device"] == "gpu"]
        self.assertTrue(gpu)
        for r in rows[:50]:
            cats = [v for k, v in r.items() if k not in ("time_s", "device", "id", "total")]
            self.assertEqual(sum(cats), r["total"])
        # The timeline's largest GPU total is the summary's peak (one memory model).
        self.assertEqual(max(r["total"] for r in gpu), s["peak_memory_bytes"])

    def test_threads_run_a_sweep(self):
        """Simulations release the GIL and fork one child each: four threads at once give the
        same summaries as one after the other."""
        cases = [small_dict(micro_batch_size=m, tensor_model_parallel_size=t, global_batch_size=64)
                 for m in (1, 2) for t in (1, 2)]
        serial = [trainsim.simulate(c)["iteration_time_s"] for c in cases]
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            threaded = list(pool.map(lambda c: trainsim.simulate(c)["iteration_time_s"], cases))
        self.assertEqual(serial, threaded)


class Errors(unittest.TestCase):
    def test_bad_value_names_file_field_and_value(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bad.yaml")
            with open(SMALL) as f:
                text = f.read().replace("micro_batch_size: 16", "micro_batch_size: -3")
            with open(path, "w") as f:
                f.write(text)
            with self.assertRaises(trainsim.InputError) as cm:
                trainsim.simulate(path)
        e = cm.exception
        self.assertIsInstance(e, ValueError)
        self.assertEqual(e.file, path)
        self.assertEqual(e.field, "parallel.micro_batch_size")
        self.assertEqual(e.value, "-3")
        self.assertIsInstance(e.line, int)

    def test_unknown_override_key(self):
        with self.assertRaises(trainsim.InputError) as cm:
            trainsim.simulate(SMALL, overrides={"parallel.micro_batch_sise": 2})
        self.assertIn("micro_batch_size", str(cm.exception))
        self.assertEqual(cm.exception.file, SMALL)
        self.assertEqual(cm.exception.field, "parallel.micro_batch_sise")

    def test_rule_between_keys_names_its_subject(self):
        with self.assertRaises(trainsim.InputError) as cm:
            trainsim.simulate(small_dict(), overrides={"parallel.tensor_model_parallel_size": 3})
        # 16 heads do not split over 3 ranks (the message names both keys).
        self.assertEqual(cm.exception.file, "<dict>")
        self.assertEqual(cm.exception.field, "model.num_attention_heads")
        self.assertEqual(cm.exception.value, "16")
        self.assertIn("parallel.tensor_model_parallel_size (3)", str(cm.exception))

    def test_override_type_error(self):
        with self.assertRaises(trainsim.InputError) as cm:
            trainsim.simulate(small_dict(), overrides={"model.hidden_size": "abc"})
        self.assertEqual((cm.exception.file, cm.exception.field, cm.exception.value),
                         ("<dict>", "model.hidden_size", "abc"))

    def test_dict_error_names_the_dict(self):
        bad = small_dict()
        bad["model"]["hidden_size"] = 0
        with self.assertRaises(trainsim.InputError) as cm:
            trainsim.simulate(bad)
        self.assertEqual(cm.exception.file, "<dict>")
        self.assertEqual(cm.exception.field, "model.hidden_size")
        self.assertEqual(cm.exception.value, "0")

    def test_missing_file(self):
        with self.assertRaises(trainsim.InputError) as cm:
            trainsim.load_scenario("/nonexistent/s.yaml")
        self.assertIn("/nonexistent/s.yaml", str(cm.exception))

    def test_unsupported_python_value(self):
        with self.assertRaises(trainsim.InputError):
            trainsim.simulate(small_dict(), overrides={"parallel.micro_batch_size": object()})


class LoadAndImport(unittest.TestCase):
    def test_load_scenario_applies_overrides(self):
        s = trainsim.load_scenario(SMALL, overrides={"parallel.micro_batch_size": 8})
        self.assertEqual(s["parallel"]["micro_batch_size"], 8)
        self.assertEqual(s["model"]["hidden_size"], 2304)
        self.assertEqual(s["parallel"]["precision"], "fp16")
        d = trainsim.load_scenario(small_dict())
        self.assertEqual(d["model"]["num_layers"], 4)

    def test_import_hf(self):
        with open(LLAMA_HF) as f:
            cfg = json.load(f)
        m = trainsim.import_hf(LLAMA_HF)
        self.assertEqual(m["num_layers"], cfg["num_hidden_layers"])
        self.assertEqual(m["hidden_size"], cfg["hidden_size"])
        self.assertEqual(m["num_query_groups"], cfg["num_key_value_heads"])
        # vocab padded to a multiple of 128 (Megatron's --make-vocab-size-divisible-by).
        self.assertEqual(m["padded_vocab_size"], -(-cfg["vocab_size"] // 128) * 128)
        self.assertEqual(trainsim.import_hf(cfg), m)

    def test_import_hf_refusal(self):
        cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
               "num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 3,
               "intermediate_size": 14336, "vocab_size": 32000, "hidden_act": "silu"}
        with self.assertRaises(trainsim.InputError) as cm:
            trainsim.import_hf(cfg)
        self.assertEqual(cm.exception.file, "<dict>")


class Plan(unittest.TestCase):
    def test_plan_ranks_candidates(self):
        sc = small_dict()
        sc["plan"] = {"tensor_model_parallel_size": [1, 2], "pipeline_model_parallel_size": [1],
                      "micro_batch_size": [1], "recompute_granularity": ["none"]}
        table = trainsim.plan(sc, top=4, jobs=2)
        self.assertTrue(table)
        rates = [c["tokens_per_s"] for c in table if c.get("simulated")]
        self.assertEqual(rates, sorted(rates, reverse=True))

    def test_plan_error(self):
        sc = small_dict()
        sc["plan"] = {"tensor_model_parallel_size": []}
        with self.assertRaises(trainsim.InputError) as cm:
            trainsim.plan(sc)
        self.assertIn("plan.tensor_model_parallel_size", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
