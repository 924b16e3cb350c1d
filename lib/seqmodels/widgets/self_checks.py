r"""The self-check questions of Chapters 1 to 9, four to six each, in the chapters' notation.

Each question tests an idea its chapter teaches. None states a number a chapter computes from a
run (those change with a re-run); the numbers here follow from definitions: a shape, a count, a
two-line computation. `seqmodels.widgets.self_check` shows them.
"""

from __future__ import annotations

import math

from .self_check import Question

CH01 = (
    Question(
        prompt="Under the Markov assumption, which tokens does a trigram model ($n = 3$) use to "
        "predict $w_t$?",
        choices=(
            "$w_{t-2}$ and $w_{t-1}$",
            "$w_{t-3}$, $w_{t-2}$ and $w_{t-1}$",
            "all of $w_{<t}$",
            "$w_{t-1}$ only",
        ),
        answer=0,
        explanation="An n-gram model conditions on the $n - 1$ previous tokens, so a trigram sees "
        "two. The chain rule alone would condition on all of $w_{<t}$; the Markov assumption is "
        "the approximation that gives that up, and it is what makes the probabilities countable.",
    ),
    Question(
        prompt="A model gives every token of a held-out text probability $1/8$. What is its "
        "perplexity?",
        answer=8.0,
        tolerance=1e-6,
        explanation="The cross-entropy is $H = -\\ln(1/8) = \\ln 8$ nats per token, and "
        "$\\mathrm{PPL} = e^{H} = 8$. Perplexity is a branching factor: this model is as unsure "
        "as a uniform choice among eight tokens, whatever the size of the vocabulary.",
    ),
    Question(
        prompt="An unsmoothed (maximum-likelihood) bigram model meets, in the test text, one "
        "bigram it never saw in training; both of its words are in the vocabulary. What is its "
        "test perplexity?",
        choices=(
            "a little higher than without that bigram",
            "infinite",
            "unchanged, since both words are known",
            "$V$, the perplexity of a uniform model",
        ),
        answer=1,
        explanation="Unsmoothed, $p_{\\text{MLE}}(w \\mid u) = c(u\\,w)/c(u) = 0$ for an unseen "
        "bigram, so "
        "the text's probability is zero and $-\\ln 0$ makes the cross-entropy infinite. One zero "
        "is enough, which is why smoothing moves some probability to unseen events.",
    ),
    Question(
        prompt="Two word-level models are trained on the same text. Which difference makes their "
        "test perplexities no longer comparable?",
        choices=(
            "one was trained for more steps than the other",
            "one chose its smoothing constant on the validation split",
            "one maps more rare words to `<unk>` than the other",
            "one is a neural model and the other counts n-grams",
        ),
        answer=2,
        explanation="Perplexity is comparable only on the same tokens. A larger `<unk>` class "
        "turns many hard, rare words into one frequent and easy token, which lowers perplexity "
        "without a better model. Training longer, tuning on validation data or changing the kind "
        "of model are exactly what a perplexity comparison is for.",
    ),
    Question(
        prompt="Why does Kneser–Ney's lower order use continuation counts "
        "$N_{1+}(\\bullet\\, u\\, w)$ rather than raw counts?",
        choices=(
            "continuation counts are smaller, so the model needs less memory",
            "the lower order shares out the mass the discount reserves for new continuations, so it "
            "should reward words that follow many different contexts",
            "raw counts would give unseen words probability zero",
            "raw counts cannot be discounted by $D$",
        ),
        answer=1,
        explanation="The lower order receives the discounted mass, and it decides most where the "
        "full context has seen few continuations. A word frequent only after one "
        "particular context has a large raw count, yet is a poor guess after a new "
        "context; counting the distinct contexts it follows measures how readily it "
        "continues a new one.",
    ),
    Question(
        prompt="In the agreement language a sentence is a subject noun, $d$ filler words and a "
        "verb that agrees with the subject. For $d = 4$, what is the lowest n-gram order $n$ "
        "whose window reaches the subject when it predicts the verb?",
        answer=6.0,
        tolerance=0.0,
        explanation="The verb is the token at position $d + 2$ and the subject at position 1, so "
        "the window of $n - 1$ previous tokens must span $d + 1$ tokens: $n = d + 2 = 6$. The "
        "number of such contexts grows exponentially with $d$, which is the wall n-grams hit; a "
        "model with memory needs to carry only the subject's number, one bit.",
    ),
)

