"""Hunt for KV cache underflow (issue 38): many features at once, both fast-forward modes, with
KVCache.used_blocks / cached_blocks checked at every assignment.

PYTHONPATH=$PWD [HEAVY=1] python benchmarks/kv_hunt.py START COUNT [OUTDIR]

HEAVY=1 draws cohort-eligible runs (many requests, no speculation, prefix cache, timeouts or
stages) under autoscaling, async scheduling and small KV caches.
"""

from __future__ import annotations

import json
import os
import random
import sys
import traceback
from pathlib import Path

import cbsim
from cbsim.errors import CbsimError
from cbsim.kvcache import KVCache
from cbsim.preflight import preflight
from tests import test_fuzz_features as ff
from tests import test_fuzz_valid_scenarios as fv


class KVInvariant(AssertionError):
    pass


def _instrument() -> None:
    for name in ("used_blocks", "cached_blocks"):
        slot = KVCache.__dict__[name]

        def getter(self, slot=slot):
            return slot.__get__(self, KVCache)

        def setter(self, value, slot=slot, name=name):
            if sys._getframe(1).f_code.co_name == "apply_spec_run":
                slot.__set__(self, value)  # transient with shared prefixes: checked after settling
                return
            if value < 0 or (name == "used_blocks" and value > self.total_blocks):
                raise KVInvariant(
                    f"{name} set to {value} (total {self.total_blocks}, "
                    f"used {slot.__get__(self, KVCache) if name == 'used_blocks' else self.used_blocks})\n"
                    + "".join(traceback.format_stack(limit=12))
                )
            slot.__set__(self, value)

        setattr(KVCache, name, property(getter, setter))


_instrument()


def _check_after_spec_run() -> None:
    import cbsim.engine as engine

    inner = engine.apply_spec_run

    def wrapped(spec, index, sched, *args, **kw):
        inner(spec, index, sched, *args, **kw)
        kv = sched.kv
        if kv.used_blocks < 0 or kv.used_blocks > kv.total_blocks or kv.cached_blocks < 0:
            raise KVInvariant(
                f"after apply_spec_run used {kv.used_blocks} cached {kv.cached_blocks} "
                f"total {kv.total_blocks}"
            )

    engine.apply_spec_run = wrapped


_check_after_spec_run()
_maybe = fv._maybe

HEAVY = bool(os.environ.get("HEAVY"))


def extras(rng: random.Random, data: dict) -> None:
    wl = data["workload"]
    cl = data["cluster"]
    if _maybe(rng, 0.6):
        cl["model"] = "llama-3.2-1b"
        cl.pop("dp", None), cl.pop("ep", None), cl.pop("pp", None)
        if cl.get("dtype") in ("mxfp4",):
            cl["dtype"] = "bf16"
    sched = data.get("scheduler") or {}
    if "kind" not in sched or _maybe(rng, 0.5):
        sched = {"kind": rng.choice(["sarathi", "orca", "prefill_first", "static"])}
    if _maybe(rng, 0.6):
        sched["max_batch_size"] = rng.randint(2, 128)
        sched["max_batched_tokens"] = rng.randint(2, 512)
        if sched["kind"] == "orca" and _maybe(rng, 0.5):
            sched["chunked_prefill"] = True
    if _maybe(rng, 0.6):
        sched["async_scheduling"] = True
    if _maybe(rng, 0.3):
        sched["block_size"] = rng.choice([1, 8, 16, 32])
    data["scheduler"] = sched
    if (
        _maybe(rng, 0.6)
        and (data.get("speculative") or {}).get("proposer", {}).get("kind") != "mtp"
    ):
        spec = fv._speculative(rng)
        spec["proposer"] = {"kind": rng.choice(["eagle", "ngram", "draft_model"])}
        if spec["proposer"]["kind"] == "draft_model":
            spec["proposer"]["model"] = "llama-3.2-1b"
        if _maybe(rng, 0.4):
            spec["policy"] = rng.choice(
                [
                    {
                        "kind": "goodput",
                        "k_max": rng.randint(1, 8),
                        "per_request": _maybe(rng, 0.5),
                    },
                    {"kind": "batch_table", "preset": "vllm-dsd-example"},
                    {"kind": "adaptive_hysteresis"},
                    {"kind": "fixed", "k": rng.randint(1, 8)},
                ]
            )
        if _maybe(rng, 0.4):
            spec["acceptance"] = {
                "kind": "per_request",
                "mean": round(rng.uniform(0.1, 0.95), 3),
                "concentration": round(rng.uniform(0.5, 50), 2),
            }
        data["speculative"] = spec
    fv._load_generators(rng, data)
    fv._rate_curve(rng, data)
    if "pools" not in cl and "disaggregation" not in cl and _maybe(rng, 0.6):
        cl.pop("replicas", None)
        cl["autoscale"] = ff._autoscale(rng)
        ff._quiet_spells(rng, wl)
    if _maybe(rng, 0.4):
        cl["prefix_caching"] = True
        if _maybe(rng, 0.4):
            cl["kv_offload"] = {
                "cpu_gib": round(10 ** rng.uniform(-2, 1), 3),
                "bandwidth_gib_s": round(10 ** rng.uniform(0, 2), 2),
            }
    if _maybe(rng, 0.3):
        ff._timed_client(rng, data)
    if _maybe(rng, 0.5):
        ff._tight_kv(rng, data)
    if "num_requests" in wl and _maybe(rng, 0.5):
        wl["num_requests"] = min(int(wl["num_requests"]) * 3, 120)


