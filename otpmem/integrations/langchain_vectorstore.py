"""``OtpmemVectorStore``: a LangChain ``VectorStore`` over otpmem's recall index.

A collection is one conversation of one tenant, ``Conv(user_id, "vectors:<collection>")``,
and the conversation is the collection's log: each write appends a record message per
document (its text as ``content``, ``metadata["document"] = {"id", "rev", "metadata"}``), a
delete appends a tombstone (``"deleted": True``). The log is what the store keeps durable
and supervised, and what the ``RecallIndex`` ranks (BM25 fused with the embedder's
vectors). The live view (each id's newest record) is rebuilt from the log and caught up
before every operation, so two instances over one collection agree; a search keeps only
the records that are live (``filter=``), and pads with unranked live documents up to ``k``,
as a nearest-neighbour search always returns ``k`` when it holds that many.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from .. import aio
from ..memory.recall import STANDALONE, RecallIndex, RecallIndexHandle
from ..messages import Conv, check_user_id, freeze_value, short_repr, thaw
from ..stores import ChatMemory

COLLECTION_PREFIX = "vectors:"
DOCUMENT_KEY = "document"


class LangChainEmbedder:
    """A LangChain ``Embeddings`` as an otpmem ``Embedder`` (for a ``RecallIndex``)."""

    def __init__(self, embeddings: Embeddings, dim: int | None = None) -> None:
        self.embeddings = embeddings
        self.dim = dim if dim is not None else len(embeddings.embed_query("dimension probe"))

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text (``embed_documents``)."""
        return self.embeddings.embed_documents(list(texts))

    def __repr__(self) -> str:
        return f"LangChainEmbedder({type(self.embeddings).__name__}, dim={self.dim})"


class Revision(NamedTuple):
    """A document's newest record: its revision, and the document."""

    rev: str
    document: Document


class _Live:
    """Each document id's newest record, caught up from the collection's log."""

    def __init__(self) -> None:
        self.docs: dict[str, Revision] = {}  # id -> its newest revision
        self.seen = 0
        self.last: Mapping[str, Any] | None = None

    def apply(self, records: Sequence[Mapping[str, Any]]) -> None:
        for record in records:
            entry = record["metadata"][DOCUMENT_KEY]
            if entry.get("deleted"):
                self.docs.pop(entry["id"], None)
            else:
                metadata = thaw(entry.get("metadata") or {})
                document = Document(record["content"], metadata=metadata, id=entry["id"])
                self.docs[entry["id"]] = Revision(entry["rev"], document)
        self.seen += len(records)
        if records:
            self.last = records[-1]

    def is_live(self, message: Mapping[str, Any]) -> bool:
        metadata = message.get("metadata")
        entry = metadata.get(DOCUMENT_KEY) if isinstance(metadata, Mapping) else None
        if not isinstance(entry, Mapping) or entry.get("deleted"):
            return False
        found = self.docs.get(entry.get("id"))  # type: ignore[arg-type]
        return found is not None and found.rev == entry.get("rev")


