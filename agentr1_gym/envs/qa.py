"""Multi-hop QA envs: the agent searches a corpus and answers a question.

Rewards (see :class:`~agentr1_gym.rewards.RewardConfig`): the answer metric at episode end (F1 by default;
EM and sub-EM are logged in ``info["metrics"]``), a format bonus, and the ``retrieval`` process reward for each
gold supporting paragraph retrieved for the first time in the episode. An episode succeeds on an exact match.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentr1_gym.data import Corpus, QATask, bundled_corpus, bundled_tasks, corpus_from_tasks, load_qa
from agentr1_gym.env import ToolEnv
from agentr1_gym.errors import ConfigError
from agentr1_gym.formats import ToolCall
from agentr1_gym.matching import qa_metrics
from agentr1_gym.rewards import ProcessReward
from agentr1_gym.tools.base import ToolResult
from agentr1_gym.tools.search import Retriever, SearchTool, make_retriever

__all__ = ["MultiHopQAEnv", "QAEnvBase"]

QA_PROMPT = (
    "Answer the question below. Search for the facts you need, one search per turn, and give a short final "
    "answer (a name, a date, a number, or yes/no).\n\nQuestion: {question}"
)


def _norm_title(title: str) -> str:
    return " ".join(title.lower().split())


class QAEnvBase(ToolEnv):
    """Shared machinery of QA envs: a search tool, QA scoring, retrieval process rewards and an oracle.

    Args (search settings, shared by every QA env):
        retriever: the search backend: ``"bm25"`` (embedded), ``"lucene"`` (Pyserini), ``"dense"`` (faiss),
            ``"http"`` (a retrieval server), or any object with ``search(queries, k)``.
        index_path: a prebuilt Lucene or dense index (default: built from the corpus and cached).
        encoder_path: the sentence-transformers model directory for ``dense``.
        server_url: the server for ``http``; ``retriever_kwargs`` holds further backend settings (e.g.
            ``{"api": "search_r1"}``, ``{"index_type": "hnsw", "prefixes": "e5"}``, ``{"threads": 4}``).
        top_k: passages per search.
        Other arguments: :class:`~agentr1_gym.settings.EnvSettings`.
    """

    process_rewards = (
        ProcessReward(
            "retrieval",
            0.1,
            "per gold supporting paragraph retrieved for the first time in the episode (at most 2 units an "
            "episode: with more than 2 gold paragraphs, each pays 2/n)",
        ),
    )
    #: the most retrieval units an episode can earn, however many gold paragraphs its task has: with 4-hop
    #: MuSiQue questions, evidence alone would otherwise pay 0.4 of a 1.5 maximum to a policy that never answers
    retrieval_units = 2
    answer_metrics = ("f1", "em", "sub_em")
    success_metric = "em"

    def __init__(
        self,
        corpus: Corpus | None,
        /,
        *,
        retriever: str | Retriever = "bm25",
        retriever_kwargs: dict[str, Any] | None = None,
        index_path: str | Path | None = None,
        encoder_path: str | Path | None = None,
        server_url: str | None = None,
        top_k: int = 3,
        **settings: Any,
    ) -> None:
        self.corpus = corpus
        backend = dict(retriever_kwargs or {})
        for key, value in (
            ("index_path", index_path),
            ("encoder_path", encoder_path),
            ("server_url", server_url),
        ):
            if value is not None:
                backend[key] = str(value)
        self.retriever = make_retriever(retriever, corpus, **backend)
        super().__init__([SearchTool(self.retriever, top_k=top_k)], **settings)
        self._gold: set[str] = set()
        self._seen_gold: set[str] = set()
        self._title_index: dict[str, str] | None = None

    # ---- ToolEnv hooks -----------------------------------------------------------------------------------
    def task_prompt(self, task: QATask) -> str:
        return QA_PROMPT.format(question=task.question)

    def on_reset(self) -> None:
        self._gold = {_norm_title(t) for t in self.task.supporting_titles}
        self._seen_gold = set()

    def score_answer(self, answer: str | None) -> dict[str, float]:
        return qa_metrics(answer, self.task.answers)

    def task_answers(self, task: QATask) -> tuple[str, ...]:
        return tuple(task.answers)

    def process_reward_units(self, call: ToolCall, result: ToolResult) -> dict[str, float]:
        new = 0
        for title in result.metadata.get("titles", ()):
            key = _norm_title(title)
            if key in self._gold and key not in self._seen_gold:
                self._seen_gold.add(key)
                new += 1
        return {"retrieval": new * self._retrieval_unit()} if new else {}

    def _retrieval_unit(self) -> float:
        return min(1.0, self.retrieval_units / max(1, len(self._gold)))

    def process_reward_caps(self) -> dict[str, float]:
        return {"retrieval": len(self._gold) * self._retrieval_unit()}

    # ---- evaluation helpers ------------------------------------------------------------------------------
    @property
    def retrieved_gold(self) -> frozenset[str]:
        """Normalised titles of the gold paragraphs retrieved so far in this episode."""
        return frozenset(self._seen_gold)

    def _oracle_query(self, title: str, attempt: int) -> str:
        """The title alone first (what a model can learn to ask; it finds the paragraph ~98% of the time with
        BM25 on the bundled samples), then the title plus the paragraph's opening words."""
        if attempt == 0:
            return title
        if self._title_index is None:
            self._title_index = {}
            for p in self.corpus or ():
                self._title_index.setdefault(
                    _norm_title(p.title), f"{p.title} {' '.join(p.text.split()[:20])}"
                )
        return self._title_index.get(_norm_title(title), title)

    def oracle_action(self) -> str:
        """The next turn of a policy that knows the gold evidence: search each gold paragraph not yet retrieved
        (by title, then once more with its opening words if that missed), then answer with the first gold
        answer. It plans from the searches the episode ran (``executed_calls``), so asking twice gives the same
        turn."""
        self._require_task("oracle_action()")
        queries = [c.arguments.get("query") for c in self.executed_calls if c.name == "search"]
        for title in self.task.supporting_titles:
            if _norm_title(title) in self._seen_gold:
                continue
            own = {self._oracle_query(title, 0), self._oracle_query(title, 1)}
            tries = sum(q in own for q in queries)
            if tries < 2:
                return self.call_text("search", query=self._oracle_query(title, tries))
        return self.answer_text(self.task.answers[0])