def heavy(rng: random.Random, name: str) -> dict:
    """Cohort-eligible: many requests, no speculation, prefix cache, timeouts or stages."""
    rate = round(10 ** rng.uniform(1, 3), 2)
    wl = {
        "num_requests": rng.randint(80, 500),
        "arrival": rng.choice(
            [
                {"kind": "poisson", "rate": rate},
                {"kind": "gamma", "rate": rate, "cv": round(rng.uniform(0.5, 4), 2)},
                {"kind": "offline"} if False else {"kind": "poisson", "rate": rate * 10},
            ]
        ),
        "prompt_tokens": fv._length(rng, 1, 800),
        "output_tokens": fv._length(rng, 1, 300),
    }
    for k in ("prompt_tokens", "output_tokens"):
        if wl[k]["kind"] == "empirical":
            wl[k] = {"kind": "uniform", "low": 1, "high": 300}
    cl = {
        "model": rng.choice(["llama-3.2-1b", "llama-3.2-1b", "llama-3.1-8b"]),
        "gpu": rng.choice(["h100-sxm", "a100-80gb", "l40s", "h200"]),
        "tp": 1,
        "engine": rng.choice(["vllm", "sglang", "tensorrt-llm", "none"]),
    }
    sched = {"kind": rng.choice(["sarathi", "prefill_first", "sarathi", "orca", "static"])}
    if _maybe(rng, 0.5):
        sched["max_batch_size"] = rng.randint(16, 512)
        sched["max_batched_tokens"] = rng.randint(sched["max_batch_size"], 8192)
    if _maybe(rng, 0.5):
        sched["async_scheduling"] = True
    if _maybe(rng, 0.3):
        sched["block_size"] = rng.choice([1, 8, 16, 32])
    data = {
        "name": name,
        "seed": rng.randint(0, 2**31),
        "workload": wl,
        "cluster": cl,
        "scheduler": sched,
    }
    if _maybe(rng, 0.7):
        cl["autoscale"] = ff._autoscale(rng)
        if _maybe(rng, 0.5):
            ff._quiet_spells(rng, wl)
    else:
        cl["replicas"] = rng.choice([1, 2])
    if _maybe(rng, 0.2):
        fv._rate_curve(rng, data)
    if _maybe(rng, 0.6):
        ff._tight_kv(rng, data)
    if _maybe(rng, 0.2):
        data["horizon_s"] = round(10 ** rng.uniform(-1, 1), 3)
    return data


def make(index: int) -> dict | None:
    rng = random.Random(f"kv-hunt/{index}")
    if HEAVY:
        for _ in range(60):
            data = heavy(rng, f"h{index}")
            try:
                preflight(cbsim.load_scenario(data))
            except Exception:
                continue
            return data
        return None
    for _ in range(60):
        if _maybe(rng, 0.5):
            data = fv.draw_scenario(rng, f"h{index}")
        else:
            feature = rng.choice(
                [
                    "pools",
                    "closed_loop",
                    "cpu_tier",
                    "sessions",
                    "mtp",
                    "moe",
                    "engine_profile",
                    "prefix_trace",
                    "closed_loop",
                ]
            )
            data = ff.draw_scenario(rng, feature, f"h{index}")
        try:
            extras(rng, data)
            preflight(cbsim.load_scenario(data))
        except CbsimError:
            continue
        except Exception:
            continue
        return data
    return None


def main() -> None:
    start, count = int(sys.argv[1]), int(sys.argv[2])
    out = Path(sys.argv[3] if len(sys.argv) > 3 else "kv_hunt_out")
    out.mkdir(parents=True, exist_ok=True)
    ran = hits = other = 0
    for i in range(start, start + count):
        data = make(i)
        if data is None:
            continue
        for ffw in (True, False):
            d = {**data, "fast_forward": ffw}
            try:
                with fv.alarm(60):
                    cbsim.simulate(cbsim.load_scenario(d))
                ran += 1
            except fv.Hang:
                other += 1
                print(f"#{i} ff={ffw} HANG", flush=True)
            except KVInvariant as err:
                hits += 1
                (out / f"hit_{i}_{ffw}.json").write_text(json.dumps(d, indent=1))
                (out / f"hit_{i}_{ffw}.txt").write_text(str(err))
                print(f"#{i} ff={ffw} HIT {str(err).splitlines()[0]}", flush=True)
            except Exception as err:
                other += 1
                (out / f"err_{i}_{ffw}.json").write_text(json.dumps(d, indent=1))
                (out / f"err_{i}_{ffw}.txt").write_text(traceback.format_exc())
                print(f"#{i} ff={ffw} ERR {type(err).__name__}: {str(err)[:200]}", flush=True)
        if i % 20 == 0:
            print(f"progress {i} ran={ran} hits={hits} other={other}", flush=True)
    print(f"done ran={ran} hits={hits} other={other}", flush=True)


if __name__ == "__main__":
    main()
