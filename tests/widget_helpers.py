"""What the explorers' tests share: a few lines of Bible-like text, their vocabulary, a language
model trained on them for a few steps (enough to make its distributions differ from uniform), and
the check that an explorer's figure is legible where the site shows it."""

from seqmodels.data import tokenize
from seqmodels.plots import DESKTOP_WIDTH_PX, MIN_TEXT_PX, PHONE_WIDTH_PX, smallest_text_px
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


def assert_legible(figure) -> None:
    """No text of `figure` under `MIN_TEXT_PX` where the site shows it: the 352-px column of a
    400-px phone and the 784-px column of a 1,400-px window (the explorer's static view is the same
    figure at both widths)."""
    for column in (PHONE_WIDTH_PX, DESKTOP_WIDTH_PX):
        px, text = smallest_text_px(figure, column, texts=True)[0]
        assert px >= MIN_TEXT_PX, f"{text!r} is {px:.2f} px in a {column}-px column"