class OtpmemVectorStore(VectorStore):
    """A vector store kept in an otpmem store and ranked by its recall index::

        index = RecallIndex.start_link(store, embedder=LangChainEmbedder(embeddings))
        vectors = OtpmemVectorStore(store, index, user_id="ann", embedding=embeddings)
        vectors.add_documents([Document("Lyon has two rivers")], ids=["lyon"])
        vectors.similarity_search("rivers", k=1)

    The tenant (``user_id``) is fixed at construction: no call of this object reads
    another user's documents. Without ``index`` it starts one over ``store`` (with
    ``embedding``, else otpmem's ``HashingEmbedder``) and stops it in ``close()``.
    """

    def __init__(
        self,
        store: ChatMemory,
        index: RecallIndexHandle | None = None,
        *,
        user_id: str | None = None,
        collection: str = "default",
        embedding: Embeddings | None = None,
        timeout: float = 30.0,
    ) -> None:
        if not isinstance(store, ChatMemory):
            raise TypeError(f"store must be an otpmem store (ChatMemory), got {store!r}")
        if not isinstance(collection, str) or not collection:
            raise ValueError(f"collection must be a non-empty str, got {collection!r}")
        self.store = store
        self.user_id = check_user_id(user_id)
        self.conv = Conv(self.user_id, COLLECTION_PREFIX + collection)
        self._embedding = embedding
        self._owns_index = index is None
        if index is None:
            embedder = None if embedding is None else LangChainEmbedder(embedding)
            index = RecallIndex.start_link(store, embedder)
        self.index = index
        self.timeout = timeout
        self._live = _Live()
        self._lock = threading.Lock()

    @property
    def embeddings(self) -> Embeddings | None:
        """The embeddings given at construction (the index's embedder ranks the vectors)."""
        return self._embedding

    def close(self) -> None:
        """Stop the index this store started (none if it was given one)."""
        if self._owns_index and self.index.alive:
            self.index.stop()

    # -- the log ----------------------------------------------------------------------------

    def _catch_up(self) -> _Live:
        """Bring the live view level with the log (another writer's records included).

        The reads happen outside the lock: inside a process they suspend, and a thread
        lock held across a suspension could stall a scheduler. Only the apply, which calls
        nothing, holds it, and only if nobody applied the same records meanwhile.
        """
        for _ in range(5):
            live = self._live
            seen, last = live.seen, live.last
            count = self.store.count(self.conv)
            if count == seen:
                return live
            if count < seen:
                break  # fewer than seen: the collection was cleared (and perhaps rewritten)
            if last is None:
                fresh = self.store.get(self.conv)
            else:
                tail = self.store.get(self.conv, last=count - seen + 1)
                if len(tail) != count - seen + 1 or tail[0] != last:
                    continue  # written (or cleared) between the count and the read
                fresh = tail[1:]
            with self._lock:
                if self._live is live and live.seen == seen:
                    live.apply(fresh)
        rebuilt = _Live()
        rebuilt.apply(self.store.get(self.conv))
        with self._lock:
            self._live = rebuilt
        return rebuilt

    def _append(self, records: list[dict[str, Any]]) -> None:
        if records:
            self.store.add(self.conv, records)

    # -- writes -----------------------------------------------------------------------------

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Add (or overwrite, by id) documents; return their ids, in order.

        ``TypeError`` for what is not a ``Document`` or an id that is not a str, naming its
        position; a document's metadata follows the rules of a message's (``InvalidMessage``
        names the field: NaN, nesting deeper than ``MAX_DEPTH``, types JSON cannot carry).
        """
        documents = _sequence(documents, "documents")
        metadatas = []
        for n, doc in enumerate(documents):
            if not isinstance(doc, Document) or type(doc.page_content) is not str:
                raise TypeError(
                    f"add_documents: documents[{n}] is not a Document with str page_content: "
                    f"{short_repr(doc)}"
                )
            metadatas.append(thaw(freeze_value(doc.metadata, f"documents[{n}].metadata")))
        given = _ids(kwargs.get("ids"), len(documents))
        named = [given[n] if given is not None else doc.id for n, doc in enumerate(documents)]
        ids = [i if i else str(uuid.uuid4()) for i in named]
        live = self._catch_up()
        records = []
        for doc_id, doc, metadata in zip(ids, documents, metadatas, strict=True):
            found = live.docs.get(doc_id)
            if found is not None and (found.document.page_content, found.document.metadata) == (
                doc.page_content,
                metadata,
            ):
                continue  # the same document again: nothing to write
            entry = {"id": doc_id, "rev": uuid.uuid4().hex, "metadata": metadata}
            records.append(
                {
                    "role": "user",
                    "content": doc.page_content,
                    "metadata": {DOCUMENT_KEY: entry, STANDALONE: True},
                }
            )
        self._append(records)
        return ids

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Add texts (with their metadata and ids); return their ids."""
        texts = _sequence(texts, "texts")
        metas = [{} for _ in texts] if metadatas is None else _sequence(metadatas, "metadatas")
        if len(metas) != len(texts):
            raise ValueError(f"{len(texts)} texts were given {len(metas)} metadatas")
        docs = [Document(page_content=t, metadata=m) for t, m in zip(texts, metas, strict=True)]
        return self.add_documents(docs, ids=ids)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete documents by id (missing ids are ignored); without ids, the collection."""
        if ids is None:
            self.store.clear(self.conv)
            return True
        ids = _ids(ids)
        live = self._catch_up()
        tombstones = [
            {
                "role": "user",
                "content": "",
                "metadata": {DOCUMENT_KEY: {"id": i, "rev": "", "deleted": True}, STANDALONE: True},
            }
            for i in dict.fromkeys(ids)
            if i in live.docs
        ]
        self._append(tombstones)
        return True

    # -- reads ------------------------------------------------------------------------------

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The live documents with these ids (missing ones left out), in the order asked."""
        ids = _ids(ids)
        live = self._catch_up()
        return [_copy(live.docs[i].document) for i in ids if i in live.docs]

    def similarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` documents nearest ``query``, with fused scores in [0, 1], best first.

        ``filter`` (a dict of metadata fields, or a callable of the ``Document``) narrows
        the documents searched.
        """
        if type(k) is not int:
            raise TypeError(f"k must be an int, got {short_repr(k)}")
        wanted = _document_filter(kwargs.get("filter"))
        live = self._catch_up()
        if not live.docs or k < 1:
            return []

        def keep(message: Mapping[str, Any]) -> bool:
            if not live.is_live(message):
                return False
            entry = message["metadata"][DOCUMENT_KEY]
            return wanted is None or wanted(live.docs[entry["id"]].document)

        hits = self.index.get_relevant(
            query, conversation=self.conv, limit=k, filter=keep, timeout=self.timeout
        )
        found: list[tuple[Document, float]] = []
        for hit in hits:
            found_doc = live.docs.get(hit.message["metadata"][DOCUMENT_KEY]["id"])
            if found_doc is not None:
                found.append((_copy(found_doc.document), hit.score))
        chosen = {doc.id for doc, _ in found}
        for doc_id, (_rev, doc) in list(live.docs.items()):
            if len(found) >= k:
                break
            if doc_id not in chosen and (wanted is None or wanted(doc)):
                found.append((_copy(doc), 0.0))
        return found[:k]

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """The ``k`` documents nearest ``query``, best first."""
        return [doc for doc, _ in self.similarity_search_with_score(query, k, **kwargs)]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return lambda score: score  # fused scores are relevances in [0, 1] already

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> OtpmemVectorStore:
        """A store over ``kwargs["store"]`` (and ``index``, ``user_id``, ``collection``)
        holding ``texts``."""
        store = kwargs.pop("store", None)
        if store is None:
            raise ValueError("OtpmemVectorStore.from_texts needs store=<an otpmem store>")
        vectors = cls(store, embedding=embedding, **kwargs)
        vectors.add_texts(texts, metadatas, ids=ids)
        return vectors

    # -- async: through otpmem.aio, no executor thread --------------------------------------

    async def aadd_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """``add_documents``, awaited."""
        return await aio.run(self.add_documents, documents, **kwargs)

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """``delete``, awaited."""
        return await aio.run(self.delete, ids, **kwargs)

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """``get_by_ids``, awaited."""
        return await aio.run(self.get_by_ids, ids)

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """``similarity_search_with_score``, awaited."""
        return await aio.run(self.similarity_search_with_score, query, k, **kwargs)

    async def asimilarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """``similarity_search``, awaited."""
        return await aio.run(self.similarity_search, query, k, **kwargs)


def _sequence(given: Any, what: str) -> list[Any]:
    """``given`` as a list, if it is a sequence of items (a str is not one)."""
    if isinstance(given, str | bytes | Mapping) or not isinstance(given, Iterable):
        raise TypeError(f"{what} must be a list, got {type(given).__name__}: {short_repr(given)}")
    return list(given)


def _ids(given: Any, count: int | None = None) -> Any:
    """Document ids: a list of str (None: let each be given one), ``count`` of them."""
    if given is None and count is not None:
        return None
    ids = _sequence(given, "ids")
    for n, doc_id in enumerate(ids):
        if type(doc_id) is not str and (count is None or doc_id is not None):
            raise TypeError(f"ids[{n}] must be a str, got {short_repr(doc_id)}")
    if count is not None and len(ids) != count:
        raise ValueError(f"{count} documents were given {len(ids)} ids")
    return ids


def _copy(document: Document) -> Document:
    return Document(document.page_content, metadata=thaw(document.metadata), id=document.id)


def _document_filter(given: object) -> Callable[[Document], bool] | None:
    if given is None:
        return None
    if callable(given):
        return given
    if isinstance(given, Mapping):
        wanted = dict(given)
        return lambda doc: all(doc.metadata.get(k) == v for k, v in wanted.items())
    raise ValueError(f"filter must be a dict of metadata fields or a callable, got {given!r}")