CH02 = (
    Question(
        prompt="For $\\mathbf z = W \\mathbf x$, $\\hat{\\mathbf y} = "
        "\\operatorname{softmax}(\\mathbf z)$ and cross-entropy with a one-hot target, let "
        "$\\hat{\\mathbf y} = (0.7, 0.2, 0.1)$ and the target be the first class. What is "
        "$\\partial L / \\partial z_1$?",
        answer=-0.3,
        tolerance=1e-6,
        explanation="The three Jacobians multiply to $\\partial L/\\partial \\mathbf z = "
        "(\\hat{\\mathbf y} - \\mathbf y)^\\top = (-0.3, 0.2, 0.1)$: prediction minus "
        "target. It is negative for the target class, so gradient descent pushes $z_1$ up, "
        "and its size is how far the prediction is from certain.",
    ),
    Question(
        prompt="Why do frameworks compute the gradient of a scalar loss in reverse mode?",
        choices=(
            "forward mode gives wrong gradients for nonlinear functions",
            "reverse mode needs none of the forward pass's intermediate values",
            "reverse mode needs no chain rule",
            "one backward pass of vector–Jacobian products gives the gradient with respect to "
            "every parameter, without forming a Jacobian",
        ),
        answer=3,
        explanation="Starting from the loss, $\\bar L = 1$, each operation multiplies a row "
        "vector by its Jacobian, so no matrix–matrix product is ever formed and one pass reaches "
        "every parameter. Forward mode is just as exact but needs a pass per input direction. "
        "Reverse mode does keep the forward pass's values: that is its memory cost.",
    ),
    Question(
        prompt="A gradient check in float32 with central differences reports a relative error of "
        "$10^{-3}$. What do you conclude?",
        choices=(
            "the gradient code has a bug",
            "the gradient code is correct",
            "nothing yet: repeat the check in float64, where rounding noise lies far below a "
            "bug's error",
            "shrink the step $\\epsilon$ to $10^{-10}$ and repeat in float32",
        ),
        answer=2,
        explanation="A finite difference's error has a truncation part that shrinks with "
        "$\\epsilon$ and a rounding part that grows as $\\varepsilon_{\\text{mach}}/\\epsilon$. "
        "In float32 the rounding part alone can reach that size, so a correct and a buggy "
        "gradient look alike; a smaller step only makes the rounding worse. In float64 correct "
        "code scores orders of magnitude below a small bug.",
    ),
    Question(
        prompt="Compute $\\log(e^{1000} + e^{1000})$ with the log-sum-exp identity, to three "
        "decimals (natural logarithm).",
        answer=1000 + math.log(2),
        tolerance=1e-3,
        explanation="With $m = 1000$, $\\log \\sum_j e^{z_j} = m + \\log(e^0 + e^0) = "
        "1000 + \\ln 2 \\approx 1000.693$. Computed naively, $e^{1000}$ overflows to infinity "
        "even in float64; subtracting the maximum first leaves no exponential above 1.",
    ),
    Question(
        prompt="A learning-rate sweep shows validation perplexity falling as $\\eta$ grows, and "
        "the runs at the largest $\\eta$ diverge. Which $\\eta$ do you choose?",
        choices=(
            "the largest, since it moves fastest",
            "the smallest, since it never diverges",
            "the one with the lowest validation perplexity, typically just below where runs "
            "diverge",
            "the one with the lowest test perplexity",
        ),
        answer=2,
        explanation="Too small a step barely moves in the steps available; too large a one "
        "overshoots and diverges; the best sits between, usually close to divergence. Choose it "
        "on validation data: the test split is kept for the figures reported, and choosing on it "
        "makes them optimistic.",
    ),
)

