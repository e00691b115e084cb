"""schemathesis hooks of tests/schemathesis.sh (loaded through SCHEMATHESIS_HOOKS).

The rules of the API that JSON Schema cannot state: a `PUT /v1/admin/documents` batch names
each `doc_id` at most once (the server answers 400 `duplicate_document`; `uniqueItems` compares
whole documents, not one of their fields); and a file uploaded as a document (`content` with
`content_type`) must be a document of its declared format (a PDF, a Word file, UTF-8 text...;
400 `content_type_mismatch`, `malformed_document`, ...), which random bytes are not. Positive
cases (data the schema allows) whose batch repeats a `doc_id` or carries a file are dropped, so
schemathesis does not take the documented 400 for a refusal of valid data. Negative cases and
every other operation are left alone. (`POST /v1/admin/files`, where every positive case
carries a file, is left out of the run in tests/schemathesis.sh.)
"""

import schemathesis


@schemathesis.hook
def filter_case(context, case):
    operation = context.operation
    if operation is None:
        return True
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return True
    if (operation.method.upper(), operation.path) != ("PUT", "/v1/admin/documents"):
        return True
    documents = case.body.get("documents") if isinstance(case.body, dict) else None
    if not isinstance(documents, list):
        return True
    documents = [document for document in documents if isinstance(document, dict)]
    if any("content" in document or "content_type" in document for document in documents):
        return False
    ids = [document.get("doc_id") for document in documents]
    ids = [doc_id for doc_id in ids if isinstance(doc_id, str)]
    return len(ids) == len(set(ids))
