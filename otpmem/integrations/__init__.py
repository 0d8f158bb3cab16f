"""Adapters to the Python agent ecosystem, each behind its extra; the core imports none.

- ``otpmem.integrations.langchain``: ``OtpmemChatMessageHistory`` (a LangChain
  ``BaseChatMessageHistory``) and ``OtpmemVectorStore`` (a ``VectorStore`` over the recall
  index); ``pip install 'otpmem[langchain]'``.
- ``otpmem.integrations.langgraph``: ``OtpmemStore``, a LangGraph ``BaseStore`` over facts
  and recall; ``pip install 'otpmem[langgraph]'``.
"""