CH03 = (
    Question(
        prompt="An Elman RNN layer has $d_{\\text{in}} = 10$, $d_h = 20$ and both biases "
        "$\\mathbf b_{xh}$ and $\\mathbf b_{hh}$, as `torch.nn.RNN` has them. How many "
        "parameters does it have when it reads a sequence of $T = 50$ tokens?",
        answer=640.0,
        tolerance=0.0,
        explanation="The matrix $W_{xh}$ has $20 \\times 10 = 200$ entries, $W_{hh}$ has $20 "
        "\\times 20 = "
        "400$ and the two biases 20 each: 640. The same weights are applied at every step, so "
        "the count does not depend on $T$; a feedforward window model's input weights grow with "
        "its window instead.",
    ),
    Question(
        prompt="Truncated BPTT with windows of $k$ tokens carries the state from one window to "
        "the next. What does it not carry across windows?",
        choices=(
            "the state $\\mathbf h_t$",
            "the parameters' updates",
            "the vocabulary",
            "the gradient: no loss in one window sends gradient to the steps of an earlier one",
        ),
        answer=3,
        explanation="The state is detached at each window's start: the forward pass still sees "
        "the whole past, but the backward pass stops at the window's edge. A dependency whose "
        "two ends seldom share a window therefore gets little or no training signal, however "
        "far the state carries.",
    ),
    Question(
        prompt="A batch holds two sentences of 3 and 5 real tokens (each count includes "
        "`</s>`), padded to length 5. By what number does the masked loss divide the summed "
        "negative log-likelihood?",
        answer=8.0,
        tolerance=0.0,
        explanation="The mask $m_{bt}$ is 1 at real tokens only, and the loss divides by their "
        "count, $3 + 5 = 8$, so each real token counts once. Dividing by the batch's "
        "$2 \\times 5 = 10$ positions would let the padding dilute the loss, and the same "
        "sentences would score differently in a differently padded batch.",
    ),
    Question(
        prompt="Why can a bidirectional RNN not serve as a language model?",
        choices=(
            "it has twice the parameters of a one-way RNN",
            "it cannot be trained with backpropagation through time",
            "its backward direction has read $w_{t+1}$, the token it is asked to predict",
            "it cannot read sentences of different lengths",
        ),
        answer=2,
        explanation="A language model must predict $w_{t+1}$ from $w_{\\le t}$ only. The "
        "backward RNN's state at $t$ summarises everything from the end of the sentence down to "
        "$t + 1$, so the 'prediction' reads the answer and its low loss means nothing. For "
        "labelling tokens, where the whole input is given, the right context is fair and helps.",
    ),
    Question(
        prompt="Training runs under teacher forcing, so every input token is known in advance. "
        "Why can the steps of one sequence still not run in parallel?",
        choices=(
            "$\\mathbf h_t$ needs $\\mathbf h_{t-1}$, so step $t$ cannot start before step "
            "$t - 1$ ends; only the sequences of a batch run side by side",
            "the weights are updated after every time step",
            "the softmax over the vocabulary must finish before the next token",
            "teacher forcing feeds the model its own outputs",
        ),
        answer=0,
        explanation="The recurrence is a chain: each state is a function of the previous one, "
        "whatever the inputs. The same chain makes generation cheap, one step per new token from "
        "the carried state. Teacher forcing feeds the reference tokens, not the model's own "
        "outputs, and the weights change only after the whole batch.",
    ),
)

