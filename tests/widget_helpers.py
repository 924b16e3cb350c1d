"""What the explorers' tests share: a few lines of Bible-like text, their vocabulary, and a language
model trained on them for a few steps (enough to make its distributions differ from uniform)."""

from seqmodels.data import tokenize
from seqmodels.rnn import train_sentence_lm
from seqmodels.seeding import make_generator
from seqmodels.vocab import Vocabulary

BIBLE_LIKE = [
    "the king said unto them",
    "and the king went up",
    "the lord said unto moses",
    "and moses went up unto the lord",
    "and the people said amen",
    "the people went out",
    "and the lord spake unto moses",
    "the king spake unto the people",
]


def encoded(text: list[str]) -> tuple[Vocabulary, list[list[int]]]:
    """The vocabulary of `text`'s tokenized lines and the lines as ids."""
    sentences = [tokenize(line) for line in text]
    vocab = Vocabulary.build(sentences)
    return vocab, [vocab.encode(s) for s in sentences]


def briefly_trained(model, train: list[list[int]], steps: int):
    """`model` trained on `train` for `steps` Adam steps (batches of 4, a fixed generator)."""
    train_sentence_lm(
        model, train, train, steps=steps, batch_size=4, lr=1e-2, generator=make_generator(1)
    )
    return model
