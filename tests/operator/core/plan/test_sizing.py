"""GPU memory sizing: the documented formula, its monotonicity, and the Degraded verdict."""

from __future__ import annotations

import pytest
from docparser_operator.api.models import DocParser, DocParserSpec
from docparser_operator.core.plan import sizing
from docparser_operator.core.plan.children import Observed
from dp_helpers import CANARY_WEIGHTS, decide_on, docparser
from golden import Case

GIB = 1024**3


def _spec(**changes) -> DocParserSpec:
    resource = Case("deepseek-gateway-canary").resource()
    spec = resource["spec"]
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            spec[section][field] = value
        else:
            spec[section] = value
    return DocParser.from_resource(resource).spec


def test_token_constants_match_the_runtime_tiling() -> None:
    tiling = pytest.importorskip("docparser_runtime.preprocess.tiling")
    assert sizing.GLOBAL_VIEW_TOKENS == tiling.GLOBAL_VIEW_TOKENS
    assert sizing.TILE_TOKENS == tiling.TILE_TOKENS
    assert sizing.IMAGE_SEPARATOR_TOKENS == tiling.IMAGE_SEPARATOR_TOKENS
    assert sizing.MIN_TILES == tiling.MIN_TILES
    for tier in range(7):
        # The largest page at this tier, planned by the runtime, costs what sizing assumes.
        worst = max(
            tiling.plan_tiles(w, h, tier).vision_tokens
            for w, h in [(4000, 4000), (3000, 4000), (4000, 3000), (2000, 6000), (6000, 2000)]
        )
        assert worst <= sizing.vision_tokens(tier)
    assert [sizing.vision_tokens(t) for t in range(7)] == [256, 256, 544, 688, 832, 976, 1120]


def test_formula_by_hand_for_tier6_batch8() -> None:
    est = sizing.estimate_gpu_memory("deepseek-ocr2", tier=6, max_batch_size=8, max_new_tokens=4096)
    seq = 1120 + 1 + sizing.PROMPT_TOKENS + 4096
    assert sizing.KV_BYTES_PER_TOKEN == 2 * 12 * 10 * 128 * 2
    assert est.kv_cache == 8 * seq * 61_440
    assert est.vision_activations == 8 * 1120 * 393_216
    assert est.weights == int(3.39e9 * 2)
    body = est.weights + est.kv_cache + est.vision_activations
    assert est.total == body + int(body * 0.10) + int(1.5 * GIB)
    assert 12 * GIB < est.total < 20 * GIB  # a 3B OCR model with a full batch: one 24Gi GPU


@pytest.mark.parametrize("knob", ["tier", "max_batch_size", "max_new_tokens"])
def test_estimate_grows_with_every_knob(knob: str) -> None:
    base = {"tier": 2, "max_batch_size": 2, "max_new_tokens": 512}
    small = sizing.estimate_gpu_memory("deepseek-ocr2", **base).total
    bigger = sizing.estimate_gpu_memory("deepseek-ocr2", **{**base, knob: base[knob] * 3}).total
    assert bigger > small


def test_cpu_engine_needs_no_gpu_memory() -> None:
    est = sizing.estimate_gpu_memory("rapidocr", tier=6, max_batch_size=64, max_new_tokens=8192)
    assert est.total == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [("40Gi", 40 * GIB), ("80G", 80 * 10**9), ("1.5Gi", int(1.5 * GIB)), ("512Mi", 512 * 2**20)],
)
def test_parse_quantity(text: str, expected: int) -> None:
    assert sizing.parse_quantity(text) == expected


def test_no_problem_when_memory_fits_or_is_unknown() -> None:
    assert sizing.gpu_memory_problem(_spec()) is None  # 40Gi holds tier 6 x 8
    spec = _spec(resources={"gpu": 1})  # no gpuMemory declared: nothing to check
    assert sizing.gpu_memory_problem(spec) is None


def test_degraded_reason_when_the_worst_case_does_not_fit() -> None:
    spec = _spec(resources={"gpu": 1, "gpuMemory": "16Gi"}, runtime__maxBatchSize=16)
    problem = sizing.gpu_memory_problem(spec)
    assert problem is not None
    reason, message = problem
    assert reason == "InsufficientGPUMemory"
    assert "16Gi" in message and "tier 6" in message and "maxBatchSize 16" in message
    fits = sizing.largest_batch_that_fits(spec, 16 * GIB)
    assert 1 <= fits < 16
    assert f"lower runtime.maxBatchSize to {fits}" in message
    # The advice is right: the suggested batch fits, one more does not.
    ok = sizing.estimate_gpu_memory(
        "deepseek-ocr2", tier=6, max_batch_size=fits, max_new_tokens=4096
    )
    too_big = sizing.estimate_gpu_memory(
        "deepseek-ocr2", tier=6, max_batch_size=fits + 1, max_new_tokens=4096
    )
    assert ok.total <= 16 * GIB < too_big.total


def test_gpu_too_small_even_for_one_page() -> None:
    spec = _spec(resources={"gpu": 1, "gpuMemory": "8Gi"})
    reason, message = sizing.gpu_memory_problem(spec)
    assert reason == "InsufficientGPUMemory" and "use a GPU with more memory" in message


