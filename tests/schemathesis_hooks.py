"""schemathesis hooks of tests/schemathesis.sh (loaded through SCHEMATHESIS_HOOKS).

The one rule of the API that JSON Schema cannot state: a `PUT /v1/admin/documents` batch names
each `doc_id` at most once (the server answers 400 `duplicate_document`; `uniqueItems` compares
whole documents, not one of their fields). Positive cases (data the schema allows) whose batch
repeats a `doc_id` are dropped, so schemathesis does not take that documented 400 for a refusal
of valid data. Negative cases and every other operation are left alone.
"""

import schemathesis


@schemathesis.hook
def filter_case(context, case):
    operation = context.operation
    if operation is None or (operation.method.upper(), operation.path) != ("PUT", "/v1/admin/documents"):
        return True
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return True
    documents = case.body.get("documents") if isinstance(case.body, dict) else None
    if not isinstance(documents, list):
        return True
    ids = [document.get("doc_id") for document in documents if isinstance(document, dict)]
    ids = [doc_id for doc_id in ids if isinstance(doc_id, str)]
    return len(ids) == len(set(ids))
