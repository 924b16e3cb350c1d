"""Chapter 4's exercises 1 and 3 to 5, run in full for the instructor's worked solutions.

    .venv/bin/python benchmarks/solutions_ch04.py

Ex. 1: the RNN of Figure fig-ch4-jacobian (d = 6, the chapter's samples, model seed 7, batch seed
8, Adam at 1e-2, 400 steps): sigma_max(W_hh) before and after training, and on the chapter's five
held-out sentences (float64) the measured ||dh_T/dh_t|| against the two sides of the bound
eq-vanishing-bound: the product of max tanh' times sigma_max, and sigma_max^(T - t).
Ex. 3: the clipping experiment of the chapter (agreement language d = 10, the RNN of d_h = 32 from
an orthogonal W_hh, SGD at eta = 3, batches of 32, 400 steps, model seed 0, W_hh seed 1, batch seed
2) with kappa in {0.1, 0.3, 1, 3} and without clipping: the share of steps on which clipping was
active and the held-out perplexity.
Ex. 4: the plain RNN of the distance sweep at d = 10 (model seed 7, batch seed 8, Adam at 1e-2,
batches of 64, clipped at 1) for 4,000 steps instead of 400, the right-verb share every 200 steps.
Ex. 5: the same RNN with tanh replaced by the identity and W_hh orthogonal (seed 9), 1,000 steps:
share, held-out perplexity, sigma_max(W_hh), the largest state norm and the gradient norm every 50
steps.
`--only PART ...` reruns some parts and keeps the others' stored numbers.
Writes book/instructor/results/solutions_ch04.json. One thread (the machine is shared).
"""

from __future__ import annotations

import argparse
import math
from time import perf_counter

import torch
from torch import nn

from seqmodels.device import set_deterministic
from seqmodels.gated import ResidualRNN
from seqmodels.gradients import scaled_orthogonal, spectral_norms, state_jacobians, states
from seqmodels.results import load_result, save_result, where_measured
from seqmodels.rnn import (
    RNNLM,
    ElmanRNN,
    distributions_at,
    masked_sequence_nll,
    sentence_batch,
    sentence_nll,
    train_sentence_lm,
)
from seqmodels.seeding import seed_everything
from seqmodels.synthetic import AgreementLanguage

KAPPAS = (0.1, 0.3, 1.0, 3.0)