CH04 = (
    Question(
        prompt="A linear RNN has $W_{hh} = \\rho Q$ with $Q$ orthogonal and $\\rho = 0.9$. What "
        "is $\\lVert \\partial \\mathbf h_T / \\partial \\mathbf h_t \\rVert_2$ for "
        "$T - t = 20$? (Three decimals.)",
        answer=0.9**20,
        tolerance=1e-3,
        explanation="Each step Jacobian is $W_{hh} = \\rho Q$, and a product of orthogonal "
        "matrices keeps norms, so the product has norm exactly $\\rho^{T-t} = 0.9^{20} "
        "\\approx 0.122$. A tanh RNN multiplies in $\\mathrm{diag}(\\tanh')$ with "
        "$\\tanh' \\le 1$ as well, which can only lower it.",
    ),
    Question(
        prompt="Why does clipping the gradient by its global norm not help a vanishing gradient?",
        choices=(
            "it does help: it raises every gradient to norm $\\kappa$",
            "it only ever shrinks a gradient whose norm exceeds $\\kappa$; a small one passes "
            "unchanged, and the part from distant tokens stays tiny",
            "it changes the gradient's direction towards distant tokens",
            "it applies only to $W_{xh}$",
        ),
        answer=1,
        explanation="Clipping, $\\mathbf g \\leftarrow \\min(1, \\kappa/\\lVert \\mathbf g "
        "\\rVert)\\, "
        "\\mathbf g$, never makes a gradient longer, and keeps its direction. In a vanishing "
        "gradient the part from distant tokens is negligible beside the part from near ones; "
        "one common factor cannot change that balance. Clipping bounds explosion only.",
    ),
    Question(
        prompt="A gradient has two parameter tensors with norms 3 and 4. After clipping by "
        "global norm at $\\kappa = 1$, what is the norm of the first tensor?",
        answer=0.6,
        tolerance=1e-6,
        explanation="The global norm is $\\sqrt{3^2 + 4^2} = 5$, so every tensor is scaled by "
        "$1/5$: the first to $0.6$, the second to $0.8$. Scaling all tensors by one factor keeps "
        "the gradient's direction; clipping each tensor to 1 on its own would change it.",
    ),
    Question(
        prompt="A tanh RNN has an orthogonal $W_{hh}$, so $\\sigma_{\\max}(W_{hh}) = 1$. What "
        "happens to the gradient sent back over many steps?",
        choices=(
            "it explodes",
            "it keeps its norm exactly",
            "it cannot grow, and it shrinks wherever units are away from zero, where $\\tanh' < 1$",
            "it depends on the learning rate",
        ),
        answer=2,
        explanation="The bound multiplies $\\lVert \\mathrm{diag}(\\tanh'(\\mathbf a_{t'})) "
        "\\rVert_2\\, \\lVert W_{hh} \\rVert_2 \\le 1$ per step, and $\\tanh'$ is 1 only "
        "at zero. So a tanh RNN vanishes even at $\\rho = 1$, and exploding needs a radius "
        "large enough to outweigh saturation. Orthogonal initialisation gives such a "
        "$W_{hh}$: it raises the starting gradient, but too little against $\\tanh'$.",
    ),
    Question(
        prompt="Truncated BPTT uses windows of $k = 5$ tokens on the agreement language at "
        "$d = 10$. What happens to the agreement?",
        choices=(
            "it is learned, because the state carries the subject's number across windows",
            "it is learned, only more slowly than with full BPTT",
            "it is not learned: no window holds both the subject and the verb, so no gradient "
            "links them",
            "it is learned if the gradient is clipped",
        ),
        answer=2,
        explanation="The subject is $d + 1 = 11$ tokens before the verb, further than a window "
        "reaches. The state does carry forward, but the loss at the verb sends no gradient "
        "past its window's start, so nothing teaches the network to put the subject's "
        "number into the state.",
    ),
)

