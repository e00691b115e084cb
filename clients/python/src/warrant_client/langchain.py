"""A LangChain retriever over warrant (extra ``[langchain]``: ``langchain-core``).

:class:`WarrantRetriever` returns the chunks ``POST /v1/retrieve`` gives the calling user, as
``Document`` objects (id = chunk id) whose metadata names where each came from (see
:func:`warrant_client.models.chunk_metadata`).
The token is taken per call, never per process, first of:

1. ``retriever.invoke(query, token=...)`` (also ``ainvoke``);
2. ``config={"configurable": {"warrant_token": ...}}``, which a chain passes down to the
   retriever, so one chain object serves every user;
3. the retriever's own ``token`` (a string or a callable invoked on every call);
4. the client's token (a string or a callable invoked on every request).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config, run_in_executor
from pydantic import ConfigDict, Field

from .client import AsyncWarrantClient, WarrantClient
from .models import RetrievedChunk, chunk_metadata

__all__ = ["CONFIG_KEY", "WarrantRetriever"]

CONFIG_KEY = "warrant_token"
"""The ``configurable`` key holding a per-run token."""


class WarrantRetriever(BaseRetriever):
    """warrant's scoped chunks as LangChain documents, under the calling user's token.

    >>> retriever = WarrantRetriever(client=WarrantClient(url), k=4)
    >>> retriever.invoke("hotel nights in London", config={"configurable": {"warrant_token": token}})
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: Optional[WarrantClient] = None
    """The sync client (used by ``invoke``, and by ``ainvoke`` when ``async_client`` is unset)."""
    async_client: Optional[AsyncWarrantClient] = None
    """The async client used by ``ainvoke``."""
    k: Optional[int] = None
    """Chunks wanted (the server clamps it to ``1..=retrieval.top_k_max``; default: its own)."""
    token: Optional[Union[str, Callable[[], str]]] = Field(default=None, repr=False, exclude=True)
    """A token, or a callable invoked on every call; unset: the client's. Never in ``repr`` or
    a serialized retriever (tracing and logging show retrievers)."""

    def model_post_init(self, context: Any) -> None:
        if self.client is None and self.async_client is None:
            raise ValueError("WarrantRetriever needs a client or an async_client")

    @staticmethod
    def _with_config_token(config: RunnableConfig | None, kwargs: dict[str, Any]) -> dict[str, Any]:
        configurable = ensure_config(config).get("configurable") or {}
        if "token" not in kwargs and configurable.get(CONFIG_KEY) is not None:
            return {**kwargs, "token": configurable[CONFIG_KEY]}
        return kwargs

    def invoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        return super().invoke(input, config, **self._with_config_token(config, kwargs))

    async def ainvoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        return await super().ainvoke(input, config, **self._with_config_token(config, kwargs))

    def _token(self, token: Any) -> Any:
        return token if token is not None else self.token

    @staticmethod
    def _documents(chunks: tuple[RetrievedChunk, ...], acl_epoch: int) -> list[Document]:
        return [
            Document(page_content=chunk.text, metadata=chunk_metadata(chunk, acl_epoch), id=chunk.chunk_id)
            for chunk in chunks
        ]

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        token: Optional[Union[str, Callable[[], str]]] = None,
        k: Optional[int] = None,
    ) -> list[Document]:
        if self.client is None:
            raise ValueError("this WarrantRetriever has only an async_client: use ainvoke")
        response = self.client.retrieve(query, k=k if k is not None else self.k, token=self._token(token))
        return self._documents(response.chunks, response.acl_epoch)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        token: Optional[Union[str, Callable[[], str]]] = None,
        k: Optional[int] = None,
    ) -> list[Document]:
        wanted = k if k is not None else self.k
        if self.async_client is not None:
            response = await self.async_client.retrieve(query, k=wanted, token=self._token(token))
            return self._documents(response.chunks, response.acl_epoch)
        # The sync client on the default executor (the context, and so a context-variable
        # token, goes along).
        return await run_in_executor(
            None, self._get_relevant_documents, query, run_manager=run_manager.get_sync(), token=token, k=k
        )
