"""Generation glue: incremental detokenising, the n-gram guard, stopping, the streamer."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from docparser_runtime.engines.deepseek_ocr2.generation import (  # noqa: E402
    IncrementalDecoder,
    StopOnEvent,
    TokenQueueStreamer,
    WindowedNoRepeatNGram,
    run_in_thread,
)

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def tokenizer():
    from tiny_deepseek import _build_tokenizer

    return _build_tokenizer()


def test_incremental_decoder_holds_back_split_characters(tokenizer):
    text = "Tab 表格 é <|ref|>title<|/ref|> ok"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    decoder = IncrementalDecoder(lambda x: tokenizer.decode(x, skip_special_tokens=False))
    deltas = [decoder.push(i) for i in ids] + [decoder.flush()]
    assert "".join(deltas) == text
    assert all("\ufffd" not in d for d in deltas)
    # "表" is three byte tokens: nothing is emitted until the character is complete.
    assert "表" in deltas and "" in deltas


def test_incremental_decoder_flushes_an_incomplete_tail(tokenizer):
    ids = tokenizer("é", add_special_tokens=False)["input_ids"]
    decoder = IncrementalDecoder(lambda x: tokenizer.decode(x))
    assert decoder.push(ids[0]) == ""
    assert decoder.flush() == "\ufffd"  # the model stopped mid-character: say so


def _scores(vocab=10):
    return torch.zeros((1, vocab))


def test_ngram_guard_bans_the_token_that_would_repeat():
    guard = WindowedNoRepeatNGram(ngram_size=3, window=50, prompt_length=2)
    # prompt [9, 9]; generated 1 2 3 1 2 -> next 3 would repeat (1, 2, 3)
    ids = torch.tensor([[9, 9, 1, 2, 3, 1, 2]])
    out = guard(ids, _scores())
    assert out[0, 3] == -float("inf")
    assert (out[0, [0, 1, 2, 4, 5, 6, 7, 8, 9]] == 0).all()


def test_ngram_guard_ignores_prompt_window_and_whitelist():
    prompt_only = WindowedNoRepeatNGram(3, window=50, prompt_length=5)
    ids = torch.tensor([[1, 2, 3, 1, 2, 7, 1, 2]])  # (1,2,3) only in the prompt
    assert torch.isfinite(prompt_only(ids, _scores())).all()

    short_window = WindowedNoRepeatNGram(2, window=2, prompt_length=0)
    ids = torch.tensor([[4, 5, 0, 0, 0, 0, 4]])  # (4,5) is older than the window
    assert torch.isfinite(short_window(ids, _scores())).all()

    whitelisted = WindowedNoRepeatNGram(2, window=50, prompt_length=0, whitelist_token_ids={5})
    ids = torch.tensor([[4, 5, 4]])
    assert torch.isfinite(whitelisted(ids, _scores())).all()


def test_ngram_guard_rows_are_independent():
    guard = WindowedNoRepeatNGram(2, window=50, prompt_length=0)
    ids = torch.tensor([[1, 2, 1], [3, 4, 5]])
    out = guard(ids, torch.zeros((2, 10)))
    assert out[0, 2] == -float("inf")
    assert torch.isfinite(out[1]).all()
    with pytest.raises(ValueError):
        WindowedNoRepeatNGram(0, window=5, prompt_length=0)


def test_stop_on_event():
    event = threading.Event()
    criteria = StopOnEvent(event)
    ids = torch.zeros((3, 4), dtype=torch.long)
    assert not criteria(ids, None).any()
    event.set()
    assert criteria(ids, None).all()


def test_streamer_skips_prompt_and_ids_and_ends_on_error():
    streamer = TokenQueueStreamer(skip_ids={0})

    def generate():
        streamer.put(torch.tensor([[5, 6, 7]]))  # the prompt
        for token in (1, 0, 2):
            streamer.put(torch.tensor([token]))
        raise RuntimeError("boom")

    thread, outcome = run_in_thread(generate, streamer)
    assert list(streamer) == [1, 2]  # ended even though generate raised
    thread.join()
    assert isinstance(outcome["error"], RuntimeError)


def test_ngram_guard_counts_the_steps_it_changed_the_output():
    """A trip is a step whose top token was banned (the model was looping); a banned token
    the model would not have chosen changes nothing, and a row that ended is not counted."""
    guard = WindowedNoRepeatNGram(2, window=50, prompt_length=0, stop_token_ids={9})
    ids = torch.tensor([[1, 2, 1], [3, 4, 3], [1, 9, 1]])
    scores = torch.zeros((3, 10))
    scores[0, 2] = 5.0  # row 0 wants 2: (1, 2) again -> banned, a trip
    scores[1, 7] = 5.0  # row 1 wants 7; 4 is banned but was not its choice
    scores[2, 9] = 5.0  # row 2 ended at its stop id (9) and only pads now
    guard(ids, scores)
    assert guard.trips == [1, 0, 0]
    guard(torch.tensor([[1, 2, 1, 5], [3, 4, 3, 7], [1, 9, 1, 9]]), torch.zeros((3, 10)))
    assert guard.trips == [1, 0, 0]  # nothing banned was on top this step