CH05 = (
    Question(
        prompt="In the gated update $\\mathbf h_t = (1 - \\mathbf z_t) \\odot \\mathbf h_{t-1} + "
        "\\mathbf z_t \\odot \\tilde{\\mathbf h}_t$, what does the step Jacobian "
        "$\\partial \\mathbf h_t / \\partial \\mathbf h_{t-1}$ tend to as the gate closes, "
        "$\\mathbf z_t \\to \\mathbf 0$?",
        choices=(
            "the zero matrix",
            "$\\mathrm{diag}(\\tanh')\\, U_h$",
            "the identity",
            "$\\mathrm{diag}(\\mathbf z_t)$",
        ),
        answer=2,
        explanation="It is $\\mathrm{diag}(1 - \\mathbf z_t)$ plus terms that each carry "
        "$\\mathbf z_t$ or its derivative, so a closed gate copies the state, and the gradient "
        "flowing back through it is copied too, over any number of steps. An Elman step always "
        "multiplies by $\\mathrm{diag}(\\tanh')\\, W_{hh}$ instead.",
    ),
    Question(
        prompt="What does the GRU's reset gate $\\mathbf r_t$ control?",
        choices=(
            "how much of $\\mathbf h_{t-1}$ is kept in $\\mathbf h_t$",
            "how much of $\\mathbf h_{t-1}$ enters the candidate $\\tilde{\\mathbf h}_t$",
            "how much of the state is passed to the output layer",
            "the learning rate of the recurrent weights",
        ),
        answer=1,
        explanation="The reset gate $\\mathbf r_t$ scales the previous state inside the candidate's "
        "tanh, so "
        "the candidate can ignore the past. What is kept of $\\mathbf h_{t-1}$ in the new state "
        "is the update gate's job, through $1 - \\mathbf z_t$; an output gate belongs to the "
        "LSTM.",
    ),
    Question(
        prompt="An LSTM layer has $d_{\\text{in}} = 10$, $d_h = 20$ and, like `nn.LSTM`, two "
        "bias vectors per gate. How many parameters does it have?",
        answer=2560.0,
        tolerance=0.0,
        explanation="Each of its four blocks, the gates $\\mathbf i_t$, $\\mathbf f_t$, "
        "$\\mathbf o_t$ and the candidate $\\mathbf g_t$, is an Elman-sized layer: $20 \\times "
        "10 + 20 \\times 20 + 20 + 20 = 640$. Four of them make $2560$, four times the Elman "
        "layer's count, and four times its matrix products per step.",
    ),
    Question(
        prompt="Why initialise the LSTM's forget-gate bias to $b_f = 1$?",
        choices=(
            "it closes the forget gate, so the cell starts empty",
            "it keeps the forget gate mostly open at the start, $\\sigma(1) \\approx 0.73$, so "
            "the cell's gradient is copied back further",
            "it makes the LSTM equal to a GRU",
            "it cancels the input gate's bias",
        ),
        answer=1,
        explanation="Only gates touch the cell: $\\partial \\mathbf c_t / \\partial \\mathbf "
        "c_{t-1}$ is $\\mathrm{diag}(\\mathbf f_t)$ along the cell's own path. With $b_f = 0$ "
        "the gate starts near one half and the gradient roughly halves at each step; a bias of "
        "1 lets "
        "far more of it reach a distant subject before training has shaped the gates.",
    ),
    Question(
        prompt="Why compare the RNN, the GRU and the LSTM at one parameter budget rather than at "
        "one state size $d_h$?",
        choices=(
            "at one $d_h$ the gated models have three or four times the RNN's weights, so a "
            "win could come from size rather than from gating",
            "gated models cannot use the RNN's $d_h$",
            "one state size would make the RNN train more slowly",
            "the agreement language fixes the number of parameters",
        ),
        answer=0,
        explanation="A GRU has three Elman-sized blocks and an LSTM four, so equal $d_h$ hands "
        "them more capacity. Matching the count of parameters, each model with its own $d_h$, "
        "leaves the gates as the one difference the comparison measures.",
    ),
)

CH06 = (
    Question(
        prompt="A target $\\mathbf y = y_1 \\dots y_T$ has $T = 4$ tokens. How many next-token "
        "predictions does the decoder's negative log-likelihood for this pair sum over?",
        answer=5.0,
        tolerance=0.0,
        explanation="The decoder also predicts `</s>` after $y_T$, so the sum runs to $t = T + 1 = "
        "5$. Predicting `</s>` is how the model decides where its output ends; leaving it "
        "out would train a model that never stops.",
    ),
    Question(
        prompt="What is exposure bias?",
        choices=(
            "the model sees the test inputs during training",
            "frequent training pairs dominate the loss",
            "the encoder's last state forgets the start of the input",
            "trained only on reference prefixes, the decoder conditions at test time on its own "
            "outputs; one early error leads to prefixes it never saw, so errors compound",
        ),
        answer=3,
        explanation="Teacher forcing feeds the reference $y_{<t}$; greedy decoding feeds "
        "$\\hat y_{<t}$. After a first mistake the decoder is off the distribution it was "
        "trained on, and later errors follow more easily, so errors compound with the output's "
        "length. A forgetful encoder is the bottleneck, a separate problem.",
    ),
    Question(
        prompt="On string reversal, a wider context $\\mathbf c$ delays the collapse of accuracy "
        "with the string's length. Why does it not remove it?",
        choices=(
            "a wider $\\mathbf c$ overfits the training strings",
            "$\\mathbf c$ keeps one fixed size whatever the input's length, so a long enough "
            "input still does not fit",
            "the decoder cannot read a wider $\\mathbf c$",
            "reversal needs attention weights, which $\\mathbf c$ lacks by definition",
        ),
        answer=1,
        explanation="Every symbol of a reversed string is equally hard, and all of them must "
        "pass through the one vector $\\mathbf c = \\mathbf h^{\\text{enc}}_n$. Widening it "
        "raises the length at which it overflows without changing the fact that it is fixed; "
        "attention removes the bottleneck by letting the decoder read every encoder state.",
    ),
    Question(
        prompt='Feeding $\\mathbf c$ only to the output layer (`"output"`) does far worse than '
        "feeding it as the decoder's initial state. Why?",
        choices=(
            "the decoder's recurrent state never sees the input, so it cannot track what it has "
            "already written of it",
            "the output layer has too few parameters",
            "$\\mathbf c$ is too large for the softmax",
            "teacher forcing does not work with the output placement",
        ),
        answer=0,
        explanation="With the output placement $\\mathbf h_t$ is computed from the previous outputs "
        "alone, and $\\mathbf c$ meets it only at the softmax. The state, which carries "
        "the decoder's progress through the output, never learns what the input said; as "
        "the initial state or in every update, $\\mathbf c$ shapes the state itself.",
    ),
    Question(
        prompt="BPE spells each word as characters, the last marked as the word's end "
        "(`l o w</w>`), on a corpus of the words `low` (5 times), `lowest` (2), `newer` (6) "
        "and `wider` (3). Which adjacent pair does it merge first?",
        choices=("`l o`", "`w e`", "`e r</w>`", "`n e`"),
        answer=2,
        explanation="Each pair counts its occurrences weighted by the word's frequency: "
        "`e r</w>` ends `newer` and `wider`, $6 + 3 = 9$; `w e` occurs in `lowest` and "
        "`newer`, $2 + 6 = 8$; `l o` in `low` and `lowest`, $5 + 2 = 7$; `n e` only in "
        "`newer`, 6. The most frequent pair wins, so frequent words soon become one symbol.",
    ),
)

