"""A LlamaIndex retriever over warrant (extra ``[llamaindex]``: ``llama-index-core``).

:class:`WarrantLlamaRetriever` returns the chunks ``POST /v1/retrieve`` gives the calling user
as ``NodeWithScore`` (a ``TextNode`` whose id is the chunk id, whose source document is the
warrant document, and whose metadata is :func:`warrant_client.models.chunk_metadata`'s).

LlamaIndex's ``retrieve(query)`` takes no per-call arguments, so the token is per call through
a callable: the retriever's ``token`` (or else the client's) is invoked on every call, e.g. one
reading the current user from a ``contextvars.ContextVar`` your web framework sets per request.
:meth:`WarrantLlamaRetriever.as_user` gives a retriever bound to one token that shares the client
(its connection pool), for code that holds the user's token in hand.
"""

from __future__ import annotations

from typing import Any, Callable, Union

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeRelationship, NodeWithScore, QueryBundle, RelatedNodeInfo, TextNode

from .client import AsyncToken, AsyncWarrantClient, WarrantClient
from .models import RetrievedChunk, RetrieveResponse, chunk_metadata

__all__ = ["WarrantLlamaRetriever", "chunk_node"]

# What a model or an embedder sees of a node's metadata: where it is from, not the bookkeeping.
_HIDDEN_FROM_MODELS = ["chunk_id", "start", "end", "score", "retrievers", "acl_epoch"]


def chunk_node(chunk: RetrievedChunk, acl_epoch: int) -> NodeWithScore:
    """A retrieved chunk as a scored node: id = chunk id, source = the document (``ref_doc_id``
    is the warrant ``doc_id``), metadata as in the module's description."""
    node = TextNode(
        id_=chunk.chunk_id,
        text=chunk.text,
        metadata=chunk_metadata(chunk, acl_epoch),
        excluded_llm_metadata_keys=list(_HIDDEN_FROM_MODELS),
        excluded_embed_metadata_keys=list(_HIDDEN_FROM_MODELS),
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=chunk.doc_id)},
        start_char_idx=chunk.start,
        end_char_idx=chunk.end,
    )
    return NodeWithScore(node=node, score=chunk.score)


class WarrantLlamaRetriever(BaseRetriever):
    """warrant's scoped chunks as LlamaIndex nodes, under the calling user's token.

    >>> retriever = WarrantLlamaRetriever(WarrantClient(url, token=current_user_token), k=4)
    >>> retriever.retrieve("hotel nights in London")
    """

    def __init__(
        self,
        client: WarrantClient | None = None,
        *,
        async_client: AsyncWarrantClient | None = None,
        k: int | None = None,
        token: Union[str, Callable[[], str], None] = None,
        async_token: AsyncToken | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if client is None and async_client is None:
            raise ValueError("WarrantLlamaRetriever needs a client or an async_client")
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self.client = client
        self.async_client = async_client
        self.k = k
        self.token = token
        self.async_token = async_token if async_token is not None else token

    def as_user(self, token: str | Callable[[], str]) -> WarrantLlamaRetriever:
        """The same retriever (same clients) bound to ``token``."""
        return WarrantLlamaRetriever(
            self.client,
            async_client=self.async_client,
            k=self.k,
            token=token,
            callback_manager=self.callback_manager,
            verbose=self._verbose,
        )

    @staticmethod
    def _nodes(response: RetrieveResponse) -> list[NodeWithScore]:
        return [chunk_node(chunk, response.acl_epoch) for chunk in response.chunks]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.client is None:
            raise ValueError("this WarrantLlamaRetriever has only an async_client: use aretrieve")
        return self._nodes(self.client.retrieve(query_bundle.query_str, k=self.k, token=self.token))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.async_client is None:
            return self._retrieve(query_bundle)
        response = await self.async_client.retrieve(query_bundle.query_str, k=self.k, token=self.async_token)
        return self._nodes(response)

