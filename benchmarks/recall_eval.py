"""Recall quality on benchmarks/recall_eval/: long multi-session conversations, written by hand.

Each ``*.json`` file there is one conversation of two speakers over a dozen or more sessions
spread over months, with questions asked as a person would weeks later (paraphrased, from
the gist) and, for each, the turn or few turns that hold its answer. The files were written
for this benchmark without sight of otpmem's analyzer, and nothing in otpmem is tuned per
question. Loading: one tenant per file, one conversation per session, each turn a message
(``role`` from the file's roles, ``name`` the speaker, ``metadata.date`` the session's date).

recall@k of a question: the share of its evidence turns among the first k results over the
asking tenant (averaged over questions). Contenders run over the same messages in the same
run; the baseline is raw bm25s at its defaults over each message's plain text.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import Stemmer

from otpmem.memory.recall import RecallIndex
from otpmem.messages import Conv
from otpmem.stores import MemoryStore

EVAL_DIR = Path(__file__).resolve().parent / "recall_eval"

Where = tuple[Conv, int]

BASELINE = "raw bm25s, text (baseline)"
OURS = "get_relevant (default)"


@dataclass(frozen=True)
class Turn:
    """One message of the set, where it is stored, and the context a reader has of it."""

    where: Where
    speaker: str
    text: str
    date: str
    previous: str
    following: str


@dataclass(frozen=True)
class Question:
    """A question, its tenant, its evidence turns and its kind."""

    user: str
    text: str
    evidence: frozenset[Where]
    kind: str


Loaded = tuple[dict[Conv, list[dict[str, Any]]], list[Turn], list[Question]]
Found = dict[str, tuple[list[list[Where]], float]]


def load(directory: Path = EVAL_DIR) -> Loaded:
    """The set's messages by conversation, its turns, its questions."""
    convs: dict[Conv, list[dict[str, Any]]] = {}
    turns: list[Turn] = []
    questions: list[Question] = []
    for path in sorted(directory.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        user = str(data["id"])
        roles = data["roles"]
        for s, session in enumerate(data["sessions"], start=1):
            conv = Conv(user, f"s{s:02d}")
            texts = [t["text"] for t in session["turns"]]
            messages = convs[conv] = []
            for t, turn in enumerate(session["turns"]):
                messages.append(
                    {
                        "role": roles[turn["speaker"]],
                        "content": turn["text"],
                        "name": turn["speaker"],
                        "metadata": {"date": session["date"]},
                    }
                )
                turns.append(
                    Turn(
                        (conv, t),
                        turn["speaker"],
                        turn["text"],
                        session["date"],
                        texts[t - 1] if t else "",
                        texts[t + 1] if t + 1 < len(texts) else "",
                    )
                )
        for q in data["questions"]:
            evidence = set()
            for ref in q["evidence"]:
                s_part, t_part = ref.split(":")
                evidence.add((Conv(user, f"s{int(s_part[1:]):02d}"), int(t_part[1:]) - 1))
            questions.append(Question(user, q["question"], frozenset(evidence), q["kind"]))
    return convs, turns, questions


def recall_at(ranked: Sequence[Sequence[Where]], questions: Sequence[Question], k: int) -> float:
    """Mean over questions of the share of their evidence among their first k results."""
    total = 0.0
    for found, q in zip(ranked, questions, strict=True):
        total += len(q.evidence & set(found[:k])) / len(q.evidence)
    return total / len(questions)


_stemmer = Stemmer.Stemmer("english")


def bm25s_variant(
    turns: Sequence[Turn],
    questions: Sequence[Question],
    k: int,
    text: Callable[[Turn], str],
    *,
    stopwords: str | None = "en",
    stem: bool = False,
) -> tuple[list[list[Where]], float]:
    """Raw bm25s, one index per tenant over ``text(turn)``: rankings and ms per query."""
    stemmer = _stemmer if stem else None
    by_user: dict[str, list[Turn]] = {}
    for turn in turns:
        by_user.setdefault(str(turn.where[0].user_id), []).append(turn)
    retrievers = {}
    for user, docs in by_user.items():
        retriever = bm25s.BM25()
        corpus = bm25s.tokenize(
            [text(d) for d in docs], stopwords=stopwords, stemmer=stemmer, show_progress=False
        )
        retriever.index(corpus, show_progress=False)
        retrievers[user] = (retriever, docs)
    out = []
    spent = 0.0
    for q in questions:
        retriever, docs = retrievers[q.user]
        started = time.perf_counter()
        tokens = bm25s.tokenize([q.text], stopwords=stopwords, stemmer=stemmer, show_progress=False)
        ids, scores = retriever.retrieve(tokens, k=min(k, len(docs)), show_progress=False)
        spent += time.perf_counter() - started
        out.append([docs[i].where for i, s in zip(ids[0], scores[0], strict=True) if s > 0])
    return out, spent / len(questions) * 1000


def index_variant(
    convs: dict[Conv, list[dict[str, Any]]],
    questions: Sequence[Question],
    k: int,
    **options: Any,
) -> tuple[list[list[Where]], float]:
    """``RecallIndex.get_relevant`` (started with ``options``): rankings and ms per query."""
    store = MemoryStore.start_link()
    index = RecallIndex.start_link(store, **options)
    try:
        for conv, messages in convs.items():
            store.add(conv, messages)
        for user in {q.user for q in questions}:
            index.refresh(user_id=user)
        out = []
        spent = 0.0
        for q in questions:
            started = time.perf_counter()
            hits = index.get_relevant(q.text, user_id=q.user, limit=k)
            spent += time.perf_counter() - started
            out.append([(h.conv, h.position) for h in hits])
        return out, spent / len(questions) * 1000
    finally:
        index.stop()
        store.stop()


def plain(turn: Turn) -> str:
    """The message's own text."""
    return turn.text


def spoken(turn: Turn) -> str:
    """``speaker: text``."""
    return f"{turn.speaker}: {turn.text}"


def with_previous(turn: Turn) -> str:
    """The previous turn's text, then ``speaker: text``."""
    return f"{turn.previous} {turn.speaker}: {turn.text}"


def with_neighbours(turn: Turn) -> str:
    """The previous turn, ``speaker: text``, the next turn."""
    return f"{turn.previous} {turn.speaker}: {turn.text} {turn.following}"


def with_date(turn: Turn) -> str:
    """``with_neighbours`` and the session's date, written out."""
    when = np.datetime64(turn.date[:10]).astype(object)
    return f"{with_neighbours(turn)} {when:%A %d %B %Y}"


def contenders(
    quick: bool = False,
) -> tuple[list[Question], dict[str, tuple[list[list[Where]], float]]]:
    """The questions, and every contender's rankings (k = 10) and ms per query."""
    convs, turns, questions = load()
    k = 10
    found: Found = {
        BASELINE: bm25s_variant(turns, questions, k, plain),
        "raw bm25s, speaker: text": bm25s_variant(turns, questions, k, spoken),
        "  + no stop words": bm25s_variant(turns, questions, k, spoken, stopwords=None),
        "  + Snowball stems": bm25s_variant(turns, questions, k, spoken, stopwords=None, stem=True),
        "  + previous turn": bm25s_variant(
            turns, questions, k, with_previous, stopwords=None, stem=True
        ),
        "  + next turn": bm25s_variant(
            turns, questions, k, with_neighbours, stopwords=None, stem=True
        ),
        "  + session date": bm25s_variant(
            turns, questions, k, with_date, stopwords=None, stem=True
        ),
    }
    found["get_relevant, own text only"] = index_variant(
        convs, questions, k, weights=(1.0, 0.0), context=(0.0, 0.0, 0.0)
    )
    found["get_relevant, BM25 + context"] = index_variant(convs, questions, k, weights=(1.0, 0.0))
    found["get_relevant, HashingEmbedder fused"] = index_variant(
        convs, questions, k, weights=(1.0, 1.0)
    )
    found[OURS] = index_variant(convs, questions, k)
    return questions, found


if __name__ == "__main__":
    questions, found = contenders()
    base = recall_at(found[BASELINE][0], questions, 10)
    for label, (ranked, ms) in found.items():
        r5, r10 = recall_at(ranked, questions, 5), recall_at(ranked, questions, 10)
        print(f"{label:<32} @5 {r5:.3f} @10 {r10:.3f} ({r10 / base:.2f}x) {ms:.3f} ms/query")