def test_host_memory_numbers_are_the_runtimes() -> None:
    """The operator sizes a pod with the runtime's own equation and numbers, and the
    runtime, under the limit the operator sets, gives admission at least the work the pod
    was sized for."""
    host_memory = pytest.importorskip("docparser_runtime.sizing.host_memory")
    cgroup_memory = pytest.importorskip("docparser_runtime.sizing.cgroup_memory")
    settings = pytest.importorskip("docparser_runtime.settings")
    assert settings.Settings().decode_workers == sizing.HOST_DECODERS
    assert sizing.HOST_DECODER_BYTES == host_memory.DECODER_BYTES
    assert sizing.HOST_HEADROOM == host_memory.HEADROOM
    assert sizing.HOST_WORK_BYTES == host_memory.DEFAULT_WORK_BYTES
    specs = {
        "rapidocr": DocParser.from_resource(Case("rapidocr-minimal").resource()).spec,
        "deepseek-ocr2": _spec(),
    }
    for engine, spec in specs.items():
        assert spec.engine == engine
        assert sizing.HOST_SERVER_BYTES[engine] == host_memory.SERVER_BYTES[engine]
        assert sizing.HOST_ENGINE_PAGE_PIXELS[engine] == host_memory.engine_page_pixels(engine)
        assert (
            sizing.HOST_ENGINE_BYTES_PER_PIXEL[engine] == host_memory.ENGINE_BYTES_PER_PIXEL[engine]
        )
        pod = sizing.host_serving_bytes(engine)
        assert pod == host_memory.pod_memory_bytes(engine, 2, host_memory.DEFAULT_WORK_BYTES)
        limit = sizing.parse_quantity(sizing.host_memory_request(spec))
        budget = host_memory.plan_budget(cgroup_memory.MemoryLimit(limit, "pod"), engine, 2)
        assert budget.work_bytes >= host_memory.DEFAULT_WORK_BYTES


def test_host_memory_request_is_derived_unless_set() -> None:
    assert sizing.host_memory_request(_spec()) == "11Gi"  # 6.78 GB x 1.25 + 3.05 GiB, rounded up
    assert sizing.host_memory_request(_spec(resources={"memory": "32Gi"})) == "32Gi"
    minimal = DocParser.from_resource(Case("rapidocr-minimal").resource()).spec
    assert sizing.host_memory_request(minimal) == "3Gi"


@pytest.mark.slow
@pytest.mark.torch
def test_kv_bytes_per_token_match_the_real_decoder_attention() -> None:
    """Run the transformers DeepSeek-OCR-2 decoder (real widths: hidden 1280, 10 KV heads of 128,
    no MLA; 2 layers and a tiny vocab to stay cheap) and weigh the cache it really keeps."""
    torch = pytest.importorskip("torch")
    config_mod = pytest.importorskip(
        "transformers.models.deepseek_ocr2.configuration_deepseek_ocr2"
    )
    modeling = pytest.importorskip("transformers.models.deepseek_ocr2.modeling_deepseek_ocr2")
    layers, batch, tokens = 2, 3, 7
    config = config_mod.DeepseekOcr2TextConfig(
        hidden_size=1280,
        num_attention_heads=sizing.DECODER_KV_HEADS,
        num_key_value_heads=sizing.DECODER_KV_HEADS,
        num_hidden_layers=layers,
        intermediate_size=256,
        moe_intermediate_size=64,
        n_routed_experts=2,
        num_experts_per_tok=1,
        n_shared_experts=1,
        mlp_layer_types=["dense", "sparse"],
        vocab_size=512,
    )
    assert config.head_dim == sizing.DECODER_HEAD_DIM
    model = modeling.DeepseekOcr2TextModel(config).to(torch.bfloat16).eval()
    with torch.no_grad():
        out = model(input_ids=torch.randint(0, 512, (batch, tokens)), use_cache=True)
    cache = out.past_key_values
    cached = sum(
        t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)
    )
    per_token_per_layer = cached / (batch * tokens * layers)
    assert per_token_per_layer * sizing.DECODER_LAYERS == sizing.KV_BYTES_PER_TOKEN


def test_a_canary_runtime_override_is_sized_on_its_own() -> None:
    """A canary that raises maxBatchSize past the GPU is Degraded with a message naming the
    canary, while the same spec without the override is fine."""
    fine = docparser("inv", canary={"weights": CANARY_WEIGHTS, "weight": 10})
    fine["metadata"].update(uid="uid-1", namespace="ocr")
    assert not decide_on(fine, Observed({}, []), previous_weight=0).problems
    heavy = docparser(
        "inv", canary={"weights": CANARY_WEIGHTS, "weight": 10, "runtime": {"maxBatchSize": 256}}
    )
    heavy["spec"]["resources"]["gpuMemory"] = "40Gi"
    heavy["metadata"].update(uid="uid-1", namespace="ocr")
    problems = decide_on(heavy, Observed({}, []), previous_weight=0).problems
    assert [(p.reason, p.message.split(":")[0]) for p in problems] == [
        ("InsufficientGPUMemory", "canary")
    ]
