"""seqmodels: the one implementation behind the course *Sequence Models for NLP*.

One module per concept, so a reader finds the code of a chapter at once:

- ``vocab``, ``data``: vocabularies with explicit ``<unk>``; the King James Bible with fixed splits,
  verse-aligned with the World English Bible; the CMU Pronouncing Dictionary (G2P).
- ``metrics``: cross-entropy and perplexity; edit distance, phoneme error rate, BLEU and chrF.
- ``ngram``: count-based n-gram models (MLE, add-k, interpolated Kneser–Ney).
- ``feedforward``: the neural language model of Bengio et al. (2003).
- ``autodiff``: a small reverse-mode autodiff engine over tensors; gradient checking.
- ``jacobians``: explicit Jacobians (the softmax/cross-entropy example) and their cost against VJPs.
- ``softmax``: naive and stable softmax, log-sum-exp, log-softmax, the softmax Jacobian.
- ``sgd``: the SGD update and short training runs for learning-rate sweeps.
- ``rnn``: the Elman RNN, the RNN language model, masked losses, BPTT and truncated BPTT.
- ``synthetic``: the agreement language, with its exact entropy rate; string reversal with noise.
- ``seq2seq``: encoder–decoder models, teacher forcing, greedy decoding (Chapters 6–7).
- ``attention``: the four score functions, masked softmax, attention (Chapter 7).
- ``train``: training and evaluation loops; ``device``, ``seeding``: where and how repeatably.
- ``plots``, ``widgets``: the chapters' figures and interactive views.
"""

__version__ = "0.1.0"
