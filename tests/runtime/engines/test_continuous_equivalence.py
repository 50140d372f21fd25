"""Continuous batching is greedy decoding: every page's tokens under it equal the same page
generated alone with ``generate``, on the tiny real-architecture model in fp32.

Pages join a running batch mid-way (different tiers, so different prompt lengths and real
left padding), leave it at their own ``max_new_tokens`` or EOS, are evicted and resumed by
recomputing their cache, and have the repetition guard trip, with the same trip counts.
"""

from __future__ import annotations

import pytest
from docparser_runtime.engines.base import ParseOptions
from docparser_runtime.engines.deepseek_ocr2.engine import DeepseekOcr2Engine
from docparser_runtime.engines.stepping import PageRun, RunningBatch, projected_peak_tokens
from tiny_deepseek import generated_ids, make_page

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def guarded(tiny_model_dir):
    """A short n-gram ban, so the random model's loops trip it within a few tokens."""
    engine = DeepseekOcr2Engine(tiny_model_dir, device="cpu", no_repeat_ngram_size=3)
    engine.load()
    yield engine
    engine.close()


def mixed_pages():
    return [
        (make_page(0, 900, 1200, 2), ParseOptions(tier=2, max_new_tokens=30)),
        (make_page(1, 500, 400, 0), ParseOptions(tier=0, mode="text", max_new_tokens=12)),
        (make_page(2, 1500, 800, 3), ParseOptions(tier=3, mode="grounding", max_new_tokens=25)),
        (make_page(3, 640, 480, 0), ParseOptions(tier=0, max_new_tokens=18)),
        (make_page(4, 700, 900, 0), ParseOptions(tier=0, max_new_tokens=9, min_new_tokens=9)),
    ]


def drive(engine, batch: RunningBatch, runs: list[PageRun], joins: dict[int, list[int]],
          evict_at: int | None = None) -> list[list[int]]:  # fmt: skip
    """Run ``batch`` the way the scheduler does: at step s the pages ``joins[s]`` join, and
    ended pages leave before the next step. Returns the batch size seen at each step."""
    sizes: list[list[int]] = []
    step = 0
    while step <= max(joins) or batch.runs:
        if step in joins:
            batch.join([runs[i] for i in joins[step]])
        if step == evict_at:
            newest = list(batch.runs)[-2:]
            batch.leave(newest)  # as after an out-of-memory error: they resume later
            batch.join(newest)
        batch.leave([run for run in batch.runs if engine.run_done(run)])
        sizes.append([runs.index(run) for run in batch.runs])
        batch.step()
        step += 1
    return sizes


def test_pages_joining_leaving_and_resuming_equal_generate_alone(guarded):
    specs = mixed_pages()
    alone = [generated_ids(guarded, [page], options)[0] for page, options in specs]
    runs = [guarded.new_run(page, options, None) for page, options in specs]
    estimated = [run.prompt_tokens for run in runs]
    batch = guarded.new_batch()
    sizes = drive(guarded, batch, runs, joins={0: [0, 1], 3: [2], 7: [3, 4]}, evict_at=9)
    assert [run.generated for run in runs] == alone
    assert [run.prompt_tokens for run in runs] == estimated  # admission saw the real lengths
    # The batch really changed shape: pages joined mid-way, and left before the longest.
    assert sizes[0] == [0, 1] and 2 in sizes[3] and {3, 4} <= set(sizes[7])
    assert any(1 not in s for s in sizes[1:] if 0 in s)
    assert batch.padded_tokens == 0
    # The guard steered some pages, with the same counts as each page's generate alone.
    results = [guarded.finish_run(run) for run in runs]
    singles = [guarded.infer_batch([page], options)[0] for page, options in specs]
    assert [r.repetition_trips for r in results] == [r.repetition_trips for r in singles]
    assert any(r.repetition_trips for r in results)
    assert results == singles  # content, blocks, truncation and token counts too


def test_a_page_ending_at_eos_leaves_and_the_others_run_on(tiny_model_dir):
    engine = DeepseekOcr2Engine(tiny_model_dir, device="cpu", no_repeat_ngram_size=0)
    engine.load()
    specs = mixed_pages()[:3]
    free = [generated_ids(engine, [page], options)[0] for page, options in specs]
    stop_token = free[0][4]
    engine._eos_ids = {stop_token}  # a token the model really emits, as in test_deepseek_ocr2
    engine._drop_ids.add(stop_token)
    alone = [generated_ids(engine, [page], options)[0] for page, options in specs]
    runs = [engine.new_run(page, options, None) for page, options in specs]
    drive(engine, engine.new_batch(), runs, joins={0: [0, 1, 2]})
    for run, ids in zip(runs, alone, strict=True):
        cut = next((i for i, t in enumerate(ids) if t == stop_token), len(ids) - 1)
        assert run.generated == ids[: cut + 1]  # generate pads after EOS; the batch stops
    assert runs[0].generated[-1] == stop_token and len(runs[0].generated) <= 5
    assert engine.finish_run(runs[0]).truncated is False


def test_min_new_tokens_keeps_eos_away_like_generate(tiny_model_dir):
    engine = DeepseekOcr2Engine(tiny_model_dir, device="cpu", no_repeat_ngram_size=0)
    engine.load()
    page, options = mixed_pages()[1]
    stop_token = generated_ids(engine, [page], options)[0][1]
    engine._eos_ids = {stop_token}
    held = ParseOptions(tier=0, mode="text", max_new_tokens=12, min_new_tokens=6)
    alone = generated_ids(engine, [page], held)[0]
    run = engine.new_run(page, held, None)
    drive(engine, engine.new_batch(), [run], joins={0: [0]})
    assert stop_token not in run.generated[:6]
    assert run.generated == alone[: len(run.generated)]


def test_a_stream_in_the_batch_sends_its_text_and_stops_when_told(guarded):
    (page, options), (other, other_options) = mixed_pages()[0], mixed_pages()[3]
    deltas: list[str] = []
    run = guarded.new_run(page, options, lambda d: deltas.append(d) or len(deltas) >= 4)
    mate = guarded.new_run(other, other_options, None)
    drive(guarded, guarded.new_batch(), [run, mate], joins={0: [1], 2: [0]})
    result = guarded.finish_run(run)
    assert len(deltas) == 4 and result.truncated
    assert len(run.generated) < options.max_new_tokens
    assert mate.generated == generated_ids(guarded, [other], other_options)[0]
    full: list[str] = []
    whole = guarded.new_run(page, options, lambda d: full.append(d) is not None)
    drive(guarded, guarded.new_batch(), [whole], joins={0: [0]})
    from docparser_runtime.engines.deepseek_ocr2.grounding import clean_content

    assert clean_content("".join(full)) == guarded.finish_run(whole).content


def test_projected_peak_is_the_worst_case_of_right_aligned_pages():
    assert projected_peak_tokens([]) == 0
    assert projected_peak_tokens([(100, 0)]) == 100
    # One page: it grows by one slot per step.
    assert projected_peak_tokens([(100, 50)]) == 150
    # A long prompt that ends soon and a short one that runs long: the padding column
    # goes when the long prompt leaves, so the peak is 2 x 510, not 2 x 910.
    assert projected_peak_tokens([(500, 10), (100, 400)]) == max(2 * 510, 1 * 500)
    assert projected_peak_tokens([(500, 400), (100, 400)]) == 2 * 900
