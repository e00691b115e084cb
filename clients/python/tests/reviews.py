"""Review items for the tests: answers asked through the client, then found in the queue."""

from __future__ import annotations

import time

from warrant_client import NotFoundError, WarrantClient


def queued_review(client: WarrantClient, question: str, asker: str, reviewer: str) -> str:
    """Asks ``question`` as ``asker`` and returns its review id once the item is stored (the
    server queues every answer in these tests; the writer stores it shortly after)."""
    response = client.answer(question, token=asker)
    assert response.review is not None and response.review.queued, response
    deadline = time.monotonic() + 20
    while True:
        try:
            client.get_review(response.review.review_id, token=reviewer)
            return response.review.review_id
        except NotFoundError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
