"""Chapter 5's exercises 3 to 5, run in full for the instructor's worked solutions.

    .venv/bin/python benchmarks/solutions_ch05.py

Everything is the race's setup (agreement language, the chapter's samples with seed 100 + d, model
seed 7, batch seed 8, embedding 16, Adam at 1e-2, batches of 64, 400 steps, LSTM forget-gate bias 1).
Ex. 3: the race's LSTM at d = 10 (d_h = 15): its mean forget gate on the fillers and at the verb
over 500 held-out sentences, per unit, and the product of the forget gates across the fillers.
Ex. 4: the race at d in {3, 6, 10, 15} with the budget of the chapter (RNN 32, GRU 18, LSTM 15) and
with one width (d_h = 32 for all three): held-out perplexity, right-verb share, parameters.
Ex. 5: the RNN of the race with the residual update (seqmodels.gated.ResidualRNN, d_h = 32) at
d = 15 for 1,200 steps, measured every 100 steps (share, perplexity, mean and largest state norm),
and the state norm by position at initialisation and at the end.
Writes book/instructor/results/solutions_ch05.json. One thread (the machine is shared).
"""

from __future__ import annotations

import math
from time import perf_counter

import torch
from torch import nn

from seqmodels.device import set_deterministic
from seqmodels.gated import ResidualRNN, gate_values, set_forget_bias
from seqmodels.results import save_result, where_measured
from seqmodels.rnn import (
    RNNLM,
    distributions_at,
    masked_sequence_nll,
    sentence_batch,
    sentence_nll,
    train_sentence_lm,
)
from seqmodels.seeding import seed_everything
from seqmodels.synthetic import AgreementLanguage

DISTANCES = (3, 6, 10, 15)
CORES = {"RNN": "torch", "GRU": "gru", "LSTM": "lstm"}
BUDGET = {"RNN": 32, "GRU": 18, "LSTM": 15}  # the chapter's: one parameter budget
WIDTH = {"RNN": 32, "GRU": 32, "LSTM": 32}  # Ex. 4: one width


def samples(d: int):
    lang = AgreementLanguage(distance=d)
    g = seed_everything(100 + d)
    return lang, lang.sample(20_000, g), lang.sample(2_000, g)


def race_model(name: str, hidden: int, vocab_size: int) -> RNNLM:
    seed_everything(7)
    m = RNNLM(vocab_size, embed_dim=16, hidden_dim=hidden, core=CORES[name])
    if name == "LSTM":
        set_forget_bias(m.rnn, 1.0)
    return m


def train_race(m: RNNLM, train, test) -> None:
    train_sentence_lm(
        m,
        train,
        test[:200],
        steps=400,
        batch_size=64,
        lr=1e-2,
        generator=seed_everything(8),
        eval_every=400,
    )


def scores(m: RNNLM, lang, test) -> dict:
    share, _ = lang.agreement(distributions_at(m, test, lang.verb_position), test)
    total, n = sentence_nll(m, test)
    return dict(share=share, perplexity=math.exp(total / n))


def race(result: dict) -> dict:
    rows, models = [], {}
    for d in DISTANCES:
        lang, train, test = samples(d)
        for setting, sizes in (("budget", BUDGET), ("width", WIDTH)):
            for name, hidden in sizes.items():
                if setting == "width" and name == "RNN":
                    continue  # the same model as in the budget setting
                m = race_model(name, hidden, len(lang.vocab))
                train_race(m, train, test)
                rows.append(
                    dict(
                        d=d,
                        setting=setting,
                        model=name,
                        hidden=hidden,
                        parameters=m.parameter_count(),
                        bound=lang.perplexity_bound(),
                        **scores(m, lang, test),
                    )
                )
                models[d, setting, name] = m
    result["ex4_race"] = rows
    return models


def forget_gates(result: dict, lstm10: RNNLM) -> None:
    lang, _, test = samples(10)
    d = lang.distance
    fillers, verbs, products = [], [], []
    with torch.no_grad():
        for s in test[:500]:
            ids = torch.tensor([0, *s])  # <s>, noun, d fillers, verb, ...: read from <s>
            x = lstm10.embedding(ids).double()
            f = gate_values(lstm10.rnn.double(), x)["f"]  # (T, d_h): row t reads ids[t]
            fillers.append(f[2 : 2 + d])  # rows that read the d fillers
            verbs.append(f[2 + d])  # the row that reads the verb
            products.append(f[2 : 2 + d].prod(0))  # the cell's path across the fillers
    lstm10.float()
    fill, verb, prod = torch.stack(fillers), torch.stack(verbs), torch.stack(products)
    result["ex3_forget"] = dict(
        d=d,
        hidden=lstm10.rnn.hidden_size,
        sentences=len(fillers),
        mean_fillers=fill.mean().item(),
        mean_verb=verb.mean().item(),
        per_unit_fillers=fill.mean((0, 1)).tolist(),
        per_unit_verb=verb.mean(0).tolist(),
        per_unit_product=prod.mean(0).tolist(),
        **{f"lstm_{k}": v for k, v in scores(lstm10, lang, test).items()},
    )


def residual(result: dict) -> None:
    lang, train, test = samples(15)
    seed_everything(7)
    m = RNNLM(len(lang.vocab), embed_dim=16, hidden_dim=32, core="torch")
    core = ResidualRNN(16, 32)
    core.load_state_dict(m.rnn.state_dict())  # nn.RNN's parameter names and values
    m.rnn = core

    @torch.no_grad()
    def state_norms() -> torch.Tensor:
        batch = sentence_batch(test[:500])
        hs, _ = m.rnn(m.embedding(batch.inputs), lengths=batch.lengths)
        return hs.norm(dim=-1)[:, : lang.tokens_per_sentence - 1]  # <s> .. verb: real steps

    start = state_norms()
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    g, rows = seed_everything(8), []
    for step in range(1, 1201):  # train_sentence_lm's loop, measured every 100 steps
        m.train()
        idx = torch.randint(len(train), (64,), generator=g).tolist()
        batch = sentence_batch([train[i] for i in idx])
        logits, _ = m(batch.inputs, lengths=batch.lengths)
        loss = masked_sequence_nll(logits, batch.targets, batch.mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        if step % 100 == 0:
            m.eval()
            norms = state_norms()
            rows.append(
                dict(
                    step=step,
                    **scores(m, lang, test),
                    state_norm_mean=norms.mean().item(),
                    state_norm_max=norms.max().item(),
                )
            )
    result["ex5_residual"] = dict(
        d=15,
        hidden=32,
        steps=1200,
        every=100,
        bound=lang.perplexity_bound(),
        checkpoints=rows,
        state_norm_by_position_start=start.mean(0).tolist(),
        state_norm_by_position_end=state_norms().mean(0).tolist(),
    )


def main() -> None:
    torch.set_num_threads(1)
    set_deterministic()
    start = perf_counter()
    result = {"script": "benchmarks/solutions_ch05.py", "steps": 400, "batch_size": 64}
    t = perf_counter()
    models = race(result)
    print("race", f"{perf_counter() - t:.1f} s", flush=True)
    forget_gates(result, models[10, "budget", "LSTM"])
    t = perf_counter()
    residual(result)
    print("residual", f"{perf_counter() - t:.1f} s", flush=True)
    result["seconds"] = round(perf_counter() - start, 1)
    result["note"] = "wall-clock seconds measured on one thread while other jobs shared the CPU"
    result["measured_on"] = where_measured(torch.device("cpu"))
    print(save_result("solutions_ch05", result))


if __name__ == "__main__":
    main()
