"""A TCP proxy in front of a real database, for outage tests: `cut()` closes every
connection through it and refuses new ones, `restore()` lets them in again."""
from __future__ import annotations

import socket
import threading


class OutageProxy:
    def __init__(self, target_host: str, target_port: int):
        self._target = (target_host, target_port)
        self._lock = threading.Lock()
        self._connections: list[socket.socket] = []
        self._up = threading.Event()
        self._up.set()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        self._up.clear()
        with self._lock:
            for connection in self._connections:
                _close(connection)
            self._connections.clear()

    def restore(self) -> None:
        self._up.set()

    def close(self) -> None:
        self.cut()
        _close(self._listener)

    def _accept(self) -> None:
        while True:
            try:
                client, _address = self._listener.accept()
            except OSError:
                return
            if not self._up.is_set():
                _close(client)  # the database "is down": the connection is dropped at once
                continue
            try:
                server = socket.create_connection(self._target, timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._connections += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        _close(source)
        _close(sink)


def _close(connection: socket.socket) -> None:
    try:
        connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    connection.close()
