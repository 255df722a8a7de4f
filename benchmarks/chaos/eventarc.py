"""Eventarc's part, played in front of the served functions: the emulator sends every trigger's
events to one host (its `--functions_emulator`) and never retries a 500, so this front end
takes each event at once (as Pub/Sub does), queues it for its function, and delivers it to
a live instance with a free request slot (Cloud Run's concurrency); an answer other than 2xx,
a reset (the instance died mid-request) or a timeout is delivered again after a backoff, up
to MAX_ATTEMPTS, then dead-lettered. A refused connection (the instance is down) is no
delivery: the event goes to another instance, as Cloud Run routes.

Pub/Sub's push backoff is 10 s .. 600 s; here it is compressed to BACKOFF_SECONDS (the
schedule lives a day's bad luck in minutes). MAX_ATTEMPTS is a dead-letter policy's default.
"""

from __future__ import annotations

import heapq
import http.client
import itertools
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TRIGGER_PATH = re.compile(r"^/functions/projects/[^/]+/triggers/(?P<name>[^/?]+)$")
MAX_ATTEMPTS = 5
BACKOFF_SECONDS = (1.0, 2.0, 4.0, 8.0)
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}
RESET, TIMEOUT = "reset", "timeout"  # attempts that got no answer


@dataclass
class Attempt:
    instance: str
    started: float  # wall clock
    ended: float
    status: int | None  # the function's answer; None: no answer (failure says why)
    failure: str | None = None


@dataclass
class Delivery:
    trigger: str
    event_id: str
    run_id: str
    headers: dict[str, str] = field(repr=False)
    body: bytes = field(repr=False)
    received: float = 0.0
    attempts: list[Attempt] = field(default_factory=list)
    outcome: str = "pending"  # "acked", "dead-lettered"


@dataclass
class Instance:
    name: str
    port: int
    up: bool = True


class Service:
    """One Cloud Run service: its instances, each with `concurrency` request slots, and the
    events waiting for a slot (a heap by the moment they are due)."""

    def __init__(self, name: str, instances: list[Instance], concurrency: int, timeout: float) -> None:
        self.name = name
        self.instances = {instance.name: instance for instance in instances}
        self.concurrency = concurrency
        self.timeout = timeout
        self._due: list[tuple[float, int, Delivery]] = []
        self._order = itertools.count()
        self._changed = threading.Condition()

    def put(self, delivery: Delivery, due: float) -> None:
        with self._changed:
            heapq.heappush(self._due, (due, next(self._order), delivery))
            self._changed.notify()

    def take(self, instance: Instance, stopping: threading.Event) -> Delivery | None:
        """The next event due, for a slot of `instance` (None once stopping)."""
        with self._changed:
            while not stopping.is_set():
                now = time.monotonic()
                if instance.up and self._due and self._due[0][0] <= now:
                    return heapq.heappop(self._due)[2]
                wait = self._due[0][0] - now if self._due and instance.up else 0.25
                self._changed.wait(min(max(wait, 0.01), 0.25))
        return None

    def set_up(self, name: str, up: bool) -> None:
        with self._changed:
            self.instances[name].up = up
            self._changed.notify_all()

    def waiting(self) -> int:
        with self._changed:
            return len(self._due)


class Eventarc:
    def __init__(
        self,
        services: dict[str, Service],
        *,
        max_attempts: int = MAX_ATTEMPTS,
        backoff: tuple[float, ...] = BACKOFF_SECONDS,
    ) -> None:
        """`services`: trigger name -> the service its events go to."""
        self.services = services
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._server: ThreadingHTTPServer | None = None

    def start(self, port: int) -> Eventarc:
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _receiver(self))
        self._server.daemon_threads = True
        self._spawn(self._server.serve_forever, "eventarc-receiver")
        for service in self.services.values():
            for instance in service.instances.values():
                for slot in range(service.concurrency):
                    self._spawn(lambda s=service, i=instance: self._slot(s, i), f"{instance.name}-{slot}")
        return self

    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def receive(self, trigger: str, headers: dict[str, str], body: bytes) -> bool:
        service = self.services.get(trigger)
        if service is None:
            return False
        subject = headers.get("ce-subject", "")
        delivery = Delivery(
            trigger, headers.get("ce-id", ""), subject.rpartition("/")[2], headers, body, time.time()
        )
        with self._lock:
            self.deliveries.append(delivery)
        service.put(delivery, time.monotonic())
        return True

    def _slot(self, service: Service, instance: Instance) -> None:
        while not self._stopping.is_set():
            delivery = service.take(instance, self._stopping)
            if delivery is None:
                return
            attempt = _post(instance, delivery, service.timeout)
            if attempt is None:  # refused: the instance is down; another one takes it
                service.put(delivery, time.monotonic() + 0.2)
                continue
            delivery.attempts.append(attempt)
            if attempt.status is not None and 200 <= attempt.status < 300:
                delivery.outcome = "acked"
            elif len(delivery.attempts) >= self.max_attempts:
                delivery.outcome = "dead-lettered"
            else:
                backoff = self.backoff[min(len(delivery.attempts), len(self.backoff)) - 1]
                service.put(delivery, time.monotonic() + backoff)

    def summary(self) -> dict[str, Counter[str]]:
        """Per trigger: events, attempts, acked, dead-lettered, pending, 5xx answered, resets,
        timeouts."""
        with self._lock:
            deliveries = list(self.deliveries)
        counts: dict[str, Counter[str]] = {name: Counter() for name in self.services}
        for delivery in deliveries:
            count = counts[delivery.trigger]
            count["events"] += 1
            count[delivery.outcome] += 1
            for attempt in delivery.attempts:
                count["attempts"] += 1
                if attempt.status is not None and attempt.status >= 500:
                    count["5xx"] += 1
                if attempt.failure is not None:
                    count[attempt.failure] += 1
        return counts

    def dead_lettered(self) -> list[Delivery]:
        with self._lock:
            return [d for d in self.deliveries if d.outcome == "dead-lettered"]


def _post(instance: Instance, delivery: Delivery, timeout: float) -> Attempt | None:
    """One POST of the event to the instance; None when the connection was refused."""
    forwarded = {k: v for k, v in delivery.headers.items() if k.lower() not in _HOP_BY_HOP}
    connection = http.client.HTTPConnection("127.0.0.1", instance.port, timeout=timeout)
    started = time.time()
    try:
        connection.request("POST", "/", body=delivery.body, headers=forwarded)
        response = connection.getresponse()
        response.read()
        return Attempt(instance.name, started, time.time(), response.status)
    except ConnectionRefusedError:
        return None
    except TimeoutError:
        return Attempt(instance.name, started, time.time(), None, TIMEOUT)
    except (OSError, http.client.HTTPException):  # reset, or closed mid-answer: it died
        return Attempt(instance.name, started, time.time(), None, RESET)
    finally:
        connection.close()


def _receiver(eventarc: Eventarc) -> type[BaseHTTPRequestHandler]:
    class Receiver(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            match = TRIGGER_PATH.match(self.path)
            headers = {k.lower(): v for k, v in self.headers.items()}
            taken = match is not None and eventarc.receive(match.group("name"), headers, body)
            self.send_response(200 if taken else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Receiver