class LinearRNN(ResidualRNN):
    """The Elman RNN with the identity for tanh: h_t = W_hh h_{t-1} + W_xh x_t + b."""

    def step(self, xw_t: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return xw_t + h @ self.weight_hh_l0.T + self.bias_hh_l0


def agreement_share(m: RNNLM, lang: AgreementLanguage, test) -> float:
    share, _ = lang.agreement(distributions_at(m, test, lang.verb_position), test)
    return share


def train_with_checkpoints(m, lang, train, test, steps, every, generator, probe=None):
    """`train_sentence_lm`'s loop (Adam at 1e-2, batches of 64, clipped at 1), measured every
    `every` steps: held-out share and perplexity, and whatever `probe(m)` returns."""
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    rows = []
    for step in range(1, steps + 1):
        m.train()
        idx = torch.randint(len(train), (64,), generator=generator).tolist()
        batch = sentence_batch([train[i] for i in idx])
        logits, _ = m(batch.inputs, lengths=batch.lengths)
        loss = masked_sequence_nll(logits, batch.targets, batch.mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(m.parameters(), 1.0).item()
        opt.step()
        if step % every == 0:
            m.eval()
            with torch.no_grad():
                total, n = sentence_nll(m, test)
            row = dict(
                step=step,
                share=agreement_share(m, lang, test),
                loss=loss.item(),
                perplexity=math.exp(total / n) if math.isfinite(total) else None,
                grad_norm=norm,
            )
            if probe is not None:
                row.update(probe(m))
            rows.append(row)
    return rows


def bound(result: dict) -> None:
    lang = AgreementLanguage(distance=6)
    g = seed_everything(106)
    train, test = lang.sample(20_000, g), lang.sample(2_000, g)
    seed_everything(7)
    m = RNNLM(len(lang.vocab), embed_dim=16, hidden_dim=32, core="torch")
    sigma_before = torch.linalg.matrix_norm(m.rnn.weight_hh_l0.detach().double(), ord=2).item()
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
    tokens = lang.stream(test[:5])
    x = m.embedding(tokens).detach().double()
    rnn = ElmanRNN.from_torch(m.rnn).double()
    with torch.no_grad():
        measured = spectral_norms(state_jacobians(rnn, x)).flip(0)  # by distance T - t
        sigma = torch.linalg.matrix_norm(rnn.weight_hh_l0, ord=2).item()
        slope = (1 - states(rnn, x)[1:] ** 2).max(-1).values  # ||diag(tanh'(a_t))||, t = 1..T
        middle = torch.cat([slope.new_ones(1), torch.cumprod(slope.flip(0) * sigma, 0)])
        k = torch.arange(len(measured), dtype=torch.float64)
    result["ex1_bound"] = dict(
        d=6,
        steps=400,
        T=len(tokens),
        sigma_before=sigma_before,
        sigma_after=sigma,
        rho_after=torch.linalg.eigvals(rnn.weight_hh_l0.detach()).abs().max().item(),
        measured=measured.tolist(),
        middle=middle.tolist(),
        outer=(sigma**k).tolist(),
    )


def clipping(result: dict) -> None:
    lang = AgreementLanguage(distance=10)
    g = seed_everything(110)
    train, test = lang.sample(20_000, g), lang.sample(2_000, g)
    runs = {}
    for kappa in (None, *KAPPAS):
        seed_everything(0)
        m = RNNLM(len(lang.vocab), embed_dim=16, hidden_dim=32, core="torch")
        with torch.no_grad():
            m.rnn.weight_hh_l0.copy_(scaled_orthogonal(32, 1.0, seed_everything(1)))
        h = train_sentence_lm(
            m,
            train,
            test,
            steps=400,
            batch_size=32,
            lr=3.0,
            clip=kappa,
            optimizer="sgd",
            generator=seed_everything(2),
            eval_every=400,
        )
        norms = torch.tensor(h.grad_norms)
        runs["none" if kappa is None else str(kappa)] = dict(
            kappa=kappa,
            clipped_share=None if kappa is None else (norms > kappa).double().mean().item(),
            median_grad_norm=norms.median().item(),
            perplexity=math.exp(h.eval_loss[-1]),
            share=agreement_share(m, lang, test),
            largest_jump=max(b - a for a, b in zip(h.step_loss[:-1], h.step_loss[1:], strict=True)),
        )
    result["ex3_clipping"] = runs


def long_training(result: dict) -> None:
    lang = AgreementLanguage(distance=10)
    g = seed_everything(110)
    train, test = lang.sample(20_000, g), lang.sample(2_000, g)
    seed_everything(7)
    m = RNNLM(len(lang.vocab), embed_dim=16, hidden_dim=32, core="torch")
    rows = train_with_checkpoints(m, lang, train, test, 4000, 200, seed_everything(8))
    # the first 400 steps are the chapter's run: the same share at step 400
    seed_everything(7)
    ref = RNNLM(len(lang.vocab), embed_dim=16, hidden_dim=32, core="torch")
    train_sentence_lm(
        ref,
        train,
        test[:200],
        steps=400,
        batch_size=64,
        lr=1e-2,
        generator=seed_everything(8),
        eval_every=400,
    )
    result["ex4_long"] = dict(
        steps=4000, every=200, checkpoints=rows, chapter_share_400=agreement_share(ref, lang, test)
    )


def linear_rnn(result: dict) -> None:
    lang = AgreementLanguage(distance=10)
    g = seed_everything(110)
    train, test = lang.sample(20_000, g), lang.sample(2_000, g)
    tokens = lang.stream(test[:5])

    def probe(m: RNNLM) -> dict:
        w = m.rnn.weight_hh_l0.detach()
        with torch.no_grad():
            hs, _ = m.rnn(m.embedding(tokens)[None])
        return dict(
            sigma_max=torch.linalg.matrix_norm(w, ord=2).item(),
            rho=torch.linalg.eigvals(w).abs().max().item(),
            state_norm_max=hs[0].norm(dim=-1).max().item(),
        )

    seed_everything(7)
    m = RNNLM(len(lang.vocab), embed_dim=16, hidden_dim=32, core="torch")
    linear = LinearRNN(16, 32)
    linear.load_state_dict(m.rnn.state_dict())  # nn.RNN's parameter names
    m.rnn = linear
    with torch.no_grad():
        m.rnn.weight_hh_l0.copy_(scaled_orthogonal(32, 1.0, seed_everything(9)))
    start = probe(m)
    rows = train_with_checkpoints(m, lang, train, test, 1000, 50, seed_everything(8), probe)
    result["ex5_linear"] = dict(steps=1000, every=50, start=start, checkpoints=rows)


PARTS = {"bound": bound, "clipping": clipping, "long": long_training, "linear": linear_rnn}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted(PARTS), default=sorted(PARTS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    set_deterministic()
    start = perf_counter()
    result = {"script": "benchmarks/solutions_ch04.py", "distance": 10}
    if set(args.only) != set(PARTS):
        result = load_result("solutions_ch04")
    for part in (PARTS[name] for name in args.only):
        t = perf_counter()
        part(result)
        print(part.__name__, f"{perf_counter() - t:.1f} s", flush=True)
    result["seconds" if set(args.only) == set(PARTS) else "seconds_last_parts"] = round(
        perf_counter() - start, 1
    )
    result["note"] = "wall-clock seconds measured on one thread while other jobs shared the CPU"
    result["measured_on"] = where_measured(torch.device("cpu"))
    print(save_result("solutions_ch04", result))


if __name__ == "__main__":
    main()
