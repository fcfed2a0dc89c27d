"""JSON bytes for records and items (orjson), shared by the backends. Pure."""

from __future__ import annotations

from typing import Any

import orjson

from smg.storage.contract import Conversation, Item, StoredResponse


def dump(value: Any) -> bytes:
    """JSON bytes; ValueError (not a backend failure) when the value is not JSON-able."""
    try:
        return orjson.dumps(value)
    except TypeError as e:
        raise ValueError(f"not JSON-serialisable: {e}") from None


def load(data: bytes | str) -> Any:
    return orjson.loads(data)


def dump_response(record: StoredResponse) -> bytes:
    return dump(
        {
            "id": record.id,
            "tenant": record.tenant,
            "created_at": record.created_at,
            "status": record.status,
            "model": record.model,
            "input_items": record.input_items,
            "output_items": record.output_items,
            "previous_response_id": record.previous_response_id,
            "conversation_id": record.conversation_id,
            "metadata": dict(record.metadata),
            "usage": None if record.usage is None else dict(record.usage),
            "body": dict(record.body),
        }
    )


def load_response(data: bytes | str) -> StoredResponse:
    d = orjson.loads(data)
    return StoredResponse(
        id=d["id"],
        tenant=d["tenant"],
        created_at=d["created_at"],
        status=d["status"],
        model=d["model"],
        input_items=tuple(d["input_items"]),
        output_items=tuple(d["output_items"]),
        previous_response_id=d["previous_response_id"],
        conversation_id=d["conversation_id"],
        metadata=d["metadata"],
        usage=d["usage"],
        body=d["body"],
    )


def dump_conversation(conversation: Conversation) -> bytes:
    return dump(
        {
            "id": conversation.id,
            "tenant": conversation.tenant,
            "created_at": conversation.created_at,
            "metadata": dict(conversation.metadata),
        }
    )


def load_conversation(data: bytes | str) -> Conversation:
    d = orjson.loads(data)
    return Conversation(
        id=d["id"], tenant=d["tenant"], created_at=d["created_at"], metadata=d["metadata"]
    )


def load_item(data: bytes | str) -> Item:
    item: Item = orjson.loads(data)
    return item
