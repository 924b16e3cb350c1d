"""Stored results of long runs: package data found wherever the code runs, and still current."""

import json
import tomllib
from pathlib import Path

import pytest

from seqmodels.data import load_kjv
from seqmodels.results import INSTRUCTOR_PREFIX, available, instructor_results, load_result

ROOT = Path(__file__).resolve().parents[1]


def test_stored_results_ship_with_the_package():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["seqmodels"]
    assert {"results/*.json", "results/*.safetensors"} <= set(patterns)
    assert "ffn_long_run" in available()
    with pytest.raises(FileNotFoundError, match="no stored result named 'nope'"):
        load_result("nope")


def test_worked_solutions_runs_stay_in_the_instructors_repository():
    """`benchmarks/solutions_chNN.py` stores its runs in book/instructor/results/ (never in the
    package, whose data the student release ships); each names its script."""
    assert not [n for n in available() if n.startswith(INSTRUCTOR_PREFIX)]
    stored = sorted(instructor_results().glob(f"{INSTRUCTOR_PREFIX}*.json"))
    assert stored
    for path in stored:
        run = load_result(path.stem)
        assert (ROOT / run["script"]).is_file(), (path.name, run.get("script"))


@pytest.mark.parametrize("name", ["ffn_long_run", "rnn_long_run"])
def test_long_run_is_for_the_current_corpus_and_names_its_script(name):
    run = load_result(name)
    assert run["vocabulary_size"] == len(load_kjv(min_count=2).vocab)
    assert (ROOT / run["script"]).is_file()
    assert len(run["validation_perplexity_per_epoch"]) == run["epochs"]
    path = ROOT / "lib" / "seqmodels" / "results" / f"{name}.json"
    assert json.loads(path.read_text()) == run


def test_chapter_5_runs_name_their_script_and_match_the_corpus():
    race, kjv = load_result("gated_race"), load_result("gated_kjv")
    for run in (race, kjv):
        assert (ROOT / run["script"]).is_file()
    assert kjv["vocabulary_size"] == len(load_kjv(min_count=2).vocab)
    assert set(kjv["runs"]) == {"RNN", "GRU", "LSTM"}
    cells = {(r["d"], r["seed"], r["model"]) for r in race["runs"]}
    assert len(cells) == len(race["distances"]) * race["seeds"] * 3


def test_the_stored_kjv_transformer_is_the_one_its_run_recorded():
    """Chapter 8's stored runs, and the checkpoint Chapter 9 decodes from: its weights give the
    test perplexity the run recorded for them (half precision), on Chapter 1's vocabulary."""
    import math

    from seqmodels.rnn import sentence_nll
    from seqmodels.transformer import pretrained_kjv_lm

    run = load_result("gpt_kjv")
    corpus = load_kjv(min_count=2)
    assert (ROOT / run["script"]).is_file()
    assert run["vocabulary_size"] == len(corpus.vocab)
    assert set(run["runs"]) == {"small", "long"}
    model = pretrained_kjv_lm()
    assert model.config == run["model"] == run["runs"]["long"]["model"]
    assert not model.training and model.parameter_count() == run["runs"]["long"]["parameters"]
    total, n = sentence_nll(model, corpus.test)
    assert n == run["runs"]["long"]["test_tokens"]
    assert math.exp(total / n) == pytest.approx(
        run["runs"]["long"]["stored_test_perplexity"], abs=0.01
    )