CH07 = (
    Question(
        prompt="A query scores $(2, 0, 1)$ against three keys, and the third key is padding "
        "(mask $m = (1, 1, 0)$). What attention weight does the first key get? (Three "
        "decimals.)",
        answer=math.exp(2) / (math.exp(2) + 1),
        tolerance=1e-3,
        explanation="The masked softmax gives the padded key weight exactly 0 and normalises "
        "over the real keys: $e^2/(e^2 + e^0) \\approx 0.881$. Without the mask the padding "
        "would take a share, and the first key would get $e^2/(e^2 + 1 + e) \\approx 0.665$.",
    ),
    Question(
        prompt="Why are dot-product scores divided by $\\sqrt{d_k}$?",
        choices=(
            "so that the attention weights sum to one",
            "for independent unit-variance $\\mathbf q$ and $\\mathbf k$, $\\mathbf q^\\top "
            "\\mathbf k$ has variance $d_k$; unscaled, the softmax collapses onto one key as "
            "$d_k$ grows",
            "to make the scores cheaper to compute",
            "to keep the values' norms fixed",
        ),
        answer=1,
        explanation="The sum $\\sum_i q_i k_i$ of $d_k$ terms of variance 1 has variance "
        "$d_k$, so scores spread further apart as $d_k$ grows and the softmax puts almost all "
        "its weight on the largest. Dividing by $\\sqrt{d_k}$ brings the variance back to 1. "
        "The softmax already makes the weights sum to one.",
    ),
    Question(
        prompt="An attention decoder writes $T = 20$ output tokens from a source of $n = 30$ "
        "tokens. How many attention weights $\\alpha_{tj}$ does it compute?",
        answer=600.0,
        tolerance=0.0,
        explanation="At every output step the decoder state scores all $n$ encoder states, so "
        "there are $T \\times n = 600$ weights. Each step's cost grows with the source length; "
        "an additive score also multiplies the memory by its hidden size $a$.",
    ),
    Question(
        prompt="Which of the four scores — dot, bilinear, additive and scaled dot — have "
        "parameters of their own?",
        choices=(
            "all four",
            "only the additive score",
            "the bilinear and the additive scores",
            "the dot and the scaled-dot scores",
        ),
        answer=2,
        explanation="The bilinear score learns $W$ in $\\mathbf q^\\top W \\mathbf k$, the "
        "additive score $W_q$, $W_k$ and $\\mathbf w$. The dot and scaled-dot scores only "
        "compare $\\mathbf q$ and $\\mathbf k$, dividing by the fixed $\\sqrt{d_k}$ in the "
        "scaled case, so the queries and keys must already be in one space.",
    ),
    Question(
        prompt="A heatmap of a trained model's attention weights shows a clean alignment. What "
        "does it tell you?",
        choices=(
            "which encoder states each output step read",
            "why the model produced each output token",
            "that the model's outputs are correct",
            "which input tokens the model will ignore on any other input",
        ),
        answer=0,
        explanation="The weights say what was averaged into the context $\\mathbf c_t$ at each "
        "step: what was read. The output also depends on the decoder's state and on the values "
        "themselves, so the weights are not the output's cause, and a clean alignment can "
        "still come with a wrong output.",
    ),
)