class MultiHopQAEnv(QAEnvBase):
    """A multi-hop QA dataset behind a search tool.

    Args:
        dataset: ``"hotpotqa"``, ``"2wikimultihopqa"`` or ``"musique"`` (the bundled sample's dataset, and the
            layout of ``data_path`` if given; ``None`` there detects it).
        split: which bundled split (``"dev"``; ``"train"`` for hotpotqa and musique).
        data_path: a dataset file in its official layout (JSON, JSONL, optionally .gz) instead of the sample.
        corpus_path: a JSONL corpus (``{"id","contents"}`` or ``{"id","title","text"}``) to search; default: the
            bundled sample's corpus, or the context paragraphs of ``data_path``'s questions.
        Search settings (``retriever``, ``top_k``, ...): see :class:`QAEnvBase`; the rest:
        :class:`~agentr1_gym.settings.EnvSettings`.

    Every reset draws a task with ``self.np_random``; ``reset(options={"task_index": i})`` picks task ``i``.
    """

    def __init__(
        self,
        *,
        dataset: str = "hotpotqa",
        split: str = "dev",
        data_path: str | Path | None = None,
        corpus_path: str | Path | None = None,
        tasks: Sequence[QATask] | None = None,
        **settings: Any,
    ) -> None:
        if tasks is not None and data_path is not None:
            raise ConfigError("pass either tasks= or data_path=, not both")
        if tasks is not None:
            self.tasks = tuple(tasks)
        elif data_path is not None:
            self.tasks = tuple(load_qa(data_path, dataset))
        else:
            self.tasks = bundled_tasks(dataset, split)
        if not self.tasks:
            raise ConfigError("the env needs at least one task")
        if corpus_path is not None:
            corpus: Corpus | None = Corpus.from_jsonl(corpus_path)
        elif data_path is None and tasks is None:
            corpus = bundled_corpus(dataset)
        elif any(t.context for t in self.tasks):
            corpus = corpus_from_tasks(self.tasks, source=None)
        elif settings.get("retriever", "bm25") == "bm25":
            raise ConfigError(
                "these tasks carry no context paragraphs to search; pass corpus_path= (a JSONL corpus)"
            )
        else:
            corpus = None
        self.dataset = dataset
        super().__init__(corpus, **settings)
