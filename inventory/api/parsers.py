"""A JSON parser that enforces the body size limit and names the body in its errors.

DRF reads request bodies from the stream, which bypasses Django's
DATA_UPLOAD_MAX_MEMORY_SIZE check; this parser applies it itself, and answers
malformed, oversized or absurdly nested bodies with a 400 {"body": [...]}.
"""

from __future__ import annotations

import json

from django.conf import settings
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import JSONParser


def body_too_large(limit: int) -> ValidationError:
    return ValidationError(
        {"body": [f"request body larger than {limit} bytes (MAC_MAX_BODY_BYTES); send less."]}
    )


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


class LimitedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH", "") if request is not None else ""
        numeric = declared.isascii() and declared.isdigit()
        if numeric and (len(declared) > len(str(limit)) or int(declared) > limit):
            raise body_too_large(limit)
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise body_too_large(limit)
        try:
            return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
        except UnicodeDecodeError:
            raise ValidationError({"body": ["request body is not UTF-8."]}) from None
        except RecursionError:
            # json's decoder recurses once per level: 5,000 nested arrays overflow it.
            raise ValidationError(
                {"body": ["request body is nested too deeply; MAC bodies are flat objects."]}
            ) from None
        except ValueError as exc:
            raise ValidationError({"body": [f"request body is not valid JSON: {exc}"]}) from None
