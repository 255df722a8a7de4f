"""benchmarks/chaos/eventarc.py plays Eventarc in front of served instances: an event taken at
once, delivered to a live instance, delivered again after a 5xx, a reset or a timeout, up to
the limit, then dead-lettered; a refused connection is no delivery (another instance takes it)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib import request

import pytest

from harness.builders import REPO
from harness.firestore_emulator import free_port

sys.path.insert(0, str(REPO / "benchmarks"))

from chaos.eventarc import RESET, Eventarc, Instance, Service

TRIGGER = "chart-worker"


class FakeInstance:
    """An instance answering each POST with the next scripted status ("reset": it dies)."""

    def __init__(self, answers: list[int | str]) -> None:
        self.answers = answers
        self.received: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.received.append(self.headers.get("ce-id", ""))
                answer = owner.answers.pop(0) if owner.answers else 200
                if answer == "reset":
                    self.connection.close()
                    return
                self.send_response(int(answer))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def front_end() -> Iterator[Callable[..., tuple[Eventarc, int]]]:
    started: list[Eventarc] = []

    def start(*instances: Instance, concurrency: int = 1) -> tuple[Eventarc, int]:
        service = Service("worker", list(instances), concurrency, timeout=5.0)
        eventarc = Eventarc({TRIGGER: service}, max_attempts=3, backoff=(0.05, 0.1))
        port = free_port()
        started.append(eventarc.start(port))
        return eventarc, port

    yield start
    for eventarc in started:
        eventarc.stop()


def send(port: int, event_id: str, trigger: str = TRIGGER) -> int:
    post = request.Request(
        f"http://127.0.0.1:{port}/functions/projects/p/triggers/{trigger}",
        data=b"event",
        headers={"ce-id": event_id, "ce-subject": "documents/flow_runs/run_1"},
        method="POST",
    )
    try:
        with request.urlopen(post, timeout=10) as reply:
            return int(reply.status)
    except request.HTTPError as error:
        return int(error.code)


def settled(eventarc: Eventarc, count: int) -> None:
    """Until every delivery has its outcome, which the stand-in reaches on its own clock: a busy
    machine stretches the wait, and only pytest-timeout (pyproject) ends one that hangs."""
    while [d.outcome for d in eventarc.deliveries].count("pending") or len(eventarc.deliveries) < count:
        time.sleep(0.02)


def test_an_event_is_delivered_again_after_a_500_and_a_reset_until_acknowledged(front_end: Any) -> None:
    instance = FakeInstance([500, "reset", 200])
    eventarc, port = front_end(Instance("worker-0", instance.port))
    assert send(port, "e1") == 200
    settled(eventarc, 1)
    [delivery] = eventarc.deliveries
    assert (delivery.outcome, delivery.run_id) == ("acked", "run_1")
    assert [(a.status, a.failure) for a in delivery.attempts] == [(500, None), (None, RESET), (200, None)]
    assert eventarc.summary()[TRIGGER] == {"events": 1, "acked": 1, "attempts": 3, "5xx": 1, RESET: 1}
    instance.stop()


def test_an_event_failing_every_attempt_is_dead_lettered(front_end: Any) -> None:
    instance = FakeInstance([500, 503, 500, 200])
    eventarc, port = front_end(Instance("worker-0", instance.port))
    send(port, "e1")
    settled(eventarc, 1)
    assert [d.outcome for d in eventarc.dead_lettered()] == ["dead-lettered"]
    assert instance.received == ["e1"] * 3  # the limit; the fourth answer was never asked for
    instance.stop()


def test_a_down_instance_gets_nothing_and_a_refused_connection_is_no_attempt(front_end: Any) -> None:
    live = FakeInstance([])
    gone = Instance("worker-1", free_port())  # nothing listens there
    eventarc, port = front_end(Instance("worker-0", live.port), gone)
    for number in range(6):
        send(port, f"e{number}")
    settled(eventarc, 6)
    assert sorted(live.received) == [f"e{n}" for n in range(6)]
    assert all(len(d.attempts) == 1 and d.attempts[0].instance == "worker-0" for d in eventarc.deliveries)
    eventarc.services[TRIGGER].set_up("worker-0", False)
    # the gone instance down too: up, its slots would take the event and put it back after the
    # refused connect, and a busy machine could be caught between the two (waiting() 0)
    eventarc.services[TRIGGER].set_up("worker-1", False)
    assert send(port, "late") == 200  # taken at once (queued before the answer) ...
    assert eventarc.services[TRIGGER].waiting() == 1  # ... and held: no instance is up
    eventarc.services[TRIGGER].set_up("worker-0", True)
    settled(eventarc, 7)
    assert live.received[-1] == "late"
    live.stop()


def test_an_unknown_trigger_is_not_taken(front_end: Any) -> None:
    eventarc, port = front_end(Instance("worker-0", free_port()))
    assert send(port, "e1", trigger="other") == 404
    assert eventarc.deliveries == []