CH08 = (
    Question(
        prompt="Self-attention runs over a sequence of $T$ positions. What is the shape of the "
        "weight matrix $\\operatorname{softmax}(Q K^\\top / \\sqrt{d_k})$ of one head?",
        choices=(
            "$T \\times T$",
            "$T \\times d_k$",
            "$d_k \\times d_k$",
            "$T \\times d_{\\text{model}}$",
        ),
        answer=0,
        explanation="Both $Q$ and $K$ are $T \\times d_k$, one row per position, so $Q K^\\top$ has "
        ""
        "a row per query position and a column per key position. Multiplying it by $V$ gives "
        "one output row per position. The $T \\times T$ matrix is why attention's work and "
        "memory grow as $T^2$.",
    ),
    Question(
        prompt="A self-attention layer without masks and without position vectors reads a "
        "sequence whose positions you permute. What happens to its outputs?",
        choices=(
            "they do not change at all",
            "they are permuted in the same way, and otherwise unchanged",
            "they change unpredictably",
            "they become all equal",
        ),
        answer=1,
        explanation="Queries, keys and values are computed row by row, and the softmax-weighted "
        "average does not depend on the order of the keys. So permuting the input permutes "
        "the output rows, to rounding: the layer is permutation equivariant, not invariant, "
        "and order reaches it only through position vectors or a mask.",
    ),
    Question(
        prompt="In a causally masked Transformer of any depth, what is "
        "$\\partial \\mathbf y_t / \\partial \\mathbf x_s$ for $s > t$?",
        choices=(
            "exactly zero",
            "small, but non-zero after several layers mix the positions",
            "zero in the first layer only",
            "the identity",
        ),
        answer=0,
        explanation="A masked score is $-\\infty$, so its weight is exactly 0, and everything "
        "else in a block (the feed-forward network, the norms, the residuals) works position by "
        "position. No path leads from a later input to an earlier output, however many layers "
        "are stacked.",
    ),
    Question(
        prompt="Why does a pre-LN Transformer train without warm-up at a learning rate where a "
        "post-LN one stalls?",
        choices=(
            "pre-LN has fewer parameters",
            "post-LN has no residual connections",
            "pre-LN normalises the gradients instead of the activations",
            "pre-LN keeps an identity path, $\\mathbf x \\leftarrow \\mathbf x + "
            "\\mathrm{Sublayer}(\\mathrm{LN}(\\mathbf x))$, from the input to the output",
        ),
        answer=3,
        explanation="In pre-LN the residual stream is never normalised, so every block adds to "
        "an identity path and the gradient reaches early layers through it undiminished. "
        "Post-LN has the residual connections too, but puts a layer norm on that path after "
        "every block, and deep stacks of it need a warm-up to train.",
    ),
    Question(
        prompt="A model with 4 layers and $d_{\\text{model}} = 256$ generates with a key–value "
        "cache in float32 (4 bytes a number), batch $B = 1$. How many bytes does the cache hold "
        "after a prefix of $S = 1000$ tokens?",
        answer=8_192_000.0,
        tolerance=0.0,
        explanation="Each layer keeps a key and a value of size $d_{\\text{model}}$ per token: "
        "$2 \\cdot 4 \\cdot 1 \\cdot 1000 \\cdot 256 \\cdot 4 = 8\\,192\\,000$ bytes. The cache "
        "grows linearly with the prefix, the price of a per-token cost that stays nearly flat; "
        "an RNN's state stays one fixed size.",
    ),
    Question(
        prompt="A causal dilated convolutional LM has kernel size $k_{\\text{conv}} = 2$ and "
        "$n_{\\text{conv}} = 4$ layers, dilations doubling from 1. What is its receptive field "
        "$R$, in tokens?",
        answer=16.0,
        tolerance=0.0,
        explanation="The receptive field is $R = 1 + (k_{\\text{conv}} - 1)(2^{n_{\\text{conv}}} - "
        "1) = 1 + 15 = 16$. "
        "Within $R$ tokens an agreement can be learned; one token further it never can, "
        "because no output sees both ends. Recurrence keeps a state and attention the whole "
        "prefix instead.",
    ),
)

