"""A small blocking client of Alertmanager's HTTP API (v2) and its lifecycle endpoints.

Everything MAC asks of Alertmanager goes through here: its status (is it up, which
configuration did it load, since when does it run), the firing alerts, silences, a
test alert, and `POST /-/reload`. Every call has a deadline (MAC_ALERTMANAGER_TIMEOUT)
and every failure is an AlertmanagerUnavailable whose text says why in words, which
the dashboard and /health show as they are ("alerts unavailable: <why>").
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from django.conf import settings

from contract.redact import url_without_credentials


class AlertmanagerUnavailable(Exception):
    """Alertmanager did not answer, or answered with an error; str() says which."""


_JSON_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "true or false"}


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    return _JSON_KINDS.get(type(value), "a number")


@dataclass
class Alertmanager:
    url: str
    timeout: float

    @classmethod
    def from_settings(cls) -> Alertmanager:
        return cls(settings.ALERTMANAGER_URL, settings.ALERTMANAGER_TIMEOUT)

    @property
    def where(self) -> str:
        """The URL as messages show it: without the credentials it may carry."""
        return url_without_credentials(self.url)

    def _call(self, method: str, path: str, body: object = None, query: dict | None = None):
        raw = self._request(method, path, body, query)
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def _objects(self, path: str, query: dict | None = None) -> list[dict]:
        """GET `path`, which Alertmanager answers with a JSON list of objects. Anything else
        (a sign-in proxy's page answered with 200) is an AlertmanagerUnavailable that says
        what came back, so the pages say "alerts unavailable: <why>"."""
        raw = self._request("GET", path, query=query)
        try:
            answer = json.loads(raw)
        except ValueError:
            text = " ".join(raw.decode(errors="replace").split())[:100]
            what = f"text: {text}" if text else "nothing"
        else:
            if isinstance(answer, list) and all(isinstance(item, dict) for item in answer):
                return answer
            what = f"JSON that is {_json_kind(answer)}"
            if isinstance(answer, list):
                odd = next(item for item in answer if not isinstance(item, dict))
                what += f" holding {_json_kind(odd)}"
        raise AlertmanagerUnavailable(
            f"{self.where} answered GET {path} not with a list of objects but with {what}"
        )

    def _request(
        self, method: str, path: str, body: object = None, query: dict | None = None
    ) -> bytes:
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (http(s) URL from settings)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace").strip()[:300]
            raise AlertmanagerUnavailable(
                f"{self.where} answered {method} {path} with HTTP {exc.code}: {detail}"
            ) from None
        except TimeoutError:
            raise AlertmanagerUnavailable(
                f"{self.where} did not answer within {self.timeout:g} s"
            ) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            words = getattr(reason, "strerror", None) or str(reason)
            raise AlertmanagerUnavailable(f"cannot reach {self.where}: {words}") from None
        except OSError as exc:
            raise AlertmanagerUnavailable(f"cannot reach {self.where}: {exc}") from None
        except http.client.HTTPException as exc:  # not HTTP at all: an https port, another service
            raise AlertmanagerUnavailable(
                f"{self.where} does not speak HTTP ({type(exc).__name__}): is it Alertmanager, "
                "and http or https as its URL says?"
            ) from None
        return raw

    # Reads ---------------------------------------------------------------------------------
    def status(self) -> dict:
        """GET /api/v2/status: the loaded configuration (config.original) and the uptime."""
        return self._call("GET", "/api/v2/status")

    def alerts(self, *, active: bool = True, silenced: bool = False) -> list[dict]:
        """Alerts Alertmanager holds now: by default, the ones that notify (firing, not
        silenced, not inhibited)."""
        query = {"active": "true" if active else "false", "silenced": str(silenced).lower()}
        query["inhibited"] = "false"
        return self._objects("/api/v2/alerts", query=query)

    def silences(self) -> list[dict]:
        return self._objects("/api/v2/silences")

    # Writes --------------------------------------------------------------------------------
    def create_silence(self, silence: dict) -> str:
        """POST /api/v2/silences; returns the new silence's id."""
        answer = self._call("POST", "/api/v2/silences", body=silence) or {}
        return answer.get("silenceID", "")

    def expire_silence(self, silence_id: str) -> None:
        self._call("DELETE", f"/api/v2/silence/{urllib.parse.quote(silence_id)}")

    def post_alerts(self, alerts: list[dict]) -> None:
        self._call("POST", "/api/v2/alerts", body=alerts)

    def reload(self) -> None:
        """POST /-/reload: Alertmanager rereads alertmanager.yml (an error names the line)."""
        self._call("POST", "/-/reload")


# A node id as a `node` label carries it: ASCII digits ("²".isdigit() holds and int("٣")
# is 3), no more than a database id has (int() refuses past 4,300 digits).
_NODE_ID = re.compile(r"[0-9]{1,18}")


def node_of_label(label: str) -> int | None:
    """The id of the node a `node` label names; None for one that names none of ours."""
    return int(label) if _NODE_ID.fullmatch(label) else None
