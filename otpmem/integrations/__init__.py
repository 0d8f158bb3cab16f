"""Adapters to the Python agent ecosystem, each behind its extra; the core imports none.

- ``otpmem.integrations.langchain``: ``OtpmemChatMessageHistory`` (a LangChain
  ``BaseChatMessageHistory``) and ``OtpmemVectorStore`` (a ``VectorStore`` over the recall
  index); ``pip install 'otpmem[langchain]'``.
- ``otpmem.integrations.langgraph``: ``OtpmemStore``, a LangGraph ``BaseStore`` over facts
  and recall, and ``OtpmemSaver``, a checkpointer over any store; ``pip install
  'otpmem[langgraph]'``.
"""