CH09 = (
    Question(
        prompt="A model's first token is `A` with probability 0.6 or `B` with 0.4. After `A` "
        "come `x` or `y`, each with probability 0.5; after `B`, `z` with probability 1; every "
        "sequence then ends. What is the probability of the sequence greedy decoding returns?",
        answer=0.3,
        tolerance=1e-6,
        explanation="Greedy takes `A` (0.6 > 0.4), then `x` or `y`: $0.6 \\times 0.5 = 0.3$. "
        "The most probable sequence is `B z`, with 0.4. `A`'s mass is split over two "
        "continuations, so the best sentence starts with the less probable first token: greedy "
        "decoding does not solve $\\arg\\max_y \\log p(y)$.",
    ),
    Question(
        prompt="Two tokens have logits $(\\ln 3, 0)$, so probabilities $(0.75, 0.25)$. What is "
        "the first token's probability at temperature $\\tau = 1/2$?",
        answer=0.9,
        tolerance=1e-6,
        explanation="Dividing by $\\tau = 1/2$ doubles the logits to $(2 \\ln 3, 0)$, so the "
        "weights are $(9, 1)$ and the probability $9/10$. A temperature below 1 sharpens the "
        "distribution towards greedy ($\\tau \\to 0$); above 1 it flattens it towards uniform.",
    ),
    Question(
        prompt="Next-token probabilities are $(0.5, 0.3, 0.15, 0.05)$. How many tokens does "
        "top-$p$ sampling with $p = 0.9$ keep?",
        answer=3.0,
        tolerance=0.0,
        explanation="Top-$p$ keeps the smallest set of most probable tokens holding mass $p$: "
        "$0.5 + 0.3 = 0.8$ is short of $0.9$, $0.5 + 0.3 + 0.15 = 0.95$ is enough, so three "
        "tokens, renormalised. Unlike top-$k$, the number kept changes with how spread the "
        "distribution is.",
    ),
    Question(
        prompt="Why can a better search (a wider beam) give shorter, emptier output from a "
        "language model unless the score is normalised by length?",
        choices=(
            "a wider beam runs out of memory on long hypotheses",
            "every extra token multiplies in a probability below 1, so $\\log p(y)$ falls with "
            "length and an early `</s>` scores well",
            "beam search samples, and short samples are more likely",
            "the model never predicts `</s>` on long hypotheses",
        ),
        answer=1,
        explanation="Sequence probability is a product, so the exact search favours sentences "
        "that end early: the beam search curse. Dividing $\\log p(y\\,\\texttt{</s>})$ by "
        "$(|y| + 1)^{\\alpha}$ with $\\alpha > 0$ lessens the penalty on length; at "
        "$\\alpha = 1$ it scores per token.",
    ),
    Question(
        prompt="Suppose a language model is exactly right about a language. Which decoder "
        "produces text with that language's entropy rate?",
        choices=(
            "greedy decoding",
            "beam search with a wide beam",
            "ancestral (pure) sampling",
            "top-$k$ sampling with $k = 1$",
        ),
        answer=2,
        explanation="Ancestral sampling draws each token from $p(w_t \\mid w_{<t})$, so its text is "
        "as varied and as surprising per token as the language. Greedy and beam search "
        "return the mode, one atypical and often repetitive sentence, and top-$k$ with $k "
        "= 1$ is greedy. A real model also has errors, which sampling reproduces and "
        "truncation removes, at some cost in diversity.",
    ),
)

#: each chapter's questions, by chapter ("ch01" … "ch09")
SELF_CHECKS: dict[str, tuple[Question, ...]] = {
    "ch01": CH01,
    "ch02": CH02,
    "ch03": CH03,
    "ch04": CH04,
    "ch05": CH05,
    "ch06": CH06,
    "ch07": CH07,
    "ch08": CH08,
    "ch09": CH09,
}
